"""The compact (array) layout of chat payloads (chat_server/payload_arrays.py) and what rides on it in the core:
roster deltas, tips and requests, receipts per origin, an own message found by its sent_at."""
from __future__ import annotations

import msgpack
import pytest
from test_chat_core import Site

from chat_server.actions import RecordSent, SendPayload, StorePending
from chat_server.journal import Journal
from chat_server.payload import (
    ChatMessage,
    PayloadError,
    Receipts,
    Roster,
    RosterDelta,
    RosterRequest,
    RosterTip,
    decode_payload,
    encode_payload,
)
from chat_server.payload_arrays import compact_time, runs
from chat_server.sending import SayPipeline

LINE = "x" * 60
T = compact_time(1_780_000_123.456789)


def test_every_compact_kind_decodes_to_what_was_encoded():
    for p in (ChatMessage("ops", "alice", LINE, T, ""),
              ChatMessage("ops", "alice", "hi", T, "", "A:3", (5, "A"), "B:7", ("A:1", "A:2", "A:3", "C:9")),
              ChatMessage("ops", "alice", "re", T, "", reply_to="B:2"),
              Roster(1_780_000_000_000_000_000, ("a", "b"), {"ops": ("a",)}, {"ops": "A:4"}, ("B",)),
              Roster(2, (), {}),
              RosterDelta(5, ("a",), ("b",), {"ops": ("a",)}, {"x": ("b",)}, {"ops": "A:4"}), RosterDelta(6),
              RosterTip(7), RosterRequest(), Receipts(("A:1", "A:2", "A:5", "B:100"))):
        data = encode_payload(p, compact=True)
        assert msgpack.unpackb(data)[0] in range(1, 8)
        assert decode_payload(data) == p, p


def test_a_sixty_character_line_costs_its_text_room_user_and_time_only():
    compact = encode_payload(ChatMessage("ops", "alice", LINE, T, "c0ffee00c0ffee00"), compact=True)
    maps = encode_payload(ChatMessage("ops", "alice", LINE, T, "c0ffee00c0ffee00"))
    # 2 array/code + 4 room + 6 user + 62 text + 6 time: no client_id, no keys
    assert len(compact) == 80 and len(maps) == 113
    assert decode_payload(maps).client_id == "c0ffee00c0ffee00"      # the earlier layout still decodes


def test_times_travel_to_the_hundredth_and_a_compact_time_is_stable():
    assert compact_time(1_780_000_000.129) == 1_780_000_000.12
    assert compact_time(T) == T
    p = decode_payload(encode_payload(ChatMessage("ops", "a", "t", 1_780_000_000.999, ""), compact=True))
    assert isinstance(p, ChatMessage) and p.sent_at == 1_780_000_000.99


def test_receipts_are_runs_of_sequence_numbers_per_origin():
    assert runs([1, 2, 3, 7, 8, 20]) == [1, 2, 4, 1, 12, 0]
    many = tuple(f"A:{s}" for s in range(1000, 3000))
    assert len(encode_payload(Receipts(many), compact=True)) == 12       # 2,000 receipts
    assert decode_payload(encode_payload(Receipts(many), compact=True)) == Receipts(many)


@pytest.mark.parametrize("body", [
    [], [True], [99], ["m"], [1, "ops", "a", "t", 5], [1, "ops", "a", "t", 5, 100], [1, "ops", "a", "t", -1, 0],
    [1, "ops", "a", "t", 2 ** 63, 0], [1, "ops", "a", "t", 5, 0, "nope"], [1, "o ps", "a", "t", 5, 0],
    [1, "ops", "a", "t", 5, 0, "", {"A": [1, 2 ** 62]}],     # a run naming 2^62 messages: refused, not listed
    [1, "ops", "a", "t", 5, 0, "", {"A": [1]}], [1, "ops", "a", "t", 5, 0, "", {"A": [0, 0]}],
    [1, "ops", "a", "t", 5, 0, "", {"A": [1, 0, 0, 0]}], [1, "ops", "a", "t", 5, 0, "", {}, "A:1", [True]],
    [3, -1, []], [3, 1, ["bad name!"]], [3, 1, [], {"ops": "a"}], [4], [4, {"not a site!": [1, 0]}],
    [4, {"A": [1, 9999, 1, 0]}], [5], [5, 1, ["a"] * 10_001], [6], [6, 1, 2], [1, 2, 3],
])
def test_malformed_arrays_are_refused(body):
    with pytest.raises(PayloadError):
        decode_payload(msgpack.packb(body))


