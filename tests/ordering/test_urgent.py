"""FLASH and IMMEDIATE messages (``urgent``) on every IGO protocol: delivered on arrival with their key.

An urgent message may overtake earlier messages of its origin on the links
(paced lanes, ``rcm.channels.lanes``). It is delivered at once, late when it overtook
its place, with the key its sender gave it; it never makes the ROUTINE and
PRIORITY messages it overtook late, and it never holds anything back.
"""
from __future__ import annotations

import random

import pytest

from ordering import registry

SITES = ["A", "B", "C"]


def _in_order(m, site):
    """The in-order deliveries' keys increase (urgent messages, delivered on arrival, early or late, aside)."""
    keys = [d.key for d in m.delivered[site] if not d.late and not d.payload.startswith(b"FLASH")]
    return keys == sorted(keys)


@pytest.mark.parametrize("protocol", sorted(registry.PROTOCOLS))
def test_an_urgent_message_overtakes_a_backlog_and_keeps_its_key(mesh, protocol):
    m = mesh(protocol, SITES, now=1000.0)
    m.connect_all()
    m.run()
    m.blocked.add(("A", "B"))                     # a slow link: A's messages to B wait, A stays connected
    routine = [m.send("A", b"r%d" % i) for i in range(5)]
    m.run(random.Random(1))
    seq, _, key = m.send("A", b"FLASH", urgent=True)
    m.blocked.discard(("A", "B"))
    assert m.step("A", "B")                       # the FLASH first: it jumped the queue
    flash = m.delivered["B"][-1]
    # Early, not late: nothing ordered after it had been delivered at B (docs/ordering.md, urgent messages).
    assert flash.payload == b"FLASH" and not flash.late
    assert [d.payload for d in m.delivered["B"]].count(b"FLASH") == 1
    m.run(random.Random(2))
    m.advance(m.now + 5.0)
    m.run(random.Random(3))
    keys = {s: m.keys(s)[f"A:{seq}"] for s in SITES}
    assert len(set(keys.values())) == 1 and (key is None or keys["A"] == key)   # one key everywhere
    for s in SITES:
        ids = m.ids(s)
        assert sorted(ids) == sorted({*ids}) and len(ids) == 6                 # exactly once
        r = [i for i in ids if i != f"A:{seq}"]
        assert r == [f"A:{q}" for q, _, _ in routine]                          # FIFO within the lane
        assert _in_order(m, s)
    # The routine messages it overtook are in global order, not late, at every site but their
    # sender's own lamport/hybrid view (which delivered them before the FLASH existed).
    assert not any(d.late for d in m.delivered["B"] if d.payload != b"FLASH")
    orders = {s: [i for i, d in zip(m.ids(s), m.delivered[s]) if not d.late and d.payload != b"FLASH"]
              for s in SITES}
    assert orders["B"] == [i for i in orders["C"] if i in orders["B"]]


@pytest.mark.parametrize("protocol", ["lamport", "sequencer"])
def test_an_urgent_message_in_its_place_is_not_late(mesh, protocol):
    m = mesh(protocol, SITES, now=1000.0)
    m.connect_all()
    for i in range(3):
        m.send("B", b"b%d" % i)
    m.run()
    m.advance(m.now + 5.0)
    m.run()
    seq, _, _ = m.send("A", b"FLASH", urgent=True)
    m.run()
    for s in SITES:
        d = m.delivered[s][-1]
        assert d.payload == b"FLASH" and not d.late, s
    m.send("C", b"after")
    m.run()
    m.advance(m.now + 5.0)
    m.run()
    for s in SITES:
        assert m.ids(s)[-2:] == [f"A:{seq}", "C:1"] and _in_order(m, s)
        assert not any(d.late for d in m.delivered[s])


@pytest.mark.parametrize("protocol", sorted(registry.PROTOCOLS))
def test_urgent_messages_never_hold_anything_back(mesh, protocol):
    """Only urgent traffic from A: B and C deliver each on arrival, and routine traffic stays IGO."""
    m = mesh(protocol, SITES, now=1000.0)
    m.connect_all()
    m.run()
    for i in range(4):
        seq, _, _ = m.send("A", b"u%d" % i, urgent=True)
        for s in ("B", "C"):
            assert m.step("A", s)
            assert m.delivered[s][-1].payload == b"u%d" % i
        m.run()
    m.send("B", b"r")
    m.run()
    m.advance(m.now + 5.0)
    m.run()
    for s in SITES:
        assert len(m.ids(s)) == 5 and _in_order(m, s)
