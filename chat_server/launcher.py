"""A site's server processes on this machine: the one launcher (``deploy up``, tests, benchmarks, the runner).

A site is an RCM server with a chat server on top. This module says once how each is
started (``server_argv``, ``server_env``), where it logs (``log_path``), when it is
ready (``rcm_ready``, ``chat_ready``), where its chat server answers
(``chat_endpoint``), how accounts are made (``adduser_argv``, ``add_users``), and when
a site is connected to its peers (``chat_health``, ``peers_connected``,
``wait_connected``; ``wait_clients_connected`` for RCM alone). ``deploy.supervisor``
starts the same commands under its restart loop; ``SiteProcesses`` (``LocalRcm``,
``LocalChat``) runs them directly, for tests, benchmarks and ``faultinject``'s runner
(which re-exports them as ``faultinject.procs``).

It lives in chat_server, not deploy, because the package map lets both deploy and
faultinject import chat_server (faultinject may not import deploy), and chat_server is
the lowest package that knows both servers (it is RCM's client; its settings decide
whether the chat endpoint is HTTPS). Production code (deploy's supervisor and its
health check) so imports no test tool.
"""
from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp

from contracts.mission import Mission, load_mission
from contracts.status import LinkStatus

if TYPE_CHECKING:
    from rcm.client import RcmClient

REPO = Path(__file__).resolve().parents[1]
ROLES = ("rcm", "chat")                         # a site's processes, in start order
MODULES = {"rcm": "rcm", "chat": "chat_server"}   # what ``python -m`` runs for each role
Health = dict[str, Any]


def server_argv(mission_path: Path, site: str, role: str, log_level: str = "info") -> list[str]:
    """The command line of ``site``'s ``role`` server (Contract 4: ``python -m MODULE --mission F --site S``)."""
    return [sys.executable, "-m", MODULES[role], "--mission", str(mission_path), "--site", site,
            "--log-level", log_level]


def server_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment plus ``env``, with the repository first on PYTHONPATH (any working directory)."""
    out = {**os.environ, **(env or {})}
    out["PYTHONPATH"] = str(REPO) + (os.pathsep + out["PYTHONPATH"] if out.get("PYTHONPATH") else "")
    return out


def log_path(mission: Mission, site: str, role: str) -> Path:
    """Where ``site``'s ``role`` server logs: ``data_dir/<site>/logs/<role>.log``."""
    return mission.site_dir(site) / "logs" / f"{role}.log"


def rcm_ready(mission: Mission, site: str) -> bool:
    """Does ``site``'s RCM client socket accept connections?"""
    from rcm.client import socket_path
    path = socket_path(mission, site)
    if not path.exists():
        return False
    with socket.socket(socket.AF_UNIX) as s:
        try:
            s.connect(str(path))
            return True
        except OSError:
            return False


def chat_ready(mission: Mission, site: str) -> bool:
    """Does ``site``'s chat port accept connections?"""
    c = mission.site(site).chat
    try:
        with socket.create_connection((c.host, c.port), 0.5):
            return True
    except OSError:
        return False


def chat_endpoint(mission: Mission, site: str, ws: bool = False) -> tuple[str, Any]:
    """Base URL of ``site``'s chat server (http(s)://host:port or ws(s)://host:port/ws) and the
    SSL context to reach it (None for plain HTTP): HTTPS with the mission CA when ``[chat] tls``
    (which follows ``[rcm] tls`` unless set) is on."""
    from rcm.server.tls import tls_paths

    from .client import client_ssl_context
    from .config import chat_settings

    c = mission.site(site).chat
    host = f"[{c.host}]" if ":" in c.host else c.host
    tls = bool(chat_settings(mission).tls)
    ctx = client_ssl_context(tls_paths(mission, site)["ca"]) if tls else None
    if ws:
        return f"{'wss' if tls else 'ws'}://{host}:{c.port}/ws", ctx
    return f"{'https' if tls else 'http'}://{host}:{c.port}", ctx


