"""Log stall: one site's disk stalls (its next fdatasync blocks for --stall seconds) under light traffic.

Three sites all-to-all, each sending ``--rate`` messages/s; then site A's next
``fdatasync`` sleeps ``--stall`` seconds (a shared or slow disk), longer than
the mission's ``liveness_timeout``. With the sync inside the event loop (the
design before this benchmark) A froze: its peers heard nothing and suspected
it, and it suspected every peer when it woke. With the sync in a worker
thread (``rcm.server.commits``) A keeps reading, and liveness-only heartbeats
keep its peers' view right; what A's stalled batches promise waits.

The summary leads with the number of status changes away from ``connected``
that the sites' clients saw during and after the stall (0 is right), then
A's figures: its deliveries of what the others sent during the stall (all of
them, in order: nothing lost), the log syncs and the heartbeats that
overtook the held frames.

Each site's server runs in a process of its own (``serve``) with
``os.fdatasync`` wrapped: the stall starts when the benchmark creates a
trigger file, so the same script measures any version of the server.

    .venv/bin/python bench/wal_stall.py [--stall 3.0] [--rate 5]
    .venv/bin/python bench/wal_stall.py --quick       # a 1.5 s stall (a smoke run)
"""
from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import write_result  # noqa: E402

if TYPE_CHECKING:
    from _typeshed import FileDescriptorLike

SITES = ["A", "B", "C"]
START_WAIT = 60.0        # s a site's RCM server may take to start (a loaded machine: 10 s was not enough in CI)
TIMEOUTS = {"heartbeat_timeout": 0.25, "liveness_timeout": 1.0, "silence_timeout": 2.0, "suspect_timeout": 30.0,
            "reconnect_period": 0.2}


def site_process(mission_path: str, site: str, trigger: str, stall: float) -> None:
    """One site's server; its next fdatasync after ``trigger`` appears sleeps ``stall`` seconds."""
    import os

    from contracts.mission import load_mission
    from rcm.server import serve

    real = os.fdatasync

    def fdatasync(fd: FileDescriptorLike) -> None:
        if os.path.exists(trigger):
            os.unlink(trigger)
            time.sleep(stall)
        real(fd)

    os.fdatasync = fdatasync
    asyncio.run(serve(load_mission(mission_path), site))


