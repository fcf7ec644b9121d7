"""Supervise the RCM server and chat server of each site of a mission on this machine.

Theory of operation
-------------------
One ``Supervised`` per process (role ``rcm`` or ``chat`` of one site). Its
task loops: spawn the process, copy each line it prints to the site's log file
(``data_dir/<site>/logs/<role>.log``) and to the ``on_line`` callback (the
merged, site-coloured console of ``deploy up``), wait for it to exit; unless
the supervisor is stopping, wait a back-off (0.5 s, doubling to 30 s; back to
0.5 s once a run lasted ``stable_after`` seconds) and start it again.
``kill()`` crashes a site's processes (SIGKILL) and holds them down until
``release()`` starts them again at once: the lab's ``kill`` and ``restart``.

Children run in their own session, so a Ctrl-C at the terminal reaches only
the supervisor, which then stops them in order: every chat server first (they
flush their journals and close their clients), then every RCM server, each
with SIGTERM and SIGKILL after a grace period. Each child also gets
``PR_SET_PDEATHSIG`` = SIGTERM, so a supervisor that is itself killed -9
leaves no orphans.

What each child runs, with which environment, and where it logs is
``chat_server.launcher``'s (the one site launcher; the tests' ``LocalRcm`` and
``LocalChat`` are its too). ``Supervisor.health()`` polls each chat server's
``/health`` with it (its RCM link, peer statuses, clients); ``snapshot()`` is what ``deploy up`` shows and writes
to ``data_dir/<site>/logs/supervisor.json`` (pids, restarts, health).
"""
from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import aiohttp

from chat_server.launcher import ROLES, chat_endpoint, chat_health, log_path, server_argv, server_env
from contracts.mission import Mission, load_mission
from contracts.status import LinkStatus

PR_SET_PDEATHSIG = 1
CONFIG_ERROR = 2            # exit status of every suite program for bad arguments or configuration
LineSink = Callable[[str, str, str], None]      # (site, role, line)
EventSink = Callable[[str, str, str], None]     # (site, role, what happened)


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the supervisor dies (Linux)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        pass


@dataclass
class Backoff:
    """Restart delays: ``first`` doubling to ``longest``; reset after a stable run."""

    first: float = 0.5
    longest: float = 30.0
    stable_after: float = 60.0

    def next_delay(self, previous: float | None, ran_for: float) -> float:
        if previous is None or ran_for >= self.stable_after:
            return self.first
        return min(previous * 2, self.longest)


@dataclass
class Supervised:
    """One supervised process: its command, its current pid, its restarts."""

    site: str
    role: str
    argv: list[str]
    log_path: Path
    proc: asyncio.subprocess.Process | None = None
    state: str = "new"                  # new | running | backoff | held | stopped | failed
    starts: int = 0
    last_exit: int | None = None
    started_at: float = 0.0
    delay: float | None = None
    exits: list[int] = field(default_factory=list)
    last_line: str = ""                 # the last line it wrote (a server that stops says why in it)

    @property
    def error(self) -> str:
        """What it said when it stopped: its last line's one-line error (Contract 4, ``prog: error: ...``), or ""."""
        return self.last_line.partition(" error: ")[2]

    @property
    def restarts(self) -> int:
        return max(0, self.starts - 1)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None and self.proc.returncode is None else None

    def describe(self) -> dict[str, Any]:
        return {"pid": self.pid, "state": self.state, "restarts": self.restarts, "last_exit": self.last_exit,
                "since": self.started_at if self.state == "running" else None}


