"""Point-to-point channels (rcm/p2p.py): restored and rewound through their own methods."""
from __future__ import annotations

import pytest

from rcm import wire
from rcm.channels import lanes
from rcm.channels.p2p import OutboundChannel, OutFrame
from rcm.channels.receiving import InboundChannel


def test_outbound_restore_keeps_only_what_the_peer_has_not_acknowledged():
    out = OutboundChannel("robust", 10)
    frames = {ls: OutFrame(ls, wire.DATA, ls, ls, b"x") for ls in (3, 4, 5)}
    out.restore(2 + 1, frames)
    assert [f.link_seq for f in out.buffer] == [4, 5] and out.acked == 3
    assert out.next_seq == 6 and out.hwm == 5
    assert out.offer(wire.CTRL, 0, None, "c").link_seq == 6


def test_rewind_resends_from_the_last_acknowledged_frame():
    out = OutboundChannel("robust", 10)
    for _ in range(4):
        out.offer(wire.DATA, 1, 1, b"x")
    assert len(out.to_transmit()) == 4
    out.ack(2)
    out.rewind()
    assert [f.link_seq for f in out.to_transmit()] == [3, 4]


def test_inbound_restore_and_acknowledgement():
    inb = InboundChannel()
    inb.restore(7, 12)
    assert inb.peer_incarnation == 7 and inb.frontier == 12 and inb.unacked()
    inb.sync(13)
    assert inb.accept(now=1.0) and inb.ack_due() == 1.0
    assert inb.acknowledged() == 13 and not inb.unacked() and inb.ack_due() is None


def test_in_flight_counts_the_bytes_written_and_not_acknowledged():
    size = lambda n: lanes.frame_bytes(wire.DATA, b"x" * n)  # noqa: E731
    out = OutboundChannel("robust", 10, lanes.LANES)
    assert out.in_flight() == 0
    for n in (100, 200, 300):
        out.offer(wire.DATA, 1, 1, b"x" * n, lanes.ORDERED_LANE)
    out.offer(wire.DATA, 1, 1, b"x" * 50, 0)            # a FLASH: numbered (and written) first
    assert out.in_flight() == 0                          # nothing written yet
    taken = [out.take() for _ in range(3)]
    assert [len(t[0].payload) for t in taken if t] == [50, 100, 200]
    assert out.in_flight() == size(50) + size(100) + size(200)
    out.ack(1)
    assert out.in_flight() == size(100) + size(200)
    out.rewind()
    assert out.in_flight() == 0                          # everything unacknowledged goes again
    out.take()
    assert out.in_flight() == size(100)
    again = OutboundChannel("robust", 10, lanes.LANES)   # offsets rebuilt from a log
    again.restore(1, {f.link_seq: f for f in out.buffer})
    again.sent_upto = 3
    assert again.in_flight() == size(100) + size(200)


def test_acknowledged_frames_remember_the_messages_they_carried():
    """rcm.channels.released: what a gap found after an acknowledgement must name (a forged relayed ACK)."""
    from rcm import wire
    from rcm.channels import released
    from rcm.channels.p2p import OutboundChannel

    ch = OutboundChannel("robust", 100)
    for msg in (10, 11, 12):
        ch.offer(wire.DATA, msg, None, b"x")
    ch.offer(wire.MISSED, 0, None, [[3, 5]])
    ch.offer(wire.CTRL, 0, None, 7)
    for msg in (20, 21):
        ch.offer(wire.DATA, msg, None, b"y")
    ch.to_transmit()
    ch.ack(4)                                   # 10, 11, 12 and the MISSED frame acknowledged
    assert len(ch.released.entries) == 2        # one run of DATA, one MISSED
    assert ch.carried(1, 7) == ([[3, 5], [11, 12], [20, 21]], 0)      # acknowledged and still buffered
    assert ch.carried(5, 5) == ([], 0)                                 # a control frame carries none
    old = released.Released(floor=3)            # after a restart: frames up to 3 are not remembered
    old.data(4, 40)
    assert old.between(1, 4) == ([[40, 40]], 2)


def test_released_keeps_a_bounded_number_of_runs(monkeypatch):
    from rcm.channels import released

    monkeypatch.setattr(released, "RUNS", 3)
    r = released.Released()
    for i in range(1, 11):
        r.data(2 * i, 100 * i)                  # every frame its own run (link and msg both jump)
    assert len(r.entries) == 3 and r.floor == 14
    assert r.between(0, 20) == ([[800, 800], [900, 900], [1000, 1000]], 14)


def test_the_send_buffer_is_capped_in_bytes_as_well_as_in_frames():
    """100,000 frames of up to 256 KiB each was a 25 GiB cap: now max_buffered_bytes bounds it too."""
    from rcm import wire
    from rcm.channels.p2p import ChannelFull, OutboundChannel

    ch = OutboundChannel("robust", 100, max_bytes=1000)
    for i in range(3):
        assert ch.has_room(1, 324)
        ch.offer(wire.DATA, i + 1, None, b"x" * 300)        # 324 bytes each with framing
    assert ch.bytes == 972 and not ch.has_room(1, 324)
    with pytest.raises(ChannelFull, match="bytes buffered"):
        ch.offer(wire.DATA, 4, None, b"x" * 300)
    ch.to_transmit()
    ch.ack(2)
    assert ch.bytes == 324 and ch.has_room(1, 324)
    alone = OutboundChannel("robust", 100, max_bytes=10)
    alone.offer(wire.DATA, 1, None, b"y" * 500)             # one frame always fits an empty buffer


def test_a_send_past_the_byte_cap_gets_backpressure():
    from contracts.mission import RcmSettings
    from rcm.actions import Backpressure
    from rcm.stack import SiteStack

    s = SiteStack("A", ["A", "B"], RcmSettings(max_buffered_bytes=300_000), 1, 0.0, mission="m")
    s.start(0.0)
    s.send(b"x" * 200_000, None, 0.1)                         # B is suspected: buffered for it
    with pytest.raises(Backpressure, match="300000 bytes"):
        s.send(b"x" * 200_000, None, 0.2)
    assert s.stats()["peers"]["B"]["buffered_bytes"] > 200_000
