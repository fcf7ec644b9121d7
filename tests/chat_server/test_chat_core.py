"""The chat core (chat_server/core.py) without sockets or clocks: events and ``now`` in, actions out.

Each test drives a ``ChatCore`` over a real site database in tmp_path, applies the
store and journal actions the way the server does (``actions.write``), and
checks the actions themselves: what is stored, journaled, shown and sent.
"""
from __future__ import annotations

from pathlib import Path

import msgpack
import pytest

from chat_server.actions import (
    LOSSES_STATE,
    Broadcast,
    JournalRecord,
    QueueReceipt,
    RecordSent,
    ReleaseHeld,
    SendPayload,
    StoreChatGone,
    StoreJournalN,
    StoreMembership,
    StoreMessage,
    StoreReadMarker,
    StoreRosterGeneration,
    ToDirectoryReaders,
    ToRoom,
    ToUser,
    write,
)
from chat_server.core import DEFINITION_REQUEST_INTERVAL, ChatCore
from chat_server.history import History
from chat_server.journal import Journal, read_journal
from chat_server.payload import (
    Acknowledgement,
    Barrier,
    ChatMessage,
    DefinitionRequest,
    PayloadError,
    Receipts,
    RoomDefinition,
    Roster,
    ServerGone,
    decode_payload,
    encode_payload,
)
from chat_server.protocol import Refusal
from chat_server.rooms import CLAIM_TIMEOUT, Claim
from chat_server.store import ChatStore
from contracts.precedence import Precedence
from rcm.client import Delivery


class Site:
    """A core over a real database and journal; ``step`` applies an event's writes like the server."""

    def __init__(self, tmp: Path, site: str = "A", peers: tuple[str, ...] = ("B", "C"), **kw) -> None:
        self.store = ChatStore(tmp / site / "chat.db")
        self.journal = Journal(tmp / site / "journal", site, clock=lambda: 0.0)
        opts = dict(max_rooms_per_user=200, max_rooms=10_000, rooms_created_per_hour=60.0, rooms_created_burst=20,
                    rooms_page=500)
        opts.update(kw)
        self.core = ChatCore(site, peers, self.store, journal_n=0, roster_gen=1,
                             history=History(self.store, on_join=50, most=500, page_bytes=1 << 19), **opts)
        self.n = 0

    def step(self, actions: list) -> list:
        self.store.begin()
        after, _ = write(actions, self.store, self.journal)
        self.store.commit()
        for a in after:
            if isinstance(a, QueueReceipt):
                self.core.queue_receipt(a.origin, a.msg_id)
        return actions

    def deliver(self, origin: str, seq: int, payload, t: int, now: float = 0.0, late: bool = False,
                send_recorded: bool = True, repaired: bool = False, precedence: str = "routine") -> list:
        self.n += 1
        data = payload if isinstance(payload, bytes) else encode_payload(payload)
        d = Delivery(self.n, origin, seq, f"{origin}:{seq}", [t, origin], late, data, precedence, repaired)
        return self.step(self.core.delivery(d, self.core.decode(d), now, send_recorded))

    def records(self) -> list[dict]:
        return list(read_journal(self.journal.path))


def kinds(actions: list) -> list[str]:
    return [type(a).__name__ for a in actions]


def msg(room: str, user: str, text: str, **kw) -> ChatMessage:
    return ChatMessage(room, user, text, 1.0, "", **kw)


