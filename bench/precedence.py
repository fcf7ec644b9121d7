"""FLASH after an outage on a paced 56 kbit/s link: precedence lanes on, against lanes off (issue 19).

Two sites, A and B: real RCM servers (``faultinject.procs``) behind faultinject
link proxies shaped to 56 kbit/s each way, 50 ms one way, every site pacing
its writes to the peer at the same 56 kbit/s (``[sites.A.rate]``), the
paper's timeouts. Both sites post ROUTINE lines (100-byte payloads) at 2 msg/s
each. The link A-B fades (``blackhole``: nothing flows, the proxies hold the
bytes as TCP would retransmit them) for 60 s while both keep posting; the
moment it returns, each site sends one FLASH line. Measured, per mode:

* FLASH latency after link return: its delivery at the other site minus the
  moment the link came back (what an operator waits for the "medevac" line);
* ROUTINE drain time: link return to the delivery, at the other site, of the
  last ROUTINE line posted during the outage.

The two modes run at once, on two missions that share nothing but the
machine: ``lanes = true`` (the default: a paced channel writes FLASH and
IMMEDIATE first) and ``lanes = false`` (one FIFO queue per paced link, the
baseline); the first line printed is the ratio of their FLASH latencies (p95).

``--relay``: the slow link is one hop away. Three sites; A-C is cut for the
whole run, so A and C reach each other only through B; A-B is unpaced (50 ms,
no bandwidth cap), B-C is the 56 kbit/s link, paced both ways, and it is the
one that fades. A's channel to C must keep its backlog at A (paced to the
route's slowest link, a window in flight: ``rcm.channels.lanes.RouteLimit``), or A's
FLASH waits at B behind A's own routine lines, whatever the lanes.

``--flood`` (security finding 5): no outage. A and B are joined by a 32 kbit/s
link, paced both ways; both post ROUTINE lines at 2 msg/s while A also sends a
FLASH of 2 KB 20 times a second (ten times the link) for ``--flood-seconds``.
Measured at B, for A's ROUTINE lines posted during the flood: delivery latency
p50/p95/max, how many arrived before the flood ended plus ``--drain``, and the
longest gap between two of them (from the flood's start); and the share of the
link A's FLASH lines took. The flood goes to RCM directly (a chat server now
refuses it long before: ``[chat] urgent_per_minute``); what is measured is
RCM's urgent share, which has no switch: the "before" figures are this script
run at the commit before it (docs/experiments.md).

    .venv/bin/python bench/precedence.py             # 3 rounds of a 60 s outage (~5 min)
    .venv/bin/python bench/precedence.py --quick     # one 14 s outage (~35 s)
    .venv/bin/python bench/precedence.py --relay     # the slow link beyond a relay
    .venv/bin/python bench/precedence.py --flood     # a FLASH flood over 32 kbit/s (~75 s)
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import percentile, summary, write_result  # noqa: E402
from contracts.precedence import DEFAULT, Precedence  # noqa: E402
from faultinject.links import LinkSet  # noqa: E402
from faultinject.missions import write_mission  # noqa: E402
from faultinject.procs import LocalRcm, wait_clients_connected  # noqa: E402
from faultinject.shaping import BlackholePolicy, LinkMode, Shape  # noqa: E402
from rcm.client import RcmClient, socket_path  # noqa: E402

FLASH = Precedence.FLASH.value

RATE_BPS = 56_000


@dataclass(frozen=True)
class Topology:
    """Who posts, over which links, and which link fades."""

    sites: tuple[str, ...]
    rates: dict[str, dict[str, int]]     # [sites.X.rate]
    slow: tuple[str, str]                 # the 56 kbit/s link, which fades
    cut: tuple[str, str] | None           # down for the whole run
    other: dict[str, str]                 # poster -> the site its lines are timed at


DIRECT = Topology(("A", "B"), {"A": {"B": RATE_BPS}, "B": {"A": RATE_BPS}}, ("A", "B"), None,
                  {"A": "B", "B": "A"})
RELAY = Topology(("A", "B", "C"), {"B": {"C": RATE_BPS}, "C": {"B": RATE_BPS}}, ("B", "C"), ("A", "C"),
                 {"A": "C", "C": "A"})
PAPER = {"heartbeat_timeout": 1.0, "liveness_timeout": 5.0, "silence_timeout": 10.0,
         "suspect_timeout": 60.0, "reconnect_period": 3.0}


class Site:
    """One site's client: what it posted, and when each line arrived from the other site."""

    def __init__(self, name: str, client: RcmClient) -> None:
        self.name = name
        self.client = client
        self.arrived: dict[str, float] = {}     # text key -> arrival (time.monotonic)
        self.task = asyncio.create_task(self._read())

    async def _read(self) -> None:
        ev: Any     # read by duck typing (getattr), as any event kind
        async for ev in self.client.events():
            payload = getattr(ev, "payload", None)
            if payload is not None and getattr(ev, "origin", self.name) != self.name:
                self.arrived.setdefault(payload.split(b" ", 1)[0].decode(), time.monotonic())
                await self.client.ack(ev.n)

    async def post(self, key: str, precedence: str = DEFAULT, size: int = 100, noise: bool = False) -> None:
        """Send ``key`` padded to ``size`` bytes: with dots, or (``noise``) with bytes seeded by the key that
        link compression cannot shrink, so that a flood costs the link what it says."""
        head = f"{key} ".encode()
        pad = random.Random(key).randbytes(size - len(head)) if noise else b"." * (size - len(head))
        with contextlib.suppress(Exception):
            await self.client.send(head + pad, precedence=precedence)


