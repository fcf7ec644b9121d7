"""The operators' features in ChatState (issues 21 and 19), sans-IO: frames in, changes and requests out."""
from __future__ import annotations

from chat_tui.commands import parse_line
from chat_tui.controller import Controller
from chat_tui.marks import runs
from chat_tui.pages import gap_changes
from chat_tui.plain import format_change
from chat_tui.state import ChatState, Gap, Inserted, JumpTo, MessageEntry, Notify, Panel, Request, RoomsChanged, Updated


def welcome(**kw):
    return {"type": "welcome", "site": "A", "user": "alice", "sites": {"A": "connected", "B": "connected"},
            "rooms": [], "presence": {}, **kw}


def msg(seq, ts, origin="B", user="bob", room="ops", text=None, **kw):
    return {"type": "message", "room": room, "msg_id": f"{origin}:{seq}", "origin": origin, "user": user,
            "text": text or f"m{ts}", "sent_at": 1000.0 + ts, "order": [ts, origin], "late": False, "n": ts, **kw}


def rows(st, room="ops"):
    return [e.msg_id if isinstance(e, MessageEntry) else f"gap<{e.before}" for e in st.rooms[room].entries
            if isinstance(e, (MessageEntry, Gap))]


def requests(changes):
    return [c.frame for c in changes if isinstance(c, Request)]


def in_rooms(rooms, **kw):
    st = ChatState("alice")
    st.apply(welcome(rooms=sorted(rooms), **kw), 0)
    for room, history in rooms.items():
        st.apply({"type": "joined", "room": room, "history": [dict(m, room=room) for m in history], "more": False}, 0)
    return st


class FakeLink:
    def __init__(self):
        self.sent = []

    def request(self, frame):
        self.sent.append(frame)

    def say(self, room, text, *, precedence=None, reply_to=None):
        self.sent.append({"type": "say", "room": room, "text": text, "precedence": precedence, "reply_to": reply_to})
        return f"c{len(self.sent)}"


def test_marks_mentions_and_highlights():
    got = [(r.text, r.hit, r.mention) for r in runs("🚁 grid @alice @alice@B x", user="alice", site="A",
                                                      highlights=[[2, 6], [9, 99]])]
    assert got == [("🚁 ", False, None), ("grid", True, None), (" ", False, None), ("@alice", False, "me"),
                   (" ", False, None), ("@alice@B", False, "other"), (" x", False, None)]


def test_gaps_open_between_stretches_and_close_when_filled():
    loaded = {"A:90": b"\x90", "A:91": b"\x91"}
    filled, opened = gap_changes(loaded, [("A:10", b"\x10"), ("A:11", b"\x11")], set(), more_before=True,
                                 more_after=True)
    assert (filled, opened) == (set(), ["A:90"])
    loaded |= {"A:10": b"\x10", "A:11": b"\x11"}
    filled, opened = gap_changes(loaded, [("A:11", b"\x11"), ("A:50", b"\x50")], {"A:90"}, more_before=True,
                                 more_after=False, contiguous_with="A:90")
    assert (filled, opened) == ({"A:90"}, [])


def test_welcome_counts_at_the_first_login_mentions_notify_and_reading_marks_the_room():
    st = in_rooms({"alpha": [], "ops": [msg(1, 1)]}, unread={"ops": 4}, mentions={"ops": 1})
    assert st.active == "alpha" and (st.rooms["ops"].unread, st.rooms["ops"].mentions) == (4, 1)
    changes = st.apply(msg(2, 2, text="@alice grid?", mentions=["alice"]), 0)
    assert (st.rooms["ops"].unread, st.rooms["ops"].mentions) == (5, 2)
    assert [c.kind for c in changes if isinstance(c, Notify)] == ["mention"]
    st.apply(welcome(rooms=["alpha", "ops"], unread={"ops": 99}), 0)          # a resume keeps our counts
    assert st.rooms["ops"].unread == 5
    st.set_active("ops")
    changes = st.read_now("ops")
    assert requests(changes) == [{"type": "mark_read", "room": "ops", "order": [2, "B"],
                                  "purpose": {"kind": "mark_read"}}]
    assert st.read_now("ops") == []                                           # nothing new: nothing sent
    st.apply(msg(3, 3), 0)                                                    # while shown: read again
    assert requests(st.read_now("ops"))[0]["order"] == [3, "B"]