def test_a_message_is_stored_then_journaled_then_shown_and_receipted(tmp_path):
    a = Site(tmp_path)
    out = a.deliver("B", 1, msg("ops", "bob", "hello"), t=5)
    assert kinds(out) == ["StoreMessage", "JournalRecord", "ToRoom", "QueueReceipt"]
    assert out[1] == JournalRecord("deliver", dict(n=1, msg_id="B:1", origin="B", seq=1, order=[5, "B"], late=False,
                                                   room="ops", user="bob", text="hello", sent_at=1.0,
                                                   precedence=Precedence.ROUTINE, reply_to="", via=[]))
    assert out[2] == ToRoom("ops", out[0].message.frame())
    assert a.deliver("B", 1, msg("ops", "bob", "hello"), t=5) == []      # RCM replays it: dropped by msg_id
    assert [r["n"] for r in a.records()] == [1]
    a.step(a.core.rcm_connected({"B": "connected", "C": "disconnected"}))
    assert a.core.take_receipts() == [SendPayload(Receipts(("B:1",)), ("B",))]
    assert a.core.take_receipts() == []


def test_own_message_whose_rcm_answer_was_lost_gets_its_send_record_first(tmp_path):
    a = Site(tmp_path)
    p = ChatMessage("ops", "alice", "mine", 1.0, "c-1")
    out = a.deliver("A", 7, p, t=3, send_recorded=False)
    assert kinds(out) == ["JournalRecord", "RecordSent", "StoreMessage", "JournalRecord", "ToRoom", "ToUser"]
    assert [r["kind"] for r in a.records()] == ["send", "deliver"]
    assert out[1] == RecordSent("alice", "c-1", "A:7") and a.store.sent_msg_id("alice", "c-1") == "A:7"
    assert out[-1] == ToUser("alice", {"type": "receipt", "msg_id": "A:7", "site": "A"})
    a2 = Site(tmp_path / "again")                  # the say pipeline wrote the send record: not again
    assert kinds(a2.deliver("A", 7, p, t=3, send_recorded=True))[:2] == ["RecordSent", "StoreMessage"]


def test_a_messages_precedence_is_rcms_and_an_earlier_payload_copy_is_ignored(tmp_path):
    """Precedence is carried once, by RCM: the delivery's field decides what is stored, shown and journaled;
    an earlier release's copy in the payload (``pr``) cannot disagree with it any more."""
    a = Site(tmp_path)
    out = a.deliver("B", 1, msg("ops", "bob", "MEDEVAC"), t=5, precedence="flash")
    assert out[0].message.precedence is Precedence.FLASH and out[2].frame["precedence"] == "flash"
    assert out[1].fields["precedence"] is Precedence.FLASH
    claims_flash = msgpack.packb({"k": "m", "r": "ops", "u": "bob", "t": "not urgent", "s": 1.0, "c": "",
                                  "pr": "flash"}, use_bin_type=True)
    out = a.deliver("B", 2, claims_flash, t=6)                      # RCM carried it at routine
    assert out[0].message.precedence is Precedence.ROUTINE and out[2].frame["precedence"] == "routine"
    # A private room's message held for its definition keeps RCM's precedence until it is shown.
    tag = dict(definition="C:4", definition_order=(2, "C"))
    a.deliver("B", 3, msg("cell", "bob", "held", **tag), t=7, precedence="immediate")
    assert [h.precedence for h in a.store.held()] == [Precedence.IMMEDIATE]
    out = a.deliver("B", 4, RoomDefinition("cell", "carol", ("bob", "carol"), "C:4", (2, "C")), t=20)
    assert [x.frame["precedence"] for x in out if isinstance(x, ToRoom)] == ["immediate"]
    # The journal writes the name, and leaves routine out (Contract 3: an optional field).
    assert [(r["msg_id"], r.get("precedence")) for r in a.records() if r["kind"] == "deliver"] == [
        ("B:1", "flash"), ("B:2", None), ("B:3", "immediate")]


def test_values_no_site_could_store_are_refused_before_anything_is_applied(tmp_path):
    a = Site(tmp_path)
    for order, payload in (([1 << 63, "B"], encode_payload(msg("ops", "bob", "x"))),
                           ([1, "B"], b"\x93\x01\x02\x03"),
                           ([1, "B"], encode_payload(msg("ops", "bob", "x")).replace(b"ops", b"o\no"))):
        with pytest.raises(PayloadError):
            a.core.decode(Delivery(1, "B", 1, "B:1", order, False, payload))


