"""Lamport: a sender whose clock went back (restart without its state) keeps FIFO.

Found by the simulator (lamport seed 135, 5 sites, 10 faults): D's first
message after a quick restart was stamped (1, D), late, and was delivered
ahead of D's two earlier messages still held at the other sites.
"""
from ordering.lamport import LamportIGO


def test_restarted_senders_low_stamp_waits_behind_its_held_messages():
    b = LamportIGO("B", ["A", "D"])
    for p in ("A", "D"):
        b.set_status(p, "connected", 0.0)
    out = b.receive("A", 1, 5, b"a1", 0.0)          # delivered once D is known past 5
    out += b.receive("D", 40, 8, b"d40", 0.0)       # D now known at 8: a1 goes; d40 waits for A
    assert [d.payload for d in out] == [b"a1"]
    out += b.receive("D", 41, 1, b"d41", 0.0)       # D restarted: stamp 1 is below a1 (late)...
    out += b.receive("D", 42, 12, b"d42", 0.0)      # ...and D goes on
    assert [d.payload for d in out] == [b"a1"]      # nothing of D may overtake d40
    out += b.control("A", 20, 0.0)
    order = [(d.payload, d.late) for d in out]
    assert [p for p, _ in order] == [b"a1", b"d40", b"d41", b"d42"]
    assert dict(order)[b"d41"] is True and dict(order)[b"d42"] is False
    assert b.pending_count() == 0


def test_restarted_senders_reused_key_is_late_not_in_order():
    """Found by the simulator (lamport seed 9619, --labels --repair-faults 1): B restarted without its state,
    learned clock 33 and stamped its next message (34, B), the key its last one had at C, which C then
    delivered "in order" at a key not above its frontier."""
    c = LamportIGO("C", ["A", "B"])
    for p in ("A", "B"):
        c.set_status(p, "connected", 0.0)
    out = c.control("A", 40, 0.0)
    out += c.receive("B", 16, 34, b"b16", 0.0)     # in order: A is known past 34
    assert [(d.payload, d.late) for d in out] == [(b"b16", False)]
    out = c.receive("B", 17, 34, b"b17", 0.0)      # the same key again, after B's restart
    assert [(d.payload, d.key, d.late) for d in out] == [(b"b17", (34, "B"), True)]
    assert c.frontier == (34, "B")
    urgent = c.receive("B", 18, 34, b"b18", 0.0, urgent=True)
    assert [(d.payload, d.late) for d in urgent] == [(b"b18", True)]
