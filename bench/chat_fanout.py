"""Chat fan-out benchmark: many WebSocket clients in one room, a steady message rate.

Scenario 1 (``single``): one site (one ``python -m rcm`` and one ``python -m
chat_server`` process), ``--clients`` users (default 1,000) in one room, one
more user posting ``--rate`` messages/s (default 50) for ``--duration`` s.
Fan-out latency of a message at a client = the time it arrives there minus
the time its author called ``say`` (one clock: every process is on this
machine). It covers the author's chat server, the RCM round trip that gives
the message its place in the global order, the journal, and the fan-out.
Targets: p99 at most 100 ms; chat server RSS at most 300 MB.

Scenario 2 (``sites``): ``--sites`` sites (default 4), ``--per-site`` users
at each (default 250), all in one room; an author at each site, the rate shared
between them; latency measured end to end at every site (other sites' messages
cross RCM, and each chat server encodes a frame once for all its clients).

``--event-loop`` runs every server on asyncio (default) or uvloop.

Baseline, in the same run and deployment: before the receivers connect, one
listener per site (a client process like the receivers') is alone in the room
with the authors, who post at the same rate; its latencies are measured the same
way. The summary leads with the ratio of the fan-out p50 to this baseline p50
(what fanning out to every client costs over a room of one), then absolute
figures.

Clients run in ``--workers`` processes (``bench/_fanout_clients.py``):
``chat_server.client.ChatClient`` (aiohttp) by default, or with ``--receiver
raw`` a minimal WebSocket frame scanner (same login and join) so that client
CPU does not hide server latency on a small machine. Authors always use
ChatClient.
Prints one summary line; writes JSON to bench/results/chat_fanout.json.

    .venv/bin/python bench/chat_fanout.py                 # both scenarios, defaults
    .venv/bin/python bench/chat_fanout.py --quick         # one site, 20 clients, 1 s (a smoke run)
"""
from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


from bench import _profile  # noqa: E402
from bench._common import RESULTS, receivers_malloc  # noqa: E402
from bench._fanout_clients import MARK, PASSWORD, ROOM, worker_main  # noqa: E402
from chat_server.accounts import hash_password  # noqa: E402
from chat_server.client import ChatClient  # noqa: E402
from chat_server.store import ChatStore  # noqa: E402
from contracts.mission import load_mission  # noqa: E402
from faultinject.missions import write_mission  # noqa: E402
from faultinject.procs import LocalChat, LocalRcm, wait_connected  # noqa: E402
from rcm.cli import EVENT_LOOP_ENV, EVENT_LOOPS  # noqa: E402

KDF_N = 1024            # cheap accounts: the benchmark measures fan-out, not logins


# --- the server side ---------------------------------------------------------------------------
class Deployment:
    def __init__(self, base: Path, name: str, sites: list[str], chat: dict[str, Any], loop: str) -> None:
        (base / name).mkdir()
        self.path = write_mission(base / name / "mission.toml", name, sites, chat=chat,
                                  rcm={"heartbeat_timeout": 0.5, "liveness_timeout": 2.0})
        self.mission = load_mission(self.path)
        self.sites = sites
        env = {EVENT_LOOP_ENV: loop}
        self.rcm = LocalRcm(self.path, log_level="warning", env=env)
        self.chat = LocalChat(self.path, log_level="warning", env=env)
        self.chat.grace = 30.0

    def add_users(self, site: str, users: list[str]) -> None:
        store = ChatStore(self.mission.site_dir(site) / "chat" / "chat.db")
        pw = hash_password(PASSWORD, KDF_N)
        store.begin()
        for u in users:
            store.add_user(u, pw)
        store.commit()
        store.close()

    def url(self, site: str) -> str:
        a = self.mission.site(site).chat
        return f"ws://{a.host}:{a.port}/ws"

    async def start(self) -> None:
        await asyncio.to_thread(self.rcm.start_all)
        for s in self.sites:
            self.chat.start(s)
        await wait_connected(self.mission, self.sites, 30.0)

    def rss_mb(self, site: str) -> float:
        return _rss_mb(self.chat.procs[site].pid)

    def rcm_rss_mb(self, site: str) -> float:
        return _rss_mb(self.rcm.procs[site].pid)

    def stop(self) -> dict[str, int | None]:
        """SIGTERM every process (idempotent); the chat servers' exit codes."""
        codes = self.chat.stop_all()
        self.rcm.stop_all()
        return codes


