"""A backlog across one paced 2.4 kbit/s link: how much of the link's rate carries it (issue 36).

Two sites, A and B: real RCM servers (no chat servers), the HF profile's
``[rcm]`` table (``deploy/examples/hf-4site.toml``: mutual TLS, link
compression), one link through faultinject proxies shaped to 2,400 bit/s
and 300 ms one way, both sites pacing their writes to it at 2,400 bit/s
(``[sites.X.rate]``). Once connected and the set-up's bytes have crossed,
A's client sends ``--messages`` chat
payloads of the compact layout (60-character lines, ``bench/rcm_wire.py``)
to B at once, and the bench waits until B's client has all of them.

The first line printed leads with the ratio of the payload delivered per
second to the link's rate (above 1 when compression makes room), then the
link's bytes from A to B during the drain against what that direction could
carry in that time (its utilisation: the pacer decides how much of the rate
is used; 1.00 would be all of it), the drain time, the payload bytes per
second delivered, and the link bytes per payload byte.
Before the pacer counted what crossed the link (``Pacing.adjust``), it was
charged the stack's uncompressed bytes, so compression left part of a paced
link idle; run this script at an earlier commit for the "before" figure.

    .venv/bin/python bench/paced_drain.py            # 80 messages (~30 s)
    .venv/bin/python bench/paced_drain.py --quick    # 12 messages (~12 s)
"""
from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import write_result  # noqa: E402
from bench.hf import HANDSHAKE, drained, hf_settings  # noqa: E402
from bench.rcm_wire import chat_payloads  # noqa: E402
from chat_server.launcher import wait_clients_connected  # noqa: E402
from deploy import certs  # noqa: E402
from faultinject.links import LinkSet  # noqa: E402
from faultinject.missions import write_mission  # noqa: E402
from faultinject.procs import LocalRcm  # noqa: E402
from faultinject.shaping import Shape  # noqa: E402
from rcm.client import RcmClient, socket_path  # noqa: E402

SITES = ["A", "B"]
RATE, DELAY = 2400, 0.3


def link_bytes(links: LinkSet, src: str = "A") -> int:
    """Bytes the proxies carried from ``src`` to the other site (a proxy's forward is its first site's way)."""
    return sum((st.forward if a == src else st.reverse).bytes_out
               for (a, _), p in links.proxies.items() for st in (p.stats(),))


async def run(messages: int, settle: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="rcm-drain-") as d:
        rcm = {"tls": True, "handshake_timeout": HANDSHAKE, **hf_settings()[0], "routing": "direct"}
        mp = write_mission(Path(d) / "mission.toml", "drain", SITES, rcm=rcm, proxies=True, data_dir="data",
                           rates={"A": {"B": RATE}, "B": {"A": RATE}})
        servers = LocalRcm(mp, log_level="warning")
        certs.create(servers.mission)
        links = LinkSet(servers.mission, shape=Shape(delay=DELAY, bandwidth_bps=RATE))
        clients: dict[str, RcmClient] = {}
        try:
            await links.start()
            await asyncio.to_thread(servers.start_all, 60.0)
            clients = {s: await RcmClient.connect(socket_path(servers.mission, s), name="drain") for s in SITES}
            await wait_clients_connected(clients, 120.0)
            await asyncio.sleep(settle)
            await drained(links, 60.0)        # the set-up's handshakes have crossed
            payloads = [p for p, _ in zip(chat_payloads(random.Random(1), "A"), range(messages))]
            got: list[float] = []

            async def receive() -> None:
                async for ev in clients["B"].events():
                    if getattr(ev, "origin", None) == "A" and getattr(ev, "payload", None) is not None:
                        got.append(time.monotonic())
                        if len(got) == messages:
                            return

            rx = asyncio.create_task(receive())
            b0 = link_bytes(links)
            t0 = time.monotonic()
            for p in payloads:
                await clients["A"].send(p, ["B"])
            await asyncio.wait_for(rx, 60.0 + messages * 2.0)
            seconds = got[-1] - t0
            carried = link_bytes(links) - b0
            payload = sum(map(len, payloads))
            st = await clients["A"].stats()
            return {"messages": messages, "payload_bytes": payload, "seconds": seconds, "link_bytes": carried,
                    "utilisation": carried * 8 / (seconds * RATE), "payload_bps": payload * 8 / seconds,
                    "link_bytes_per_payload_byte": carried / payload,
                    "paced_bytes_at_A": st["peers"]["B"].get("paced_bytes"),
                    "wire_at_A": st.get("wire")}
        finally:
            for c in clients.values():
                await c.close()
            await asyncio.to_thread(servers.stop_all)
            await links.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=80)
    ap.add_argument("--settle", type=float, default=5.0)
    ap.add_argument("--quick", action="store_true", help="12 messages")
    a = ap.parse_args()
    if a.quick:
        a.messages, a.settle = 12, 1.0
    r = asyncio.run(run(a.messages, a.settle))
    print(f"paced_drain: the backlog's payload crossed at {r['payload_bps'] / RATE:.2f}x the link's rate, the link "
          f"carrying {r['utilisation']:.2f} of its rate, while draining {r['messages']} chat messages "
          f"({r['seconds']:.1f} s at {RATE} bit/s: {r['payload_bps']:.0f} bit/s of payload, "
          f"{r['link_bytes_per_payload_byte']:.2f} link bytes per payload byte)")
    path = write_result("paced_drain" + ("_quick" if a.quick else ""), r)
    print(f"paced_drain: results in {path}")
    print(json.dumps({k: r[k] for k in ("utilisation", "seconds", "payload_bps")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
