"""ChatState (sans-IO) and the command parser: frames in, changes out."""
from __future__ import annotations

from pathlib import Path

import pytest

import chat_tui
from chat_tui.commands import Command, CommandError, parse_line
from chat_tui.controller import Controller
from chat_tui.link import Backoff
from chat_tui.link import LinkStatus as LinkState
from chat_tui.state import (
    ACCEPTED,
    DELIVERED,
    FAILED,
    PENDING,
    STATUSES,
    ChatState,
    Inserted,
    MessageEntry,
    Notice,
    Receipt,
    Removed,
)
from contracts.precedence import URGENT
from contracts.status import LinkStatus


class Recorder:
    def __init__(self):
        self.sent = []

    def request(self, frame):
        self.sent.append(frame)

    def say(self, room, text, *, precedence="routine", reply_to=None):
        self.sent.append({"type": "say", "room": room, "text": text})
        return f"c{len(self.sent)}"


def welcome(**kw):
    return {"type": "welcome", "site": "A", "user": "alice", "sites": {"A": "connected", "B": "connected"},
            "rooms": [], "presence": {"A": ["alice"], "B": []}, **kw}


def msg(seq, ts, origin="B", user="bob", room="ops", late=False, text=None, **kw):
    return {"type": "message", "room": room, "msg_id": f"{origin}:{seq}", "origin": origin, "user": user,
            "text": text or f"m{ts}", "sent_at": 1000.0 + ts, "order": [ts, origin], "late": late, "n": ts, **kw}


def texts(st, room="ops"):
    return [e.text for e in st.rooms[room].entries if isinstance(e, MessageEntry)]


def joined(st, room="ops", history=()):
    st.apply(welcome(), 0)
    st.apply({"type": "joined", "room": room, "history": list(history), "more": False}, 0)


def test_messages_are_kept_in_order_key_order_and_late_ones_go_to_their_place():
    st = ChatState("alice")
    joined(st, history=[msg(1, 1)])
    for ts in (2, 5, 7):
        st.apply(msg(ts, ts), 2000.0)
    changes = st.apply(msg(9, 4, origin="C", user="dave", late=True, text="late one"), 1004.0 + 42)
    assert texts(st) == ["m1", "m2", "late one", "m5", "m7"]
    ins = [c for c in changes if isinstance(c, Inserted)]
    assert ins[0].index == 2 and ins[0].entry.late and ins[0].entry.moved_up == 2
    notice = ins[1].entry
    assert isinstance(notice, Notice) and notice.level == "warning"
    assert notice.text == ("late message C:9 from dave@C: arrived 42 s after it was sent, placed 2 messages up")
    assert st.rooms["ops"].entries[-1] is notice          # the notice is at the bottom, where the operator looks


def test_order_keys_compare_like_the_server_ints_before_strings_and_ties_by_origin():
    st = ChatState("alice")
    joined(st)
    st.apply(msg(1, 10, origin="B"), 0)
    st.apply(msg(1, 10, origin="A", user="alice", late=True, text="A10"), 0)
    st.apply(msg(2, 9, origin="C", late=True, text="C9"), 0)
    assert texts(st) == ["C9", "A10", "m10"]


def test_a_live_message_after_a_notice_goes_below_the_notice():
    st = ChatState("alice")
    joined(st)
    st.apply(msg(1, 1), 0)
    st.apply({"type": "missing", "origin": "B", "count": 3, "seqs": [2, 3, 4]}, 0)
    st.apply(msg(5, 5), 0)
    kinds = [type(e).__name__ for e in st.rooms["ops"].entries]
    assert kinds == ["MessageEntry", "Notice", "MessageEntry"]
    assert "up to 3 messages from site B lost in a disconnection" in st.rooms["ops"].entries[1].text