def _rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except FileNotFoundError:
        pass
    return float("nan")


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system) a process has used so far; NaN once it is gone."""
    used = _profile.cpu_seconds(pid)
    return float("nan") if used is None else used


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, max(0, int(round(p / 100 * len(s) + 0.5)) - 1))]


async def run_scenario(base: Path, name: str, per_site: int, sites: list[str], rate: float, duration: float,
                       workers: int, receiver: str, drain: float = 2.0, loop: str = "asyncio") -> dict[str, Any]:
    # Every client of this benchmark comes from 127.0.0.1: the per-address cap (256 by default, for a real
    # site) would refuse most of them, so the benchmark's mission sets the caps it needs.
    dep = Deployment(base, name, sites, chat={"kdf_n": KDF_N, "receipt_interval": 0.5, "presence_interval": 1.0,
                                              "max_connections": 10_000, "max_connections_per_address": 10_000},
                     loop=loop)
    for s in sites:
        dep.add_users(s, [f"u{s}{i}" for i in range(per_site)] + [f"author{s}", f"base{s}"])
    try:
        return await _measure(dep, per_site, sites, rate, duration, workers, receiver, drain)
    finally:
        dep.stop()          # also when a scenario fails: leave no server processes behind


async def _baseline(dep: Deployment, authors: list[ChatClient], sites: list[str], rate: float, count: int,
                    receiver: str, drain: float) -> list[float]:
    """A room of one listener per site, measured as the fan-out is (a client process of the same kind),
    the authors posting at the benchmark's rate; the first few messages warm the servers up, uncounted."""
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    p = ctx.Process(target=worker_main, args=([(s, dep.url(s), f"base{s}") for s in sites], child, 25, receiver),
                    daemon=True)
    with receivers_malloc():
        p.start()
    kind, _ = await asyncio.to_thread(parent.recv)
    assert kind == "ready"
    warm = max(3, count // 5)
    start = time.monotonic()
    acks = []
    for i in range(warm + count):
        await asyncio.sleep(max(0.0, start + i / rate - time.monotonic()))
        acks.append(asyncio.ensure_future(authors[i % len(authors)].say(ROOM, f"{MARK}{i} {time.time():.6f}")))
    await asyncio.gather(*acks, return_exceptions=True)
    await asyncio.sleep(drain)
    parent.send("stop")
    kind, res = await asyncio.to_thread(parent.recv)
    p.join(30)
    return [v for vs in res["latencies"].values() for v in vs[warm:]]      # each site's first few: warm-up


async def _measure(dep: Deployment, per_site: int, sites: list[str], rate: float, duration: float,
                   workers: int, receiver: str, drain: float = 2.0) -> dict[str, Any]:
    await dep.start()
    authors = [await ChatClient.connect(dep.url(s), f"author{s}", PASSWORD) for s in sites]
    for a in authors:
        await a.join(ROOM)
    baseline = await _baseline(dep, authors, sites, rate, max(10, int(rate * min(duration, 2.0))), receiver, drain)
    for a in authors:
        a.drain_events()
    targets = [(s, dep.url(s), f"u{s}{i}") for s in sites for i in range(per_site)]
    pipes, procs = [], []
    ctx = mp.get_context("spawn")
    t_connect = time.monotonic()
    for w in range(workers):
        parent, child = ctx.Pipe()
        p = ctx.Process(target=worker_main, args=(targets[w::workers], child, 25, receiver), daemon=True)
        with receivers_malloc():
            p.start()
        pipes.append(parent)
        procs.append(p)
    ready = 0
    for parent in pipes:
        kind, n = await asyncio.to_thread(parent.recv)
        assert kind == "ready"
        ready += n
    connect_s = time.monotonic() - t_connect
    rss_idle = {s: dep.rss_mb(s) for s in sites}
    # Post at a steady rate, round-robin over the sites' authors; never wait for one ack before the next.
    interval = 1.0 / rate
    total = int(rate * duration)
    acks: list[asyncio.Task[Any]] = []
    rss_peak = dict(rss_idle)
    pids = {**{f"chat {s}": dep.chat.procs[s].pid for s in sites}, **{f"rcm {s}": dep.rcm.procs[s].pid for s in sites},
            **{f"clients {i}": cast(int, p.pid) for i, p in enumerate(procs)}, "authors": os.getpid()}
    cpu0 = {k: _cpu_s(pid) for k, pid in pids.items()}
    start = time.monotonic()
    for i in range(total):
        due = start + i * interval
        delay = due - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        author = authors[i % len(authors)]
        acks.append(asyncio.ensure_future(author.say(ROOM, f"{MARK}{i} {time.time():.6f}")))
        if i % int(rate) == 0:
            for s in sites:
                rss_peak[s] = max(rss_peak[s], dep.rss_mb(s))
    results = await asyncio.gather(*acks, return_exceptions=True)
    failed_says = sum(1 for r in results if isinstance(r, BaseException))
    send_s = time.monotonic() - start
    await asyncio.sleep(drain)          # let the last messages arrive
    busy_s = time.monotonic() - start
    cpu_used = {k: _cpu_s(pid) - cpu0[k] for k, pid in pids.items()}
    cpu_pct = {k: round(100 * v / busy_s, 1) for k, v in cpu_used.items()}
    for s in sites:
        rss_peak[s] = max(rss_peak[s], dep.rss_mb(s))
    rcm_rss = {s: dep.rcm_rss_mb(s) for s in sites}
    lat: dict[str, list[float]] = {s: [] for s in sites}
    received = closed = 0
    reasons: set[str] = set()
    for parent in pipes:
        parent.send("stop")
    for parent in pipes:
        kind, res = await asyncio.to_thread(parent.recv)
        for s, values in res["latencies"].items():
            lat[s].extend(values)
        received += res["received"]
        closed += res["closed_by_server"]
        reasons.update(res["close_reasons"])
    for p in procs:
        p.join(30)
    for a in authors:
        await a.close()
    codes = dep.stop()
    everything = [v for vs in lat.values() for v in vs]
    expected = total * len(targets)
    ms: Callable[[float], float] = lambda v: round(v * 1000, 1)  # noqa: E731
    return {
        "sites": len(sites), "clients": len(targets), "receiver": receiver, "rate_per_s": rate, "duration_s": duration,
        "messages": total, "failed_says": failed_says, "send_seconds": round(send_s, 2),
        "deliveries_expected": expected, "deliveries_received": received,
        "delivery_ratio": round(received / expected, 5) if expected else None,
        "clients_closed_by_server": closed, "close_reasons": sorted(reasons),
        "connect_seconds": round(connect_s, 1),
        "latency_ms": {"p50": ms(pct(everything, 50)), "p90": ms(pct(everything, 90)),
                       "p99": ms(pct(everything, 99)), "max": ms(max(everything)) if everything else None,
                       "mean": ms(statistics.fmean(everything)) if everything else None},
        "latency_ms_by_site": {s: {"p50": ms(pct(v, 50)), "p99": ms(pct(v, 99))} for s, v in lat.items()},
        "baseline_latency_ms": {"n": len(baseline), "p50": ms(pct(baseline, 50)), "p99": ms(pct(baseline, 99))},
        "ratio_p50_fanout_over_baseline": (pct(everything, 50) / pct(baseline, 50)) if baseline and everything
        else None,
        "chat_rss_mb": {"idle": {s: round(v, 1) for s, v in rss_idle.items()},
                        "peak": {s: round(v, 1) for s, v in rss_peak.items()}},
        "rcm_rss_mb": {s: round(v, 1) for s, v in rcm_rss.items()},
        "chat_exit_codes": codes,
        "cpu_percent_posting_and_drain": cpu_pct,
        # Cost, independent of how much CPU the host had to spare: CPU time per message frame delivered.
        "cpu_us_per_delivered_frame": {
            name: round(1e6 * sum(v for k, v in cpu_used.items() if k.startswith(prefix)) / max(received, 1), 2)
            for name, prefix in (("chat_servers", "chat"), ("rcm_servers", "rcm"), ("clients", "clients"))},
        "load_average_1m": os.getloadavg()[0],
    }


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"bench": "chat_fanout", "host": {"cpus": os.cpu_count(), "python": platform.python_version(),
                                                          "platform": platform.platform(),
                                                          "load_average_1m_at_start": os.getloadavg()[0]},
                           "params": vars(args), "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    with tempfile.TemporaryDirectory(prefix="chat_fanout-") as tmp:
        base = Path(tmp)
        if args.scenario in ("single", "both"):
            out["single"] = await run_scenario(base, "fanout1", args.clients, ["A"], args.rate, args.duration,
                                               args.workers, args.receiver, args.drain, args.event_loop)
        if args.scenario in ("sites", "both"):
            names = [chr(ord("A") + i) for i in range(args.sites)]
            out["sites"] = await run_scenario(base, f"fanout{args.sites}", args.per_site, names, args.rate,
                                              args.duration, args.workers, args.receiver, args.drain,
                                              args.event_loop)
    return out


def summary_line(out: dict[str, Any]) -> str:
    parts = []
    load = f" (load avg {out['host']['load_average_1m_at_start']:.1f} on {out['host']['cpus']} CPUs)"
    ratios = []
    for key, label in (("single", "1 site"), ("sites", f"{out.get('sites', {}).get('sites')} sites")):
        if key in out and out[key]["ratio_p50_fanout_over_baseline"] is not None:
            ratios.append(f"{label} {out[key]['ratio_p50_fanout_over_baseline']:.2f} "
                          f"(baseline p50 {out[key]['baseline_latency_ms']['p50']} ms)")
    head = "fan-out/alone-in-the-room p50 ratio " + ", ".join(ratios) + "; " if ratios else ""
    if "single" in out:
        s = out["single"]
        parts.append(f"1 site x {s['clients']} clients @ {s['rate_per_s']:g} msg/s: p50 {s['latency_ms']['p50']} ms, "
                     f"p99 {s['latency_ms']['p99']} ms (target <= 100), chat RSS peak "
                     f"{max(s['chat_rss_mb']['peak'].values())} MB (target <= 300), delivered "
                     f"{s['delivery_ratio']:.2%}")
    if "sites" in out:
        s = out["sites"]
        parts.append(f"{s['sites']} sites x {s['clients'] // s['sites']} clients: p50 {s['latency_ms']['p50']} ms, "
                     f"p99 {s['latency_ms']['p99']} ms, delivered {s['delivery_ratio']:.2%}")
    return "chat_fanout: " + head + "; ".join(parts) + f", {out['params']['event_loop']}" + load


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scenario", choices=["single", "sites", "both"], default="both")
    p.add_argument("--clients", type=int, default=1000, help="clients at the one site of scenario single")
    p.add_argument("--sites", type=int, default=4, help="sites in scenario sites (default 4, at most 26)")
    p.add_argument("--per-site", type=int, default=250, help="clients per site in scenario sites (default 250)")
    p.add_argument("--event-loop", choices=EVENT_LOOPS, default="asyncio", help="the servers' event loop")
    p.add_argument("--rate", type=float, default=50.0, help="messages per second (all authors together)")
    p.add_argument("--duration", type=float, default=20.0, help="seconds of posting")
    p.add_argument("--workers", type=int, default=3, help="client processes")
    p.add_argument("--receiver", choices=["library", "raw"], default="library",
                   help="receiving clients: chat_server.client.ChatClient, or a minimal frame scanner")
    p.add_argument("--drain", type=float, default=2.0, help="seconds to wait for the last messages")
    p.add_argument("--quick", action="store_true",
                   help="smoke run: scenario single, 20 clients, 20 msg/s for 1 s, one client process")
    p.add_argument("--out", default=None, help="JSON results (default bench/results/chat_fanout[_quick].json)")
    args = p.parse_args()
    if not 2 <= args.sites <= 26:
        p.error("--sites: 2 to 26")
    if args.quick:
        args.scenario, args.clients, args.per_site, args.duration = "single", 20, 10, 1.0
        args.rate, args.workers, args.drain = 20.0, 1, 0.5
    if args.out is None:
        args.out = str(RESULTS / ("chat_fanout_quick.json" if args.quick else "chat_fanout.json"))
    out = asyncio.run(main_async(args))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(summary_line(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
