"""Relaying (issue 17): the demo's four sites, direct links against relaying, same schedule, same run.

ground1, ground2 (ground, 10 ms between them) and awacs, jstars (air: every link
of an aircraft 120 ms one way, 50 ms jitter, 256 kbit/s), a link proxy on every
directed pair. The demo's outage schedule: awacs-ground2, ground1-jstars and
awacs-jstars 30 s up / 10 s down (reset), so every site always reaches every
other through the links that stay up. Every site sends 2 messages/s of 200
bytes to all. The mission is run twice in one invocation, with ``routing =
"direct"`` (the paper) and ``routing = "relay"``, the paper's timeouts both times.

Figures per run: delivery latency (delivery at the destination - send at the
origin) p50/p95 for the pairs whose direct link flaps (split by whether that
link was up at send time); the share of deliveries flagged late; the most
deliveries out of place at one site (not in the longest run of increasing
order keys); inter-site bytes per message (every byte through the proxies /
messages sent) and where they go (the sites' ``wire`` stats per frame kind,
``bench/_wire.py``); link-state bytes per site per minute. Targets with relay: p95
<= 1 s for the flapping pairs (a relay path is always up here), late share
< 1%, bytes per message <= 1.15 x direct. The summary leads with the ratio of
the two runs' p95 (direct / relay).

    .venv/bin/python bench/relay.py [--duration 160] [--rate 2] [--size 200]
    .venv/bin/python bench/relay.py --quick       # 7 s per run, 3 s up / 1.5 s down (a smoke run)
    .venv/bin/python bench/relay.py --sim         # both runs on the virtual clock, ~5 s (--quick too)

``--sim`` says where the bytes go, exactly: every write compressed as the
link codec does, counted by its first frame's kind (``run_sim``).
"""
from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import percentile, write_result  # noqa: E402
from bench._wire import composition, composition_line, wire_diff, wire_stats  # noqa: E402
from faultinject.checkers.history import History, LinkTimeline  # noqa: E402
from faultinject.links import LinkSet  # noqa: E402
from faultinject.metrics import path_metrics  # noqa: E402
from faultinject.missions import write_mission  # noqa: E402
from faultinject.procs import LocalRcm, wait_clients_connected  # noqa: E402
from faultinject.runner import link_events  # noqa: E402
from faultinject.schedule import periodic  # noqa: E402
from faultinject.shaping import LinkMode, Shape  # noqa: E402
from rcm.client import Delivery, RcmClient, socket_path  # noqa: E402

SITES = ["ground1", "ground2", "awacs", "jstars"]
AIR = {"awacs", "jstars"}
OUTAGE_PAIRS = [("awacs", "ground2"), ("ground1", "jstars"), ("awacs", "jstars")]
PAPER_RCM = {"heartbeat_timeout": 1.0, "liveness_timeout": 5.0, "silence_timeout": 10.0,
             "suspect_timeout": 60.0, "reconnect_period": 3.0, "ordering": "lamport", "p2p": "robust"}
GROUND = Shape(delay=0.01)
AIR_LINK = Shape(delay=0.12, jitter=0.05, bandwidth_bps=256_000)


def link_bytes(links: LinkSet) -> int:
    return sum(p.stats().forward.bytes_in + p.stats().reverse.bytes_in for p in links.proxies.values())


