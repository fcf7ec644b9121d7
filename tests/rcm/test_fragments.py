"""Fragmentation on paced links (``rcm.channels.fragments``), on a virtual clock: pieces, reassembly and
its bounds, a FLASH between the pieces of a large frame, a reconnection in the middle of one."""
from __future__ import annotations

import pytest
from rcm_harness import Net

from contracts.mission import RcmSettings
from rcm import wire
from rcm.channels import forwarding, fragments, lanes
from rcm.channels.p2p import OutFrame

RATE = 56_000
PACED = {"A": {"B": RATE}, "B": {"A": RATE}}
BIG = 64 * 1024


def _until(net: Net, cond, step: float = 0.01, limit: float = 120.0) -> float:
    """Run the virtual clock until ``cond()`` holds; the time it first did."""
    t = net.now
    while not cond():
        assert t < limit, "condition never held"
        t += step
        net.run(t)
    return net.now


def _payloads(net: Net, site: str) -> list[bytes]:
    return [d.payload for d in net.logs[site].delivered]


def test_fragment_size_follows_the_link_rate_with_a_floor():
    assert fragments.fragment_size(56_000) == 1750           # a quarter second at 56 kbit/s
    assert fragments.fragment_size(2_400) == fragments.FRAGMENT_FLOOR
    assert fragments.piece(1000, 300) == 250                 # four even pieces, not 300+300+300+100
    assert fragments.piece(600, 300) == 300


def test_pieces_reassemble_into_the_frame_a_direct_connection_carries():
    f = OutFrame(0, wire.DATA, 12, [7, "A"], b"x" * 5000, lane=2)
    data = fragments.inner(f)
    r = fragments.Reassembly(1 << 20)
    n = fragments.piece(len(data), 1750)
    pieces = [data[i:i + n] for i in range(0, len(data), n)]
    for i, chunk in enumerate(pieces[:-1]):
        assert r.take(2, i * n, chunk, last=False) is None
    got = r.take(2, (len(pieces) - 1) * n, pieces[-1], last=True)
    assert got == data and not r.partial
    # The check byte and the ack come with the last piece; the message number becomes the connection's delta.
    assert fragments.whole(got, 5, 3, 10) == [wire.DATA, 5, 2, [7, "A"], b"x" * 5000, 3]
    ctrl = fragments.inner(OutFrame(0, wire.CTRL, 0, None, [1, 2], lane=2))
    assert fragments.whole(ctrl, 9, None, 0) == [wire.CTRL, 9, [1, 2]]


@pytest.mark.parametrize("frame, why", [
    ([wire.FRAG, 6, 0, b"x"], "lane"),
    ([wire.FRAG, 3, 0, b"x", 1], "check 0"),
    ([wire.FRAG, 4, 0, b"x", 0, 7], "no ack"),
    ([wire.FRAG, -1, 0, b"x"], "lane"),
    ([wire.FRAG, 0, -1, b"x"], "offset"),
    ([wire.FRAG, 0, 1 << 20, b"x"], "offset"),
    ([wire.FRAG, 0, 0, b""], "non-empty"),
    ([wire.FRAG, 0, 0, "text"], "non-empty"),
    ([wire.FRAG, 0, 0, b"x", 128], "check"),
    ([wire.FRAG, 0, 0], "fields"),
    ([wire.FRAG, 0, 0, b"x", 1, 0, 9], "fields"),
])
def test_malformed_pieces_are_refused(frame, why):
    with pytest.raises(fragments.FragmentError, match=why):
        fragments.parse(frame, 1 << 20)


def test_reassembly_is_bounded_and_refuses_pieces_out_of_place():
    r = fragments.Reassembly(100)
    with pytest.raises(fragments.FragmentError, match="offset 10"):
        r.take(0, 10, b"x", last=False)                      # nothing started in that lane
    r.take(0, 0, b"x" * 60, last=False)
    with pytest.raises(fragments.FragmentError, match="offset 30"):
        r.take(0, 30, b"x", last=False)                      # a gap, or an overlap
    with pytest.raises(fragments.FragmentError, match="frame limit"):
        r.take(0, 60, b"x" * 41, last=False)
    assert not r.partial                                     # the partial frame is gone with the error
    r.take(1, 0, b"y" * 50, last=False)
    r.take(1, 0, b"z" * 10, last=False)                      # offset 0: a new frame replaces the old one
    assert r.held() == 10 and len(r.partial) == 1


