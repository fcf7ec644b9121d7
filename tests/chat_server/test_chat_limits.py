"""The limits added for issue 10: per-user rate limit over all of a user's connections, sessions per
user, connection cap, HTTP request and keep-alive timeouts before the WebSocket upgrade (slowloris,
half-open), WebSocket heartbeat (half-open after the upgrade); each set from ``[chat]``."""
from __future__ import annotations

import asyncio
import json
import logging
import math
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest
from testkit import wait_until

from chat_server.admission import OpenFiles
from chat_server.client import ChatError
from chat_server.config import parse_chat_settings
from chat_server.front_end import Admitted
from contracts.mission import MissionError

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(60)


class FrozenClock:
    """A monotonic clock that only moves when told: token buckets refill exactly as the test says."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


async def raw_login(url: str, user: str, **kw):
    http = aiohttp.ClientSession()
    ws = await http.ws_connect(url, max_msg_size=0, **kw)
    await ws.send_str(json.dumps({"type": "hello", "user": user, "password": "correct horse"}))
    while True:
        frame = json.loads((await asyncio.wait_for(ws.receive(), 5)).data)
        if frame["type"] == "welcome":
            return http, ws


async def reply(ws, frame: dict) -> aiohttp.WSMessage:
    """Send a frame; the first non-push frame back (or the close)."""
    await ws.send_str(json.dumps(frame))
    while True:
        msg = await asyncio.wait_for(ws.receive(), 5)
        if msg.type != aiohttp.WSMsgType.TEXT or json.loads(msg.data)["type"] not in ("presence", "site_status"):
            return msg


async def test_per_user_rate_limit_spans_the_users_connections(cluster_factory):
    clock = FrozenClock()
    cl = await cluster_factory(["A"], users={"A": ["alice", "bob"]}, monotonic=clock,
                               chat={"rate_limit_frames": 100, "rate_limit_burst": 100,
                                     "user_rate_limit_frames": 2, "user_rate_limit_burst": 6})
    (h1, ws1), (h2, ws2) = await raw_login(cl.url("A"), "alice"), await raw_login(cl.url("A"), "alice")
    bob = await cl.client("A", "bob")
    try:
        for ws in (ws1, ws2, ws1, ws2, ws1, ws2):       # 6 frames: within the user's burst
            assert (await reply(ws, {"type": "rooms"})).type == aiohttp.WSMsgType.TEXT
        clock.t += 1.0                                     # refills 2 tokens for the user
        for ws in (ws1, ws2):
            assert (await reply(ws, {"type": "rooms"})).type == aiohttp.WSMsgType.TEXT
        msg = await reply(ws1, {"type": "rooms"})          # the 9th frame in 1 s: over the user's budget
        assert msg.type == aiohttp.WSMsgType.CLOSE and msg.data == 1008, msg
        assert "flood: user alice" in msg.extra and "all its connections" in msg.extra
        assert (await bob.rooms()) is not None             # another user has a budget of its own
    finally:
        for h, ws in ((h1, ws1), (h2, ws2)):
            await ws.close()
            await h.close()


async def test_sessions_per_user_are_capped(cluster_factory):
    cl = await cluster_factory(["A"], users={"A": ["alice"]}, chat={"max_sessions_per_user": 2})
    first = await cl.client("A", "alice")
    await cl.client("A", "alice")
    with pytest.raises(ChatError) as e:
        await cl.client("A", "alice")
    assert e.value.code == "limit" and "max_sessions_per_user" in str(e.value)
    await first.close()
    for _ in range(100):                                   # the server notices the close, then admits one
        if len(cl.servers["A"].user_sessions.get("alice", ())) < 2:
            break
        await asyncio.sleep(0.02)
    await cl.client("A", "alice")


async def test_connection_cap_closes_extra_connections_at_once(cluster_factory):
    cl = await cluster_factory(["A"], users={"A": ["alice"]}, chat={"max_connections": 2})
    port = cl.servers["A"].port
    held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(2)]
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        assert await asyncio.wait_for(reader.read(), 5) == b""        # closed without a word
        writer.close()
    finally:
        for _, w in held:
            w.close()
    await wait_until(lambda: cl.servers["A"].admission.open == 0, "every held connection counted out",
                     interval=0.02)
    await cl.client("A", "alice")                          # room again once they are gone


async def test_one_address_cannot_take_every_connection(cluster_factory, caplog):
    cl = await cluster_factory(["A"], users={"A": ["alice"]},
                               chat={"max_connections": 8, "max_connections_per_address": 3})
    server = cl.servers["A"]
    port = server.port

    async def closed_at_once(host: str) -> bool:
        reader, writer = await asyncio.open_connection(host, port)
        try:
            return await asyncio.wait_for(reader.read(), 5) == b""
        except ConnectionResetError:
            return True
        finally:
            writer.close()

    held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(3)]
    try:
        for _ in range(100):                                   # the server has counted all three
            if server.admission.per_address.get("127.0.0.1") == 3:
                break
            await asyncio.sleep(0.02)
        with caplog.at_level(logging.WARNING, logger="chat_server"):
            assert await closed_at_once("127.0.0.1")
            assert await closed_at_once("127.0.0.1")
        refusals = [r.getMessage() for r in caplog.records if "refused a connection" in r.getMessage()]
        assert refusals == ["refused a connection from 127.0.0.1: max_connections_per_address = 3 "
                            "reached for 127.0.0.1"]                       # once, not per attempt
        # Another client address still gets in (127.0.0.2 is loopback too: the client binds it as its source).
        reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=("127.0.0.2", 0))
        writer.write(b"GET /health HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
        assert (await asyncio.wait_for(reader.read(), 5)).startswith(b"HTTP/1.1 ")
        writer.close()
    finally:
        for _, w in held:
            w.close()
    await wait_until(lambda: not server.admission.per_address, "every address counted out", interval=0.02)
    assert server.admission.per_address == {}                           # every connection was counted out again
    await cl.client("A", "alice")


@pytest.mark.parametrize("prefix", [b"", b"GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgr"])
async def test_slowloris_and_silent_connections_are_closed_before_the_upgrade(cluster_factory, prefix):
    cl = await cluster_factory(["A"], users={"A": ["alice"]}, chat={"http_request_timeout": 0.3})
    reader, writer = await asyncio.open_connection("127.0.0.1", cl.servers["A"].port)
    writer.write(prefix)
    got = b""
    try:
        while True:                                        # nothing more is sent: headers never complete
            data = await asyncio.wait_for(reader.read(1024), 5)
            if not data:
                break
            got += data
    except ConnectionResetError:
        pass
    finally:
        writer.close()
    assert got == b""
    alice = await cl.client("A", "alice")                  # a real client (headers at once) is served
    await alice.join("ops")


async def test_idle_keepalive_http_connection_is_closed(cluster_factory):
    cl = await cluster_factory(["A"], chat={"keepalive_timeout": 0.3})
    reader, writer = await asyncio.open_connection("127.0.0.1", cl.servers["A"].port)
    writer.write(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    assert head.startswith(b"HTTP/1.1 200")
    rest = await asyncio.wait_for(reader.read(), 10)      # the body, then EOF once idle
    assert rest.endswith(b"}")
    writer.close()


async def test_half_open_websocket_is_closed_by_the_heartbeat(cluster_factory):
    cl = await cluster_factory(["A"], users={"A": ["alice"]}, chat={"ws_heartbeat": 0.3})
    srv = cl.servers["A"]
    http, ws = await raw_login(cl.url("A"), "alice", autoping=False)   # never answers a ping
    try:
        kinds = []
        while True:
            msg = await asyncio.wait_for(ws.receive(), 10)
            kinds.append(msg.type)
            if msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.CLOSING):
                break
        assert aiohttp.WSMsgType.PING in kinds
        await wait_until(lambda: "alice" not in srv.user_sessions, "alice's session gone", interval=0.02)
        assert "alice" not in srv.user_sessions and not srv.connections
    finally:
        await ws.close()
        await http.close()
    alice = await cl.client("A", "alice")                  # a live client answers pings and stays
    await asyncio.sleep(1.0)
    assert (await alice.rooms()) is not None


async def test_websocket_pings_keep_each_clients_own_time_not_the_seconds_edge(cluster_factory):
    """aiohttp rounds a server timer longer than its ``timeout_ceil_threshold`` (5 s) up to the whole second, so
    the pings of every client that logged in within one second fell due together; at 5,000 clients that burst
    each second stalled the fan-out (docs/performance.md, "Pings on the second's edge"). The chat server lifts
    the threshold above its intervals: a ping falls due ``ws_heartbeat`` after the client's own last frame."""
    cl = await cluster_factory(["A"], users={"A": ["alice"]}, chat={"ws_heartbeat": 7.3})
    srv = cl.servers["A"]
    alice = await cl.client("A", "alice")
    assert (await alice.rooms()) is not None
    [session] = srv.user_sessions["alice"]
    due = session.ws._heartbeat_when                        # (aiohttp's own record of the next ping's time)
    now = asyncio.get_running_loop().time()
    assert now < due <= now + 7.3 and due != math.ceil(due)


