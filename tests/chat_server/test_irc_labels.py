"""The IRC front end in a labeled mission, sans-IO: each line led by its label (live, alert, replayed, tagged), the
channel's label as its topic, a user's [LABEL] prefix said at that label, labels refused above the clearance, below
the channel's floor or unknown (404, nothing sent), a reply's quote only for readers cleared for its original, and
an unlabeled mission's lines as they always were; and one labeled mission against chat servers, end to end."""
from __future__ import annotations

from typing import Any

import pytest

from chat_server.front_end_labels import NO_LABELS, LabelView, split_label
from chat_server.irc import IrcSession
from chat_server.irc_messages import Quotes
from chat_server.irc_state import Request, Send
from contracts.labels import LabelError, Scheme

SCHEME = Scheme.build(["UNCLASSIFIED", "RESTRICTED", "SECRET", "TOP SECRET"], ["GBR", "NZL", "USA"])
SECRET_GBR_USA = {"level": "SECRET", "caveats": ["GBR", "USA"]}
RESTRICTED = {"level": "RESTRICTED", "caveats": []}

pytestmark = pytest.mark.timeout(60)


def session(clearance: Any = SECRET_GBR_USA, caps: str = "", labels: LabelView | None = None,
            quotes: Quotes | None = None) -> IrcSession:
    """alice at A, cleared ``clearance``, in #ops (labeled RESTRICTED)."""
    s = IrcSession(server_name="A.irc.t", site="A", network="t", members_of=lambda room: {"alice", "bob"},
                   labels=LabelView(SCHEME) if labels is None else labels, quotes=quotes or Quotes())
    if caps:
        s.receive(b"CAP LS 302", 0)
        s.receive(f"CAP REQ :{caps}".encode(), 0)
    for line in (b"PASS secret", b"NICK alice", b"USER alice 0 * :A", b"CAP END"):
        s.receive(line, 0)
    welcome: dict[str, Any] = {"type": "welcome", "site": "A", "user": "alice", "sites": {"A": "connected"},
                               "rooms": [], "presence": {"A": ["alice"], "B": ["bob"]}}
    if s.labels.enabled:
        welcome |= {"clearance": clearance, "labels": {"levels": list(SCHEME.levels),
                                                       "caveats": list(SCHEME.caveats), "default": "UNCLASSIFIED"}}
    s.on_frame(welcome, 0)
    s.on_frame({"type": "joined", "room": "ops", "history": [], **({"label": RESTRICTED} if s.labels.enabled
                                                                    else {})}, 0)
    return s


def lines(actions: list[Any]) -> list[str]:
    return [line for a in actions if isinstance(a, Send) for line in a.data.decode().split("\r\n") if line]


def said(s: IrcSession, line: str) -> tuple[list[dict[str, Any]], list[str]]:
    """The say requests and the lines a client line produced."""
    out = s.receive(line.encode(), 1.0)
    return [a.frame for a in out if isinstance(a, Request)], lines(out)


BOB = {"type": "message", "room": "ops", "origin": "B", "user": "bob", "sent_at": 1000.0, "order": [5, "B"]}


def test_each_line_starts_with_its_label_live_alerting_replayed_and_tagged() -> None:
    s = session()
    assert lines(s.on_frame(dict(BOB, msg_id="B:1", text="tanker on station\nfuel 40",
                                 label={"level": "SECRET", "caveats": ["GBR"]}), 1000.0)) == [
        ":bob!bob@B PRIVMSG #ops :[SECRET//REL TO GBR] tanker on station",
        ":bob!bob@B PRIVMSG #ops :[SECRET//REL TO GBR] fuel 40"]
    assert lines(s.on_frame(dict(BOB, msg_id="B:2", text="now", precedence="flash", label=RESTRICTED), 1000.0)) == [
        ":bob!bob@B NOTICE #ops :[RESTRICTED] [FLASH B:2] now"]
    joined = lines(s.on_frame({"type": "joined", "room": "intel", "label": {"level": "SECRET", "caveats": []},
                               "history": [dict(BOB, room="intel", msg_id="B:3", text="old", label="SECRET")]}, 0))
    assert ":A.irc.t 332 alice #intel :[SECRET] the label of this channel: its lines carry it or a higher one; " \
           "start a line with [LABEL] to send it at another" in joined
    assert any(line.endswith("NOTICE #intel :[history 00:16:40Z] <bob@B> [SECRET] old") for line in joined)
    tagged = session(caps="message-tags")
    out = lines(tagged.on_frame(dict(BOB, msg_id="B:4", text="hi", label=SECRET_GBR_USA), 1000.0))
    assert out == ["@msgid=B:4;rcm.example/label=SECRET//REL\\sTO\\sGBR,\\sUSA :bob!bob@B PRIVMSG #ops "
                   ":[SECRET//REL TO GBR, USA] hi"]


