"""The IRC front end's channels and who is in them: private rooms are invite-only, LIST pages through every
room and counts its users, NAMES lists the members online, a line to a user says there are rooms, presence
frames JOIN and PART members (worked out once for every session), nick lists and presence shared by the
sessions, and the welcome's snapshot of who is online."""
from __future__ import annotations

import asyncio

import pytest
from irc_testing import _joined_session, _lines
from testkit import wait_until

from chat_server.irc import IrcSession
from chat_server.irc_state import NickLists, Presence, Request

pytestmark = pytest.mark.timeout(60)


def test_a_line_for_a_user_says_there_are_rooms_not_private_messages() -> None:
    s = _joined_session()
    [online] = _lines(s.receive(b"PRIVMSG bob :are you there?", 1.0))
    assert online.startswith(":A.irc.t 531 alice bob :Cannot send to user: bob is online at B, but this suite "
                             "has rooms, not private messages: write in a channel you share with bob, or create a "
                             "private room with bob in the web UI or the TUI")
    [nobody] = _lines(s.receive(b"PRIVMSG zed :hello", 1.0))
    assert nobody.startswith(":A.irc.t 401 alice zed :No such nick/channel: zed is not online at any site")
    assert s.receive(b"NOTICE bob :quiet", 1.0) == []                      # never a reply to a NOTICE


def test_links_lists_every_site_and_how_this_one_reaches_it() -> None:
    s = _joined_session()
    s.on_frame({"type": "site_status", "site": "B", "status": "connected"}, 1.0)
    s.on_frame({"type": "site_status", "site": "C", "status": "connected", "via": "B"}, 1.0)
    assert _lines(s.receive(b"LINKS", 1.0)) == [
        ":A.irc.t 364 alice A.irc.t A.irc.t :0 site A, this one",
        ":A.irc.t 364 alice B.irc.t A.irc.t :1 site B, connected",
        ":A.irc.t 364 alice C.irc.t A.irc.t :1 site C, connected via B",
        ":A.irc.t 365 alice * :End of /LINKS list"]
    s.on_frame({"type": "site_status", "site": "C", "status": "suspected"}, 2.0)
    assert ":A.irc.t 364 alice C.irc.t A.irc.t :1 site C, suspected" in _lines(s.receive(b"LINKS", 2.0))


def test_a_site_whose_chat_server_is_gone_is_said_once_shown_in_links_and_said_back() -> None:
    s = _joined_session()
    [down] = _lines(s.on_frame({"type": "site_status", "site": "B", "status": "connected", "chat_down": True}, 1.0))
    assert down == (":A.irc.t NOTICE #ops :*** site B is connected; its chat server is down (its users are offline; "
                    "what is said reaches them when it is back)")
    links = _lines(s.receive(b"LINKS", 1.0))
    assert ":A.irc.t 364 alice B.irc.t A.irc.t :1 site B, connected, chat server down" in links
    [again] = _lines(s.on_frame({"type": "site_status", "site": "B", "status": "suspected", "chat_down": True}, 2.0))
    assert again == ":A.irc.t NOTICE #ops :*** site B is suspected"
    [back] = _lines(s.on_frame({"type": "site_status", "site": "B", "status": "connected"}, 3.0))
    assert back == ":A.irc.t NOTICE #ops :*** site B is connected; its chat server is back"
    assert ":A.irc.t 364 alice B.irc.t A.irc.t :1 site B, connected" in _lines(s.receive(b"LINKS", 3.0))


def test_whois_of_an_offline_nick_and_the_whowas_irssi_sends_after_it() -> None:
    s = _joined_session()
    assert _lines(s.receive(b"WHOIS zed", 1.0)) == [
        ":A.irc.t 401 alice zed :No such nick: not online at any site this site can see",
        ":A.irc.t 318 alice zed :End of /WHOIS list"]
    assert _lines(s.receive(b"WHOWAS zed", 1.0)) == [
        ":A.irc.t 406 alice zed :There was no such nickname: this server keeps no history of nicks",
        ":A.irc.t 369 alice zed :End of WHOWAS"]
    assert _lines(s.receive(b"WHOWAS", 1.0))[0].startswith(":A.irc.t 461 alice WHOWAS ")


