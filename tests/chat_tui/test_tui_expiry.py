"""Message expiry in the terminal clients (chat_tui/expiry.py), sans-IO: a line is marked expired at the tick past its
``expires_at`` (or at once when it comes expired), ``/expire TIME TEXT`` puts ``expires_in`` on the say, the line
client prints it, and a ``missing`` notice answered by expired stubs says they expired, not that they came back."""
from __future__ import annotations

import pytest

from chat_tui.commands import CommandError, parse_line
from chat_tui.controller import Controller
from chat_tui.expiry import parse_duration
from chat_tui.plain import _lines_of
from chat_tui.state import ChatState, Expired, MessageEntry, Notice


class Recorder:
    def __init__(self) -> None:
        self.sent: list[dict] = []

    def request(self, frame: dict) -> None:
        self.sent.append(frame)

    def say(self, room, text, *, precedence="routine", reply_to=None, expires_in=None):
        self.sent.append({"type": "say", "room": room, "text": text, "expires_in": expires_in})
        return f"c{len(self.sent)}"


def msg(seq: int, text: str, **kw) -> dict:
    return {"type": "message", "room": "ops", "msg_id": f"B:{seq}", "origin": "B", "user": "bob", "text": text,
            "sent_at": 1000.0 + seq, "order": [seq, "B"], "late": False, "n": seq, **kw}


def in_ops(history=()) -> ChatState:
    st = ChatState("alice")
    st.apply({"type": "welcome", "site": "A", "user": "alice", "sites": {"A": "connected", "B": "connected"},
              "rooms": [], "presence": {}}, 0)
    st.apply({"type": "joined", "room": "ops", "history": list(history), "more": False}, 0)
    return st


def entry(st: ChatState, msg_id: str) -> MessageEntry:
    return st.by_msg_id[msg_id]


def test_a_line_is_marked_expired_by_the_tick_past_its_expires_at_and_printed_once():
    st = in_ops([msg(1, "plain")])
    st.apply(msg(2, "short-lived", expires_at=1060.0), 1002.0)
    e = entry(st, "B:2")
    assert (e.expires_at, e.expired) == (1060.0, False)
    assert (entry(st, "B:1").expires_at, entry(st, "B:1").expired) == (None, False)
    assert st.expire_messages(1059.9) == []
    changes = st.expire_messages(1060.0)
    assert changes == [Expired("ops", e)] and e.expired and e.text == "short-lived"     # kept readable
    assert st.expire_messages(2000.0) == [] and st.expiring == {}
    assert _lines_of(changes[0], st, lambda t: f"t{t:g}") == ["-- [ops] message B:2 from bob@B expired"]


def test_a_line_that_comes_expired_is_expired_at_once_and_the_line_client_marks_it():
    st = in_ops([msg(1, "old", expires_at=1005.0, expired=True)])
    changes = st.apply(msg(3, "skewed", expires_at=1001.0), 1003.0)
    assert entry(st, "B:1").expired and entry(st, "B:3").expired and st.expiring == {}
    inserted = next(c for c in changes if getattr(c, "entry", None) is entry(st, "B:3"))
    assert _lines_of(inserted, st, lambda t: f"t{t:g}") == ["t1003 [ops] EXPIRED bob@B: skewed"]
    live = st.apply(msg(4, "soon", expires_at=1100.0), 1004.0)
    assert _lines_of(live[0], st, lambda t: f"t{t:g}") == ["t1004 [ops] bob@B: soon (expires t1100)"]


def test_expire_sends_one_line_with_its_expiry_and_bad_durations_are_refused():
    assert [parse_duration(w) for w in ("90", "90s", "15m", "2h", "7d", "8d", "0", "1.5h", "x")] == \
        [90, 90, 900, 7200, 604800, None, None, None, None]
    with pytest.raises(CommandError, match="usage: /expire TIME TEXT"):
        parse_line("/expire soon hello")
    with pytest.raises(CommandError, match="usage: /expire TIME TEXT"):
        parse_line("/expire 15m")
    st = in_ops()
    link = Recorder()
    ctl = Controller(st, link, clock=lambda: 1000.0)
    ctl.submit("/expire 15m grid 4411 until relieved")
    ctl.submit("after that")
    assert [(f["text"], f["expires_in"]) for f in link.sent] == [("grid 4411 until relieved", 900.0),
                                                                  ("after that", None)]


def test_a_missing_notice_answered_by_expired_stubs_says_they_expired_not_recovered():
    st = in_ops()
    st.apply({"type": "missing", "origin": "C", "count": 2, "ranges": [[3, 4]], "more": False}, 0)
    st.apply({"type": "missing", "origin": "C", "count": 0, "ranges": [], "more": False, "expired": 2}, 0)
    notices = [e for e in st.rooms["ops"].entries if isinstance(e, Notice)]
    assert [(n.text, n.level) for n in notices] == [
        ("from site C: 2 messages expired before reaching this site (not lost, not shown)", "success")]
    assert st.losses == {"C": (0, 0, 2)}