def test_the_channels_label_is_its_topic_and_its_list_entry_and_the_motd_gives_the_clearance() -> None:
    s = IrcSession(server_name="A.irc.t", site="A", network="t", labels=LabelView(SCHEME))
    for line in (b"PASS secret", b"NICK alice", b"USER alice 0 * :A"):
        s.receive(line, 0)
    motd = lines(s.on_frame({"type": "welcome", "site": "A", "user": "alice", "sites": {}, "rooms": [],
                             "clearance": SECRET_GBR_USA}, 0))
    assert any("start yours with one to send it at that label" in line
               and line.endswith("Your clearance: SECRET//REL TO GBR, USA.") for line in motd)
    s.on_frame({"type": "joined", "room": "ops", "label": RESTRICTED, "history": []}, 0)
    assert lines(s.receive(b"TOPIC #ops", 0))[0].startswith(":A.irc.t 332 alice #ops :[RESTRICTED] the label")
    assert "482 alice #ops :A channel's topic is its label" in lines(s.receive(b"TOPIC #ops :new", 0))[0]
    assert lines(s.on_frame({"type": "joined", "room": "ops", "label": RESTRICTED, "history": []}, 0)) == []
    assert lines(s.on_frame({"type": "joined", "room": "ops", "label": "SECRET", "history": []}, 0)) == [
        ":A.irc.t TOPIC #ops :[SECRET] the label of this channel: its lines carry it or a higher one; start a line "
        "with [LABEL] to send it at another"]                # relabeled: an earlier definition reached the site
    s.on_frame({"type": "joined", "room": "ops", "label": RESTRICTED, "history": []}, 0)
    listed = lines(s.on_frame({"type": "rooms",
                               "rooms": [{"room": "ops", "members": 2, "online": 1, "label": RESTRICTED}]}, 0))
    assert ":A.irc.t 322 alice #ops 1 :[RESTRICTED] 2 members, 1 online" in listed


def test_a_line_led_by_a_label_is_said_at_it_with_or_without_a_precedence() -> None:
    s = session()
    says, _ = said(s, "PRIVMSG #ops :[SECRET//REL TO GBR] tanker on station")
    assert [(f["text"], f["label"], f["precedence"]) for f in says] == [
        ("tanker on station", {"level": "SECRET", "caveats": ["GBR"]}, "routine")]
    for line in ("PRIVMSG #ops :[secret//gbr/usa] !flash MEDEVAC", "PRIVMSG #ops :!FLASH [SECRET//REL TO USA, GBR] "
                                                                  "MEDEVAC"):
        says, _ = said(s, line)
        assert [(f["text"], f["label"], f["precedence"]) for f in says] == [("MEDEVAC", SECRET_GBR_USA, "flash")]
    says, _ = said(s, "PRIVMSG #ops :no mark: the channel's label")
    assert "label" not in says[0] and says[0]["text"] == "no mark: the channel's label"
    says, _ = said(s, "PRIVMSG #ops :\x01ACTION [SECRET] waves\x01")
    assert (says[0]["text"], says[0]["label"]) == ("* alice waves", {"level": "SECRET", "caveats": []})


