"""Peer baseline under outages: three RCM sites against a three-server IRC network (ngircd), same links.

Both systems run at once in each trial, each behind its own link proxies with
the same schedule on the link A-B: one outage of 10 s, 30 s or 90 s, then the
paper's 30 s up / 10 s down schedule. One user per site posts 2 msg/s into
one room (``ops`` / ``#ops``), each line at a random point of its half-second slot, over
links with a one-way delay (120 ms, an air link, unless ``--delay``). The IRC network is a chain A - B - C (an IRC
network is a tree), so A-B is one of its two server links and cutting it
splits A from B and C. The RCM sites run the product as ``make demo`` does:
the paper's timeouts, a direct link for every pair, relaying on (while A-B is
down, A and B reach each other through C at once) and repair on (what a site
missed while it was disconnected is fetched from any site that holds it),
link compression as the mission default. ``RCM_SETTINGS`` below is the
``[rcm]`` table, printed with the results.
An outage resets the link's connections (``reset``: a netsplit) or, with
``--mode blackhole``, holds them open while nothing flows (a radio fade; the
proxy buffers, as TCP would retransmit).

Per system and trial it measures what an operator sees: the share of messages
shown at every site, duplicates, how many sites show the common messages in
an order that differs from the majority's (the RCM clients place late
messages at their order key; an IRC client shows lines as they arrive, its
own where it typed them), p50/p95 delivery latency (arrival minus send, other
sites only), and inter-site bytes (every byte the proxies carried) two ways:
per message sent (issue 36's figure: it falls as a system delivers less, so it
favours the system that drops copies) and per copy shown at a site other than
its origin's (the cost of what each system delivered); for RCM, where those
bytes go (``bench/_wire.py``: frames per kind, compression, TLS records and
handshakes, per message). The first line of each trial gives the two systems'
ratios.

``--sim`` runs the RCM side of the same trials instead on the virtual clock
(``bench/idle_link.py``'s ``VirtualNet``: the real sans-IO stacks, no
processes, no chat server, 60-byte payloads, exact and load-free), with the
acknowledgement wait of a mission without paced links (``rcm.channels.layer``,
``ack_wait``) against ``ack_interval`` alone (the wait before it), and leads
with the ratio of their frames written per message; ``--sim-announce-delay``
and ``--sim-linger`` add variants that were measured and not adopted
(docs/experiments.md, "Two byte figures").

    .venv/bin/python bench/peer_irc_outage.py            # 10/30/90 s outages, then 30 up / 10 down (~7 min)
    .venv/bin/python bench/peer_irc_outage.py --quick    # one 2 s outage (~15 s)
    .venv/bin/python bench/peer_irc_outage.py --sim      # the RCM side on the virtual clock (~3 s)
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
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


from bench._common import percentile, write_result  # noqa: E402
from bench._wire import composition, composition_line, wire_stats  # noqa: E402
from bench.peer_irc import IrcClient, irc_network, ngircd_available  # noqa: E402
from chat_server.client import ChatClient  # noqa: E402
from contracts.mission import load_mission  # noqa: E402
from faultinject.links import LinkSet  # noqa: E402
from faultinject.missions import write_mission  # noqa: E402
from faultinject.procs import LocalChat, LocalRcm, wait_connected  # noqa: E402
from faultinject.shaping import BlackholePolicy, LinkMode, Shape  # noqa: E402
from rcm.client import RcmClient, socket_path  # noqa: E402

SITES = ["A", "B", "C"]
RCM_SETTINGS: dict[str, Any] = {"heartbeat_timeout": 1.0, "liveness_timeout": 5.0, "silence_timeout": 10.0,
                                "suspect_timeout": 60.0, "reconnect_period": 3.0, "ordering": "lamport",
                                "p2p": "robust", "routing": "relay", "repair": True}
CUT = ("A", "B")
PASSWORD = "peer-bench-pw"


@dataclass(frozen=True)
class Trial:
    name: str
    downs: tuple[tuple[float, float], ...]     # (start, end) of each outage, seconds from traffic start
    traffic: float                              # seconds of posting


@dataclass
class View:
    """What one site's user saw: msg key -> arrival time, and the sequence the client shows."""

    arrivals: dict[str, float] = field(default_factory=dict)
    shown: list[tuple[Any, str]] = field(default_factory=list)     # (sort key, msg key)
    duplicates: int = 0

    def add(self, key: str, at: float, sort_key: Any) -> None:
        if key in self.arrivals:
            self.duplicates += 1
            return
        self.arrivals[key] = at
        self.shown.append((sort_key, key))

    def sequence(self) -> list[str]:
        return [k for _, k in sorted(self.shown, key=lambda x: x[0])]


