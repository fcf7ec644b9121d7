"""Where a client connection's memory goes: Python objects per client of the IRC or WebSocket front end, by
source line.

Theory of operation
-------------------
One chat server in this process (site A, the tests' in-memory fake RCM, asyncio), its IRC and WebSocket front
ends on free ports; N clients of a front end (``--clients``, default 1,000) log in and join ``fanout`` from a
process of their own (IRC: raw lines; WebSocket: the suite's ``ChatClient``), so that only the server's
allocations are traced. tracemalloc snapshots before the clients come and after they have joined (and a
garbage collection); the difference, per client, is printed in total, per file, and for the 25 source lines
that allocated the most. These are Python objects only (not the kernel's socket buffers, not the
allocator's slack, not C extensions' own allocations): what a change to a session's state saves shows
here; RSS is bench/login_storm.py's and bench/peer_irc_fanout.py's. A login the server sheds for now
(``try again``) is tried again, as in the other benchmarks; what a shed attempt leaves (the login
limiter's entries) is counted too, and the retries are printed.

    .venv/bin/python bench/client_memory.py                    # both front ends, 1,000 clients each
    .venv/bin/python bench/client_memory.py --front ws --clients 5000
    .venv/bin/python bench/client_memory.py --quick            # 50 clients of each (a smoke run)
"""
from __future__ import annotations

import argparse
import asyncio
import gc
import multiprocessing as mp
import resource
import sys
import sysconfig
import tempfile
import tracemalloc
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "chat_server"), str(ROOT / "tests")]

from chat_fake_rcm import FakeNetwork  # noqa: E402

from chat_server.accounts import hash_password  # noqa: E402
from chat_server.config import parse_chat_settings  # noqa: E402
from chat_server.server import ChatServer  # noqa: E402
from chat_server.store import ChatStore  # noqa: E402
from contracts.mission import parse_mission  # noqa: E402

PW = "pw"
ROOM = "fanout"


def irc_clients(port: int, n: int, conn: Any) -> None:
    """A process of ``n`` IRC clients: each logs in and joins, then reads until told to stop."""
    async def login(i: int) -> Any:
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(f"PASS {PW}\r\nNICK u{i}\r\nUSER u{i} 0 * :x\r\nJOIN #{ROOM}\r\n".encode())
        buf = b""
        while True:
            d = await r.read(65536)
            if not d:
                raise RuntimeError(buf[-300:])
            buf = buf[-200:] + d
            if f":u{i}!u{i}@A JOIN #{ROOM}".encode() in buf:
                return w, asyncio.ensure_future(_drain(r))          # (a writer let go closes its connection)
            if b"try again" in buf:
                w.close()
                return None
    asyncio.run(_clients(n, conn, login))


def ws_clients(port: int, n: int, conn: Any) -> None:
    """A process of ``n`` WebSocket clients (``ChatClient``): each logs in and joins, then reads until told
    to stop."""
    from chat_server.client import ChatClient, ChatError

    async def login(i: int) -> Any:
        try:
            c = await ChatClient.connect(f"ws://127.0.0.1:{port}/ws", f"u{i}", PW)
        except ChatError as e:
            if e.code != "rate_limited":
                raise
            return None
        await c.join(ROOM)
        return c

    async def close(c: Any) -> None:
        await c.close()
    asyncio.run(_clients(n, conn, login, close))


async def _drain(r: asyncio.StreamReader) -> None:
    while await r.read(65536):
        pass


async def _clients(n: int, conn: Any, login: Callable[[int], Awaitable[Any]],
                   close: Callable[[Any], Awaitable[None]] | None = None) -> None:
    """Log in every client, 100 at a time (``login(i)``: the client, or None when the server shed it for now;
    then again, a little later each time, 100 times at most); report (joined, retries) on ``conn``; hold them
    until told to stop."""
    held: list[Any] = []
    retries = 0
    sem = asyncio.Semaphore(100)

    async def one(i: int) -> None:
        nonlocal retries
        async with sem:
            for attempt in range(100):
                client = await login(i)
                if client is not None:
                    held.append(client)
                    return
                retries += 1
                await asyncio.sleep(0.3 + 0.05 * attempt)
            raise RuntimeError(f"u{i}: shed 100 times")
    await asyncio.gather(*(one(i) for i in range(n)))
    conn.send((len(held), retries))
    await asyncio.get_running_loop().run_in_executor(None, conn.recv)
    if close is not None:
        await asyncio.gather(*(close(c) for c in held), return_exceptions=True)


