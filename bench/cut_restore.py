"""Stress of the reconnection path: a link cut and restored many times under CPU load, TLS against plaintext.

Two sites, A and B, each sending 20 messages/s of 100 bytes to the other, their link through a
proxy and the test's fast timeouts (heartbeat 0.3 s, liveness 2 s, reconnect 0.5 s). A cycle: the
link is up for ``--up`` seconds, cut by reset (both ends see it), down ``--down`` seconds, restored;
the cycle ends once both sites see each other connected again. ``--hogs`` CPU-bound processes at nice
19 run beside them the whole time (started and stopped here): a loaded machine stretches the
handshakes, so both ends often dial at once when the link comes back (a double dial), the race in
which frames were resent that the peer already held (docs/security.md).

The same number of cycles runs with ``tls = true`` and with ``tls = false``, side by side in one
invocation (two missions, so that both see the same load).
Figures per mode: frames resent per cycle (a frame written again after a reconnection, both
directions) and duplicate frames dropped by the receivers per cycle, the cycles in which the two
ends dialed at once, and the deliveries lost or duplicated at the clients (every message must reach
the other site exactly once). Without TLS the stream resumes after the last acknowledged frame, so
a plaintext cycle may drop as duplicates at most what was received but not yet acknowledged at the
cut (read from ``stats()`` at each cut; the cycles past it are counted). With TLS the target is 0
duplicates.
The summary leads with the ratio of resent frames per cycle, TLS / plaintext.

    .venv/bin/python bench/cut_restore.py [--cycles 100] [--hogs 2] [--up 0.6] [--down 0.4]
    .venv/bin/python bench/cut_restore.py --quick      # 2 short cycles per mode, no hogs (a smoke run)
    .venv/bin/python bench/cut_restore.py --hf [--cycles 3]   # reconnections over a 2.4 kbit/s, 300 ms link

``--hf`` measures what a reconnection costs on an HF link instead: A and B with mutual TLS, every
direction shaped to 2,400 bit/s with 300 ms one-way delay (faultinject's proxies), no traffic, the HF
profile's ``reconnect_period`` (3 s, ``deploy/examples/hf-4site.toml``) and each site pacing its writes at
the link's rate (so ``rcm.connman.redial_period`` applies). Both proxies of the pair share one shaper per
direction (one radio link: a double dial's two handshakes compete for it; ``--two-links`` gives each
site's dials a link of its own, faultinject's default). Each outage lasts a seeded random 2-8 s, so that the
restore falls anywhere in the sites' redial periods. It reports the first connection (full TLS
handshakes: both certificate chains) and then, per reconnection after a cut: the seconds from the restore
until both sites see each other connected (what ``bench/hf.py`` calls the time to reconnect), of which the
seconds from the restore to the first connection to reach the link (the dialer's SYN; the proxy does not
delay the TCP handshake itself) and from that SYN to both open, bytes on the link both ways, the
connections made (dials by each site) and the servers' counts of full and resumed handshakes; and, in
memory with the same certificates, every TLS record of each flight of a full and of a resumed handshake
(content type and size), the extensions of the resumed ClientHello, and the size of the HELLO.
Target: a reconnection within 3 s of the restore. Both ways of reconnecting run in one invocation on the
same seeded outages (``--tls both``): continuing the cut connection's TLS without a handshake (``[rcm]
tls_continue``, rcm.server.tlscontinue) and resuming its session with one; the lead line is their ratio.

Exit status 1 if a delivery was lost or duplicated, or the plaintext run dropped more duplicates than
were unacknowledged at its cuts.
"""
from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import write_result  # noqa: E402
from chat_server.launcher import log_path  # noqa: E402
from contracts.status import LinkStatus  # noqa: E402
from deploy import certs  # noqa: E402
from faultinject.links import LinkSet  # noqa: E402
from faultinject.missions import write_mission  # noqa: E402
from faultinject.procs import LocalRcm  # noqa: E402
from rcm.client import Delivery, RcmClient, StatusChange, socket_path  # noqa: E402

