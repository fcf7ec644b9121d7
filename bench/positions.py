"""Positions over slow, broken links: RCM's latest-wins class against ordinary messages (issue 39).

What: the demo's four sites (ground1, ground2, awacs, jstars: ``deploy.demo``), real RCM
servers (``python -m rcm``, ``faultinject.procs``) behind faultinject link proxies on every
directed link, each shaped to 56 kbit/s with 50 ms one way, and every site pacing its writes
to every peer at the same 56 kbit/s (``[sites.X.rate]``); the demo's ``[rcm]`` table (the
paper's timeouts, lamport ordering, robust channels, relaying) and its outage schedule: the
awacs-ground2, ground1-jstars and awacs-jstars links 30 s up / 10 s down, here as a fade
(``blackhole``, bytes held as TCP would retransmit them, as ``bench/precedence.py`` does; the
demo resets them instead, ``--reset`` does that). Every site always reaches every other
through the links that stay up. 20 units, five per site, each report where they are every
2 s (a moving position: ``chat_server.positions.Report``, encoded as the chat server encodes
it, ``positions.encode``, 36 bytes; reports staggered over the 2 s).

How: two modes in one invocation, on two missions that share nothing but the machine, run at
once (as precedence.py does; ``--sequential`` runs one after the other: the load is light,
ten reports a second per mission, and the two at once leave this 2-core machine mostly idle):

* latest wins: ``RcmClient.publish(key=unit, payload, expires_at=now + 600)``
  (docs/rcm.md, "Latest wins"), received as ``Latest`` events;
* baseline: the same payload as an ordinary message, ``RcmClient.send(payload)`` (ROUTINE, to
  every site: numbered, ordered, acknowledged, resent, repaired), received as deliveries.

Measured, per mode, over the measured period (``--duration``, after the sites connected):

* bytes per site per minute on the inter-site links: from RCM's own counters (``stats()``, the
  ``bytes_out`` of each peer: every byte a site's RCM wrote to its peers, frames, acks,
  heartbeats, link-state, handshakes), per site and their mean. The link proxies' byte counters
  (``proxy_bytes_in`` in the JSON) read 30-50% less than both ends' RCM counters, by an amount
  that varies between identical runs (the RCM counts match the frames written: a LATEST frame
  of a position is 73 bytes); until that is explained they are kept only beside them;
* position age: every second, at every site, for each unit of another site, now minus the
  ``at`` of the newest report of that unit the site's client has received (a unit not heard yet
  counts from the start of the measured period); p50, p95 and max over all the samples. A unit
  reports every 2 s, so even a perfect network shows ages spread over 0..2 s (p50 ~1 s, p95
  ~1.9 s): that is the floor. A site's own units are not counted (their age is local).

The first line printed leads with the ratios (baseline / latest wins) of bytes per site per
minute and of p95 age; then the absolute figures of each mode. Results go to
``bench/results/positions.json`` (``positions_quick.json`` for ``--quick``).

    .venv/bin/python bench/positions.py              # 160 s measured per mode, at once (~3 min)
    .venv/bin/python bench/positions.py --quick      # 8 s, 3 s up / 1.5 s down (a smoke run, ~20 s)
    .venv/bin/python bench/positions.py --duration 300 --sequential
    .venv/bin/python bench/positions.py --period 0.25 --duration 80    # 8x the reports: links near full
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import summary, write_result  # noqa: E402
from chat_server import positions  # noqa: E402
from deploy.demo import OUTAGE_PAIRS, PAPER_RCM  # noqa: E402
from deploy.demo import SITES as DEMO_SITES  # noqa: E402
from faultinject.links import LinkSet  # noqa: E402
from faultinject.missions import write_mission  # noqa: E402
from faultinject.procs import LocalRcm, wait_clients_connected  # noqa: E402
from faultinject.schedule import periodic  # noqa: E402
from faultinject.shaping import BlackholePolicy, LinkMode, Shape  # noqa: E402
from rcm.client import Delivery, Latest, RcmClient, RcmError, socket_path  # noqa: E402

SITES = list(DEMO_SITES)
RATE_BPS = 56_000
DELAY = 0.05
UNITS = 20
PERIOD = 2.0               # seconds between two reports of a unit
TTL = 600.0                # expires_at = now + TTL (the chat server's default position_max_age)
MODES = ("latest", "baseline")
M_PER_DEG = 111_320.0


@dataclass(frozen=True)
class Unit:
    """A unit at ``site`` moving in a straight line from (lat0, lon0) at ``speed`` m/s on ``course``."""

    name: str
    site: str
    lat0: float
    lon0: float
    course: float
    speed: float
    offset: float          # its first report, seconds after the measured period starts

    def report(self, now: float, t0: float) -> positions.Report:
        d = self.speed * (now - t0)
        lat = self.lat0 + d * math.cos(math.radians(self.course)) / M_PER_DEG
        lon = self.lon0 + d * math.sin(math.radians(self.course)) / (M_PER_DEG * math.cos(math.radians(self.lat0)))
        return positions.Report(site=self.site, unit=self.name, user=self.name, lat=lat, lon=lon, at=now,
                                expires_at=now + TTL, course=self.course, speed=self.speed)


def units(n: int = UNITS, period: float = PERIOD) -> list[Unit]:
    """``n`` units spread evenly over the sites, their reports staggered over one period."""
    out = []
    for i in range(n):
        site = SITES[i % len(SITES)]
        out.append(Unit(f"{site}-u{i // len(SITES) + 1}", site, 34.0 + 0.01 * i, -117.0 - 0.01 * i,
                        (37.0 * i) % 360, 3.0 + i % 7, i * period / n))
    return out


@dataclass
class SiteView:
    """One site's client: the ``at`` of the newest report of each unit it has received."""

    site: str
    client: RcmClient
    newest: dict[str, float] = field(default_factory=dict)
    received: int = 0
    task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.task = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for ev in self.client.events():
            if isinstance(ev, Latest):
                r = positions.decode(ev.origin, ev.key, ev.payload, ev.expires_at)
            elif isinstance(ev, Delivery):
                unit = msgpack.unpackb(ev.payload)[0]
                r = positions.decode(ev.origin, unit.encode(), ev.payload, TTL)
                await self.client.ack(ev.n)
            else:
                continue
            self.received += 1
            if r.at > self.newest.get(r.unit, 0.0):
                self.newest[r.unit] = r.at


