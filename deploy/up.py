"""``python -m deploy up``: every chosen site's RCM and chat server, supervised, merged logs.

The console shows each child's log lines prefixed with its site (one colour
per site) and role, supervisor events (start, exit, restart back-off), and the
health of every site whenever it changes (polled from each chat server's
``/health``). Ctrl-C or SIGTERM stops the chat servers, then the RCM servers,
and exits 0.
"""
from __future__ import annotations

import asyncio
import errno
import os
import signal
import socket
from collections.abc import Callable
from pathlib import Path

import aiohttp
from rich.console import Console
from rich.markup import escape

from contracts.mission import Mission

from .supervisor import Supervisor, health_line

COLORS = ["cyan", "magenta", "green", "yellow", "blue", "red", "bright_cyan", "bright_magenta",
          "bright_green", "bright_yellow", "bright_blue", "bright_red"]


def site_colors(sites: list[str]) -> dict[str, str]:
    return {s: COLORS[i % len(COLORS)] for i, s in enumerate(sites)}


def missing_tls(mission: Mission, sites: list[str]) -> list[Path]:
    """TLS files a ``tls = true`` mission needs at these sites and that are absent."""
    if not mission.rcm.tls:
        return []
    out = []
    for s in sites:
        d = mission.site_dir(s) / "tls"
        out += [d / n for n in ("ca.pem", "cert.pem", "key.pem") if not (d / n).exists()]
    return out


def long_socket_paths(mission: Mission, sites: list[str]) -> list[Path]:
    """RCM client socket paths too long for a Unix socket (the RCM server refuses them)."""
    from rcm.wire.local import socket_path
    return [p for p in (socket_path(mission, s) for s in sites) if len(os.fsencode(p)) > 100]


def preflight(mission: Mission, sites: list[str], mission_arg: str, check_ports: bool = True) -> str | None:
    """The first reason these sites cannot start on this machine, or None."""
    missing = missing_tls(mission, sites)
    if missing:
        return (f"tls = true but {missing[0]} is missing: create certificates with "
                f"`python -m deploy certs --mission {mission_arg}`")
    long = long_socket_paths(mission, sites)
    if long:
        return f"[mission] data_dir is too deep: the RCM socket {long[0]} is longer than 100 bytes"
    busy = busy_addresses(mission, sites) if check_ports else []
    if busy:
        return f"address already in use: {busy[0]} (is the mission already up?)"
    return None


def busy_addresses(mission: Mission, sites: list[str]) -> list[str]:
    """``sites.X.rcm``/``chat`` addresses of this machine that something already listens on."""
    busy = []
    for s in sites:
        for key in ("rcm", "chat"):
            a = getattr(mission.site(s), key)
            fam = socket.AF_INET6 if ":" in a.host else socket.AF_INET
            with socket.socket(fam, socket.SOCK_STREAM) as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    sock.bind((a.host, a.port))
                except OSError as e:
                    if e.errno == errno.EADDRINUSE:
                        busy.append(f"sites.{s}.{key} = {a}")
                    # EADDRNOTAVAIL: not an address of this host (another host's site); the child says so
    return busy


class ConsoleView:
    """Merged site-coloured logs and health lines on a rich console."""

    def __init__(self, console: Console, sites: list[str], show_logs: bool = True) -> None:
        self.console = console
        self.color = site_colors(sites)
        self.width = max(len(s) for s in sites)
        self.show_logs = show_logs
        self._last: dict[str, list[str]] = {}

    def tag(self, site: str, role: str) -> str:
        return f"[{self.color.get(site, 'white')}]{site:>{self.width}} {role:<4}[/]"

    def line(self, site: str, role: str, text: str) -> None:
        if self.show_logs:
            self.console.print(f"{self.tag(site, role)} {escape(text)}", soft_wrap=True)

    def event(self, site: str, role: str, what: str) -> None:
        style = "bold red" if ("exited" in what or "killed" in what or "cannot" in what) else "bold"
        self.console.print(f"{self.tag(site, role)} [{style}]supervisor: {escape(what)}[/]", soft_wrap=True)

    def health(self, sup: Supervisor, force: bool = False) -> None:
        snap = sup.snapshot()
        lines = {s: health_line(s, snap[s]["health"], snap[s]["processes"]) for s in sup.sites}
        key = {s: ln.split(", ") for s, ln in lines.items()}
        stable = {s: [w for w in k if not w.endswith("delivered")] for s, k in key.items()}
        if not force and stable == self._last:
            return
        self._last = stable
        for s in sup.sites:
            self.console.print(f"{self.tag(s, 'up')} [bold]health:[/] {escape(lines[s])}", soft_wrap=True)


async def run_up(mission_path: Path, sites: list[str] | None, console: Console, *, log_level: str = "info",
                 status_interval: float = 5.0, show_logs: bool = True,
                 wrap: Callable[[str], list[str]] | None = None, banner: str | None = None) -> int:
    """Run until SIGINT/SIGTERM; returns 0 after a clean stop, 2 when every server failed to start (each exited
    with status 2, which is not restarted: nothing is left to supervise)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    code = 0
    view: ConsoleView | None = None
    sup = Supervisor(mission_path, sites, wrap=wrap, log_level=log_level,
                     on_line=lambda s, r, t: view.line(s, r, t) if view else None,
                     on_event=lambda s, r, w: view.event(s, r, w) if view else None)
    view = ConsoleView(console, sup.sites, show_logs)
    console.print(banner or f"[bold]deploy up[/]: mission {sup.mission.name}, sites {', '.join(sup.sites)}; "
                  f"logs in {sup.mission.data_dir}/<site>/logs/; Ctrl-C stops", soft_wrap=True)
    for s in sup.sites:
        console.print(f"{view.tag(s, 'up')} web UI {sup.chat_http(s)}/   RCM {sup.mission.site(s).rcm}",
                      soft_wrap=True)
    try:
        await sup.start()
        async with aiohttp.ClientSession() as http:
            while not stop.is_set():
                if all(sp.state == "failed" for sp in sup.procs.values()):
                    console.print("[bold red]deploy up[/]: every server failed to start (see their lines above); "
                                  "nothing to supervise", soft_wrap=True)
                    code = 2
                    break
                await sup.health(http)
                sup.write_status()
                view.health(sup)
                try:
                    await asyncio.wait_for(stop.wait(), status_interval)
                except TimeoutError:
                    pass
    finally:
        console.print("[bold]stopping[/]: chat servers, then RCM servers")
        codes = await sup.stop()
        sup.write_status()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
    bad = {f"{s} {r}": c for (s, r), c in codes.items() if c not in (0, None)}
    console.print(f"[bold]stopped[/]: every process exited{'' if not bad else f' (non-zero: {bad})'}")
    return code
