"""Peer baseline for fan-out: one server, many clients in one channel, a steady message rate.

Three systems, one at a time on the same machine, the same kind of receiving
clients: Debian's ngircd; one site of the suite (``python -m rcm`` and ``python
-m chat_server``) read through its IRC front end (docs/irc.md); and the same
site read over WebSocket (chat protocol v1). ``--clients`` receivers (default
1,000) join ``#fanout`` / room ``fanout``; one more client posts ``--rate``
lines/s (default 50) for ``--duration`` s, each line carrying the time it was
written (a minimal writer of IRC lines or WebSocket frames, as lean for both
front ends; ``--author`` posts over the other front end, a diagnostic).
Fan-out latency at a client = arrival minus that time (one clock: every
process is on this machine). The receivers run in ``--workers``
processes of their own, each a plain asyncio loop with a minimal IRC or
WebSocket frame reader that counts lines and parses the times of every 10th
client, so client CPU stays small and alike for every system (glibc's
allocator is set so that a read costs every system's receivers the same:
``bench._common.RECEIVERS_MALLOC``; ``--default-malloc`` for the harness
before 2026-11-28). A receiver whose login the server sheds ("checking many logins at once; try again")
connects again, as a user would (a round goes on if at most 0.5% never join,
``SHORTFALL``, and says so; with more, that system's round is left out of its
figures and ratios, and the run goes on). Once the clients have joined, the author
waits until the servers and receivers are quiet (``settle``: the logins'
JOIN, NAMES and presence lines delivered; the seconds it took are printed
per system), so that its lines are timed against fan-out alone. On our side the latency covers the front
end, the say pipeline, the RCM round trip that places the line in the global
order, the journal fsync and the fan-out; ngircd only relays.

The suite runs on each event loop of ``--event-loops`` (asyncio and uvloop by
default: ``--event-loop`` of both servers). Every system runs once per round,
rounds interleaved (``--rounds``, default 3), so a machine that is busy for a
while slows every system alike. The first line gives, per suite front end and
loop, the median over the rounds of (suite p99 / ngircd p99 of the same round)
and its range; then one line per system: median p50/p99, every round's p99,
the server's RSS at the end (the suite: chat server + RCM server), also per
1,000 clients, the servers' CPU per million deliveries and the receivers' CPU
per million lines received (both over the author's lines and the drain).
The receivers run on asyncio unless ``--receiver-loop uvloop`` (the same for every system): on asyncio they take
about 1.2 of a 2-core machine's cores at 1,000 clients and 50 lines/s, so the
latencies then largely measure the scheduler (docs/performance.md, "WebSocket
on the default loop"). ``--stages`` notes where each line's time goes inside
the chat server (bench/_fanout_stages). JSON:
bench/results/peer_irc_fanout[_quick].json. ``bench/chat_fanout.py``
measures the WebSocket side alone, with more detail.

    .venv/bin/python bench/peer_irc_fanout.py    # 1,000 clients, 50 lines/s, 20 s; 5 systems x 3 rounds (~8 min)
    .venv/bin/python bench/peer_irc_fanout.py --clients 5000 --rounds 1
    .venv/bin/python bench/peer_irc_fanout.py --quick     # 50 clients, 20 lines/s, 3 s, one round (~45 s)
    .venv/bin/python bench/peer_irc_fanout.py --receiver-loop uvloop     # lighter receivers, steadier figures
    .venv/bin/python bench/peer_irc_fanout.py --rounds 1 --systems ws --duration 10 --stages
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing as mp
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _profile  # noqa: E402
from bench._common import RECEIVERS_MALLOC, percentile, receivers_malloc, write_result  # noqa: E402
from bench._disk_probe import Probe, disk_probe  # noqa: E402
from bench.peer_irc import irc_network, ngircd_available  # noqa: E402
from bench.soak import rss_bytes  # noqa: E402
from chat_server.accounts import hash_password  # noqa: E402
from chat_server.store import ChatStore  # noqa: E402
from contracts.mission import load_mission  # noqa: E402
from faultinject.missions import free_ports, write_mission  # noqa: E402
from faultinject.procs import (
    LocalChat,  # noqa: E402
    LocalRcm,  # noqa: E402
)
from rcm.cli import EVENT_LOOP_ENV, EVENT_LOOPS, run  # noqa: E402

CHANNEL = "#fanout"
PASSWORD = "bench-pw"
MARK = b"fan "
CONNECT_TIMEOUT = 10.0      # seconds for a TCP connect (a SYN the server's full backlog dropped is sent again)
LOGINS_IN_FLIGHT = 100     # per worker: connections between connect and joined
SAMPLE_EVERY = 10            # every 10th client parses its lines for latency; the others only count them
SETTLE_QUIET = 0.1          # CPU-s per second of servers and receivers together under which the logins are over
SETTLE_LIMIT = 300.0        # seconds to wait for that at the most (then the author starts anyway)
SHORTFALL = 0.005           # receivers that may fail to join (a share of --clients) and the round still count:
# at 5,000, a few of ngircd's logins were reset forty times over (2026-11-27, twice), and the whole
# three-round run was lost; the round now goes on with the clients that joined, and says how many did not


async def settle(pids: list[int], limit: float = SETTLE_LIMIT) -> float:
    """Wait until the servers and the receivers are quiet after the logins (every client's JOIN, NAMES and
    presence lines delivered: at 5,000 clients IRC alone shows 12.5 million JOINs), so that the author's lines
    are timed against fan-out, not against the tail of a login storm (bench/login_storm.py measures that).
    Returns the seconds it took, reported for every system."""
    t0 = time.monotonic()

    def used() -> float:
        return sum(_profile.cpu_split_sum(pids))

    last = used()
    while time.monotonic() - t0 < limit:
        await asyncio.sleep(1.0)
        now = used()
        if now - last < SETTLE_QUIET:
            break
        last = now
    return time.monotonic() - t0


class Shed(Exception):
    """The server refused a login for now (too many being checked at once): connect again shortly."""


class ShortJoin(RuntimeError):
    """More than ``SHORTFALL`` of a system's receivers never joined: that system's round is left out."""


async def _irc_receiver(port: int, nick: str, password: str | None, sample: bool, out: dict[str, Any],
                        joined: asyncio.Event) -> None:
    """One IRC client: register, join, then count the author's lines (and time them when ``sample``)."""
    reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port, limit=1 << 20), CONNECT_TIMEOUT)
    try:
        if password:
            writer.write(f"PASS {password}\r\n".encode())
        writer.write(f"NICK {nick}\r\nUSER {nick} 0 * :{nick}\r\nJOIN {CHANNEL}\r\n".encode())
        buf = b""
        me = b":" + nick.encode() + b"!"
        while True:
            data = await reader.read(65536)
            if not data:
                raise Shed("closed") if not joined.is_set() else ConnectionError("closed")
            now = time.time()
            buf += data
            *lines, buf = buf.split(b"\r\n")
            for line in lines:
                if not joined.is_set():
                    if b" 464 " in line and b"try again" in line:
                        raise Shed(line.decode(errors="replace"))
                    if b" JOIN " in line and line.startswith(me):
                        joined.set()
                        out["joined"] += 1
                elif MARK in line:
                    out["lines"] += 1
                    if sample:
                        with contextlib.suppress(ValueError):
                            out["lat"].append(now - float(line.rsplit(MARK, 1)[1].split(b" ", 1)[0]))
                if line.startswith(b"PING"):
                    writer.write(b"PONG" + line[4:] + b"\r\n")
    finally:
        writer.close()