CONNECTED = LinkStatus.CONNECTED.value

SITES = ["A", "B"]
FAST = {"heartbeat_timeout": 0.3, "liveness_timeout": 2.0, "silence_timeout": 3.0, "suspect_timeout": 30.0,
        "reconnect_period": 0.5, "routing": "direct"}
RATE = 20.0           # messages per second per site
SIZE = 100
# A double dial leaves one of these at either end (the first since this change; the BYE lines before it).
RACE = re.compile(r"two connections with \w+ at once|replaced by a newer connection|duplicate connection")


def start_hogs(n: int) -> list[subprocess.Popen[bytes]]:
    """``n`` CPU-bound processes at nice 19 (stopped by ``stop_hogs``)."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"], preexec_fn=lambda: os.nice(19),
                             stdin=subprocess.DEVNULL) for _ in range(n)]


def stop_hogs(hogs: list[subprocess.Popen[bytes]]) -> None:
    for h in hogs:
        h.kill()
    for h in hogs:
        h.wait()


def log_text(rcm: LocalRcm, site: str) -> str:
    path = log_path(rcm.mission, site, rcm.role)
    return path.read_text(errors="replace") if path.exists() else ""


async def wait_for(cond: Any, what: str, timeout: float) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise RuntimeError(f"{what}: not within {timeout:g} s")
        await asyncio.sleep(0.01)


def channel_totals(stats: dict[str, dict[str, Any]]) -> tuple[int, int]:
    """(frames resent, duplicates dropped), both directions."""
    a, b = stats["A"]["peers"]["B"], stats["B"]["peers"]["A"]
    return a["resent"] + b["resent"], a["duplicates"] + b["duplicates"]


async def one_mode(tls: bool, cycles: int, up: float, down: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="rcm-cut-") as d:
        mp = write_mission(Path(d) / "mission.toml", "cuts", SITES, rcm={**FAST, "tls": tls}, proxies=True)
        rcm = LocalRcm(mp, log_level="info")
        if tls:
            certs.create(rcm.mission)
        links = LinkSet(rcm.mission)
        await links.start()
        clients: dict[str, RcmClient] = {}
        tasks: list[asyncio.Task[None]] = []
        delivered: dict[str, Counter[str]] = {s: Counter() for s in SITES}
        sent: dict[str, list[str]] = {s: [] for s in SITES}
        status: dict[str, dict[str, str]] = {s: {} for s in SITES}
        per_cycle: list[dict[str, Any]] = []
        over_bound = 0
        try:
            await asyncio.to_thread(rcm.start_all)
            clients = {s: await RcmClient.connect(socket_path(rcm.mission, s), name="bench") for s in SITES}

            async def read(site: str) -> None:
                async for ev in clients[site].events():
                    if isinstance(ev, Delivery):
                        delivered[site][ev.msg_id] += 1
                    elif isinstance(ev, StatusChange):
                        status[site][ev.site] = ev.status

            tasks = [asyncio.create_task(read(s)) for s in SITES]
            for s in SITES:
                status[s].update(clients[s].statuses)
            await wait_for(lambda: all(v == CONNECTED for st in status.values() for v in st.values()),
                           "the sites connected", 30)
            stopping = False

            async def sender(site: str) -> None:
                nxt = time.monotonic()
                i = 0
                while not stopping:
                    acc = await clients[site].send(f"{site}-{i} ".encode().ljust(SIZE, b"."))
                    sent[site].append(acc.msg_id)
                    i += 1
                    nxt += 1 / RATE
                    await asyncio.sleep(max(0.0, nxt - time.monotonic()))

            tasks += [asyncio.create_task(sender(s)) for s in SITES]

            async def stats() -> dict[str, dict[str, Any]]:
                return {s: await clients[s].stats() for s in SITES}

            before = channel_totals(await stats())
            races_before = sum(len(RACE.findall(log_text(rcm, s))) for s in SITES)
            t0 = time.monotonic()
            for _ in range(cycles):
                await asyncio.sleep(up)
                await links.cut("A", "B")
                await wait_for(lambda: status["A"].get("B") != CONNECTED and status["B"].get("A") != CONNECTED,
                               "A and B suspected each other", 10)
                st = await stats()
                a, b = st["A"]["peers"]["B"], st["B"]["peers"]["A"]
                # Received but not acknowledged at the cut, both directions (None: a server without the fields).
                unacked = (a["frontier"] - b["acked_upto"] + b["frontier"] - a["acked_upto"]
                           if "frontier" in a else None)
                await asyncio.sleep(down)
                await links.restore("A", "B")
                await wait_for(lambda: status["A"].get("B") == CONNECTED and status["B"].get("A") == CONNECTED,
                               "A and B connected again", 20)
                await asyncio.sleep(0.3)             # the resends and their duplicates arrive
                after = channel_totals(await stats())
                races = sum(len(RACE.findall(log_text(rcm, s))) for s in SITES)
                cycle = {"resent": after[0] - before[0], "duplicates": after[1] - before[1],
                         "unacked_at_cut": unacked, "raced": races > races_before}
                if not tls and unacked is not None and cycle["duplicates"] > unacked:
                    over_bound += 1
                per_cycle.append(cycle)
                before, races_before = after, races
            wall = time.monotonic() - t0
            stopping = True
            await asyncio.sleep(2 / RATE)
            await wait_for(lambda: all(len(delivered[s]) >= sum(len(v) for v in sent.values()) for s in SITES),
                           "every message delivered at both sites", 30)
            await asyncio.sleep(0.3)                  # a duplicate delivery would show now
        finally:
            for t in tasks:
                t.cancel()
            for c in clients.values():
                await c.close()
            await asyncio.to_thread(rcm.stop_all)
            await links.close()
    every = [m for v in sent.values() for m in v]
    lost = sum(1 for s in SITES for m in every if delivered[s][m] == 0)
    twice = sum(1 for s in SITES for n in delivered[s].values() if n > 1)
    n = len(per_cycle)
    return {"tls": tls, "cycles": n, "seconds": wall, "messages": len(every),
            "resent_per_cycle": sum(c["resent"] for c in per_cycle) / n,
            "duplicates_per_cycle": sum(c["duplicates"] for c in per_cycle) / n,
            "max_duplicates_in_a_cycle": max(c["duplicates"] for c in per_cycle),
            "double_dial_cycles": sum(c["raced"] for c in per_cycle),
            "duplicates_in_double_dial_cycles": sum(c["duplicates"] for c in per_cycle if c["raced"]),
            "unacked_at_cut_per_cycle": (sum(c["unacked_at_cut"] for c in per_cycle) / n
                                         if all(c["unacked_at_cut"] is not None for c in per_cycle) else None),
            "cycles_over_plaintext_bound": over_bound,
            "deliveries_lost": lost, "deliveries_duplicated": twice, "per_cycle": per_cycle}


def line(r: dict[str, Any]) -> str:
    mode = "tls" if r["tls"] else "plaintext"
    unacked = r["unacked_at_cut_per_cycle"]
    return (f"  {mode:9} {r['cycles']} cycles in {r['seconds']:.0f} s: {r['resent_per_cycle']:.1f} frames resent and "
            f"{r['duplicates_per_cycle']:.2f} duplicates dropped per cycle (most in one: "
            f"{r['max_duplicates_in_a_cycle']}), {r['double_dial_cycles']} cycles with a double dial "
            f"({r['duplicates_in_double_dial_cycles']} duplicates in them), "
            + (f"{unacked:.1f} unacknowledged at the cut per cycle, " if unacked is not None else "")
            + f"{r['deliveries_lost']} deliveries lost, {r['deliveries_duplicated']} duplicated")


async def main_async(args: argparse.Namespace) -> int:
    hogs = start_hogs(args.hogs)
    try:
        # Side by side, so that both modes see the same load.
        tls, plain = await asyncio.gather(one_mode(True, args.cycles, args.up, args.down),
                                          one_mode(False, args.cycles, args.up, args.down))
    finally:
        stop_hogs(hogs)
    ratio = tls["resent_per_cycle"] / plain["resent_per_cycle"] if plain["resent_per_cycle"] else float("nan")
    print(f"cut_restore: TLS resends {ratio:.2f}x the plaintext frames per cycle ({tls['resent_per_cycle']:.1f} "
          f"vs {plain['resent_per_cycle']:.1f}); duplicates dropped per cycle {tls['duplicates_per_cycle']:.2f} "
          f"(TLS) vs {plain['duplicates_per_cycle']:.2f}; {args.cycles} cycles each, {args.hogs} CPU hogs")
    print(line(tls))
    print(line(plain))
    path = write_result("cut_restore", {"cycles": args.cycles, "hogs": args.hogs, "up": args.up, "down": args.down,
                                        "resent_ratio_tls_to_plaintext": ratio, "tls": tls, "plaintext": plain})
    print(f"  written to {path}")
    bad = sum(r["deliveries_lost"] + r["deliveries_duplicated"] for r in (tls, plain))
    # The bound over the whole run: a duplicate that arrives after its cycle's reading counts in the next one.
    unacked = plain["unacked_at_cut_per_cycle"]
    over = unacked is not None and plain["duplicates_per_cycle"] > unacked
    return 1 if bad or over else 0


def share_link(links: Any, a: str, b: str) -> None:
    """One radio link for the pair: both proxies of {a, b} (a's dials and b's dials) share one shaper per
    direction, so two handshakes at once (a double dial) compete for the link's bit rate as they would on
    one HF channel. faultinject gives each dial direction its own proxy and shaper; the bench joins them."""
    pa, pb = links.proxies[(a, b)], links.proxies[(b, a)]
    from faultinject.proxy import FORWARD, REVERSE
    pb._shapers[FORWARD] = pa._shapers[REVERSE]       # bytes b sends to a, whichever site dialed
    pb._shapers[REVERSE] = pa._shapers[FORWARD]
    pb._ids = itertools.count(1_000_001)              # connection ids stay distinct within a shared shaper


RECORD_TYPES = {20: "ChangeCipherSpec", 21: "alert", 22: "handshake", 23: "encrypted"}
EXTENSIONS = {0: "server_name", 10: "supported_groups", 11: "ec_point_formats", 13: "signature_algorithms",
              16: "alpn", 41: "pre_shared_key", 43: "supported_versions", 45: "psk_key_exchange_modes",
              51: "key_share"}


def records(flight: bytes) -> list[tuple[str, int]]:
    """(content type, bytes with the header) of every TLS record of a flight."""
    out, p = [], 0
    while p + 5 <= len(flight):
        n = 5 + int.from_bytes(flight[p + 3:p + 5], "big")
        out.append((RECORD_TYPES.get(flight[p], str(flight[p])), n))
        p += n
    return out


def tls_flights(mission: Any) -> dict[str, Any]:
    """Bytes of each flight of a full and of a resumed handshake between A (dialer) and B, in memory with
    the bench's certificates: [ClientHello, acceptor's flight, dialer's Finished (+ certificate), ticket]; the
    records of each flight; the resumed ClientHello's extensions (type name: bytes with their 4-byte header)."""
    from rcm.server.tls import tls_contexts
    from rcm.server.tlslink import TlsLink, client_hello_extensions
    a_client = tls_contexts(mission, "A")[1]
    b_server = tls_contexts(mission, "B")[0]

    def run(session: Any) -> tuple[list[bytes], Any]:
        c, s = TlsLink(a_client, False, session), TlsLink(b_server, True)
        up = c.start()
        flights = [up]
        for _ in range(4):
            _, down = s.feed(up)
            if down:
                flights.append(down)
            _, up = c.feed(down)
            if up:
                flights.append(up)
            if not up:
                break
        assert c.done and s.done and c.reused == (session is not None)
        c.end()
        s.end()
        return flights, c.session

    full, session = run(None)
    resumed, _ = run(session)
    exts = client_hello_extensions(resumed[0])
    return {"full": [len(f) for f in full], "resumed": [len(f) for f in resumed],
            "full_records": [records(f) for f in full], "resumed_records": [records(f) for f in resumed],
            "resumed_client_hello_extensions": {EXTENSIONS.get(t, str(t)): 4 + len(b) for t, b in exts.items()}}


