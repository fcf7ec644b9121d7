"""Relaying on a virtual clock (rcm/relay.py, rcm/linkstate.py through SiteStack): issue 17."""
from __future__ import annotations

import pytest
from rcm_harness import Net

from contracts.mission import RcmSettings
from rcm import wire
from rcm.actions import ProtocolViolation
from rcm.routing import relay
from rcm.stack import SiteStack

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
        net.send("C", f"c{i}".encode(), ["A"], within=False)   # a partial multicast, relayed (within=False)
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


def test_a_relayed_announcement_from_before_a_restart_is_stale_and_poisons_nothing():
    """Seeds 2944, 3573 and 4909 (durable, --repair-faults 2): C restarted from its log (same
    stream identity, a new boot) and reconnected; an announcement of its old boot, relayed by B,
    arrived after the new HELLO. Its generation (13, counted from the old boot's zero) was taken,
    and every later announcement of the new boot (generations 2, 3, ...) was dropped as older:
    A held C's clock and stalled Lamport delivery for seconds, to the end of the run in two seeds."""
    def hello(site: str, boot: int) -> bytes:
        return wire.encode_frame([wire.HELLO, wire.PROTOCOL_VERSION, "m", site, 7, 0, 0, boot, 0,
                                  ["lamport", "robust", SITES, "relay", 3]])

    s = SiteStack("A", SITES, RcmSettings(), 1, 0.0, mission="m", durable=True)
    s.start(0.0)
    s.connection_made("b", 0.0, None)
    s.data_received("b", hello("B", 1) + wire.encode_frame([wire.SYNC, 1, 0]), 0.0)
    s.connection_made("c", 0.0, None)
    s.data_received("c", hello("C", 2) + wire.encode_frame([wire.SYNC, 1, 2]), 0.0)
    assert s.status("C") == "connected"
    check = relay.stream_check(7)
    old = [wire.ROUTED, 2, 2, check, [0, 0, 13], wire.ANNOUNCE, 1, 50]     # boot 1, generation 13
    s.data_received("b", wire.encode_frame(old), 0.1)
    assert s.ordering.known["C"] == 0 and s.peers["C"].relay.counters["stale_announcements"] == 1
    s.data_received("c", wire.encode_frame([wire.ANNOUNCE, 3, 60]), 0.2)
    assert s.ordering.known["C"] == 60
    new = [wire.ROUTED, 2, 2, check, [0, 0, 4], wire.ANNOUNCE, 2, 70]      # the new boot, relayed
    s.data_received("b", wire.encode_frame(new), 0.3)
    assert s.ordering.known["C"] == 70


def _forge_ack(net: Net, frontier: int) -> list:
    """B, a compromised relay, tells A that C holds A's stream up to ``frontier``."""
    a = net.stacks["A"]
    ack = relay.Routed(1, "C", 0, (("A", relay.ack_value(frontier, relay.stream_check(a.incarnation))),), wire.ACK,
                       (0,))
    acts = a.data_received(a.peers["B"].conn, wire.encode_frame(relay.encode(ack, a.index)), net.now)
    net._run_actions("A", acts)
    return acts


def test_a_relay_that_forges_an_ack_cannot_make_messages_vanish():
    """A compromised relay swallowed A's messages to C and forged C's ACK: A dropped them from its buffer,
    its next relayed SYNC carried C past them, and nobody was told. Now C reports the jump (GAP), A names
    the messages in a MISSED notice, C's client hears of them, and repair brings them back."""
    net = Net(SITES, delay=0.05)
    net.run(until=5)
    net.set_link("A", "C", "down")
    net.run(until=net.now + 1)
    assert net.stacks["A"].vias()["C"] == "B"
    b = net.stacks["B"].channels.forwarding
    honest_forward = b.forward

    def swallow(r, entries, came_from, now):
        if r.origin == "A" and r.kind == wire.DATA:
            return
        honest_forward(r, entries, came_from, now)

    b.forward = swallow
    lost = [net.send("A", f"lost{i}".encode(), ["C"], within=False).seq for i in range(5)]
    net.run(until=net.now + 0.12)       # they reached B, which kept them; not yet A's retransmission timer
    chan = net.stacks["A"].peers["C"].out
    _forge_ack(net, chan.next_seq - 1)
    assert chan.acked == chan.next_seq - 1 and not chan.buffer      # A believed it
    b.forward = honest_forward
    for i in range(3):
        net.send("A", f"after{i}".encode(), ["C"], within=False)
    net.run(until=net.now + 40)
    told = [s for m in net.logs["C"].missing if m.origin == "A" for first, last in m.ranges
            for s in range(first, last + 1)]
    assert told == lost
    assert any("never got frames" in line for line in net.logs["A"].logs)
    got = {d.seq: d for d in net.logs["C"].delivered if d.origin == "A"}
    assert all(got[s].repaired for s in lost)                        # back through repair, from A
    assert net.stacks["C"].peers["A"].relay.counters["gaps_reported"] == 1


