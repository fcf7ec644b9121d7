"""Bounds at the stack: a peer's out-of-range clock or sequence number, or a msgpack bomb, closes its link
only; what a site holds back for a peer that never announces its clock is bounded.

Before the fix one ANNOUNCE of 2^64-1 was adopted: every later send of the
site raised OverflowError, and the clock spread to every other site.
"""
from __future__ import annotations

import pytest
from testkit import calls

from contracts.mission import RcmSettings
from ordering import KEY_INT_MAX, honest_ceiling
from rcm import wire
from rcm.actions import Close, Delivery, Log, Persist, Transmit
from rcm.durability.records import Received, decode
from rcm.stack import SiteStack

SITES = ["A", "B", "C"]


def hello(site: str, ordering: str = "lamport") -> bytes:
    return wire.encode_frame([wire.HELLO, wire.PROTOCOL_VERSION, "m", site, 7, 0, 0, 1, 0,
                              [ordering, "robust", SITES, "relay", 3]])


def site_a(ordering: str = "lamport", durable: bool = False) -> SiteStack:
    """Site A with accepted, handshaken connections "b" (from B) and "c" (from C)."""
    s = SiteStack("A", SITES, RcmSettings(ordering=ordering), 1, 0.0, mission="m", durable=durable)
    s.start(0.0)
    for conn, peer in (("b", "B"), ("c", "C")):
        s.connection_made(conn, 0.0, None)
        s.data_received(conn, hello(peer, ordering) + wire.encode_frame([wire.SYNC, 1]), 0.0)
        assert s.status(peer) == "connected"
    return s


def closed(actions) -> dict:
    return {a.conn: a.reason for a in actions if isinstance(a, Close)}


@pytest.mark.parametrize("clock", [KEY_INT_MAX + 1, 2**63, 2**64 - 1])
def test_huge_announce_closes_only_that_link(clock):
    s = site_a()
    acts = s.data_received("b", wire.encode_frame([wire.ANNOUNCE, 0, clock]), 1.0)
    assert list(closed(acts)) == ["b"]
    assert "exceeds the order-key bound 2^53" in closed(acts)["b"]
    assert s.status("C") == "connected"
    # The clock was not adopted and was not passed on to C.
    assert s.ordering.clock == 0
    to_c = wire.FrameDecoder().feed(b"".join(a.data for a in acts if isinstance(a, Transmit) and a.conn == "c"))
    assert all(f[0] == wire.LINKS for f in to_c), to_c      # only A's link-state: B's link is gone
    result, acts = s.send(b"still works", None, 1.1)
    assert result.order == [1, "A"]


@pytest.mark.parametrize("ordering, header", [
    ("lamport", 2**63),
    ("hybrid", [2**63, 0]),
    ("sequencer", [2**63, "A", 1, "A"]),
])
def test_huge_data_header_is_refused_before_it_is_counted(ordering, header):
    """The frame is not logged, not acknowledged and not delivered: the peer resends it, or not."""
    s = site_a(ordering, durable=True)
    frontier = s.peers["B"].inb.frontier
    acts = s.data_received("b", wire.encode_frame([wire.DATA, 1, 1, header, b"poison"]), 1.0)
    assert list(closed(acts)) == ["b"]
    assert s.peers["B"].inb.frontier == frontier
    assert not [a for a in acts if isinstance(a, Persist) and isinstance(a.record, Received)]
    assert not [a for a in acts if isinstance(a, Delivery)]
    assert ("B", 1) not in s.multicast.undelivered
    assert s.status("C") == "connected"


def test_huge_message_sequence_number_closes_the_link():
    s = site_a()
    acts = s.data_received("b", wire.encode_frame([wire.DATA, 1, 2**63, 1, b"x"]), 1.0)
    assert "message sequence number" in closed(acts)["b"]
    acts = s.data_received("c", wire.encode_frame([wire.SYNC, 2**64 - 1]), 1.0)
    assert "malformed SYNC" in closed(acts)["c"]


def test_bad_control_frame_is_not_logged_nor_counted():
    s = site_a("sequencer", durable=True)
    frontier = s.peers["B"].inb.frontier
    acts = s.data_received("b", wire.encode_frame([wire.CTRL, 1, ["e", 2**63, "B"]]), 1.0)
    assert list(closed(acts)) == ["b"]
    assert s.peers["B"].inb.frontier == frontier
    assert not [a for a in acts if isinstance(a, Persist)]