def test_a_receipt_batch_is_one_payload_to_every_origin_it_names_and_each_reads_its_own(tmp_path):
    a = Site(tmp_path, "A", ("B", "C"), compact=True)
    a.step(a.core.rcm_connected({"B": "connected", "C": "connected"}))
    a.deliver("B", 1, ChatMessage("ops", "bob", "1", 1.0, ""), t=2)
    a.deliver("C", 4, ChatMessage("ops", "cat", "2", 1.0, ""), t=3)
    a.deliver("B", 2, ChatMessage("ops", "bob", "3", 1.0, ""), t=4)
    [batch] = a.core.take_receipts()
    assert batch == SendPayload(Receipts(("B:1", "B:2", "C:4")), ("B", "C"))
    b = Site(tmp_path / "b", "B", ("A", "C"), compact=True)
    b.step(b.core.rcm_connected({"A": "connected", "C": "connected"}))
    for n in (1, 2):
        b.deliver("B", n, ChatMessage("ops", "bob", str(n), 1.0, ""), t=n)
    b.deliver("A", 9, encode_payload(batch.payload, compact=True), t=5)
    assert b.store.has_receipt("B:1", "A") and b.store.has_receipt("B:2", "A") and not b.store.has_receipt("C:4", "A")


def test_without_compact_payloads_a_receipt_batch_goes_to_each_origin_naming_only_its_messages(tmp_path):
    a = Site(tmp_path, compact=False)
    a.step(a.core.rcm_connected({"B": "connected", "C": "connected"}))
    a.deliver("B", 1, ChatMessage("ops", "bob", "1", 1.0, ""), t=2)
    a.deliver("C", 4, ChatMessage("ops", "cat", "2", 1.0, ""), t=3)
    assert a.core.take_receipts() == [SendPayload(Receipts(("B:1",)), ("B",)), SendPayload(Receipts(("C:4",)), ("C",))]


def test_a_receipt_waits_for_a_message_to_ride_in_until_the_oldest_has_waited(tmp_path):
    a = Site(tmp_path, compact=True)
    a.step(a.core.rcm_connected({"B": "connected", "C": "connected"}))
    a.core.queue_receipt("B", "B:1", now=10.0)
    a.core.queue_receipt("C", "C:1", now=10.3)
    assert a.core.take_receipts(now=10.3, wait=0.375) == []          # the oldest waited 0.3 s: not yet
    assert a.core.receipts_along() == ("B:1", "C:1")                 # a chat message takes them
    assert a.core.take_receipts(now=10.5, wait=0.375) == []
    a.core.queue_receipt("B", "B:2", now=11.0)                       # a new oldest
    assert a.core.take_receipts(now=11.3, wait=0.375) == []
    assert a.core.take_receipts(now=11.4, wait=0.375) == [SendPayload(Receipts(("B:2",)), ("B",))]


def publish(site: Site, online: frozenset[str] = frozenset()) -> tuple[list, SendPayload | None]:
    actions, sent = site.core.publish_roster(online)
    site.step([x for x in actions if not isinstance(x, SendPayload)])
    return [x for x in actions if isinstance(x, SendPayload)], sent


def test_rosters_travel_as_deltas_and_a_site_that_missed_one_asks_for_a_full_roster(tmp_path):
    a, b = Site(tmp_path, "A", ("B", "C"), compact=True), Site(tmp_path, "B", ("A", "C"), compact=True)
    for s in (a, b):
        s.step(s.core.rcm_connected({p: "connected" for p in s.core.peers}))
    _, full = publish(a, frozenset({"alice"}))
    assert full is not None and isinstance(full.payload, Roster) and full.dests == ("B", "C")
    b.deliver("A", 1, full.payload, t=1)
    a.step(a.core.join("alice", "ops", 0.0)[0])
    _, delta = publish(a, frozenset({"alice", "anna"}))
    assert delta is not None and delta.payload == RosterDelta(full.payload.generation + 1, ("anna",), (),
                                                              {"ops": ("alice",)})
    b.deliver("A", 2, delta.payload, t=2)
    assert b.core.rooms.rosters["A"].online == {"alice", "anna"} and b.core.rooms.members_of("ops") == {"alice"}
    assert publish(a, frozenset({"alice", "anna"})) == ([], None)          # nothing new: nothing sent

    _, lost = publish(a, frozenset({"alice"}))                             # B misses this one ...
    _, delta = publish(a, frozenset())
    assert lost is not None and delta is not None
    out = b.deliver("A", 4, delta.payload, t=4, now=10.0)                  # ... and sees the gap
    assert SendPayload(RosterRequest(), ("A",)) in out
    assert b.core.rooms.rosters["A"].online == {"alice", "anna"}           # (not applied on the wrong base)
    assert SendPayload(RosterRequest(), ("A",)) not in b.deliver("A", 5, delta.payload, t=5, now=11.0)
    a.deliver("B", 1, RosterRequest(), t=6)
    owed, sent = publish(a)
    assert sent is None and owed == [SendPayload(Roster(delta.payload.generation, (), {"ops": ("alice",)}, {},
                                                        ("B", "C")), ("B",))]      # (A lacks B's and C's)
    b.deliver("A", 6, owed[0].payload, t=7)
    assert b.core.rooms.rosters["A"].online == set() and b.core.rooms.members_of("ops") == {"alice"}