def test_whois_names_the_channels_we_share_and_the_sites_server_and_who_names_each_users_server() -> None:
    s = _joined_session()
    s.on_frame({"type": "site_status", "site": "B", "status": "connected", "via": "C"}, 1.0)
    assert _lines(s.receive(b"WHOIS bob", 1.0)) == [
        ":A.irc.t 311 alice bob bob B * :bob at B",
        ":A.irc.t 319 alice bob #ops",
        ":A.irc.t 312 alice bob B.irc.t :site B, connected via C",
        ":A.irc.t 318 alice bob :End of /WHOIS list"]
    assert ":A.irc.t 312 alice alice A.irc.t :site A, this one" in _lines(s.receive(b"WHOIS alice", 1.0))
    # A channel the asker is not in is never named (a private room stays unnamed).
    s.on_frame({"type": "joined", "room": "cell", "private": True, "members": ["alice", "bob"], "history": []}, 1.0)
    assert ":A.irc.t 319 alice bob :#cell #ops" in _lines(s.receive(b"WHOIS bob", 1.0))
    assert ":A.irc.t 319 alice dave #ops" in _lines(s.receive(b"WHOIS dave", 1.0))
    who = _joined_session()
    assert ":A.irc.t 352 alice #ops bob B B.irc.t bob H :0 bob@B" in _lines(who.receive(b"WHO #ops", 1.0))


def test_what_seasoned_users_type_is_answered_not_unknown() -> None:
    """VERSION, LUSERS, STATS, TIME, INFO, ADMIN, HELP, USERHOST, MOTD, TRACE, SERVLIST, SQUERY, USERS and
    SUMMON are answered, operators' commands refused as an ircd refuses a user (481, OPER 491); INVITE and KICK
    say that a room's definition sets its members."""
    s = _joined_session()
    assert _lines(s.receive(b"VERSION", 1.0)) == [":A.irc.t 351 alice rcm-chat-1. A.irc.t :the chat server of site A"]
    assert _lines(s.receive(b"LUSERS", 1.0)) == [":A.irc.t 251 alice :There are 4 users and 0 invisible on 3 servers",
                                                 ":A.irc.t 255 alice :I have 2 clients and 2 servers"]
    assert _lines(s.receive(b"STATS u", 1.0)) == [":A.irc.t 219 alice u :End of /STATS report"]
    assert _lines(s.receive(b"TIME", 1.0, 1_795_000_000.0)) == [
        ":A.irc.t 391 alice A.irc.t :Wednesday November 18 2026 -- 11:06:40 +00:00"]
    assert _lines(s.receive(b"TIME", 1.0)) == [":A.irc.t 391 alice A.irc.t :the time is not known here"]
    [info, *_, end] = _lines(s.receive(b"INFO", 1.0))
    assert info == ":A.irc.t 371 alice :rcm-chat-1: the chat server of site A in mission t"
    assert end == ":A.irc.t 374 alice :End of /INFO list"
    assert _lines(s.receive(b"ADMIN", 1.0)) == [
        ":A.irc.t 423 alice A.irc.t :No administrative info available: ask your mission's operators"]
    help_lines = _lines(s.receive(b"HELP", 1.0))
    assert help_lines[0].startswith(":A.irc.t 704 alice * :You are on the chat server of site A in mission t")
    assert any("!flash TEXT" in h for h in help_lines) and help_lines[-1] == ":A.irc.t 706 alice * :End of /HELP"
    assert all(h.split(" ")[1] in ("704", "705", "706") for h in help_lines)
    assert _lines(s.receive(b"OPER root secret", 1.0))[0].startswith(":A.irc.t 491 alice :No O-lines")
    for cmd in (b"KILL bob :bye", b"DIE", b"REHASH", b"WALLOPS :hi"):
        assert _lines(s.receive(cmd, 1.0)) == [":A.irc.t 481 alice :Permission Denied- You're not an IRC operator"]
    [invite] = _lines(s.receive(b"INVITE bob #ops", 1.0))
    assert invite.startswith(":A.irc.t 482 alice #ops :A private room's members are set by its definition")
    [kick] = _lines(s.receive(b"KICK #ops bob :bye", 1.0))
    assert kick.startswith(":A.irc.t 482 alice #ops :Nobody is kicked")
    assert _lines(s.receive(b"KICK #ops", 1.0))[0].startswith(":A.irc.t 461 alice KICK ")
    # Where a user is online (this site if here too), as ISON says who is.
    assert _lines(s.receive(b"USERHOST bob carol alice zed", 1.0)) == [
        ":A.irc.t 302 alice :bob=+bob@B carol=+carol@A alice=+alice@A"]
    motd = _lines(s.receive(b"MOTD", 1.0))                     # the welcome's, not "MOTD File is missing"
    assert [m.split(" ")[1] for m in motd][:2] == ["375", "372"]
    assert motd[-1].endswith(" 376 alice :End of /MOTD command")
    assert "You are alice at site A. Sites: A connected" in motd[1]
    answers = [_lines(s.receive(cmd, 1.0))[0].split(" ")[1]
               for cmd in (b"TRACE", b"SERVLIST", b"SQUERY alis :list", b"USERS", b"SUMMON bob")]
    assert answers == ["262", "235", "408", "446", "445"]