@pytest.mark.parametrize("clock", [KEY_INT_MAX, honest_ceiling(1.0) + 1])
def test_announce_beyond_the_honest_ceiling_closes_only_that_link(clock):
    """One ANNOUNCE of exactly 2^53 used to be legal: the clock reached its bound and every site it reached
    refused every send, for good. Now anything past the honest ceiling closes that link; sends go on."""
    s = site_a()
    acts = s.data_received("b", wire.encode_frame([wire.ANNOUNCE, 0, clock]), 1.0)
    assert "beyond what any honest run" in closed(acts)["b"]
    assert s.status("C") == "connected" and s.ordering.clock == 0
    result, _ = s.send(b"still works", None, 1.1)
    assert result.order == [1, "A"]


def test_send_refused_and_logged_when_the_clock_is_at_the_bound():
    """At the bound (centuries from now: ``FAR``) this site refuses sends, never overflows, and says so."""
    from rcm.actions import SendRefused

    far = 1e11
    s = SiteStack("A", SITES, RcmSettings(), 1, far, mission="m")
    s.start(far)
    s.connection_made("b", far, None)
    s.data_received("b", hello("B") + wire.encode_frame([wire.SYNC, 1]), far)
    s.data_received("b", wire.encode_frame([wire.ANNOUNCE, 0, KEY_INT_MAX]), far)
    seq = s.msg_seq
    with pytest.raises(SendRefused, match="bound 2\\^53"):
        s.send(b"x", None, far + 0.1)
    assert s.msg_seq == seq and s.ordering.clock == KEY_INT_MAX
    with pytest.raises(SendRefused):
        s.send(b"y", None, far + 0.2)
    logs = [a for a in s.timer(far + 0.3) if isinstance(a, Log) and a.level == "critical"]
    assert len(logs) == 1 and "can send nothing more" in logs[0].message


def test_poisoned_log_record_is_skipped_at_restore():
    """A log written before the bound existed may hold a poisoned message: the site still starts."""
    s = SiteStack("A", SITES, RcmSettings(), 1, 0.0, mission="m", durable=True)
    records = [["I", "B", 7], ["R", "B", 7, 1, 1, 2**63, b"poison"], ["R", "B", 7, 2, 2, 3, b"fine"]]
    acts = s.restore([decode(r) for r in records], 0.0)
    assert [a.payload for a in acts if isinstance(a, Delivery)] == [b"fine"]
    assert any(isinstance(a, Log) and "skipped" in a.message for a in acts)
    assert s.ordering.clock == 3


def test_an_advert_forged_in_our_name_is_refused_and_our_adverts_still_encode():
    """A forged advert "from A" at (2^64-1, 2^64-1) made A go past it: every advert A encoded then overflowed
    msgpack (``Fatal error: protocol.data_received()``) and routes through A vanished mission-wide."""
    s = site_a()
    acts = s.data_received("b", wire.encode_frame([wire.LINKS, 0, 2**64 - 1, 2**64 - 1, [1]]), 1.0)
    assert "beyond what any honest site" in closed(acts)["b"]
    own = s.router.links.own.version       # A's links changed (B's is gone): a new version of its own
    acts = s.data_received("c", wire.encode_frame([wire.LINKS, 0, 2**40, 2**40, [2]]), 1.1)
    assert not closed(acts) and s.router.links.own.version == own
    assert any(isinstance(a, Log) and "never said it" in a.message for a in acts)
    assert s.stats()["adverts"]["forged_own"] == 1
    acts = s.timer(1000.0)          # the refresh encodes and floods A's own advert
    assert any(isinstance(a, Transmit) and a.conn == "c" for a in acts)


# --- msgpack bombs on the wire ------------------------------------------------------------------------
def wire_bombs(n: int) -> dict[str, bytes]:
    """Frame bodies of at most ``n`` bytes that declare more than they hold, nest deep or amplify."""
    import struct

    import msgpack
    return {
        "array declared 2^32-1 long": b"\xdd\xff\xff\xff\xff\x01",
        "map declared 2^32-1 long": b"\xdf\xff\xff\xff\xff",
        "bin declared 4 GiB": b"\x92\x01\xc6\xff\xff\xff\xff",
        "str declared 4 GiB": b"\x92\x01\xdb\xff\xff\xff\xff",
        "ext declared 4 GiB": b"\x92\x01\xc9\xff\xff\xff\xff\x05",
        "nesting past the unpacker's stack": b"\x91" * n,
        "ext types as frame fields": msgpack.packb([wire.DATA, msgpack.ExtType(1, b"x"), 1, msgpack.Timestamp(1),
                                                    msgpack.ExtType(127, b"y" * 100)]),
        "an ext type as a map key": b"\x92\x03\x81\xd4\x05\x00\x01",
        "a frame of a million empty arrays": b"\xdd" + struct.pack("!I", n - 5) + b"\x90" * (n - 5),
        "a frame of a million empty maps": b"\xdd" + struct.pack("!I", n - 5) + b"\x80" * (n - 5),
    }



