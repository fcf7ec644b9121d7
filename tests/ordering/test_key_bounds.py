"""Audit finding 3: no clock, epoch or counter from a peer may push an order key past 2^53.

Each protocol refuses an out-of-range value with ValueError before changing
any state (the stack turns it into a protocol violation that closes only that
peer's link), and never moves its own clock past the bound.
"""
from __future__ import annotations

import pytest

from ordering import CONNECTED, KEY_INT_MAX, ClockExhausted, Deliver, make_protocol
from ordering.hybrid import HybridIGO
from ordering.lamport import LamportIGO
from ordering.sequencer import SequencerIGO

SITES = ["A", "B", "C"]
HUGE = [KEY_INT_MAX + 1, 2**63, 2**64 - 1]


def connected(protocol: str, **options):
    p = make_protocol(protocol, "A", SITES, 0.0, **options)
    for peer in ("B", "C"):
        p.set_status(peer, CONNECTED, 0.0)
    return p


@pytest.mark.parametrize("value", HUGE)
def test_audit3_lamport_refuses_huge_clock(value):
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


def test_audit3_lamport_refuses_non_integer_and_negative_clocks():
    p = connected("lamport")
    for bad in (-1, 1.5, "7", True, None, [1]):
        with pytest.raises(ValueError):
            p.control("B", bad, 0.0)
    assert p.clock == 0


def test_audit3_lamport_clock_never_passes_the_bound():
    """A peer at exactly the bound is accepted; then this site cannot send, rather than overflow."""
    p = connected("lamport")
    out = p.receive("B", 1, KEY_INT_MAX, b"edge", 0.0)
    assert p.clock == KEY_INT_MAX
    with pytest.raises(ClockExhausted, match="bound 2\\^53"):
        p.local_send(1, b"mine", 0.0, dests=("B", "C"))
    assert p.clock == KEY_INT_MAX and p.pending_count() == 1 and not out


@pytest.mark.parametrize("pair", [[2**63, 0], [0, 2**63], [KEY_INT_MAX + 1, 0], [-1, 0], [1.0, 0]])
def test_audit3_hybrid_refuses_huge_clock(pair):
    p = connected("hybrid")
    assert isinstance(p, HybridIGO)
    before = p.snapshot()
    with pytest.raises(ValueError):
        p.control("B", pair, 0.0)
    with pytest.raises(ValueError):
        p.receive("B", 1, pair, b"x", 0.0)
    assert p.snapshot() == before and p.pending_count() == 0 and p.known["B"] == (0, 0)


def test_audit3_hybrid_delta_announcements_cannot_climb_past_the_bound():
    p = connected("hybrid")
    p.control("B", [KEY_INT_MAX - 10, 0], 0.0)
    with pytest.raises(ValueError, match="previous l \\+ dl"):
        p.control("B", [11, 0, 1], 0.0)
    with pytest.raises(ValueError):
        p.control("B", [1, 2**63, 1], 0.0)
    assert p.known["B"] == (KEY_INT_MAX - 10, 0)


def test_audit3_hybrid_clock_never_passes_the_bound():
    p = connected("hybrid")
    p.control("B", [KEY_INT_MAX, KEY_INT_MAX - 1], 0.0)
    _, key, _ = p.local_send(1, b"last", 1.0, dests=("B", "C"))
    assert key == (KEY_INT_MAX, KEY_INT_MAX, "A")
    with pytest.raises(ClockExhausted):
        p.local_send(2, b"one too many", 1.0, dests=("B", "C"))
    # Below the top of l, a full counter moves on to the next l instead.
    q = connected("hybrid")
    q.control("B", [5, KEY_INT_MAX], 0.0)
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
def test_audit3_sequencer_refuses_huge_epoch(body):
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
def test_audit3_sequencer_refuses_huge_header(header):
    p = connected("sequencer")
    before = p.snapshot()
    with pytest.raises(ValueError):
        p.receive("B", 1, header, b"x", 0.0)
    assert p.snapshot() == before and p.pending_count() == 0


def test_audit3_sequencer_bad_assignment_leaves_no_trace_of_its_good_entries():
    p = connected("sequencer")
    with pytest.raises(ValueError):
        p.control("B", ["a", 3, "B", 1, "C", 1, 2, "C", 2**63], 0.0)
    assert not p.early and p.epoch_seen < (3, "B")


def test_audit3_sequencer_epochs_stay_in_range_at_the_bound():
    p = connected("sequencer")
    p.control("B", ["e", KEY_INT_MAX, "B"], 0.0)
    p.set_status("B", "suspected", 0.0)      # A leads {A, C}: a new epoch, which cannot pass the bound
    assert p.epoch[0] <= KEY_INT_MAX
    header, key, _ = p.local_send(1, b"x", 0.0, dests=("C",))
    assert key is not None and all(v <= KEY_INT_MAX for v in key if type(v) is int)
    out = p.receive("C", 1, [KEY_INT_MAX, "A", KEY_INT_MAX, "A"], b"y", 0.0)
    assert all(isinstance(o, Deliver) for o in out)