def test_a_relayed_ack_for_frames_never_sent_closes_the_relay_link():
    net = Net(SITES, delay=0.05)
    net.run(until=5)
    net.set_link("A", "C", "down")
    net.run(until=net.now + 1)
    conn_b = net.stacks["A"].peers["B"].conn
    acts = _forge_ack(net, net.stacks["A"].peers["C"].out.next_seq + 10)
    assert any(getattr(x, "conn", None) == conn_b and "never sent" in getattr(x, "reason", "") for x in acts)


def test_a_relayed_sync_cannot_reset_or_skip_a_stream_that_arrives_directly():
    """B forged a relayed SYNC "from C" (a new incarnation, or a start far ahead) while A and C hear each other
    directly: A reset or skipped C's stream, dropped C's next frames as duplicates, and the A-C link died."""
    net = Net(SITES, delay=0.05)
    net.run(until=5)
    a = net.stacks["A"]
    c_stream = a.peers["C"].inb
    before = (c_stream.peer_incarnation, c_stream.frontier)
    for body in ((c_stream.peer_incarnation, 1, 0), (c_stream.peer_incarnation + 5, 9, 0)):
        sync = relay.Routed(1, "C", relay.stream_check(c_stream.peer_incarnation), (("A", before[1] + 50),),
                            wire.SYNC, body)
        net._run_actions("A", a.data_received(a.peers["B"].conn, wire.encode_frame(relay.encode(sync, a.index)),
                                              net.now))
    assert (c_stream.peer_incarnation, c_stream.frontier) == before
    assert a.peers["C"].relay.counters["syncs_ignored"] == 2
    got = len(net.logs["A"].delivered)
    net.send("C", b"still heard")
    net.run(until=net.now + 1)
    assert len(net.logs["A"].delivered) == got + 1 and net.status("A", "C") == "connected"


def test_one_relayed_announcement_per_hop_whatever_the_destinations_generations():
    """A's clock announcements to C and D, both behind B, cross A-B as one ROUTED frame though the two
    channels' announcement generations differ (each peer channel has its own), and C and D both take them.
    With the generation in the frame's body they went one frame each (the growth of a Lamport mission's
    announcements with its sites: docs/experiments.md)."""
    four = ["A", "B", "C", "D"]
    net = Net(four, delay=0.02)
    net.run(until=5)
    a = net.stacks["A"]
    net.set_link("A", "C", "down")          # C's channel changes path twice more than D's
    net.run(until=net.now + 2)
    net.set_link("A", "C", "up")
    net.run(until=net.now + 8)
    net.set_link("A", "C", "down")
    net.set_link("A", "D", "down")
    net.run(until=net.now + 2)
    assert a.vias() == {"B": None, "C": "B", "D": "B"}
    gens = dict(a.channels.announce_gens)
    assert gens["C"] != gens["D"], gens
    first = len(net.written)
    net.send("B", b"raises A's clock")
    net.run(until=net.now + 1)
    decoder = wire.FrameDecoder()
    relayed = [relay.decode(f, four) for _, _, data in
               [w for w in net.written[first:] if w[:2] == ("A", "B")] for f in decoder.feed(data)
               if f[0] == wire.ROUTED and f[5] == wire.ANNOUNCE]
    assert relayed
    for r in relayed:
        assert sorted((dest, relay.announce_parts(value)[1]) for dest, value in r.entries) == \
            [("C", gens["C"]), ("D", gens["D"])]
    assert net.stacks["C"].ordering.known["A"] == net.stacks["D"].ordering.known["A"] == a.ordering.clock


