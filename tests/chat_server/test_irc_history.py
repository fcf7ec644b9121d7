"""CHATHISTORY (IRCv3 draft/chathistory) on the IRC front end, sans-IO: each subcommand and selector over the
chat server's own history pages (chat_server.history.History on an in-memory room), the batch it answers in,
and the FAIL lines for what it cannot answer."""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest

from chat_server.history import History
from chat_server.irc import IrcSession
from chat_server.irc_history import HistoryQuery, HistoryRequestError, parse_chathistory
from chat_server.irc_state import Request, Send
from chat_server.protocol import Refusal
from chat_server.store_messages import StoredMessage

T0 = 1_767_225_600.0           # 2026-01-01T00:00:00Z


class Room:
    """One room's messages in global order (message i: order [i, "B"], sent at T0 + 10 i), as ChatStore serves."""

    def __init__(self, count: int, sent: Iterable[float] | None = None) -> None:
        times = list(sent) if sent is not None else [T0 + 10 * i for i in range(1, count + 1)]
        self.msgs = [StoredMessage(f"B:{i}", i, "ops", "B", i, "bob", f"line {i}", times[i - 1], [i, "B"], False)
                     for i in range(1, count + 1)]

    def history(self, room: str, limit: int, before: list[Any] | None = None,
                after: list[Any] | None = None) -> tuple[list[StoredMessage], bool]:
        if after is not None:
            newer = [m for m in self.msgs if m.order > after]
            return newer[:limit], len(newer) > limit
        older = [m for m in self.msgs if before is None or m.order < before]
        return older[-limit:] if limit else [], len(older) > limit

    def message(self, msg_id: str) -> StoredMessage | None:
        return next((m for m in self.msgs if m.msg_id == msg_id), None)

    def room_of(self, msg_id: str) -> str | None:
        return "ops" if self.message(msg_id) is not None else None

    def receipts_of(self, msg_ids: list[str]) -> dict[str, list[str]]:
        return {}

    def acknowledgements_of(self, msg_ids: list[str]) -> dict[str, list[dict[str, Any]]]:
        return {}

    def since_n(self, rooms: Iterable[str], after_n: int, limit: int) -> tuple[list[StoredMessage], bool]:
        return [], False


def run(query: HistoryQuery, room: Room, most: int = 500) -> tuple[list[str], int]:
    """The query answered by the chat server's History over ``room``: the msg_ids it returns, and the pages."""
    history = History(room, on_join=50, most=most, page_bytes=1 << 20)
    frame: dict[str, Any] | None = query.first()
    while frame is not None:
        assert frame["type"] == "history" and frame["room"] == "ops"
        reply = history.page("ops", frame.get("limit"), before=frame.get("before"), around=frame.get("around"))
        frame = query.take(reply)
    return [m["msg_id"] for m in query.result()], query.pages


def q(line: str) -> HistoryQuery:
    query = parse_chathistory(tuple(line.split()))
    assert isinstance(query, HistoryQuery)
    return query


def ids(*ns: int) -> list[str]:
    return [f"B:{n}" for n in ns]


def stamp(seconds: float) -> str:
    from chat_server.ircline import irc_time
    return irc_time(T0 + seconds)


def test_msgid_selectors_follow_the_global_order() -> None:
    room = Room(300)
    assert run(q("LATEST #ops * 3"), room) == (ids(298, 299, 300), 1)
    assert run(q("LATEST #ops msgid=B:298 5"), room) == (ids(299, 300), 1)
    assert run(q("BEFORE #ops msgid=B:10 3"), room) == (ids(7, 8, 9), 1)
    assert run(q("AROUND #ops msgid=B:10 5"), room) == (ids(8, 9, 10, 11, 12), 1)
    assert run(q("AFTER #ops msgid=B:10 3"), room) == (ids(11, 12, 13), 1)
    assert run(q("AFTER #ops msgid=B:299 3"), room) == (ids(300), 1)
    # A server whose pages are smaller than the command's limit: AFTER asks for the next page itself.
    assert run(q("AFTER #ops msgid=B:10 100"), room, most=41) == (ids(*range(11, 111)), 5)


def test_timestamp_selectors_pick_by_sent_time_walking_back_from_the_latest_page() -> None:
    room = Room(300)                                    # B:i sent at T0 + 10 i
    assert run(q(f"BEFORE #ops timestamp={stamp(105)} 3"), room)[0] == ids(8, 9, 10)
    assert run(q(f"AFTER #ops timestamp={stamp(105)} 3"), room)[0] == ids(11, 12, 13)
    assert run(q(f"LATEST #ops timestamp={stamp(2965)} 50"), room)[0] == ids(297, 298, 299, 300)
    assert run(q(f"AROUND #ops timestamp={stamp(100)} 4"), room)[0] == ids(8, 9, 10, 11)
    # Within the order: a line sent earlier than the lines around it (a late one) is selected by its time.
    sent = [T0 + 10 * i for i in range(1, 21)]
    sent[14] = T0 + 1                                  # B:15 was sent first of all
    assert run(q(f"BEFORE #ops timestamp={stamp(25)} 5"), Room(20, sent))[0] == ids(1, 2, 15)
    # Walking back stops after TIME_PAGES pages (the newest 2,000 messages).
    result, pages = run(q(f"BEFORE #ops timestamp={stamp(1)} 10"), Room(2500))
    assert (result, pages) == ([], 20)
    # However far it walks, a query holds about its limit of messages, not the pages it read.
    query = q(f"AFTER #ops timestamp={stamp(1)} 10")
    assert run(query, Room(2500)) == (ids(*range(501, 511)), 20) and len(query.collected) == 10