def test_repair_replaces_the_missing_notice_and_puts_the_message_in_place_marked():
    # Recovered replaces lost (docs/chat-protocol.md): one notice per origin, revised, never a red "lost"
    # left above a green "recovered".
    st = ChatState("alice")
    joined(st)
    st.apply(msg(1, 1), 0)
    st.apply(msg(5, 5), 0)
    st.apply({"type": "missing", "origin": "B", "count": 2, "ranges": [[2, 3]]}, 0)
    st.apply({**msg(3, 3, late=True, text="back"), "repaired": True}, 0)
    changes = st.apply({"type": "missing", "origin": "B", "count": 1, "ranges": [[4, 4]], "recovered": 1}, 0)
    entries = st.rooms["ops"].entries
    assert [type(e).__name__ for e in entries] == ["MessageEntry"] * 3 + ["Notice"] * 2
    assert [type(c).__name__ for c in changes] == ["Removed", "Inserted"]
    assert entries[1].text == "back" and entries[1].repaired and entries[1].late
    assert entries[-2].text.startswith("repaired message B:3 from bob@B: arrived")
    assert entries[-1].text == ("recovered 1 message from site B, shown in place, marked repaired; "
                                "up to 1 message still missing")
    assert entries[-1].level == "warning" and entries[-2].level == "warning"
    st.apply({**msg(4, 4, late=True, text="also back"), "repaired": True}, 0)
    st.apply({"type": "missing", "origin": "B", "count": 0, "ranges": [], "recovered": 1}, 0)
    notices = [e for e in st.rooms["ops"].entries if isinstance(e, Notice) and "site B" in e.text]
    assert [(n.text, n.level) for n in notices] == [
        ("recovered 2 messages from site B: shown in place, marked repaired", "success")]


def test_a_refused_join_adds_no_room_and_gives_back_the_room_shown_before():
    # The web client's behaviour: a room is added only when the server says ``joined``.
    st = ChatState("alice")
    joined(st)
    link = Recorder()
    ctl = Controller(st, link)
    ctl.send_requests(ctl.submit("/join secret"))                     # as the front ends do
    assert [f["type"] for f in link.sent] == ["join"]
    assert st.active == "secret" and st.joined_rooms() == ["ops"]       # lines typed now go after the join
    st.apply({"type": "error", "code": "forbidden", "purpose": {"kind": "join", "room": "secret"},
              "request": {"type": "join", "room": "secret"},
              "message": "join: room 'secret' is private and you are not a member"}, 0)
    assert "secret" not in st.rooms and st.active == "ops" and st.joined_rooms() == ["ops"]
    notice = st.rooms["ops"].entries[-1]
    assert (notice.text, notice.level) == ("cannot join secret: room 'secret' is private and you are not a member",
                                           "error")
    ctl.send_requests(ctl.submit("/join logistics"))
    st.apply({"type": "joined", "room": "logistics", "history": [], "purpose": {"kind": "join", "room": "logistics"}},
             0)
    assert st.active == "logistics" and st.joined_rooms() == ["logistics", "ops"] and st.joining == {}


def test_an_own_line_is_never_marked_late():
    st = ChatState("alice")
    joined(st)
    st.apply(msg(1, 5), 0)
    st.apply(msg(2, 3, origin="A", user="alice", late=True, text="own FLASH", precedence="flash"), 1030.0)
    st.apply(msg(3, 4, origin="B", user="alice", late=True, text="another alice, at B"), 1030.0)
    own, other = st.by_msg_id["A:2"], st.by_msg_id["B:3"]
    assert own.own and not own.late and own.late_by is None
    assert other.late and other.late_by == 26.0
    assert not any(isinstance(e, Notice) and "A:2" in e.text for e in st.rooms["ops"].entries)


def test_counts_read_in_the_singular_and_the_plural():
    from chat_tui.words import plural
    assert [plural(n, "message") for n in (0, 1, 2)] == ["0 messages", "1 message", "2 messages"]
    st = ChatState("alice")
    joined(st)
    changes = st.apply({"type": "rooms", "rooms": [{"room": "ops", "members": 1, "online": 1, "joined": True},
                                                   {"room": "wx", "members": 2, "online": 0}]}, 0)
    assert changes[-1].entry.text.splitlines()[1:] == [" * ops: 1 member, 1 online", "   wx: 2 members, 0 online"]


