"""The hybrid logical/real-time IGO protocol, driven directly on an in-memory mesh."""
from __future__ import annotations

import msgpack
import pytest

from ordering import make_protocol
from ordering.hybrid import HybridIGO

SITES = ["A", "B", "C"]


def test_registered_under_its_mission_name():
    p = make_protocol("hybrid", "A", SITES, 5.0, max_wait=0.5)
    assert isinstance(p, HybridIGO) and p.max_wait == 0.5


def test_keys_follow_physical_time_and_causality(mesh):
    m = mesh("hybrid", SITES, now=100.0)
    m.connect_all()
    m.run()
    m.now = 100.250
    _, header, key = m.send("A")
    assert key == (100250, 0, "A") and header == [100250, 0]
    _, _, key2 = m.send("A")
    assert key2 == (100250, 1, "A")          # same millisecond: the counter moves
    m.run()
    # B's clock is behind A's (same virtual time here, but B received A's pair):
    _, _, key3 = m.send("B")
    assert key3 > key2                       # causality: B saw A's messages
    m.now = 101.0
    _, _, key4 = m.send("C")
    assert key4 == (101000, 0, "C")          # real time moved past the logical part


def test_delivery_needs_every_connected_peer_past_the_key_not_a_wait(mesh):
    m = mesh("hybrid", SITES, now=10.0, max_wait=5.0)
    m.connect_all()
    m.run()
    m.now = 10.010
    m.send("A", b"hello")
    m.step("A", "B")                         # B has the message; C not yet
    assert m.ids("B") == []
    m.run()                                  # C's announcement after receiving it
    assert all(m.ids(s) == ["A:1"] for s in SITES)
    assert m.now == 10.010                   # no time passed: no bounded wait involved


def test_partial_multicast_tells_the_others_its_clock(mesh):
    m = mesh("hybrid", SITES, now=10.0, max_wait=5.0)
    m.connect_all()
    m.run()
    m.send("A", b"to B", dests=["B"])
    m.run()
    assert m.ids("A") == ["A:1"] and m.ids("B") == ["A:1"] and m.ids("C") == []


def test_a_silent_connected_peer_holds_delivery_only_for_the_bounded_wait(mesh):
    m = mesh("hybrid", SITES, now=10.0, max_wait=0.5)
    m.connect_all()
    m.run()
    m.blocked.update({("C", "A"), ("C", "B")})   # C still "connected", but silent
    m.now = 10.010
    m.send("A")
    m.run()
    assert m.ids("B") == []
    assert m.protos["B"].next_deadline() == pytest.approx(10.51)
    m.advance(10.509)
    assert m.ids("B") == []
    m.advance(10.51)
    assert m.ids("B") == ["A:1"] and m.ids("A") == ["A:1"]


def test_a_message_after_its_place_passed_is_late_with_that_place(mesh):
    m = mesh("hybrid", SITES, now=10.0, max_wait=0.5)
    m.connect_all()
    m.run()
    m.blocked.update({("C", "A"), ("C", "B")})
    _, _, key_c = m.send("C", b"slow")        # stamped 10.000, stuck on C's links
    m.now = 10.1
    m.send("A", b"fast")
    m.run()
    m.advance(11.0)
    assert m.ids("B") == ["A:1"]
    m.blocked.clear()
    m.run()
    late = m.delivered["B"][-1]
    assert late.late and late.key == key_c and key_c < m.delivered["B"][0].key
    m.check_site_invariants()


def test_a_peer_whose_next_key_must_sort_after_does_not_hold_delivery(mesh):
    m = mesh("hybrid", SITES, now=10.0, max_wait=5.0)
    m.connect_all()
    m.run()                                   # everyone known at (10000, 0)
    m.blocked.update({("C", "A"), ("C", "B")})
    m.send("A")                               # (10000, 1, "A"): C's next is (10000, 1, "C") or later
    m.run()
    assert m.ids("B") == ["A:1"]
    m.blocked.clear()
    m.run()
    m.check_site_invariants()


def test_announcements_do_not_echo_forever(mesh):
    m = mesh("hybrid", ["A", "B", "C", "D"], now=50.0)
    m.connect_all()
    m.run()
    m.controls.clear()
    for i in range(5):
        m.now += 0.01 * i
        m.send("ABCD"[i % 4])
    m.run()                                   # raises on a storm
    assert len(m.controls) <= 5 * 4 * 3


def test_negative_or_tiny_times_stay_valid_keys():
    p = HybridIGO("A", SITES, now=-0.004)
    header, key, _ = p.local_send(1, b"", -0.003)
    assert header == [0, 1] and key == (0, 1, "A")
    msgpack.packb(header)


def test_header_is_small_and_bad_clocks_are_refused():
    p = HybridIGO("A", SITES, now=1_763_780_000.0)
    header, _, _ = p.local_send(1, b"", 1_763_780_000.123)
    assert len(msgpack.packb(header)) <= 12
    for bad in ([1], [1, -1], ["x", 0], 7):
        with pytest.raises(ValueError):
            p.receive("B", 1, bad, b"", 0.0)
    with pytest.raises(ValueError):
        HybridIGO("A", SITES, max_wait=0)
