"""No clock, epoch or counter from a peer may push an order key past 2^53, nor past what an honest run can
have reached by now (``ordering.base.honest_ceiling``).

Each protocol refuses an out-of-range value with ValueError before changing
any state (the stack turns it into a protocol violation that closes only that
peer's link), and never moves its own clock past the bound. ``FAR`` is a time
(about the year 5100) when the ceiling has reached the bound itself, to test
what happens there.
"""
from __future__ import annotations

import pytest

from ordering import CONNECTED, KEY_INT_MAX, ClockExhausted, Deliver, honest_ceiling, make_protocol
from ordering.hybrid import HybridIGO
from ordering.lamport import LamportIGO
from ordering.sequencer import SequencerIGO

SITES = ["A", "B", "C"]
HUGE = [KEY_INT_MAX + 1, 2**63, 2**64 - 1]
FAR = 1e11
NOW = 1_795_000_000.0       # 2026-11-18, Unix seconds


def connected(protocol: str, now: float = 0.0, **options):
    p = make_protocol(protocol, "A", SITES, now, **options)
    for peer in ("B", "C"):
        p.set_status(peer, CONNECTED, now)
    return p


@pytest.mark.parametrize("value", HUGE)
def test_lamport_refuses_huge_clock(value):
    p = connected("lamport")
    assert isinstance(p, LamportIGO)
    p.control("B", 5, 0.0)
    before = p.snapshot()
    with pytest.raises(ValueError, match="exceeds the order-key bound 2\\^53"):
        p.control("B", value, 0.0)
    with pytest.raises(ValueError, match="Lamport timestamp"):
        p.receive("B", 1, value, b"x", 0.0)
    assert p.snapshot() == before and p.pending_count() == 0
    _, key, _ = p.local_send(1, b"mine", 0.0, dests=("B", "C"))
    assert key == (6, "A")


def test_lamport_refuses_non_integer_and_negative_clocks():
    p = connected("lamport")
    for bad in (-1, 1.5, "7", True, None, [1]):
        with pytest.raises(ValueError):
            p.control("B", bad, 0.0)
    assert p.clock == 0


@pytest.mark.parametrize("now", [0.0, NOW])
def test_lamport_refuses_a_clock_beyond_the_honest_ceiling_and_keeps_sending(now):
    """One ANNOUNCE of exactly 2^53 used to move the clock to its bound, and every later send was refused
    (for good: the clock is logged). Now anything past the ceiling is refused and the site sends on."""
    p = connected("lamport", now)
    ceiling = honest_ceiling(now)
    assert ceiling < KEY_INT_MAX // 30        # centuries of honest sends at a million a second are left
    for value in (KEY_INT_MAX, ceiling + 1):
        with pytest.raises(ValueError, match="beyond what any honest run"):
            p.control("B", value, now)
        with pytest.raises(ValueError, match="beyond what any honest run"):
            p.receive("B", 1, value, b"edge", now)
    assert p.clock == 0 and p.pending_count() == 0
    p.control("B", ceiling, now)             # the ceiling itself is an honest value
    _, key, _ = p.local_send(1, b"mine", now, dests=("B", "C"))
    assert key == (ceiling + 1, "A")


def test_lamport_clock_never_passes_the_bound():
    """At the bound (in centuries, or from a log written before the ceiling), a send is refused, not wrapped."""
    p = connected("lamport", FAR)
    out = p.receive("B", 1, KEY_INT_MAX, b"edge", FAR)
    assert p.clock == KEY_INT_MAX
    with pytest.raises(ClockExhausted, match="bound 2\\^53"):
        p.local_send(1, b"mine", FAR, dests=("B", "C"))
    assert p.clock == KEY_INT_MAX and p.pending_count() == 1 and not out


def test_lamport_restore_brings_a_poisoned_clock_back_to_the_ceiling():
    """A log written before the ceiling may hold the bound itself: after a restart the site sends again."""
    poisoned = {"clock": KEY_INT_MAX, "known": {"B": KEY_INT_MAX, "C": 3}, "announced": KEY_INT_MAX,
                "frontier": [KEY_INT_MAX, "B"]}
    p = connected("lamport", NOW)
    p.restore(poisoned)
    ceiling = honest_ceiling(NOW)
    assert p.clamped and p.clock == ceiling and p.known == {"B": ceiling, "C": 3}
    assert p.frontier == (ceiling, "B")
    _, key, _ = p.local_send(1, b"after the restart", NOW, dests=("B", "C"))
    assert key == (ceiling + 1, "A")
    clean = connected("lamport", NOW)
    clean.restore({"clock": 7, "known": {"B": 5, "C": 3}, "announced": 7, "frontier": [6, "B"]})
    assert not clean.clamped and clean.clock == 7


