"""IRCv3 on the IRC front end, line by line (sans-IO): capability negotiation, SASL PLAIN, server-time,
message-tags (msgid and the rcm.example marks), echo-message, batch for the history replayed on join, tags
from clients, and the marks every client reads (own lines never late, out-of-time-order lines)."""
from __future__ import annotations

import base64
from typing import Any

from chat_server.irc import IrcSession
from chat_server.irc_state import Close, Request, Send

MEMBERS = {"alice", "bob", "carol", "dave"}
BASE = {"type": "message", "room": "ops", "origin": "C", "user": "dave", "sent_at": 1000.5, "order": [5, "C"],
        "precedence": "routine"}


def lines(actions: list[Any]) -> list[str]:
    return [line for a in actions if isinstance(a, Send) for line in a.data.decode().split("\r\n") if line]


def requests(actions: list[Any]) -> list[dict[str, Any]]:
    return [a.frame for a in actions if isinstance(a, Request)]


def session() -> IrcSession:
    return IrcSession(server_name="A.irc.t", site="A", network="t", members_of=lambda room: MEMBERS)


WELCOME = {"type": "welcome", "site": "A", "user": "alice", "sites": {"A": "connected"}, "rooms": [],
           "presence": {"A": ["alice", "carol"], "B": ["bob"], "C": ["dave"]}}


def joined(caps: str) -> IrcSession:
    """alice at A with ``caps`` negotiated, in #ops."""
    s = session()
    s.receive(b"CAP LS 302", 0)
    if caps:
        s.receive(f"CAP REQ :{caps}".encode(), 0)
    for line in (b"PASS secret", b"NICK alice", b"USER alice 0 * :A", b"CAP END"):
        s.receive(line, 0)
    s.on_frame(WELCOME, 0)
    s.on_frame({"type": "joined", "room": "ops", "history": []}, 0)
    return s


def test_cap_ls_offers_the_ircv3_capabilities_and_req_is_all_or_nothing() -> None:
    s = session()
    assert lines(s.receive(b"CAP LS 302", 0)) == [
        ":A.irc.t CAP * LS :batch draft/chathistory echo-message message-tags sasl=PLAIN server-time"]
    assert lines(session().receive(b"CAP LS", 0)) == [
        ":A.irc.t CAP * LS :batch draft/chathistory echo-message message-tags sasl server-time"]
    assert lines(s.receive(b"CAP REQ :server-time message-tags", 0)) == [
        ":A.irc.t CAP * ACK :server-time message-tags"]
    assert lines(s.receive(b"CAP REQ :echo-message away-notify", 0)) == [
        ":A.irc.t CAP * NAK :echo-message away-notify"]             # one unknown: none of them
    assert lines(s.receive(b"CAP REQ :-message-tags", 0)) == [":A.irc.t CAP * ACK -message-tags"]
    assert lines(s.receive(b"CAP LIST", 0)) == [":A.irc.t CAP * LIST server-time"]
    assert s.caps == {"server-time"}


def test_registration_waits_for_cap_end() -> None:
    s = session()
    acts = [a for line in (b"CAP LS 302", b"PASS secret", b"NICK alice", b"USER alice 0 * :A")
            for a in s.receive(line, 0)]
    assert not requests(acts)                                          # negotiating: no log-in yet
    [hello] = requests(s.receive(b"CAP END", 0))
    assert (hello["type"], hello["user"], hello["password"]) == ("hello", "alice", "secret")


def plain(account: str, password: str, authzid: str = "") -> bytes:
    return base64.b64encode(f"{authzid}\0{account}\0{password}".encode())