async def run_mode(top: Topology, lanes: bool, rounds: int, outage: float, rate: float, drain: float,
                   delay: float) -> dict[str, Any]:
    """``rounds`` outages on one mission; per round the FLASH latencies and the drain time."""
    with tempfile.TemporaryDirectory(prefix="rcm-prec-bench-") as d:
        mpath = write_mission(Path(d) / "mission.toml", "prec", list(top.sites), rcm={**PAPER, "lanes": lanes},
                              proxies=True, rates=top.rates)
        servers = LocalRcm(mpath, log_level="warning")
        links = LinkSet(servers.mission, shape=Shape(delay=delay), policy=BlackholePolicy.BUFFER)
        for src, dst in (top.slow, top.slow[::-1]):
            links.set_shape(src, dst, Shape(delay=delay, bandwidth_bps=RATE_BPS))
        await links.start()
        if top.cut is not None:
            await links.cut(*top.cut)
        sites: dict[str, Site] = {}
        try:
            await asyncio.to_thread(servers.start_all, 30.0)
            clients = {s: await RcmClient.connect(socket_path(servers.mission, s), name="bench") for s in top.sites}
            sites = {s: Site(s, c) for s, c in clients.items()}
            await wait_clients_connected(clients, 30.0)
            out = []
            for r in range(rounds):
                out.append(await _round(top, sites, links, r, outage, rate, drain))
                await wait_clients_connected(clients, 90.0)
            return {"lanes": lanes, "rounds": out}
        finally:
            for s in sites.values():
                s.task.cancel()
                with contextlib.suppress(Exception):
                    await s.client.close()
            await asyncio.to_thread(servers.stop_all)
            await links.close()


async def _round(top: Topology, sites: dict[str, Site], links: LinkSet, r: int, outage: float, rate: float,
                 drain: float) -> dict[str, Any]:
    posters = list(top.other)
    other = top.other
    backlog: dict[str, list[str]] = {s: [] for s in posters}    # routine lines posted during the outage
    stop = asyncio.Event()

    async def chatter(s: str) -> None:
        i = 0
        t0 = time.monotonic()
        while not stop.is_set():
            i += 1
            key = f"{s}{r}-{i}"
            if outage_on.is_set():
                backlog[s].append(key)
            await sites[s].post(key)
            await asyncio.sleep(max(0.0, t0 + i / rate - time.monotonic()))

    outage_on = asyncio.Event()
    tasks = [asyncio.create_task(chatter(s)) for s in posters]
    await asyncio.sleep(2.0)
    await links.cut(*top.slow, mode=LinkMode.BLACKHOLE)
    outage_on.set()
    await asyncio.sleep(outage)
    outage_on.clear()
    await links.restore(*top.slow)
    back = time.monotonic()
    flashes = {s: f"{s}{r}-FLASH" for s in posters}
    await asyncio.gather(*(sites[s].post(flashes[s], FLASH) for s in posters))
    end = back + drain
    while time.monotonic() < end:
        if all(k in sites[other[s]].arrived for s in posters for k in [*backlog[s], flashes[s]]):
            break
        await asyncio.sleep(0.05)
    stop.set()
    await asyncio.gather(*tasks)
    flash_lat = [sites[other[s]].arrived[flashes[s]] - back for s in posters if flashes[s] in sites[other[s]].arrived]
    drains = [max(sites[other[s]].arrived[k] for k in backlog[s]) - back
              for s in posters if backlog[s] and all(k in sites[other[s]].arrived for k in backlog[s])]
    return {"flash_latency_s": flash_lat, "drain_s": max(drains) if len(drains) == len(posters) else None,
            "backlog": {s: len(v) for s, v in backlog.items()},
            "missing": sum(1 for s in posters for k in [*backlog[s], flashes[s]] if k not in sites[other[s]].arrived)}


