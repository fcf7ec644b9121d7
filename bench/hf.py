"""The suite on 2.4 kbit/s HF links (issue 36): bytes, packets, reconnections and FLASH latency.

Four sites, A B C D, every pair linked directly: real RCM and chat server
processes, every inter-site link through faultinject proxies shaped to
2,400 bit/s with 300 ms one way, every site pacing its writes to each peer at
2,400 bit/s (``[sites.X.rate]``), mutual TLS with the mission CA, relay and
repair on (the product's defaults), the paper's timeouts. Two links, A-B and
C-D, follow the paper's schedule, 30 s up / 10 s down (``--up``/``--down``;
the connections are reset, so every restore is a TLS reconnection).

Phases: the mission settles (``--settle`` seconds, then until the proxies
hold no backlog of the set-up: TLS handshakes take seconds at this rate),
then ``--idle`` seconds with nobody speaking
(the idle cost of a link), then ``--traffic`` seconds in which one user per
site posts a 60-character line every 5 s (the sites staggered) and one FLASH
a minute goes out from a different site each time; then the links are healed
and the bench waits (``--drain``) until every line is shown at every site.

Modes (``--modes``; each a mission of its own, run one after the other: a
2.4 kbit/s link is far below what the machine notices):

* ``hf``: the ``[rcm]`` and ``[chat]`` tables of ``deploy/examples/hf-4site.toml``
  (read from that file: heartbeats every 5 s and the timeouts scaled with them,
  a 30 s handshake timeout, link compression, receipts batched over 15 s);
* ``paper``: the paper's timeouts (heartbeat 1 s) without link compression,
  the handshake timeout raised to 30 s as well (at the default 5 s no mutual
  TLS handshake completes at 2,400 bit/s, and the mode would measure nothing).

The first line printed is the ratio paper/hf of the bytes per message copy and
of the idle bytes per link per minute. Measured, per mode:

* application bytes per message copy on the links: every byte the proxies
  carried during the traffic phase (TLS records, RCM frames, chat payloads:
  what a radio's IP/TCP would carry, without its ~40 B per packet), minus the
  idle rate over the same time, divided by lines x 3 copies; and the gross
  figure with the idle cost left in;
* idle bytes and packets per link per minute (packets: the sender's writes as
  the proxy read them, an upper bound on TCP segments);
* TLS reconnection: restore of A-B or C-D to the link's TCP state
  ``TCP_Connected`` at both ends again (RCM stats, polled every 0.1 s);
* FLASH latency at the other sites (p50, p95), and routine lines' (their cost of
  lingering and of the announcement window), delivery (share of lines shown
  at every site), and the busiest link direction's utilisation (its bytes
  over the traffic phase against 2,400 bit/s);
* where the gross bytes per copy go (``composition``, the sites' ``wire``
  stats over the traffic phase, ``rcm.server.outbox``): the RCM frames per
  kind as the stack wrote them, what link compression took off, the TLS
  records' overhead, TLS handshakes (reconnections), and the writes
  (packets) per copy; ``unaccounted`` is what the proxies carried beyond what
  the sites wrote (negative: written but lost in a cut); and the same
  composition of the idle phase per link per minute (``idle_composition``).

The first line printed leads with the targets the issue sets: at most 80 B
per message copy, reconnection at most 3 s, FLASH p95 at most 3 s, 100%
delivered, utilisation under 80%.

    .venv/bin/python bench/hf.py                 # both modes: 60 s idle, 300 s traffic each (~15 min)
    .venv/bin/python bench/hf.py --quick         # the hf mode: 4 s idle, 12 s traffic, outages 6 s up / 2 s down
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import percentile, write_result  # noqa: E402
from bench._wire import composition, composition_line, wire_diff, wire_stats  # noqa: E402
from chat_server.client import ChatClient  # noqa: E402
from deploy import certs  # noqa: E402
from faultinject.links import LinkSet  # noqa: E402
from faultinject.missions import write_mission  # noqa: E402
from faultinject.procs import LocalChat, LocalRcm, wait_connected  # noqa: E402
from faultinject.shaping import LinkMode, Shape  # noqa: E402
from rcm.client import RcmClient, socket_path  # noqa: E402

SITES = ["A", "B", "C", "D"]
FLAPPING = [("A", "B"), ("C", "D")]
RATE = 2400                     # bit/s, each direction of each link
DELAY = 0.3                     # s one way
LINE_EVERY = 5.0                # s between one site's lines
FLASH_EVERY = 60.0              # s between FLASH lines (from a different site each time)
LINE = 60                       # characters a line
PASSWORD = "hf-bench-pw"
CHAT = {"kdf_n": 1024, "flash_role": ""}
HF_EXAMPLE = Path(__file__).resolve().parent.parent / "deploy" / "examples" / "hf-4site.toml"
PAPER = {"heartbeat_timeout": 1.0, "liveness_timeout": 5.0, "silence_timeout": 10.0, "suspect_timeout": 60.0,
         "reconnect_period": 3.0, "compression": "none"}


def hf_settings() -> tuple[dict[str, Any], dict[str, Any]]:
    """The HF example mission's ``[rcm]`` and ``[chat]`` tables (one home for the HF profile)."""
    import tomllib
    tables = tomllib.loads(HF_EXAMPLE.read_text())
    return dict(tables["rcm"]), dict(tables.get("chat", {}))


