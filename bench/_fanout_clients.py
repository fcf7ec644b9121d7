"""The receiving clients of ``bench/chat_fanout.py`` (a helper, not a benchmark).

Each client process runs ``worker_main``: it connects its share of the users to
their sites' chat servers, joins the benchmark's room, reports ``ready`` on its
pipe, records the latency of every benchmark message it receives (the arrival
time minus the send time the author wrote into the text, after ``MARK``) until
told to stop, then sends back its latencies per site. Receivers are
``chat_server.client.ChatClient`` (``library``) or ``RawReceiver`` (``raw``), a
minimal WebSocket frame scanner with the same login and join.
"""
from __future__ import annotations

import asyncio
import functools
import json
import os
import random
import time
from collections.abc import Callable
from typing import Any

import aiohttp

from chat_server.client import ChatClient, ChatError

PASSWORD = "bench"
ROOM = "fanout"
MARK = "bench "


def worker_main(targets: list[tuple[str, str, str]], conn: Any, connect_parallel: int, receiver: str) -> None:
    """targets: (site, ws url, user). Connect, join, report ready, record latencies until told to stop."""
    asyncio.run(_worker(targets, conn, connect_parallel) if receiver == "library"
                else _raw_worker(targets, conn, connect_parallel))


def _mask(obj: dict[str, Any]) -> bytes:
    data = json.dumps(obj).encode()
    key = os.urandom(4)
    body = bytes(b ^ key[i % 4] for i, b in enumerate(data))
    n = len(data)
    head = bytes([0x81, 0x80 | n]) if n < 126 else bytes([0x81, 0x80 | 126]) + n.to_bytes(2, "big")
    return head + key + body


class RateLimited(ConnectionError):
    """The server refused a login for now (``rate_limited``): try again shortly."""