def test_a_sequencers_assignments_cross_a_relay_as_one_frame_for_every_destination_behind_it():
    """The leader A reaches C and D only through B: its assignments for a message to every site are one
    ROUTED CTRL frame on A-B naming both (a message's copies already were), and every site delivers the
    same order."""
    four = ["A", "B", "C", "D"]
    net = Net(four, delay=0.02, ordering="sequencer")
    net.run(until=5)
    net.set_link("A", "C", "down")
    net.set_link("A", "D", "down")
    net.run(until=net.now + 2)
    assert net.stacks["A"].vias() == {"B": None, "C": "B", "D": "B"}
    first = len(net.written)
    for i in range(5):
        net.send("B", f"b{i}".encode())
        net.run(until=net.now + 0.5)
    decoder = wire.FrameDecoder()
    ctrls = [relay.decode(f, four) for _, _, data in
             [w for w in net.written[first:] if w[:2] == ("A", "B")] for f in decoder.feed(data)
             if f[0] == wire.ROUTED and f[5] == wire.CTRL]
    assert len(ctrls) == 5 and all(sorted(d for d, _ in r.entries) == ["C", "D"] for r in ctrls), ctrls
    orders = {s: order(net, s) for s in four}
    assert all(len(o) == 5 for o in orders.values()) and len({tuple(o) for o in orders.values()}) == 1


def test_acknowledgements_of_streams_behind_one_relay_share_a_frame():
    """A reaches C and D only through B. C's and D's messages arrive at A at different moments, so their
    acknowledgements fall due apart: the first one due takes the other along (each entry naming its own
    stream's check), so A writes one ROUTED ACK per round instead of two, and C and D hold nothing
    unacknowledged after."""
    four = ["A", "B", "C", "D"]
    net = Net(four, delay=0.02)
    net.run(until=5)
    net.set_link("A", "C", "down")
    net.set_link("A", "D", "down")
    net.run(until=net.now + 2)
    first = len(net.written)
    for i in range(5):
        net.send("C", f"c{i}".encode(), ["A"], within=False)
        net.run(until=net.now + 0.1)
        net.send("D", f"d{i}".encode(), ["A"], within=False)
        net.run(until=net.now + 2)
    decoder = wire.FrameDecoder()
    acks = [relay.decode(f, four) for _, _, data in
            [w for w in net.written[first:] if w[:2] == ("A", "B")] for f in decoder.feed(data)
            if f[0] == wire.ROUTED and f[5] == wire.ACK]
    assert [sorted(d for d, _ in r.entries) for r in acks] == [["C", "D"]] * 5, acks
    checks = {s: relay.stream_check(net.stacks[s].incarnation) for s in ("C", "D")}
    assert all(relay.ack_parts(v)[1] == checks[d] for r in acks for d, v in r.entries)
    for s in ("C", "D"):
        out = net.stacks[s].peers["A"].out
        assert out.acked == out.next_seq - 1, s


def test_routed_announce_and_ack_entries_round_trip_and_are_read_strictly():
    """ANNOUNCE entries are [dest, after, generation]; an ACK of one stream keeps its check in the header and
    pairs, an ACK of several names a check per entry (header -1). Anything else is a protocol violation."""
    index = {s: i for i, s in enumerate(SITES)}
    ann = relay.Routed(1, "A", 7, (("B", relay.announce_value(5, 3)), ("C", relay.announce_value(9, 127))),
                       wire.ANNOUNCE, (2, 40))
    one = relay.Routed(1, "A", 0, (("B", relay.ack_value(4, 300)),), wire.ACK, (0,))
    two = relay.Routed(1, "A", 0, (("B", relay.ack_value(4, 300)), ("C", relay.ack_value(6, 9))), wire.ACK, (0,))
    assert relay.encode(ann, index)[4] == [1, 5, 3, 2, 9, 127]
    assert relay.encode(one, index)[3:5] == [300, [1, 4]]
    assert relay.encode(two, index)[3:5] == [relay.SEVERAL_CHECKS, [1, 4, 300, 2, 6, 9]]
    for r in (ann, one, two):
        assert relay.decode(relay.encode(r, index), SITES).entries == r.entries
    for bad in ([wire.ROUTED, 1, 0, 7, [1, 5], wire.ANNOUNCE, 2, 40],              # no generation
                [wire.ROUTED, 1, 0, 7, [1, 5, 128], wire.ANNOUNCE, 2, 40],         # generation out of range
                [wire.ROUTED, 1, 0, 7, [1, 5, 3], wire.ANNOUNCE, 2, 3, 40],        # the old body
                [wire.ROUTED, 1, 0, -1, [1, 4], wire.ACK, 0],                      # several checks, pairs
                [wire.ROUTED, 1, 0, -1, [1, 4, 65536], wire.ACK, 0],               # check out of range
                [wire.ROUTED, 1, 0, -1, [1, 4, 3], wire.CTRL, 0],                  # -1 only for ACK
                [wire.ROUTED, 1, 0, 300, [1, 4, 3], wire.ACK, 0]):                 # one check, triples
        with pytest.raises(ProtocolViolation):
            relay.decode(bad, SITES)