def trials(quick: bool) -> list[Trial]:
    if quick:
        return [Trial("out2", ((2.0, 4.0),), 6.0)]
    out = [Trial(f"out{d}", ((5.0, 5.0 + d),), 5.0 + d + 15.0) for d in (10, 30, 90)]
    flap = tuple((5.0 + 40 * i + 30, 5.0 + 40 * i + 40) for i in range(3))
    out.append(Trial("flap30/10", flap, 5.0 + 120 + 10))
    return out


async def schedule(trial: Trial, down: Any, up: Any, t0: float) -> None:
    for start, end in trial.downs:
        await asyncio.sleep(max(0.0, t0 + start - time.monotonic()))
        await down()
        await asyncio.sleep(max(0.0, t0 + end - time.monotonic()))
        await up()


async def post(site: str, rate: float, trial: Trial, t0: float, say: Any, sent: dict[str, tuple[str, float]],
               seed: int) -> None:
    """``rate`` lines a second on average, each at a random point of its slot (seeded), so sites talk at once."""
    rng = random.Random(seed)
    i = 0
    while True:
        at = t0 + (i + rng.random()) / rate
        if at - t0 > trial.traffic:
            return
        await asyncio.sleep(max(0.0, at - time.monotonic()))
        i += 1
        key = f"{site}-{i}"
        now = time.time()
        sent[key] = (site, now)
        with contextlib.suppress(Exception):
            await say(f"{key} {now:.6f}")


def parse(text: str) -> tuple[str, float] | None:
    key, _, at = text.partition(" ")
    try:
        return key, float(at)
    except ValueError:
        return None


def measure(sent: dict[str, tuple[str, float]], views: dict[str, View], inter_site_bytes: int) -> dict[str, Any]:
    everywhere = [k for k in sent if all(k in v.arrivals for v in views.values())]
    lat = [views[s].arrivals[k] - t for k, (origin, t) in sent.items() for s in views
           if s != origin and k in views[s].arrivals]
    copies = len(lat)           # messages shown at a site other than their origin's: what crossed and arrived
    common = set(everywhere)
    seqs = {s: tuple(k for k in v.sequence() if k in common) for s, v in views.items()}
    majority, _ = Counter(seqs.values()).most_common(1)[0] if seqs else ((), 0)
    return {"sent": len(sent), "delivered_everywhere": len(everywhere),
            "delivered_share": len(everywhere) / len(sent) if sent else float("nan"),
            "missing_deliveries": sum(1 for k in sent for v in views.values() if k not in v.arrivals),
            "duplicates": sum(v.duplicates for v in views.values()),
            "sites_in_other_order": sum(1 for s in seqs.values() if s != majority),
            "latency_p50_s": percentile(lat, 50), "latency_p95_s": percentile(lat, 95),
            "inter_site_bytes": inter_site_bytes,
            "bytes_per_message": inter_site_bytes / len(sent) if sent else float("nan"),
            "copies_shown": copies,
            "bytes_per_copy_shown": inter_site_bytes / copies if copies else float("nan")}


async def wait_complete(sent: dict[str, tuple[str, float]], views: dict[str, View], limit: float) -> None:
    """Until every site shows every message, or ``limit`` seconds pass with nothing new arriving."""
    last, seen = time.monotonic(), -1
    while True:
        n = sum(len(v.arrivals) for v in views.values())
        if n >= len(sent) * len(views):
            return
        if n != seen:
            seen, last = n, time.monotonic()
        elif time.monotonic() - last > limit:
            return
        await asyncio.sleep(0.2)