def site_bytes(links: LinkSet) -> dict[str, int]:
    """Bytes each site has written onto its inter-site links (read by the proxies)."""
    out = dict.fromkeys(SITES, 0)
    for (a, b), p in links.proxies.items():
        st = p.stats()
        out[a] += st.forward.bytes_in          # a dialled b: forward is a -> b
        out[b] += st.reverse.bytes_in
    return out


def rcm_bytes_out(stats: dict[str, Any]) -> int:
    """Bytes a site's RCM has written to its peers since it started, by its own count (``stats()``)."""
    return sum(int(p.get("bytes_out", 0)) for p in stats["peers"].values())


async def run_mode(mode: str, duration: float, up: float, down: float, down_mode: LinkMode, n_units: int,
                   period: float) -> dict[str, Any]:
    """One mission, one mode: ``duration`` s of reports under the outage schedule; the figures."""
    rates = {s: {p: RATE_BPS for p in SITES if p != s} for s in SITES}
    with tempfile.TemporaryDirectory(prefix=f"rcm-pos-{mode}-") as d:
        mpath = write_mission(Path(d) / "mission.toml", f"pos-{mode}", SITES, rcm=PAPER_RCM, proxies=True,
                              rates=rates)
        servers = LocalRcm(mpath, log_level="warning")
        links = LinkSet(servers.mission, shape=Shape(delay=DELAY, bandwidth_bps=RATE_BPS),
                        policy=BlackholePolicy.BUFFER)
        await links.start()
        views: dict[str, SiteView] = {}
        try:
            await asyncio.to_thread(servers.start_all, 30.0)
            clients = {s: await RcmClient.connect(socket_path(servers.mission, s), name="bench") for s in SITES}
            views = {s: SiteView(s, c) for s, c in clients.items()}
            for v in views.values():
                v.start()
            await wait_clients_connected(clients, 60.0)
            await asyncio.sleep(1.0)                  # past the link-state exchange
            return await _measure(mode, views, links, duration, up, down, down_mode, n_units, period)
        finally:
            for v in views.values():
                if v.task is not None:
                    v.task.cancel()
                with contextlib.suppress(Exception):
                    await v.client.close()
            await asyncio.to_thread(servers.stop_all)
            await links.close()