def test_a_label_above_the_clearance_below_the_floor_or_unknown_is_refused_and_nothing_is_sent() -> None:
    s = session()
    for line, why in (("[TOP SECRET] x", "[TOP SECRET] is above your clearance SECRET//REL TO GBR, USA"),
                      ("[SECRET//REL TO NZL] x", "[SECRET//REL TO NZL] is above your clearance"),
                      ("[UNCLASSIFIED] x", "[UNCLASSIFIED] is below the label of #ops, RESTRICTED"),
                      ("[joke] x", "[joke] is not a label of this mission: unknown level 'joke'")):
        says, out = said(s, f"PRIVMSG #ops :{line}")
        assert says == [] and len(out) == 1 and out[0].startswith(f":A.irc.t 404 alice #ops :Cannot send to "
                                                                  f"channel: {why}"), out
    assert said(s, "NOTICE #ops :[TOP SECRET] x")[0] == []
    says, out = said(s, "PRIVMSG #ops :[SECRET]")
    assert says == [] and out == [":A.irc.t 412 alice :No text to send"]
    assert s._says_in_flight == 0
    # The chat server decides too: its refusal reaches the user as 404, a JOIN's as 473 and a NOTICE saying why.
    say = said(s, "PRIVMSG #ops :[SECRET] x")[0][0]
    refused = lines(s.on_frame({"type": "error", "in_reply_to": say["id"], "code": "forbidden",
                                "message": "say: SECRET is above your clearance RESTRICTED"}, 0))
    assert refused == [":A.irc.t 404 alice #ops :Cannot send to channel: say: SECRET is above your clearance "
                       "RESTRICTED"]
    join = [a.frame for a in s.receive(b"JOIN #vault", 0) if isinstance(a, Request)][0]
    assert lines(s.on_frame({"type": "error", "in_reply_to": join["id"], "code": "forbidden",
                             "message": "room 'vault' is TOP SECRET, above your clearance"}, 0)) == [
        ":A.irc.t 473 alice #vault :Cannot join channel: room 'vault' is TOP SECRET, above your clearance",
        ":A.irc.t NOTICE alice :*** cannot join #vault: room 'vault' is TOP SECRET, above your clearance"]


def test_a_replys_quote_is_shown_only_to_readers_cleared_for_its_original() -> None:
    quotes = Quotes()                                    # one front end: its sessions share the quotes
    top = session(clearance={"level": "TOP SECRET", "caveats": ["GBR", "USA"]}, quotes=quotes)
    low = session(clearance=SECRET_GBR_USA, quotes=quotes)
    top.on_frame(dict(BOB, msg_id="B:1", text="the vault code is 0451", label="TOP SECRET"), 1000.0)
    reply = dict(BOB, msg_id="B:2", text="noted", reply_to="B:1", label="SECRET")    # one frame, fanned out
    assert lines(top.on_frame(reply, 1000.0)) == [
        ":bob!bob@B PRIVMSG #ops :[SECRET] [re bob: the vault code is 0451] noted"]
    assert lines(low.on_frame(reply, 1000.0)) == [":bob!bob@B PRIVMSG #ops :[SECRET] [re B:1] noted"]
    ack = {"type": "acknowledged", "room": "ops", "msg_id": "B:1", "user": "bob", "site": "B"}
    assert lines(low.on_frame(ack, 0)) == [":A.irc.t NOTICE #ops :*** bob@B acknowledged B:1 [re B:1]"]


def test_an_unlabeled_mission_reads_and_writes_no_label() -> None:
    s = session(labels=NO_LABELS)
    says, _ = said(s, "PRIVMSG #ops :[SECRET] as typed")
    assert says[0]["text"] == "[SECRET] as typed" and "label" not in says[0]
    assert lines(s.on_frame(dict(BOB, msg_id="B:1", text="hi", label="SECRET"), 1000.0)) == [
        ":bob!bob@B PRIVMSG #ops hi"]
    assert lines(s.receive(b"TOPIC #ops", 0)) == [":A.irc.t 331 alice #ops :No topic is set"]
    assert split_label("[SECRET] x", NO_LABELS.scheme) == (None, "[SECRET] x")