def test_a_site_reached_through_relays_shows_connected_via_its_next_hop():
    st = ChatState("alice")
    st.apply({"type": "welcome", "site": "A", "user": "alice", "sites": {"B": "connected", "C": "connected"},
              "rooms": [], "via": {"C": "B"}}, 0)
    assert st.site_words("C") == "connected via B" and st.site_words("B") == "connected"
    st.apply({"type": "site_status", "site": "C", "status": "suspected"}, 0)
    assert st.site_words("C") == "suspected"
    st.apply({"type": "site_status", "site": "C", "status": "connected", "via": "B"}, 0)
    assert st.site_words("C") == "connected via B"
    st.apply({"type": "site_status", "site": "C", "status": "connected"}, 0)
    assert st.site_words("C") == "connected"


def test_own_message_pending_accepted_delivered_with_receipts():
    st = ChatState("alice")
    joined(st)
    st.echo("ops", "hello", "c1", 1000.0)
    echo = st.rooms["ops"].entries[-1]
    assert echo.state == PENDING and echo.own
    st.apply(msg(2, 2), 0)                                 # someone else's message lands above our pending echo
    assert st.rooms["ops"].entries[-1] is echo
    st.apply({"type": "ack", "client_id": "c1", "msg_id": "A:7"}, 0)
    assert echo.state == ACCEPTED and echo.msg_id == "A:7"
    changes = st.apply(msg(7, 3, origin="A", user="alice", text="hello"), 0)
    assert any(isinstance(c, Removed) and c.entry is echo for c in changes)
    real = st.by_msg_id["A:7"]
    assert real.state == DELIVERED and real.own and texts(st) == ["m2", "hello"]
    st.apply({"type": "receipt", "msg_id": "A:7", "site": "A"}, 0)
    changes = st.apply({"type": "receipt", "msg_id": "A:7", "site": "B"}, 0)
    assert real.receipts == {"A", "B"} and any(isinstance(c, Receipt) and c.site == "B" for c in changes)
    assert st.apply({"type": "receipt", "msg_id": "A:7", "site": "B"}, 0) == []     # duplicates change nothing


def test_message_before_ack_replaces_echo_when_the_ack_comes():
    st = ChatState("alice")
    joined(st)
    st.echo("ops", "hi", "c1", 0)
    st.apply(msg(3, 3, origin="A", user="alice", text="hi"), 0)
    assert texts(st) == ["hi", "hi"]
    st.apply({"type": "ack", "client_id": "c1", "msg_id": "A:3"}, 0)
    assert texts(st) == ["hi"] and st.rooms["ops"].entries[0].state == DELIVERED


def test_error_for_a_say_marks_the_echo_failed():
    st = ChatState("alice")
    joined(st)
    st.echo("ops", "hi", "c1", 0)
    st.apply({"type": "error", "code": "unavailable", "message": "RCM down",
              "request": {"type": "say", "client_id": "c1"}}, 0)
    entries = st.rooms["ops"].entries
    assert entries[0].state == FAILED and "not sent: error unavailable: RCM down" in entries[1].text


def test_unread_counts_and_replays_are_ignored():
    st = ChatState("alice")
    joined(st, "ops")
    st.apply({"type": "joined", "room": "intel", "history": []}, 0)
    assert st.active == "ops"
    st.apply(msg(1, 1, room="intel"), 0)
    st.apply(msg(2, 2, room="intel"), 0)
    st.apply(msg(2, 2, room="intel"), 0)                   # replayed after a reconnection
    assert st.rooms["intel"].unread == 2 and len(texts(st, "intel")) == 2
    st.set_active("intel")
    assert st.rooms["intel"].unread == 0


def test_site_status_and_presence_and_lost_connection():
    st = ChatState("alice")
    st.apply(welcome(), 0)
    st.apply({"type": "site_status", "site": "B", "status": "suspected"}, 0)
    st.apply({"type": "presence", "site": "B", "online": ["bob"], "offline": []}, 0)
    assert st.sites == {"A": "connected", "B": "suspected"} and st.presence["B"] == {"bob"}
    st.apply({"type": "client_lost", "reason": "x"}, 0)
    assert set(st.sites.values()) == {"unknown"}