async def one_run(routing: str, duration: float, up: float, down: float, rate: float, size: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="rcm-relay-") as d:
        mp = write_mission(Path(d) / "mission.toml", "relay", SITES, rcm={**PAPER_RCM, "routing": routing},
                           proxies=True)
        rcm = LocalRcm(mp, log_level="warning")
        links = LinkSet(rcm.mission)
        for a in SITES:
            for b in SITES:
                if a != b:
                    links.set_shape(a, b, AIR_LINK if {a, b} & AIR else GROUND)
        await links.start()
        clients: dict[str, RcmClient] = {}
        readers: list[asyncio.Task[None]] = []
        records: list[dict[str, Any]] = []
        try:
            await asyncio.to_thread(rcm.start_all)
            clients = {s: await RcmClient.connect(socket_path(rcm.mission, s), name="bench") for s in SITES}
            await wait_clients_connected(clients, 60.0)
            await asyncio.sleep(2.0)                  # past the handshakes and the link-state exchange

            async def read(site: str) -> None:
                async for ev in clients[site].events():
                    if isinstance(ev, Delivery):
                        records.append({"kind": "deliver", "site": site, "at": time.time(), "msg_id": ev.msg_id,
                                        "origin": ev.origin, "seq": ev.seq, "order": ev.order, "late": ev.late})

            readers = [asyncio.create_task(read(s)) for s in SITES]
            t0 = time.time()
            bytes0 = link_bytes(links)
            wire0 = await wire_stats(clients)
            schedule = links.start_schedule(periodic(OUTAGE_PAIRS, up=up, down=down, until=duration))
            sent = 0

            async def sender(site: str, offset: float) -> None:
                nonlocal sent
                await asyncio.sleep(offset)
                nxt = time.time()
                while time.time() < t0 + duration:
                    at = time.time()
                    acc = await clients[site].send(f"{site} {at:.6f} ".encode().ljust(size, b"."))
                    records.append({"kind": "send", "site": site, "at": at, "msg_id": acc.msg_id,
                                    "origin": site, "seq": acc.seq})
                    sent += 1
                    nxt += 1 / rate
                    await asyncio.sleep(max(0.0, nxt - time.time()))

            await asyncio.gather(*(sender(s, i / (rate * len(SITES))) for i, s in enumerate(SITES)))
            await schedule
            await asyncio.sleep(max(down, 2.0) + 3.0)  # the last copies, announcements and acks
            used = link_bytes(links) - bytes0
            wired = wire_diff(await wire_stats(clients), wire0)
            stats = {s: await clients[s].stats() for s in SITES}
            wall = time.time() - t0
        finally:
            for t in readers:
                t.cancel()
            for c in clients.values():
                await c.close()
            await asyncio.to_thread(rcm.stop_all)
            await links.close()
        h = History(records, SITES, end=time.time())
        lt = LinkTimeline(link_events(links), SITES)
        paths = path_metrics(h, lt, OUTAGE_PAIRS, t0, t0 + duration)
        received = {s: len(h.deliveries.get(s, [])) for s in SITES}
        advert = sum(st.get("advert_bytes", 0) for st in stats.values())
        return {"routing": routing, "messages": sent, "deliveries": received, "link_bytes": used,
                "bytes_per_message": used / sent if sent else None, "paths": paths,
                "link_state_bytes_per_site_per_minute": advert / len(SITES) / (wall / 60.0),
                "relay_forwarded": sum(st.get("relay_forwarded", 0) for st in stats.values()),
                "composition": composition(wired, used, sent)}


def run_sim(routing: str, duration: float, up: float, down: float, rate: float, size: int) -> dict[str, Any]:
    """The same mission on the virtual clock (``--sim``): the real sans-IO stacks, each link's one-way delay
    (no jitter, no bandwidth limit: the load is a few percent of the air links' 256 kbit/s), the same outage
    schedule and traffic; every write compressed as the link codec does (``bench/idle_link.Meter``). Exact,
    and it says which writes the bytes are in: per message, by the kind of each write's first frame."""
    from bench.idle_link import CutNet
    from contracts.mission import parse_rcm_settings

    delays = {(a, b): (AIR_LINK if {a, b} & AIR else GROUND).delay for a in SITES for b in SITES if a != b}
    net = CutNet(parse_rcm_settings({**PAPER_RCM, "routing": routing}), GROUND.delay, 0, sites=SITES,
                 delays=delays, codec=True)
    t0 = net.settled()
    sent = 0
    for i, site in enumerate(SITES):
        t = t0 + i / (rate * len(SITES))
        while t < t0 + duration:
            net._at(t, lambda site=site: net.send(site, f"{site} {net.now:.6f} ".encode().ljust(size, b".")))
            sent += 1
            t += 1 / rate
    for action in periodic(OUTAGE_PAIRS, up=up, down=down, until=duration).actions:
        for a, b in action.pairs:
            net._at(t0 + action.at, net.outage, a, b, action.mode is not LinkMode.UP)
    net.run(t0 + duration + max(down, 2.0) + 3.0)
    m = net.meter
    return {"routing": routing, "messages": sent, "copies_delivered": len(net.latencies),
            "copies": sent * (len(SITES) - 1), "bytes_per_message": sum(m.coded.values()) / sent,
            "frame_bytes_per_message": sum(m.bytes.values()) / sent,
            "writes_per_message": sum(m.packets.values()) / sent,
            "latency_p95_s": percentile(net.latencies, 95),
            "writes": {k: {"bytes": m.coded[k] / sent, "writes": m.packets[k] / sent}
                       for k in sorted(m.coded, key=lambda k: -m.coded[k])},
            "frames": {k: m.bytes[k] / sent for k in sorted(m.bytes, key=lambda k: -m.bytes[k])}}


