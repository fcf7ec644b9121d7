"""Confinement: a message sent to a subset of the sites travels only among them and its origin
(rcm.wire.envelope's ``r``, the channel's path, relays, repair, the log; docs/relay.md, "Confinement")."""
from __future__ import annotations

import pytest
from rcm_harness import Net

from contracts.mission import RcmSettings
from rcm import wire
from rcm.actions import ProtocolViolation, SendRefused
from rcm.durability import records
from rcm.repair.antientropy import Repair
from rcm.repair.frames import RepairError, parse_repair, repair_body
from rcm.repair.retention import Retention
from rcm.routing import relay
from rcm.routing.linkstate import Advert, LinkState
from rcm.stack import frames
from rcm.stack.recovery import replay
from rcm.wire import envelope

THREE = ["A", "B", "C"]
FOUR = ["A", "B", "C", "D"]


def payloads(net: Net, site: str, origin: str = "A") -> list[bytes]:
    return [d.payload for d in net.logs[site].delivered if d.origin == origin]


def cut_triangle(durable: bool = False) -> Net:
    """A, B, C with the A-C link cut: A reaches C only through B."""
    net = Net(THREE, delay=0.05, durable=durable)
    net.run(until=5)
    net.set_link("A", "C", "down")
    net.run(until=net.now + 0.5)
    assert net.stacks["A"].vias()["C"] == "B"
    return net


def test_a_message_to_c_alone_waits_rather_than_cross_b_then_arrives_once_in_fifo():
    net = cut_triangle()
    net.send("A", b"open-1")                                  # to everyone: relayed through B as before
    net.run(until=net.now + 0.5)
    assert payloads(net, "C") == [b"open-1"]
    for i in range(3):
        net.send("A", b"SECRET-%d" % i, ["C"])                # confined to {A, C}: no path without B
    net.send("A", b"open-2")
    net.run(until=net.now + 1)                                # (shorter than liveness_timeout: past it, withheld)
    assert net.crossed(b"SECRET") == set()                    # not even to B, which would have relayed it
    assert payloads(net, "C") == [b"open-1"]                  # the channel to C waits (FIFO: open-2 too)
    assert net.status("A", "C") == "connected" and net.stacks["A"].vias()["C"] == "B"    # status: unrestricted
    assert payloads(net, "B") == [b"open-1", b"open-2"]       # other destinations are not held up
    net.set_link("A", "C", "up")
    net.run(until=net.now + 10)
    assert net.stacks["A"].vias()["C"] is None
    assert payloads(net, "C") == [b"open-1", b"SECRET-0", b"SECRET-1", b"SECRET-2", b"open-2"]
    assert net.crossed(b"SECRET") == {("A", "C")}
    assert b"SECRET-0" not in payloads(net, "B")


def test_a_message_to_b_and_c_is_relayed_through_b_and_one_to_c_and_d_through_d():
    net = Net(FOUR, delay=0.05)
    net.run(until=5)
    net.set_link("A", "C", "down")
    net.run(until=net.now + 0.5)
    assert net.stacks["A"].vias()["C"] == "B"                 # of B and D, the smaller name
    net.send("A", b"TO-BC", ["B", "C"])
    net.send("A", b"TO-CD", ["C", "D"])                       # B is not cleared for it: through D
    net.run(until=net.now + 1)
    assert payloads(net, "C") == [b"TO-BC", b"TO-CD"]
    assert net.crossed(b"TO-BC") <= {("A", "B"), ("B", "C")}
    assert net.crossed(b"TO-CD") <= {("A", "C"), ("A", "D"), ("D", "C")} and ("D", "C") in net.crossed(b"TO-CD")
    assert payloads(net, "D") == [b"TO-CD"] and payloads(net, "B") == [b"TO-BC"]
    assert net.stacks["D"].stats()["relay_confined"] >= 1
    assert net.stacks["A"].vias()["C"] == "B"                 # the status still names the unrestricted hop


