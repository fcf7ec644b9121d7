"""Chat messages over the IRC front end: IRC and WebSocket users in one room, NOTICE and ACTION, late,
repaired, FLASH and IMMEDIATE lines as marked NOTICEs, site status and missing-message notices, acknowledging
(!ack, ACK), and history: SASL, batch, echo-message and CHATHISTORY against a chat server, and a reconnecting
client replayed only what it was not shown."""
from __future__ import annotations

import asyncio
import base64

import pytest
from chat_missions import PASSWORD
from irc_testing import _joined_session, _lines

from chat_server.irc_state import Request

pytestmark = pytest.mark.timeout(60)


def test_repaired_flash_and_immediate_lines_arrive_as_marked_notices() -> None:
    s = _joined_session()
    base = {"type": "message", "room": "ops", "origin": "C", "user": "dave", "sent_at": 1000.0, "order": [5, "C"]}
    now = 1300.0
    assert _lines(s.on_frame(dict(base, msg_id="C:1", text="plain"), now)) == [":dave!dave@C PRIVMSG #ops plain"]
    assert _lines(s.on_frame(dict(base, msg_id="C:2", text="fixed", late=True, repaired=True), now)) == [
        ":dave!dave@C NOTICE #ops :[REPAIRED +300s] fixed"]
    assert _lines(s.on_frame(dict(base, msg_id="C:3", text="now", precedence="flash"), now)) == [
        ":dave!dave@C NOTICE #ops :[FLASH C:3] now"]
    assert _lines(s.on_frame(dict(base, msg_id="C:4", text="soon", precedence="immediate", late=True), now)) == [
        ":dave!dave@C NOTICE #ops :[IMMEDIATE C:4] [LATE +300s] soon"]
    assert _lines(s.on_frame(dict(base, msg_id="C:5", text="routine", precedence="priority"), now)) == [
        ":dave!dave@C PRIVMSG #ops routine"]


def test_site_status_and_missing_notices_reach_every_joined_channel() -> None:
    s = _joined_session()
    s.on_frame({"type": "joined", "room": "intel", "history": []}, 0)
    status = _lines(s.on_frame({"type": "site_status", "site": "C", "status": "disconnected"}, 0))
    assert sorted(status) == [":A.irc.t NOTICE #intel :*** site C is disconnected",
                              ":A.irc.t NOTICE #ops :*** site C is disconnected"]
    odd = _lines(s.on_frame({"type": "site_status", "site": "C", "status": "up\r\nQUIT"}, 0))   # a newer word
    assert ":A.irc.t NOTICE #ops :*** site C is unknown" in odd            # contracts.status, as every client
    missing = _lines(s.on_frame({"type": "missing", "origin": "C", "count": 7}, 0))
    assert len(missing) == 2 and all("up to 7 messages from site C were lost" in m for m in missing)
    revised = _lines(s.on_frame({"type": "missing", "origin": "C", "count": 2, "recovered": 5}, 0))
    assert ":A.irc.t NOTICE #ops :*** recovered 5 messages from site C (up to 2 still missing); shown above as " \
           "[REPAIRED] NOTICEs" in revised


def test_ack_acknowledges_the_urgent_lines_waiting_and_acknowledgements_are_shown() -> None:
    s = _joined_session()
    base = {"type": "message", "room": "ops", "origin": "B", "user": "bob", "sent_at": 1000.0, "order": [5, "B"]}
    s.on_frame(dict(base, msg_id="B:1", text="MEDEVAC grid 123", precedence="flash"), 1000.0)
    s.on_frame(dict(base, msg_id="B:2", text="routine", precedence="routine"), 1000.0)
    s.on_frame(dict(base, msg_id="B:3", text="move now", precedence="immediate"), 1000.0)
    acks = [a.frame for a in s.receive(b"PRIVMSG #ops :!ack", 1.0) if isinstance(a, Request)]
    assert [(f["type"], f["msg_id"]) for f in acks] == [("acknowledge", "B:1"), ("acknowledge", "B:3")]
    assert not [a for a in s.receive(b"PRIVMSG #ops :!ACK B:1", 1.0) if isinstance(a, Request)
                and a.frame["type"] == "say"]                 # never said to the room
    assert [a.frame["msg_id"] for a in s.receive(b"ACK B:3", 1.0) if isinstance(a, Request)] == ["B:3"]
    shown = _lines(s.on_frame({"type": "acknowledged", "msg_id": "B:1", "user": "alice", "site": "A",
                               "at": 1001.0}, 1001.0))
    assert shown == [":A.irc.t NOTICE #ops :*** alice@A acknowledged B:1 [re bob: MEDEVAC grid 123]"]
    assert _lines(s.on_frame({"type": "acknowledged", "msg_id": "C:9", "user": "dave", "site": "C", "at": 1.0},
                             1001.0)) == [":A.irc.t NOTICE #ops :*** dave@C acknowledged C:9"]   # a line not seen here
    s.on_frame({"type": "acknowledging", "msg_id": "B:3", "ref": "A:9"}, 1001.0)
    assert _lines(s.receive(b"PRIVMSG #ops :!ack", 2.0)) == [
        ":A.irc.t NOTICE #ops :*** nothing to acknowledge in #ops: no FLASH or IMMEDIATE line waits for yours"]
    refused = [a.frame for a in s.receive(b"ACK B:2", 2.0) if isinstance(a, Request)]
    assert _lines(s.on_frame({"type": "error", "code": "bad_field", "in_reply_to": refused[0]["id"],
                              "message": "acknowledge: only flash and immediate messages ask for acknowledgement"},
                             2.0)) == [":A.irc.t NOTICE alice :*** cannot acknowledge B:2: acknowledge: only flash "
                                       "and immediate messages ask for acknowledgement"]