def test_a_status_word_the_client_does_not_know_is_unknown_and_styled_as_every_status_is():
    """contracts.status: "unknown" for a site with no reported status, or a word this client does not know (a
    newer server's), in the site bar's words and class; the stylesheet styles every status (the web page's
    style.css does the same: tests/web_ui/test_web_contracts.py)."""
    st = ChatState("alice")
    st.apply(welcome(sites={"A": "connected", "B": "up"}), 0)
    st.apply({"type": "site_status", "site": "C", "status": "degraded"}, 0)
    assert st.sites == {"A": "connected", "B": "unknown", "C": "unknown"}
    assert st.site_words("B") == st.site_words("D") == "unknown"
    tcss = (Path(chat_tui.__file__).parent / "chat_tui.tcss").read_text(encoding="utf-8")
    assert STATUSES == tuple(s.value for s in LinkStatus)
    for status in STATUSES:
        assert f".site.{status} {{" in tcss
    for level in URGENT:
        assert f".message.{level} {{" in tcss


@pytest.mark.parametrize("line,expected", [
    ("hello", Command("say", "hello")),
    ("//etc", Command("say", "/etc")),
    ("/join ops", Command("join", "ops")),
    ("/leave", Command("leave", None)),
    ("/history", Command("history", "50")),
    ("/history 10", Command("history", "10")),
    ("/WHO", Command("who")),
    ("   ", None),
])
def test_parse_line(line, expected):
    assert parse_line(line) == expected


@pytest.mark.parametrize("line,error", [
    ("/frobnicate", "unknown command /frobnicate"),
    ("/join", "/join needs a room name"),
    ("/join bad room", "bad room name"),
    ("/history -3", "positive number"),
    ("/rooms x", "takes no argument"),
])
def test_parse_line_errors(line, error):
    with pytest.raises(CommandError, match=error):
        parse_line(line)


def test_backoff_grows_to_its_maximum_and_resets():
    b = Backoff(initial=0.5, maximum=4.0, jitter=0.0)
    assert [b.next() for _ in range(6)] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    b.reset()
    assert b.next() == 0.5
    assert LinkState("retrying", "cannot connect: refused", 3, 2.0).describe() == \
        "unreachable (cannot connect: refused); retry 3 in 2.0 s"


def test_a_line_whose_time_reads_earlier_than_the_line_above_says_by_how_much():
    # docs/chat-protocol.md "Order against time": 11:45:30 carol above 11:44:28 alice is the global order.
    from chat_tui.plain import format_change
    st = ChatState("alice")
    joined(st, history=[msg(1, 10, text="first")])
    st.apply(msg(2, 20, text="carol, sent later"), 0)
    st.apply(msg(3, 30, origin="A", user="alice", text="alice, placed after", sent_at=1000.0 - 42), 0)
    first, carol, alice = (st.by_msg_id[i] for i in ("B:1", "B:2", "A:3"))
    assert (first.out_of_time, carol.out_of_time, alice.out_of_time) == (0, 0, 62)
    assert format_change(Inserted("ops", 2, alice), st, lambda t: "T") == [
        "T [ops] [ORDER -62s] alice@A (you): alice, placed after"]
    changes = st.apply(msg(4, 25, origin="C", user="dave", late=True, text="late, sent at 0", sent_at=1000.0), 0)
    assert st.by_msg_id["C:4"].out_of_time == 20                       # than carol's, now the line above it
    assert alice.out_of_time == 42 and any(getattr(c, "entry", None) is alice for c in changes)  # checked again


def test_a_resumed_client_drops_the_notices_of_messages_repair_brought_back_while_it_was_away():
    st = ChatState("alice")
    joined(st)
    st.apply({"type": "missing", "origin": "B", "count": 2, "ranges": [[2, 3]]}, 0)
    st.apply({"type": "missing", "origin": "C", "count": 3, "ranges": [[4, 6]]}, 0)
    st.apply(welcome(rooms=["ops"], missing={"C": 1}), 0)                # a resume: B's all came back
    notices = [e.text for e in st.rooms["ops"].entries if isinstance(e, Notice)]
    assert notices == ["up to 1 message from site C lost in a disconnection: repair brings it back in place if "
                       "another site still holds it"]