def test_a_read_marker_from_another_session_lowers_the_counts():
    st = in_rooms({"alpha": [], "ops": [msg(1, 1)]})
    for m in (msg(2, 2, mentions=["alice"]), msg(3, 3), msg(4, 4, origin="A", user="alice")):
        st.apply(m, 0)
    assert (st.rooms["ops"].unread, st.rooms["ops"].mentions) == (2, 1)
    assert st.apply({"type": "read", "room": "ops", "order": [2, "B"]}, 0) == [RoomsChanged()]
    assert (st.rooms["ops"].unread, st.rooms["ops"].mentions) == (1, 0)
    st.apply({"type": "read", "room": "ops", "order": [1, "B"]}, 0)
    assert st.rooms["ops"].read == [2, "B"]
    st.apply({"type": "read", "room": "ops", "order": [4, "A"]}, 0)
    assert st.rooms["ops"].unread == 0


def test_a_reply_quotes_its_original_even_one_that_comes_late_after_it():
    st = in_rooms({"ops": [msg(1, 1, text="grid from 0300")]})
    st.apply(msg(2, 2, text="copy", reply_to="B:1"), 0)
    reply = st.by_msg_id["B:2"]
    assert st.quote_for(reply).text == "grid from 0300"
    changes = st.apply(msg(9, 9, text="re late", reply_to="C:4"), 0)
    assert requests(changes) == [{"type": "history", "room": "ops", "around": "C:4", "limit": 1,
                                  "purpose": {"kind": "original", "room": "ops", "msg_id": "C:4"}}]
    assert st.quote_for(st.by_msg_id["B:9"]).state == "loading"
    purpose = requests(changes)[0]["purpose"]
    st.apply({"type": "error", "code": "bad_field", "message": "history: no message", "purpose": purpose}, 0)
    assert st.quote_for(st.by_msg_id["B:9"]).state == "missing"
    changes = st.apply(msg(4, 4, origin="C", user="carol", text="the original", late=True), 0)
    assert any(isinstance(c, Updated) and c.entry is st.by_msg_id["B:9"] for c in changes)
    q = st.quote_for(st.by_msg_id["B:9"])
    assert (q.state, q.text, q.late) == ("loaded", "the original", True)
    line = format_change(Inserted("ops", 0, st.by_msg_id["B:9"]), st, lambda t: "T")
    assert line == ["T [ops] (re carol@C) bob@B: re late"]


def test_reply_and_precedence_commands_send_what_they_say():
    st = in_rooms({"ops": [msg(1, 1, text="question"), msg(2, 2, origin="A", user="alice")]})
    link = FakeLink()
    ctl = Controller(st, link, clock=lambda: 5.0)
    ctl.submit("/reply yes, confirmed")
    ctl.submit("/flash MEDEVAC grid 123")
    ctl.submit("/reply")                               # choose the line; the next /reply TEXT answers it
    ctl.submit("/reply B:1 by id")
    assert [(f["text"], f["precedence"], f["reply_to"]) for f in link.sent] == [
        ("yes, confirmed", "routine", "B:1"), ("MEDEVAC grid 123", "flash", None), ("by id", "routine", "B:1")]
    assert parse_line("/flash   two  spaces").arg == "  two  spaces"