def test_list_counts_the_users_in_each_channel_and_names_lists_its_members_online() -> None:
    s = IrcSession(server_name="A.irc.t", site="A", network="t",
                   members_of=lambda room: {"ops": {"alice", "bob", "dave", "erin"}}.get(room, set()))
    for line in (b"PASS secret", b"NICK alice", b"USER alice 0 * :A"):
        s.receive(line, 0)
    s.on_frame({"type": "welcome", "site": "A", "user": "alice", "sites": {}, "rooms": [],
                "presence": {"A": ["alice", "carol"], "B": ["bob"], "C": ["dave"]}}, 0)
    joined = _lines(s.on_frame({"type": "joined", "room": "ops", "history": []}, 0))
    assert ":A.irc.t 353 alice = #ops :alice bob dave" in joined          # not carol (not a member), not erin
    [req] = [a.frame for a in s.receive(b"LIST", 0) if isinstance(a, Request)]
    out = _lines(s.on_frame({"type": "rooms", "id": req["id"], "more": False, "rooms": [
        {"room": "ops", "private": False, "members": 4, "online": 3, "joined": True},
        {"room": "cell", "private": True, "members": 1, "online": 1, "joined": False}]}, 0))
    assert out[1:3] == [":A.irc.t 322 alice #ops 3 :4 members, 3 online, joined",
                        ":A.irc.t 322 alice #cell 1 :1 member, 1 online, private room (+i)"]
    # erin comes online at C: she joins the channel; carol's presence changes nothing in it.
    assert _lines(s.on_frame({"type": "presence", "site": "C", "online": ["erin"], "offline": []}, 0)) == [
        ":erin!erin@C JOIN #ops"]
    assert _lines(s.on_frame({"type": "presence", "site": "A", "online": [], "offline": ["carol"]}, 0)) == []
    # A speaker the channel did not list (a roster not here yet) is in it: a JOIN before the line.
    assert _lines(s.on_frame({"type": "message", "room": "ops", "origin": "B", "user": "frank", "msg_id": "B:1",
                              "text": "hi", "sent_at": 1.0, "order": [1, "B"]}, 1.0)) == [
        ":frank!frank@B JOIN #ops", ":frank!frank@B PRIVMSG #ops hi"]
    assert "alice bob dave erin frank" in _lines(s.receive(b"NAMES #ops", 0))[0]


