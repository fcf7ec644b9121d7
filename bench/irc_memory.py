"""Where an IRC connection's memory goes: Python objects per client of the IRC front end, by source line.

Theory of operation
-------------------
One chat server in this process (site A, the tests' in-memory fake RCM, asyncio), its IRC front end on a free
port; N IRC clients (``argv[1]``, default 1,000) log in and join ``#fanout`` from a process of their own, so
that only the server's allocations are traced. tracemalloc snapshots before the clients come and after they
have joined (and a garbage collection); the difference, per client, is printed in total and for the 25 source
lines that allocated the most. These are Python objects only (not the kernel's socket buffers, not the
allocator's slack): what a change to a session's state saves shows here; RSS is bench/login_storm.py's.

    .venv/bin/python bench/irc_memory.py 1000
    .venv/bin/python bench/irc_memory.py --quick     # 50 clients (a smoke run)
"""
from __future__ import annotations

import asyncio
import gc
import multiprocessing as mp
import resource
import sys
import tempfile
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "chat_server"), str(ROOT / "tests")]

from chat_fake_rcm import FakeNetwork  # noqa: E402

from chat_server.accounts import hash_password  # noqa: E402
from chat_server.config import parse_chat_settings  # noqa: E402
from chat_server.server import ChatServer  # noqa: E402
from chat_server.store import ChatStore  # noqa: E402
from contracts.mission import parse_mission  # noqa: E402

QUICK = "--quick" in sys.argv[1:]
_ARGS = [a for a in sys.argv[1:] if a != "--quick"]
N = 50 if QUICK else int(_ARGS[0]) if _ARGS else 1000
PW = "pw"

def clients(port, n, conn):
    async def main():
        done = 0
        async def one(i, attempt=0):
            nonlocal done
            r, w = await asyncio.open_connection("127.0.0.1", port)
            w.write(f"PASS {PW}\r\nNICK u{i}\r\nUSER u{i} 0 * :x\r\nJOIN #fanout\r\n".encode())
            buf = b""
            while True:
                d = await r.read(65536)
                if not d:
                    raise RuntimeError(buf[-300:])
                buf = buf[-200:] + d
                if f":u{i}!u{i}@A JOIN #fanout".encode() in buf:
                    break
                if b"try again" in buf:         # a shed login: again, a little later each time, 100 times at most
                    w.close()
                    if attempt >= 99:
                        raise RuntimeError(f"u{i}: shed 100 times")
                    await asyncio.sleep(0.3 + 0.05 * attempt)
                    return await one(i, attempt + 1)
            done += 1
            ws.append((r, w))
            async def drain():
                while await r.read(65536):
                    pass
            asyncio.ensure_future(drain())
        ws = []
        sem = asyncio.Semaphore(100)
        async def lim(i):
            async with sem:
                await one(i)
        await asyncio.gather(*(lim(i) for i in range(n)))
        conn.send(done)
        await asyncio.get_running_loop().run_in_executor(None, conn.recv)
    asyncio.run(main())

async def main(tmp):
    raw = {"mission": {"name": "t", "data_dir": "var"}, "rcm": {},
           "sites": {"A": {"rcm": "127.0.0.1:20100", "chat": "127.0.0.1:21100", "irc": "127.0.0.1:21600"}},
           "chat": {"kdf_n": 1024, "max_connections": 20000, "max_connections_per_address": 20000}}
    mission = parse_mission(raw, tmp)
    store = ChatStore(mission.site_dir("A") / "chat" / "chat.db")
    pw = hash_password(PW, 1024)
    for i in range(N):
        store.add_user(f"u{i}", pw)
    store.close()
    net = FakeNetwork(["A"])
    srv = ChatServer(mission, "A", parse_chat_settings(mission.chat), rcm_connect=net.connector("A"),
                     host="127.0.0.1", port=0, irc_port=0)
    await srv.start()
    await asyncio.wait_for(srv.rcm_connected.wait(), 5)
    gc.collect()
    tracemalloc.start(8)
    s0 = tracemalloc.take_snapshot()
    ctx = mp.get_context("spawn")
    a, b = ctx.Pipe()
    p = ctx.Process(target=clients, args=(srv.irc_front.port, N, b), daemon=True)
    p.start()
    n = await asyncio.to_thread(a.recv)
    await asyncio.sleep(0.5 if QUICK else 2.0)
    gc.collect()
    s1 = tracemalloc.take_snapshot()
    total = sum(st.size_diff for st in s1.compare_to(s0, "filename"))
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"irc_memory: {n} clients: traced +{total / n:.0f} B per client; this process's peak RSS {maxrss:.0f} MiB")
    for st in s1.compare_to(s0, "lineno")[:25]:
        print(f"  {st.size_diff/n:8.0f} B/client {st.count_diff/n:6.2f} blocks  {st.traceback[0]}")
    a.send("stop")
    p.join(5)
    await srv.stop()

if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as d:
        asyncio.run(main(Path(d)))