@pytest.mark.parametrize("raw, key", [
    ({"tls": "yes"}, "tls"),
    ({"user_rate_limit_frames": 10, "user_rate_limit_burst": 5}, "user_rate_limit_burst"),
    ({"max_sessions_per_user": 0}, "max_sessions_per_user"),
    ({"max_connections": -1}, "max_connections"),
    ({"max_connections_per_address": 0}, "max_connections_per_address"),
    ({"http_request_timeout": 0}, "http_request_timeout"),
    ({"keepalive_timeout": "long"}, "keepalive_timeout"),
    ({"ws_heartbeat": True}, "ws_heartbeat"),
])
def test_new_limits_are_validated_naming_the_key(raw, key):
    with pytest.raises(MissionError, match=key):
        parse_chat_settings(raw)


def test_new_limits_have_documented_defaults():
    s = parse_chat_settings({})
    assert (s.user_rate_limit_frames, s.user_rate_limit_burst, s.max_sessions_per_user, s.max_connections,
            s.http_request_timeout, s.keepalive_timeout, s.ws_heartbeat, s.tls) == (100, 400, 16, 4096, 10, 30, 30,
                                                                                    None)
    assert parse_chat_settings({"tls": True}).tls is True


async def test_a_connection_over_a_cap_is_told_why_in_words(cluster_factory):
    """Issue 23: an operations centre behind one address with more tabs than the cap sees the reason."""
    cl = await cluster_factory(["A"], users={"A": ["alice"]}, chat={"max_connections_per_address": 2})
    port = cl.servers["A"].port
    held = [await cl.client("A", "alice"), await cl.client("A", "alice")]
    async with aiohttp.ClientSession() as http:
        ws = await http.ws_connect(f"http://127.0.0.1:{port}/ws")       # the upgrade is accepted ...
        msg = await ws.receive(timeout=5)                                # ... and closed at once, with words
        assert msg.type == aiohttp.WSMsgType.CLOSE and msg.data == 1013
        assert msg.extra == ("this site accepts at most 2 connections from your address; close some tabs or "
                             "clients, or try again later")
        async with http.get(f"http://127.0.0.1:{port}/") as r:
            assert r.status == 503 and "at most 2 connections from your address" in await r.text()
    await held[0].close()
    await wait_until(lambda: cl.servers["A"].admission.per_address.get("127.0.0.1", 0) < 2,
                     "the closed connection counted out", interval=0.02)
    await cl.client("A", "alice")                          # room again


