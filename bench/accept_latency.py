"""A line's way in: how long a site's RCM server takes to accept a local message and deliver it back.

Theory of operation
-------------------
Before a chat server shows a line to anyone (bench/peer_irc_fanout.py's *say, RCM, back* stage), it hands
the line to its site's RCM server over the local socket and waits for the server's ``accepted`` and the
delivery of the line in the site's order; with durability on (the default), the server answers only once
the line is in its write-ahead log and the log is forced to disk (docs/rcm.md, "Durability"). ngircd has no
such step, so this is the floor under the suite's fan-out latency that no front end can take away.

One site (a one-site mission, so ordering waits for no peer), one local client in this process that sends
a 100-byte message every ``--interval`` (20 ms: peer_irc_fanout's author), one at a time, and notes when
``accepted`` and the delivery come back. Three modes, interleaved round by round, each on the event loop
``--event-loop`` (servers and client alike):

- ``bare``: a minimal echo server in its own process on the same kind of socket and loop: the cost of any
  round trip between two Python processes on this machine (the baseline);
- ``memory``: the RCM server without its log (``[rcm] durable = false``, not the product);
- ``durable``: the RCM server as shipped.

Before each durable round, 50 forced appends of 300 bytes in the round's directory (10 ms apart) give the
disk's own ``fdatasync`` time at that moment, so the durable mode's extra splits into the disk's share and
the hand-off to the log's thread and back. The summary leads with the ratios durable/bare and durable/memory
(medians over rounds of each round's p50), then absolute figures; the JSON has every round.

    .venv/bin/python bench/accept_latency.py                   # 3 rounds of 500 messages per mode
    .venv/bin/python bench/accept_latency.py --event-loop asyncio
    .venv/bin/python bench/accept_latency.py --quick           # one round of 50 (a smoke run)
"""
from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import percentile, write_result  # noqa: E402
from chat_server.launcher import server_env  # noqa: E402
from faultinject.missions import write_mission  # noqa: E402
from faultinject.procs import LocalRcm  # noqa: E402
from rcm.cli import EVENT_LOOP_ENV, EVENT_LOOPS  # noqa: E402
from rcm.cli import run as run_on  # noqa: E402
from rcm.client import Delivery, RcmClient, socket_path  # noqa: E402

MODES = ("bare", "memory", "durable")
PAYLOAD = 100

ECHO = """
import asyncio, sys
from rcm.cli import run
class Echo(asyncio.Protocol):
    def connection_made(self, t): self.t = t
    def data_received(self, d): self.t.write(d)
async def main():
    server = await asyncio.get_running_loop().create_unix_server(Echo, sys.argv[1])
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    server.close()
run(main(), sys.argv[2])
"""


def disk_sync_ms(directory: Path, n: int = 50) -> float:
    """The median time of ``n`` forced 300-byte appends in ``directory``, 10 ms apart."""
    path = directory / "sync-probe"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    took = []
    try:
        for _ in range(n):
            os.write(fd, b"x" * 300)
            t = time.perf_counter()
            os.fdatasync(fd)
            took.append(time.perf_counter() - t)
            time.sleep(0.01)
    finally:
        os.close(fd)
        path.unlink()
    return statistics.median(took) * 1000


async def paced(n: int, interval: float, one: Any) -> list[float]:
    """``n`` round trips of ``one()`` (seconds each), one every ``interval``."""
    took = []
    nxt = time.perf_counter()
    for _ in range(n):
        took.append(await one())
        nxt += interval
        await asyncio.sleep(max(0.0, nxt - time.perf_counter()))
    return took


async def bare_round(d: Path, n: int, interval: float, loop: str) -> dict[str, Any]:
    path = d / "echo.sock"
    child = subprocess.Popen([sys.executable, "-c", ECHO, str(path), loop], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, env=server_env())
    try:
        assert child.stdout is not None
        if child.stdout.readline().strip() != b"ready":
            raise RuntimeError("the echo server did not start")
        reader, writer = await asyncio.open_unix_connection(str(path))
        msg = b"y" * PAYLOAD

        async def one() -> float:
            t = time.perf_counter()
            writer.write(msg)
            await reader.readexactly(len(msg))
            return time.perf_counter() - t

        took = await paced(n, interval, one)
        writer.close()
        return {"accepted": took, "delivered": took}
    finally:
        if child.stdin is not None:
            child.stdin.close()
        child.wait(10)