def test_sasl_plain_logs_in_and_the_welcome_waits_for_cap_end() -> None:
    s = session()
    for line in (b"CAP LS 302", b"CAP REQ :sasl server-time", b"NICK al", b"USER al 0 * :A"):
        s.receive(line, 0)
    assert lines(s.receive(b"AUTHENTICATE PLAIN", 0)) == ["AUTHENTICATE +"]
    [hello] = requests(s.receive(b"AUTHENTICATE " + plain("alice", "correct horse"), 0))
    assert (hello["user"], hello["password"]) == ("alice", "correct horse")
    out = lines(s.on_frame(dict(WELCOME, id=hello["id"]), 0))
    assert out == [":A.irc.t 900 al alice!alice@A alice :You are now logged in as alice",
                   ":A.irc.t 903 al :SASL authentication successful"]
    assert not s.registered                                             # 001 waits for CAP END
    welcome = lines(s.receive(b"CAP END", 0))
    assert welcome[0] == ":A.irc.t 001 alice :Welcome to the t RCM chat, alice!alice@A"     # the account's nick
    assert s.registered and s.nick == "alice"


def test_a_refused_sasl_log_in_gets_904_and_the_client_may_try_again() -> None:
    s = session()
    assert lines(s.receive(b"AUTHENTICATE PLAIN", 0)) == [
        ":A.irc.t 904 * :SASL authentication failed: request the sasl capability first"]
    for line in (b"CAP LS 302", b"CAP REQ :sasl", b"NICK alice", b"USER alice 0 * :A"):
        s.receive(line, 0)
    assert lines(s.receive(b"AUTHENTICATE SCRAM-SHA-256", 0)) == [
        ":A.irc.t 908 alice PLAIN :are available SASL mechanisms", ":A.irc.t 904 alice :SASL authentication failed"]
    s.receive(b"AUTHENTICATE PLAIN", 0)
    assert lines(s.receive(b"AUTHENTICATE *", 0)) == [":A.irc.t 906 alice :SASL authentication aborted"]
    s.receive(b"AUTHENTICATE PLAIN", 0)
    assert "904" in lines(s.receive(b"AUTHENTICATE " + plain("bob", "x", authzid="alice"), 0))[0]
    s.receive(b"AUTHENTICATE PLAIN", 0)
    [hello] = requests(s.receive(b"AUTHENTICATE " + plain("alice", "wrong"), 0))
    out = s.on_frame({"type": "error", "code": "auth_failed", "message": "bad password", "in_reply_to": hello["id"]}, 0)
    assert lines(out) == [":A.irc.t 904 alice :SASL authentication failed"]
    assert not s.closed and not any(isinstance(a, Close) for a in out)
    s.receive(b"AUTHENTICATE PLAIN", 0)
    [again] = requests(s.receive(b"AUTHENTICATE " + plain("alice", "right"), 0))
    s.on_frame(dict(WELCOME, id=again["id"]), 0)
    assert lines(s.receive(b"CAP END", 0))[0].startswith(":A.irc.t 001 alice ")


def test_server_time_gives_each_line_its_original_time() -> None:
    s = joined("server-time")
    assert lines(s.on_frame(dict(BASE, msg_id="C:1", text="plain"), 1003.0)) == [
        "@time=1970-01-01T00:16:40.500Z :dave!dave@C PRIVMSG #ops plain"]


def test_message_tags_carry_the_msgid_and_the_marks() -> None:
    s = joined("message-tags")
    s.on_frame(dict(BASE, msg_id="C:1", text="grid 123 confirmed?"), 1000.0)
    out = lines(s.on_frame(dict(BASE, msg_id="C:2", text="yes", precedence="flash", late=True, repaired=True,
                                reply_to="C:1"), 1300.5))
    assert out == ["@msgid=C:2;rcm.example/precedence=flash;rcm.example/repaired;rcm.example/late;+reply=C:1 "
                   ":dave!dave@C NOTICE "
                   "#ops :[FLASH C:2] [REPAIRED +300s] [re dave: grid 123 confirmed?] yes"]
    assert lines(s.on_frame(dict(BASE, msg_id="C:3", text="soon", precedence="priority", late=True), 1300.5)) == [
        "@msgid=C:3;rcm.example/precedence=priority;rcm.example/late :dave!dave@C NOTICE #ops :[LATE +300s] soon"]


