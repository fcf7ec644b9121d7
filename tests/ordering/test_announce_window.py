"""The clock protocols' announcement window (``announce_delay``, ``ordering.window``): held, joined by later
rises, covered by data, riding along; Lamport in detail, hybrid through the random-partition property."""
from __future__ import annotations

import functools
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ordering import CONNECTED, DISCONNECTED, SendControl
from ordering.hybrid import HybridIGO
from ordering.lamport import LamportIGO
from ordering.window import AnnounceWindow
from tests.ordering.test_igo_protocols import _exercise, steps

SITES = ["A", "B", "C"]


def _connected(mesh, delay: float):
    m = mesh("lamport", SITES, now=100.0, announce_delay=delay)
    m.connect_all()
    m.run(random.Random(0))
    m.advance(m.now + 1.0)
    m.run(random.Random(0))
    m.controls.clear()
    return m


def _announcements(m, src: str) -> list[tuple[str, int]]:
    return [(dst, body) for s, dst, body, _ in m.controls if s == src]


def test_a_held_announcement_goes_when_its_window_ends_and_releases_the_message(mesh):
    m = _connected(mesh, 2.0)
    m.send("C")
    m.run(random.Random(1))
    # A and B raised their clocks to the message's and owe it to their peers: nothing sent yet, so
    # A cannot tell B will not send before the message (B's key would come first: B < C), and holds it.
    assert _announcements(m, "A") == [] and _announcements(m, "B") == []
    assert m.ids("A") == []
    m.advance(m.now + 1.9)
    assert _announcements(m, "B") == []
    m.advance(m.now + 0.1)
    assert sorted(dst for dst, _ in _announcements(m, "B")) == ["A", "C"]
    m.run(random.Random(1))
    assert m.ids("A") == m.ids("B") == m.ids("C") == ["C:1"]
    assert not any(d.late for ds in m.delivered.values() for d in ds)


def test_data_to_a_peer_covers_the_announcement_owed_to_it(mesh):
    m = _connected(mesh, 2.0)
    m.send("A")
    m.run(random.Random(2))
    m.send("B")                 # its timestamp is above A's message: it tells A and C more than the announcement
    m.advance(m.now + 5.0)
    assert _announcements(m, "B") == []
    m.run(random.Random(2))
    m.advance(m.now + 5.0)
    m.run(random.Random(2))
    m.check_site_invariants()
    assert m.ids("A") == m.ids("B") == m.ids("C") == ["A:1", "B:1"]


def test_later_rises_join_the_announcement_already_owed(mesh):
    """A burst of messages within the window costs each site one announcement per peer, not one per message."""
    counts = {}
    for delay in (0.0, 1.0):
        m = _connected(mesh, delay)
        for _ in range(5):
            m.send("A")
            m.run(random.Random(3))
            m.advance(m.now + 0.1)
        m.advance(m.now + 2.0)
        m.run(random.Random(3))
        m.check_site_invariants()
        assert m.ids("A") == m.ids("B") == m.ids("C") and len(m.ids("A")) == 5
        counts[delay] = len(_announcements(m, "B"))
    assert counts[0.0] == 10 and counts[1.0] == 2, counts


def _b_heard_a(delay: float) -> LamportIGO:
    """B (Lamport, ``announce_delay`` = ``delay``), connected to A and C, right after it received A's message
    stamped 5 at time 0: its clock rose to 5 and, once it flushes, it owes A and C an announcement of it."""
    p = LamportIGO("B", SITES, 0.0, announce_delay=delay)
    for q in ("A", "C"):
        p.set_status(q, CONNECTED, 0.0)
    p.receive("A", 1, 5, b"x", 0.0)
    return p


def test_an_urgent_send_does_not_cover_what_is_owed():
    p = _b_heard_a(1.0)
    assert p.flush(0.0) == []
    p.local_send(1, b"flash", 0.1, dests=("A", "C"), urgent=True)     # overtakes: teaches nothing
    assert p.flush(0.1) == []
    assert p.next_deadline() == 1.0
    assert p.tick(1.0) == [SendControl(6, reliable=False, to=("A", "C"))]
    assert p.next_deadline() is None


def test_a_write_to_a_peer_takes_what_is_owed_to_it_along():
    p = _b_heard_a(3.0)
    p.flush(0.0)
    assert p.riding(["A"], 0.2) == [SendControl(5, reliable=False, to=("A",))]
    assert p.riding(["A"], 0.3) == []
    assert p.next_deadline() == 3.0          # C's is still held
    assert p.tick(3.0) == [SendControl(5, reliable=False, to=("C",))]


def test_a_disconnected_peer_is_owed_nothing_and_a_resync_tells_it_afresh():
    p = _b_heard_a(3.0)
    p.flush(0.0)
    p.set_status("C", DISCONNECTED, 1.0)
    assert p.resync("A", 1.0) == [SendControl(5, reliable=False, to=("A",))]
    assert p.next_deadline() is None and p.tick(5.0) == []


def test_without_a_window_nothing_is_held():
    p = _b_heard_a(0.0)
    assert p.flush(0.0) == [SendControl(5, reliable=False)]
    assert p.next_deadline() is None


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(schedule=steps, seed=st.integers(0, 1000))
def test_random_partitions_keep_the_site_invariants_with_a_window(mesh, schedule, seed):
    for protocol in ("lamport", "hybrid"):
        m = _exercise(functools.partial(mesh, announce_delay=0.7), protocol, schedule, seed)
        # Its last run raised clocks whose announcements are held: their windows end, then all is delivered.
        m.advance(m.now + 1.0)
        m.run(random.Random(seed))
        m.check_site_invariants()
        assert all(p.pending_count() == 0 for p in m.protos.values()), protocol


def test_hybrid_holds_its_announcement_and_sends_its_pair_when_the_window_ends():
    p = HybridIGO("B", SITES, 10.0, announce_delay=0.5)
    for q in ("A", "C"):
        p.set_status(q, CONNECTED, 10.0)
    p.resync("A", 10.0), p.resync("C", 10.0)
    p.receive("A", 1, [10_100, 0], b"x", 10.1)
    assert p.flush(10.1) == []
    assert p.riding(["C"], 10.2) == [SendControl([100, 0, 1], reliable=False, to=("C",))]
    assert p.next_deadline() == min(10.6, 10.1 + p.max_wait)
    assert p.tick(10.6) == [SendControl([100, 0, 1], reliable=False, to=("A",))]


def test_the_window_keeps_the_first_rise_and_refuses_a_negative_delay():
    w = AnnounceWindow(1.0)
    w.owe(["A", "B"], 5.0)
    w.owe(["A"], 5.5)               # a later rise joins: A's window still ends at 6.0
    assert w.deadline() == 6.0 and w.due(5.9) == []
    w.settle(["B"])
    assert w.due(6.0) == ["A"] and w.deadline() is None and not AnnounceWindow(0.0)
    with pytest.raises(ValueError, match="announce_delay"):
        AnnounceWindow(-0.5)
