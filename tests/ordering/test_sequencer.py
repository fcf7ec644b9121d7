"""The sequencer IGO protocol, driven directly on an in-memory mesh."""
from __future__ import annotations

import random

import msgpack
import pytest

from ordering import CONNECTED, DISCONNECTED, SUSPECTED, make_protocol
from ordering.sequencer import SequencerIGO

SITES = ["A", "B", "C"]


def test_registered_under_its_mission_name():
    p = make_protocol("sequencer", "B", SITES)
    assert isinstance(p, SequencerIGO) and p.name == "sequencer"


def test_leader_is_the_first_connected_site(mesh):
    m = mesh("sequencer", SITES)
    assert {s: p.leader for s, p in m.protos.items()} == {"A": "A", "B": "B", "C": "C"}
    m.connect_all()
    assert {p.leader for p in m.protos.values()} == {"A"}
    m.status("B", "A", SUSPECTED)
    m.status("C", "A", SUSPECTED)
    assert m.protos["B"].leader == "B" and m.protos["C"].leader == "B"


def test_leader_knows_the_key_at_send_others_later(mesh):
    m = mesh("sequencer", SITES)
    m.connect_all()
    m.run()
    _, _, key_a = m.send("A")
    _, _, key_b = m.send("B")
    assert key_a is not None and key_a[1] == "A" and len(key_a) == 3
    assert key_b is None
    m.run()
    assert m.keys("B")["B:1"] > key_a


@pytest.mark.parametrize("seed", range(20))
def test_stable_component_delivers_one_sequence(mesh, seed):
    rng = random.Random(seed)
    m = mesh("sequencer", ["A", "B", "C", "D"])
    m.connect_all()
    m.run(rng)
    for _ in range(40):
        m.send(rng.choice(m.sites), b"m")
        if rng.random() < 0.5:
            for _ in range(rng.randint(0, 6)):
                ready = [k for k, q in m.links.items() if q]
                if ready:
                    m.step(*rng.choice(ready))
    m.run(rng)
    m.check_site_invariants()
    seqs = [m.ids(s) for s in m.sites]
    assert all(len(s) == 40 for s in seqs)
    assert all(s == seqs[0] for s in seqs)
    assert not any(d.late for ds in m.delivered.values() for d in ds)
    # One leader, one epoch: keys (epoch, "A", n), all the same at every site.
    keys = m.keys("A")
    assert {k[1] for k in keys.values()} == {"A"} and all(len(k) == 3 for k in keys.values())
    assert all(m.keys(s) == keys for s in m.sites)
    assert all(p.pending_count() == 0 for p in m.protos.values())


def test_partial_multicast_without_the_leader_asks_it_for_a_key(mesh):
    m = mesh("sequencer", SITES)
    m.connect_all()
    m.run()
    m.send("B", b"to C", dests=["C"])
    assert m.links[("B", "A")][-1][0] == "ctrl" and m.links[("B", "A")][-1][1][0] == "q"
    m.run()
    assert m.ids("B") == ["B:1"] and m.ids("C") == ["B:1"] and m.ids("A") == []
    assert m.keys("B") == m.keys("C")


def test_other_components_messages_arrive_late_with_their_own_keys(mesh):
    m = mesh("sequencer", SITES)
    m.connect_all()
    m.run()
    m.send("A")
    m.run()
    m.split(["A", "B"], ["C"])
    m.send("C", b"c1")
    m.send("C", b"c2")
    for _ in range(3):
        m.send("A", b"a")
        m.send("B", b"b")
    m.run()
    assert m.ids("C") == ["A:1", "C:1", "C:2"]
    assert len(m.ids("A")) == 7 and m.ids("A") == m.ids("B")
    m.heal()
    m.run()
    m.check_site_invariants()
    # Every site ends with every message, each with one key everywhere.
    everything = set(m.ids("A"))
    assert len(everything) == 9 and all(set(m.ids(s)) == everything for s in m.sites)
    for mid in everything:
        assert len({m.keys(s)[mid] for s in m.sites}) == 1, mid
    # C ordered its messages itself, in its own epoch.
    assert m.keys("A")["C:1"][1] == "C"
    late_somewhere = [d for ds in m.delivered.values() for d in ds if d.late]
    assert late_somewhere, "the components' orders interleave: someone must get late messages"


def test_a_new_leader_orders_above_everything_its_members_saw(mesh):
    m = mesh("sequencer", SITES)
    m.connect_all()
    m.run()
    for _ in range(5):
        m.send("C")
    m.run()
    top = max(m.keys("B").values())
    m.split(["A"], ["B", "C"])
    m.run()
    assert m.protos["B"].leader == "B"
    _, _, key = m.send("B")
    assert key > top and key[1] == "B"
    m.run()
    assert not m.delivered["C"][-1].late and m.keys("C")["B:1"] == key