def test_echo_message_returns_a_users_own_lines_never_marked_late() -> None:
    s = joined("echo-message message-tags")
    [say] = requests(s.receive(b"PRIVMSG #ops :mine", 1.0))
    s.on_frame({"type": "ack", "client_id": say["client_id"], "msg_id": "A:7"}, 1.0)
    own = dict(BASE, origin="A", user="alice", msg_id="A:7", text="mine", late=True)
    assert lines(s.on_frame(own, 1000.5)) == ["@msgid=A:7 :alice!alice@A PRIVMSG #ops mine"]
    # Without echo-message the line is not sent back (the client showed it when it was typed).
    s = joined("")
    [say] = requests(s.receive(b"PRIVMSG #ops :mine", 1.0))
    s.on_frame({"type": "ack", "client_id": say["client_id"], "msg_id": "A:7"}, 1.0)
    assert lines(s.on_frame(own, 1000.5)) == []


def test_a_users_own_line_from_another_client_is_never_marked_late() -> None:
    s = joined("")
    own = dict(BASE, origin="A", user="alice", msg_id="A:8", text="from the web", precedence="flash", late=True)
    assert lines(s.on_frame(own, 1001.0)) == [":alice!alice@A NOTICE #ops :[FLASH A:8] from the web"]
    s.on_frame({"type": "joined", "room": "intel", "history": [dict(own, room="intel", precedence="routine")]}, 0)
    assert lines(s.on_frame({"type": "joined", "room": "log", "history": [dict(own, room="log")]}, 0))[-1] == \
        ":A.irc.t NOTICE #log :[history 00:16:40Z] <alice@A> [FLASH A:8] from the web"


def test_join_history_comes_as_a_chathistory_batch_at_original_times_with_its_marks() -> None:
    s = joined("batch server-time message-tags")
    history = [dict(BASE, room="intel", msg_id="C:1", text="first", n=1),
               dict(BASE, room="intel", msg_id="C:2", text="second", n=2, sent_at=1001.0, precedence="immediate",
                    late=True, acknowledgements=[])]
    out = lines(s.on_frame({"type": "joined", "room": "intel", "history": history}, 2000.0))
    [start] = [i for i, line in enumerate(out) if line.startswith(":A.irc.t BATCH +")]
    ref = out[start].split()[2][1:]
    assert out[start:] == [
        f":A.irc.t BATCH +{ref} chathistory #intel",
        f"@batch={ref};time=1970-01-01T00:16:40.500Z;msgid=C:1 :dave!dave@C PRIVMSG #intel first",
        f"@batch={ref};time=1970-01-01T00:16:41.000Z;msgid=C:2;rcm.example/precedence=immediate;rcm.example/late "
        ":dave!dave@C NOTICE #intel :[IMMEDIATE C:2] [LATE] second",
        f":A.irc.t BATCH -{ref}"]


def test_a_plain_clients_history_keeps_its_marks() -> None:
    s = joined("")
    history = [dict(BASE, room="intel", msg_id="C:1", text="first", n=1),
               dict(BASE, room="intel", msg_id="C:2", text="fixed", n=2, late=True, repaired=True, reply_to="C:1")]
    out = lines(s.on_frame({"type": "joined", "room": "intel", "history": history}, 2000.0))
    assert out[-2:] == [":A.irc.t NOTICE #intel :[history 00:16:40Z] <dave@C> first",
                        ":A.irc.t NOTICE #intel :[history 00:16:40Z] <dave@C> [REPAIRED] [re dave: first] fixed"]


def test_a_client_with_draft_chathistory_asks_for_history_itself() -> None:
    s = joined("draft/chathistory batch")
    out = lines(s.on_frame({"type": "joined", "room": "intel", "history": [dict(BASE, room="intel", msg_id="C:1",
                                                                                text="first", n=1)]}, 0))
    assert out[0] == ":alice!alice@A JOIN #intel" and not [line for line in out if "first" in line]