async def test_the_open_files_limit_caps_every_front_end_together(cluster_factory):
    """One client past the descriptors the limit leaves is refused as one past max_connections is, whatever its
    front end: no accept may fail for want of a descriptor (Python 3.11's accept loop then spins)."""
    cl = await cluster_factory(["A"], users={"A": ["alice"]})
    server = cl.servers["A"]
    server.files.room = server.files.open + 2          # as if the limit left room for two more connections
    held = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(2)]
    try:
        await wait_until(lambda: server.files.full(), "both held connections counted", interval=0.02)
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        assert await asyncio.wait_for(reader.read(), 5) == b""        # closed without a word
        writer.close()
        assert Admitted(server, "IRC").refusal("10.0.0.9") == ("this site accepts no more connections now "
                                                              "(its open-files limit)")
    finally:
        for _, w in held:
            w.close()
    await wait_until(lambda: not server.files.full(), "the held connections counted out", interval=0.02)
    await cl.client("A", "alice")


def test_open_files_limit_rises_to_what_is_wanted_never_past_the_hard_limit():
    script = ("import resource; from rcm.cli import open_files_limit as f; "
              "resource.setrlimit(resource.RLIMIT_NOFILE, (64, 256)); "
              "print(f(200), f(100), f(1000), resource.getrlimit(resource.RLIMIT_NOFILE))")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30, cwd=ROOT)
    assert out.stdout.split("\n")[0] == "200 200 256 (256, 256)", out.stderr
    assert OpenFiles(120).room == 90 and OpenFiles(65536).room == 65536 - OpenFiles.RESERVE
