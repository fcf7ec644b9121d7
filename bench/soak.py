"""Soak: four sites for 30 minutes on flapping links, with a misbehaving client and a frozen peer; RSS over time.

What runs (all real processes, this machine):

* four sites (RCM server + chat server each) behind link proxies; three of the
  six links follow the paper's 30 s up / 10 s down schedule for the whole run;
* one user per site posting at 2 msg/s into one room, read by a client at
  every site;
* a misbehaving client at site A: it joins the busy room and never reads its
  socket (the server must drop it as a slow consumer, and it comes back), then
  sends malformed and oversized frames;
* a peer that is connected but silent: site D's RCM server is frozen
  (SIGSTOP) for 20 s of every 90 s, so its TCP connections stay open while
  nothing comes out of it.

Every 5 s the resident set size (VmRSS) of every RCM and chat server process
is sampled. Bounded memory shows as flat RSS: the summary leads with the ratio
of each process kind's RSS over the last fifth of the run to its RSS over the
second fifth (after warm-up), then absolute figures. The samples go to
``bench/results/soak.json`` and a plot to ``bench/results/soak-rss.png``
(``--plot PATH`` to put it elsewhere, e.g. docs/img/).

    .venv/bin/python bench/soak.py                 # 30 minutes
    .venv/bin/python bench/soak.py --minutes 5
    .venv/bin/python bench/soak.py --quick         # 2.4 s of traffic, links flapping (a smoke run)
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import aiohttp  # noqa: E402

from bench._common import RESULTS, write_result  # noqa: E402
from chat_server.accounts import hash_password  # noqa: E402
from chat_server.client import ChatClient  # noqa: E402
from chat_server.store import ChatStore  # noqa: E402
from contracts.mission import load_mission  # noqa: E402
from faultinject.links import LinkSet  # noqa: E402
from faultinject.missions import write_mission  # noqa: E402
from faultinject.procs import LocalChat, LocalRcm, wait_connected  # noqa: E402
from faultinject.schedule import periodic  # noqa: E402

SITES = ["A", "B", "C", "D"]
FLAPPING = [("A", "C"), ("B", "D"), ("C", "D")]
PASSWORD = "soak-pw"
ROOM = "ops"


def add_accounts(mission: Any, users: dict[str, list[str]]) -> None:
    """Accounts straight into each site's database (cheap hashes: the soak measures memory, not logins)."""
    pw = hash_password(PASSWORD, 1024)
    for site, names in users.items():
        store = ChatStore(mission.site_dir(site) / "chat" / "chat.db")
        for u in names:
            store.add_user(u, pw)
        store.close()


def rss_bytes(pid: int) -> int | None:
    """Resident set size of a process (Linux /proc), None once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


async def poster(client: ChatClient, site: str, rate: float, stop: float, counts: dict[str, int]) -> None:
    i = 0
    t0 = time.monotonic()
    while time.monotonic() < stop:
        i += 1
        try:
            await client.say(ROOM, f"{site} soak line {i}")
            counts["acked"] += 1
        except Exception:  # noqa: BLE001 - refusals during outages are expected; count them
            counts["refused"] += 1
        await asyncio.sleep(max(0.0, t0 + i / rate - time.monotonic()))


async def misbehave(url: str, stop: float, counts: dict[str, int]) -> None:
    """Join the busy room and never read; after the server drops us, send junk; repeat."""
    while time.monotonic() < stop:
        try:
            async with aiohttp.ClientSession() as http:
                async with http.ws_connect(url, max_msg_size=0, autoping=False) as ws:
                    await ws.send_str(json.dumps({"type": "hello", "user": "mallory", "password": PASSWORD}))
                    await ws.send_str(json.dumps({"type": "join", "room": ROOM}))
                    # Never read: the server's queue for us fills until it drops us as a slow consumer.
                    end = min(stop, time.monotonic() + 60)
                    while time.monotonic() < end and not ws.closed:
                        await asyncio.sleep(1.0)
                        await ws.send_str("{not json")
                        await ws.send_str(json.dumps({"type": "say", "room": ROOM, "text": "x" * 20_000,
                                                      "client_id": "big"}))
                    counts["misbehaving_sessions"] += 1
        except Exception:  # noqa: BLE001 - the server closing us is the expected outcome
            counts["misbehaving_sessions"] += 1
        await asyncio.sleep(1.0)


async def freezer(rcm: LocalRcm, site: str, period: float, frozen: float, stop: float,
                  counts: dict[str, int]) -> None:
    """Freeze the site's RCM server (SIGSTOP) for ``frozen`` seconds of every ``period``."""
    while True:
        await asyncio.sleep(max(0.0, period - frozen))
        if time.monotonic() + frozen > stop:
            return
        p = rcm.procs.get(site)
        if p is None or p.poll() is not None:
            return
        os.kill(p.pid, signal.SIGSTOP)
        counts["freezes"] += 1
        try:
            await asyncio.sleep(frozen)
        finally:
            os.kill(p.pid, signal.SIGCONT)