def test_a_private_rooms_message_is_held_until_its_definition_then_shown_late_to_members(tmp_path):
    a = Site(tmp_path)
    tag = dict(definition="C:4", definition_order=(2, "C"))
    out = a.deliver("B", 1, msg("cell", "bob", "classified", **tag), t=10, now=100.0)
    assert kinds(out) == ["HoldMessage", "SendPayload", "JournalRecord"]   # held, asked for, journaled as control
    assert out[1] == SendPayload(DefinitionRequest("cell"), ("B",))       # the sender knows the definition
    assert out[2] == JournalRecord("control", dict(msg_id="B:1", origin="B", seq=1, order=[10, "B"], late=False))
    assert "cell" in a.core.rooms.pending
    with pytest.raises(Refusal):
        a.core.rooms.check_access("eve", "cell", "join")
    # Another held message soon after: no second request within the interval (virtual clock) ...
    out = a.deliver("B", 2, msg("cell", "bob", "more", **tag), t=11, now=100.0 + DEFINITION_REQUEST_INTERVAL - 1)
    assert kinds(out) == ["HoldMessage", "JournalRecord"]
    out = a.deliver("B", 3, msg("cell", "eve", "not a member", **tag), t=12,
                    now=100.0 + DEFINITION_REQUEST_INTERVAL)                # ... then one again
    assert kinds(out) == ["HoldMessage", "SendPayload", "JournalRecord"]
    # The definition arrives, re-sent by B with C's identity: the members' messages are shown, late and marked.
    out = a.deliver("B", 4, RoomDefinition("cell", "carol", ("bob", "carol"), "C:4", (2, "C")), t=20)
    shown = [x for x in out if isinstance(x, JournalRecord) and x.kind == "deliver"]
    assert [(r.fields["text"], r.fields["late"], r.fields["held"]) for r in shown] == [
        ("classified", True, True), ("more", True, True)]
    assert sorted(x.msg_id for x in out if isinstance(x, ReleaseHeld)) == ["B:1", "B:2", "B:3"]
    assert not a.store.held() and "cell" not in a.core.rooms.pending
    assert a.core.rooms.private["cell"].msg_id == "C:4"                   # the original identity, not B's
    # The journal: each RCM delivery once, in RCM's order (control or deliver), then the held ones shown.
    assert [(r["kind"], r["msg_id"]) for r in a.records()] == [
        ("control", "B:1"), ("control", "B:2"), ("control", "B:3"), ("control", "B:4"),
        ("deliver", "B:1"), ("deliver", "B:2")]


def test_definitions_decide_the_same_way_everywhere_and_tell_removed_members_who_did_it(tmp_path):
    a = Site(tmp_path)
    a.step(a.core.join("eve", "war", 0.0)[0])
    out = a.deliver("B", 1, RoomDefinition("war", "bob", ("bob",)), t=5)
    assert StoreMembership("eve", "war", False) in out
    assert ToUser("eve", {"type": "left", "room": "war",
                          "reason": "room 'war' was made private by bob at B; you are not a member"}) in out
    later = a.deliver("C", 1, RoomDefinition("war", "carol", ("carol",)), t=9)              # later, other owner
    assert kinds(later) == ["StoreDefinition", "JournalRecord"]                             # known, not applied
    assert a.core.rooms.private["war"].owner == "bob"
    a.deliver("C", 2, RoomDefinition("war", "carol", ("carol",)), t=2)                      # earlier: it wins
    assert a.core.rooms.private["war"].owner == "carol"
    a.deliver("B", 2, RoomDefinition("war", "bob", ("bob", "dave")), t=30)                  # the loser's update
    assert a.core.rooms.private["war"].members == {"carol"}