def test_split_label_reads_the_peoples_spelling_and_names_what_is_wrong() -> None:
    label, rest = split_label("  [Secret//REL TO usa,gbr]   text [kept]", SCHEME)
    assert str(label) == "SECRET//REL TO GBR, USA" and rest == "text [kept]"
    assert split_label("text [SECRET]", SCHEME) == (None, "text [SECRET]")
    try:
        split_label("[SECRET//REL TO FRA] x", SCHEME)
    except LabelError as e:
        assert "unknown caveat 'FRA'" in str(e) and "[UNCLASSIFIED] [SECRET//REL TO FRA]" in str(e)
    else:
        raise AssertionError("FRA is no caveat of the scheme")


async def test_a_labeled_mission_over_irc_marks_lines_says_at_a_label_and_refuses_what_the_user_may_not(
        sites) -> None:
    s = await sites(labels={"levels": ["UNCLASSIFIED", "RESTRICTED", "SECRET", "TOP SECRET"],
                            "caveats": ["GBR", "USA"], "default": "UNCLASSIFIED"},
                    clearances={"alice": {"level": "SECRET", "caveats": ["GBR"]}, "carol": {"level": "RESTRICTED"},
                                "bob": {"level": "SECRET", "caveats": ["GBR"]}})
    bob = await s.ws("B", "bob")
    for room, label in (("ops", "RESTRICTED"), ("vault", "SECRET")):
        await bob.request({"type": "create", "room": room, "label": label})
        await bob.wait_for(lambda f, room=room: f["type"] == "joined" and f["room"] == room, 10)
    alice, carol = await s.irc("alice"), await s.irc("carol")
    assert (await alice.expect(lambda l: "Your clearance" in l)).endswith(":- Each line starts with its security "
        "label ([SECRET] text); start yours with one to send it at that label, or none for the channel's (its "
        "topic). Your clearance: SECRET//REL TO GBR.")
    for c in (alice, carol):
        await c.numeric("376")
        c.send("JOIN #ops")
        assert (await c.numeric("332")).split(" :", 1)[1].startswith("[RESTRICTED] the label of this channel")
        await c.numeric("366")
    await bob.request({"type": "say", "room": "ops", "text": "tanker on station", "client_id": "b1",
                       "label": "SECRET//REL TO GBR"})
    await bob.request({"type": "say", "room": "ops", "text": "weather fine", "client_id": "b2"})
    assert await alice.expect(lambda l: "tanker" in l) == \
        ":bob!bob@B PRIVMSG #ops :[SECRET//REL TO GBR] tanker on station"
    assert await alice.expect(lambda l: "weather" in l) == ":bob!bob@B PRIVMSG #ops :[RESTRICTED] weather fine"
    assert await carol.expect(lambda l: "weather" in l) == ":bob!bob@B PRIVMSG #ops :[RESTRICTED] weather fine"
    assert not [line for line in carol.lines if "tanker" in line]         # not cleared: never sent to her
    alice.send("PRIVMSG #ops :[SECRET] !priority contact north")
    got = await bob.wait_for(lambda f: f["type"] == "message" and f["user"] == "alice", 10)
    assert (got["text"], got["label"], got["precedence"]) == (
        "contact north", {"level": "SECRET", "caveats": []}, "priority")
    alice.send("PRIVMSG #ops :[TOP SECRET] too high")
    assert "Cannot send to channel: [TOP SECRET] is above your clearance SECRET//REL TO GBR" in \
        await alice.numeric("404")
    carol.send("PRIVMSG #ops :[SECRET] above carol")                       # her clearance came in the welcome
    assert (await carol.numeric("404")).endswith(":Cannot send to channel: [SECRET] is above your clearance "
                                                 "RESTRICTED; nothing was sent")
    carol.send("JOIN #vault")                                              # the chat server refuses it
    why = "join: room 'vault' is labeled SECRET; your clearance RESTRICTED does not dominate it"
    assert await carol.numeric("473") == f":A.irc.t 473 carol #vault :Cannot join channel: {why}"
    assert await carol.expect(lambda l: " NOTICE carol :" in l) == \
        f":A.irc.t NOTICE carol :*** cannot join #vault: {why}"