def test_nick_lists_make_each_change_once_and_forget_beyond_their_bound() -> None:
    lists = NickLists(keep=4)
    base = lists.union(frozenset(), {"alice", "bob"})
    assert base == {"alice", "bob"} and lists.union(frozenset(), ["bob", "alice"]) is base   # made apart, one
    plus = lists.add(base, "carol")
    assert lists.add(base, "carol") is plus and lists.add(plus, "carol") is plus
    assert lists.discard(plus, "carol") == base and lists.discard(base, "zed") is base
    for i in range(10):                                   # more changes than it keeps: still right, not shared
        lists.add(base, f"u{i}")
    again = lists.add(base, "carol")
    assert again == plus and len(lists._changes) <= 4 and len(lists._lists) <= 4


def test_nick_lists_hold_no_list_that_no_session_holds_and_share_every_list_that_one_does() -> None:
    lists = NickLists(keep=4)
    held = [lists.union(frozenset(), {f"u{i}", "x"}) for i in range(20)]   # more lists than ``keep``
    assert all(lists.one(frozenset({f"u{i}", "x"})) is held[i] for i in range(20))   # each found, made apart
    plus = lists.add(held[0], "y")
    del held, plus                                   # no session holds them any more: nothing keeps them
    assert lists._lists == {} and all(old() is None and new() is None for old, new in lists._changes.values())


def test_a_member_who_goes_offline_everywhere_parts_and_sessions_share_one_presence_table() -> None:
    presence, nick_lists = Presence(), NickLists()
    sessions = []
    for nick in ("alice", "carol"):
        s = IrcSession(server_name="A.irc.t", site="A", network="t", presence=presence, nick_lists=nick_lists,
                       members_of=lambda room: {"ops": {"alice", "bob", "carol"}}.get(room, set()))
        for line in (b"PASS secret", f"NICK {nick}".encode(), f"USER {nick} 0 * :A".encode()):
            s.receive(line, 0)
        s.on_frame({"type": "welcome", "site": "A", "user": nick, "sites": {}, "rooms": [],
                    "presence": {"A": ["alice", "carol"], "B": ["bob"], "C": ["bob"]}}, 0)
        s.on_frame({"type": "joined", "room": "ops", "history": []}, 0)
        sessions.append(s)
    # bob leaves C but is still at B: nothing; then B too: he parts, for every session (one shared frame).
    gone_c = {"type": "presence", "site": "C", "online": [], "offline": ["bob"]}
    assert [_lines(s.on_frame(gone_c, 0)) for s in sessions] == [[], []]
    gone_b = {"type": "presence", "site": "B", "online": [], "offline": ["bob"]}
    assert [_lines(s.on_frame(gone_b, 0)) for s in sessions] == [[":bob!bob@B PART #ops offline"]] * 2
    assert presence.sites == {"A": {"alice", "carol"}, "B": set(), "C": set()}
    assert "bob" not in _lines(sessions[0].receive(b"NAMES #ops", 0))[0]
    back = {"type": "presence", "site": "C", "online": ["bob"], "offline": []}
    assert [_lines(s.on_frame(back, 0)) for s in sessions] == [[":bob!bob@C JOIN #ops"]] * 2
    assert _lines(sessions[1].receive(b"WHOIS bob", 0))[0] == ":A.irc.t 311 carol bob bob C * :bob at C"
    # Both sessions told their clients the same: one nick list, not a copy each.
    a, c = (s._channels["ops"].nicks for s in sessions)
    assert a == {"alice", "bob", "carol"} and a is c
    dave = {"type": "message", "room": "ops", "origin": "B", "user": "dave", "msg_id": "B:1", "text": "hi",
            "sent_at": 1.0, "order": [1, "B"]}
    assert [_lines(s.on_frame(dave, 1.0))[0] for s in sessions] == [":dave!dave@B JOIN #ops"] * 2
    a, c = (s._channels["ops"].nicks for s in sessions)
    assert "dave" in a and a is c


