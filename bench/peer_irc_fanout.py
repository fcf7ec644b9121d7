"""Peer baseline for fan-out: one IRC server, many clients in one channel, a steady message rate.

Two servers, the same receiving clients: Debian's ngircd, and one site of the
suite (``python -m rcm`` and ``python -m chat_server`` with its IRC front end,
docs/irc.md). ``--clients`` IRC clients (default 1,000) join ``#fanout``; one
more client posts ``--rate`` lines/s (default 50) for ``--duration`` s, each
line carrying the time it was written. Fan-out latency at a client = arrival
minus that time (one clock: every process is on this machine). The clients
run in ``--workers`` processes of their own, each a plain asyncio loop that
counts lines and parses the ones of a sample of its clients, so client CPU
stays small and equal for both servers. On our side the latency covers the
IRC front end, the say pipeline, the RCM round trip that places the line in
the global order, the journal fsync and the fan-out; ngircd only relays.

The first line is the ratio (suite p99 / ngircd p99), then per server p50/p99
and the server's RSS at the end (the suite: chat server + RCM server). The
WebSocket side of the same server is ``bench/chat_fanout.py``.

    .venv/bin/python bench/peer_irc_fanout.py             # 1,000 clients, 50 lines/s, 20 s
    .venv/bin/python bench/peer_irc_fanout.py --quick     # 50 clients, 3 s
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing as mp
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import percentile, write_result  # noqa: E402
from bench.peer_irc import irc_network, ngircd_available  # noqa: E402
from bench.soak import rss_bytes  # noqa: E402
from chat_server.accounts import hash_password  # noqa: E402
from chat_server.store import ChatStore  # noqa: E402
from deploy.local import LocalRcm, free_ports, write_mission  # noqa: E402
from faultinject.procs import LocalChat  # noqa: E402
from rcm.config import load_mission  # noqa: E402

CHANNEL = "#fanout"
PASSWORD = "bench-pw"
MARK = b"fan "
SAMPLE_EVERY = 10            # every 10th client parses its lines for latency; the others only count them


async def _client(port: int, nick: str, password: str | None, sample: bool, out: dict[str, Any]) -> None:
    for attempt in range(20):                  # a listen backlog overflowing under 1,000 connects: try again
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 20)
            break
        except OSError:
            await asyncio.sleep(0.2 * (attempt + 1))
    else:
        out["failed"] += 1
        return
    if password:
        writer.write(f"PASS {password}\r\n".encode())
    writer.write(f"NICK {nick}\r\nUSER {nick} 0 * :{nick}\r\nJOIN {CHANNEL}\r\n".encode())
    joined = False
    buf = b""
    while True:
        data = await reader.read(65536)
        if not data:
            return
        now = time.time()
        buf += data
        *lines, buf = buf.split(b"\r\n")
        for line in lines:
            if not joined and b" JOIN " in line and line.startswith(b":" + nick.encode() + b"!"):
                joined = True
                out["joined"] += 1
            elif line.startswith(b"PING"):
                writer.write(b"PONG" + line[4:] + b"\r\n")
            elif MARK in line:
                out["lines"] += 1
                if sample:
                    with contextlib.suppress(ValueError):
                        out["lat"].append(now - float(line.rsplit(MARK, 1)[1].split(b" ", 1)[0]))


def worker_main(port: int, nicks: list[str], password: str | None, conn: Any, stop_after: float) -> None:
    """A process of receiving clients: connect all, report joined, run until told to stop, report figures."""
    async def main() -> None:
        out: dict[str, Any] = {"joined": 0, "lines": 0, "lat": [], "failed": 0}
        tasks = []
        for i, nick in enumerate(nicks):
            tasks.append(asyncio.create_task(_client(port, nick, password, i % SAMPLE_EVERY == 0, out)))
            if i % 20 == 19:
                await asyncio.sleep(0.05)            # don't look like a connection flood
        deadline = time.monotonic() + 120
        while out["joined"] + out["failed"] < len(nicks) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        conn.send(("joined", out["joined"]))
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, conn.recv)       # "stop"
        conn.send(("done", out["lines"], out["lat"]))
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    asyncio.run(main())


async def run_clients(port: int, password: str | None, n: int, workers: int, rate: float, duration: float,
                      prefix: str, server_pids: list[int]) -> dict[str, Any]:
    nicks = [f"{prefix}{i}" for i in range(n)]
    ctx = mp.get_context("spawn")
    procs, pipes = [], []
    for w in range(workers):
        parent, child = ctx.Pipe()
        p = ctx.Process(target=worker_main, args=(port, nicks[w::workers], password, child, duration), daemon=True)
        p.start()
        procs.append(p)
        pipes.append(parent)
    joined = 0
    for c in pipes:
        joined += (await asyncio.to_thread(c.recv))[1]
    if joined < n:
        raise RuntimeError(f"only {joined} of {n} clients joined {CHANNEL} on port {port}")
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    author = f"{prefix}author"
    if password:
        writer.write(f"PASS {password}\r\n".encode())
    writer.write(f"NICK {author}\r\nUSER {author} 0 * :author\r\nJOIN {CHANNEL}\r\n".encode())
    while b" JOIN " not in await reader.readline():
        pass
    drain = asyncio.create_task(_discard(reader, writer))
    sent = 0
    t0 = time.monotonic()
    while time.monotonic() - t0 < duration:
        sent += 1
        writer.write(f"PRIVMSG {CHANNEL} :{MARK.decode()}{time.time():.6f} {sent}\r\n".encode())
        await writer.drain()
        await asyncio.sleep(max(0.0, t0 + sent / rate - time.monotonic()))
    await asyncio.sleep(3.0)                                  # the last lines arrive
    rss = sum(v for v in (rss_bytes(pid) for pid in server_pids) if v is not None)
    for c in pipes:
        c.send("stop")
    lines, lat = 0, []
    for c in pipes:
        _, k, xs = await asyncio.to_thread(c.recv)
        lines += k
        lat += xs
    for p in procs:
        p.join(10)
    drain.cancel()
    writer.close()
    return {"clients": n, "sent": sent, "lines_received": lines, "expected": sent * n,
            "p50_ms": percentile(lat, 50) * 1000, "p99_ms": percentile(lat, 99) * 1000,
            "samples": len(lat), "server_rss_mib": rss / 2**20}


async def _discard(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while line := await reader.readline():
        if line.startswith(b"ERROR"):
            print(f"author: {line.decode(errors='replace').strip()}", file=sys.stderr)
        if line.startswith(b"PING"):
            writer.write(b"PONG" + line[4:])


async def ngircd_run(a: argparse.Namespace) -> dict[str, Any]:
    async with irc_network(["A"]) as net:
        s = net.servers["A"]
        assert s.proc is not None
        return await run_clients(s.port, None, a.clients, a.workers, a.rate, a.duration, "u", [s.proc.pid])


async def suite_run(a: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="rcm-irc-fanout-") as d:
        mpath = write_mission(Path(d) / "mission.toml", "fanout", ["A"], data_dir="data",
                              chat={"kdf_n": 1024, "max_connections": 10_000,
                                    "max_connections_per_address": 10_000, "max_sessions_per_user": 4,
                                    "rate_limit_frames": 1000.0, "rate_limit_burst": 2000,
                                    "user_rate_limit_frames": 1000.0, "user_rate_limit_burst": 2000})
        [port] = free_ports(1)
        text = mpath.read_text().replace('chat = "', f'irc = "127.0.0.1:{port}"\nchat = "', 1)
        mpath.write_text(text)
        mission = load_mission(mpath)
        store = ChatStore(mission.site_dir("A") / "chat" / "chat.db")
        pw = hash_password(PASSWORD, 1024)
        for i in range(a.clients):
            store.add_user(f"u{i}", pw)
        store.add_user("uauthor", pw)
        store.close()
        rcm, chat = LocalRcm(mpath, log_level="warning"), LocalChat(mpath, log_level="warning")
        try:
            await asyncio.to_thread(rcm.start_all, 30.0)
            chat.start("A")
            await asyncio.to_thread(chat.wait_ready, "A", 30.0)
            try:
                return await run_clients(port, PASSWORD, a.clients, a.workers, a.rate, a.duration, "u",
                                         [rcm.procs["A"].pid, chat.procs["A"].pid])
            except Exception:
                print("chat server log:\n" + chat.log_tail("A", 15), file=sys.stderr)
                raise
        finally:
            await asyncio.to_thread(chat.stop_all)
            await asyncio.to_thread(rcm.stop_all)


def line(name: str, r: dict[str, Any]) -> str:
    got = r["lines_received"] / r["expected"] * 100 if r["expected"] else float("nan")
    return (f"  {name:14} {r['clients']} clients: p50 {r['p50_ms']:7.1f} ms  p99 {r['p99_ms']:7.1f} ms  "
            f"({r['samples']} samples, {got:.1f}% of lines received), server RSS {r['server_rss_mib']:.0f} MiB")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=1000)
    ap.add_argument("--rate", type=float, default=50.0, help="lines/s from the author")
    ap.add_argument("--duration", type=float, default=20.0)
    ap.add_argument("--workers", type=int, default=2, help="client processes")
    ap.add_argument("--quick", action="store_true", help="50 clients, 20 lines/s, 3 s")
    a = ap.parse_args()
    if a.quick:
        a.clients, a.rate, a.duration = 50, 20.0, 3.0
    if not ngircd_available():
        print("peer_irc_fanout: ngircd is not installed (bash deploy/sysdeps.sh ngircd)", file=sys.stderr)
        return 2
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, 4 * a.clients + 256)), hard))
    ngircd = asyncio.run(ngircd_run(a))
    ours = asyncio.run(suite_run(a))
    ratio = ours["p99_ms"] / ngircd["p99_ms"] if ngircd["p99_ms"] else float("inf")
    print(f"peer_irc_fanout: suite/ngircd p99 ratio {ratio:.2f} ({a.clients} IRC clients, {a.rate:g} lines/s)")
    print(line("suite (IRC)", ours))
    print(line("ngircd", ngircd))
    path = write_result("peer_irc_fanout" + ("_quick" if a.quick else ""),
                        {"clients": a.clients, "rate": a.rate, "duration": a.duration, "ratio_p99": ratio,
                         "suite_irc": ours, "ngircd": ngircd})
    print(f"  -> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