def plot(samples: list[dict[str, Any]], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.5))
    names = sorted({k for s in samples for k in s["rss"]})
    for name in names:
        xs = [s["t"] / 60 for s in samples if name in s["rss"]]
        ys = [s["rss"][name] / 2**20 for s in samples if name in s["rss"]]
        ax.plot(xs, ys, label=name, linestyle="-" if name.startswith("rcm") else "--")
    ax.set_xlabel("minutes")
    ax.set_ylabel("RSS (MiB)")
    ax.set_title("Soak: RSS of every RCM and chat server (4 sites, flapping links, misbehaving client, frozen peer)")
    ax.title.set_fontsize(9)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(ncol=4, fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def growth(samples: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per process: median RSS over the second fifth and the last fifth of the run, and their ratio."""
    out: dict[str, dict[str, float]] = {}
    n = len(samples)
    early, late = samples[n // 5: 2 * n // 5] or samples[:1], samples[4 * n // 5:] or samples[-1:]
    for name in sorted({k for s in samples for k in s["rss"]}):
        a = [s["rss"][name] for s in early if name in s["rss"]]
        b = [s["rss"][name] for s in late if name in s["rss"]]
        if a and b:
            ea, lb = statistics.median(a), statistics.median(b)
            out[name] = {"early_mib": ea / 2**20, "late_mib": lb / 2**20, "ratio": lb / ea}
    return out


async def run(minutes: float, rate: float, sample_every: float, freeze: tuple[float, float],
              flap: tuple[float, float] = (30.0, 10.0)) -> dict[str, Any]:
    duration = minutes * 60
    counts = {"acked": 0, "refused": 0, "misbehaving_sessions": 0, "freezes": 0}
    samples: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="rcm-soak-") as d:
        mpath = write_mission(Path(d) / "mission.toml", "soak", SITES, proxies=True, data_dir="data")
        mission = load_mission(mpath)
        links = LinkSet(mission)
        rcm, chat = LocalRcm(mpath, log_level="warning"), LocalChat(mpath, log_level="warning")
        clients: list[ChatClient] = []
        await links.start()
        try:
            await asyncio.to_thread(rcm.start_all, 30.0)
            users = {s: [f"{s.lower()}user"] for s in SITES}
            users["A"].append("mallory")
            add_accounts(mission, users)
            for s in SITES:
                chat.start(s)
            for s in SITES:
                await asyncio.to_thread(chat.wait_ready, s, 30.0)
            await wait_connected(chat.mission, SITES, 60.0, interval=0.2)
            for s in SITES:
                c = await ChatClient.connect(chat.url(s), f"{s.lower()}user", PASSWORD, reconnect=True,
                                             max_events=1000)
                await c.join(ROOM)
                clients.append(c)
            t0 = time.monotonic()
            stop = t0 + duration
            sched = links.start_schedule(periodic(FLAPPING, up=flap[0], down=flap[1], until=duration))
            tasks = [asyncio.create_task(poster(c, s, rate, stop, counts)) for c, s in zip(clients, SITES)]
            tasks.append(asyncio.create_task(misbehave(chat.url("A"), stop, counts)))
            tasks.append(asyncio.create_task(freezer(rcm, "D", freeze[0], freeze[1], stop, counts)))
            while time.monotonic() < stop:
                rss: dict[str, int] = {}
                for kind, procs in (("rcm", rcm.procs), ("chat", chat.procs)):
                    for site, p in procs.items():
                        v = rss_bytes(p.pid)
                        if v is not None:
                            rss[f"{kind} {site}"] = v
                samples.append({"t": round(time.monotonic() - t0, 1), "rss": rss})
                for c in clients:
                    c.drain_events()
                await asyncio.sleep(sample_every)
            for t in tasks[-2:]:            # the misbehaving client and the freezer (it resumes D as it ends)
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            sched.cancel()
            await asyncio.gather(sched, return_exceptions=True)
        finally:
            for c in clients:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(c.close(), 5)
            for p in rcm.procs.values():               # never leave a frozen process behind
                with contextlib.suppress(OSError):
                    os.kill(p.pid, signal.SIGCONT)
            await asyncio.to_thread(chat.stop_all)
            await asyncio.to_thread(rcm.stop_all)
            await links.close()
    return {"minutes": minutes, "rate_per_site": rate, "counts": counts, "samples": samples,
            "growth": growth(samples)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--rate", type=float, default=2.0, help="messages/s per site")
    ap.add_argument("--quick", action="store_true", help="2.4 s of traffic, fast flapping (a smoke run)")
    ap.add_argument("--plot", type=Path, default=None, help="the RSS plot (default bench/results/soak-rss.png)")
    a = ap.parse_args()
    if a.plot is None:
        a.plot = RESULTS / ("soak-rss_quick.png" if a.quick else "soak-rss.png")
    minutes, every, freeze, flap = ((0.04, 0.4, (1.5, 0.5), (0.8, 0.4)) if a.quick
                                    else (a.minutes, 5.0, (90.0, 20.0), (30.0, 10.0)))
    doc = asyncio.run(run(minutes, a.rate, every, freeze, flap))
    path = write_result("soak_quick" if a.quick else "soak", doc)
    plot(doc["samples"], a.plot)
    g = doc["growth"]
    worst = max(g.items(), key=lambda kv: kv[1]["ratio"]) if g else ("-", {"ratio": float("nan")})
    kinds = {k: max((v["ratio"] for n, v in g.items() if n.startswith(k)), default=float("nan"))
             for k in ("rcm", "chat")}
    print(f"soak: RSS late/early ratio, worst process {worst[0]} {worst[1]['ratio']:.2f} "
          f"(rcm worst {kinds['rcm']:.2f}, chat worst {kinds['chat']:.2f}) over {minutes:g} min")
    for name, v in g.items():
        print(f"  {name:8} {v['early_mib']:7.1f} MiB -> {v['late_mib']:7.1f} MiB  (x{v['ratio']:.2f})")
    c = doc["counts"]
    print(f"  {c['acked']} says acked, {c['refused']} refused; {c['misbehaving_sessions']} misbehaving sessions; "
          f"{c['freezes']} freezes of D's RCM -> {path}, plot {a.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