class RawReceiver(asyncio.Protocol):
    """A minimal WebSocket client (``--receiver raw``): logs in and joins like ChatClient, then only
    finds the benchmark's timestamp in each frame, so that client CPU does not hide server latency."""

    def __init__(self, user: str, host: str, bucket: list[float], ready: asyncio.Future[None]) -> None:
        self.user, self.host, self.bucket, self.ready = user, host, bucket, ready
        self.buf = bytearray()
        self.upgraded = False
        self.transport: asyncio.Transport | None = None
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        assert self.transport is not None
        self.transport.write(f"GET /ws HTTP/1.1\r\nHost: {self.host}\r\nUpgrade: websocket\r\n"
                             "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                             "Sec-WebSocket-Version: 13\r\n\r\n".encode())

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if not self.ready.done():
            self.ready.set_exception(ConnectionError(f"{self.user}: connection lost"))

    def data_received(self, data: bytes) -> None:
        now = time.time()
        buf = self.buf
        buf += data
        if not self.upgraded:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                return
            if b" 101 " not in buf[:end]:
                self.ready.set_exception(ConnectionError(bytes(buf[:end]).decode(errors="replace")))
                return
            del buf[:end + 4]
            self.upgraded = True
            assert self.transport is not None
            self.transport.write(_mask({"type": "hello", "user": self.user, "password": PASSWORD}))
            self.transport.write(_mask({"type": "join", "room": ROOM}))
        pos = 0
        while len(buf) - pos >= 2:
            n = buf[pos + 1] & 0x7F
            h = 2
            if n == 126:
                if len(buf) - pos < 4:
                    break
                n, h = int.from_bytes(buf[pos + 2:pos + 4], "big"), 4
            elif n == 127:
                if len(buf) - pos < 10:
                    break
                n, h = int.from_bytes(buf[pos + 2:pos + 10], "big"), 10
            if len(buf) - pos < h + n:
                break
            opcode = buf[pos] & 0x0F
            payload = bytes(buf[pos + h:pos + h + n])
            pos += h + n
            if opcode != 1:
                continue
            if payload.startswith(b'{"type":"message"'):
                i = payload.find(b'"text":"' + MARK.encode())
                if i >= 0:
                    end = payload.index(b'"', i + 8)
                    self.bucket.append(now - float(payload[i + 8:end].split()[2]))
            elif not self.ready.done() and payload.startswith(b'{"type":"joined"'):
                self.ready.set_result(None)
            elif not self.ready.done() and payload.startswith(b'{"type":"error"'):
                limited = b'"rate_limited"' in payload
                self.ready.set_exception((RateLimited if limited else ConnectionError)(payload.decode()))
        del buf[:pos]


async def _raw_worker(targets: list[tuple[str, str, str]], conn: Any, connect_parallel: int) -> None:
    lat: dict[str, list[float]] = {}
    receivers: list[RawReceiver] = []
    sem = asyncio.Semaphore(connect_parallel)
    loop = asyncio.get_running_loop()

    async def one(site: str, url: str, user: str) -> None:
        host, port = url.split("//")[1].split("/")[0].rsplit(":", 1)
        async with sem:
            for attempt in range(60):
                ready: asyncio.Future[None] = loop.create_future()
                _, proto = await loop.create_connection(
                    functools.partial(RawReceiver, user, f"{host}:{port}", lat.setdefault(site, []), ready),
                    host, int(port))
                try:
                    await asyncio.wait_for(ready, 60)
                    break
                except RateLimited:     # the server checks at most max_verifying passwords at once
                    if attempt == 59:
                        raise
                    assert proto.transport is not None
                    proto.transport.close()
                    await asyncio.sleep(0.2 + 0.3 * random.random())
                except TimeoutError:
                    raise TimeoutError(f"{user} at {url}: no joined after 60 s; received "
                                       f"{bytes(proto.buf[:200])!r}, upgraded={proto.upgraded}") from None
            receivers.append(proto)

    await asyncio.gather(*(one(*t) for t in targets))
    conn.send(("ready", len(receivers)))
    await loop.run_in_executor(None, conn.recv)
    conn.send(("result", {"latencies": lat, "received": sum(len(v) for v in lat.values()),
                          "closed_by_server": sum(r.closed for r in receivers), "close_reasons": []}))
    for r in receivers:
        if r.transport is not None:
            r.transport.close()


async def _worker(targets: list[tuple[str, str, str]], conn: Any, connect_parallel: int) -> None:
    http = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
    lat: dict[str, list[float]] = {}
    received = 0
    clients: list[ChatClient] = []
    sem = asyncio.Semaphore(connect_parallel)

    def recorder(site: str) -> Callable[[dict[str, Any]], None]:
        bucket = lat.setdefault(site, [])

        def on_frame(frame: dict[str, Any]) -> None:
            nonlocal received
            if frame.get("type") == "message" and frame.get("text", "").startswith(MARK):
                received += 1
                bucket.append(time.time() - float(frame["text"].split()[2]))
        return on_frame

    async def one(site: str, url: str, user: str) -> None:
        async with sem:
            for attempt in range(60):
                try:
                    c = await ChatClient.connect(url, user, PASSWORD, http=http, max_events=64)
                    break
                except ChatError as e:       # the server checks at most max_verifying passwords at once
                    if e.code != "rate_limited" or attempt == 59:
                        raise
                    await asyncio.sleep(0.2 + 0.3 * random.random())
            await c.join(ROOM)
            c.on_frame = recorder(site)
            clients.append(c)

    await asyncio.gather(*(one(*t) for t in targets))
    conn.send(("ready", len(clients)))
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, conn.recv)          # "stop"
    closed = sum(1 for c in clients if c.close_code is not None and c._done)
    conn.send(("result", {"latencies": lat, "received": received, "closed_by_server": closed,
                          "close_reasons": sorted({c.close_reason for c in clients if c._done})[:5]}))
    for c in clients:
        await c.close()
    await http.close()