async def chat_health(http: aiohttp.ClientSession, mission: Mission, site: str, timeout: float = 2.0) -> Health:
    """``site``'s chat ``/health``; ``{"site", "status": "down", "error"}`` when it does not answer (or another
    server answers on its port)."""
    try:
        base, ctx = chat_endpoint(mission, site)
        async with http.get(base + "/health", ssl=ctx if ctx is not None else True,
                            timeout=aiohttp.ClientTimeout(total=timeout)) as r:
            body = await r.json()
    except (TimeoutError, aiohttp.ClientError, ValueError, OSError) as e:
        return {"site": site, "status": "down", "error": str(e) or type(e).__name__}
    if not isinstance(body, dict) or body.get("site") != site:     # another mission's server on that port
        return {"site": site, "status": "down",
                "error": f"port answered by {body.get('site') if isinstance(body, dict) else body!r}"}
    return body


def statuses_connected(statuses: Mapping[str, Any], peers: Iterable[str]) -> bool:
    """Is every one of ``peers`` ``connected`` in ``statuses`` (site -> status; one not reported is not)?"""
    return all(statuses.get(p) == LinkStatus.CONNECTED.value for p in peers)


def peers_connected(health: Mapping[str, Any] | None, peers: Iterable[str]) -> bool:
    """Does this ``/health`` (its details: this host's tools get them) show RCM up and every one of ``peers``
    connected?"""
    h = health or {}
    sites = h.get("sites")
    return bool(h.get("rcm")) and isinstance(sites, dict) and statuses_connected(sites, peers)


async def wait_connected(mission: Mission, sites: Sequence[str] | None = None, timeout: float = 60.0, *,
                         http: aiohttp.ClientSession | None = None, interval: float = 0.1,
                         on_round: Callable[[dict[str, Health]], None] | None = None,
                         stop: asyncio.Event | None = None) -> dict[str, Health]:
    """Until every one of ``sites`` (all the mission's) reports every other mission site connected on its
    ``/health``; the last health of each. ``on_round`` sees each round's health (it may raise to give up);
    ``stop`` set: return at once. TimeoutError names the sites not connected and what they see."""
    chosen = list(sites) if sites else list(mission.sites)
    if http is None:
        async with aiohttp.ClientSession() as own:
            return await wait_connected(mission, chosen, timeout, http=own, interval=interval,
                                        on_round=on_round, stop=stop)
    deadline = time.monotonic() + timeout
    while True:
        health = dict(zip(chosen, await asyncio.gather(*(chat_health(http, mission, s) for s in chosen))))
        if on_round is not None:
            on_round(health)
        waiting = [s for s in chosen if not peers_connected(health[s], mission.peers_of(s))]
        if not waiting or (stop is not None and stop.is_set()):
            return health
        if time.monotonic() > deadline:
            seen = "; ".join(f"{s} sees {health[s].get('sites') or health[s].get('status')}" for s in waiting)
            raise TimeoutError(f"sites not all connected after {timeout:g} s: {seen}")
        if stop is None:
            await asyncio.sleep(interval)
        else:
            try:
                await asyncio.wait_for(stop.wait(), interval)
            except TimeoutError:
                pass


async def wait_clients_connected(clients: Mapping[str, RcmClient], timeout: float = 30.0,
                                 interval: float = 0.05) -> None:
    """Until each site's RCM client (site -> client) sees every other of these sites connected: for runs of
    RCM alone, without chat servers. TimeoutError names what the sites still apart see."""
    deadline = time.monotonic() + timeout
    while True:
        apart = {s: c.statuses for s, c in clients.items() if not statuses_connected(c.statuses, set(clients) - {s})}
        if not apart:
            return
        if time.monotonic() > deadline:
            seen = "; ".join(f"{s} sees {st}" for s, st in apart.items())
            raise TimeoutError(f"sites not all connected after {timeout:g} s: {seen}")
        await asyncio.sleep(interval)


def adduser_argv(mission_path: Path, site: str, user: str, roles: Sequence[str] = (),
                 replace: bool = False, clearance: str | None = None) -> list[str]:
    """``python -m chat_server adduser`` for ``user`` at ``site`` (the password comes on stdin), with
    ``clearance`` (a label as people write it; None: the mission's default label)."""
    return [sys.executable, "-m", "chat_server", "adduser", "--mission", str(mission_path), "--site", site,
            *(["--replace"] if replace else []), *(f"--role={r}" for r in roles),
            *([f"--clearance={clearance}"] if clearance is not None else []), user]


