"""Audit finding 8: connections that have not finished HELLO are few and small.

Before the fix any number of connections could each buffer up to
``max_frame_bytes`` (1 MiB) for ``handshake_timeout`` before saying HELLO.
"""
from __future__ import annotations

import asyncio
from pathlib import Path

import msgpack
import pytest

from contracts.mission import MissionError, RcmSettings, parse_mission
from rcm import wire
from rcm.actions import Close, Delivery
from rcm.stack import SiteStack

SITES = ["A", "B", "C"]


def hello(site: str) -> bytes:
    return wire.encode_frame([wire.HELLO, wire.PROTOCOL_VERSION, "m", site, 7, 0, 0, 1, 0,
                              ["lamport", "robust", SITES, "relay", 3]])


def stack(**settings) -> SiteStack:
    s = SiteStack("A", SITES, RcmSettings(**settings), 1, 0.0, mission="m")
    s.start(0.0)
    return s


def closes(actions) -> list[Close]:
    return [a for a in actions if isinstance(a, Close)]


def test_handshaking_connections_are_capped():
    s = stack(max_handshaking=3)
    for i in range(3):
        assert not closes(s.connection_made(f"idle{i}", 1.0, None))
    refused = closes(s.connection_made("one-too-many", 1.0, None))
    assert [c.conn for c in refused] == ["one-too-many"]
    assert "max_handshaking" in refused[0].reason
    assert s.handshaking() == 3
    assert "one-too-many" not in s.conns
    # Our own dials are not counted: they are bounded by the peers already.
    assert not closes(s.connection_made("dial-b", 1.0, "B"))
    # A connection that finishes its HELLO frees its place.
    s.data_received("idle0", hello("C"), 1.1)
    assert s.status("C") == "connected"
    assert not closes(s.connection_made("next", 1.2, None))


def test_refusals_are_logged_once_a_minute():
    from rcm.actions import Log
    s = stack(max_handshaking=1)
    s.connection_made("idle", 0.0, None)
    logs = [a for i in range(50) for a in s.connection_made(f"x{i}", 1.0 + i * 0.1, None) if isinstance(a, Log)]
    assert len(logs) == 1
    assert s.stats()["handshakes_refused"] == 50


def test_max_handshaking_default_follows_the_mission():
    assert stack().max_handshaking == 32
    many = [f"S{i}" for i in range(20)]
    assert SiteStack("S0", many, RcmSettings(), 1, 0.0).max_handshaking == 4 * 19


def test_max_handshaking_in_the_mission_file(tmp_path: Path):
    raw = {"mission": {"name": "m"}, "sites": {"A": {"rcm": "127.0.0.1:1", "chat": "127.0.0.1:2"}}}
    assert parse_mission({**raw, "rcm": {"max_handshaking": 0}}, tmp_path).rcm.max_handshaking == 0
    assert parse_mission({**raw, "rcm": {"max_handshaking": 8}}, tmp_path).rcm.max_handshaking == 8
    with pytest.raises(MissionError, match="max_handshaking = -1 must be a positive integer, or 0"):
        parse_mission({**raw, "rcm": {"max_handshaking": -1}}, tmp_path)


def test_small_frame_limit_before_hello():
    s = stack()
    assert s.connections.hello_max_frame == 4096
    s.connection_made("x", 1.0, None)
    body = msgpack.packb([wire.HELLO, "x" * 5000])
    acts = s.data_received("x", wire.encode_varint(len(body)) + body[:100], 1.0)
    assert [c.reason for c in closes(acts)] == [
        f"protocol error from unidentified peer: frame of {len(body)} bytes exceeds the 4096-byte limit"]


def test_full_limit_after_hello_even_in_the_same_read():
    """HELLO, SYNC and a 100 KB DATA frame arrive in one read: the DATA frame is measured after HELLO."""
    s = stack()
    s.connection_made("b", 1.0, None)
    data = hello("B") + wire.encode_frame([wire.SYNC, 1]) + wire.encode_frame(
        [wire.DATA, 1, 1, 1, b"x" * 100_000])
    acts = s.data_received("b", data, 1.0)
    assert not closes(acts)
    assert [len(a.payload) for a in acts if isinstance(a, Delivery)] == [100_000]
    assert s.conns["b"].decoder.max_frame == RcmSettings().max_frame_bytes


def test_hello_limit_leaves_room_for_a_big_mission():
    sites = [f"site-with-a-long-name-{i:03d}" for i in range(200)]
    s = SiteStack(sites[0], sites, RcmSettings(), 1, 0.0, mission="m")
    own = wire.encode_frame(s.sessions.hello_frame(sites[1]))
    assert s.connections.hello_max_frame >= 2 * len(own)


@pytest.mark.timeout(30)
async def test_tls_handshakes_count_against_the_cap(tmp_path: Path):
    """Accepted connections still in their TLS handshake are capped too; the next one is closed at once."""
    from rcm_certs import make_ca, write_site

    from contracts.mission import load_mission
    from faultinject.missions import write_mission
    from rcm.server import RcmServer

    m = load_mission(write_mission(tmp_path / "m.toml", "tlsm", ["A", "B"],
                                   rcm={"tls": True, "max_handshaking": 2, "handshake_timeout": 20.0,
                                        "suspect_timeout": 30.0}))
    ca = make_ca("tlsm")
    for site in ("A", "B"):
        write_site(m.site_dir(site) / "tls", ca, site, "tlsm")
    server = RcmServer(m, "A")
    await server.start()
    addr = m.site("A").rcm
    idle = []
    try:
        for _ in range(2):
            idle.append(await asyncio.open_connection(addr.host, addr.port))
        while server.upgrading < 2:          # the server has accepted both (no deadline: pytest's timeout)
            await asyncio.sleep(0.01)
        reader, writer = await asyncio.open_connection(addr.host, addr.port)
        assert await asyncio.wait_for(reader.read(), 10) == b""     # closed at once, not after 20 s
        writer.close()
        assert server.stack.stats()["handshakes_refused"] == 1
        assert server.upgrading == 2
    finally:
        for _, w in idle:
            w.close()
        await server.stop()