@pytest.mark.parametrize("pair", [[2**63, 0], [0, 2**63], [KEY_INT_MAX + 1, 0], [-1, 0], [1.0, 0]])
def test_hybrid_refuses_huge_clock(pair):
    p = connected("hybrid")
    assert isinstance(p, HybridIGO)
    before = p.snapshot()
    with pytest.raises(ValueError):
        p.control("B", pair, 0.0)
    with pytest.raises(ValueError):
        p.receive("B", 1, pair, b"x", 0.0)
    assert p.snapshot() == before and p.pending_count() == 0 and p.known["B"] == (0, 0)


@pytest.mark.parametrize("now", [0.0, NOW])
def test_hybrid_delta_announcements_cannot_climb_past_the_ceiling(now):
    p = connected("hybrid", now)
    top = honest_ceiling(now)
    p.control("B", [top - 10, 0], now)
    with pytest.raises(ValueError, match="previous l \\+ dl"):
        p.control("B", [11, 0, 1], now)
    with pytest.raises(ValueError):
        p.control("B", [1, 2**63, 1], now)
    with pytest.raises(ValueError, match="beyond what any honest run"):
        p.control("B", [1, KEY_INT_MAX, 1], now)
    assert p.known["B"] == (top - 10, 0)


def test_hybrid_clock_of_real_time_is_far_below_the_ceiling():
    """Hybrid l is milliseconds of real time: an honest one is never refused."""
    p = connected("hybrid", NOW)
    p.control("B", [int(NOW * 1000) + 3_600_000, 0], NOW)       # a peer's clock an hour fast
    assert honest_ceiling(NOW) > 100 * int(NOW * 1000)


def test_hybrid_clock_never_passes_the_bound():
    p = connected("hybrid", FAR)
    p.control("B", [KEY_INT_MAX, KEY_INT_MAX - 1], FAR)
    _, key, _ = p.local_send(1, b"last", FAR, dests=("B", "C"))
    assert key == (KEY_INT_MAX, KEY_INT_MAX, "A")
    with pytest.raises(ClockExhausted):
        p.local_send(2, b"one too many", FAR, dests=("B", "C"))
    # Below the top of l, a full counter moves on to the next l instead.
    q = connected("hybrid")
    q.control("B", [5, KEY_INT_MAX], FAR)
    _, key, _ = q.local_send(1, b"next", 0.0, dests=("B", "C"))
    assert key == (6, 0, "A")


@pytest.mark.parametrize("body", [
    ["e", 2**63, "B"],
    ["e", KEY_INT_MAX + 1, "B"],
    ["e", 3, "Mallory"],
    ["a", 2**63, "B", 1, "C", 1],
    ["a", 3, "B", 2**63, "C", 1],
    ["a", 3, "B", 1, "C", 2**64 - 1],
    ["a", 3, "B", 1, "Zed", 1],
    ["q", 2**63, None],
    ["q", 1, ["Zed"]],
    [],
    "e",
])
def test_sequencer_refuses_huge_epoch(body):
    p = connected("sequencer")
    assert isinstance(p, SequencerIGO)
    before = p.snapshot()
    with pytest.raises(ValueError):
        p.control("B", body, 0.0)
    assert p.snapshot() == before and not p.early


@pytest.mark.parametrize("header", [
    [2**63, "A", 1, "A"],
    [1, "A", 2**63, "A"],
    [1, "Mallory", 1, "A"],
    [1, "A", 1, "Mallory"],
    [1, "A", 1, "A", ["Zed"]],
    [1.5, "A", 1, "A"],
])
def test_sequencer_refuses_huge_header(header):
    p = connected("sequencer")
    before = p.snapshot()
    with pytest.raises(ValueError):
        p.receive("B", 1, header, b"x", 0.0)
    assert p.snapshot() == before and p.pending_count() == 0


def test_sequencer_bad_assignment_leaves_no_trace_of_its_good_entries():
    p = connected("sequencer")
    with pytest.raises(ValueError):
        p.control("B", ["a", 3, "B", 1, "C", 1, 2, "C", 2**63], 0.0)
    assert not p.early and p.epoch_seen < (3, "B")


def test_sequencer_refuses_an_epoch_beyond_the_ceiling():
    p = connected("sequencer", NOW)
    before = p.snapshot()
    for value in (KEY_INT_MAX, honest_ceiling(NOW) + 1):
        with pytest.raises(ValueError, match="beyond what any honest run"):
            p.control("B", ["e", value, "B"], NOW)
    assert p.snapshot() == before


def test_sequencer_epochs_stay_in_range_at_the_bound():
    p = connected("sequencer", FAR)
    p.control("B", ["e", KEY_INT_MAX, "B"], FAR)
    p.set_status("B", "suspected", FAR)      # A leads {A, C}: a new epoch, which cannot pass the bound
    assert p.epoch[0] <= KEY_INT_MAX
    header, key, _ = p.local_send(1, b"x", FAR, dests=("C",))
    assert key is not None and all(v <= KEY_INT_MAX for v in key if type(v) is int)
    out = p.receive("C", 1, [KEY_INT_MAX, "A", KEY_INT_MAX, "A"], b"y", FAR)
    assert all(isinstance(o, Deliver) for o in out)