def test_a_peer_back_from_a_disconnection_gets_every_known_definition(tmp_path):
    a = Site(tmp_path)
    a.deliver("B", 1, RoomDefinition("cell", "bob", ("bob",)), t=5)
    a.step(a.core.rcm_connected({"B": "connected", "C": "disconnected"}))
    out = a.step(a.core.status_change("C", "connected"))
    assert SendPayload(RoomDefinition("cell", "bob", ("bob",), "B:1", (5, "B")), ("C",)) in out
    assert Broadcast({"type": "site_status", "site": "C", "status": "connected"}) in out
    assert [(r["peer"], r["status"]) for r in a.records() if r["kind"] == "status"] == [
        ("B", "connected"), ("C", "disconnected"), ("C", "connected")]
    assert a.step(a.core.status_change("C", "connected")) == []           # nothing new


def test_missing_messages_are_journaled_in_bounded_records_and_shown_as_ranges(tmp_path):
    a = Site(tmp_path)
    out = a.step(a.core.missing("B", ((1, 25_000), (30_000, 30_000))))
    records = [x for x in out if isinstance(x, JournalRecord)]
    assert [r.fields["ranges"] for r in records] == [[[1, 25_000]], [[30_000, 30_000]]]
    written = [r for r in a.records() if r["kind"] == "missing"]
    assert [(r["count"], r.get("seqs")) for r in written] == [(25_000, None), (1, [30_000])]   # seqs: 10,000 at most
    assert out[-1] == Broadcast({"type": "missing", "origin": "B", "count": 25_001,
                                 "ranges": [[1, 25_000], [30_000, 30_000]], "more": False})


def test_repaired_messages_are_stored_in_place_marked_and_revise_the_missing_notice(tmp_path):
    a = Site(tmp_path)
    a.deliver("B", 1, msg("ops", "bob", "before"), t=1)
    a.deliver("B", 4, msg("ops", "bob", "after"), t=9)
    a.step(a.core.missing("B", ((2, 3),)))
    assert notices(a.step(a.core.take_recovered())) == []        # nothing came back yet
    out = a.deliver("B", 2, msg("ops", "bob", "lost, then repaired"), t=5, late=True, repaired=True)
    shown = [x.frame for x in out if isinstance(x, ToRoom)]
    assert shown[0]["repaired"] is True and shown[0]["late"] is True and shown[0]["order"] == [5, "B"]
    deliver = [r for r in a.records() if r["kind"] == "deliver"][-1]
    assert deliver["repaired"] is True and deliver["msg_id"] == "B:2"
    # In place in history, marked; a copy from another holder is not shown twice.
    texts = [m.text for m in a.store.history("ops", 10)[0]]
    assert texts == ["before", "lost, then repaired", "after"] and a.store.message("B:2").repaired
    again = a.deliver("B", 2, msg("ops", "bob", "lost, then repaired"), t=5, late=True, repaired=True)
    assert not any(isinstance(x, ToRoom) for x in again) and sum(r["kind"] == "deliver" for r in a.records()) == 3
    # One revised notice per tick: how many came back, what is still missing.
    assert notices(a.step(a.core.take_recovered())) == [Broadcast({"type": "missing", "origin": "B", "count": 1,
                                                                   "ranges": [[3, 3]], "more": False,
                                                                   "recovered": 1})]
    assert a.store.get_state(LOSSES_STATE) == {"B": [[3, 3]]}          # stored with the revision
    a.deliver("B", 3, Receipts(()), t=6, late=True, repaired=True)        # a control message counts as well
    assert notices(a.step(a.core.take_recovered())) == [Broadcast({"type": "missing", "origin": "B", "count": 0,
                                                                   "ranges": [], "more": False, "recovered": 1})]
    assert a.core.losses.lost == {} and a.step(a.core.take_recovered()) == []
    assert a.store.get_state(LOSSES_STATE) == {}


def notices(actions: list) -> list:
    return [x for x in actions if isinstance(x, Broadcast)]