async def rcm_round(d: Path, n: int, interval: float, loop: str, durable: bool) -> dict[str, Any]:
    mpath = write_mission(d / "mission.toml", "accept", ["A"], data_dir="data",
                          rcm=None if durable else {"durable": False})
    servers = LocalRcm(mpath, log_level="warning", env={EVENT_LOOP_ENV: loop})
    out: dict[str, Any] = {}
    if durable:
        out["disk_sync_ms"] = await asyncio.to_thread(disk_sync_ms, d)
    await asyncio.to_thread(servers.start_all, 30.0)
    try:
        client = await RcmClient.connect(socket_path(servers.mission, "A"), name="bench")
        waiting: dict[bytes, asyncio.Future[float]] = {}

        async def read() -> None:
            async for ev in client.events():
                if isinstance(ev, Delivery):
                    f = waiting.pop(ev.payload, None)
                    if f is not None and not f.done():
                        f.set_result(time.perf_counter())
                    await client.ack(ev.n)

        reader = asyncio.create_task(read())
        accepted: list[float] = []
        count = iter(range(n))

        async def one() -> float:
            payload = b"%08d" % next(count) + b"y" * (PAYLOAD - 8)
            got: asyncio.Future[float] = asyncio.get_running_loop().create_future()
            waiting[payload] = got
            t = time.perf_counter()
            await client.send(payload)
            accepted.append(time.perf_counter() - t)
            arrived: float = await asyncio.wait_for(got, 30.0)
            return arrived - t

        delivered = await paced(n, interval, one)
        reader.cancel()
        await asyncio.gather(reader, return_exceptions=True)
        await client.close()
        out.update(accepted=accepted, delivered=delivered)
        return out
    finally:
        await asyncio.to_thread(servers.stop_all)


def ms(values: list[float], p: float) -> float:
    return round(percentile(values, p) * 1000, 3)


async def measure(a: argparse.Namespace) -> dict[str, Any]:
    rounds: dict[str, list[dict[str, Any]]] = {m: [] for m in MODES}
    for r in range(a.rounds):
        for mode in MODES:
            print(f"  round {r + 1}/{a.rounds}: {mode} ...", file=sys.stderr, flush=True)
            with tempfile.TemporaryDirectory(prefix="rcm-accept-") as d:
                if mode == "bare":
                    got = await bare_round(Path(d), a.messages, a.interval, a.event_loop)
                else:
                    got = await rcm_round(Path(d), a.messages, a.interval, a.event_loop, mode == "durable")
            rounds[mode].append({
                **{k: v for k, v in got.items() if k not in ("accepted", "delivered")},
                "accepted_p50_ms": ms(got["accepted"], 50), "accepted_p99_ms": ms(got["accepted"], 99),
                "delivered_p50_ms": ms(got["delivered"], 50), "delivered_p99_ms": ms(got["delivered"], 99)})
    summary = {m: {q: statistics.median(r[q] for r in rs) for q in rs[0]} for m, rs in rounds.items()}
    return {"messages": a.messages, "interval_s": a.interval, "event_loop": a.event_loop,
            "rounds_count": a.rounds, "summary": summary, "rounds": rounds,
            "ratio_durable_over_bare_p50": summary["durable"]["delivered_p50_ms"] / summary["bare"]["delivered_p50_ms"],
            "ratio_durable_over_memory_p50": (summary["durable"]["delivered_p50_ms"]
                                              / summary["memory"]["delivered_p50_ms"])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=500, help="messages per round and mode")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--interval", type=float, default=0.02, help="seconds between messages")
    ap.add_argument("--event-loop", choices=EVENT_LOOPS, default="uvloop")
    ap.add_argument("--quick", action="store_true", help="one round of 50 messages per mode (a smoke run)")
    a = ap.parse_args()
    if a.quick:
        a.messages, a.rounds = 50, 1
    res = run_on(measure(a), a.event_loop)
    path = write_result("accept_latency_quick" if a.quick else "accept_latency", res)
    s = res["summary"]
    print(f"accept_latency: a local message's round trip (send to delivery), p50, durable/bare "
          f"{res['ratio_durable_over_bare_p50']:.2f}, durable/memory {res['ratio_durable_over_memory_p50']:.2f} "
          f"(median of {a.rounds} rounds of {a.messages}, one every {a.interval * 1000:.0f} ms, {a.event_loop})")
    names = {"bare": "bare echo (baseline)", "memory": "RCM, no log", "durable": "RCM, durable"}
    for m in MODES:
        r = s[m]
        extra = f"; the disk's own fdatasync p50 {r['disk_sync_ms']:.2f} ms" if "disk_sync_ms" in r else ""
        print(f"  {names[m]:22} delivered p50 {r['delivered_p50_ms']:.3f} ms  p99 {r['delivered_p99_ms']:.3f} ms"
              f"  (accepted p50 {r['accepted_p50_ms']:.3f} / p99 {r['accepted_p99_ms']:.3f}){extra}")
    print(f"  -> {path}")


if __name__ == "__main__":
    main()