def _received(s: SiteStack, data: bytes, acts: list) -> None:
    acts.extend(s.data_received("x", data, 1.5))

@pytest.mark.parametrize("before_hello", [True, False])
def test_msgpack_bombs_close_one_link_in_bounded_time_and_memory(before_hello):
    """Declared lengths beyond the frame, nesting, ext types, and the worst amplification a frame under
    ``max_frame_bytes`` allows: the link closes, other links are untouched, memory stays bounded."""
    import tracemalloc
    cap = RcmSettings().max_frame_bytes
    # Memory is measured on 64 KiB frames (the amplification is per byte, so it is the same at the cap;
    # tracemalloc makes a million allocations slow), time on frames at the cap.
    for size, traced in ((cap if not before_hello else 4000, False), (64 * 1024 if not before_hello else 4000, True)):
        for name, body in wire_bombs(size).items():
            s = site_a()
            s.connection_made("x", 1.0, None)
            if not before_hello:
                s.connection_lost("b", 1.0)
                s.data_received("x", hello("B") + wire.encode_frame([wire.SYNC, 1]), 1.0)
            if traced:
                tracemalloc.start()
            acts: list = []
            work = calls(_received, s, wire.encode_varint(len(body)) + body, acts)
            if traced:
                peak = tracemalloc.get_traced_memory()[1]
                tracemalloc.stop()
                # One-byte msgpack values become ~70-byte Python objects: transient, bounded by the frame cap.
                assert peak < 100 * max(size, len(body)), (name, peak)
            assert list(closed(acts)) == ["x"], (name, acts)
            assert s.status("C") == "connected" and "c" in s.conns, name
            assert work < 5_000, (name, work)           # decoded in C, refused at once: no walk over it


# --- messages held back when a connected peer never announces its clock ------------------------------
def silence_clock(stack: SiteStack) -> None:
    """Make a site's ordering protocol never send a control body (a buggy or hostile peer): its links stay
    up (heartbeats, acks, data) but nobody learns its clock."""
    o = stack.ordering
    drop = lambda outs: [x for x in outs if type(x).__name__ != "SendControl"]   # noqa: E731
    for name in ("receive", "control", "set_status", "resync", "flush", "tick"):
        real = getattr(o, name)
        setattr(o, name, lambda *a, _real=real, **k: drop(_real(*a, **k)))


@pytest.mark.parametrize("ordering, silent", [("lamport", "B"), ("hybrid", "B"), ("sequencer", "A"),
                                              ("sequencer", "B")])
def test_held_back_messages_are_bounded_when_a_connected_peer_never_announces(ordering, silent):
    """Site ``silent`` keeps its links up but sends no ordering control (clock announcements; for the
    sequencer, A, its order assignments). Hybrid time and the sequencer's failover bound what others hold;
    Lamport would hold all of it: a site refuses sends (back-pressure) while max_buffered_messages are held
    back waiting for the order, which bounds every site's share."""
    from rcm_harness import Net
    settings = RcmSettings(heartbeat_timeout=0.5, liveness_timeout=1.5, silence_timeout=3.0, suspect_timeout=5.0,
                           reconnect_period=1.0, ack_interval=0.2, max_buffered_messages=100, ordering=ordering)
    net = Net(SITES, settings, delay=0.01, ordering=ordering)
    net.run(3.0)
    assert all(net.status(a, b) == "connected" for a in SITES for b in SITES if a != b)
    silence_clock(net.stacks[silent])
    sender = "C" if silent == "A" else "A"
    sent = refused = 0
    for i in range(1000):                      # 10 messages a second from A for 100 s
        try:
            net.send(sender, b"m%d" % i)
            sent += 1
        except Exception as e:                 # back-pressure would be a bound too
            assert type(e).__name__ in ("Backpressure", "SendRefused"), e
            refused += 1
        net.run(net.now + 0.1)
    held = max(net.stacks[s].stats()["held_back"] for s in SITES)
    # A bound: held back at most max_buffered_messages (sends refused beyond it), or B suspected after
    # liveness_timeout of holding everything up, so its silence stops blocking the order.
    assert held <= settings.max_buffered_messages, (held, sent, refused)
    if ordering == "lamport":
        assert refused > 0 and sent >= settings.max_buffered_messages, (sent, refused)   # the bound was reached