def test_me_says_the_line_as_an_action_as_an_irc_users_me_is_said():
    st = in_rooms({"ops": []})
    link = FakeLink()
    ctl = Controller(st, link, clock=lambda: 5.0)
    ctl.submit("/me checks the map")
    assert [f["text"] for f in link.sent] == [f"* {st.user} checks the map"]
    changes = ctl.submit("/me")
    assert len(link.sent) == 1 and "usage: /me TEXT" in str(changes)


def test_flash_alerts_until_acknowledged_and_the_list_grows():
    st = in_rooms({"ops": []})
    changes = st.apply(msg(5, 5, text="MEDEVAC", precedence="flash"), 0)
    assert [c.kind for c in changes if isinstance(c, Notify)] == ["flash"]
    assert list(st.alerts) == ["B:5"] and st.by_msg_id["B:5"].alert
    assert format_change(next(c for c in changes if isinstance(c, Notify)), st) == [
        "!! FLASH from bob@B in [ops]: MEDEVAC (acknowledge: /ack B:5)"]
    assert st.due_alerts(100.0) == []                      # stamped now; due again 15 s later
    assert st.due_alerts(110.0) == []
    again = st.due_alerts(115.0)
    assert [(c.kind, c.repeat) for c in again] == [("flash", True)]
    changes = st.acknowledge()
    assert requests(changes) == [{"type": "acknowledge", "msg_id": "B:5",
                                  "purpose": {"kind": "acknowledge", "msg_id": "B:5"}}]
    assert st.due_alerts(200.0) == []                      # not while it is on its way
    st.apply({"type": "acknowledging", "msg_id": "B:5"}, 0)
    assert st.alerts == {} and not st.by_msg_id["B:5"].alert
    for user, at in (("alice", 3.0), ("carol", 4.0), ("alice", 5.0)):
        st.apply({"type": "acknowledged", "msg_id": "B:5", "user": user, "site": "A", "at": at}, 0)
    assert st.by_msg_id["B:5"].acks == [("alice", "A", 3.0), ("carol", "A", 4.0)]


def test_alerts_from_history_own_and_already_acknowledged_ones():
    st = in_rooms({"ops": [msg(1, 1, precedence="flash"),
                           msg(2, 2, precedence="immediate",
                               acknowledgements=[{"user": "alice", "site": "A", "at": 1}]),
                           msg(3, 3, origin="A", user="alice", precedence="flash", acknowledgements=[])]})
    assert list(st.alerts) == ["B:1"]
    assert [(c.kind, c.repeat) for c in st.due_alerts(50.0)] == [("flash", False)]     # announced at the next tick
    changes = st.apply({"type": "acknowledged", "msg_id": "A:3", "user": "bob", "site": "B", "at": 7}, 0)
    assert st.by_msg_id["A:3"].acks == [("bob", "B", 7.0)]
    assert any("bob@B acknowledged your FLASH message A:3" in getattr(c.entry, "text", "") for c in changes
               if isinstance(c, Inserted))
    st.apply({"type": "acknowledged", "msg_id": "B:1", "user": "alice", "site": "A", "at": 9}, 0)   # another session
    assert st.alerts == {}


def test_the_directory_follows_the_servers_pushes():
    st = in_rooms({"ops": []})
    assert st.apply({"type": "directory_update", "rooms": [{"room": "x", "members": 1}]}, 0) == []   # not fetched yet
    st.apply({"type": "directory", "rooms": [{"room": "ops", "members": 2, "last_at": None, "joined": True},
                                             {"room": "cell", "private": True, "members": 3, "last_at": 5.0}]}, 0)
    changes = st.apply({"type": "directory_update", "removed": ["cell"], "rooms": [
        {"room": "ops", "private": False, "members": 3, "last_at": 990.0},
        {"room": "weather", "private": False, "members": 1, "last_at": None}]}, 1000.0)
    assert changes == [Panel("directory")]
    assert [(r["room"], r["members"], r["last_at"], r["joined"]) for r in st.directory] == [
        ("ops", 3, 990.0, True), ("weather", 1, None, False)]


