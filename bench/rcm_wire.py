"""Inter-site bytes per 100-byte message at 8 messages/s in total (4 sites x 2/s).

Every byte crossing the link proxies is counted, both directions: data, clock
announcements, acknowledgements, heartbeats, framing. A multicast to the
three other sites puts three copies on the links, so the figure is reported
per message copy (bytes / (messages x 3)), the per-link cost that the paper's
56 kbps links care about, and per message sent. Target: 140 bytes per copy.

The summary leads with the ratio of the bytes on the links to the payload bytes
the copies carry (1.00 would be a free multicast; the payload is the baseline
every scheme must carry), then absolute figures.

    .venv/bin/python bench/rcm_wire.py [--duration 30]
    .venv/bin/python bench/rcm_wire.py --quick        # 1 s of traffic (a smoke run)
"""
from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import mission, write_result  # noqa: E402

SITES = ["A", "B", "C", "D"]


def link_bytes(links) -> int:
    total = 0
    for proxy in links.proxies.values():
        st = proxy.stats()
        total += st.forward.bytes_in + st.reverse.bytes_in
    return total


async def run(duration: float, rate: float, size: int, settle: float = 2.0) -> dict:
    async with mission(SITES, proxies=True) as m:
        clients, links = m["clients"], m["links"]
        await asyncio.sleep(settle)               # past the handshakes
        before = link_bytes(links)
        sent = 0
        stop_at = time.time() + duration

        async def sender(site: str, offset: float) -> None:
            nonlocal sent
            await asyncio.sleep(offset)
            nxt = time.time()
            while time.time() < stop_at:
                await clients[site].send(b"x" * size)
                sent += 1
                nxt += 1 / rate
                await asyncio.sleep(max(0.0, nxt - time.time()))

        rng = random.Random(3)
        await asyncio.gather(*(sender(s, rng.uniform(0, 1 / rate)) for s in SITES))
        await asyncio.sleep(min(1.0, settle))     # let the last acks and announcements cross
        used = link_bytes(links) - before
    copies = sent * (len(SITES) - 1)
    per_copy = used / copies
    return {"sites": len(SITES), "rate_per_site": rate, "payload_bytes": size, "duration_s": duration,
            "messages": sent, "link_bytes": used, "bytes_per_copy": per_copy,
            "bytes_per_message": used / sent, "overhead_per_copy": per_copy - size,
            "ratio_link_bytes_over_payload_bytes": per_copy / size,
            "target_bytes_per_copy": 140, "meets_target": per_copy <= 140}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=30.0)
    ap.add_argument("--rate", type=float, default=2.0)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--quick", action="store_true", help="1 s of traffic (a smoke run)")
    a = ap.parse_args()
    if a.quick:
        a.duration = 1.0
    r = asyncio.run(run(a.duration, a.rate, a.size, settle=0.5 if a.quick else 2.0))
    path = write_result("rcm_wire_quick" if a.quick else "rcm_wire", r)
    print(f"rcm_wire: link bytes/payload bytes ratio {r['ratio_link_bytes_over_payload_bytes']:.2f}; "
          f"{r['messages']} messages of {a.size} B at {a.rate * len(SITES):g} msg/s total: "
          f"{r['bytes_per_copy']:.1f} B per message copy on the links ({r['bytes_per_message']:.0f} B per "
          f"message multicast to 3 sites; target <= 140 per copy: "
          f"{'met' if r['meets_target'] else 'MISSED'}) -> {path}")


if __name__ == "__main__":
    main()
