"""Group commit's queue and the liveness heartbeats that may overtake it (rcm/server/commits.py), sans-IO."""
from __future__ import annotations

from rcm import wire
from rcm.server.commits import Commits, Keepalive


def test_a_batch_with_nothing_forced_and_nothing_held_goes_at_once():
    q: Commits[str] = Commits()
    assert q.add("status event", forced=False) == ["status event"]
    assert not q.start() and len(q) == 0


def test_a_forced_batch_waits_for_the_sync_that_covers_it():
    q: Commits[str] = Commits()
    assert q.add("accepted 1", forced=True) == []
    assert q.start() and q.in_flight
    assert not q.start()                         # one sync in flight at a time
    assert q.done() == ["accepted 1"]
    assert not q.in_flight and len(q) == 0


def test_batches_behind_a_sync_in_flight_share_the_next_one_and_keep_their_order():
    q: Commits[str] = Commits()
    q.add("b1", forced=True)
    assert q.start()
    # While the first sync runs: forced and unforced batches queue behind it, whatever they log.
    assert q.add("b2", forced=True) == []
    assert q.add("b3 heartbeat", forced=False) == []
    assert q.add("b4", forced=True) == []
    assert q.add("b5 heartbeat", forced=False) == []
    assert q.done() == ["b1"]                    # b2 was not covered: it waits, and so does all behind it
    assert q.start()                             # one sync for b2..b5 (group commit)
    assert q.add("b6", forced=False) == []       # behind the held ones, though it logs nothing forced
    assert q.done() == ["b2", "b3 heartbeat", "b4", "b5 heartbeat", "b6"]
    assert q.syncs_started == 2 and len(q) == 0


def test_unforced_batches_right_behind_a_covered_one_go_with_it_until_the_next_uncovered_forced_one():
    q: Commits[str] = Commits()
    q.add("b1", forced=True)
    q.start()
    q.add("b2 ack", forced=False)
    q.add("b3", forced=True)
    q.add("b4", forced=False)
    assert q.done() == ["b1", "b2 ack"]
    assert q.start() and q.done() == ["b3", "b4"]


def test_a_failed_sync_releases_nothing_held_then_or_later():
    q: Commits[str] = Commits()
    q.add("b1", forced=True)
    q.start()
    q.add("b2", forced=True)
    q.add("b3", forced=False)
    assert q.fail() == 3
    assert q.add("b4", forced=False) == [] and q.add("b5", forced=True) == []
    assert not q.start() and len(q) == 0


def test_keepalive_names_the_released_stream_position_and_waits_a_whole_interval():
    k = Keepalive(1.0)
    k.released("c1", 130, now=10.0)              # tx_next 130 after the released bytes
    k.released("c2", None, now=10.0)             # before its SYNC: never a heartbeat
    assert k.due(10.5) == []
    assert k.next_due() == 11.0
    assert k.due(11.0) == [("c1", wire.encode_frame([wire.HEARTBEAT, 130 % wire.CHECK_MOD]))]
    assert k.due(11.5) == [] and k.next_due() == 12.0
    frame = k.due(12.0)[0][1]
    decoded = wire.FrameDecoder(1 << 10).feed(frame)
    assert decoded == [[wire.HEARTBEAT, 2]]       # no acknowledgement: it promises nothing
    k.released("c1", 131, now=12.5)              # bytes released: the next one waits from here
    assert k.due(13.0) == [] and k.due(13.5) == [("c1", wire.encode_frame([wire.HEARTBEAT, 3]))]
    k.lost("c1")
    assert k.due(100.0) == [] and k.next_due() is None