async def measure(tmp: Path, front: str, n: int) -> dict[str, Any]:
    """One chat server, ``n`` clients of ``front``: the Python memory they cost it, per client."""
    raw = {"mission": {"name": "t", "data_dir": "var"}, "rcm": {},
           "sites": {"A": {"rcm": "127.0.0.1:20100", "chat": "127.0.0.1:21100", "irc": "127.0.0.1:21600"}},
           "chat": {"kdf_n": 1024, "max_connections": 20000, "max_connections_per_address": 20000}}
    mission = parse_mission(raw, tmp)
    store = ChatStore(mission.site_dir("A") / "chat" / "chat.db")
    pw = hash_password(PW, 1024)
    for i in range(n):
        store.add_user(f"u{i}", pw)
    store.close()
    net = FakeNetwork(["A"])
    srv = ChatServer(mission, "A", parse_chat_settings(mission.chat), rcm_connect=net.connector("A"),
                     host="127.0.0.1", port=0, irc_port=0)
    await srv.start()
    try:
        await asyncio.wait_for(srv.rcm_connected.wait(), 5)
        gc.collect()
        tracemalloc.start(8)
        s0 = tracemalloc.take_snapshot()
        ctx = mp.get_context("spawn")
        a, b = ctx.Pipe()
        target, port = (irc_clients, srv.irc_front.port) if front == "irc" else (ws_clients, srv.port)
        p = ctx.Process(target=target, args=(port, n, b), daemon=True)
        p.start()
        joined, retries = await asyncio.to_thread(a.recv)
        await asyncio.sleep(0.5 if n <= 100 else 2.0)
        gc.collect()
        s1 = tracemalloc.take_snapshot()
        tracemalloc.stop()
        a.send("stop")
        await asyncio.to_thread(p.join, 10)
    finally:
        await srv.stop()
    total = sum(st.size_diff for st in s1.compare_to(s0, "filename"))
    return {"front": front, "clients": joined, "retries": retries, "bytes_per_client": total / joined,
            "files": [(str(st.traceback[0]).rsplit(":", 1)[0], st.size_diff / joined)
                      for st in s1.compare_to(s0, "filename")[:8]],
            "lines": [(str(st.traceback[0]), st.size_diff / joined, st.count_diff / joined)
                      for st in s1.compare_to(s0, "lineno")[:25]]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--front", default="irc,ws", help="the front ends, each measured in turn (default irc,ws)")
    ap.add_argument("--clients", type=int, default=1000)
    ap.add_argument("--quick", action="store_true", help="50 clients of each front end")
    a = ap.parse_args()
    n = 50 if a.quick else a.clients
    fronts = [f for f in a.front.split(",") if f]
    unknown = set(fronts) - {"irc", "ws"}
    if unknown:
        ap.error(f"unknown front end(s) {sorted(unknown)}: irc, ws")
    results = []
    for front in fronts:
        with tempfile.TemporaryDirectory() as d:
            r = asyncio.run(measure(Path(d), front, n))
        results.append(r)
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print("client_memory: traced Python memory per client, "
          + ", ".join(f"{r['front']} {r['bytes_per_client']:.0f} B" for r in results)
          + f" ({n} clients each; this process's peak RSS {maxrss:.0f} MiB)")
    for r in results:
        print(f"  {r['front']}: {r['clients']} clients ({r['retries']} logins shed and tried again), "
              f"{r['bytes_per_client']:.0f} B per client; by file:")
        for f, b in r["files"]:
            print(f"    {b:8.0f} B/client  {_short(f)}")
        print("  by source line:")
        for where, b, blocks in r["lines"]:
            print(f"    {b:8.0f} B/client {blocks:6.2f} blocks  {_short(where)}")
    return 0


def _short(where: str) -> str:
    """A path from the repository, site-packages or the standard library (aiohttp/web_ws.py:642,
    asyncio/base_events.py:436), not the whole of it."""
    for marker in ("site-packages/", str(ROOT) + "/", sysconfig.get_paths()["stdlib"] + "/"):
        if marker in where:
            return where.split(marker, 1)[1]
    return where


if __name__ == "__main__":
    sys.exit(main())