async def hf_mode(cycles: int, one_link: bool, one_dialer: bool = False, seed: int = 36,
                  continued: bool = True) -> dict[str, Any]:
    import random

    from faultinject.shaping import Shape
    from rcm import wire
    from rcm.wire import handshake
    shape = Shape(delay=0.3, bandwidth_bps=2400)
    rcm_cfg = {**FAST, "tls": True, "handshake_timeout": 60.0, "liveness_timeout": 20.0, "silence_timeout": 30.0,
               "heartbeat_timeout": 5.0, "reconnect_period": 3.0, "tls_continue": continued}
    downs = random.Random(seed)
    with tempfile.TemporaryDirectory(prefix="rcm-hf-") as d:
        # Paced at the link's rate, as an HF mission is ([sites.X.rate]): the pair then makes one handshake
        # at a time on reconnection (rcm.connman.dial_yield).
        rates = {s: {p: 2400 for p in SITES if p != s} for s in SITES}
        mp = write_mission(Path(d) / "mission.toml", "hf", SITES, rcm=rcm_cfg, proxies=True, rates=rates)
        rcm = LocalRcm(mp, log_level="info")
        certs.create(rcm.mission)
        flights = tls_flights(rcm.mission)
        links = LinkSet(rcm.mission, shape=shape)
        if one_link:
            share_link(links, "A", "B")
        await links.start()
        clients: dict[str, RcmClient] = {}
        proxies = {s: links.proxy(s, o) for s in SITES for o in SITES if o != s}   # site -> the proxy of its dials

        def link_bytes() -> int:
            return sum(p.stats().forward.bytes_in + p.stats().reverse.bytes_in for p in links.proxies.values())

        def directions() -> dict[str, list[int]]:
            """[bytes, writes] each way: what A sent to B and B to A, whichever site dialed (the proxy's reads of
            the sender's writes)."""
            ab, ba = links.proxy("A", "B").stats(), links.proxy("B", "A").stats()
            return {"A->B": [ab.forward.bytes_in + ba.reverse.bytes_in, ab.forward.chunks_in + ba.reverse.chunks_in],
                    "B->A": [ab.reverse.bytes_in + ba.forward.bytes_in, ab.reverse.chunks_in + ba.forward.chunks_in]}

        def dials() -> dict[str, int]:
            """Connections each site's dials made through the link (B's refused ones, with --one-dialer, left out)."""
            return {s: p.stats().connections.accepted - p.stats().connections.refused for s, p in proxies.items()}

        def both_connected() -> bool:
            return all(clients[s].statuses.get(o) == CONNECTED for s in SITES for o in SITES if o != s)

        async def watch(c: RcmClient) -> None:
            async for _ in c.events():
                pass

        async def handshakes() -> dict[str, int]:
            got = {s: (await clients[s].stats()).get("tls_handshakes") or {} for s in SITES}
            return {k: sum(int(h.get(k, 0)) for h in got.values()) for k in ("full", "resumed", "continued")}

        async def first_dial(before: dict[str, int]) -> float:
            """When the first connection after ``before`` reached a proxy (the dialer's SYN, in this model)."""
            while dials() == before:
                await asyncio.sleep(0.002)
            return time.monotonic()

        phases: list[dict[str, Any]] = []
        tasks: list[asyncio.Task[None]] = []
        try:
            t0, b0, d0 = time.monotonic(), link_bytes(), dials()
            await asyncio.to_thread(rcm.start_all)
            clients = {s: await RcmClient.connect(socket_path(rcm.mission, s), name="bench") for s in SITES}
            tasks = [asyncio.create_task(watch(c)) for c in clients.values()]
            await wait_for(both_connected, "A and B connected", 120)
            phases.append({"phase": "first connection", "seconds": time.monotonic() - t0,
                           "link_bytes": link_bytes() - b0,
                           "dials": {s: n - d0[s] for s, n in dials().items()}, "handshakes": await handshakes()})
            await asyncio.sleep(2.0)                   # the session tickets arrive
            for i in range(cycles):
                await links.cut("A", "B")
                await wait_for(lambda: not any(clients[s].statuses.get(o) == CONNECTED
                                               for s in SITES for o in SITES if o != s), "A and B apart", 120)
                down = round(downs.uniform(2.0, 8.0), 2)
                await asyncio.sleep(down)
                h0, d0, w0 = await handshakes(), dials(), directions()
                t0, b0 = time.monotonic(), link_bytes()
                syn = asyncio.create_task(first_dial(d0))
                if one_dialer:
                    # Only A's dials cross: B's proxy stays down by reset (its dials fail at once), which is what
                    # a rule "one site of a pair dials on a slow link" would do.
                    await links.proxy("A", "B").set_mode("up")
                else:
                    await links.restore("A", "B")
                await wait_for(both_connected, "A and B connected again", 120)
                t1 = time.monotonic()
                t_syn = await syn
                await asyncio.sleep(2.0)           # the loser of a double dial closes; the last bytes arrive
                h1 = await handshakes()
                phases.append({"phase": f"reconnection {i + 1}", "down": down, "seconds": t1 - t0,
                               "syn_to_open": t1 - t_syn,
                               "restore_to_syn": t_syn - t0, "link_bytes": link_bytes() - b0,
                               "dials": {s: n - d0[s] for s, n in dials().items()},
                               "directions": {k: [v[0] - w0[k][0], v[1] - w0[k][1]] for k, v in directions().items()},
                               "handshakes": {k: h1[k] - h0[k] for k in h1}})
        finally:
            for t in tasks:
                t.cancel()
            for c in clients.values():
                await c.close()
            await asyncio.to_thread(rcm.stop_all)
            await links.close()
    terms = handshake.Terms("lamport", "robust", ("A", "B", "C", "D"), "relay", 3)
    hello = len(wire.encode_frame(handshake.hello_frame("hf", "A", 2**40, 2**40, 10**6, 12, 3, terms))) + 1
    return {"shape": {"bandwidth_bps": 2400, "delay_s": 0.3, "one_link_per_pair": one_link},
            "one_dialer": one_dialer, "tls_continue": continued, "phases": phases,
            "tls_flights": flights, "hello_bytes_four_sites": hello}