def test_rosters_name_private_rooms_and_a_site_that_hears_of_one_closes_it(tmp_path):
    a = Site(tmp_path)
    a.step(a.core.rcm_connected({"B": "connected", "C": "connected"}))
    out = a.deliver("B", 1, Roster(3, ("bob",), {"cell": ("bob",)}, {"cell": "B:9"}), t=4, now=10.0)
    assert a.core.rooms.pending == {"cell": Claim("B:9", "B", 10.0 + CLAIM_TIMEOUT)}
    assert SendPayload(DefinitionRequest("cell"), ("B",)) in out          # the claimer is asked for it
    assert a.core.rooms.rosters["B"].online == {"bob"}
    assert a.core.room_list("alice", [], "", 10)["rooms"] == []
    a.step(a.core.join("alice", "cell2", 0.0)[0])
    actions, sent = a.core.publish_roster(frozenset({"alice"}))
    assert sent is not None and isinstance(roster := sent.payload, Roster)
    assert roster.rooms == {"cell2": ("alice",)} and roster.private == {}
    assert Broadcast({"type": "presence", "site": "A", "online": ["alice"], "offline": []}) in actions
    assert StoreRosterGeneration(roster.generation) in actions      # stored before it is sent


def test_a_roster_names_the_peers_whose_roster_is_lacking_and_a_peer_named_publishes_its_own(tmp_path):
    a = Site(tmp_path, compact=False)         # just (re)started: no roster of B or C yet
    a.step(a.core.rcm_connected({"B": "connected", "C": "connected"}))
    _, sent = a.core.publish_roster(frozenset())
    assert sent is not None and sent.payload.want == ("B", "C")
    a.core.roster_force = False               # (the edge clears it once sent)
    a.deliver("B", 1, Roster(3, ("bob",), {}), t=2)
    assert a.core.publish_roster(frozenset())[1] is None          # B's roster asked nothing of A
    a.deliver("C", 1, Roster(5, (), {}, want=("A", "B")), t=3)     # C restarted: it lacks A's roster
    _, sent = a.core.publish_roster(frozenset())
    assert sent is not None and isinstance(roster := sent.payload, Roster)
    assert roster.want == ()                                      # sent at once, asking nothing more
    assert decode_payload(encode_payload(roster)).want == () and \
        decode_payload(encode_payload(Roster(1, (), {}, want=("A",)))).want == ("A",)
    with pytest.raises(PayloadError):
        decode_payload(msgpack.packb({"k": "p", "g": 1, "on": [], "rm": {}, "w": ["not a site!"]}))