FLOOD_RATE_BPS = 32_000
FLOOD_SIZE = 2048


async def run_flood(seconds: float, rate: float, drain: float, delay: float) -> dict[str, Any]:
    """A floods FLASH (2 KB, 20/s) over its 32 kbit/s link to B while A and B post ROUTINE at ``rate``."""
    top = Topology(("A", "B"), {"A": {"B": FLOOD_RATE_BPS}, "B": {"A": FLOOD_RATE_BPS}}, ("A", "B"), None,
                   {"A": "B", "B": "A"})
    with tempfile.TemporaryDirectory(prefix="rcm-flood-bench-") as d:
        mpath = write_mission(Path(d) / "mission.toml", "flood", list(top.sites), rcm=PAPER, proxies=True,
                              rates=top.rates)
        servers = LocalRcm(mpath, log_level="warning")
        links = LinkSet(servers.mission, shape=Shape(delay=delay, bandwidth_bps=FLOOD_RATE_BPS))
        await links.start()
        sites: dict[str, Site] = {}
        try:
            await asyncio.to_thread(servers.start_all, 30.0)
            clients = {s: await RcmClient.connect(socket_path(servers.mission, s), name="bench") for s in top.sites}
            sites = {s: Site(s, c) for s, c in clients.items()}
            await wait_clients_connected(clients, 30.0)
            return await _flood(sites, seconds, rate, drain)
        finally:
            for s in sites.values():
                s.task.cancel()
                with contextlib.suppress(Exception):
                    await s.client.close()
            await asyncio.to_thread(servers.stop_all)
            await links.close()


async def _flood(sites: dict[str, Site], seconds: float, rate: float, drain: float) -> dict[str, Any]:
    posted: dict[str, float] = {}           # A's ROUTINE lines posted during the flood -> when
    stop = asyncio.Event()
    flooding = asyncio.Event()

    async def chatter(s: str) -> None:
        i, t0 = 0, time.monotonic()
        while not stop.is_set():
            i += 1
            key = f"{s}-{i}"
            at = time.monotonic()
            if s == "A" and flooding.is_set():
                posted[key] = at
            await sites[s].post(key)
            await asyncio.sleep(max(0.0, t0 + i / rate - time.monotonic()))

    async def flood() -> int:
        n, t0 = 0, time.monotonic()
        while time.monotonic() < t0 + seconds:
            n += 1
            await sites["A"].post(f"F-{n}", FLASH, FLOOD_SIZE, noise=True)   # ten times the link, compressed too
            await asyncio.sleep(max(0.0, t0 + n / 20.0 - time.monotonic()))
        return n

    tasks = [asyncio.create_task(chatter(s)) for s in sites]
    await asyncio.sleep(2.0)
    start = time.monotonic()
    flooding.set()
    sent = await flood()
    flooding.clear()
    end = time.monotonic()
    arrived = sites["B"].arrived
    while time.monotonic() < end + drain and not all(k in arrived for k in posted):
        await asyncio.sleep(0.05)
    stop.set()
    await asyncio.gather(*tasks)
    got = sorted(arrived[k] for k in posted if k in arrived)
    lat = [arrived[k] - at for k, at in posted.items() if k in arrived]
    # From the flood's start, between arrivals; while some never came, until the end of the wait.
    ends = got if len(got) == len(posted) else [*got, end + drain]
    gaps = [b - a for a, b in zip([start, *ends], ends)]
    flashes = sorted(t for k, t in arrived.items() if k.startswith("F-"))
    during = [t for t in flashes if t <= end]
    return {"flood_s": seconds, "flash_sent": sent, "flash_at_b_during_flood": len(during),
            "flash_share_of_link": len(during) * FLOOD_SIZE * 8 / FLOOD_RATE_BPS / (end - start),
            "routine_posted": len(posted), "routine_arrived": len(lat), "routine_latency_s": summary(lat),
            "longest_routine_gap_s": max(gaps), "drain_s": drain}


def _figures(mode: dict[str, Any]) -> dict[str, Any]:
    lat = [x for rd in mode["rounds"] for x in rd["flash_latency_s"]]
    drains = [rd["drain_s"] for rd in mode["rounds"] if rd["drain_s"] is not None]
    return {"flash_latency_s": summary(lat), "drain_s": summary(drains),
            "missing": sum(rd["missing"] for rd in mode["rounds"]),
            "backlog_per_site": [rd["backlog"] for rd in mode["rounds"]]}