async def test_irc_and_websocket_users_talk_in_the_same_room(sites) -> None:
    s = await sites()
    irc = await s.irc("alice")
    assert "alice!alice@A" in await irc.numeric("001")
    await irc.numeric("005")
    await irc.numeric("376")
    irc.send("JOIN #ops")
    assert await irc.expect(lambda l: l == ":alice!alice@A JOIN #ops")
    await irc.numeric("366")
    bob = await s.ws("B", "bob")
    await bob.join("ops")
    await bob.say("ops", "bob here")
    assert await irc.expect(lambda l: l == ":bob!bob@B PRIVMSG #ops :bob here")
    irc.send("PRIVMSG #ops :alice here, over IRC")
    got = await bob.wait_for(lambda f: f["type"] == "message" and f["user"] == "alice", 10)
    assert (got["origin"], got["text"]) == ("A", "alice here, over IRC")
    await bob.say("ops", "after yours")
    await irc.expect(lambda l: "after yours" in l)
    assert not [line for line in irc.lines if "alice here" in line]     # the server never echoes your own line


async def test_late_messages_and_site_status_reach_irc_users_as_notices(sites) -> None:
    s = await sites()
    irc, bob = await s.alice_and_bob_in_ops()
    s.net.set_link("A", "B", "suspected")
    assert await irc.expect(lambda l: "NOTICE #ops" in l and "site B is suspected" in l)
    await bob.say("ops", "held back by the link")
    s.net.set_link("A", "B", "connected")
    line = await irc.expect(lambda l: "held back by the link" in l)
    assert line.startswith(":bob!bob@B NOTICE #ops :[LATE +")
    assert await irc.expect(lambda l: "site B is connected" in l)


async def test_notice_and_action_reach_websocket_users_and_part_and_topic_need_the_channel(sites) -> None:
    s = await sites()
    irc, bob = await s.alice_and_bob_in_ops()
    irc.send("NOTICE #ops :a notice is said too")
    got = await bob.wait_for(lambda f: f["type"] == "message" and f["user"] == "alice", 10)
    assert got["text"] == "a notice is said too"
    irc.send("PRIVMSG #ops :\x01ACTION waves\x01")
    got = await bob.wait_for(lambda f: f["type"] == "message" and "waves" in f["text"], 10)
    assert got["text"] == "* alice waves"
    irc.send("PART #intel")
    await irc.numeric("442")
    irc.send("TOPIC #intel")
    await irc.numeric("442")
    irc.send("JOIN 0")                                # leave every room
    assert await irc.expect(lambda l: l.startswith(":alice!alice@A PART #ops"))


async def test_sasl_history_batch_echo_and_chathistory_against_a_chat_server(sites) -> None:
    s = await sites()
    bob = await s.ws("B", "bob")
    await bob.join("ops")
    first = await bob.say("ops", "before alice came")
    await bob.wait_for(lambda f: f["type"] == "receipt" and f["msg_id"] == first["msg_id"] and f["site"] == "A", 10)
    irc = await s.irc()
    irc.send("CAP LS 302")
    irc.send("NICK alice")
    irc.send("USER alice 0 * :Alice")
    assert "sasl=PLAIN" in await irc.expect(lambda l: " CAP * LS " in l)
    irc.send("CAP REQ :sasl server-time message-tags batch echo-message")
    await irc.expect(lambda l: " CAP alice ACK " in l)
    irc.send("AUTHENTICATE PLAIN")
    await irc.expect(lambda l: l == "AUTHENTICATE +")
    irc.send(b"AUTHENTICATE " + base64.b64encode(f"\0alice\0{PASSWORD}".encode()))
    await irc.numeric("903")
    irc.send("CAP END")
    await irc.numeric("001")
    irc.send("JOIN #ops")
    start = await irc.expect(lambda l: " BATCH +" in l and l.endswith("chathistory #ops"))
    ref = start.split()[2][1:]
    line = await irc.expect(lambda l: "before alice came" in l)
    assert line.startswith(f"@batch={ref};time=") and f";msgid={first['msg_id']} :bob!bob@B PRIVMSG #ops " in line
    await irc.expect(lambda l: l.endswith(f"BATCH -{ref}"))
    irc.send("PRIVMSG #ops :alice, over IRC")                  # echo-message: her line comes back, with its msgid
    echo = await irc.expect(lambda l: "alice, over IRC" in l)
    assert ";msgid=A:" in echo and ":alice!alice@A PRIVMSG #ops :alice, over IRC" in echo
    irc.send(f"CHATHISTORY LATEST #ops msgid={first['msg_id']} 10")
    await irc.expect(lambda l: " BATCH +" in l)
    assert "alice, over IRC" in await irc.expect(lambda l: " PRIVMSG " in l)


