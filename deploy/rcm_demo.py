"""An RCM-level demo: every site of a mission on this machine, a scripted sender at each.

Starts the RCM server of every site, connects a client to each, sends two
messages per second from every site, and prints what one site (the first)
delivers, every status change seen anywhere, and a summary per site every five
seconds. Halfway through, one site's server is killed (SIGKILL) and restarted
ten seconds later so that the others see it suspected and connected again.
Ctrl-C stops everything cleanly.
"""
from __future__ import annotations

import asyncio
import random
import signal
import time
from pathlib import Path

from rich.console import Console

from rcm.client import Delivery, Missing, RcmClient, RcmUnavailable, StatusChange, socket_path

from .local import LocalRcm

COLORS = ["cyan", "magenta", "green", "yellow", "blue", "red", "bright_cyan", "bright_magenta"]
STATUS_STYLE = {"connected": "green", "suspected": "yellow", "disconnected": "red"}


async def run_demo(mission_path: Path, duration: float, console: Console) -> int:
    servers = LocalRcm(mission_path, log_level="warning")
    sites = servers.sites
    color = {s: COLORS[i % len(COLORS)] for i, s in enumerate(sites)}
    watch = sites[0]
    victim = sites[-1]
    counts = {s: {"delivered": 0, "late": 0, "sent": 0} for s in sites}
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)

    def tag(s: str) -> str:
        return f"[{color[s]}]{s:>8}[/]"

    console.print(f"[bold]RCM demo[/]: mission {servers.mission.name}, sites {', '.join(sites)}; "
                  f"data in {servers.mission.data_dir}")
    await asyncio.to_thread(servers.start_all)
    clients: dict[str, RcmClient] = {}
    tasks: list[asyncio.Task] = []

    async def attach(site: str) -> None:
        while not stop.is_set():
            try:
                c = await RcmClient.connect(socket_path(servers.mission, site), name="demo")
            except RcmUnavailable:
                await asyncio.sleep(0.5)
                continue
            clients[site] = c
            try:
                async for ev in c.events():
                    if isinstance(ev, Delivery):
                        counts[site]["delivered"] += 1
                        counts[site]["late"] += ev.late
                        if site == watch:
                            late = " [bold red]LATE[/]" if ev.late else ""
                            console.print(f"{tag(site)} deliver {ev.msg_id:<14} order={ev.order} "
                                          f"{ev.payload.decode(errors='replace')!r}{late}")
                    elif isinstance(ev, StatusChange):
                        st = STATUS_STYLE.get(ev.status, "white")
                        console.print(f"{tag(site)} sees {ev.site}: [{st}]{ev.status}[/]")
                    elif isinstance(ev, Missing):
                        console.print(f"{tag(site)} [red]{len(ev.seqs)} messages from {ev.origin} "
                                      f"will never arrive[/]")
            except RcmUnavailable:
                clients.pop(site, None)
                await asyncio.sleep(0.5)

    async def sender(site: str) -> None:
        rng = random.Random(site)
        await asyncio.sleep(rng.uniform(0, 0.5))
        n = 0
        while not stop.is_set():
            c = clients.get(site)
            if c is not None:
                n += 1
                try:
                    await c.send(f"{site} says hello #{n}".encode())
                    counts[site]["sent"] += 1
                except RcmUnavailable:
                    pass
            await asyncio.sleep(0.5)

    async def script() -> None:
        t0 = time.monotonic()
        kill_at, restart_at = duration / 2, duration / 2 + 10
        killed = restarted = False
        while not stop.is_set():
            t = time.monotonic() - t0
            if t >= duration:
                stop.set()
                break
            if not killed and t >= kill_at:
                console.print(f"[bold red]--- killing {victim}'s RCM server (kill -9) ---[/]")
                servers.kill(victim)
                killed = True
            if killed and not restarted and t >= restart_at:
                console.print(f"[bold green]--- restarting {victim}'s RCM server ---[/]")
                await asyncio.to_thread(servers.start, victim)
                restarted = True
            if int(t) % 5 == 0 and int(t) > 0:
                line = "  ".join(f"{s}: {c['sent']} sent {c['delivered']} delivered {c['late']} late"
                                 for s, c in counts.items())
                console.print(f"[dim]t={int(t):>3}s  {line}[/]")
            await asyncio.sleep(1.0)

    try:
        tasks = [asyncio.create_task(attach(s)) for s in sites] + \
                [asyncio.create_task(sender(s)) for s in sites]
        await script()
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for c in list(clients.values()):
            await c.close()
        codes = await asyncio.to_thread(servers.stop_all)
    console.print(f"[bold]stopped[/]: exit codes {codes}; per-site logs in "
                  f"{servers.mission.data_dir}/<site>/logs/")
    return 0