def test_no_key_within_assign_wait_places_a_message_by_its_senders_view(mesh):
    m = mesh("sequencer", SITES, assign_wait=2.0)
    m.connect_all()
    m.run()
    m.send("A")
    m.run()
    # The leader's outgoing link goes silent (still connected): no assignments.
    m.blocked.update({("A", "B"), ("A", "C")})
    m.now = 10.0
    m.send("B", b"stuck")
    m.run()
    assert m.ids("B") == ["A:1"] and m.ids("C") == ["A:1"]
    assert m.protos["C"].next_deadline() == pytest.approx(12.0)
    m.advance(11.9)
    assert m.ids("C") == ["A:1"]
    m.advance(12.0)
    assert m.ids("C")[-1] == "B:1" and m.ids("B")[-1] == "B:1"
    key = m.keys("C")["B:1"]
    # Placed just after the last message its sender had delivered.
    assert key[:3] == m.keys("B")["A:1"] and key[3:] == ("B", 1)
    m.check_site_invariants()


def test_fifo_holds_when_a_later_message_gets_its_key_first(mesh):
    m = mesh("sequencer", ["A", "B", "C"], assign_wait=1.0)
    m.connect_all()
    m.run()
    c = m.protos["C"]
    # B:1 arrives with no key yet, its sender having seen a high epoch;
    # B:2 arrives and its (lower) key comes at once.
    eid = c.epoch_seen
    c.receive("B", 1, [99, "A", 0, "A"], b"one", 0.0)
    c.receive("B", 2, [99, "A", 0, "A"], b"two", 0.0)
    out = c.control("A", ["a", eid[0], eid[1], 7, "B", 2], 0.0)
    assert out == [] and c.pending_count() == 2
    out = c.tick(1.0)
    # B:1 is placed by its hint, above B:2's key: FIFO wins, B:2 comes late.
    assert [(d.seq, d.late) for d in out] == [(1, False), (2, True)]
    assert out[0].key == (99, "A", 0, "B", 1) and out[1].key == (eid[0], eid[1], 7)


def test_status_changes_are_harmless_for_unknown_origins_and_disconnects(mesh):
    m = mesh("sequencer", SITES)
    m.connect_all()
    m.run()
    m.blocked.add(("C", "B"))
    m.send("C")
    m.run()                                      # A orders C:1; B gets the key, not the data
    assert ("C", 1) in m.protos["B"].early
    m.send("A")
    m.run()
    assert m.ids("B") == []                      # the key of C:1 comes first: wait for C's data
    m.status("B", "C", DISCONNECTED)             # C's data will not come on this session
    assert m.ids("B") == ["A:1"]
    assert ("C", 1) not in m.protos["B"].early


def test_wire_sizes_are_small(mesh):
    m = mesh("sequencer", ["A", "B", "C", "D"])
    m.connect_all()
    m.run()
    m.controls.clear()
    for _ in range(10):
        _, header, _ = m.send("C", b"x" * 100)
        assert len(msgpack.packb(header)) <= 8
    m.run()
    sizes = [len(msgpack.packb(b)) for _, _, b, _ in m.controls if b[0] == "a"]
    # The leader sends one assignment per message per destination; ~7 bytes each.
    assert sizes and max(sizes) <= 12


def test_bad_bodies_raise_value_errors():
    p = SequencerIGO("A", SITES)
    with pytest.raises(ValueError):
        p.receive("B", 1, [1, "A"], b"", 0.0)
    with pytest.raises(ValueError):
        p.control("B", ["a", 1, "A", 1, "B"], 0.0)
    with pytest.raises(ValueError):
        p.control("B", ["zz"], 0.0)
    with pytest.raises(ValueError):
        SequencerIGO("A", SITES, assign_wait=0)
    assert p.set_status("B", CONNECTED, 0.0) == []


def test_the_same_assignments_to_several_peers_are_one_output_for_all_of_them():
    """A leader's flush owes every peer of a message to all the same bodies: one reliable output names them
    all (the stack then writes one copy per next hop on relay paths); a peer owed other bodies gets its own."""
    from ordering.base import SendControl

    sites = ["A", "B", "C", "D"]
    protos = {s: make_protocol("sequencer", s, sites) for s in ("A", "B")}
    for me, p in protos.items():
        for s in sites:
            if s != me:
                p.set_status(s, CONNECTED, 0.0)
        p.flush(0.0)
    a, b = protos["A"], protos["B"]
    header, _, _ = b.local_send(1, b"to all", 0.1, dests=("A", "C", "D"))
    a.receive("B", 1, header, b"to all", 0.1)
    outs = [o for o in a.flush(0.2) if isinstance(o, SendControl) and o.reliable]
    assert [(sorted(o.to), o.body[0]) for o in outs] == [(["B", "C", "D"], "a")]
    header, _, _ = b.local_send(2, b"to C", 0.3, dests=("A", "C"))
    a.receive("B", 2, header, b"to C", 0.3)
    header, _, _ = b.local_send(3, b"to all", 0.3, dests=("A", "C", "D"))
    a.receive("B", 3, header, b"to all", 0.3)
    outs = [o for o in a.flush(0.4) if isinstance(o, SendControl) and o.reliable]
    assert sorted(sorted(o.to) for o in outs) == [["B", "C"], ["D"]], outs   # D is not owed B:2