def test_a_rejoin_replays_only_the_lines_the_client_was_not_shown() -> None:
    s = joined("")
    first = [dict(BASE, room="intel", msg_id=f"C:{i}", text=f"line {i}", n=i) for i in (1, 2, 3)]
    assert len([line for line in lines(s.on_frame({"type": "joined", "room": "intel", "history": first}, 0))
                if "line " in line]) == 3
    s.on_frame(dict(BASE, msg_id="C:4", text="elsewhere", n=4), 0)            # #ops: n grows across rooms
    s.on_frame({"type": "left", "room": "intel"}, 0)
    again = first + [dict(BASE, room="intel", msg_id="C:5", text="line 5", n=5)]
    out = lines(s.on_frame({"type": "joined", "room": "intel", "history": again}, 0))
    assert [line.rsplit("> ", 1)[1] for line in out if "[history" in line] == ["line 5"]
    # A new connection of the same client (the front end hands it the marks it kept): only what is new.
    t = session()
    t.shown = s.shown
    for line in (b"PASS secret", b"NICK alice", b"USER alice 0 * :A"):
        t.receive(line, 0)
    t.on_frame(WELCOME, 0)
    again.append(dict(BASE, room="intel", msg_id="C:6", text="line 6", n=6))
    out = lines(t.on_frame({"type": "joined", "room": "intel", "history": again}, 0))
    assert [line.rsplit("> ", 1)[1] for line in out if "[history" in line] == ["line 6"]


def test_client_tags_are_read_a_reply_tag_becomes_reply_to_and_tagmsg_is_taken() -> None:
    s = joined("message-tags")
    [say] = requests(s.receive(b"@+reply=B:7;+typing=active PRIVMSG #ops :yes, confirmed", 1.0))
    assert (say["text"], say["reply_to"]) == ("yes, confirmed", "B:7")
    [say] = requests(s.receive(b"@+draft/reply=B:8 PRIVMSG #ops :older clients' spelling", 1.0))
    assert say["reply_to"] == "B:8"
    assert s.receive(b"@+typing=active TAGMSG #ops", 1.0) == []            # not an unknown command (421)
    # Tags have their own room: a line of 3,000 bytes of tags and a 4,000-byte text is taken; more is 417.
    big = b"@+x=" + b"t" * 3000 + b" PRIVMSG #ops :" + b"y" * 4000
    assert requests(s.receive(big, 1.0))
    assert " 417 " in lines(s.receive(b"@+x=" + b"t" * 5000 + b" PRIVMSG #ops :y", 1.0))[0]


def test_a_line_sent_before_the_line_above_it_is_marked_out_of_time_order() -> None:
    s = joined("")
    s.on_frame(dict(BASE, msg_id="C:1", text="carol's later line", sent_at=1062.9), 1063.0)
    assert lines(s.on_frame(dict(BASE, msg_id="B:1", origin="B", user="bob", text="sent earlier",
                                 sent_at=1000.0, order=[6, "B"]), 1063.0)) == [
        ":bob!bob@B PRIVMSG #ops :[ORDER -62s] sent earlier"]
    assert lines(s.on_frame(dict(BASE, msg_id="C:2", text="in time", sent_at=1064.0), 1064.0)) == [
        ":dave!dave@C PRIVMSG #ops :in time"]


def test_a_capability_dropped_mid_session_changes_how_the_next_lines_are_written() -> None:
    s = joined("server-time message-tags")
    [first] = lines(s.on_frame({**BASE, "msg_id": "C:1", "text": "one", "n": 1}, 1001.0))
    s.receive(b"CAP REQ :-message-tags", 1001.0)
    [second] = lines(s.on_frame({**BASE, "msg_id": "C:2", "text": "two", "n": 2}, 1001.0))
    assert first.startswith("@") and "msgid=C:1" in first
    assert second.startswith("@time=") and "msgid=" not in second and second.endswith("PRIVMSG #ops two")