async def main_async(a: argparse.Namespace) -> dict[str, Any]:
    top = RELAY if a.relay else DIRECT
    on, off = await asyncio.gather(run_mode(top, True, a.rounds, a.outage, a.rate, a.drain, a.delay),
                                   run_mode(top, False, a.rounds, a.outage, a.rate, a.drain, a.delay))
    return {"topology": "relay" if a.relay else "direct", "sites": list(top.sites), "slow_link": list(top.slow),
            "cut": list(top.cut) if top.cut else None, "rate_bps": RATE_BPS, "outage_s": a.outage,
            "rate_per_site": a.rate,
            "delay_s": a.delay, "rounds": a.rounds, "lanes_on": {**_figures(on), **on},
            "lanes_off": {**_figures(off), **off}}


def flood_main(a: argparse.Namespace) -> int:
    doc = asyncio.run(run_flood(a.flood_seconds, a.rate, a.drain, a.delay))
    path = write_result("precedence_flood", doc)
    lat = doc["routine_latency_s"]
    print(f"precedence flood: A's ROUTINE at B during a {a.flood_seconds:g} s FLASH flood (2 KB x 20/s over "
          f"{FLOOD_RATE_BPS // 1000} kbit/s): {doc['routine_arrived']} of {doc['routine_posted']} arrived within "
          f"{a.drain:g} s after it, latency p50 {lat['p50']:.2f} s p95 {lat['p95']:.2f} s max {lat['max']:.2f} s; "
          f"longest ROUTINE gap {doc['longest_routine_gap_s']:.1f} s; FLASH took "
          f"{doc['flash_share_of_link']:.0%} of the link ({doc['flash_at_b_during_flood']} of {doc['flash_sent']}"
          f" at B during the flood) -> {path}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one 14 s outage (a smoke run)")
    ap.add_argument("--relay", action="store_true",
                    help="three sites: A reaches C only through B, and the slow link B-C fades")
    ap.add_argument("--rounds", type=int, default=3, help="outages per mode (two FLASH lines each)")
    ap.add_argument("--outage", type=float, default=60.0, help="seconds the slow link is down")
    ap.add_argument("--rate", type=float, default=2.0, help="ROUTINE messages/s per site")
    ap.add_argument("--delay", type=float, default=0.05, help="one-way delay of the link, seconds")
    ap.add_argument("--drain", type=float, default=45.0, help="longest wait for the backlog after the link returns")
    ap.add_argument("--flood", action="store_true",
                    help="no outage: A floods FLASH (2 KB x 20/s) over a 32 kbit/s link while A and B post ROUTINE")
    ap.add_argument("--flood-seconds", type=float, default=30.0, help="with --flood: how long the flood lasts")
    a = ap.parse_args()
    if a.flood:
        if a.drain == 45.0:
            a.drain = 30.0
        return flood_main(a)
    if a.quick:
        a.rounds, a.outage, a.drain = 1, 14.0, 20.0
    doc = asyncio.run(main_async(a))
    on, off = doc["lanes_on"], doc["lanes_off"]
    p95_on, p95_off = on["flash_latency_s"]["p95"], off["flash_latency_s"]["p95"]
    ratio = p95_off / p95_on if p95_on else float("nan")
    doc["ratio_flash_p95_off_over_on"] = ratio
    path = write_result("precedence" + ("_relay" if a.relay else "") + ("_quick" if a.quick else ""), doc)
    where = "beyond a relay, " if a.relay else ""
    print(f"precedence: {where}FLASH p95 after link return {p95_on:.2f} s with lanes, {p95_off:.2f} s without "
          f"({ratio:.1f}x); ROUTINE drain p50 {on['drain_s']['p50']:.1f} s with lanes, "
          f"{off['drain_s']['p50']:.1f} s without; {a.rounds} x {a.outage:g} s outage of "
          f"{'-'.join(doc['slow_link'])} at 56 kbit/s -> {path}")
    for name, m in (("lanes on ", on), ("lanes off", off)):
        lat = m["flash_latency_s"]
        print(f"  {name}: FLASH n={lat['n']} p50 {lat['p50']:.2f} s p95 {lat['p95']:.2f} s max {lat['max']:.2f} s; "
              f"drain p50 {m['drain_s']['p50']:.1f} s max {m['drain_s']['max']:.1f} s; "
              f"backlog {m['backlog_per_site']}; missing {m['missing']}")
    print(json.dumps({"flash_p95_on": round(p95_on, 3), "flash_p95_off": round(p95_off, 3),
                      "drain_p50_on": percentile([rd["drain_s"] for rd in on["rounds"] if rd["drain_s"]], 50)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