def hf_means(r: dict[str, Any]) -> tuple[float, float, float]:
    """Mean seconds from the restore to open, from the first SYN to open, and link bytes per reconnection."""
    again = r["phases"][1:]
    return (sum(p["seconds"] for p in again) / len(again), sum(p["syn_to_open"] for p in again) / len(again),
            sum(p["link_bytes"] for p in again) / len(again))


def hf_ratio(cont: dict[str, Any], resumed: dict[str, Any]) -> None:
    """The lead line of a run with both modes: continuation against a resumed handshake, same seeded outages."""
    c, h = hf_means(cont), hf_means(resumed)
    print(f"cut_restore --hf: TLS continued / resumed handshake, restore to both open {c[0] / h[0]:.2f}x "
          f"({c[0]:.2f} vs {h[0]:.2f} s), SYN to open {c[1] / h[1]:.2f}x ({c[1]:.2f} vs {h[1]:.2f} s), bytes per "
          f"reconnection {c[2] / h[2]:.2f}x ({c[2]:.0f} vs {h[2]:.0f} B); target <= 3 s from the restore: "
          f"{'met' if c[0] <= 3 else 'MISSED'}")


def hf_report(r: dict[str, Any]) -> None:
    first, again = r["phases"][0], r["phases"][1:]
    mean, syn, per_resumed = hf_means(r)
    worst = max(p["seconds"] for p in again)
    how = "TLS continued" if r["tls_continue"] else "tls_continue = false"
    print(f"cut_restore --hf ({how}): a reconnection puts {first['link_bytes'] / per_resumed:.1f}x fewer bytes on "
          f"the link than the first connection ({per_resumed:.0f} vs {first['link_bytes']} B) and takes {mean:.2f} s "
          f"from the restore to both channels open ({syn:.2f} s from its first SYN; worst {worst:.2f} s) "
          f"at 2,400 bit/s and 300 ms; target <= 3 s: {'met' if mean <= 3 else 'MISSED'}")
    print(f"  first connection: {first['seconds']:.1f} s, {first['link_bytes']} bytes on the link (both ways), "
          f"dials {first['dials']}, handshakes {first['handshakes']}")
    for p in again:
        h, n = p["handshakes"], sum(p["dials"].values())
        print(f"  {p['phase']} (down {p['down']:g} s): restore to open {p['seconds']:.2f} s = restore to first SYN "
              f"{p['restore_to_syn']:.2f} s + SYN to open {p['syn_to_open']:.2f} s, {p['link_bytes']} bytes on the "
              f"link ({', '.join(f'{k} {b} B in {w} writes' for k, (b, w) in p['directions'].items())}), {n} "
              f"connection(s) (dials {p['dials']}), handshakes full {h['full']} resumed {h['resumed']}, "
              f"continued without one {h.get('continued', 0)}")
    f = r["tls_flights"]
    print(f"  TLS flights in memory (ClientHello, acceptor, dialer, ticket): full {f['full']} = {sum(f['full'])} B, "
          f"resumed {f['resumed']} = {sum(f['resumed'])} B; HELLO of a four-site mission "
          f"{r['hello_bytes_four_sites']} bytes with its compression offer; one link per pair: "
          f"{r['shape']['one_link_per_pair']}; only A dials on reconnection: {r['one_dialer']}")
    for kind in ("resumed", "full"):
        for i, recs in enumerate(f[f"{kind}_records"]):
            print(f"    {kind} flight {i + 1}: " + ", ".join(f"{t} {n}" for t, n in recs))
    print("  resumed ClientHello extensions (bytes with their headers): "
          + ", ".join(f"{k} {v}" for k, v in f["resumed_client_hello_extensions"].items()))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cycles", type=int, default=100)
    ap.add_argument("--hogs", type=int, default=2, help="CPU-bound processes at nice 19 beside the sites")
    ap.add_argument("--up", type=float, default=0.6, help="seconds the link is up before each cut")
    ap.add_argument("--down", type=float, default=0.4, help="seconds it stays down")
    ap.add_argument("--quick", action="store_true", help="2 short cycles per mode, no hogs")
    ap.add_argument("--hf", action="store_true", help="reconnections over a 2.4 kbit/s, 300 ms link (module doc)")
    ap.add_argument("--two-links", action="store_true",
                    help="with --hf: each site's dials on a link of their own (faultinject's default) instead of "
                         "one shared link per pair")
    ap.add_argument("--tls", choices=("both", "continue", "resume"), default="both",
                    help="with --hf: reconnections that continue the cut connection's TLS ([rcm] tls_continue, the "
                         "default), that resume its session with a handshake (tls_continue = false), or both in one "
                         "run, the lead line their ratio (default)")
    ap.add_argument("--one-dialer", action="store_true",
                    help="with --hf: on reconnection only A's dials reach B (B's fail at once), to measure what "
                         "a double dial costs")
    args = ap.parse_args()
    if args.hf:
        cycles = 3 if args.cycles == 100 else args.cycles
        runs = {m: asyncio.run(hf_mode(cycles, not args.two_links, args.one_dialer, continued=m == "continue"))
                for m in (("resume", "continue") if args.tls == "both" else (args.tls,))}
        if len(runs) == 2:
            hf_ratio(runs["continue"], runs["resume"])
        for r in runs.values():
            hf_report(r)
        name = 'cut_restore_hf_one_dialer' if args.one_dialer else 'cut_restore_hf'
        print(f"  written to {write_result(name, runs if len(runs) == 2 else next(iter(runs.values())))}")
        return 0
    if args.quick:
        args.cycles, args.hogs, args.up, args.down = 2, 0, 0.3, 0.2
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