MODES: dict[str, Any] = {"paper": lambda: (PAPER, {}), "hf": hf_settings}
HANDSHAKE = 30.0                # s: a mutual TLS handshake does not fit the default 5 s at 2.4 kbit/s
TARGETS = {"bytes_per_copy": 80.0, "reconnect_s": 3.0, "flash_p95_s": 3.0, "utilisation": 0.8}


@dataclass
class Seen:
    """One site's user: when each line was shown."""

    at: dict[str, float] = field(default_factory=dict)


def line_text(site: str, i: int, flash: bool) -> str:
    head = f"{'FLASH ' if flash else ''}{site}-{i} "
    return (head + "position report and intentions follow, over.")[:LINE].ljust(LINE, ".")


def key_of(text: str) -> str | None:
    words = text.split(" ")
    w = words[1] if words and words[0] == "FLASH" and len(words) > 1 else words[0] if words else ""
    return w if "-" in w and w.split("-")[0] in SITES else None


class Counters:
    """Bytes and reads per directed link, from the proxies (both proxies of a pair carry its traffic)."""

    def __init__(self, links: LinkSet) -> None:
        self.links = links

    def take(self) -> dict[tuple[str, str], tuple[int, int]]:
        out: dict[tuple[str, str], tuple[int, int]] = {}
        for (a, b), p in self.links.proxies.items():
            st = p.stats()
            for src, dst, d in ((a, b, st.forward), (b, a, st.reverse)):
                n, k = out.get((src, dst), (0, 0))
                out[(src, dst)] = (n + d.bytes_out, k + d.chunks_in)
        return out

    @staticmethod
    def diff(after: dict[tuple[str, str], tuple[int, int]],
             before: dict[tuple[str, str], tuple[int, int]]) -> dict[tuple[str, str], tuple[int, int]]:
        return {k: (v[0] - before.get(k, (0, 0))[0], v[1] - before.get(k, (0, 0))[1]) for k, v in after.items()}


async def tcp_states(clients: dict[str, RcmClient]) -> dict[tuple[str, str], str]:
    out = {}
    for s, c in clients.items():
        st = await c.stats()
        for peer, p in st["peers"].items():
            out[(s, peer)] = str(p.get("tcp"))
    return out


async def tls_handshakes(clients: dict[str, RcmClient]) -> dict[str, int]:
    """Full and resumed TLS handshakes the sites completed so far, and connections continued without one (RCM
    stats, summed over the sites)."""
    out = {"full": 0, "resumed": 0, "continued": 0}
    for c in clients.values():
        got = (await c.stats()).get("tls_handshakes") or {}
        for k in out:
            out[k] += int(got.get(k, 0))
    return out