def test_a_peers_chat_server_gone_takes_its_users_offline_and_only_a_newer_roster_brings_them_back(tmp_path):
    a = Site(tmp_path)
    a.deliver("B", 1, Roster(3, ("bob", "bea"), {"ops": ("bob",)}), t=1)
    assert a.core.rooms.rosters["B"].online == {"bob", "bea"}
    a.core.status_change("B", "connected", "C")
    out = a.deliver("B", 5, ServerGone(), t=2)            # B's will, sent by B's RCM server (B:2-4 missed here)
    # (kept across a restart of ours; journaled as every control payload is)
    assert kinds(out) == ["StoreChatGone", "Broadcast", "Broadcast", "JournalRecord"]
    assert out[0] == StoreChatGone((("B", 5),))
    # Clients are told that RCM still reaches B (through C) but its chat server is gone, and who went offline.
    assert out[1] == Broadcast({"type": "site_status", "site": "B", "status": "connected", "via": "C",
                                "chat_down": True})
    assert out[2] == Broadcast({"type": "presence", "site": "B", "online": [], "offline": ["bea", "bob"]})
    assert a.core.rooms.rosters["B"].online == frozenset()
    assert a.core.rooms.rosters["B"].rooms == {"ops": {"bob"}}     # who is in which room does not change
    # Its next server went too before we heard from it: the later will counts, nothing more is shown.
    assert kinds(a.deliver("B", 6, ServerGone(), t=3)) == ["StoreChatGone", "JournalRecord"]
    assert "Broadcast" not in kinds(a.deliver("B", 1, Roster(3, ("bob", "bea"), {}), t=1, repaired=True))  # old
    # A roster B sent before its will, missed here and repaired now: newer than the one held, yet its server is
    # gone. Its generation is taken (a delta after it applies), nobody comes online, the chat server stays down.
    out = a.deliver("B", 4, Roster(4, ("bob", "bea"), {"ops": ("bob", "bea")}), t=2, repaired=True)
    assert "Broadcast" not in kinds(out)
    assert a.core.rooms.rosters["B"].generation == 4 and a.core.rooms.rosters["B"].online == frozenset()
    # RCM's view of B changes meanwhile: shown with the chat server still down.
    assert a.core.status_change("B", "suspected")[-1] == Broadcast(
        {"type": "site_status", "site": "B", "status": "suspected", "chat_down": True})
    assert a.core.chat_gone == {"B": 6}
    # Our own chat server restarts: it still knows (its RCM server will not deliver the will again).
    again = ChatCore("A", ("B", "C"), a.store, journal_n=0, roster_gen=2, max_rooms_per_user=200, max_rooms=10_000,
                     rooms_created_per_hour=60.0, rooms_created_burst=20, rooms_page=500,
                     history=History(a.store, on_join=50, most=500, page_bytes=1 << 19))
    assert again.chat_gone == {"B": 6}
    out = a.deliver("B", 7, Roster(5, ("bob",), {"ops": ("bob",)}), t=4)       # B's server is back
    assert Broadcast({"type": "presence", "site": "B", "online": ["bob"], "offline": []}) in out
    assert Broadcast({"type": "site_status", "site": "B", "status": "suspected"}) in out
    assert StoreChatGone(()) in out and a.core.chat_gone == {}
    assert "Broadcast" not in kinds(a.deliver("A", 9, ServerGone(), t=5))   # our own, replayed: nothing
    assert a.core.chat_gone == {}
    assert decode_payload(encode_payload(ServerGone())) == ServerGone()
    assert decode_payload(msgpack.packb({"k": "g"})) == ServerGone()


def test_new_room_names_are_rate_limited_on_the_virtual_clock(tmp_path):
    a = Site(tmp_path, rooms_created_per_hour=3600.0, rooms_created_burst=2)
    a.step(a.core.join("alice", "r1", 0.0)[0])
    a.step(a.core.join("alice", "r2", 0.0)[0])
    with pytest.raises(Refusal) as e:
        a.core.join("alice", "r3", 0.5)
    assert e.value.code == "limit"
    a.step(a.core.join("alice", "r1", 0.5)[0])          # a known room is always open
    a.step(a.core.join("alice", "r3", 1.0)[0])          # one second later: one more token


def test_the_barrier_and_definition_requests(tmp_path):
    a = Site(tmp_path)
    assert kinds(a.deliver("A", 3, Barrier("t"), t=1)) == ["BarrierReached", "JournalRecord"]
    assert kinds(a.deliver("B", 3, Barrier("t"), t=2)) == ["JournalRecord"]    # another site's: none of ours
    a.deliver("B", 4, RoomDefinition("cell", "bob", ("bob",)), t=3)
    assert a.deliver("C", 1, DefinitionRequest("cell"), t=4)[0] == \
        SendPayload(RoomDefinition("cell", "bob", ("bob",), "B:4", (3, "B")), ("C",))
    assert kinds(a.deliver("C", 2, DefinitionRequest("nothing"), t=5)) == ["JournalRecord"]


def test_a_rolled_back_step_leaves_the_core_as_the_database_is(tmp_path):
    a = Site(tmp_path)
    out = a.core.join("alice", "ops", 0.0)[0]            # computed, never written
    assert "ops" in a.core.rooms.rooms_of("alice")
    a.core.rollback(journal_n=0)
    assert "ops" not in a.core.rooms.rooms_of("alice") and out
    hold = a.core.delivery(Delivery(1, "B", 1, "B:1", [1, "B"], False,
                             encode_payload(msg("x", "bob", "y", definition="B:7", definition_order=(1, "B")))),
                           None, 0.0)
    assert kinds(hold) == ["JournalRecord"]               # a refused payload (None): only its place is journaled