async def run_irc(trial: Trial, rate: float, mode: LinkMode, drain: float, shape: Shape) -> dict[str, Any]:
    async with irc_network(SITES, shape) as net:
        proxy = net.links[CUT]
        if mode is LinkMode.BLACKHOLE:
            proxy.policy = BlackholePolicy.BUFFER
        deadline = time.monotonic() + 30
        while not net.linked():
            if time.monotonic() > deadline:
                raise RuntimeError("ngircd servers did not link: " + net.log_tail("B"))
            await asyncio.sleep(0.2)
        clients = {s: IrcClient(f"{s.lower()}user", net.servers[s].port, "#ops") for s in SITES}
        for c in clients.values():
            await c.connect()
        await asyncio.sleep(1.0)                  # channel joins propagate over the server links
        sent: dict[str, tuple[str, float]] = {}
        t0 = time.monotonic()
        sched = asyncio.create_task(schedule(trial, lambda: proxy.set_mode(mode), proxy.up, t0))
        await asyncio.gather(*(post(s, rate, trial, t0, c.say, sent, i)
                               for i, (s, c) in enumerate(clients.items())))
        await sched
        views = {s: View() for s in SITES}

        def collect() -> None:
            for s, c in clients.items():
                v = views[s] = View()
                for key, (origin, at) in sent.items():
                    if origin == s:               # the client shows its own line where it typed it
                        v.add(key, at, at)
                for text, at in c.received:
                    p = parse(text)
                    if p is not None:
                        v.add(p[0], at, at)

        deadline = time.monotonic() + drain
        while time.monotonic() < deadline:
            collect()
            if all(len(v.arrivals) == len(sent) for v in views.values()):
                break
            await asyncio.sleep(0.5)
        collect()
        for c in clients.values():
            await c.close()
        return measure(sent, views, net.bytes_between_sites())


async def run_rcm(trial: Trial, rate: float, mode: LinkMode, drain: float, shape: Shape,
                  rcm: dict[str, Any], chat_settings: dict[str, Any] | None = None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="rcm-peer-bench-") as d:
        mpath = write_mission(Path(d) / "mission.toml", "peer-bench", SITES, rcm=rcm, proxies=True, data_dir="data",
                              chat=chat_settings or None)
        mission = load_mission(mpath)
        policy = BlackholePolicy.BUFFER if mode is LinkMode.BLACKHOLE else BlackholePolicy.DISCARD
        links = LinkSet(mission, shape=shape, policy=policy)
        servers, chat = LocalRcm(mpath, log_level="warning"), LocalChat(mpath, log_level="warning")
        clients: dict[str, ChatClient] = {}
        await links.start()
        try:
            await asyncio.to_thread(servers.start_all, 30.0)
            await asyncio.to_thread(chat.add_users, {s: [f"{s.lower()}user"] for s in SITES}, PASSWORD)
            for s in SITES:
                chat.start(s)
            for s in SITES:
                await asyncio.to_thread(chat.wait_ready, s, 30.0)
            await wait_connected(chat.mission, SITES, 60.0, interval=0.2)
            views = {s: View() for s in SITES}
            for s in SITES:
                def record(f: dict[str, Any], view: View = views[s]) -> None:
                    if f.get("type") == "message":
                        p = parse(str(f.get("text", "")))
                        if p is not None:
                            view.add(p[0], time.time(), tuple(map(str, f.get("order") or ())))
                c = await ChatClient.connect(chat.url(s), f"{s.lower()}user", PASSWORD, reconnect=True)
                c.on_frame = record
                await c.join("ops")
                clients[s] = c
            sent: dict[str, tuple[str, float]] = {}
            t0 = time.monotonic()
            sched = asyncio.create_task(schedule(trial, lambda: links.cut(*CUT, mode=mode),
                                                 lambda: links.restore(*CUT), t0))

            async def say(site: str, text: str) -> None:
                await clients[site].say("ops", text)

            await asyncio.gather(*(post(s, rate, trial, t0, lambda text, s=s: say(s, text), sent, i)
                                   for i, s in enumerate(SITES)))
            await sched
            await wait_complete(sent, views, drain)
            bytes_ = sum(p.stats().forward.bytes_out + p.stats().reverse.bytes_out for p in links.proxies.values())
            rcms = {s: await RcmClient.connect(socket_path(mission, s), name="peer-bench") for s in SITES}
            try:
                wired = await wire_stats(rcms)
            finally:
                for r in rcms.values():
                    await r.close()
            return {**measure(sent, views, bytes_), "composition": composition(wired, bytes_, len(sent))}
        finally:
            for c in clients.values():
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(c.close(), 5)
            await asyncio.to_thread(chat.stop_all)
            await asyncio.to_thread(servers.stop_all)
            await links.close()


