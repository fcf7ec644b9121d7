"""The pacing layer (rcm/channels/pacing.py): which frame a paced link writes next and what it counts."""
from __future__ import annotations

import pytest
from rcm_harness import Net

from rcm import wire
from rcm.channels import lanes
from rcm.channels.p2p import OutboundChannel
from rcm.channels.pacing import Forwarded, LaneFrame, Pacing, Resend

RATE = 8_000            # 1 KB/s


def chan() -> OutboundChannel:
    return OutboundChannel("robust", 1000, lanes.LANES)


def offer(ch: OutboundChannel, lane: int, n: int = 1, size: int = 200) -> None:
    for i in range(n):
        ch.offer(wire.DATA, i + 1, None, b"x" * size, lane)


def test_an_idle_link_writes_the_highest_lane_first():
    p = Pacing({"B": RATE})
    ch = chan()
    offer(ch, lanes.ORDERED_LANE)
    offer(ch, 0)
    choice = p.choose("B", {"B": ch}, 0.0)
    assert isinstance(choice, LaneFrame) and choice.urgent and choice.floor == 0 and choice.contended


def test_a_numbered_frame_to_write_again_goes_first():
    p = Pacing({"B": RATE})
    ch = chan()
    offer(ch, 0)
    ch.take()
    ch.rewind()                                 # written, not acknowledged: to write again
    assert p.choose("B", {"B": ch}, 0.0) == Resend("B")


def test_urgent_lanes_take_at_most_their_share_while_the_ordered_lane_waits():
    """A FLASH flood with ROUTINE waiting: the ordered lane still gets a quarter of the bytes."""
    p = Pacing({"B": RATE})
    ch = chan()
    offer(ch, 0, 400)
    offer(ch, lanes.ORDERED_LANE, 400)
    wrote = {True: 0, False: 0}
    for _ in range(400):
        choice = p.choose("B", {"B": ch}, 0.0)
        assert isinstance(choice, LaneFrame)
        ch.take(choice.floor)
        p.wrote("B", choice, 200)
        wrote[choice.urgent] += 200
    assert 0.74 <= wrote[True] / (wrote[True] + wrote[False]) <= 0.76


def test_relayed_frames_take_turns_with_ours_in_the_same_lane():
    p = Pacing({"B": RATE})
    ch = chan()
    offer(ch, lanes.ORDERED_LANE, 4)
    for _ in range(4):
        assert p.push_forward("B", "C", lanes.ORDERED_LANE, b"r" * 50, 1)
    kinds = []
    for _ in range(8):
        choice = p.choose("B", {"B": ch}, 0.0)
        kinds.append(type(choice).__name__)
        if isinstance(choice, Forwarded):
            p.pop_forward("B", choice.floor)
        else:
            ch.take(choice.floor)
    assert kinds == ["LaneFrame", "Forwarded"] * 4


def test_the_pacer_holds_the_link_to_its_rate():
    p = Pacing({"B": RATE})
    assert p.ready("B", 0.0)
    p.charge("B", 1000)                         # one second of the link
    p.settle(0.0)
    assert not p.ready("B", 0.5) and p.ready("B", 1.0 - lanes.BURST)
    assert p.ready("C", 0.0)                    # an unpaced neighbour is always ready


def test_a_route_limit_keeps_a_window_of_a_second():
    p = Pacing({})
    p.set_route("C", RATE)
    ch = chan()
    offer(ch, lanes.ORDERED_LANE, 10, size=300)
    assert p.may_write("C", ch, 0.0)
    for _ in range(4):                          # about 1,300 bytes written, none acknowledged: past 1,000
        f, _ = ch.take()
        p.wrote_on_route("C", lanes.frame_bytes(f.kind, f.payload), 0.0)
    assert not p.may_write("C", ch, 100.0)      # the window, not the rate, holds it
    p.set_route("C", None)
    assert p.may_write("C", ch, 0.0)


def test_the_pacer_counts_what_crossed_the_link_once_the_edge_reports_it():
    p = Pacing({"B": RATE})
    p.charge("B", 1000)                         # the stack wrote one second of the link
    p.settle(0.0)
    assert p.idle_at("B") == pytest.approx(1.0)
    p.adjust("B", 600, 1000, 0.0)               # compression took 400 B off
    assert p.idle_at("B") == pytest.approx(0.6)
    p.adjust("B", 100, 0, 0.0)                  # a TLS flight: 100 B the stack never wrote
    assert p.idle_at("B") == pytest.approx(0.7)
    p.charge("B", 1000)                         # charged at 0.8 now (the last large write's lesson)
    p.settle(0.0)
    assert p.idle_at("B") == pytest.approx(1.5)
    p.adjust("B", 0, 1000, 1.2)                 # no more back than the link time still ahead
    assert p.idle_at("B") == pytest.approx(1.2, abs=0.002)
    p.adjust("C", 500, 500, 0.5)                # an unpaced neighbour has nothing to count
    assert p.idle_at("C") is None


