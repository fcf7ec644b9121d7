"""IGO delivery latency: 4 sites, 2 messages/s each, 50 ms one-way delay on every link.

Latency of a delivery = delivery time at a site - send time at the origin (all
processes share this machine's clock). Target: p50 <= 2 x one-way delay + 20 ms.

Baseline, in the same run: a bare link, i.e. timestamped lines at the same total
rate over one plain TCP connection through a link proxy with the same shaping.
The summary leads with the ratio of IGO's p50 latency to the bare link's (the
protocol's cost in one-way delays, about 2 by design), then absolute figures.

    .venv/bin/python bench/rcm_latency.py [--duration 30] [--delay 0.05] [--ordering lamport]
    .venv/bin/python bench/rcm_latency.py --quick       # 1 s of traffic (a smoke run)
"""
from __future__ import annotations

import argparse
import asyncio
import random
import struct
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import mission, summary, write_result  # noqa: E402
from faultinject.proxy import LinkProxy  # noqa: E402
from faultinject.shaping import Shape  # noqa: E402
from rcm.client import Delivery  # noqa: E402

SITES = ["A", "B", "C", "D"]


async def bare_link(duration: float, delay: float, rate: float) -> list[float]:
    """One-way latencies of timestamped lines through a link proxy shaped like the mission's links."""
    arrivals: list[float] = []

    async def sink(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while line := await reader.readline():
            arrivals.append(time.time() - float(line))
        writer.close()

    server = await asyncio.start_server(sink, "127.0.0.1", 0)
    proxy = LinkProxy(("127.0.0.1", 0), server.sockets[0].getsockname()[:2], forward=Shape(delay=delay))
    await proxy.start()
    try:
        _, writer = await asyncio.open_connection(*proxy.address)
        nxt, stop = time.time(), time.time() + duration
        while time.time() < stop:
            writer.write(f"{time.time():.6f}\n".encode())
            nxt += 1 / rate
            await asyncio.sleep(max(0.0, nxt - time.time()))
        await asyncio.sleep(delay + 0.5)
        writer.close()
    finally:
        await proxy.close()
        server.close()
    return arrivals


async def run(duration: float, delay: float, rate: float, ordering: str) -> dict[str, Any]:
    latencies: list[float] = []
    own: list[float] = []
    late = 0
    async with mission(SITES, rcm={"ordering": ordering}, proxies=True,
                       shape=Shape(delay=delay)) as m:
        clients = m["clients"]
        settle = min(2.0, max(0.5, duration))
        stop_at = time.time() + duration + settle

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
            while time.time() < stop_at - settle:
                payload = struct.pack("!d", time.time()).ljust(100, b".")
                await clients[site].send(payload)
                nxt += period
                await asyncio.sleep(max(0.0, nxt - time.time()))

        readers = [asyncio.create_task(reader(s)) for s in SITES]
        rng = random.Random(7)
        base = asyncio.create_task(bare_link(duration, delay, rate * len(SITES)))
        await asyncio.gather(*(sender(s, random.Random(rng.random())) for s in SITES))
        bare = await base
        await asyncio.sleep(min(2.0, max(0.5, duration)))
        for t in readers:
            t.cancel()
    s = summary(latencies)
    b = summary(bare)
    return {"sites": len(SITES), "rate_per_site": rate, "one_way_delay_s": delay, "ordering": ordering,
            "duration_s": duration, "latency_s": s, "own_message_latency_s": summary(own),
            "bare_link_latency_s": b, "ratio_p50_igo_over_bare_link": s["p50"] / b["p50"],
            "late": late, "target_p50_s": 2 * delay + 0.020, "meets_target": s["p50"] <= 2 * delay + 0.020}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=30.0)
    ap.add_argument("--delay", type=float, default=0.05)
    ap.add_argument("--rate", type=float, default=2.0, help="messages/s per site")
    ap.add_argument("--ordering", default="lamport")
    ap.add_argument("--quick", action="store_true", help="1 s of traffic (a smoke run)")
    a = ap.parse_args()
    if a.quick:
        a.duration = 1.0
    r = asyncio.run(run(a.duration, a.delay, a.rate, a.ordering))
    name = "rcm_latency" if a.ordering == "lamport" else f"rcm_latency_{a.ordering}"
    path = write_result(name + ("_quick" if a.quick else ""), r)
    lat, bare = r["latency_s"], r["bare_link_latency_s"]
    print(f"rcm_latency: IGO/bare-link p50 ratio {r['ratio_p50_igo_over_bare_link']:.2f} ({a.ordering}, "
          f"4 sites x {a.rate:g} msg/s, {a.delay*1000:.0f} ms one-way; bare link p50 {bare['p50']*1000:.1f} ms): "
          f"p50 {lat['p50']*1000:.1f} ms, p99 {lat['p99']*1000:.1f} ms over {lat['n']} deliveries "
          f"(target p50 <= {r['target_p50_s']*1000:.0f} ms: {'met' if r['meets_target'] else 'MISSED'}) -> {path}")


if __name__ == "__main__":
    main()