class Supervisor:
    """The RCM and chat server of each chosen site, restarted when they die."""

    def __init__(self, mission_path: Path, sites: list[str] | None = None, *,
                 wrap: Callable[[str], list[str]] | None = None, log_level: str = "info",
                 on_line: LineSink | None = None, on_event: EventSink | None = None,
                 backoff: Backoff | None = None, env: dict[str, str] | None = None,
                 grace: float = 15.0) -> None:
        self.mission_path = Path(mission_path).resolve()
        self.mission: Mission = load_mission(self.mission_path)
        self.sites = list(sites) if sites else list(self.mission.sites)
        for s in self.sites:
            self.mission.site(s)
        self.wrap = wrap or (lambda site: [])
        self.on_line = on_line or (lambda site, role, line: None)
        self.on_event = on_event or (lambda site, role, what: None)
        self.backoff = backoff or Backoff()
        self.env = server_env({"PYTHONUNBUFFERED": "1", **(env or {})})    # unbuffered: _pump reads lines
        self.grace = grace
        self.procs: dict[tuple[str, str], Supervised] = {}
        for site in self.sites:
            for role in ROLES:
                self.procs[(site, role)] = Supervised(site, role, server_argv(self.mission_path, site, role, log_level),
                                                      log_path(self.mission, site, role))
        self.stopping = False
        self.held: set[tuple[str, str]] = set()         # killed on purpose: not restarted until released
        self._tasks: list[asyncio.Task[None]] = []
        self._wake: dict[tuple[str, str], asyncio.Event] = {}
        self.last_health: dict[str, dict[str, Any]] = {}
        self.status_failing: set[str] = set()           # sites whose supervisor.json could not be written

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        """Start every RCM server, then every chat server (each supervised from now on)."""
        for role in ROLES:
            for site in self.sites:
                key = (site, role)
                self._wake[key] = asyncio.Event()
                self._tasks.append(asyncio.create_task(self._supervise(self.procs[key]),
                                                       name=f"supervise {site} {role}"))
            await asyncio.sleep(0)

    async def _spawn(self, sp: Supervised) -> asyncio.subprocess.Process:
        sp.log_path.parent.mkdir(parents=True, exist_ok=True)
        return await asyncio.create_subprocess_exec(
            *self.wrap(sp.site), *sp.argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT, env=self.env, start_new_session=True,
            preexec_fn=_die_with_parent)

    async def _supervise(self, sp: Supervised) -> None:
        key = (sp.site, sp.role)
        wake = self._wake[key]
        while not self.stopping:
            while key in self.held and not self.stopping:     # killed on purpose: wait for release()
                sp.state, sp.delay = "held", None
                wake.clear()
                await wake.wait()
            if self.stopping:
                break
            try:
                proc = await self._spawn(sp)
            except OSError as e:
                self.on_event(sp.site, sp.role, f"cannot start: {e}")
                code = -1
                ran_for = 0.0
            else:
                sp.proc, sp.state, sp.started_at = proc, "running", time.time()
                sp.starts += 1
                self.on_event(sp.site, sp.role, f"started (pid {proc.pid})" if sp.starts == 1
                              else f"restarted (pid {proc.pid}, restart {sp.restarts})")
                await self._pump(sp, proc)
                code = await proc.wait()
                ran_for = time.time() - sp.started_at
            sp.last_exit = code
            sp.exits.append(code)
            if self.stopping:
                break
            if key in self.held:
                self.on_event(sp.site, sp.role, f"{_exit_text(code)}; held down until restarted")
                continue
            if code == CONFIG_ERROR and ran_for < self.backoff.stable_after:
                sp.state = "failed"     # Contract 4: status 2 is bad arguments/configuration; a restart won't fix it
                self.on_event(sp.site, sp.role, f"exited with status 2 ({sp.error or 'bad configuration'}): not "
                              f"restarting; see {sp.log_path}")
                return
            sp.delay = self.backoff.next_delay(sp.delay, ran_for)
            sp.state = "backoff"
            self.on_event(sp.site, sp.role, f"{_exit_text(code)}; restarting in {sp.delay:g} s")
            wake.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(wake.wait(), sp.delay)
        sp.state = "stopped"

    async def _pump(self, sp: Supervised, proc: asyncio.subprocess.Process) -> None:
        """Copy the server's output to its log file, line by line, until it ends.

        The pipe is read whatever happens to the file: a server blocks on its next log line once the pipe
        is full, so a log that cannot be written (a full disk) must cost its lines, never the server. The
        failure is reported once, and the file is tried again at each line; lines in between are lost to
        the file only (``on_line`` still gets them).
        """
        assert proc.stdout is not None
        log = LogFile(sp.log_path)
        try:
            while True:
                try:
                    raw = await proc.stdout.readline()
                except ValueError:          # a line longer than the stream limit: take it in pieces
                    raw = await proc.stdout.read(65536)
                if not raw:
                    return
                change = log.write(raw)
                if change:
                    self.on_event(sp.site, sp.role, change)
                line = raw.decode(errors="replace").rstrip("\r\n")
                if line:
                    sp.last_line = line
                self.on_line(sp.site, sp.role, line)
        finally:
            log.close()

    async def stop(self) -> dict[tuple[str, str], int | None]:
        """Chat servers first, then RCM servers: SIGTERM, SIGKILL after ``grace``."""
        self.stopping = True
        for ev in self._wake.values():
            ev.set()
        for role in ("chat", "rcm"):
            group = [sp for sp in self.procs.values() if sp.role == role]
            await asyncio.gather(*(self._terminate(sp) for sp in group))
        await asyncio.gather(*self._tasks, return_exceptions=True)
        return {k: sp.last_exit for k, sp in self.procs.items()}

    async def _terminate(self, sp: Supervised) -> None:
        proc = sp.proc
        if proc is None or proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), self.grace)
        except TimeoutError:
            self.on_event(sp.site, sp.role, f"did not stop within {self.grace:g} s; killing it")
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()

    async def kill(self, site: str, roles: tuple[str, ...] = ROLES) -> None:
        """Crash ``site``'s ``roles`` servers (SIGKILL, all at once) and keep them down until :meth:`release`."""
        victims = []
        for role in roles:
            sp = self.procs[(site, role)]
            self.held.add((site, role))
            self._wake[(site, role)].set()          # one waiting out a back-off: hold it now
            if sp.proc is not None and sp.proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    sp.proc.kill()
                victims.append(sp.proc)
        await asyncio.gather(*(p.wait() for p in victims))

    def release(self, site: str, roles: tuple[str, ...] = ROLES) -> list[str]:
        """Start ``site``'s held ``roles`` servers again now; the roles that were held."""
        woken = []
        for role in ROLES:
            key = (site, role)
            if role in roles and key in self.held:
                self.held.discard(key)
                self._wake[key].set()
                woken.append(role)
        return woken

    async def restart(self, site: str, roles: tuple[str, ...] = ROLES) -> None:
        """Start ``site``'s ``roles`` servers again: held ones now, running ones after a graceful stop (chat
        server first, as :meth:`stop` does) and the usual back-off."""
        self.release(site, roles)
        for role in ("chat", "rcm"):
            if role in roles:
                await self._terminate(self.procs[(site, role)])

    async def __aenter__(self) -> Supervisor:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- health -----------------------------------------------------------------------------
    def chat_http(self, site: str) -> str:
        return chat_endpoint(self.mission, site)[0]

    async def health(self, http: aiohttp.ClientSession, timeout: float = 2.0) -> dict[str, dict[str, Any]]:
        """Each site's chat ``/health`` (``{"status": "down"}`` when it does not answer)."""
        healths = await asyncio.gather(*(chat_health(http, self.mission, s, timeout) for s in self.sites))
        self.last_health = dict(zip(self.sites, healths))
        return self.last_health

    def snapshot(self) -> dict[str, Any]:
        """Processes and last health of every site, JSON-ready."""
        return {site: {"processes": {role: self.procs[(site, role)].describe() for role in ROLES},
                       "health": self.last_health.get(site)} for site in self.sites}

    def write_status(self) -> list[str]:
        """``data_dir/<site>/logs/supervisor.json`` for each site (atomic replace).

        A file that cannot be written (a full disk, say) keeps the last one written, and supervising goes
        on (a status file is never worth a site): the failure is reported once through ``on_event`` (role
        ``status``), and so is the first write that works again. Returns the sites whose file failed now.
        """
        snap = self.snapshot()
        failed = []
        for site in self.sites:
            path = self.mission.site_dir(site) / "logs" / "supervisor.json"
            tmp = path.with_suffix(".tmp")
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                tmp.write_text(json.dumps({"site": site, "updated": time.time(), "supervisor_pid": os.getpid(),
                                           **snap[site]}, indent=1))
                tmp.replace(path)
            except OSError as e:
                failed.append(site)
                with contextlib.suppress(OSError):
                    tmp.unlink()
                if site not in self.status_failing:
                    self.status_failing.add(site)
                    self.on_event(site, "status", f"cannot write {path}: {e.strerror or e}; the last one "
                                  "written stays until it can be")
            else:
                if site in self.status_failing:
                    self.status_failing.discard(site)
                    self.on_event(site, "status", f"{path} is written again")
        return failed