async def _measure(mode: str, views: dict[str, SiteView], links: LinkSet, duration: float, up: float,
                   down: float, down_mode: LinkMode, n_units: int, period: float) -> dict[str, Any]:
    us = units(n_units, period)
    t0 = time.time()
    end = t0 + duration
    bytes0 = site_bytes(links)
    rcm0 = {s: rcm_bytes_out(await v.client.stats()) for s, v in views.items()}
    schedule = links.start_schedule(periodic(OUTAGE_PAIRS, up=up, down=down, until=duration, down_mode=down_mode))
    sent = refused = 0

    async def reporter(u: Unit) -> None:
        nonlocal sent, refused
        client = views[u.site].client
        nxt = t0 + u.offset
        while nxt < end:
            await asyncio.sleep(max(0.0, nxt - time.time()))
            now = time.time()
            r = u.report(now, t0)
            payload = positions.encode(r)
            try:
                if mode == "latest":
                    await client.publish(positions.key(u.name), payload, expires_at=r.expires_at)
                else:
                    await client.send(payload)
                sent += 1
            except RcmError:
                refused += 1
            nxt += period

    tasks = [asyncio.create_task(reporter(u)) for u in us]
    ages: dict[str, list[float]] = {s: [] for s in SITES}
    k = 1
    while t0 + k <= end:
        await asyncio.sleep(max(0.0, t0 + k - time.time()))
        now = time.time()
        for s, v in views.items():
            ages[s] += [now - v.newest.get(u.name, t0) for u in us if u.site != s]
        k += 1
    rcm1 = {s: rcm_bytes_out(await v.client.stats()) for s, v in views.items()}
    wall = time.time() - t0
    used = {s: rcm1[s] - rcm0[s] for s in SITES}
    proxied = {s: b - bytes0[s] for s, b in site_bytes(links).items()}
    await asyncio.gather(*tasks)
    schedule.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await schedule
    stats = {s: await v.client.stats() for s, v in views.items()}
    per_min = {s: b / (wall / 60.0) for s, b in used.items()}
    every = [a for xs in ages.values() for a in xs]
    return {"mode": mode, "reports_sent": sent, "refused": refused, "measured_s": wall,
            "bytes": used, "bytes_per_site_per_minute": per_min,
            "bytes_per_site_per_minute_mean": sum(per_min.values()) / len(per_min),
            "bytes_per_report": sum(used.values()) / sent if sent else None,
            "proxy_bytes_in": proxied,           # the link proxies' count of the same (see the module docstring)
            "age_s": summary(every), "age_s_per_site": {s: summary(xs) for s, xs in ages.items()},
            "received": {s: v.received for s, v in views.items()},
            "rcm_latest": {s: {k: v for k, v in st.items() if k.startswith("latest_")} for s, st in stats.items()}}