def test_a_join_of_a_room_with_messages_starts_the_read_marker_at_its_last_message_in_the_same_step(tmp_path):
    a = Site(tmp_path)
    a.deliver("B", 1, msg("ops", "bob", "first"), t=5)
    a.deliver("B", 2, msg("ops", "bob", "second"), t=6)
    actions, frame = a.core.join("alice", "ops", 0.0)
    assert actions == [StoreMembership("alice", "ops", True), StoreReadMarker("alice", "ops", [6, "B"], 2)]
    assert frame["read"] == [6, "B"]
    a.step(actions)
    assert a.store.read_marker("alice", "ops") == [6, "B"] and a.store.unread("alice", ["ops"]) == ({}, {})
    assert a.core.join("alice", "ops", 0.0)[0] == []              # already a member: nothing changes
    actions, frame = a.core.join("alice", "empty", 0.0)
    assert actions == [StoreMembership("alice", "empty", True)] and "read" not in frame


def test_a_read_marker_moves_forward_never_back_and_only_in_a_joined_room(tmp_path):
    a = Site(tmp_path)
    a.step(a.core.join("alice", "ops", 0.0)[0])
    a.deliver("B", 1, msg("ops", "bob", "first"), t=5)
    actions, frame = a.core.mark_read("alice", "ops", [9, "B"])
    assert actions == [StoreReadMarker("alice", "ops", [9, "B"], 1)] and frame == {"type": "read", "room": "ops",
                                                                                   "order": [9, "B"]}
    a.step(actions)
    actions, frame = a.core.mark_read("alice", "ops", [5, "B"])    # back: stored as asked, the store keeps [9]
    assert frame["order"] == [9, "B"]
    a.step(actions)
    assert a.store.read_marker("alice", "ops") == [9, "B"]
    with pytest.raises(Refusal, match="join room 'ops' first"):
        a.core.mark_read("bob", "ops", [9, "B"])


def test_journaled_deliveries_the_database_lacks_are_stored_once_and_shown(tmp_path):
    a = Site(tmp_path)
    a.deliver("B", 1, msg("ops", "bob", "stored already"), t=5)
    records = [r for r in a.records() if r["kind"] == "deliver"]
    lost = dict(records[0], n=2, msg_id="B:2", seq=2, text="journaled, never stored", at=3.0)
    out = a.core.recovered(records + [lost, lost])
    assert kinds(out) == ["StoreMessage", "ToRoom", "StoreJournalN"]
    assert isinstance(out[0], StoreMessage) and out[0].message.text == "journaled, never stored"
    assert out[1] == ToRoom("ops", out[0].message.frame()) and out[2] == StoreJournalN(2)
    a.step(out)
    assert a.core.journal_n == 2 and a.store.get_state("journal_n") == 2
    assert [m.text for m in a.store.history("ops", 10)[0]] == ["stored already", "journaled, never stored"]
    assert a.core.recovered([]) == []


def test_a_message_of_this_sites_own_users_is_never_shown_late_here(tmp_path):
    a = Site(tmp_path)
    out = a.deliver("A", 1, msg("ops", "alice", "MEDEVAC"), t=5, late=True, precedence="flash")
    stored = next(x.message for x in out if isinstance(x, StoreMessage))
    assert stored.late is False and ToRoom("ops", stored.frame()) in out
    assert stored.frame()["late"] is False and a.store.message("A:1").late is False      # history too
    record = next(x for x in out if isinstance(x, JournalRecord) and x.kind == "deliver")
    assert record.fields["late"] is True                          # the journal keeps RCM's flag
    other = a.deliver("B", 1, msg("ops", "bob", "late from B"), t=3, late=True)
    assert next(x.message for x in other if isinstance(x, StoreMessage)).frame()["late"] is True
    # A delivery stored from the journal after a crash is shown by the same rule.
    lost = dict(record.fields, n=3, msg_id="A:2", seq=2, at=4.0)
    again = a.core.recovered([lost])
    assert next(x.message for x in again if isinstance(x, StoreMessage)).late is False