def test_a_peer_back_from_a_disconnection_is_told_the_generation_and_asks_if_behind(tmp_path):
    a, b = Site(tmp_path, "A", ("B",), compact=True), Site(tmp_path, "B", ("A",), compact=True)
    for s in (a, b):
        s.step(s.core.rcm_connected({p: "connected" for p in s.core.peers}))
    _, full = publish(a, frozenset({"alice"}))
    b.deliver("A", 1, full.payload, t=1)
    a.step(a.core.status_change("B", "disconnected"))
    assert publish(a, frozenset()) == ([], None)             # nobody reachable: kept for later
    a.step(a.core.status_change("B", "connected"))
    _, delta = publish(a, frozenset())
    assert delta is not None and delta.dests == ("B",)       # the change, which tells the generation too
    a.step(a.core.status_change("B", "disconnected"))
    a.step(a.core.status_change("B", "connected"))
    tips, sent = publish(a, frozenset())
    assert sent is None and tips == [SendPayload(RosterTip(delta.payload.generation), ("B",))]
    # B never got the delta (it was cut off again): the tip shows it is behind, and it asks
    assert SendPayload(RosterRequest(), ("A",)) in b.deliver("A", 3, tips[0].payload, t=3, now=5.0)
    b.deliver("A", 2, delta.payload, t=2, now=6.0)           # had it come: applied, and the tip is old news
    assert b.core.rooms.rosters["A"].online == set()
    assert not any(isinstance(x, SendPayload) for x in b.deliver("A", 4, tips[0].payload, t=4, now=7.0))


def test_an_own_message_whose_rcm_answer_was_lost_is_found_by_its_sent_at(tmp_path):
    a = Site(tmp_path, compact=True)
    pipeline = SayPipeline("A", a.store, Journal(tmp_path / "pj", "A", clock=lambda: 0.0), lambda: None,
                           lambda: T, a.step, compact=True)
    first = pipeline._sent_at("alice")
    a.step([StorePending("alice", "c-1", first)])
    second = pipeline._sent_at("alice")                      # distinct from the pending say's
    a.step([StorePending("alice", "c-2", second)])
    assert first == T and second == compact_time(T + 0.01) and pipeline._sent_at("bob") == T
    out = a.deliver("A", 7, encode_payload(ChatMessage("ops", "alice", "mine", second, ""), compact=True), t=3,
                    send_recorded=False)
    assert RecordSent("alice", "c-2", "A:7") in out and a.store.sent_msg_id("alice", "c-2") == "A:7"
    assert a.store.is_pending("alice", "c-1") and not a.store.is_pending("alice", "c-2")
    assert [r["kind"] for r in a.records()] == ["send", "deliver"]


def test_receipts_ride_along_in_a_chat_message_and_each_origin_reads_its_own(tmp_path):
    b, a = Site(tmp_path, "B", ("A", "C"), compact=True), Site(tmp_path, "A", ("B", "C"), compact=True)
    for s in (a, b):
        s.step(s.core.rcm_connected({p: "connected" for p in s.core.peers}))
    a.deliver("A", 1, ChatMessage("ops", "alice", "mine", T, ""), t=1)           # (A's own: stored, shown)
    b.deliver("A", 1, ChatMessage("ops", "alice", "mine", T, ""), t=1)
    b.deliver("C", 3, ChatMessage("ops", "cat", "hers", T, ""), t=2)
    along = b.core.receipts_along()
    assert along == ("A:1", "C:3") and b.core.take_receipts() == []          # taken: no batch of their own
    out = a.deliver("B", 5, encode_payload(ChatMessage("ops", "bob", "hi", T, "", receipts=along), compact=True), t=3)
    assert a.store.has_receipt("A:1", "B") and not a.store.has_receipt("C:3", "B")
    assert kinds_of(out)[:2] == ["StoreReceipt", "ToUser"]
    b.core.requeue_receipts(along)                                           # (RCM refused the message)
    assert b.core.take_receipts(now=0.0, wait=10.0) == [SendPayload(Receipts(("A:1", "C:3")), ("A", "C"))]   # at once


def kinds_of(actions: list) -> list[str]:
    return [type(x).__name__ for x in actions]