async def test_ack_from_irc_reaches_every_site_as_from_the_web(sites) -> None:
    from chat_missions import grant
    s = await sites()
    grant(s.mission, "B", "bob", "flash")
    irc, bob = await s.alice_and_bob_in_ops()
    ack = await bob.request({"type": "say", "room": "ops", "text": "MEDEVAC grid 123", "client_id": "f1",
                             "precedence": "flash"})
    assert await irc.expect(lambda l: "MEDEVAC" in l) == \
        f":bob!bob@B NOTICE #ops :[FLASH {ack['msg_id']}] MEDEVAC grid 123"
    irc.send("PRIVMSG #ops :!ack")
    got = await bob.wait_for(lambda f: f["type"] == "acknowledged" and f["msg_id"] == ack["msg_id"], 10)
    assert (got["user"], got["site"]) == ("alice", "A")
    assert await irc.expect(lambda l: "acknowledged" in l) == \
        f":A.irc.t NOTICE #ops :*** alice@A acknowledged {ack['msg_id']} [re bob: MEDEVAC grid 123]"
    assert not [line for line in irc.lines if "PRIVMSG #ops :!ack" in line]   # not said to the room


async def test_what_a_client_was_shown_is_written_while_the_server_runs(sites, monkeypatch) -> None:
    """The marks reach irc-shown.json every ``MARKS_INTERVAL`` (written by a worker thread), not only at stop: a
    crash forgets at most that interval's. The file read as a restarted server reads it holds alice's mark."""
    import json

    import chat_server.irc_server as irc_server
    from chat_server.irc_marks import ShownMarks
    monkeypatch.setattr(irc_server, "MARKS_INTERVAL", 0.02)
    s = await sites()
    irc, bob = await s.alice_and_bob_in_ops()
    await bob.say("ops", "one")
    await irc.expect(lambda l: l.endswith("PRIVMSG #ops one"))
    front = s.servers["A"].irc_front
    path = s.mission.site_dir("A") / "chat" / "irc-shown.json"
    front.steps.mark_shown()                # (a session in step has its place marked as the saver does)
    shown = front.shown.of("alice", "127.0.0.1")["ops"]          # the session's live marks: what it was shown

    async def written() -> dict[str, dict[str, int]]:
        while True:
            try:
                marks = json.loads(path.read_text())
                if marks.get("alice@127.0.0.1", {}).get("ops") == shown:
                    return marks
            except (OSError, ValueError):
                pass
            await asyncio.sleep(0.02)
    await asyncio.wait_for(written(), 10)
    assert ShownMarks(path).of("alice", "127.0.0.1") == {"ops": shown}


async def test_a_client_that_reconnects_is_replayed_only_what_it_was_not_shown(sites) -> None:
    s = await sites()
    bob = await s.ws("B", "bob")
    await bob.join("ops")
    irc = await s.irc("alice")
    await irc.numeric("376")
    irc.send("JOIN #ops")
    await irc.numeric("366")
    await bob.say("ops", "one")
    await irc.expect(lambda l: l.endswith("PRIVMSG #ops one"))
    irc.send("QUIT")
    await irc.closed()
    second = await bob.say("ops", "two, while alice was away")
    await bob.wait_for(lambda f: f["type"] == "receipt" and f["msg_id"] == second["msg_id"] and f["site"] == "A", 10)
    irc = await s.irc("alice")                                   # ops is joined for her at log-in
    await irc.expect(lambda l: "two, while alice was away" in l)
    await irc.numeric("366")
    irc.send("PING :done")
    await irc.expect(lambda l: l.endswith("done"))
    assert not [line for line in irc.lines if line.endswith("> one")]
    # The chat server restarts: what each client was shown survives it.
    irc.close()
    await s.restart("A")
    irc = await s.irc("alice")
    await irc.numeric("366")
    irc.send("PING :done")
    await irc.expect(lambda l: l.endswith("done"))
    assert not [line for line in irc.lines if "[history" in line]