def test_an_acknowledgement_is_journaled_and_shown_once_per_user_and_message(tmp_path):
    a = Site(tmp_path)
    a.deliver("B", 1, msg("ops", "bob", "MEDEVAC"), t=5, precedence="flash")
    first = a.deliver("A", 1, Acknowledgement("B:1", "alice", 10.0), t=6)
    assert [x.kind for x in first if isinstance(x, JournalRecord)] == ["control", "acknowledge"]
    assert ToRoom("ops", {"type": "acknowledged", "msg_id": "B:1", "user": "alice", "site": "A", "at": 10.0}) in first
    repeat = a.deliver("A", 2, Acknowledgement("B:1", "alice", 10.03), t=7)     # sent twice, 30 ms apart
    assert kinds(repeat) == ["JournalRecord"] and repeat[0].kind == "control"      # its place in the order only
    assert [r["kind"] for r in a.records()].count("acknowledge") == 1
    assert a.store.acknowledgements_of(["B:1"]) == {"B:1": [{"user": "alice", "site": "A", "at": 10.0}]}
    other = a.deliver("C", 1, Acknowledgement("B:1", "alice", 11.0), t=8)           # alice of C is someone else
    assert any(isinstance(x, ToRoom) for x in other)


def test_changed_directory_entries_are_pushed_once_and_a_private_rooms_only_to_its_members(tmp_path):
    a = Site(tmp_path)
    a.step(a.core.rcm_connected({"B": "connected", "C": "connected"}))
    a.step(a.core.join("alice", "ops", 0.0)[0])
    a.deliver("B", 1, Roster(3, ("bob",), {"ops": ("bob",), "intel": ("bea",)}), t=2)
    a.deliver("B", 2, msg("ops", "bob", "hello"), t=3)
    assert a.core.take_directory() == [ToDirectoryReaders({"type": "directory_update", "rooms": [
        {"room": "intel", "private": False, "members": 1, "last_at": None},
        {"room": "ops", "private": False, "members": 2, "last_at": 1.0}], "removed": []})]
    assert a.core.take_directory() == []                                   # nothing changed since
    # intel is made private at B (alice not a member): withdrawn from everyone, shown to its members only.
    a.deliver("B", 3, RoomDefinition("intel", "bea", ("bea", "carl")), t=4)
    entry = {"room": "intel", "private": True, "members": 2, "last_at": None}      # its definition's: bea, carl
    assert a.core.take_directory() == [
        ToDirectoryReaders({"type": "directory_update", "rooms": [], "removed": ["intel"]}),
        ToDirectoryReaders({"type": "directory_update", "rooms": [entry], "removed": []}, ("bea", "carl"))]
    out = a.deliver("B", 4, RoomDefinition("intel", "bea", ("bea",)), t=5)     # carl is no longer a member
    assert ToDirectoryReaders({"type": "directory_update", "rooms": [], "removed": ["intel"]}, ("carl",)) in out
    assert [x.users for x in a.core.take_directory()] == [("bea",)]
    # A roster naming many rooms is pushed a page at a time (rooms_page), never in one huge frame.
    a.core.rooms_page = 2
    a.deliver("C", 1, Roster(4, (), {f"r{i}": ("carl",) for i in range(5)}), t=6)
    pushed = [[e["room"] for e in x.frame["rooms"]] for x in (a.core.take_directory() + a.core.take_directory()
                                                               + a.core.take_directory() + a.core.take_directory())]
    assert pushed == [["r0", "r1"], ["r2", "r3"], ["r4"]]