def test_routes_within_a_set_cross_no_site_outside_it():
    ls = LinkState("A", FOUR, 1, 3)
    for origin, ns in {"B": {"A", "C"}, "C": {"B", "D"}, "D": {"A", "C"}}.items():
        ls.take(Advert(origin, (1, 1), frozenset(ns)))
    assert ls.routes({"B", "D"})["C"].next_hop == "B"
    assert ls.routes({"B", "D"}, within=frozenset({"A", "C", "D"}))["C"].next_hop == "D"
    assert "C" not in ls.routes({"B", "D"}, within=frozenset({"A", "C"}))


def test_a_repair_request_from_outside_the_confinement_gets_no_content():
    sites = FOUR
    holder = Repair("B", sites, Retention(3600.0, 1 << 30), 10.0, 1 << 20, 1024, 0.0)
    mask = envelope.reach_mask(["A", "B", "C"], {s: i for i, s in enumerate(sites)})
    holder.retention.add("A", 1, (1, "A"), b"SECRET", 0.0, reach=mask)
    holder.retention.add("A", 2, (2, "A"), b"open", 0.0)
    holder.frame("D", wire.FETCH, [0, [[1, 2]]], 0.0)             # D was never told it missed 1: a forged ask
    out = holder.serve(0.0, {})
    served = [parse_repair(o.body, sites, 1024) for o in out if o.kind == wire.REPAIR]
    assert [r.seq for r in served] == [2] and all(b"SECRET" not in repr(o.body).encode() for o in out)
    assert holder.counters["confined_refused"] == 1
    holder.frame("C", wire.FETCH, [0, [[1, 1]]], 0.0)
    got = [parse_repair(o.body, sites, 1024) for o in holder.serve(0.0, {}) if o.kind == wire.REPAIR]
    assert [(r.seq, r.payload, r.reach) for r in got] == [(1, b"SECRET", mask)]   # the mask travels with it


def test_a_confined_repair_body_reads_back_and_a_bad_one_is_refused():
    body = repair_body(0, 3, [3, "A"], b"x", reach=0b101)
    assert len(body) == 8 and parse_repair(body, THREE, 1024).reach == 0b101
    stubbed = repair_body(0, 3, [3, "A"], b"", "flash", 9.0, True, 0b101)
    r = parse_repair(stubbed, THREE, 1024)
    assert r.expired and r.expires_at == 9.0 and r.precedence == "flash" and r.reach == 0b101
    for bad in ([*body[:7], 0], [*body[:7], 0b1000], [*body[:7], "x"], [*body[:7], 0b110]):   # 0b110: not A's
        with pytest.raises(RepairError):
            parse_repair(bad, THREE, 1024)


def decoder(site: str = "A") -> frames.FrameDecoder:
    return frames.FrameDecoder(site, THREE, LinkState(site, THREE, 1, 3), 1024, True)


@pytest.mark.parametrize("r", [0, -1, 1 << 3, "x", 1.0, b"\x01", True])
def test_a_forged_or_oversized_confinement_is_a_protocol_violation(r):
    with pytest.raises(ProtocolViolation):
        decoder().decode([wire.DATA, 0, 1, {"r": r, "h": 7}, b"x"], 1.0)
    routed = [wire.ROUTED, 1, 1, 7, [2, 4], wire.DATA, 4, {"r": r, "h": 7}, b"x"]
    with pytest.raises(ProtocolViolation):
        decoder().decode(routed, 1.0)