@pytest.mark.parametrize("inner", [
    b"\xc1",                                                  # not msgpack
    fragments._packer.pack([wire.FRAG, 0, 0, b"x"]),          # no nesting
    fragments._packer.pack([wire.HEARTBEAT, 1]),              # not a reliable frame
    fragments._packer.pack([wire.DATA, 0, 1, b"x"]),          # message number 0
    fragments._packer.pack([wire.DATA, 5, 1, b"x"]),          # the same number as the last (a zero delta)
    fragments._packer.pack([wire.CTRL, 1, 2]),                # extra fields
])
def test_a_reassembled_frame_must_be_a_whole_reliable_frame(inner):
    with pytest.raises(fragments.FragmentError):
        fragments.whole(inner, 1, None, 5)


def test_a_flash_waits_at_most_one_piece_behind_a_large_routine_message():
    net = Net(["A", "B"], delay=0.05, rates=PACED)
    net.run(5.0)
    big = b"r" * BIG
    net.send("A", big)
    sent = net.now + 0.01
    net.run(sent)
    net.send("A", b"FLASH", precedence="flash")
    arrived = _until(net, lambda: b"FLASH" in _payloads(net, "B"))
    piece = fragments.fragment_size(RATE) * 8 / RATE       # 0.25 s of link time
    # One piece on the wire (plus the pacer's burst) and the delay; whole, 64 KiB would hold it 9.4 s.
    assert arrived - sent <= piece + 0.05 + 0.05 + 0.02
    _until(net, lambda: big in _payloads(net, "B"))
    assert _payloads(net, "B").count(big) == 1 and _payloads(net, "B").index(b"FLASH") == 0
    a = net.stacks["A"].stats()["peers"]["B"]
    assert a["fragments_out"] >= BIG // fragments.fragment_size(RATE)
    assert net.stacks["B"].stats()["peers"]["A"]["fragments_in"] == a["fragments_out"]
    _until(net, lambda: net.stacks["A"].stats()["peers"]["B"]["buffered"] == 0)   # both acknowledged


def test_pieces_survive_a_reconnection_in_the_middle_of_a_frame():
    net = Net(["A", "B"], delay=0.05, rates=PACED, settings=RcmSettings(reconnect_period=0.5))
    net.run(5.0)
    big, after = b"q" * BIG, b"next"
    net.send("A", big)
    net.send("A", after)
    _until(net, lambda: net.stacks["B"].stats()["peers"]["A"]["fragments_in"] >= 5)
    net.set_link("A", "B", "down")                            # both ends drop their partial frames
    net.run(net.now + 0.2)
    net.set_link("A", "B", "up")
    _until(net, lambda: after in _payloads(net, "B"))
    assert _payloads(net, "B") == [big, after]                # whole, once, in order
    _until(net, lambda: net.stacks["A"].stats()["peers"]["B"]["buffered"] == 0)


def test_a_bad_piece_closes_the_connection_and_nothing_else_moves():
    net = Net(["A", "B"], delay=0.05, rates=PACED)
    net.run(5.0)
    b = net.stacks["B"]
    conn = b.peers["A"].conn
    before = b.peers["A"].inb.frontier
    bad = wire.encode_frame([wire.FRAG, 2, 0, b"\x92\x01"]) + wire.encode_frame([wire.FRAG, 2, 2, b"x", 0])
    net._run_actions("B", b.data_received(conn, bad, net.now))
    assert b.peers["A"].conn != conn and b.peers["A"].inb.frontier == before
    assert any("fragmented" in line for line in net.logs["B"].logs)


def _from(net: Net, site: str, origin: str) -> list[bytes]:
    return [d.payload for d in net.logs[site].delivered if d.origin == origin]