async def add_users(mission_path: Path, users: dict[str, list[str]], password: str,
                    env: dict[str, str] | None = None, roles: Sequence[str] = (),
                    clearances: Mapping[str, str] | None = None) -> None:
    """Create accounts with ``python -m chat_server adduser`` (site -> user names), each holding ``roles``
    and its site's entry in ``clearances`` (site -> a label as people write it; absent: the default label).

    Sites are done in parallel, each site's users one after another (one
    writer at a time on a site's database). An existing user gets the new
    password (``--replace``). Raises RuntimeError naming the user on failure.
    """
    async def one_site(site: str, names: list[str]) -> None:
        for user in names:
            p = await asyncio.create_subprocess_exec(
                *adduser_argv(mission_path, site, user, roles, replace=True,
                              clearance=(clearances or {}).get(site)),
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=server_env(env))
            out, _ = await p.communicate((password + "\n").encode())
            if p.returncode != 0:
                raise RuntimeError(f"adduser {user} at {site} failed: {out.decode(errors='replace').strip()}")

    await asyncio.gather(*(one_site(s, names) for s, names in users.items()))


class SiteProcesses:
    """One server process per site of a mission, started and stopped directly (subclasses name the role)."""

    role = ""                   # a key of MODULES: what ``python -m`` runs, and the log's name
    what = "server"
    ready_timeout = 20.0
    grace = 10.0

    def __init__(self, mission_path: Path, sites: list[str] | None = None, log_level: str = "info",
                 env: dict[str, str] | None = None) -> None:
        self.mission_path = Path(mission_path)
        self.mission: Mission = load_mission(self.mission_path)
        self.sites = sites or list(self.mission.sites)
        self.log_level = log_level
        self.env = server_env(env)
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def is_ready(self, site: str) -> bool:
        raise NotImplementedError

    def start(self, site: str) -> subprocess.Popen[bytes]:
        log = log_path(self.mission, site, self.role)
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as out:
            p = subprocess.Popen(server_argv(self.mission_path, site, self.role, self.log_level),
                                 stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=self.env)
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
        try:
            text = log_path(self.mission, site, self.role).read_text(errors="replace")
        except FileNotFoundError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

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

    role = "chat"
    what = "chat server"
    ready_timeout = 30.0
    grace = 15.0

    def is_ready(self, site: str) -> bool:
        """The site's chat port accepts connections."""
        return chat_ready(self.mission, site)

    def url(self, site: str) -> str:
        """The site's WebSocket endpoint (``wss://`` when its chat server speaks TLS)."""
        return chat_endpoint(self.mission, site, ws=True)[0]

    def http(self, site: str) -> str:
        return chat_endpoint(self.mission, site)[0]

    def add_users(self, users: dict[str, list[str]], password: str, roles: Sequence[str] = (),
                  clearances: Mapping[str, str] | None = None) -> None:
        """Create accounts (site -> user names), all adduser processes at once; each holds ``roles``
        (e.g. ``flash``, which sending FLASH needs: [chat] flash_role) and its site's entry in ``clearances``."""
        running = []
        for site, names in users.items():
            for u in names:
                running.append((site, u, subprocess.Popen(
                    adduser_argv(self.mission_path, site, u, roles, clearance=(clearances or {}).get(site)),
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=self.env)))
        for site, u, p in running:
            out, _ = p.communicate((password + "\n").encode(), timeout=60)
            if p.returncode != 0:
                raise RuntimeError(f"adduser {u} at {site} failed: {out.decode(errors='replace').strip()}")


class LocalRcm(SiteProcesses):
    """The RCM server processes of a mission's sites on this machine."""

    role = "rcm"
    what = "rcm"

    def is_ready(self, site: str) -> bool:
        """The site's client socket accepts connections."""
        return rcm_ready(self.mission, site)