def test_content_confined_away_from_its_receiver_or_a_named_site_is_a_protocol_violation():
    ok = decoder().decode([wire.DATA, 0, 1, {"r": 0b011, "h": 7}, b"x"], 1.0)
    assert ok.message.reach == 0b011
    with pytest.raises(ProtocolViolation, match="confined to other sites"):
        decoder().decode([wire.DATA, 0, 1, {"r": 0b110, "h": 7}, b"x"], 1.0)         # not A's
    # B relays, for C, a frame A confined to {A, C}: B (relaying) is outside it.
    with pytest.raises(ProtocolViolation, match="confined to other sites"):
        decoder("B").decode([wire.ROUTED, 1, 0, 7, [2, 4], wire.DATA, 4, {"r": 0b101, "h": 7}, b"x"], 1.0)
    # A frame confined to {A, B} that names C as a destination.
    with pytest.raises(ProtocolViolation, match="confined away from C"):
        decoder("B").decode([wire.ROUTED, 1, 0, 7, [2, 4], wire.DATA, 4, {"r": 0b011, "h": 7}, b"x"], 1.0)
    f = decoder("B").decode([wire.ROUTED, 1, 0, 7, [2, 4], wire.DATA, 4, {"r": 0b111, "h": 7}, b"x"], 1.0)
    assert isinstance(f, frames.Routed) and f.frame.reach == 0b111


def test_a_mask_wider_than_64_sites_goes_as_bytes_and_reads_back():
    mask = 1 << 70 | 1
    header = envelope.wrap(7, reach=mask)
    assert isinstance(header["r"], bytes) and envelope.open_(header, 80).reach == mask
    assert envelope.stub(envelope.wrap(7, expires_at=5.0, reach=mask))["r"] == header["r"]
    with pytest.raises(envelope.EnvelopeError):
        envelope.open_(header, 64)                                # wider than the mission
    with pytest.raises(envelope.EnvelopeError):
        envelope.open_({"r": b"\x01" + b"\x00" * 9, "h": 7}, 80)   # trailing zeros: not canonical


def test_a_confined_message_read_back_from_the_log_is_still_confined():
    net = cut_triangle(durable=True)
    net.send("A", b"SECRET-1", ["C"])
    net.run(until=net.now + 1)
    assert net.crossed(b"SECRET") == set()
    logged = [p.record for p in net.persisted["A"]]
    net.crash("A")
    net.written.clear()
    net.restart("A", records=logged)
    net.run(until=net.now + 3)
    assert net.stacks["A"].vias()["C"] == "B" and net.stacks["A"].router.confined["C"] == 0b101
    assert net.crossed(b"SECRET") == set()                    # after the restart, still not through B
    net.set_link("A", "C", "up")
    net.run(until=net.now + 10)
    assert payloads(net, "C") == [b"SECRET-1"] and net.crossed(b"SECRET") == {("A", "C")}
    kept = [r for p in net.persisted["C"] for r in [p.record] if isinstance(r, records.Received)]
    assert envelope.reach_of(kept[-1].header) == 0b101


def test_delivered_and_kept_records_keep_the_mask():
    for rec in (records.Delivered(1, "A", 2, [2, "A"], False, b"x", "routine", False, None, False, 0b101),
                records.Kept("A", 2, [2, "A"], 1.0, b"x", "routine", None, False, 1 << 70)):
        enc = rec.encode()
        assert type(rec).decode(enc[1:]) == rec


def test_a_relay_forwards_a_confined_frame_only_within_its_mask():
    """B, relaying A's frame confined to {A, B, C}, would route to C through D (B-C is down): it drops it."""
    net = Net(FOUR, delay=0.05, settings=RcmSettings(suspect_timeout=10.0))
    net.run(until=5)
    for a, b in (("A", "C"), ("B", "C"), ("A", "D")):
        net.set_link(a, b, "down")
    net.run(until=net.now + 1)
    b = net.stacks["B"]
    assert b.router.next_hop("C") == "D"
    r = relay.Routed(1, "A", relay.stream_check(net.stacks["A"].incarnation), (("C", 99),), wire.DATA,
                     (1, envelope.wrap(7, reach=0b0111), b"SECRET"), 0b0111)
    dropped = b.channels.forwarding.dropped
    b.channels.forwarding.forward(r, [("C", 99)], "A", net.now)
    net._run_actions("B", b._finish(net.now))
    assert net.crossed(b"SECRET") == set() and b.channels.forwarding.dropped == dropped + 1
    unconfined = relay.Routed(1, "A", r.check, (("C", 99),), wire.DATA, (1, 7, b"OPEN"))
    b.channels.forwarding.forward(unconfined, [("C", 99)], "A", net.now)
    net._run_actions("B", b._finish(net.now))
    assert net.crossed(b"OPEN") == {("B", "D")}             # the same frame unconfined goes on through D