def test_a_relay_cuts_a_large_relayed_frame_so_a_flash_waits_at_most_one_piece():
    """A reaches C only through B, whose link to C is paced: B forwards A's 64 KiB line in pieces, and B's
    own FLASH goes between two of them (whole, the line would hold it 9.4 s). (A FLASH relayed from a third
    site waits behind its own origin's earlier frames, FIFO per origin: docs/rcm.md, "Fragmentation".)"""
    net = Net(["A", "B", "C"], delay=0.05, rates={"B": {"C": RATE}})
    net.set_link("A", "C", "down")
    net.run(10.0)
    assert net.stacks["A"].vias()["C"] == "B"
    big = b"r" * BIG
    net.send("A", big, dests=["C"], within=False)
    _until(net, lambda: net.stacks["C"].stats()["peers"]["B"]["fragments_in"] >= 2)
    assert net.stacks["B"].stats()["relay_cut"] == 1
    sent = net.now
    net.send("B", b"FLASH", dests=["C"], precedence="flash")
    arrived = _until(net, lambda: b"FLASH" in _from(net, "C", "B"))
    piece = fragments.fragment_size(RATE) * 8 / RATE       # 0.25 s of link time
    assert arrived - sent <= piece + 0.05 + 0.05 + 0.02     # one piece (and the pacer's burst), the delay
    assert big not in _from(net, "C", "A")                  # the FLASH passed it
    _until(net, lambda: big in _from(net, "C", "A"))
    assert _from(net, "C", "A") == [big]                     # whole, once
    pieces = -(-BIG // fragments.fragment_size(RATE))
    assert net.stacks["C"].stats()["peers"]["B"]["fragments_in"] >= pieces


def test_relayed_pieces_reassemble_into_the_routed_frame_and_nothing_else():
    frame = [wire.ROUTED, 1, "A", 7, [[2, 5]], wire.DATA, [1, [3, "A"], b"x" * 900]]
    encoded = fragments.relayed_pieces(frame, 2, 256)
    r = fragments.Reassembly(1 << 20)
    got = None
    dec = wire.FrameDecoder()
    parsed = [fragments.parse(f, 1 << 20) for f in dec.feed(b"".join(encoded))]
    assert [p.lane for p in parsed] == [fragments.RELAYED + 2] * len(encoded) and parsed[-1].check == 0
    assert all(p.relayed for p in parsed) and all(p.check is None for p in parsed[:-1])
    for p in parsed:
        got = r.take(p.lane, p.offset, p.chunk, p.check is not None)
    assert got is not None and fragments.relayed_whole(got) == frame
    with pytest.raises(fragments.FragmentError, match="ROUTED"):
        fragments.relayed_whole(fragments.inner(OutFrame(0, wire.CTRL, 0, None, [1], lane=2)))


def test_a_cut_relayed_frame_expiring_before_its_first_piece_goes_as_its_stub_alone():
    frame = [wire.ROUTED, 1, "A", 7, [[2, 5]], wire.DATA, [1, [3, "A"], b"s" * 900]]
    q = lanes.ForwardQueue()
    assert q.push_all("A", 2, forwarding.cut_pieces(frame, 2, 256, 1, (10.0, lambda: b"STUB")))
    assert q.push_all("A", 2, forwarding.cut_pieces(frame, 2, 256, 1, (10.0, lambda: b"STUB")))
    first, entries = q.pop(now=9.0)                       # not expired: the first frame goes in pieces
    assert entries == 1 and fragments.parse(wire.FrameDecoder().feed(first)[0], 1 << 20).offset == 0
    rest = [q.pop(now=10.0) for _ in range(3)]            # it expired meanwhile: its pieces still go (started)
    assert all(data and n == 0 for data, n in rest)
    assert q.pop(now=10.0) == (b"STUB", 1)                # the second one's turn came after its expiry
    assert [q.pop(now=10.0) for _ in range(3)] == [(b"", 0)] * 3 and q.bytes == 0 and q.head() is None
    assert not q.push_all("A", 2, [(b"x" * q.max_bytes, 1, None), (b"y", 0, None)]) and q.dropped == 1
    assert q.head() is None                               # all or none



def test_the_pieces_of_a_cut_frame_go_one_after_the_other_in_their_lane():
    """The receiver holds one partial relayed frame per lane: once a cut frame's first piece went, no other
    stream's frame of that lane goes before its last (an urgent frame of another lane still may)."""
    q = lanes.ForwardQueue()
    q.push("Y", 1, b"y-priority")
    q.push("Y", 2, b"y-cut-1", more=True)
    q.push("Y", 2, b"y-cut-2")
    assert q.push_all("A", 2, [(b"a-1", 1, None), (b"a-2", 0, None), (b"a-3", 0, None)])
    assert q.pop(floor=2) == (b"a-1", 1)          # Y's head is of lane 1, below the floor: A's frame starts
    assert q.pop() == (b"y-priority", 1)           # an urgent frame of another lane goes between two pieces
    assert q.head() == (2, 5)                      # Y's cut frame arrived first, but A's is going: its pieces
    q.push("Z", 0, b"z-flash")
    assert [q.pop()[0] for _ in range(5)] == [b"z-flash", b"a-2", b"a-3", b"y-cut-1", b"y-cut-2"]
    assert not q.cutting and q.head() is None