def test_a_presence_frame_is_worked_out_once_for_every_session_and_joins_many_in_one_write() -> None:
    """A login storm's presence frame names many users and reaches every session: the room's members are asked
    for once per frame (not once per user per session), every session writes its JOINs in one Send, and sessions
    that listed the same nicks share the new list."""
    presence, nick_lists = Presence(), NickLists()
    members = {"ops": {"alice", "carol"} | {f"u{i}" for i in range(50)}}
    asked: list[str] = []

    def members_of(room: str) -> set[str]:
        asked.append(room)
        return members.get(room, set())

    sessions = []
    for nick in ("alice", "carol"):
        s = IrcSession(server_name="A.irc.t", site="A", network="t", presence=presence, nick_lists=nick_lists,
                       members_of=members_of)
        for line in (b"PASS secret", f"NICK {nick}".encode(), f"USER {nick} 0 * :A".encode()):
            s.receive(line, 0)
        s.on_frame({"type": "welcome", "site": "A", "user": nick, "sites": {}, "rooms": [],
                    "presence": {"A": ["alice", "carol"]}}, 0)
        s.on_frame({"type": "joined", "room": "ops", "history": []}, 0)
        sessions.append(s)
    asked.clear()
    came = {"type": "presence", "site": "A", "online": [f"u{i}" for i in range(60)], "offline": []}
    outs = [s.on_frame(came, 0) for s in sessions]
    assert asked == ["ops"]                                       # once for the frame, not per user or session
    assert [len(out) for out in outs] == [1, 1]                   # one write each
    assert _lines(outs[0]) == [f":u{i}!u{i}@A JOIN #ops" for i in range(50)]      # members only, in order
    assert _lines(outs[1]) == _lines(outs[0])
    a, c = (s._channels["ops"].nicks for s in sessions)
    assert a is c and len(a) == 52
    gone = {"type": "presence", "site": "A", "online": [], "offline": ["u3", "u4", "nobody"]}
    assert [_lines(s.on_frame(gone, 0)) for s in sessions] == [[":u3!u3@A PART #ops offline",
                                                               ":u4!u4@A PART #ops offline"]] * 2
    a, c = (s._channels["ops"].nicks for s in sessions)
    assert a is c and "u3" not in a and len(a) == 50


async def test_a_private_room_is_invite_only_for_non_members(sites) -> None:
    s = await sites()
    bob = await s.ws("B", "bob")
    await bob.create("secret", ["bob"])
    await bob.wait_for(lambda f: f["type"] == "joined" and f["room"] == "secret", 10)
    await asyncio.sleep(0)
    for _ in range(50):                              # the definition reaches site A through the fake RCM
        if "secret" in s.servers["A"].private:
            break
        await asyncio.sleep(0.02)
    irc = await s.irc("alice")
    await irc.numeric("376")
    irc.send("JOIN #secret")
    assert "+i" in await irc.numeric("473")


async def test_list_shows_every_room_beyond_the_first_page(sites) -> None:
    s = await sites(chat={"rooms_page": 2})
    irc = await s.irc("alice")
    await irc.numeric("376")
    irc.send("JOIN #r1,#r2,#r3,#r4,#r5")
    await irc.expect(lambda l: l.endswith("JOIN #r5"))
    irc.send("LIST")
    await irc.numeric("321")
    await irc.numeric("323")
    listed = {line.split(" ")[3] for line in irc.lines if line.split(" ")[1] == "322"}
    assert listed >= {"#r1", "#r2", "#r3", "#r4", "#r5"}, listed