def run_sim(trial: Trial, rate: float, delay: float, ack_wait: float | None, announce_delay: float = 0.0,
            linger: float = 0.0) -> dict[str, Any]:
    """The RCM side of ``trial`` on the virtual clock (module docstring): frames, bytes and writes per message,
    per frame kind, and the delivery latency; ``ack_wait``: the stacks' acknowledgement wait (None: theirs);
    ``announce_delay``: ``[rcm] announce_delay``; ``linger``: every write may wait this long for later ones to join
    it (``Transmit.hold``, which the product gives only links paced below 64 kbit/s)."""
    from bench.idle_link import CutNet
    from contracts.mission import parse_rcm_settings

    settings = parse_rcm_settings({**RCM_SETTINGS, "announce_delay": announce_delay})
    net = CutNet(settings, delay, 0, sites=SITES)
    for site, st in net.stacks.items():
        if ack_wait is not None:
            st.channels.ack_wait = ack_wait         # the baseline: the wait before ``UNPACED_ACK_FACTOR``
        if linger:
            st.connections.lingers = {p: linger for p in SITES if p != site}    # a variant the product lacks
    t0 = net.settled()
    sent = 0
    for j, s in enumerate(SITES):
        rng = random.Random(j)
        i = 0
        while (i + 1) / rate <= trial.traffic:
            net._at(t0 + (i + rng.random()) / rate, net.send, s, b"x" * 60)
            i += 1
            sent += 1
    for start, end in trial.downs:
        net._at(t0 + start, net.outage, *CUT, True)
        net._at(t0 + end, net.outage, *CUT, False)
    net.run(t0 + trial.traffic + 10.0)
    m = net.meter
    return {"sent": sent, "copies_delivered": len(net.latencies), "copies": sent * (len(SITES) - 1),
            "bytes_per_message": sum(m.bytes.values()) / sent, "frames_per_message": sum(m.frames.values()) / sent,
            "writes_per_message": sum(m.packets.values()) / sent,
            "latency_p50_s": percentile(net.latencies, 50), "latency_p95_s": percentile(net.latencies, 95),
            "per_kind": {k: {"bytes": m.bytes[k] / sent, "frames": m.frames[k] / sent,
                             "writes": m.packets[k] / sent} for k in sorted(m.bytes, key=lambda k: -m.bytes[k])}}


def main_sim(a: argparse.Namespace) -> dict[str, Any]:
    from contracts.mission import parse_rcm_settings

    interval = parse_rcm_settings(dict(RCM_SETTINGS)).ack_interval
    out = []
    for t in trials(a.quick):
        now, before = run_sim(t, a.rate, a.delay, None), run_sim(t, a.rate, a.delay, interval)
        ratio = before["writes_per_message"] / now["writes_per_message"]
        print(f"peer_irc_outage --sim {t.name}: {ratio:.2f}x fewer writes per message with the acknowledgement wait "
              f"of an unpaced mission; bytes per message {before['bytes_per_message']:.1f} -> "
              f"{now['bytes_per_message']:.1f} (frames as written, before compression)")
        variants = [(f"announce_delay {d:g}", run_sim(t, a.rate, a.delay, None, announce_delay=d))
                    for d in a.sim_announce_delay] + \
                   [(f"linger {h:g}", run_sim(t, a.rate, a.delay, None, linger=h)) for h in a.sim_linger]
        for label, r in variants:
            print(f"  {label}: {now['bytes_per_message'] / r['bytes_per_message']:.3f}x fewer bytes per message, "
                  f"{now['writes_per_message'] / r['writes_per_message']:.2f}x fewer writes than today; p50 "
                  f"{(r['latency_p50_s'] - now['latency_p50_s']) * 1000:+.0f} ms, p95 "
                  f"{(r['latency_p95_s'] - now['latency_p95_s']) * 1000:+.0f} ms")
        for label, r in (("ack_interval", before), ("ack_wait", now), *variants):
            kinds = ", ".join(f"{k} {v['bytes']:.1f} B / {v['writes']:.2f} w" for k, v in r["per_kind"].items()
                              if v["bytes"] >= 0.5)
            print(f"  {label:12} {r['writes_per_message']:.2f} writes, {r['frames_per_message']:.2f} frames, "
                  f"{r['bytes_per_message']:.1f} B per message; delivered {r['copies_delivered']}/{r['copies']} "
                  f"copies, p50 {r['latency_p50_s'] * 1000:.0f} ms p95 {r['latency_p95_s'] * 1000:.0f} ms; {kinds}")
        out.append({"trial": t.name, "downs": t.downs, "ack_interval": before, "ack_wait": now,
                    "ratio_writes_before_over_after": ratio, "variants": dict(variants)})
    return {"sites": SITES, "cut": list(CUT), "rate_per_site": a.rate, "delay_s": a.delay, "virtual_clock": True,
            "rcm_settings": RCM_SETTINGS, "trials": out}


