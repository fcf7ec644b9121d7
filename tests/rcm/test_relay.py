"""Relaying on a virtual clock (rcm/relay.py, rcm/linkstate.py through SiteStack): issue 17."""
from __future__ import annotations

from rcm_harness import Net

from rcm import relay
from rcm.config import RcmSettings

SITES = ["A", "B", "C"]


def order(net: Net, site: str) -> list[tuple[str, int]]:
    return [(d.origin, d.seq) for d in net.logs[site].delivered]


def test_a_cut_link_is_routed_around_once_in_fifo_and_one_order():
    net = Net(SITES, delay=0.05)
    net.run(until=5)
    net.set_link("A", "C", "down")
    net.run(until=net.now + 0.5)
    assert net.stacks["A"].vias() == {"B": None, "C": "B"} and net.stacks["C"].vias()["A"] == "B"
    assert all(net.status(s, p) == "connected" for s in SITES for p in SITES if p != s)
    for i in range(30):
        net.send("A", f"a{i}".encode())
        net.send("C", f"c{i}".encode(), ["A"])      # a partial multicast, relayed
        net.run(until=net.now + 0.1)
    net.run(until=net.now + 3)
    for s in SITES:
        got = order(net, s)
        assert len(got) == len(set(got)), s
        assert not any(d.late for d in net.logs[s].delivered), s
        for origin in ("A", "C"):
            seqs = [q for o, q in got if o == origin]
            assert seqs == sorted(seqs), (s, origin)
    assert [x for x in order(net, "A") if x[0] != "C"] == [x for x in order(net, "C") if x[0] != "C"]
    assert len([x for x in order(net, "C") if x[0] == "A"]) == 30
    assert net.stacks["B"].stats()["relay_forwarded"] >= 60     # A's 30 to C, C's 30 to A
    # Back to direct when the link returns.
    net.set_link("A", "C", "up")
    net.run(until=net.now + 8)
    assert net.stacks["A"].vias()["C"] is None
    assert net.logs["A"].status[-1][1:] == ("C", "connected")


def test_status_events_carry_the_next_hop():
    net = Net(SITES, delay=0.05)
    net.run(until=5)
    net.set_link("A", "C", "down")
    net.run(until=net.now + 1)
    changes = [(p, s) for _, p, s in net.logs["A"].status[-3:]]
    assert ("C", "connected") in changes and "suspected" not in [s for _, s in changes]


def test_chain_within_max_hops_and_beyond():
    four = ["A", "B", "C", "D"]
    for hops, reach in ((3, True), (2, False)):
        net = Net(four, settings=RcmSettings(max_hops=hops, suspect_timeout=10.0), delay=0.02)
        net.run(until=5)
        for a, b in (("A", "C"), ("A", "D"), ("B", "D")):
            net.set_link(a, b, "down")                # A - B - C - D
        net.run(until=net.now + 2)
        assert (net.status("A", "D") == "connected") is reach, hops
        if reach:
            net.send("A", b"far")
            net.run(until=net.now + 1)
            assert [d.payload for d in net.logs["D"].delivered if d.origin == "A"][-1] == b"far"
            assert net.stacks["A"].vias()["D"] == "B"


def test_no_path_means_suspected_then_disconnected_after_the_suspect_timeout():
    net = Net(SITES, settings=RcmSettings(suspect_timeout=10.0), delay=0.05)
    net.run(until=5)
    net.set_link("A", "C", "down")
    net.set_link("B", "C", "down")
    net.run(until=net.now + 1)
    assert net.status("A", "C") == "suspected" and net.status("A", "B") == "connected"
    net.run(until=net.now + 10)
    assert net.status("A", "C") == "disconnected"
    r = net.send("A", b"skipped")
    assert r.skipped == ("C",)
    net.set_link("B", "C", "up")                      # C comes back, through B only
    net.run(until=net.now + 8)
    assert net.status("A", "C") == "connected" and net.stacks["A"].vias()["C"] == "B"
    assert [m.origin for m in net.logs["C"].missing] == ["A"]   # told what it missed, through B


def test_the_relay_restarting_from_its_log_loses_nothing():
    net = Net(SITES, delay=0.05, durable=True)
    net.run(until=5)
    net.set_link("A", "C", "down")
    net.run(until=net.now + 0.5)
    for i in range(5):
        net.send("A", f"a{i}".encode())
    net.run(until=net.now + 0.02)                    # some copies are inside B when it dies
    records = [p.record for p in net.persisted["B"]]
    net.crash("B")
    for i in range(5, 10):
        net.send("A", f"a{i}".encode())              # buffered: C has no path now
    net.run(until=net.now + 1)
    net.restart("B", records=records)
    net.run(until=net.now + 8)
    got = [d.payload for d in net.logs["C"].delivered if d.origin == "A"]
    assert got == [f"a{i}".encode() for i in range(10)]


def test_announcement_generations_compare_around_the_circle():
    assert relay.newer(1, 0) and relay.newer(0, 127) and not relay.newer(0, 1) and not relay.newer(5, 5)
    assert relay.next_generation(127) == 0