def test_commands_that_cannot_be_answered_say_why() -> None:
    def fail(line: str) -> tuple[str, str]:
        with pytest.raises(HistoryRequestError) as e:
            parse_chathistory(tuple(line.split()))
        return e.value.code, e.value.message
    assert fail("LATEST #ops *") == ("INVALID_PARAMS", "Insufficient parameters")
    assert fail("SIDEWAYS #ops * 5") == ("INVALID_PARAMS", "Unknown command")
    assert fail("LATEST #ops * 500")[0] == "INVALID_PARAMS"                # over CHATHISTORY=100
    assert fail("BEFORE #ops timestamp=yesterday 5") == ("INVALID_PARAMS", "Invalid timestamp")
    assert fail("BEFORE #ops * 5")[0] == "INVALID_PARAMS"                  # * is LATEST's only
    assert fail("BETWEEN #ops msgid=B:1 msgid=B:9 5")[0] == "INVALID_PARAMS"
    assert fail("LATEST #bad!room * 5")[0] == "INVALID_TARGET"
    assert parse_chathistory(("LATEST", "bob", "*", "5")) == ("NICK", "bob")    # no direct messages: nothing
    assert parse_chathistory(("TARGETS", "timestamp=x", "timestamp=y", "5")) == ("TARGETS", "")


def lines(actions: list[Any]) -> list[str]:
    return [line for a in actions if isinstance(a, Send) for line in a.data.decode().split("\r\n") if line]


def session(caps: str) -> IrcSession:
    s = IrcSession(server_name="A.irc.t", site="A", network="t")
    for line in (b"CAP LS 302", f"CAP REQ :{caps}".encode(), b"PASS x", b"NICK alice", b"USER alice 0 * :A",
                 b"CAP END"):
        s.receive(line, 0)
    s.on_frame({"type": "welcome", "site": "A", "user": "alice", "sites": {}, "rooms": []}, 0)
    return s


def answer(s: IrcSession, room: Room, actions: list[Any]) -> list[Any]:
    """Feed the session's history requests to History over ``room`` until it answers the client."""
    history = History(room, on_join=50, most=500, page_bytes=1 << 20)
    out: list[Any] = []
    pending = [a.frame for a in actions if isinstance(a, Request)]
    out += [a for a in actions if not isinstance(a, Request)]
    while pending:
        frame = pending.pop(0)
        try:
            reply = history.page("ops", frame.get("limit"), before=frame.get("before"), around=frame.get("around"))
            reply["id"] = frame["id"]
        except Refusal as e:
            reply = {"type": "error", "code": e.code, "message": e.message, "in_reply_to": frame["id"]}
        got = s.on_frame(reply, 0)
        pending += [a.frame for a in got if isinstance(a, Request)]
        out += [a for a in got if not isinstance(a, Request)]
    return out


def test_chathistory_answers_in_a_batch_with_times_and_msgids() -> None:
    s = session("batch server-time message-tags draft/chathistory")
    out = lines(answer(s, Room(30), s.receive(b"CHATHISTORY BEFORE #ops msgid=B:10 2", 0)))
    ref = out[0].split()[2][1:]
    assert out == [f":A.irc.t BATCH +{ref} chathistory #ops",
                   f"@batch={ref};time={stamp(80)};msgid=B:8 :bob!bob@B PRIVMSG #ops :line 8",
                   f"@batch={ref};time={stamp(90)};msgid=B:9 :bob!bob@B PRIVMSG #ops :line 9",
                   f":A.irc.t BATCH -{ref}"]
    # No history for a nick (there are no direct messages): an empty batch, so the client stops waiting.
    assert lines(s.receive(b"CHATHISTORY LATEST bob * 10", 0))[1].startswith(":A.irc.t BATCH -")
    # What cannot be answered: FAIL, and the connection goes on.
    assert lines(s.receive(b"CHATHISTORY LATEST #ops * 0", 0)) == [
        ":A.irc.t FAIL CHATHISTORY INVALID_PARAMS LATEST 0 :Invalid limit: from 1 to 100"]
    assert lines(answer(s, Room(30), s.receive(b"CHATHISTORY AROUND #ops msgid=B:99 5", 0))) == [
        ":A.irc.t FAIL CHATHISTORY MESSAGE_ERROR AROUND #ops :history: no message 'B:99' in room 'ops' at this site"]
    # At most four under way at once: the fifth waits for an answer.
    for _ in range(4):
        s.receive(b"CHATHISTORY LATEST #ops * 5", 0)
    assert lines(s.receive(b"CHATHISTORY LATEST #ops * 5", 0)) == [
        ":A.irc.t FAIL CHATHISTORY MESSAGE_ERROR LATEST #ops :at most 4 CHATHISTORY commands at once: wait for an "
        "answer"]


def test_a_plain_client_may_ask_for_history_too() -> None:
    s = IrcSession(server_name="A.irc.t", site="A", network="t")
    for line in (b"PASS x", b"NICK alice", b"USER alice 0 * :A"):
        s.receive(line, 0)
    s.on_frame({"type": "welcome", "site": "A", "user": "alice", "sites": {}, "rooms": []}, 0)
    out = lines(answer(s, Room(30), s.receive(b"CHATHISTORY LATEST #ops * 2", 0)))
    assert out == [":A.irc.t NOTICE #ops :[history 00:04:50Z] <bob@B> line 29",
                   ":A.irc.t NOTICE #ops :[history 00:05:00Z] <bob@B> line 30"]