def test_a_confined_backlog_waiting_for_a_path_does_not_hold_up_acknowledging_the_other_way():
    net = cut_triangle()
    net.send("C", b"SECRET-C", ["A"])                         # C's channel to A waits (no path within {A, C})
    for i in range(20):
        net.send("A", b"open-%d" % i)                         # A's stream to C goes through B, unconfined
    net.run(until=net.now + 3)
    assert payloads(net, "C") == [b"open-%d" % i for i in range(20)]
    out = net.stacks["A"].peers["C"].out
    assert out.acked == out.next_seq - 1 and not out.buffer   # C acknowledged through B: A's buffer is free
    assert net.crossed(b"SECRET") == set()


def test_a_confined_message_repaired_later_goes_to_its_destination_only_through_its_sites():
    """C is cut off past suspect_timeout while A sends to C and D, then D goes down. C comes back through B
    only: A's MISSED notice goes through B, but A's repair waits (its only way, through B, is outside
    {A, C, D}) until D is back and C reaches A through D."""
    net = Net(FOUR, delay=0.05, settings=RcmSettings(suspect_timeout=2.0))
    net.run(until=5)
    for other in ("A", "B", "D"):
        net.set_link("C", other, "down")
    net.run(until=net.now + 10)
    assert net.status("A", "C") == "disconnected"
    assert net.send("A", b"SECRET-CD", ["C", "D"]).skipped == ("C",)
    net.run(until=net.now + 1)
    assert payloads(net, "D") == [b"SECRET-CD"]
    net.crash("D")
    net.set_link("C", "B", "up")
    net.run(until=net.now + 30)
    assert [m.origin for m in net.logs["C"].missing] == ["A"]         # told through B
    assert payloads(net, "C") == [] and net.crossed(b"SECRET") == {("A", "D")}
    stats = net.stacks["A"].repairs.stats()["repair"]
    assert stats["served"] == 0 and stats["confined_unreachable"] >= 1  # not served while no way within: later
    net.restart("D")
    net.set_link("C", "D", "up")
    net.run(until=net.now + 30)
    got = [d for d in net.logs["C"].delivered if d.origin == "A"]
    assert [(d.payload, d.repaired) for d in got] == [(b"SECRET-CD", True)]
    assert net.crossed(b"SECRET") == {("A", "D"), ("D", "C")}


def test_a_confined_flash_in_a_paced_channels_lanes_waits_and_then_overtakes():
    net = Net(THREE, delay=0.05, rates={"A": {"B": 56_000, "C": 56_000}})
    net.run(until=5)
    net.set_link("A", "C", "down")
    net.run(until=net.now + 1)
    assert net.stacks["A"].vias()["C"] == "B"
    for i in range(40):
        net.send("A", b"r%d" % i + b"x" * 150)                # about 1 s of the paced link: a backlog in lanes
    net.send("A", b"SECRET-FLASH", ["C"], precedence="flash")
    net.run(until=net.now + 2)                                  # (past liveness_timeout it would be withheld)
    assert net.crossed(b"SECRET") == set()
    assert len(payloads(net, "B")) == 40                       # B's own channel is not held up
    net.set_link("A", "C", "up")
    net.run(until=net.now + 15)
    got = payloads(net, "C")
    assert len(got) == 41 and len(set(got)) == 41 and got.index(b"SECRET-FLASH") < 5   # past the backlog
    assert [int(p[1:p.index(b"x")]) for p in got if p != b"SECRET-FLASH"] == list(range(40))
    assert net.crossed(b"SECRET") == {("A", "C")}


