"""IGO delivery latency: 4 sites, 2 messages/s each, 50 ms one-way delay on every link.

Latency of a delivery = delivery time at a site - send time at the origin (all
processes share this machine's clock). Target: p50 <= 2 x one-way delay + 20 ms.

    .venv/bin/python bench/rcm_latency.py [--duration 30] [--delay 0.05] [--ordering lamport]
"""
from __future__ import annotations

import argparse
import asyncio
import random
import struct
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import mission, summary, write_result  # noqa: E402
from faultinject.shaping import Shape  # noqa: E402
from rcm.client import Delivery  # noqa: E402

SITES = ["A", "B", "C", "D"]


async def run(duration: float, delay: float, rate: float, ordering: str) -> dict:
    latencies: list[float] = []
    own: list[float] = []
    late = 0
    async with mission(SITES, rcm={"ordering": ordering}, proxies=True,
                       shape=Shape(delay=delay)) as m:
        clients = m["clients"]
        stop_at = time.time() + duration + 2.0

        async def reader(site: str) -> None:
            nonlocal late
            async for ev in clients[site].events():
                if isinstance(ev, Delivery):
                    now = time.time()
                    sent = struct.unpack_from("!d", ev.payload)[0]
                    if sent > 0:
                        latencies.append(now - sent)
                        if ev.origin == site:
                            own.append(now - sent)
                        late += ev.late

        async def sender(site: str, rng: random.Random) -> None:
            await asyncio.sleep(rng.uniform(0, 1 / rate))
            period = 1 / rate
            nxt = time.time()
            while time.time() < stop_at - 2.0:
                payload = struct.pack("!d", time.time()).ljust(100, b".")
                await clients[site].send(payload)
                nxt += period
                await asyncio.sleep(max(0.0, nxt - time.time()))

        readers = [asyncio.create_task(reader(s)) for s in SITES]
        rng = random.Random(7)
        await asyncio.gather(*(sender(s, random.Random(rng.random())) for s in SITES))
        await asyncio.sleep(2.0)
        for t in readers:
            t.cancel()
    s = summary(latencies)
    return {"sites": len(SITES), "rate_per_site": rate, "one_way_delay_s": delay, "ordering": ordering,
            "duration_s": duration, "latency_s": s, "own_message_latency_s": summary(own),
            "late": late, "target_p50_s": 2 * delay + 0.020, "meets_target": s["p50"] <= 2 * delay + 0.020}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=30.0)
    ap.add_argument("--delay", type=float, default=0.05)
    ap.add_argument("--rate", type=float, default=2.0, help="messages/s per site")
    ap.add_argument("--ordering", default="lamport")
    a = ap.parse_args()
    r = asyncio.run(run(a.duration, a.delay, a.rate, a.ordering))
    path = write_result("rcm_latency" if a.ordering == "lamport" else f"rcm_latency_{a.ordering}", r)
    lat = r["latency_s"]
    print(f"rcm_latency: {a.ordering} 4 sites x {a.rate:g} msg/s, {a.delay*1000:.0f} ms one-way: "
          f"p50 {lat['p50']*1000:.1f} ms, p99 {lat['p99']*1000:.1f} ms over {lat['n']} deliveries "
          f"(target p50 <= {r['target_p50_s']*1000:.0f} ms: {'met' if r['meets_target'] else 'MISSED'}) -> {path}")


if __name__ == "__main__":
    main()