async def test_a_welcome_names_who_is_online_now_with_one_list_per_change(sites) -> None:
    """A login storm welcomes thousands between two presence ticks: each site's sorted list is made once per
    change of who is online there, and a welcome after a change names the change."""
    s = await sites()
    srv = s.servers["A"]
    await s.ws("A", "alice")
    await wait_until(lambda: "alice" in srv.core.published_online, "alice published online")
    first, again = srv.presence_snapshot(), srv.presence_snapshot()
    assert first["A"] == ["alice"] and again["A"] is first["A"]
    carol = await s.ws("A", "carol")
    await wait_until(lambda: "carol" in srv.core.published_online, "carol published online")
    now = srv.presence_snapshot()
    assert now["A"] == ["alice", "carol"] and now["A"] is not first["A"]     # made again after the change
    assert srv.presence_snapshot()["A"] is now["A"]                          # and once
    assert "alice" in carol.welcome["presence"]["A"]                         # her welcome names who was online


def test_lines_after_a_join_wait_for_its_answer_as_an_ircd_handles_them_in_order() -> None:
    """A client's MODE #ops and WHO #ops right after JOIN #ops (irssi and WeeChat send them so when they
    join) are answered after the JOIN, not with 403 before it; PING does not wait; a refused JOIN lets
    them go too."""
    from chat_server.irc_state import Send
    s = IrcSession(server_name="A.irc.t", site="A", network="t")
    for line in (b"PASS pw", b"NICK alice", b"USER alice 0 * :A"):
        s.receive(line, 0)
    s.on_frame({"type": "welcome", "site": "A", "user": "alice", "sites": {"A": "connected"}, "rooms": [],
                "presence": {"A": ["alice"]}}, 0)
    (join,) = [a.frame for a in s.receive(b"JOIN #ops", 1.0) if isinstance(a, Request)]
    assert s.receive(b"MODE #ops", 1.0) == [] and s.receive(b"WHO #ops", 1.0) == []
    assert " PONG " in _lines(s.receive(b"PING :x", 1.0))[0]            # never waits
    out = _lines(s.on_frame({"type": "joined", "room": "ops", "members": ["alice"], "history": [],
                             "id": join["id"]}, 1.0))
    codes = [line.split(" ")[1] for line in out]
    assert codes.index("JOIN") < codes.index("366") < codes.index("324") < codes.index("315"), codes
    assert "403" not in codes
    (join,) = [a.frame for a in s.receive(b"JOIN #secret", 2.0) if isinstance(a, Request)]
    assert s.receive(b"TOPIC #secret", 2.0) == []
    out = s.on_frame({"type": "error", "code": "forbidden", "message": "private room", "in_reply_to": join["id"]},
                     2.0)
    assert [line.split(" ")[1] for line in _lines(out)] == ["473", "442"]
    assert all(isinstance(a, Send) for a in out)


async def test_a_client_that_joins_and_asks_at_once_gets_its_answers_in_order(sites) -> None:
    s = await sites()
    irc = await s.irc("alice")
    await irc.numeric("376")
    irc.send(b"JOIN #ops\r\nMODE #ops\r\nWHO #ops\r\nMODE #ops b")       # as irssi sends them when it joins
    seen = [await irc.expect(lambda l: l.split(" ")[1] in ("JOIN", "366", "324", "315", "368", "403"))
            for _ in range(5)]
    assert [line.split(" ")[1] for line in seen] == ["JOIN", "366", "324", "315", "368"], seen


def test_lines_kept_while_the_login_is_checked_count_once_against_the_flood_limit() -> None:
    """A JOIN pipelined after USER waits for the login (``_early``); replayed then, it is not counted a second
    time: a client at its burst limit is not closed for Excess Flood by its own registration."""
    s = IrcSession(server_name="A.irc.t", site="A", network="t", rate_frames=1, rate_burst=5)
    for line in (b"PASS pw", b"NICK alice", b"USER alice 0 * :A", b"JOIN #ops", b"WHO #ops"):
        s.receive(line, 0)
    out = s.on_frame({"type": "welcome", "site": "A", "user": "alice", "sites": {"A": "connected"}, "rooms": [],
                      "presence": {"A": ["alice"]}}, 0)
    assert not s.closed and "Excess Flood" not in "".join(_lines(out))
    assert [a.frame["room"] for a in out if isinstance(a, Request)] == ["ops"]
