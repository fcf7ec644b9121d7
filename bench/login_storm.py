"""Login storm: what one more login costs a chat server as the clients already logged in grow.

Theory of operation
-------------------
One site of the suite (``python -m rcm`` and ``python -m chat_server``, as
``bench/peer_irc_fanout.py`` starts it), every client a user of its own who
logs in and joins room ``fanout`` (channel ``#fanout``), over IRC or
WebSocket. Clients come in steps (``--steps``, cumulative counts, e.g.
``500,1000,2000``): each step's new clients connect as fast as the server
takes them (``--parallel`` at once; a shed login is retried), then the
benchmark waits until every client has joined and the server has been quiet
for a presence interval. For each step it reports load-robust figures, which
a busy machine stretches in time but not in amount:

* the chat server's CPU-seconds (``/proc/<pid>/stat`` utime + stime) spent
  per login of the step, and the ratio of that to the first step's (the
  leading figure: 1.0 if a login costs the same whatever the crowd, 2.0 per
  doubling if it costs O(clients));
* the bytes every already-connected client received during the step, per
  login of the step (what the storm costs each session on the wire);
* the chat server's RSS after the step, per 1,000 clients.

Wall-clock seconds are printed too, and are only indicative on a shared
machine. JSON: bench/results/login_storm[_<kind>].json.

    .venv/bin/python bench/login_storm.py --kind irc --steps 500,1000,2000
    .venv/bin/python bench/login_storm.py --kind ws --steps 500,1000,2000
    .venv/bin/python bench/login_storm.py --quick     # 50 and 100 IRC clients (a smoke run)
"""
from __future__ import annotations

import argparse
import asyncio
import functools
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import write_result  # noqa: E402
from bench._fanout_clients import _mask  # noqa: E402
from bench._profile import cpu_seconds  # noqa: E402
from bench.soak import rss_bytes  # noqa: E402
from chat_server.accounts import hash_password  # noqa: E402
from chat_server.store import ChatStore  # noqa: E402
from contracts.mission import load_mission  # noqa: E402
from faultinject.missions import free_ports, write_mission  # noqa: E402
from faultinject.procs import LocalChat, LocalRcm  # noqa: E402
from rcm.cli import EVENT_LOOP_ENV  # noqa: E402

ROOM = "fanout"
PASSWORD = "bench-pw"