def test_on_direct_links_a_subset_message_crosses_only_its_own_links_and_naming_everyone_is_not_confined():
    net = Net(FOUR, delay=0.05)
    net.run(until=5)
    net.send("A", b"SECRET-C", ["C"])
    net.send("A", b"SECRET-BD", ["B", "D", "A"])               # naming the origin changes nothing
    net.send("A", b"EVERYONE", ["B", "C", "D"])
    net.run(until=net.now + 1)
    assert net.crossed(b"SECRET-C") == {("A", "C")}
    assert net.crossed(b"SECRET-BD") == {("A", "B"), ("A", "D")}
    assert payloads(net, "C") == [b"SECRET-C", b"EVERYONE"]
    held = net.stacks["A"].retention.msgs["A"]
    assert [held[s].reach for s in (1, 2, 3)] == [0b0101, 0b1011, None]    # bit i: the i-th site, sorted


def test_within_widens_a_subset_sends_confinement_and_false_lifts_it():
    net = cut_triangle()
    net.send("A", b"WIDE", ["C"], within=["B"])               # C's content, B trusted to relay it
    net.send("A", b"FREE", ["C"], within=False)               # no secret of C's: any path
    net.run(until=net.now + 1)
    assert payloads(net, "C") == [b"WIDE", b"FREE"]
    assert net.crossed(b"WIDE") == {("A", "B"), ("B", "C")} and net.crossed(b"FREE") == {("A", "B"), ("B", "C")}
    assert payloads(net, "B") == []                           # relayed, never delivered there
    with pytest.raises(SendRefused, match="unknown site 'Z' in within"):
        net.send("A", b"x", ["C"], within=["Z"])


@pytest.mark.parametrize("within", [True, False, ("B", "C")])
def test_the_local_send_frame_carries_within(within):
    from rcm.wire import local as cw
    data = cw.send(7, b"p", ["C"], "routine", None, within)
    (frame,) = cw.decoder().feed(data)
    req = cw.decode_request(frame)
    assert isinstance(req, cw.Send) and req.within == within and req.expires_at is None


@pytest.mark.parametrize("ordering", ["lamport", "sequencer", "hybrid"])
def test_a_confined_message_stuck_past_liveness_is_missed_so_the_order_goes_on_and_repair_brings_it(ordering):
    net = Net(THREE, delay=0.05, ordering=ordering)
    net.run(until=5)
    net.set_link("A", "C", "down")
    net.run(until=net.now + 12)              # the silent A-C connection closed: A reaches C through B only
    assert net.stacks["A"].vias()["C"] == "B"
    net.send("A", b"SECRET-1", ["C"])         # confined to {A, C}: waits for the A-C link
    t0 = net.now
    for i in range(5):
        net.send("B", b"open-%d" % i)
        net.run(until=net.now + 0.5)
    net.run(until=t0 + net.settings.liveness_timeout + 3)
    # The global order at C did not wait for the stuck message longer than liveness_timeout: B's lines came.
    assert payloads(net, "C", "B") == [b"open-%d" % i for i in range(5)]
    assert net.crossed(b"SECRET") == set()
    net.set_link("A", "C", "up")
    net.run(until=net.now + net.settings.repair_period + 15)
    got = [d for d in net.logs["C"].delivered if d.origin == "A" and d.payload == b"SECRET-1"]
    assert len(got) == 1 and got[0].late and got[0].repaired        # once, by repair, over the A-C link
    assert net.crossed(b"SECRET") == {("A", "C")}