async def _ws_receiver(port: int, user: str, password: str | None, sample: bool, out: dict[str, Any],
                       joined: asyncio.Event) -> None:
    """One WebSocket client of the same server: hello, join, then count (and time) the author's messages.

    A minimal frame reader rather than aiohttp, so that its CPU per line is about that of the IRC client: like
    ``_irc_receiver`` it reads whatever arrived and walks the whole frames in it (until 2026-11-27 it awaited
    ``readexactly`` two or three times per frame, which cost a third more CPU per line than the IRC reader
    and so took that much more of the cores the servers share)."""
    reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port, limit=1 << 20), CONNECT_TIMEOUT)
    try:
        writer.write(f"GET /ws HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                     "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n".encode())
        head = await reader.readuntil(b"\r\n\r\n")
        if b" 101 " not in head.split(b"\r\n", 1)[0]:
            raise Shed(head.split(b"\r\n", 1)[0].decode(errors="replace"))
        writer.write(_mask({"type": "hello", "user": user, "password": password}))
        writer.write(_mask({"type": "join", "room": CHANNEL[1:]}))
        mark = b'"text":"' + MARK
        buf = b""
        while True:
            data = await reader.read(65536)
            if not data:
                raise Shed("closed") if not joined.is_set() else ConnectionError("closed")
            now = time.time()
            buf += data
            pos, end = 0, len(buf)
            while end - pos >= 2:                         # every whole frame in what arrived
                b0, n = buf[pos], buf[pos + 1] & 0x7F
                start = pos + 2
                if n == 126:
                    if end - pos < 4:
                        break
                    n, start = int.from_bytes(buf[pos + 2:pos + 4], "big"), pos + 4
                elif n == 127:
                    if end - pos < 10:
                        break
                    n, start = int.from_bytes(buf[pos + 2:pos + 10], "big"), pos + 10
                if end - start < n:
                    break
                pos = start + n
                opcode = b0 & 0x0F
                if opcode == 1:
                    i = buf.find(mark, start, pos)
                    if i >= 0:
                        out["lines"] += 1
                        if sample:
                            with contextlib.suppress(ValueError):
                                out["lat"].append(now - float(buf[i + len(mark):pos].split(b" ", 1)[0]))
                    elif not joined.is_set():
                        payload = buf[start:pos]
                        if payload.startswith(b'{"type":"joined"') or b'"type": "joined"' in payload[:40]:
                            joined.set()
                            out["joined"] += 1
                        elif b'"rate_limited"' in payload:
                            raise Shed(payload.decode(errors="replace"))
                        elif b'"type":"error"' in payload or b'"type": "error"' in payload:
                            raise ConnectionError(payload.decode(errors="replace"))
                elif opcode == 9:                                 # ping
                    writer.write(_mask_frame(0xA, buf[start:pos]))
                elif opcode == 8:
                    raise Shed("closed") if not joined.is_set() else ConnectionError("closed")
            buf = buf[pos:]
    finally:
        writer.close()


def _mask_frame(opcode: int, data: bytes) -> bytes:
    key = os.urandom(4)
    n = len(data)
    head = bytes([0x80 | opcode, 0x80 | n]) if n < 126 else bytes([0x80 | opcode, 0x80 | 126]) + n.to_bytes(2, "big")
    return head + key + bytes(b ^ key[i % 4] for i, b in enumerate(data))


def _mask(obj: dict[str, Any]) -> bytes:
    return _mask_frame(0x1, json.dumps(obj).encode())


RECEIVERS = {"irc": _irc_receiver, "ws": _ws_receiver}


async def _client(kind: str, port: int, name: str, password: str | None, sample: bool, out: dict[str, Any],
                  in_flight: asyncio.Semaphore) -> None:
    """A receiving client that connects again when its connect or login is refused for now, as a user would."""
    joined = asyncio.Event()
    for attempt in range(40):
        await in_flight.acquire()
        held = asyncio.ensure_future(joined.wait())
        held.add_done_callback(lambda _: in_flight.release())
        try:
            await RECEIVERS[kind](port, name, password, sample, out, joined)
            return
        except (OSError, Shed, asyncio.IncompleteReadError) as e:
            if joined.is_set():
                return
            out["retries"] += 1
            out["last_refusal"] = str(e)[:200] or type(e).__name__
            held.cancel()
            await asyncio.sleep(0.2 + 0.1 * attempt)
    out["failed"] += 1


def worker_main(kind: str, port: int, names: list[str], password: str | None, conn: Any, loop: str = "asyncio"
                ) -> None:
    """A process of receiving clients on event ``loop``: connect all, report joined, run until told to stop,
    report figures (the parent reads its CPU from /proc)."""
    async def main() -> None:
        out: dict[str, Any] = {"joined": 0, "lines": 0, "lat": [], "failed": 0, "retries": 0, "last_refusal": ""}
        tasks = []
        in_flight = asyncio.Semaphore(LOGINS_IN_FLIGHT)
        for i, name in enumerate(names):
            tasks.append(asyncio.create_task(_client(kind, port, name, password, i % SAMPLE_EVERY == 0, out,
                                                     in_flight)))
            if i % 20 == 19:
                await asyncio.sleep(0.05)            # don't look like a connection flood
        deadline = time.monotonic() + 180 + 0.1 * len(names)    # (ngircd needed more than 180 s for 5,000)
        while out["joined"] + out["failed"] < len(names) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        conn.send(("joined", out["joined"], out["retries"], out["last_refusal"]))
        await asyncio.get_running_loop().run_in_executor(None, conn.recv)       # "stop"
        conn.send(("done", out["lines"], out["lat"]))
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    run(main(), loop)


class IrcAuthor:
    """The posting client over IRC."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.drain = asyncio.create_task(_discard(reader, writer))

    @classmethod
    async def open(cls, port: int, password: str | None, nick: str) -> IrcAuthor:
        for _attempt in range(20):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            if password:
                writer.write(f"PASS {password}\r\n".encode())
            writer.write(f"NICK {nick}\r\nUSER {nick} 0 * :author\r\nJOIN {CHANNEL}\r\n".encode())
            while line := await reader.readline():
                if b" JOIN " in line:
                    return cls(reader, writer)
            writer.close()
            await asyncio.sleep(0.5)
        raise RuntimeError(f"the author {nick} could not join {CHANNEL}")

    async def say(self, text: str) -> None:
        self.writer.write(f"PRIVMSG {CHANNEL} :{text}\r\n".encode())
        await self.writer.drain()

    async def close(self) -> None:
        self.drain.cancel()
        self.writer.close()


class WsAuthor:
    """The posting client over WebSocket: logs in and joins, then writes each ``say`` frame at once in the posting
    loop and reads the server's replies without waiting for them (says are not awaited one by one).

    As lean as ``IrcAuthor``, so that the front ends are compared, not two client libraries. Until 2026-11-27 it
    was the suite's own client library (``ChatClient``: a task per ``say``, aiohttp's writer): at 1,000
    receivers a line then took 11.6 ms p50 from the author to the chat server's handler against 0.2 ms with
    this writer (``--stages``, one round each), and the WebSocket p50/p99 was 58/417 ms against 14/93 ms."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.said = 0
        self.drain = asyncio.create_task(_discard_ws(reader, writer))

    @classmethod
    async def open(cls, port: int, password: str | None, user: str) -> WsAuthor:
        for _attempt in range(20):
            reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 20)
            writer.write(f"GET /ws HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
                         "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                         "Sec-WebSocket-Version: 13\r\n\r\n".encode())
            head = await reader.readuntil(b"\r\n\r\n")
            if b" 101 " in head.split(b"\r\n", 1)[0]:
                writer.write(_mask({"type": "hello", "user": user, "password": password}))
                writer.write(_mask({"type": "join", "room": CHANNEL[1:], "id": "j"}))
                while True:                                  # until the join's reply (or a refusal)
                    payload = await _ws_payload(reader)
                    if payload is None or b'"type":"error"' in payload or b'"type": "error"' in payload:
                        break
                    if b'"joined"' in payload:
                        return cls(reader, writer)
            writer.close()
            await asyncio.sleep(0.5)
        raise RuntimeError(f"the author {user} could not log in and join {CHANNEL[1:]}")

    async def say(self, text: str) -> None:
        self.said += 1
        self.writer.write(_mask({"type": "say", "room": CHANNEL[1:], "text": text, "client_id": f"s{self.said}"}))
        await self.writer.drain()

    async def close(self) -> None:
        self.drain.cancel()
        self.writer.close()


async def _ws_payload(reader: asyncio.StreamReader) -> bytes | None:
    """One server WebSocket frame's payload (None: the connection closed)."""
    try:
        h = await reader.readexactly(2)
        n = h[1] & 0x7F
        if n == 126:
            n = int.from_bytes(await reader.readexactly(2), "big")
        elif n == 127:
            n = int.from_bytes(await reader.readexactly(8), "big")
        return await reader.readexactly(n)
    except (asyncio.IncompleteReadError, ConnectionError):
        return None


async def _discard_ws(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while (payload := await _ws_payload(reader)) is not None:
        if b'"type":"error"' in payload or b'"type": "error"' in payload:
            print(f"author: {payload.decode(errors='replace')[:200]}", file=sys.stderr)


async def run_clients(kind: str, port: int, password: str | None, n: int, workers: int, rate: float,
                      duration: float, prefix: str, server_pids: list[int], author: tuple[str, int] | None = None,
                      profile: Path | None = None, names: tuple[str, ...] = (), drain: float = 3.0,
                      receiver_loop: str = "asyncio", tuned_malloc: bool = True) -> dict[str, Any]:
    """``n`` receiving clients of ``kind`` (irc | ws) in ``workers`` processes on ``receiver_loop``, one author
    at ``rate`` lines/s; with ``profile``, py-spy samples the servers (``names`` for ``server_pids``) while the
    author posts."""
    nicks = [f"{prefix}{i}" for i in range(n)]
    ctx = mp.get_context("spawn")
    procs, pipes = [], []
    t_connect = time.monotonic()
    with receivers_malloc() if tuned_malloc else contextlib.nullcontext():
        for w in range(workers):
            parent, child = ctx.Pipe()
            p = ctx.Process(target=worker_main, args=(kind, port, nicks[w::workers], password, child, receiver_loop),
                            daemon=True)
            p.start()
            procs.append(p)
            pipes.append(parent)
    joined = retries = 0
    refusals = []
    for c in pipes:
        _, j, r, why = await asyncio.to_thread(c.recv)
        joined, retries = joined + j, retries + r
        refusals.append(why)
    if n - joined > SHORTFALL * n:
        for c in pipes:
            c.send("stop")
        _end_receivers(procs)
        raise ShortJoin(f"only {joined} of {n} {kind} clients joined {CHANNEL} on port {port}: "
                           f"{[w for w in refusals if w]}")
    if joined < n:
        print(f"  {n - joined} of {n} {kind} clients did not join {CHANNEL} on port {port} (at most "
              f"{SHORTFALL:.1%} may not): {[w for w in refusals if w]}; the round goes on with {joined}",
              file=sys.stderr)
    connect_s = time.monotonic() - t_connect
    settle_s = await settle([*server_pids, *(p.pid for p in procs if p.pid is not None)])
    author_kind, author_port = author or (kind, port)
    poster = await (IrcAuthor if author_kind == "irc" else WsAuthor).open(author_port, password, f"{prefix}author")
    spy = None
    if profile is not None:
        spy = asyncio.create_task(_profile.Spy(profile, dict(zip(names, server_pids)), duration).run())
    labels = names or [str(p) for p in server_pids]
    split0 = [_profile.cpu_split(pid) for pid in server_pids]              # (user, system) CPU seconds
    receiver_pids = [p.pid for p in procs if p.pid is not None]
    receivers0 = _profile.cpu_split_sum(receiver_pids)             # read by the parent, beside the servers'
    writes0 = [_profile.write_calls(pid) for pid in server_pids]
    sent = 0
    posting = [time.time(), 0.0]                              # wall clock: to match servers' own records
    t0 = time.monotonic()
    while time.monotonic() - t0 < duration:
        sent += 1
        await poster.say(f"{MARK.decode()}{time.time():.6f} {sent}")
        await asyncio.sleep(max(0.0, t0 + sent / rate - time.monotonic()))
    await asyncio.sleep(drain)                                # the last lines arrive
    posting[1] = time.time()
    profiles = {}
    if spy is not None:
        due = int(_profile.Spy.rate * max(1, round(duration)))
        profiles = {name: _profile.summarize(path, due) for name, path in (await spy).items()}
    split1 = [_profile.cpu_split(pid) for pid in server_pids]
    receivers1 = _profile.cpu_split_sum(receiver_pids)
    client_kernel = receivers1[1] - receivers0[1]
    client_cpu = receivers1[0] - receivers0[0] + client_kernel
    spent = {name: (b[0] - a[0], b[1] - a[1]) for name, a, b in zip(labels, split0, split1)
             if a is not None and b is not None}
    cpu = {name: round(user + system, 3) for name, (user, system) in spent.items()}
    kernel = [system for _, system in spent.values()]
    writes = {name: b - a for name, a, b in zip(labels, writes0, [_profile.write_calls(pid) for pid in server_pids])
              if a is not None and b is not None}
    rss = sum(v for v in (rss_bytes(pid) for pid in server_pids) if v is not None)
    for c in pipes:
        c.send("stop")
    lines, lat = 0, []
    for c in pipes:
        _, k, xs = await asyncio.to_thread(c.recv)
        lines += k
        lat += xs
    exit_s = _end_receivers(procs)
    await poster.close()
    return {"clients": n, "joined": joined, "sent": sent, "lines_received": lines, "expected": sent * joined,
            "p50_ms": percentile(lat, 50) * 1000, "p99_ms": percentile(lat, 99) * 1000,
            "samples": len(lat), "server_rss_mib": rss / 2**20, "connect_s": round(connect_s, 1),
            "settle_s": round(settle_s, 1), "receivers_exit_s": round(exit_s, 1),
            "login_retries": retries, "profiles": profiles, "server_cpu_s": cpu, "posting_wall": posting,
            # CPU-seconds per 1,000 lines to 1,000 clients (a million deliveries): load-robust, unlike latency
            "cpu_s_per_1000x1000": {name: c / lines * 1e6 for name, c in cpu.items()} if lines else {},
            # write system calls per delivery, every server process's (how far writes to one client are joined)
            "writes_per_delivery": sum(writes.values()) / lines if lines and writes else None,
            "write_calls": writes,
            # of the servers' CPU, the share spent in the kernel (system time: mostly the sockets' writes)
            "kernel_share": sum(kernel) / sum(cpu.values()) if kernel and sum(cpu.values()) else None,
            # the receivers' CPU over the same window as the servers' (the author's lines and the drain), per
            # million lines received (until 2026-11-28 from their last join, so it took in the settling logins)
            "client_cpu_s_per_1000x1000": client_cpu / lines * 1e6 if lines else None,
            "client_kernel_share": client_kernel / client_cpu if client_cpu else None}


def _end_receivers(procs: list[Any], wait: float = 10.0) -> float:
    """Wait for the receiving processes to exit (they close their clients), at most ``wait`` s each; kill any
    still there, so that none goes on using the machine in the next system's round. Seconds it took."""
    t0 = time.monotonic()
    for p in procs:
        p.join(wait)
    for p in procs:
        if p.is_alive():
            print(f"  a receiving process did not exit in {wait:.0f} s: killed", file=sys.stderr)
            p.kill()
            p.join()
    return time.monotonic() - t0


async def _discard(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while line := await reader.readline():
        if line.startswith(b"ERROR"):
            print(f"author: {line.decode(errors='replace').strip()}", file=sys.stderr)
        if line.startswith(b"PING"):
            writer.write(b"PONG" + line[4:])


async def ngircd_run(a: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="rcm-irc-fanout-") as d, probed(a, Path(d)) as probe:
        async with irc_network(["A"]) as net:
            s = net.servers["A"]
            assert s.proc is not None
            result = await run_clients("irc", s.port, None, a.clients, a.workers, a.rate, a.duration, "u",
                                       [s.proc.pid], names=("ngircd",), drain=a.drain,
                                       receiver_loop=a.receiver_loop, tuned_malloc=not a.default_malloc)
    return {**result, **({"disk": probe.summary} if probe.summary else {})}


def probed(a: argparse.Namespace, directory: Path) -> contextlib.AbstractContextManager[Probe]:
    """``--disk-probe``: the disk's flush latency beside the round (bench/_disk_probe.py); else nothing."""
    return disk_probe(directory) if a.disk_probe else contextlib.nullcontext(Probe())


async def suite_run(a: argparse.Namespace, kind: str, loop: str) -> dict[str, Any]:
    """One site of the suite (RCM + chat server with its IRC front end) on event ``loop``; receivers over
    ``kind`` (irc | ws)."""
    with tempfile.TemporaryDirectory(prefix="rcm-irc-fanout-") as d, probed(a, Path(d)) as probe:
        mpath = write_mission(Path(d) / "mission.toml", "fanout", ["A"], data_dir="data",
                              rcm={"durable": False} if a.no_durable else None,
                              chat={"kdf_n": 1024, "max_connections": 10_000,
                                    "max_connections_per_address": 10_000, "max_sessions_per_user": 4,
                                    "rate_limit_frames": 1000.0, "rate_limit_burst": 2000,
                                    "user_rate_limit_frames": 1000.0, "user_rate_limit_burst": 2000,
                                    **({"ws_heartbeat": a.ws_heartbeat} if a.ws_heartbeat else {})})
        [irc_port] = free_ports(1)
        text = mpath.read_text().replace('chat = "', f'irc = "127.0.0.1:{irc_port}"\nchat = "', 1)
        mpath.write_text(text)
        mission = load_mission(mpath)
        store = ChatStore(mission.site_dir("A") / "chat" / "chat.db")
        pw = hash_password(PASSWORD, 1024)
        for i in range(a.clients):
            store.add_user(f"u{i}", pw)
        store.add_user("uauthor", pw)
        store.close()
        port = irc_port if kind == "irc" else mission.site("A").chat.port
        env = {EVENT_LOOP_ENV: loop}
        stages = Path(d) / "stages.json"
        chat_env = {**env, "PYTHONPATH": str(STAGES_DIR), "FANOUT_STAGES_OUT": str(stages)} if a.stages else env
        rcm, chat = LocalRcm(mpath, log_level="warning", env=env), LocalChat(mpath, log_level="warning", env=chat_env)
        try:
            await asyncio.to_thread(rcm.start_all, 30.0)
            chat.start("A")
            await asyncio.to_thread(chat.wait_ready, "A", 30.0)
            try:
                result = await run_clients(kind, port, PASSWORD, a.clients, a.workers, a.rate, a.duration, "u",
                                           [rcm.procs["A"].pid, chat.procs["A"].pid],
                                           profile=a.profile / f"{kind}-{loop}" if a.profile else None,
                                           names=("rcm", "chat"), drain=a.drain, receiver_loop=a.receiver_loop,
                                           tuned_malloc=not a.default_malloc,
                                           author=(a.author, irc_port if a.author == "irc" else
                                                   mission.site("A").chat.port) if a.author else None)
            except Exception:
                print("chat server log:\n" + chat.log_tail("A", 15), file=sys.stderr)
                raise
        finally:
            await asyncio.to_thread(chat.stop_all)
            await asyncio.to_thread(rcm.stop_all)
        if a.stages:
            result["stages"] = summarize_stages(json.loads(stages.read_text())) if stages.exists() else None
    if probe.summary:
        result["disk"] = probe.summary
    return result


STAGES_DIR = Path(__file__).resolve().parent / "_fanout_stages"     # a sitecustomize for the chat server
STAGES = (("frame in", "written", "received"), ("say, RCM, back", "received", "delivery"),
          ("delivery", "delivery", "fanout"), ("fan-out", "fanout", "fanned"))


def summarize_stages(raw: dict[str, Any]) -> dict[str, Any]:
    """Where a line's time went inside the chat server (``--stages``): per stage the p50/p99 of wall time and
    the p50 of the main thread's CPU, in ms; the main thread's CPU and context switches per line; heartbeat
    pings and (asyncio) callbacks over 4 ms while the author posted."""
    lines = [r for r in raw["lines"].values() if all(k in r for _, a, b in STAGES for k in (a, b))]
    first, last = min(r["written"] for r in lines), max(r["fanned"] for r in lines)       # the posting window
    slow: dict[str, dict[str, float]] = {}
    for name, at, d in raw["slow"]:
        if first <= at <= last:
            k = slow.setdefault(name, {"count": 0, "s": 0.0})
            k["count"], k["s"] = k["count"] + 1, k["s"] + d
    out: dict[str, Any] = {"lines": len(lines), "heartbeats": sum(first <= t <= last for t in raw["heartbeats"]),
                           "slow_callbacks": slow}
    for name, a, b in STAGES:
        wall = [(r[b] - r[a]) * 1000 for r in lines]
        cpu = [(r["cpu_" + b] - r["cpu_" + a]) * 1000 for r in lines if a != "written"]
        out[name] = {"p50_ms": percentile(wall, 50), "p99_ms": percentile(wall, 99),
                     "cpu_p50_ms": statistics.median(cpu) if cpu else None}
    sw = raw["switches"]
    if len(sw) > 2:
        (n0, c0, v0, i0), (n1, c1, v1, i1) = sw[1], sw[-1]
        out["per_line"] = {"cpu_ms": (c1 - c0) / (n1 - n0) * 1000, "voluntary_switches": (v1 - v0) / (n1 - n0),
                           "involuntary_switches": (i1 - i0) / (n1 - n0)}
    return out


def stages_line(system: str, st: dict[str, Any]) -> str:
    parts = [f"{name} {st[name]['p50_ms']:.2f}/{st[name]['p99_ms']:.2f}"
             + (f" (CPU {st[name]['cpu_p50_ms']:.2f})" if st[name]["cpu_p50_ms"] is not None else "")
             for name, _, _ in STAGES]
    pl = st.get("per_line", {})
    slow = ", ".join(f"{k} {v['count']}x {v['s']:.2f} s" for k, v in
                     sorted(st["slow_callbacks"].items(), key=lambda kv: -kv[1]["s"])[:3]) or "none seen"
    return (f"  {system_name(system):26} stages p50/p99 ms: " + "; ".join(parts)
            + (f"; main thread per line: CPU {pl['cpu_ms']:.2f} ms, {pl['voluntary_switches']:.1f} voluntary / "
               f"{pl['involuntary_switches']:.1f} involuntary switches" if pl else "")
            + f"; while posting: heartbeats {st['heartbeats']}, callbacks > 4 ms (asyncio only): {slow}")


def round_stages(run: dict[str, Any]) -> str:
    """One round's p99, then each stage's: ``93.1 (0.9, 71.2, 0.5, 18.0)`` (``STAGES`` in order)."""
    st = run["stages"]
    return f"{run['p99_ms']:.1f} (" + ", ".join(f"{st[name]['p99_ms']:.1f}" for name, _, _ in STAGES) + ")"


FRONT_ENDS = {"irc": "IRC", "ws": "WebSocket"}


def system_name(system: str) -> str:
    """``ngircd``, or a suite front end and its event loop (``irc/uvloop``) as a reader names them."""
    if system == "ngircd":
        return "ngircd"
    kind, loop = system.split("/")
    return f"suite {FRONT_ENDS[kind]}, {loop}"


def spread(xs: list[float]) -> str:
    """The median of ``xs`` and, for more than one, its range: ``1.23 (0.98-1.51)``."""
    xs = sorted(xs)
    med = statistics.median(xs)
    return f"{med:.2f}" if len(xs) == 1 else f"{med:.2f} ({xs[0]:.2f}-{xs[-1]:.2f})"


def summarize(rounds: list[dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Per system: the median p50/p99/RSS over the rounds and, for the suite, the p99 ratio to ngircd of the
    same round (the runs of a round are minutes apart, so a busy machine slows both sides alike)."""
    out: dict[str, dict[str, Any]] = {}
    for system in rounds[0]:
        # A round in which the system's receivers fell short (``ShortJoin``) is left out of its figures, and of
        # every ratio to ngircd's that round (``paired``: the rounds that count for them).
        paired = [r for r in rounds if "left_out" not in r[system]
                  and ("ngircd" not in r or "left_out" not in r["ngircd"])]
        rs = [r[system] for r in rounds if "left_out" not in r[system]]
        if not rs:
            continue
        s: dict[str, Any] = {q: statistics.median(r[q] for r in rs) for q in ("p50_ms", "p99_ms", "server_rss_mib")}
        s["p99_ms_runs"] = [r["p99_ms"] for r in rs]
        s["settle_s"] = statistics.median(r["settle_s"] for r in rs)
        s["receivers_exit_s"] = max(r.get("receivers_exit_s", 0.0) for r in rs)
        s["rss_mib_per_1000_clients"] = s["server_rss_mib"] / rs[0]["clients"] * 1000
        s["received_pct"] = min(r["lines_received"] / r["expected"] * 100 if r["expected"] else 0.0 for r in rs)
        s["not_joined"] = max(r["clients"] - r.get("joined", r["clients"]) for r in rs)
        s["rounds_left_out"] = len(rounds) - len(rs)
        cpus = [r.get("cpu_s_per_1000x1000") or {} for r in rs]
        if all(cpus):
            s["cpu_s_per_1000x1000"] = statistics.median(sum(c.values()) for c in cpus)      # every server process
            s["front_cpu_s_per_1000x1000"] = statistics.median(c.get("chat", c.get("ngircd", 0.0)) for c in cpus)
        client_cpus = [r["client_cpu_s_per_1000x1000"] for r in rs if r.get("client_cpu_s_per_1000x1000")]
        if client_cpus:
            s["client_cpu_s_per_1000x1000"] = statistics.median(client_cpus)
        client_kernel = [r["client_kernel_share"] for r in rs if r.get("client_kernel_share") is not None]
        if client_kernel:
            s["client_kernel_share"] = statistics.median(client_kernel)
        writes = [r["writes_per_delivery"] for r in rs if r.get("writes_per_delivery") is not None]
        if writes:
            s["writes_per_delivery"] = statistics.median(writes)
        kernel = [r["kernel_share"] for r in rs if r.get("kernel_share") is not None]
        if kernel:
            s["kernel_share"] = statistics.median(kernel)
        if system != "ngircd" and "ngircd" in rounds[0] and paired:
            key = "cpu_s_per_1000x1000"
            cpu_ratios = [sum(r[system][key].values()) / sum(r["ngircd"][key].values())
                          for r in paired if r[system].get(key) and r["ngircd"].get(key)]
            if cpu_ratios:
                s["ratio_cpu_runs"] = cpu_ratios
                s["ratio_cpu"] = statistics.median(cpu_ratios)
            s["ratio_p99_runs"] = [r[system]["p99_ms"] / r["ngircd"]["p99_ms"] for r in paired
                                   if r["ngircd"]["p99_ms"]]
            s["ratio_p99"] = statistics.median(s["ratio_p99_runs"]) if s["ratio_p99_runs"] else None
        out[system] = s
    return out


def plot(summary: dict[str, dict[str, Any]], title: str, path: Path) -> None:
    """p50 and p99 fan-out latency per system (median of the rounds, every round's p99 as a dot), and RSS."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [system_name(s).replace(", ", "\n") for s in summary]
    xs = range(len(summary))
    fig, (lat, mem) = plt.subplots(1, 2, figsize=(10, 3.6), gridspec_kw={"width_ratios": [2, 1]})
    for k, (q, colour) in enumerate((("p50_ms", "tab:blue"), ("p99_ms", "tab:red"))):
        at = [x + (k - 0.5) * 0.38 for x in xs]
        bars = lat.bar(at, [r[q] for r in summary.values()], 0.38, color=colour, label=q.split("_")[0] + " (median)")
        lat.bar_label(bars, fmt="%.1f", fontsize=7)
        if q == "p99_ms":
            for x, r in zip(at, summary.values()):
                lat.plot([x] * len(r["p99_ms_runs"]), r["p99_ms_runs"], "k.", ms=3)
    lat.set_xticks(list(xs), names, fontsize=7)
    lat.set_ylabel("fan-out latency (ms)")
    lat.legend(fontsize=7)
    lat.grid(axis="y", alpha=0.3)
    bars = mem.bar(list(xs), [r["server_rss_mib"] for r in summary.values()], 0.5, color="tab:grey")
    mem.bar_label(bars, fmt="%.0f", fontsize=7)
    mem.set_xticks(list(xs), names, fontsize=6)
    mem.set_ylabel("server RSS (MiB)")
    mem.grid(axis="y", alpha=0.3)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def line(system: str, r: dict[str, Any]) -> str:
    cpu = ""
    if "cpu_s_per_1000x1000" in r:
        cpu = (f", CPU {r['cpu_s_per_1000x1000']:.1f} s per million deliveries"
               + (f" (chat server {r['front_cpu_s_per_1000x1000']:.1f})" if system != "ngircd" else "")
               + (f", {spread(r['ratio_cpu_runs'])}x ngircd's" if "ratio_cpu_runs" in r else "")
               + (f"; receivers {r['client_cpu_s_per_1000x1000']:.1f}" if "client_cpu_s_per_1000x1000" in r else "")
               + (f" ({r['client_kernel_share'] * 100:.0f}% in the kernel)" if "client_kernel_share" in r else ""))
    if "writes_per_delivery" in r:
        cpu += f"; {r['writes_per_delivery']:.2f} write calls per delivery"
    if "kernel_share" in r:
        cpu += f", {r['kernel_share'] * 100:.0f}% of the servers' CPU in the kernel"
    return (f"  {system_name(system):26} p50 {r['p50_ms']:7.1f} ms  p99 {r['p99_ms']:7.1f} ms "
            f"(runs {', '.join(f'{x:.1f}' for x in r['p99_ms_runs'])}), {r['received_pct']:.1f}% of lines "
            f"received, server RSS {r['server_rss_mib']:.0f} MiB ({r['rss_mib_per_1000_clients']:.0f} per 1,000)"
            + cpu + f"; logins settled in {r['settle_s']:.1f} s"
            + (f"; receivers took up to {r['receivers_exit_s']:.1f} s to exit" if r.get("receivers_exit_s", 0) >= 1
               else "")
            + (f"; {r['not_joined']} clients did not join in a round" if r.get("not_joined") else "")
            + (f"; {r['rounds_left_out']} rounds left out (receivers short)" if r.get("rounds_left_out") else ""))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=1000, help="receiving clients (default 1000)")
    ap.add_argument("--rate", type=float, default=50.0, help="lines/s from the author (default 50)")
    ap.add_argument("--duration", type=float, default=20.0, help="seconds of posting (default 20)")
    ap.add_argument("--workers", type=int, default=2, help="client processes (default 2)")
    ap.add_argument("--systems", default="irc,ws,ngircd",
                    help="which of suite-over-IRC (irc), suite-over-WebSocket (ws), ngircd to run (default all)")
    ap.add_argument("--event-loops", default="asyncio,uvloop",
                    help="the suite's servers' event loops, each run in turn (default asyncio,uvloop)")
    ap.add_argument("--rounds", type=int, default=3,
                    help="rounds of every system, interleaved (default 3); figures are medians over them")
    ap.add_argument("--default-malloc", action="store_true",
                    help="diagnostic: the receivers on glibc's default allocator thresholds, as before 2026-11-28 "
                         "(RECEIVERS_MALLOC)")
    ap.add_argument("--ws-heartbeat", type=float, default=None, metavar="S",
                    help="the suite's WebSocket ping interval for this run (default: the product's, chat "
                         "ws_heartbeat; a diagnostic: at 5,000 clients the pings of clients that logged in over "
                         "half a minute fall in the posting window)")
    ap.add_argument("--gap", type=float, default=0.0,
                    help="seconds of idle machine between one system's run and the next (default 0; a diagnostic: "
                         "does a run feel the one before it?)")
    ap.add_argument("--quick", action="store_true",
                    help="50 clients, 20 lines/s, 3 s, one round, each front end on one of the loops (a smoke run)")
    ap.add_argument("--profile", type=Path, default=None, metavar="DIR",
                    help="sample the suite's servers with py-spy while the author posts (pip install -e "
                         "'.[profile]'); raw stacks in DIR/<front end>-<loop>/, a summary printed")
    ap.add_argument("--receiver-loop", choices=EVENT_LOOPS, default="asyncio",
                    help="the receiving clients' event loop, the same for every system (default asyncio; on "
                         "asyncio they take about 1.2 of this machine's 2 cores at 1,000 clients, on uvloop half "
                         "that: docs/performance.md, \"WebSocket on the default loop\")")
    ap.add_argument("--author", choices=("irc", "ws"), default=None,
                    help="the suite's author posts over this front end whatever the receivers use (default: the "
                         "receivers' own; a diagnostic: it tells the front ends' ingest apart from their fan-out)")
    ap.add_argument("--stages", action="store_true",
                    help="note where each line's time goes inside the chat server (bench/_fanout_stages) and print "
                         "the stages of the last round's runs; adds a little CPU per line")
    ap.add_argument("--disk-probe", action="store_true",
                    help="the disk's flush latency beside each round (bench/_disk_probe.py: a 300-byte fdatasync "
                         "every 20 ms), printed per round: a round whose tail is the disk's shows it there")
    ap.add_argument("--no-durable", action="store_true",
                    help="RCM without its write-ahead log ([rcm] durable = false; a diagnostic, not the product: "
                         "what the disk's syncs cost the tail, RCM accepting a line only once it is on disk)")
    a = ap.parse_args()
    if a.profile is not None and _profile.py_spy() is None:
        ap.error("--profile needs py-spy: .venv/bin/pip install -e '.[profile]'")
    a.drain = 3.0                                 # seconds for the last lines to arrive
    if a.quick:
        a.clients, a.rate, a.duration, a.rounds, a.drain = 50, 20.0, 3.0, 1, 1.0
    kinds = [s.strip() for s in a.systems.split(",") if s.strip()]
    loops = [s.strip() for s in a.event_loops.split(",") if s.strip()]
    if not kinds or set(kinds) - {"irc", "ws", "ngircd"}:
        ap.error("--systems: a comma-separated subset of irc,ws,ngircd")
    if not loops or set(loops) - set(EVENT_LOOPS):
        ap.error(f"--event-loops: a comma-separated subset of {','.join(EVENT_LOOPS)}")
    if a.rounds < 1:
        ap.error("--rounds: at least 1")
    if "ngircd" in kinds and not ngircd_available():
        print("peer_irc_fanout: ngircd is not installed (bash deploy/sysdeps.sh ngircd)", file=sys.stderr)
        return 2
    systems = [k if k == "ngircd" else f"{k}/{loop}" for k in kinds for loop in ([None] if k == "ngircd" else loops)]
    if a.quick:             # a smoke run: every front end and every loop once, not every pair
        suite = [k for k in kinds if k != "ngircd"]
        systems = [f"{k}/{loops[i % len(loops)]}" for i, k in enumerate(suite)] + (["ngircd"] * ("ngircd" in kinds))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, 4 * a.clients + 256)), hard))
    rounds: list[dict[str, dict[str, Any]]] = []
    for i in range(a.rounds):
        runs: dict[str, dict[str, Any]] = {}
        for j, system in enumerate(systems):
            if a.gap > 0 and (i or j):
                time.sleep(a.gap)
            load = os.getloadavg()[0]          # the machine may be shared: say how busy it was when each run began
            print(f"  round {i + 1}/{a.rounds}: {system_name(system)} ...", file=sys.stderr, flush=True)
            try:
                if system == "ngircd":
                    runs[system] = asyncio.run(ngircd_run(a))
                else:
                    kind, loop = system.split("/")
                    runs[system] = asyncio.run(suite_run(a, kind, loop))
            except ShortJoin as e:          # this system's round is left out; the run goes on
                print(f"  round {i + 1}/{a.rounds}: {system_name(system)} left out: {e}", file=sys.stderr)
                runs[system] = {"left_out": str(e)}
            runs[system]["load_average_1m_at_start"] = load
        rounds.append(runs)
    summary = summarize(rounds)
    if not summary:
        print("peer_irc_fanout: every round of every system was left out", file=sys.stderr)
        return 1
    ratios = {s: r["ratio_p99"] for s, r in summary.items() if r.get("ratio_p99") is not None}
    head = ", ".join(f"{system_name(s)} {spread(summary[s]['ratio_p99_runs'])}" for s in ratios) \
        or "no ratio (ngircd not run)"
    print(f"peer_irc_fanout: p99 / ngircd's, median of {a.rounds} (range): {head} "
          f"({a.clients} clients, {a.rate:g} lines/s, {a.duration:g} s, receivers on {a.receiver_loop}"
          + (", glibc's default allocator" if a.default_malloc else "")
          + (", RCM without its write-ahead log: a diagnostic" if a.no_durable else "") + ")")
    for s, r in summary.items():
        print(line(s, r))
    for s in systems:
        if rounds[-1][s].get("stages"):
            print(stages_line(s, rounds[-1][s]["stages"]))
            print(f"  {'':26} p99 per round, the line's / the stages' ms: " + "; ".join(
                round_stages(r[s]) for r in rounds if r[s].get("stages")))
    for s in systems:
        disks = [r[s]["disk"] for r in rounds if r[s].get("disk")]
        if disks:
            print(f"  {system_name(s):26} the disk beside each round, fdatasync p99 / max ms (over 50 ms): "
                  + "; ".join(f"{x['p99_ms']:.1f} / {x['max_ms']:.0f} ({x['over_50ms']})" for x in disks))
    for s in systems:
        for name, prof in rounds[-1][s].get("profiles", {}).items():
            print(_profile.render(f"{system_name(s)}: {name} server (round {a.rounds})", prof))
    path = write_result("peer_irc_fanout" + ("_quick" if a.quick else "_diagnostic" if a.author or a.no_durable
                                             else ""),
                        {"clients": a.clients, "rate": a.rate, "duration": a.duration, "workers": a.workers,
                         "receiver_loop": a.receiver_loop,
                         "receivers_malloc": "glibc default" if a.default_malloc else RECEIVERS_MALLOC,
                         "rounds_count": a.rounds, "ratio_p99": ratios.get(f"irc/{loops[0]}"),
                         "rcm_durable": not a.no_durable,
                         "ratios_p99_to_ngircd": ratios, "summary": summary, "rounds": rounds,
                         "load_average_1m_at_end": os.getloadavg()[0]})
    plot(summary, f"{a.clients} clients in one channel, {a.rate:g} lines/s for {a.duration:g} s, one server; "
                  f"median of {a.rounds} interleaved rounds", path.with_suffix(".png"))
    print(f"  -> {path} (plot: {path.with_suffix('.png').name})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