class Client(asyncio.Protocol):
    """A receiving client: logs in, joins, then only counts the bytes it receives."""

    def __init__(self, kind: str, user: str, host: str, joined: asyncio.Future[None]) -> None:
        self.kind, self.user, self.host, self.joined = kind, user, host, joined
        self.received = 0
        self.buf = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        assert self.transport is not None
        if self.kind == "irc":
            u = self.user
            self.transport.write(f"PASS {PASSWORD}\r\nNICK {u}\r\nUSER {u} 0 * :{u}\r\nJOIN #{ROOM}\r\n".encode())
        else:
            self.transport.write(f"GET /ws HTTP/1.1\r\nHost: {self.host}\r\nUpgrade: websocket\r\n"
                                 "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                                 "Sec-WebSocket-Version: 13\r\n\r\n".encode())
            self.transport.write(_mask({"type": "hello", "user": self.user, "password": PASSWORD}))
            self.transport.write(_mask({"type": "join", "room": ROOM}))

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.joined.done():
            self.joined.set_exception(ConnectionError(f"{self.user}: closed ({self.buf[-200:]!r})"))

    def data_received(self, data: bytes) -> None:
        self.received += len(data)
        if self.joined.done():
            return
        self.buf = self.buf[-256:] + data
        if self.kind == "irc":
            if f":{self.user}!".encode() in self.buf and f" JOIN #{ROOM}".encode() in self.buf:
                self.joined.set_result(None)
            elif b"try again" in self.buf or b"Throttled" in self.buf:
                self.joined.set_exception(ConnectionRefusedError("shed"))
        elif b'"type":"joined"' in self.buf or b'"type": "joined"' in self.buf:
            self.joined.set_result(None)
        elif b'"rate_limited"' in self.buf:
            self.joined.set_exception(ConnectionRefusedError("shed"))
        self.buf = self.buf[-256:]


async def connect(kind: str, port: int, user: str, sem: asyncio.Semaphore) -> Client:
    loop = asyncio.get_running_loop()
    async with sem:
        for attempt in range(100):
            joined: asyncio.Future[None] = loop.create_future()
            try:
                _, proto = await loop.create_connection(
                    functools.partial(Client, kind, user, f"127.0.0.1:{port}", joined), "127.0.0.1", port)
                await asyncio.wait_for(joined, 120)
                return proto
            except (ConnectionRefusedError, ConnectionResetError, OSError) as e:
                if attempt == 99:
                    raise RuntimeError(f"{user}: {e}") from e
                await asyncio.sleep(0.1 + 0.05 * attempt)
    raise AssertionError("unreachable")


async def quiet(pid: int, seconds: float) -> None:
    """Wait until the server spends under 2% CPU over ``seconds``."""
    while True:
        c0 = (cpu_seconds(pid) or 0.0)
        await asyncio.sleep(seconds)
        if (cpu_seconds(pid) or 0.0) - c0 < 0.02 * seconds:
            return


async def storm(a: argparse.Namespace) -> dict[str, Any]:
    steps = [int(s) for s in a.steps.split(",")]
    with tempfile.TemporaryDirectory(prefix="rcm-storm-") as d:
        mpath = write_mission(Path(d) / "mission.toml", "storm", ["A"], data_dir="data",
                              chat={"kdf_n": 1024, "max_connections": 20_000, "max_connections_per_address": 20_000,
                                    "max_sessions_per_user": 4})
        [irc_port] = free_ports(1)
        mpath.write_text(mpath.read_text().replace('chat = "', f'irc = "127.0.0.1:{irc_port}"\nchat = "', 1))
        mission = load_mission(mpath)
        store = ChatStore(mission.site_dir("A") / "chat" / "chat.db")
        pw = hash_password(PASSWORD, 1024)
        for i in range(steps[-1]):
            store.add_user(f"u{i}", pw)
        store.close()
        port = irc_port if a.kind == "irc" else mission.site("A").chat.port
        env = {EVENT_LOOP_ENV: a.event_loop}
        rcm, chat = LocalRcm(mpath, log_level="warning", env=env), LocalChat(mpath, log_level="warning", env=env)
        try:
            await asyncio.to_thread(rcm.start_all, 30.0)
            chat.start("A")
            await asyncio.to_thread(chat.wait_ready, "A", 30.0)
            pid = chat.procs["A"].pid
            sem = asyncio.Semaphore(a.parallel)
            clients: list[Client] = []
            rows = []
            await quiet(pid, 1.0)
            for step in steps:
                new = step - len(clients)
                before_bytes = sum(c.received for c in clients)
                c0, t0 = (cpu_seconds(pid) or 0.0), time.monotonic()
                clients += await asyncio.gather(*(connect(a.kind, port, f"u{i}", sem)
                                                  for i in range(len(clients), step)))
                joined_s = time.monotonic() - t0
                await quiet(pid, 1.0)
                cpu = (cpu_seconds(pid) or 0.0) - c0 - 0.02          # (at most the quiet second's share)
                old = clients[:step - new]
                old_bytes = sum(c.received for c in old) - before_bytes
                row = {"clients": step, "logins": new, "cpu_s": round(cpu, 2),
                       "cpu_ms_per_login": round(1000 * cpu / new, 2),
                       "bytes_per_old_session_per_login": round(old_bytes / max(1, len(old)) / new, 1),
                       "joined_s": round(joined_s, 1),
                       "rss_mib": round((rss_bytes(pid) or 0) / 2**20, 1)}
                row["rss_mib_per_1000"] = round(row["rss_mib"] / step * 1000, 1)
                rows.append(row)
                print(f"  {a.kind} {step:6} clients (+{new}): {row['cpu_ms_per_login']:7.2f} CPU-ms/login, "
                      f"{row['bytes_per_old_session_per_login']:6.1f} B/login to each earlier session, "
                      f"RSS {row['rss_mib']:.0f} MiB ({row['rss_mib_per_1000']:.0f}/1,000), joined in "
                      f"{joined_s:.1f} s", file=sys.stderr, flush=True)
            for c in clients:
                if c.transport is not None:
                    c.transport.close()
            return {"kind": a.kind, "event_loop": a.event_loop, "steps": rows}
        finally:
            await asyncio.to_thread(chat.stop_all)
            await asyncio.to_thread(rcm.stop_all)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kind", choices=("irc", "ws"), default="irc")
    ap.add_argument("--steps", default="500,1000,2000", help="cumulative client counts (default 500,1000,2000)")
    ap.add_argument("--parallel", type=int, default=200, help="connections being set up at once (default 200)")
    ap.add_argument("--event-loop", default="uvloop", choices=("asyncio", "uvloop"))
    ap.add_argument("--quick", action="store_true", help="steps 50,100 (a smoke run: its figures mean little)")
    a = ap.parse_args()
    if a.quick:
        a.steps = "50,100"
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    last = int(a.steps.split(",")[-1])
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, 2 * last + 256)), hard))
    result = asyncio.run(storm(a))
    rows = result["steps"]
    first = rows[0]["cpu_ms_per_login"]
    ratios = ", ".join(f"{r['clients']}: {r['cpu_ms_per_login'] / first:.2f}" for r in rows)
    print(f"login_storm ({a.kind}, {a.event_loop}): CPU per login / at {rows[0]['clients']} clients: {ratios}")
    for r in rows:
        print(f"  {r['clients']:6} clients: {r['cpu_ms_per_login']:.2f} CPU-ms per login, "
              f"{r['bytes_per_old_session_per_login']:.1f} B per login to each earlier session, "
              f"RSS {r['rss_mib']:.0f} MiB ({r['rss_mib_per_1000']:.0f} per 1,000 clients)")
    path = write_result(f"login_storm_{a.kind}" + ("_quick" if a.quick else ""), result)
    print(f"  -> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