async def run(stall: float, rate: float, before: float = 2.0, after: float = 3.0) -> dict[str, Any]:
    from contracts.mission import load_mission
    from faultinject.missions import write_mission
    from faultinject.procs import wait_clients_connected
    from rcm.client import Delivery, RcmClient, RcmUnavailable, StatusChange, socket_path

    with tempfile.TemporaryDirectory(prefix="rcm-stall-") as d:
        path = write_mission(Path(d) / "m.toml", "stall", SITES, rcm=TIMEOUTS)
        m = load_mission(path)
        trigger = Path(d) / "stall-A"
        ctx = mp.get_context("spawn")
        procs = [ctx.Process(target=site_process, args=(str(path), s, str(trigger) if s == "A" else "/nonexistent",
                                                        stall)) for s in SITES]
        for p in procs:
            p.start()
        clients: dict[str, RcmClient] = {}
        tasks: list[asyncio.Task[Any]] = []
        try:
            for s in SITES:
                deadline = time.monotonic() + START_WAIT
                while True:
                    try:
                        clients[s] = await RcmClient.connect(socket_path(m, s), name="bench")
                        break
                    except RcmUnavailable:
                        if time.monotonic() > deadline:
                            raise RuntimeError(f"site {s} did not start in {START_WAIT:.0f} s") from None
                        await asyncio.sleep(0.05)
            await wait_clients_connected(clients, 30.0)
            away: list[tuple[str, str, str, float]] = []      # (at site, about, status, when)
            got: dict[str, list[tuple[str, int]]] = {s: [] for s in SITES}
            watching = False

            async def watch(site: str, c: RcmClient) -> None:
                async for ev in c.events():
                    if isinstance(ev, StatusChange) and watching and ev.status != "connected":
                        away.append((site, ev.site, ev.status, time.time()))
                    elif isinstance(ev, Delivery):
                        got[site].append((ev.origin, ev.seq))

            sent: dict[str, list[int]] = {s: [] for s in SITES}
            stop = asyncio.Event()

            async def sender(site: str, c: RcmClient) -> None:
                while not stop.is_set():
                    acc = await c.send(f"{site} {time.time():.3f}".encode())
                    sent[site].append(acc.seq)
                    await asyncio.sleep(1.0 / rate)

            tasks += [asyncio.create_task(watch(s, c)) for s, c in clients.items()]
            tasks += [asyncio.create_task(sender(s, c)) for s, c in clients.items()]
            await asyncio.sleep(before)
            watching = True
            a_stats0 = await clients["A"].stats()
            trigger.touch()
            t0 = time.time()
            while trigger.exists():                          # A's next sync takes it
                await asyncio.sleep(0.01)
            await asyncio.sleep(stall + after)
            stop.set()
            await asyncio.gather(*tasks[len(clients):], return_exceptions=True)
            want = {s: len(sent[s]) for s in SITES}

            def all_in() -> bool:
                return all(sum(1 for o, _ in got[at] if o == s) >= want[s] for at in SITES for s in SITES)

            deadline = time.time() + 20
            while not all_in() and time.time() < deadline:
                await asyncio.sleep(0.05)
            a_stats = await clients["A"].stats()
        finally:
            for t in tasks:
                t.cancel()
            for c in clients.values():
                await c.close()
            for p in procs:
                p.terminate()                                # SIGTERM: serve() stops cleanly
            for p in procs:
                p.join(10)
    at_a = [(o, q) for o, q in got["A"] if o != "A"]
    in_order = all([q for o, q in at_a if o == s] == sorted(q for o, q in at_a if o == s) for s in ("B", "C"))
    lost = {s: sorted(set(sent[s]) - {q for o, q in got["A"] if o == s}) for s in SITES}
    wal0, wal1 = a_stats0.get("wal", {}), a_stats.get("wal", {})
    return {"sites": len(SITES), "stall_s": stall, "rate_per_site": rate, "timeouts": TIMEOUTS,
            "status_changes_away": len(away), "away": [list(x[:3]) + [round(x[3] - t0, 3)] for x in away],
            "suspected_a": sum(1 for x in away if x[1] == "A"), "suspected_by_a": sum(1 for x in away if x[0] == "A"),
            "delivered_at_a": len(at_a), "lost_at_a": {s: v for s, v in lost.items() if v}, "in_order_at_a": in_order,
            "a_wal_syncs_in_window": wal1.get("syncs", 0) - wal0.get("syncs", 0),
            "a_keepalives": wal1.get("keepalives"), "sent": {s: len(v) for s, v in sent.items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stall", type=float, default=3.0, help="seconds A's fdatasync blocks (liveness_timeout 1 s)")
    ap.add_argument("--rate", type=float, default=5.0, help="messages/s per site")
    ap.add_argument("--quick", action="store_true", help="a 1.5 s stall, short lead and tail (a smoke run)")
    a = ap.parse_args()
    r = asyncio.run(run(1.5, a.rate, before=0.5, after=1.0) if a.quick else run(a.stall, a.rate))
    path = write_result("wal_stall_quick" if a.quick else "wal_stall", r)
    print(f"wal_stall: {r['status_changes_away']} status changes away from connected during and after a "
          f"{r['stall_s']:g} s log stall at A (liveness_timeout {TIMEOUTS['liveness_timeout']:g} s; "
          f"{r['suspected_a']} of A by its peers, {r['suspected_by_a']} by A); A delivered {r['delivered_at_a']} "
          f"messages of B and C, lost {sum(len(v) for v in r['lost_at_a'].values())}, in order: {r['in_order_at_a']}; "
          f"{r['a_wal_syncs_in_window']} log syncs at A in the window, {r['a_keepalives']} liveness heartbeats "
          f"ahead of held frames -> {path}")


if __name__ == "__main__":
    main()