def plot(doc: dict[str, Any], path: Path) -> None:
    """Per trial, RCM beside IRC: share shown at every site, sites in another order, p95 latency, inter-site bytes
    per copy shown at another site."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [t["trial"] for t in doc["trials"]]
    xs = range(len(names))
    w = 0.38
    panels: list[tuple[str, Callable[[dict[str, Any]], float], tuple[int, int] | None]] = [
        ("shown at every site (%)", lambda r: 100 * r["delivered_share"], None),
        ("sites whose order differs from the most common\n(of 3; 2 = no two sites agree)",
         lambda r: r["sites_in_other_order"], (0, 3)),
        ("p95 latency of what was shown (s)", lambda r: r["latency_p95_s"], None),
        ("inter-site bytes per copy shown\nat a site other than its origin's",
         lambda r: r["bytes_per_copy_shown"], None)]
    fig, axes = plt.subplots(1, 4, figsize=(14, 3.6))
    for ax, (title, get, ylim) in zip(axes, panels):
        for k, (system, colour) in enumerate((("rcm", "tab:blue"), ("irc", "tab:orange"))):
            ys = [get(t[system]) for t in doc["trials"]]
            bars = ax.bar([x + (k - 0.5) * w for x in xs], ys, w, color=colour,
                          label="RCM (3 sites)" if system == "rcm" else "IRC (3 ngircd)")
            ax.bar_label(bars, fmt="%.3g", fontsize=7)
        ax.set_xticks(list(xs), names, fontsize=8)
        ax.set_title(title, fontsize=9)
        if ylim:
            ax.set_ylim(*ylim)
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_ylim(0, 110)
    axes[0].legend(fontsize=7, loc="lower left")
    fig.suptitle(f"Outages on link A-B ({doc['mode']}), {doc['rate_per_site']:g} msg/s per site, "
                 f"{doc['delay_s'] * 1000:g} ms one way", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def line(system: str, trial: str, r: dict[str, Any]) -> str:
    return (f"  {system:4} {trial:10} delivered everywhere {r['delivered_share']*100:6.2f}% "
            f"({r['delivered_everywhere']}/{r['sent']}), duplicates {r['duplicates']}, "
            f"sites in another order {r['sites_in_other_order']}, latency p50 {r['latency_p50_s']*1000:7.1f} ms "
            f"p95 {r['latency_p95_s']*1000:8.1f} ms, {r['bytes_per_message']:7.0f} B/msg sent, "
            f"{r['bytes_per_copy_shown']:5.0f} B per copy shown at another site ({r['copies_shown']})")


async def main_async(a: argparse.Namespace) -> dict[str, Any]:
    mode = LinkMode(a.mode)
    rcm = dict(RCM_SETTINGS)
    chat_settings = {"receipt_interval": a.receipt_interval} if a.receipt_interval is not None else {}
    results: list[dict[str, Any]] = []
    for t in trials(a.quick):
        if a.trials and t.name not in a.trials:
            continue
        shape = Shape(delay=a.delay)
        irc, ours = await asyncio.gather(run_irc(t, a.rate, mode, a.drain, shape),
                                         run_rcm(t, a.rate, mode, a.drain, shape, rcm, chat_settings))
        ratio = (ours["delivered_share"] / irc["delivered_share"]) if irc["delivered_share"] else float("inf")
        bytes_ratio = (ours["bytes_per_message"] / irc["bytes_per_message"]) if irc["bytes_per_message"] \
            else float("inf")
        copy_ratio = (ours["bytes_per_copy_shown"] / irc["bytes_per_copy_shown"]) if irc["copies_shown"] \
            else float("inf")
        print(f"peer_irc_outage {t.name}: RCM/IRC bytes per message sent {bytes_ratio:.2f} (the issue's figure), "
              f"per copy shown at another site {copy_ratio:.2f}; delivered-everywhere ratio "
              f"{ratio:.2f}, sites in another order RCM {ours['sites_in_other_order']} vs IRC "
              f"{irc['sites_in_other_order']}")
        print(line("RCM", t.name, ours))
        print(composition_line("       RCM per message", ours["composition"]))
        print(line("IRC", t.name, irc))
        results.append({"trial": t.name, "downs": t.downs, "rcm": ours, "irc": irc, "ratio_delivered": ratio,
                        "ratio_bytes_per_message": bytes_ratio, "ratio_bytes_per_copy_shown": copy_ratio})
    return {"sites": SITES, "cut": list(CUT), "mode": mode.value, "rate_per_site": a.rate, "delay_s": a.delay,
            "rcm_settings": rcm, "chat_settings": chat_settings,
            "rcm_links": "direct, every pair; relaying and repair on", "trials": results}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one 2 s outage, seconds of traffic (a smoke run)")
    ap.add_argument("--rate", type=float, default=2.0, help="messages/s per site")
    ap.add_argument("--mode", choices=["reset", "blackhole"], default="reset",
                    help="what an outage does to the link's connections (default: reset, a netsplit)")
    ap.add_argument("--delay", type=float, default=0.12, help="one-way delay of every link, seconds (air link: 0.12)")
    ap.add_argument("--drain", type=float, default=20.0,
                    help="after the traffic, wait this long without a new arrival before counting")
    ap.add_argument("--receipt-interval", type=float, default=None,
                    help="[chat] receipt_interval of the RCM sites (default: the product's, 0.5 s); a diagnostic of "
                         "what receipts cost, not the product's figure")
    ap.add_argument("--trials", type=lambda v: v.split(","), default=None,
                    help="only these trials, comma-separated (out10,out30,out90,flap30/10; a diagnostic run)")
    ap.add_argument("--sim", action="store_true",
                    help="the RCM side on the virtual clock, acknowledgement waits compared (module docstring)")
    ap.add_argument("--sim-announce-delay", type=float, nargs="*", default=[], metavar="S",
                    help="--sim: also with [rcm] announce_delay S, against today's")
    ap.add_argument("--sim-linger", type=float, nargs="*", default=[], metavar="S",
                    help="--sim: also with every write lingering up to S seconds (as on slow paced links)")
    a = ap.parse_args()
    if a.sim:
        sim = main_sim(a)
        print(f"peer_irc_outage --sim: -> {write_result('peer_irc_outage_sim' + ('_quick' if a.quick else ''), sim)}")
        return 0
    if not ngircd_available():
        print("peer_irc_outage: ngircd is not installed (bash deploy/sysdeps.sh ngircd)", file=sys.stderr)
        return 2
    if a.quick:
        a.drain = min(a.drain, 8.0)
    doc = asyncio.run(main_async(a))
    diagnostic = a.trials is not None or a.receipt_interval is not None     # not the benchmark's figure
    path = write_result("peer_irc_outage" + ("_quick" if a.quick else "") + ("_diagnostic" if diagnostic else ""),
                        doc)
    plot(doc, path.with_suffix(".png"))
    print(f"peer_irc_outage: {len(doc['trials'])} trial(s) -> {path} (plot: {path.with_suffix('.png').name})")
    print(json.dumps({t["trial"]: {"delivered": round(t["ratio_delivered"], 3),
                                   "bytes": round(t["ratio_bytes_per_message"], 2),
                                   "bytes_per_copy_shown": round(t["ratio_bytes_per_copy_shown"], 2)}
                      for t in doc["trials"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
