"""Server processes of a mission's sites on this machine (tests, benchmarks, the runner, the demo).

``SiteProcesses`` starts one ``python -m MODULE --mission F --site S`` per site,
waits until it is ready, kills it with SIGKILL (a crash) or stops it with
SIGTERM (SIGKILL after a grace period); each process logs to
``data_dir/<site>/logs/<name>.log``. ``LocalRcm`` runs RCM servers (ready when
the client socket answers), ``LocalChat`` chat servers (ready when the HTTP
port answers); ``add_users`` makes accounts with ``python -m chat_server
adduser``; ``chat_endpoint`` is where a site's chat server answers. The one
home of the local launcher: deploy (``deploy up``, the demo) uses it too.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from contracts.mission import Mission, load_mission


class SiteProcesses:
    """One server process per site of a mission (subclasses name the module)."""

    module = ""                 # what ``python -m`` runs
    log_name = ""               # data_dir/<site>/logs/<log_name>.log
    what = "server"
    ready_timeout = 20.0
    grace = 10.0

    def __init__(self, mission_path: Path, sites: list[str] | None = None, log_level: str = "info",
                 env: dict[str, str] | None = None) -> None:
        self.mission_path = Path(mission_path)
        self.mission: Mission = load_mission(self.mission_path)
        self.sites = sites or list(self.mission.sites)
        self.log_level = log_level
        self.env = {**os.environ, **(env or {})}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def is_ready(self, site: str) -> bool:
        raise NotImplementedError

    def start(self, site: str) -> subprocess.Popen[bytes]:
        logdir = self.mission.site_dir(site) / "logs"
        logdir.mkdir(parents=True, exist_ok=True)
        with open(logdir / f"{self.log_name}.log", "ab") as log:
            p = subprocess.Popen([sys.executable, "-m", self.module, "--mission", str(self.mission_path),
                                  "--site", site, "--log-level", self.log_level],
                                 stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=self.env)
        self.procs[site] = p
        return p

    def start_all(self, timeout: float | None = None) -> None:
        for s in self.sites:
            self.start(s)
        for s in self.sites:
            self.wait_ready(s, timeout)

    def wait_ready(self, site: str, timeout: float | None = None) -> None:
        timeout = self.ready_timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            p = self.procs[site]
            if p.poll() is not None:
                raise RuntimeError(f"{self.what} {site} exited with {p.returncode}: {self.log_tail(site)}")
            if self.is_ready(site):
                return
            time.sleep(0.05)
        raise TimeoutError(f"{self.what} {site} not ready after {timeout} s: {self.log_tail(site)}")

    def log_tail(self, site: str, lines: int = 20) -> str:
        path = self.mission.site_dir(site) / "logs" / f"{self.log_name}.log"
        try:
            return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"

    def alive(self, site: str) -> bool:
        p = self.procs.get(site)
        return p is not None and p.poll() is None

    def kill(self, site: str) -> None:
        """SIGKILL, as a crash."""
        p = self.procs.pop(site, None)
        if p is not None and p.poll() is None:
            p.kill()
            p.wait()

    def stop(self, site: str, grace: float | None = None, *, signalled: bool = False) -> int | None:
        """SIGTERM (unless ``signalled`` already: a second one during a graceful shutdown kills the
        server with the signal's default action), then SIGKILL after the grace period; the exit status."""
        p = self.procs.pop(site, None)
        if p is None:
            return None
        if p.poll() is None:
            if not signalled:
                p.send_signal(signal.SIGTERM)
            try:
                p.wait(self.grace if grace is None else grace)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        return p.returncode

    def stop_all(self) -> dict[str, int | None]:
        for p in self.procs.values():       # signal every one first, then wait: they stop in parallel
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        return {s: self.stop(s, signalled=True) for s in list(self.procs)}

    def __enter__(self) -> SiteProcesses:
        self.start_all()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop_all()


class LocalChat(SiteProcesses):
    """The chat server processes of a mission's sites."""

    module = "chat_server"
    log_name = "chat"
    what = "chat server"
    ready_timeout = 30.0
    grace = 15.0

    def is_ready(self, site: str) -> bool:
        """The site's chat port accepts connections."""
        c = self.mission.site(site).chat
        try:
            with socket.create_connection((c.host, c.port), 0.5):
                return True
        except OSError:
            return False

    def url(self, site: str) -> str:
        c = self.mission.site(site).chat
        return f"ws://{c.host}:{c.port}/ws"

    def http(self, site: str) -> str:
        c = self.mission.site(site).chat
        return f"http://{c.host}:{c.port}"

    def add_users(self, users: dict[str, list[str]], password: str, roles: Sequence[str] = ()) -> None:
        """Create accounts (site -> user names), all adduser processes at once; each holds ``roles``
        (e.g. ``flash``, which sending FLASH needs: [chat] flash_role)."""
        running = []
        for site, names in users.items():
            for u in names:
                running.append((site, u, subprocess.Popen(
                    [sys.executable, "-m", "chat_server", "adduser", "--mission", str(self.mission_path),
                     "--site", site, *(f"--role={r}" for r in roles), u],
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT, env=self.env)))
        for site, u, p in running:
            out, _ = p.communicate((password + "\n").encode(), timeout=60)
            if p.returncode != 0:
                raise RuntimeError(f"adduser {u} at {site} failed: {out.decode(errors='replace').strip()}")


class LocalRcm(SiteProcesses):
    """The RCM server processes of a mission's sites on this machine."""

    module = "rcm"
    log_name = "rcm"
    what = "rcm"

    def is_ready(self, site: str) -> bool:
        """The site's client socket accepts connections."""
        path = self.mission.site_dir(site) / "rcm" / "rcm.sock"
        if not path.exists():
            return False
        with socket.socket(socket.AF_UNIX) as s:
            try:
                s.connect(str(path))
                return True
            except OSError:
                return False


async def add_users(mission_path: Path, users: dict[str, list[str]], password: str,
                    env: dict[str, str] | None = None, roles: Sequence[str] = ()) -> None:
    """Create accounts with ``python -m chat_server adduser`` (site -> user names), each holding ``roles``.

    Sites are done in parallel, each site's users one after another (one
    writer at a time on a site's database). An existing user gets the new
    password (``--replace``). Raises RuntimeError naming the user on failure.
    """
    import asyncio

    async def one_site(site: str, names: list[str]) -> None:
        for user in names:
            p = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "chat_server", "adduser", "--mission", str(mission_path), "--site", site,
                "--replace", *(f"--role={r}" for r in roles), user,
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                env={**os.environ, **(env or {})})
            out, _ = await p.communicate((password + "\n").encode())
            if p.returncode != 0:
                raise RuntimeError(f"adduser {user} at {site} failed: {out.decode(errors='replace').strip()}")

    await asyncio.gather(*(one_site(s, names) for s, names in users.items()))


def chat_endpoint(mission: Mission, site: str, ws: bool = False) -> tuple[str, Any]:
    """Base URL of ``site``'s chat server (http(s)://host:port or ws(s)://host:port/ws) and the
    SSL context to reach it (None for plain HTTP): HTTPS with the mission CA when ``[chat] tls``
    (which follows ``[rcm] tls`` unless set) is on."""
    from chat_server.client import client_ssl_context
    from chat_server.config import chat_settings
    from rcm.tls import tls_paths

    c = mission.site(site).chat
    host = f"[{c.host}]" if ":" in c.host else c.host
    tls = bool(chat_settings(mission).tls)
    ctx = client_ssl_context(tls_paths(mission, site)["ca"]) if tls else None
    if ws:
        return f"{'wss' if tls else 'ws'}://{host}:{c.port}/ws", ctx
    return f"{'https' if tls else 'http'}://{host}:{c.port}", ctx
