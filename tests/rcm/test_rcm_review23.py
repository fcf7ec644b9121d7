"""Issue 23 item 1 (RCM side) and item 2 (RCM bounds): the attack review beyond the audit of issue 25.

Sans-IO and in-process; the local socket with real processes is test_rcm_review23_local.py. A test marked
``xfail(strict=True)`` reproduces a hole in rcm/ or ordering/ that is reported, not fixed here (those
packages were being refactored): it fails today and will flag itself (XPASS, a failure) once fixed.
"""
from __future__ import annotations

import inspect
import struct
import time
import tracemalloc

import msgpack
import pytest
from rcm_harness import Net

from contracts.mission import RcmSettings
from rcm import wire
from rcm.stack import SiteStack

pytestmark = pytest.mark.timeout(60)
SITES = ["A", "B", "C"]


def hello(site: str, stack: SiteStack) -> bytes:
    """A peer's HELLO agreeing with ``stack`` on the mission's terms (whatever their wire form)."""
    terms = stack.terms.encode() if hasattr(stack.terms, "encode") else ["lamport", "robust", SITES]
    return wire.encode_frame([wire.HELLO, wire.PROTOCOL_VERSION, "m", site, 7, 0, 0, 1, 0, terms])


def site_a() -> SiteStack:
    s = SiteStack("A", SITES, RcmSettings(), 1, 0.0, mission="m")
    s.start(0.0)
    for conn, peer in (("b", "B"), ("c", "C")):
        s.connection_made(conn, 0.0, None)
        s.data_received(conn, hello(peer, s) + wire.encode_frame([wire.SYNC, 1]), 0.0)
        assert s.status(peer) == "connected"
    return s


def named(actions, *names: str) -> list:
    """Actions by class name (the stack's action types moved modules during the refactor)."""
    return [a for a in actions if type(a).__name__ in names]


# --- the origin of a delivery is the connection's peer, never a field ------------------------------
def test_review23_a_data_frame_is_delivered_as_the_connections_peer_whatever_it_carries():
    """DATA has no origin field: B's messages are delivered as B's everywhere, and frames on B's connection
    with extra elements naming C either close that link or come out as B's, never as C's."""
    net = Net(SITES, RcmSettings(heartbeat_timeout=0.5, liveness_timeout=1.5, suspect_timeout=5.0,
                                 reconnect_period=1.0, ack_interval=0.2), delay=0.01)
    net.run(3.0)
    net.send("B", b"from B")
    net.run(5.0)
    for site in ("A", "C"):
        got = [(d.origin, d.payload) for d in net.logs[site].delivered]
        assert got == [("B", b"from B")], (site, got)
    s = site_a()
    acts = []
    for frame in ([wire.DATA, 1, 1, 5, b"claims C", 0, "C", "C:1"], [wire.DATA, 1, 1, 5, b"claims C", None, ["C"]],
                  [wire.DATA, 1, 1, [5, "C"], b"claims C"]):
        acts += s.data_received("b", wire.encode_frame(frame), 0.5)
        if "b" not in s.conns:                      # refused: B's link closed, as a violation should
            break
    assert all(d.origin == "B" for d in named(acts, "Delivery", "Delivered")), acts
    assert s.status("C") == "connected" and "c" in s.conns


def test_review23_a_local_client_cannot_choose_the_origin_of_its_send():
    """The local API's send has no origin: the stack stamps its own site on every message it sends."""
    assert "origin" not in inspect.signature(SiteStack.send).parameters
    s = site_a()
    result, acts = s.send(b"x", None, 1.0)
    assert result.msg_id.startswith("A:")
    from rcm.wire import local as clientwire
    if hasattr(clientwire, "decode_request"):
        for frame in (["send", 1, b"x", None, "B"], ["send", 1, b"x", None, {"origin": "B"}]):
            try:
                req = clientwire.decode_request(frame)
            except (ValueError, TypeError):
                continue                                    # refused: as good
            assert "B" not in repr(req).replace("b'x'", ""), req


# --- msgpack bombs on the wire ------------------------------------------------------------------------
def wire_bombs(n: int) -> dict[str, bytes]:
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


@pytest.mark.parametrize("before_hello", [True, False])
def test_review23_msgpack_bombs_close_one_link_in_bounded_time_and_memory(before_hello):
    """Declared lengths beyond the frame, nesting, ext types, and the worst amplification a frame under
    ``max_frame_bytes`` allows: the link closes, other links are untouched, memory stays bounded."""
    cap = RcmSettings().max_frame_bytes
    # Memory is measured on 64 KiB frames (the amplification is per byte, so it is the same at the cap;
    # tracemalloc makes a million allocations slow), time on frames at the cap.
    for size, traced in ((cap if not before_hello else 4000, False), (64 * 1024 if not before_hello else 4000, True)):
        for name, body in wire_bombs(size).items():
            s = site_a()
            s.connection_made("x", 1.0, None)
            if not before_hello:
                s.connection_lost("b", 1.0)
                s.data_received("x", hello("B", s) + wire.encode_frame([wire.SYNC, 1]), 1.0)
            if traced:
                tracemalloc.start()
            t0 = time.perf_counter()
            acts = s.data_received("x", wire.encode_varint(len(body)) + body, 1.5)
            elapsed = time.perf_counter() - t0
            if traced:
                peak = tracemalloc.get_traced_memory()[1]
                tracemalloc.stop()
                # One-byte msgpack values become ~70-byte Python objects: transient, bounded by the frame cap.
                assert peak < 100 * max(size, len(body)), (name, peak)
            closed = [a.conn for a in named(acts, "Close")]
            assert closed == ["x"], (name, acts)
            assert s.status("C") == "connected" and "c" in s.conns, name
            assert elapsed < 10.0, (name, elapsed)


def test_review23_the_local_socket_decoder_refuses_bombs_too():
    from rcm.wire import local as clientwire
    dec = clientwire.decoder()
    for body in (b"\xdd\xff\xff\xff\xff\xa4send", b"\x91" * 100_000, b"\xc1"):
        with pytest.raises(wire.FrameError):
            clientwire.decoder().feed(wire.encode_varint(len(body)) + body)
    with pytest.raises(wire.FrameError):
        dec.feed(wire.encode_varint(clientwire.CLIENT_MAX_FRAME + 1))


# --- item 2: Lamport's held messages when a connected peer never announces its clock -------------------
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
def test_review23_held_back_messages_are_bounded_when_a_connected_peer_never_announces(ordering, silent):
    """Site ``silent`` keeps its links up but sends no ordering control (clock announcements; for the
    sequencer, A, its order assignments). Hybrid time and the sequencer's failover bound what others hold;
    Lamport would hold all of it: a site refuses sends (back-pressure) while max_buffered_messages are held
    back waiting for the order, which bounds every site's share."""
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