def main_sim(a: argparse.Namespace, up: float, down: float) -> None:
    d, rl = (run_sim(r, a.duration, up, down, a.rate, a.size) for r in ("direct", "relay"))
    ratio = rl["bytes_per_message"] / d["bytes_per_message"]
    path = write_result("relay_sim_quick" if a.quick else "relay_sim",
                        {"direct": d, "relay": rl, "relay_bytes_over_direct": ratio,
                         "relay_frame_bytes_over_direct": rl["frame_bytes_per_message"] / d["frame_bytes_per_message"]})
    print(f"relay --sim: bytes/message relay/direct {ratio:.2f} as compressed "
          f"(direct {d['bytes_per_message']:.1f} / relay {rl['bytes_per_message']:.1f} B), "
          f"{rl['frame_bytes_per_message'] / d['frame_bytes_per_message']:.3f} as the frames are written "
          f"({d['frame_bytes_per_message']:.0f} / {rl['frame_bytes_per_message']:.0f} B); writes/message "
          f"{d['writes_per_message']:.2f} / {rl['writes_per_message']:.2f}; flapping and steady pairs' p95 "
          f"{d['latency_p95_s']:.2f} / {rl['latency_p95_s']:.2f} s; delivered {d['copies_delivered']}/{d['copies']} "
          f"/ {rl['copies_delivered']}/{rl['copies']} copies -> {path}")
    for r in (d, rl):
        kinds = ", ".join(f"{k} {v['bytes']:.1f} B / {v['writes']:.2f} w" for k, v in r["writes"].items()
                          if v["bytes"] >= 0.05)
        print(f"  {r['routing']:<6} compressed, by each write's first frame: {kinds}")


def fmt(x: Any, spec: str = ".2f") -> str:
    return "-" if x is None else format(x, spec)


async def run(duration: float, up: float, down: float, rate: float, size: int) -> dict[str, Any]:
    direct = await one_run("direct", duration, up, down, rate, size)
    relay = await one_run("relay", duration, up, down, rate, size)
    rp95, dp95 = relay["paths"]["flapping_all"]["p95"], direct["paths"]["flapping_all"]["p95"]
    overhead = relay["bytes_per_message"] / direct["bytes_per_message"]
    late = relay["paths"]["late_share"] or 0.0
    return {"sites": SITES, "outage_pairs": OUTAGE_PAIRS, "duration_s": duration, "up_s": up, "down_s": down,
            "rate_per_site": rate, "payload_bytes": size, "direct": direct, "relay": relay,
            "ratio_p95_direct_over_relay": dp95 / rp95 if rp95 and dp95 else None,
            "relay_bytes_over_direct": overhead,
            "relay_frame_bytes_over_direct": relay["composition"]["rcm_frames"] / direct["composition"]["rcm_frames"],
            "targets": {"relay_p95_le_1s": rp95 is not None and rp95 <= 1.0, "relay_late_lt_1pct": late < 0.01,
                        "bytes_le_115pct": overhead <= 1.15}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=160.0, help="seconds of traffic per run (4 outage cycles)")
    ap.add_argument("--rate", type=float, default=2.0, help="messages per second per site")
    ap.add_argument("--size", type=int, default=200, help="payload bytes")
    ap.add_argument("--quick", action="store_true", help="7 s per run, 3 s up / 1.5 s down (a smoke run)")
    ap.add_argument("--sim", action="store_true", help="the same runs on the virtual clock, bytes as compressed by "
                                                       "each write's first frame (~5 s, exact)")
    a = ap.parse_args()
    up, down = (3.0, 1.5) if a.quick else (30.0, 10.0)
    if a.quick:
        a.duration = 7.0
    if a.sim:
        main_sim(a, up, down)
        return
    r = asyncio.run(run(a.duration, up, down, a.rate, a.size))
    path = write_result("relay_quick" if a.quick else "relay", r)
    d, rl = r["direct"], r["relay"]
    print(f"relay: flapping pairs p95 direct/relay {fmt(r['ratio_p95_direct_over_relay'], '.1f')}x; "
          f"p50/p95 direct {fmt(d['paths']['flapping_all']['p50'])}/{fmt(d['paths']['flapping_all']['p95'])} s, "
          f"relay {fmt(rl['paths']['flapping_all']['p50'])}/{fmt(rl['paths']['flapping_all']['p95'])} s; "
          f"late {100 * (d['paths']['late_share'] or 0):.1f}% / {100 * (rl['paths']['late_share'] or 0):.1f}%; "
          f"out of place (max at a site) {d['paths']['out_of_place_max']} / {rl['paths']['out_of_place_max']}; "
          f"bytes/message {d['bytes_per_message']:.0f} / {rl['bytes_per_message']:.0f} "
          f"({100 * (r['relay_bytes_over_direct'] - 1):+.1f}%; frames as written "
          f"{100 * (r['relay_frame_bytes_over_direct'] - 1):+.1f}%); link-state "
          f"{rl['link_state_bytes_per_site_per_minute']:.0f} B/site/min; targets "
          f"{'met' if all(r['targets'].values()) else 'MISSED ' + str(r['targets'])} -> {path}")
    for mode in (d, rl):
        print(composition_line(f"relay[{mode['routing']}] per message", mode["composition"]))


if __name__ == "__main__":
    main()