async def main_async(a: argparse.Namespace) -> dict[str, Any]:
    down_mode = LinkMode.RESET if a.reset else LinkMode.BLACKHOLE
    args = (a.duration, a.up, a.down, down_mode, a.units, a.period)
    if a.sequential:
        lw = await run_mode("latest", *args)
        base = await run_mode("baseline", *args)
    else:
        lw, base = await asyncio.gather(run_mode("latest", *args), run_mode("baseline", *args))
    bl, bb = lw["bytes_per_site_per_minute_mean"], base["bytes_per_site_per_minute_mean"]
    al, ab = lw["age_s"]["p95"], base["age_s"]["p95"]
    return {"ratio_bytes_baseline_over_latest": bb / bl if bl else None,
            "ratio_age_p95_baseline_over_latest": ab / al if al else None,
            "sites": SITES, "outage_pairs": OUTAGE_PAIRS, "up_s": a.up, "down_s": a.down, "down_mode": down_mode.value,
            "rate_bps": RATE_BPS, "delay_s": DELAY, "units": a.units, "period_s": a.period, "ttl_s": TTL,
            "duration_s": a.duration, "concurrent": not a.sequential, "bytes_source": "RCM stats (bytes_out to peers)",
            "latest": lw, "baseline": base}


def _fmt(x: float | None, spec: str = ".1f") -> str:
    return "-" if x is None else format(x, spec)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="8 s measured, 3 s up / 1.5 s down (a smoke run)")
    ap.add_argument("--duration", type=float, default=160.0, help="measured seconds per mode (4 outage cycles)")
    ap.add_argument("--up", type=float, default=30.0, help="seconds the flapping links stay up")
    ap.add_argument("--down", type=float, default=10.0, help="seconds the flapping links stay down")
    ap.add_argument("--reset", action="store_true", help="outages reset connections (the demo's) instead of a fade")
    ap.add_argument("--sequential", action="store_true", help="run the two modes one after the other")
    ap.add_argument("--units", type=int, default=UNITS, help="units, spread evenly over the four sites")
    ap.add_argument("--period", type=float, default=PERIOD, help="seconds between two reports of a unit")
    a = ap.parse_args()
    if a.quick:
        a.duration, a.up, a.down = 8.0, 3.0, 1.5
    t, load = time.monotonic(), os.getloadavg()[0]
    doc = asyncio.run(main_async(a))
    doc["wall_s"] = time.monotonic() - t
    doc["load_average_1min"] = {"start": load, "end": os.getloadavg()[0]}   # the machine is shared
    path = write_result("positions_quick" if a.quick else "positions", doc)
    lw, base = doc["latest"], doc["baseline"]
    print(f"positions: baseline/latest-wins bytes per site per minute "
          f"{_fmt(doc['ratio_bytes_baseline_over_latest'])}x, p95 position age "
          f"{_fmt(doc['ratio_age_p95_baseline_over_latest'])}x; {a.units} units every {a.period:g} s, 4 sites, "
          f"56 kbit/s links, {a.duration:g} s with {a.up:g} s up / {a.down:g} s down ({doc['down_mode']}) "
          f"-> {path}")
    for name, m in (("latest wins", lw), ("baseline   ", base)):
        age = m["age_s"]
        print(f"  {name}: {m['bytes_per_site_per_minute_mean'] / 1000:.1f} kB/site/min "
              f"({', '.join(f'{s} {b / 1000:.1f}' for s, b in m['bytes_per_site_per_minute'].items())}), "
              f"{_fmt(m['bytes_per_report'], '.0f')} B/report; age p50 {age['p50']:.2f} s p95 {age['p95']:.2f} s "
              f"max {age['max']:.2f} s ({age['n']} samples); {m['reports_sent']} reports, {m['refused']} refused")
    print(f"  {'concurrently' if doc['concurrent'] else 'one after the other'}, {doc['wall_s']:.0f} s; load average "
          f"{doc['load_average_1min']['start']:.1f} at the start, {doc['load_average_1min']['end']:.1f} at the end "
          f"({os.cpu_count()} cores, shared with other work)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