@pytest.mark.parametrize("paced", [False, True], ids=["numbered-at-once", "waiting-in-lanes"])
def test_a_withheld_message_is_not_sent_again_from_the_log_after_a_restart(paced):
    """A's message to C alone finds no path within {A, C} for liveness_timeout: it is withheld, and C is told it
    is missing (a MISSED through B). A then crashes and restarts from its log: the message must not come back
    as a plain DATA (C would deliver a message it reported missing, without the repaired mark), only by
    repair. On a paced link the message waited unnumbered in its lane; otherwise it was numbered at once."""
    rates = {"A": {"B": 56_000, "C": 56_000}} if paced else None
    net = Net(THREE, delay=0.05, durable=True, rates=rates)
    net.run(until=5)
    net.set_link("A", "C", "down")
    net.run(until=net.now + 0.5)
    assert net.stacks["A"].vias()["C"] == "B"
    net.send("A", b"SECRET-1", ["C"], precedence="flash")
    net.run(until=net.now + net.settings.liveness_timeout + 2)
    assert [m.origin for m in net.logs["C"].missing] == ["A"] and payloads(net, "C") == []
    logged = [p.record for p in net.persisted["A"]]
    net.crash("A")
    net.restart("A", records=logged)
    net.set_link("A", "C", "up")
    net.run(until=net.now + 30)
    got = [(d.payload, d.repaired) for d in net.logs["C"].delivered if d.origin == "A"]
    assert got == [(b"SECRET-1", True)]                       # by repair, once
    assert net.crossed(b"SECRET") <= {("A", "C")}


def test_reading_the_log_back_a_withheld_message_waits_as_its_missed_notice_only():
    """``recovery.replay``: a MISSED written for a message that waited in a lane (withheld in place) leaves
    neither that DATA nor the MISSED a compacted log held as waiting; another MISSED leaves other DATA."""
    header = envelope.wrap(7, reach=0b101)
    sent = [records.LocalSend(seq, header, b"SECRET-%d" % seq, {"C": 0}, ()) for seq in (1, 2)]
    live = replay([*sent, records.Outbound("C", 7, wire.MISSED, [[1, 1]])], "A", ["B", "C"], 0, 65536)
    assert [(f.kind, f.msg_seq) for f in live.peers["C"].queued] == [(wire.DATA, 2)]
    assert live.peers["C"].frames[7].kind == wire.MISSED
    compacted = [records.Outbound("C", 0, wire.MISSED, [[1, 1]]), records.Outbound("C", 7, wire.MISSED, [[1, 1]])]
    again = replay(compacted, "A", ["B", "C"], 0, 65536)
    assert again.peers["C"].queued == [] and again.peers["C"].frames[7].payload == [[1, 1]]


def test_acknowledgements_lost_in_a_blackhole_are_sent_again_on_the_new_path():
    """C's message to B alone crosses the B-C link just before it is blackholed: B delivers it, but its
    acknowledgement is lost in the blackhole. C's channel to B must not leave the confined frame (it was
    written: it may have arrived), so C writes nothing more to B on any path until B acknowledges it. B's
    acknowledgements take the path through A once B stops hearing C directly: B acknowledges again there,
    so C's channel moves to A as well and everything after the message flows. Otherwise C's later messages,
    its clock announcements among them, wait for the link to come back while both sites show each other
    connected, and B holds its own messages back for C's clock (an IGO stall the simulator found)."""
    net = Net(THREE, delay=0.05, settings=RcmSettings(suspect_timeout=30.0))
    net.run(until=5)
    net.send("C", b"SECRET-BC", ["B"])
    net.run(until=net.now + 0.01)
    net.set_link("B", "C", "blackhole")                        # the message is on its way; B's answer will not be
    for i in range(3):
        net.send("C", b"open-%d" % i)
    net.run(until=net.now + 8)
    assert net.status("B", "C") == "connected" and net.stacks["B"].vias()["C"] == "A"
    assert payloads(net, "B", "C") == [b"SECRET-BC", b"open-0", b"open-1", b"open-2"]
    assert net.crossed(b"SECRET") == {("C", "B")}