def test_the_pacer_charges_a_stack_byte_at_what_the_links_large_writes_cost_and_settles_the_rest():
    from rcm.channels.pacing import RATIO_FLOOR, RATIO_WRITE
    p = Pacing({"B": RATE})
    p.charge("B", 1000)
    p.adjust("B", 400, 1000, 0.0)               # a large write: 0.4 link bytes per stack byte
    assert p.pacers["B"].ratio == pytest.approx(0.7)            # halfway from 1.0
    assert p.idle_at("B") == pytest.approx(0.4)
    p.charge("B", 1000)                         # charged at 0.7 while the edge holds it (lingering)
    p.settle(0.0)
    assert p.idle_at("B") == pytest.approx(0.4 + 0.7)
    p.adjust("B", 400, 1000, 0.0)               # written: what it cost beyond the estimate, here less
    assert p.idle_at("B") == pytest.approx(0.8)
    assert p.pacers["B"].est_owed == p.pacers["B"].plain_owed == 0
    before = p.pacers["B"].ratio
    p.charge("B", 10)
    p.adjust("B", 40, 10, 0.0)                  # a small write is a record's overhead: no lesson
    assert p.pacers["B"].ratio == before and 10 < RATIO_WRITE
    for _ in range(20):
        p.charge("B", 1000)
        p.adjust("B", 1, 1000, 0.0)
    assert p.pacers["B"].ratio == RATIO_FLOOR   # however well it compresses
    p.charge("B", 500)
    p.connection_gone("B")                      # the connection went before the write
    assert p.pacers["B"].est_owed == p.pacers["B"].plain_owed == 0
    assert p.pacers["B"].ratio == 1.0           # a new connection's compression has no history yet


def test_the_stack_charges_its_peers_pacer_what_the_edge_reports_for_a_connection():
    net = Net(["A", "B"], delay=0.05, rates={"A": {"B": RATE}, "B": {"A": RATE}})
    net.run(5.0)
    st = net.stacks["A"]
    conn = st.peers["B"].conn
    assert conn is not None
    before = st.pacing.idle_at("B")
    assert before is not None
    assert st.wire_sent(conn, 500, 0, net.now)               # a pacer moved: the edge schedules again
    assert st.pacing.idle_at("B") == pytest.approx(max(before, net.now) + 0.5)
    assert not st.wire_sent("no such connection", 500, 0, net.now)
    assert st.pacing.idle_at("B") == pytest.approx(max(before, net.now) + 0.5)
    free = Net(["A", "B"], delay=0.05)                        # unpaced: nothing to charge, nothing to schedule
    free.run(5.0)
    fa = free.stacks["A"]
    assert not fa.wire_sent(fa.peers["B"].conn, 500, 0, free.now)


def _transmits(actions):
    from rcm.actions import Transmit
    return [a for a in actions if isinstance(a, Transmit)]


def test_writes_on_a_slow_link_may_linger_unless_something_urgent_is_in_them():
    from rcm.channels.pacing import LINGER_BYTES
    net = Net(["A", "B", "C"], delay=0.05, rates={"A": {"B": 2_400, "C": 512_000}, "B": {"A": 2_400}})
    net.run(10.0)
    a = net.stacks["A"]
    linger = LINGER_BYTES * 8 / 2_400                                 # 1 s: the link time of LINGER_BYTES
    assert a.connections.lingers == {"B": linger}                     # C's link is not slow
    _, acts = a.send(b"routine", None, net.now + 1.0)
    holds = {a.connections.conns[t.conn].peer: t.hold for t in _transmits(acts)}
    assert holds == {"B": linger, "C": 0.0}
    net.run(net.now + 2.0)
    _, acts = a.send(b"FLASH", None, net.now, "flash")
    holds = {a.connections.conns[t.conn].peer: t.hold for t in _transmits(acts)}
    assert holds["B"] == 0.0                                          # the FLASH, and what went with it, now


def test_the_acceptors_hello_never_lingers():
    """The dialer's side of a reconnection opens when the acceptor's HELLO arrives: the batch that writes it
    holds nothing, even on a slow link."""
    net = Net(["A", "B"], delay=0.05, rates={"A": {"B": 2_400}, "B": {"A": 2_400}})
    held = []
    run = net._run_actions

    def spy(s, actions):
        held.extend((s, t.hold, t.data) for t in _transmits(actions))
        return run(s, actions)
    net._run_actions = spy
    net.run(5.0)
    hellos = [(s, hold) for s, hold, data in held if wire.FrameDecoder().feed(data)[0][0] == wire.HELLO]
    assert len(hellos) >= 2 and all(hold == 0.0 for _, hold in hellos)
    assert any(hold > 0 for _, hold, _ in held)                 # later routine writes do linger


def test_the_slowest_links_linger_the_link_time_of_a_few_writes_overhead_and_faster_ones_the_floor():
    from rcm.channels.pacing import LINGER_BELOW_BPS, LINGER_BYTES, LINGER_SECONDS, Pacing
    p = Pacing({"hf": 2_400, "vhf": 4_800, "uhf": 9_600, "sat": 56_000, "lan": LINGER_BELOW_BPS})
    assert p.linger("hf") == LINGER_BYTES * 8 / 2_400 == 1.0
    assert p.linger("vhf") == 0.5
    assert p.linger("uhf") == p.linger("sat") == LINGER_SECONDS
    assert p.linger("lan") == p.linger("unpaced") == 0.0