async def drained(links: LinkSet, timeout: float) -> None:
    """Until no proxy holds more than a few bytes in flight (or ``timeout`` passed: the run goes on)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        flights = [d.bytes_in - d.bytes_out - d.bytes_dropped - d.bytes_lost for p in links.proxies.values()
                   for st in (p.stats(),) for d in (st.forward, st.reverse)]
        if max(flights, default=0) <= 64:
            return
        await asyncio.sleep(0.1)


async def run_mode(name: str, settings: tuple[dict[str, Any], dict[str, Any]],
                   a: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="rcm-hf-") as d:
        rates = {s: {p: RATE for p in SITES if p != s} for s in SITES}
        rcm = {"tls": True, "routing": "relay", "handshake_timeout": HANDSHAKE, **settings[0]}
        mp = write_mission(Path(d) / "mission.toml", "hf", SITES, rcm=rcm, chat={**CHAT, **settings[1]},
                           proxies=True,
                           data_dir="data", rates=rates)
        servers, chat = LocalRcm(mp, log_level="warning"), LocalChat(mp, log_level="warning")
        certs.create(servers.mission)
        shape = Shape(delay=DELAY, bandwidth_bps=RATE)
        links = LinkSet(servers.mission, shape=shape)
        counters = Counters(links)
        users: dict[str, ChatClient] = {}
        rcms: dict[str, RcmClient] = {}
        seen = {s: Seen() for s in SITES}
        try:
            await links.start()
            await asyncio.to_thread(servers.start_all, 60.0)
            await asyncio.to_thread(chat.add_users, {s: [f"{s.lower()}op"] for s in SITES}, PASSWORD)
            for s in SITES:
                chat.start(s)
            for s in SITES:
                await asyncio.to_thread(chat.wait_ready, s, 60.0)
            await wait_connected(chat.mission, SITES, 120.0, interval=0.5)
            ca = servers.mission.site_dir(SITES[0]) / "tls" / "ca.pem"
            for s in SITES:
                def shown(f: dict[str, Any], view: Seen = seen[s]) -> None:
                    if f.get("type") == "message":
                        k = key_of(str(f.get("text", "")))
                        if k is not None and k not in view.at:
                            view.at[k] = time.time()
                c = await ChatClient.connect(chat.url(s), f"{s.lower()}op", PASSWORD, reconnect=True, ca_file=ca)
                c.on_frame = shown
                await c.join("ops")
                users[s] = c
                rcms[s] = await RcmClient.connect(socket_path(servers.mission, s), name="hf-bench")
            await asyncio.sleep(a.settle)

            # -- idle ------------------------------------------------------------------------------
            await drained(links, 60.0)        # the set-up's backlog (certificates at 300 B/s) is not idle cost
            c0 = counters.take()
            w0 = await wire_stats(rcms)
            await asyncio.sleep(a.idle)
            idle = Counters.diff(counters.take(), c0)
            idle_wired = wire_diff(await wire_stats(rcms), w0)
            idle_minutes = a.idle / 60

            # -- traffic, with the flapping links -----------------------------------------------------
            sent: dict[str, tuple[float, bool]] = {}
            reconnects: list[float] = []
            stop = asyncio.Event()
            t0 = time.monotonic()

            async def flap(x: str, y: str) -> None:
                while not stop.is_set():
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), a.up)
                    if stop.is_set():
                        return
                    await links.cut(x, y, mode=LinkMode.RESET)
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), a.down)
                    await links.restore(x, y)
                    back = time.monotonic()
                    while time.monotonic() - back < 60:
                        st = await tcp_states({x: rcms[x], y: rcms[y]})
                        if st.get((x, y)) == "TCP_Connected" and st.get((y, x)) == "TCP_Connected":
                            reconnects.append(time.monotonic() - back)
                            break
                        await asyncio.sleep(0.1)

            async def post(i: int, s: str) -> None:
                n = 0
                nxt = t0 + i * LINE_EVERY / len(SITES)
                while True:
                    await asyncio.sleep(max(0.0, nxt - time.monotonic()))
                    if time.monotonic() - t0 >= a.traffic:
                        return
                    text = line_text(s, n, False)
                    sent[key_of(text) or ""] = (time.time(), False)
                    with contextlib.suppress(Exception):
                        await users[s].say("ops", text)
                    n += 1
                    nxt += LINE_EVERY

            async def flashes() -> None:
                k = 0
                nxt = t0 + min(FLASH_EVERY, a.traffic) / 2
                while nxt - t0 < a.traffic:
                    await asyncio.sleep(max(0.0, nxt - time.monotonic()))
                    s = SITES[k % len(SITES)]
                    text = line_text(s, 10_000 + k, True)
                    sent[key_of(text) or ""] = (time.time(), True)
                    with contextlib.suppress(Exception):
                        await users[s].request({"type": "say", "room": "ops", "text": text,
                                                "client_id": f"flash-{k}", "precedence": "flash"})
                    k += 1
                    nxt += FLASH_EVERY

            c1 = counters.take()
            w1 = await wire_stats(rcms)
            h1 = await tls_handshakes(rcms)
            flappers = [asyncio.create_task(flap(x, y)) for x, y in FLAPPING]
            await asyncio.gather(*(post(i, s) for i, s in enumerate(SITES)), flashes())
            traffic = Counters.diff(counters.take(), c1)
            wired = wire_diff(await wire_stats(rcms), w1)
            h2 = await tls_handshakes(rcms)
            stop.set()
            await asyncio.gather(*flappers)
            await links.heal()

            # -- drain ------------------------------------------------------------------------------
            origin = {k: k.split("-")[0] for k in sent}
            deadline = time.monotonic() + a.drain
            while time.monotonic() < deadline:
                if all(k in seen[s].at for k in sent for s in SITES if s != origin[k]):
                    break
                await asyncio.sleep(0.5)
            res = figures(name, sent, origin, seen, idle, idle_minutes, traffic, a.traffic, reconnects)
            res["composition"] = composition(wired, sum(v[0] for v in traffic.values()), res["copies"])
            # Each TLS connection is counted by both of its ends.
            res["tls_handshakes"] = {k: (h2[k] - h1[k]) // 2 for k in h2}
            pairs = len(SITES) * (len(SITES) - 1) // 2
            res["idle_composition"] = composition(idle_wired, sum(v[0] for v in idle.values()), pairs * idle_minutes)
            return res
        finally:
            for c in users.values():
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(c.close(), 5)
            for r in rcms.values():
                with contextlib.suppress(Exception):
                    await r.close()
            await asyncio.to_thread(chat.stop_all)
            await asyncio.to_thread(servers.stop_all)
            await links.close()


def figures(name: str, sent: dict[str, tuple[float, bool]], origin: dict[str, str], seen: dict[str, Seen],
            idle: dict[tuple[str, str], tuple[int, int]], idle_minutes: float,
            traffic: dict[tuple[str, str], tuple[int, int]], seconds: float, reconnects: list[float]) -> dict[str, Any]:
    pairs = {tuple(sorted(k)) for k in idle}
    idle_pair = {p: sum(idle[d][0] for d in idle if tuple(sorted(d)) == p) for p in pairs}
    idle_pkts = {p: sum(idle[d][1] for d in idle if tuple(sorted(d)) == p) for p in pairs}
    idle_bytes_min = sum(idle_pair.values()) / len(pairs) / idle_minutes
    idle_pkts_min = sum(idle_pkts.values()) / len(pairs) / idle_minutes
    total = sum(v[0] for v in traffic.values())
    idle_during = idle_bytes_min * len(pairs) * seconds / 60
    copies = len(sent) * (len(SITES) - 1)
    shown_everywhere = sum(all(k in seen[s].at for s in SITES if s != origin[k]) for k in sent)
    flash = [seen[s].at[k] - t for k, (t, f) in sent.items() if f for s in SITES
             if s != origin[k] and k in seen[s].at]
    # Routine lines shown while their links were up or flapping (the drain after the heal included).
    routine = [seen[s].at[k] - t for k, (t, f) in sent.items() if not f for s in SITES
               if s != origin[k] and k in seen[s].at]
    busiest = max(v[0] for v in traffic.values()) * 8 / (seconds * RATE)
    return {
        "mode": name, "lines": len(sent), "copies": copies,
        "bytes_per_copy": (total - idle_during) / copies if copies else float("nan"),
        "gross_bytes_per_copy": total / copies if copies else float("nan"),
        "idle_bytes_per_link_min": idle_bytes_min, "idle_packets_per_link_min": idle_pkts_min,
        "reconnect_s": {"n": len(reconnects), "p50": percentile(reconnects, 50),
                        "max": max(reconnects) if reconnects else float("nan")},
        "flash_s": {"n": len(flash), "p50": percentile(flash, 50), "p95": percentile(flash, 95)},
        "routine_s": {"n": len(routine), "p50": percentile(routine, 50), "p95": percentile(routine, 95)},
        "delivered": shown_everywhere / len(sent) if sent else float("nan"),
        "busiest_utilisation": busiest,
        "links": {f"{a}->{b}": {"idle_bytes": idle[(a, b)][0], "traffic_bytes": traffic[(a, b)][0]}
                  for a, b in sorted(traffic)},
    }


def line(r: dict[str, Any]) -> str:
    t = TARGETS
    return (f"hf[{r['mode']}]: {r['bytes_per_copy']:.0f} B per message copy (target <= {t['bytes_per_copy']:.0f}; "
            f"gross {r['gross_bytes_per_copy']:.0f}), idle {r['idle_bytes_per_link_min']:.0f} B and "
            f"{r['idle_packets_per_link_min']:.0f} packets per link per minute, TLS reconnect p50 "
            f"{r['reconnect_s']['p50']:.1f} s max {r['reconnect_s']['max']:.1f} s (target <= {t['reconnect_s']:.0f}; "
            f"{r['tls_handshakes'].get('continued', 0)} continued without a handshake, "
            f"{r['tls_handshakes']['resumed']} resumed, {r['tls_handshakes']['full']} full handshakes), "
            f"FLASH p95 {r['flash_s']['p95']:.1f} s (target <= {t['flash_p95_s']:.0f}; routine lines p50 "
            f"{r['routine_s']['p50']:.1f} s, p95 {r['routine_s']['p95']:.1f} s), delivered "
            f"{100 * r['delivered']:.1f}%, busiest link {100 * r['busiest_utilisation']:.0f}% (target < 80%)")


async def main_async(a: argparse.Namespace) -> dict[str, Any]:
    runs = []
    for name in a.modes.split(","):
        if name not in MODES:
            raise SystemExit(f"hf: unknown mode {name!r} (known: {', '.join(MODES)})")
        runs.append(await run_mode(name, MODES[name](), a))
    by = {r["mode"]: r for r in runs}
    if "paper" in by and "hf" in by:
        p, h = by["paper"], by["hf"]
        print(f"hf: paper/hf {p['bytes_per_copy'] / h['bytes_per_copy']:.2f}x the bytes per message copy, "
              f"{p['idle_bytes_per_link_min'] / h['idle_bytes_per_link_min']:.2f}x the idle bytes per link")
    return {"quick": a.quick, "rate_bps": RATE, "delay_s": DELAY, "idle_s": a.idle, "traffic_s": a.traffic,
            "up_s": a.up, "down_s": a.down, "targets": TARGETS, "modes": runs}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="the hf mode only: 4 s idle, 12 s traffic, outages 6 s "
                    "up / 2 s down")
    ap.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, of {', '.join(MODES)}")
    ap.add_argument("--idle", type=float, default=60.0)
    ap.add_argument("--traffic", type=float, default=300.0)
    ap.add_argument("--up", type=float, default=30.0)
    ap.add_argument("--down", type=float, default=10.0)
    ap.add_argument("--drain", type=float, default=120.0)
    ap.add_argument("--settle", type=float, default=5.0)
    a = ap.parse_args()
    if a.quick:
        a.idle, a.traffic, a.up, a.down, a.drain, a.settle = 4.0, 12.0, 6.0, 2.0, 20.0, 1.0
        a.modes = "hf"
    doc = asyncio.run(main_async(a))
    for r in doc["modes"]:
        print(line(r))
        print(composition_line(f"hf[{r['mode']}] gross per copy", r["composition"]))
        print(composition_line(f"hf[{r['mode']}] idle per link per minute", r["idle_composition"]))
    path = write_result("hf_quick" if a.quick else "hf", doc)      # a smoke run never overwrites the figures
    print(f"hf: results in {path}")
    print(json.dumps({r["mode"]: {k: r[k] for k in ("bytes_per_copy", "idle_bytes_per_link_min", "delivered")}
                      for r in doc["modes"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