def test_search_and_directory():
    st = in_rooms({"ops": []})
    changes = st.start_search('"grid from" in:ops by:bob')
    assert requests(changes) == [{"type": "search", "query": '"grid from"', "limit": 50, "room": "ops", "user": "bob",
                                  "purpose": {"kind": "search", "seq": 1}}]
    st.start_search("tanker")
    hit = dict(msg(5, 5, text="tanker on station"), highlights=[[0, 6]])
    assert st.apply({"type": "results", "messages": [msg(1, 1)], "purpose": {"kind": "search", "seq": 1}}, 0) == []
    assert st.apply({"type": "results", "messages": [hit, {"x": 1}], "purpose": {"kind": "search", "seq": 2}}, 0) == [
        Panel("search")]
    assert [m["text"] for m in st.search.results] == ["tanker on station"]
    assert format_change(Panel("search"), st, lambda t: "T") == ["search: 1 result for tanker",
                                                                 "   B:5 [ops] T bob@B: *tanker* on station"]
    rows_ = [{"room": "alpha", "private": False, "members": 3, "last_at": 940.0, "joined": False},
             {"room": "ops", "private": False, "members": 2, "last_at": None, "joined": True}]
    auto = {"kind": "directory", "show": False}
    changes = st.apply({"type": "directory", "rooms": rows_, "more": False, "purpose": auto}, 1000.0)
    assert changes == [Panel("directory")]
    changes = st.apply({"type": "directory", "rooms": rows_, "purpose": {"kind": "directory", "show": True}}, 1000.0)
    listing = [c.entry.text for c in changes if isinstance(c, Inserted)][0]
    assert listing.splitlines() == ["room directory (2):", "   alpha: 3 members, last message just now",
                                    " * ops: 2 members, no messages yet"]
    st.apply({"type": "joined", "room": "alpha", "history": [], "more": False}, 0)
    assert st.directory[0]["joined"] is True
    assert st.apply({"type": "error", "code": "unknown_type", "purpose": {"kind": "directory", "show": False}}, 0) == []


def test_a_jump_to_a_message_not_loaded_fetches_the_page_around_it_and_a_gap_is_filled():
    st = in_rooms({"ops": [msg(90, 90), msg(91, 91)]})
    changes = st.jump("ops", "B:10")
    assert requests(changes) == [{"type": "history", "room": "ops", "around": "B:10", "limit": 50,
                                  "purpose": {"kind": "around", "room": "ops", "msg_id": "B:10"}}]
    page = {"type": "history", "room": "ops", "messages": [msg(9, 9), msg(10, 10)], "more_before": True,
            "more_after": True, "purpose": requests(changes)[0]["purpose"]}
    changes = st.apply(page, 0)
    assert JumpTo("ops", "B:10") in changes
    assert rows(st) == ["B:9", "B:10", "gap<B:90", "B:90", "B:91"]
    changes = st.fill_gap("ops")
    assert requests(changes)[0]["before"] == "B:90"
    st.apply({"type": "history", "room": "ops", "messages": [msg(10, 10), msg(50, 50)], "more": True,
              "purpose": requests(changes)[0]["purpose"]}, 0)
    assert rows(st) == ["B:9", "B:10", "B:50", "B:90", "B:91"]
    assert st.jump("ops", "B:50")[-1] == JumpTo("ops", "B:50")
    st.jump("intel", "C:3")                                  # a public room one has not joined: a preview
    assert st.active == "intel" and not st.rooms["intel"].joined


def test_late_repaired_and_precedence_marks_on_the_line_client():
    st = in_rooms({"ops": []})
    changes = st.apply(msg(4, 4, text="recovered", late=True, repaired=True, precedence="priority", via=["C"]), 0)
    inserted = next(c for c in changes if isinstance(c, Inserted) and isinstance(c.entry, MessageEntry))
    assert format_change(inserted, st, lambda t: "T") == ["T [ops] LATE REPAIRED PRIORITY bob@B: recovered"]