class LogFile:
    """A server's log file, appended to by the supervisor; a write that fails is reported, not raised.

    ``write`` returns a sentence when writing starts to fail or works again (for the operator's
    console), else None. After a failure the file is opened again at the next line, so a disk that was
    full and has room again gets the lines that follow.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.file: BinaryIO | None = None
        self.failing: str | None = None
        self.lost = 0

    def write(self, raw: bytes) -> str | None:
        try:
            if self.file is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self.file = open(self.path, "ab")   # noqa: SIM115 (kept open across lines; closed in close())
            self.file.write(raw)
            self.file.flush()
        except OSError as e:
            self.lost += 1
            self.close()
            if self.failing is None:
                self.failing = e.strerror or str(e)
                return f"cannot write its log {self.path}: {self.failing}; its output is not logged until it can be"
            return None
        if self.failing is not None:
            lost, self.failing, self.lost = self.lost, None, 0
            return f"its log {self.path} is written again ({lost} lines could not be)"
        return None

    def close(self) -> None:
        if self.file is not None:
            with contextlib.suppress(OSError):      # the buffered bytes of a failed write fail again here
                self.file.close()
            self.file = None


def _exit_text(code: int) -> str:
    return f"killed by signal {-code}" if code < 0 else f"exited with status {code}"


def health_line(site: str, h: dict[str, Any] | None, procs: dict[str, dict[str, Any]] | None = None) -> str:
    """One site's health in a few words: ``ok, peers 2/3 connected, 4 clients, ...``."""
    restarts = f", restarts rcm {procs['rcm']['restarts']} chat {procs['chat']['restarts']}" if procs else ""
    if not h or h.get("status") == "down":
        return f"chat server not answering{restarts}"
    peers = {p: st for p, st in (h.get("sites") or {}).items() if p != site}
    up = sum(1 for st in peers.values() if st == LinkStatus.CONNECTED.value)
    refusals = h.get("refusals") or {}
    hops = h.get("via")
    via: dict[str, str] = hops if isinstance(hops, dict) else {}
    notes = [f"{p} {st}" + (f": {refusals[p]}" if p in refusals else "")
             for p, st in sorted(peers.items()) if st != LinkStatus.CONNECTED.value]
    notes += [f"{p} via {via[p]}" for p, st in sorted(peers.items())      # relayed: no direct link now
              if st == LinkStatus.CONNECTED.value and via.get(p)]
    gone = h.get("chat_down")
    notes += [f"{p}'s chat server down" for p in sorted(gone) if p in peers] if isinstance(gone, list) else []
    bad = ", ".join(notes)
    rcm = ("RCM NOT ANSWERING" if h.get("rcm_stalled") else "ok") if h.get("rcm") else "RCM UNREACHABLE"
    return (f"{rcm}, peers {up}/{len(peers)} connected{' (' + bad + ')' if bad else ''}, "
            f"{h.get('clients', 0)} clients, {h.get('n', 0)} delivered{restarts}")
