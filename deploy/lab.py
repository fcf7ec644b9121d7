"""``python -m deploy lab`` (``make lab``): a ready mission to try the suite by hand, and break it.

The lab writes a mission under ``var/lab/`` (the paper's four sites by
default): every site on loopback with a web UI, an IRC port and the TUI's
WebSocket, relaying and repair on, timeouts short enough for a ten-minute tour
(suspect 20 s), and a link proxy on every directed inter-site link. It creates
the accounts (alice, bob, carol, dave at every site, password ``lab``, each
allowed to send FLASH), starts the proxies in this process, supervises every
site's RCM and chat server (``deploy up``'s supervisor), and serves a control
port (``deploy/lab_control.py``). Once every site sees every other, it prints
where to connect and the commands that steer the running lab from another
terminal (``python -m deploy lab cut A B``, ``fade``, ``slow``, ``heal``,
``partition``, ``kill``, ``restart``, ``status``, ``stop``), which find it
through ``var/lab/lab.json``. Then it reports, live, every command, every
supervisor event and every status change as each site sees it (``ground1 sees
awacs connected via jstars``). Ctrl-C (or ``lab stop``) stops the chat
servers, the RCM servers and the proxies; nothing is left running.

Data stays in ``var/lab/<site>/`` between runs (history, journals);
``--fresh`` starts from nothing.
"""
from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import shutil
import signal
import sys
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from rich.console import Console
from rich.markup import escape

from chat_server.launcher import add_users, wait_connected
from contracts.mission import Mission, load_mission
from contracts.mission_writer import write_mission_file
from contracts.status import LinkStatus
from faultinject.links import LinkSet
from faultinject.missions import ports_free

from . import certs
from .lab_control import STATE_FILE, LabControl, running_lab, servers_running
from .supervisor import Supervisor
from .up import missing_tls, preflight, site_colors

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DIR = REPO / "var" / "lab"
SITES = ["ground1", "ground2", "awacs", "jstars"]          # the paper's testbed: two ground sites, two aircraft
USERS = ["alice", "bob", "carol", "dave"]
PASSWORD = "lab"
NAME = "lab"
BASE_PORT = 12100
# Timeout presets ([rcm], seconds). "lab": a partition outlives the suspect timeout in 20 s, so the tour
# shows disconnection and repair without a minute's wait; "paper": MILCOM 2004's; "fast": for tests.
TIMEOUTS: dict[str, dict[str, float]] = {
    "lab": {"heartbeat_timeout": 0.5, "liveness_timeout": 2.5, "silence_timeout": 5.0, "suspect_timeout": 20.0,
            "reconnect_period": 1.0},
    "paper": {"heartbeat_timeout": 1.0, "liveness_timeout": 5.0, "silence_timeout": 10.0, "suspect_timeout": 60.0,
              "reconnect_period": 3.0},
    "fast": {"heartbeat_timeout": 0.2, "liveness_timeout": 1.0, "silence_timeout": 2.0, "suspect_timeout": 5.0,
             "reconnect_period": 0.3},
}
# "fast" also makes accounts and receipts quick (a cheap password hash: a lab on loopback, for tests).
FAST_CHAT = {"kdf_n": 1024, "receipt_interval": 0.05, "presence_interval": 0.05, "rcm_ack_interval": 0.05}


@dataclass(frozen=True)
class HfProfile:
    """``--timeouts hf``: the HF example mission's settings (deploy/examples/hf-4site.toml, their one home) on
    every site, every site paced to the radio's rate towards every peer, and every link of the lab shaped to
    that rate and ``HF_DELAY`` one way (as ``bench/hf.py``'s), from the start and again after each heal."""

    rcm: dict[str, Any]                 # the example's [rcm] timeouts and slow-link settings
    chat: dict[str, Any]                # its [chat] table (receipts batched over 15 s)
    rate_bps: int                       # what its sites pace to


HF_EXAMPLE = REPO / "deploy" / "examples" / "hf-4site.toml"
HF_DELAY = 0.3                          # seconds one way on every link of an hf lab
HF_RCM_KEYS = ("heartbeat_timeout", "liveness_timeout", "silence_timeout", "suspect_timeout", "reconnect_period",
               "handshake_timeout", "announce_delay", "compression", "tls", "tls_continue")


@functools.cache
def hf_profile(path: Path = HF_EXAMPLE) -> HfProfile:
    """The HF settings as the example mission has them (one rate for every paced link); read once."""
    raw = tomllib.loads(path.read_text())
    rates = {int(r) for site in raw["sites"].values() for r in (site.get("rate") or {}).values()}
    if len(rates) != 1:
        raise LabError(f"{path}: the lab's hf profile takes one rate for every link, the file has {sorted(rates)}")
    return HfProfile({k: raw["rcm"][k] for k in HF_RCM_KEYS if k in raw["rcm"]}, dict(raw.get("chat") or {}),
                     rates.pop())
STATUS_STYLE = {LinkStatus.CONNECTED.value: "green", LinkStatus.SUSPECTED.value: "yellow",
                LinkStatus.DISCONNECTED.value: "red"}


class LabError(RuntimeError):
    """The lab cannot start as asked; the message says why."""


@dataclass(frozen=True, slots=True)
class LabPorts:
    """The lab's loopback ports, one block from ``base``: RCM base+1.., web and TUI base+101..,
    IRC base+201.., link proxies base+301.., TAK base+401.., the control port base+500."""

    base: int
    sites: int

    def rcm(self, i: int) -> int:
        return self.base + 1 + i

    def chat(self, i: int) -> int:
        return self.base + 101 + i

    def irc(self, i: int) -> int:
        return self.base + 201 + i

    def proxy(self, j: int) -> int:
        return self.base + 301 + j

    def tak(self, i: int) -> int:
        return self.base + 401 + i

    @property
    def control(self) -> int:
        return self.base + 500

    def every(self) -> list[int]:
        n = self.sites
        return ([p for i in range(n) for p in (self.rcm(i), self.chat(i), self.irc(i), self.tak(i))]
                + [self.proxy(j) for j in range(n * (n - 1))] + [self.control])


def choose_ports(n_sites: int, base: int = BASE_PORT, tries: int = 8) -> LabPorts:
    """The first block from ``base`` (shifted by 1000) whose every port is free; below the ports tests
    and tools pick at random (faultinject.missions), so a running lab and a test run never race."""
    if not 2 <= n_sites <= 10:
        raise LabError(f"a lab has 2 to 10 sites, not {n_sites}")
    for k in range(tries):
        ports = LabPorts(base + 1000 * k, n_sites)
        if max(ports.every()) < 22000 and ports_free(ports.every()):
            return ports
    raise LabError(f"no free block of lab ports from {base} (is another lab running?)")


def lab_tables(sites: list[str], ports: LabPorts, timeouts: str) -> dict[str, Any]:
    """The lab's mission file, as tables: every directed link dialled through a proxy port (``timeouts``: a key
    of ``TIMEOUTS``, or "hf": ``hf_profile``)."""
    hf = hf_profile() if timeouts == "hf" else None
    # Plaintext on loopback, but for an hf lab, which has the example's mutual TLS (its handshakes are what a
    # radio link's reconnections cost: docs/rcm.md, "TLS continuation on slow links"); certificates: ``Lab._run``.
    rcm: dict[str, Any] = {"tls": False, **(hf.rcm if hf is not None else TIMEOUTS[timeouts]), "ordering": "lamport",
                           "p2p": "robust", "routing": "relay", "max_hops": 3}
    pairs = [(a, b) for a in sites for b in sites if a != b]
    proxy = {pr: f"127.0.0.1:{ports.proxy(j)}" for j, pr in enumerate(pairs)}
    tables: dict[str, Any] = {"mission": {"name": NAME, "data_dir": "."}, "rcm": rcm}
    if timeouts == "fast":
        tables["chat"] = dict(FAST_CHAT)
    elif hf is not None:
        # The front ends stay plaintext on loopback, as in every lab (the guide's http:// and irssi lines).
        tables["chat"] = {**hf.chat, "tls": False}
    tables["sites"] = {s: {"rcm": f"127.0.0.1:{ports.rcm(i)}", "chat": f"127.0.0.1:{ports.chat(i)}",
                           "irc": f"127.0.0.1:{ports.irc(i)}", "tak": f"127.0.0.1:{ports.tak(i)}",
                           "dial": {b: proxy[(s, b)] for b in sites if b != s}} for i, s in enumerate(sites)}
    if hf is not None:
        for s, table in tables["sites"].items():
            table["rate"] = {b: hf.rate_bps for b in sites if b != s}
    return tables


def hf_links(timeouts: str) -> dict[str, Any] | None:
    """How every link of the lab is shaped at the start and after each heal: the radio's rate and delay for an
    hf lab, else None (no delay, no rate limit)."""
    return {"bandwidth_bps": hf_profile().rate_bps, "delay": HF_DELAY} if timeouts == "hf" else None


def write_lab_mission(root: Path, sites: list[str], ports: LabPorts, timeouts: str) -> Path:
    path = write_mission_file(root / "mission.toml", lab_tables(sites, ports, timeouts))
    path.write_text("# Written by `python -m deploy lab` at every start (docs/operations.md, \"The lab\"):\n"
                    "# each site dials each peer through a link proxy the lab runs ([sites.X.dial]),\n"
                    "# so `python -m deploy lab cut|fade|slow|heal` can act on any link.\n" + path.read_text())
    return path


def clear_lab(root: Path) -> None:
    """``--fresh``: remove a previous lab's data; refuses a directory that does not look like a lab's."""
    if not root.exists():
        return
    mission = root / "mission.toml"
    if any(root.iterdir()) and not (mission.exists() and 'name = "lab"' in mission.read_text(errors="replace")):
        raise LabError(f"--fresh: {root} is not a lab directory (no lab mission.toml); not removing it")
    shutil.rmtree(root)


class Lab:
    """One running lab: its mission, accounts, link proxies, supervised sites and control port."""

    def __init__(self, root: Path, console: Console, *, sites: list[str] | None = None,
                 users: list[str] | None = None, timeouts: str = "lab", fresh: bool = False,
                 base_port: int = BASE_PORT, log_level: str = "info") -> None:
        self.root, self.console = root.resolve(), console
        self.sites = list(sites or SITES)
        self.users = list(users or USERS)
        self.timeouts, self.fresh, self.base_port, self.log_level = timeouts, fresh, base_port, log_level
        self.color = site_colors(self.sites)
        self.stop = asyncio.Event()
        self.t0 = time.monotonic()
        self.seen: dict[tuple[str, str], tuple[str, str | None]] = {}    # (site, peer) -> (status, via)
        self.chat_seen: dict[tuple[str, str], bool] = {}                  # (site, peer) -> peer's chat server down
        self.down: set[str] = set()                                     # sites whose chat server is silent

    def tag(self, site: str) -> str:
        return f"[{self.color.get(site, 'white')}]{escape(site)}[/]"

    def say(self, text: str) -> None:
        self.console.print(text, soft_wrap=True)

    def note(self, text: str) -> None:
        """A timestamped line (``text`` is markup)."""
        self.say(f"[dim]{time.monotonic() - self.t0:6.1f}s[/] {text}")

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self.stop.set)
        try:
            return await self._run()
        except RuntimeError as e:       # LabError, LinkError (a port taken), a failed adduser
            self.say(f"[bold red]lab:[/] {escape(str(e))}")
            return 1
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)

    async def _run(self) -> int:
        other = running_lab(self.root)
        if other is not None:
            raise LabError(f"a lab is already running from {self.root} (pid {other['pid']}): "
                           f"stop it with `python -m deploy lab stop{self.dir_arg()}`")
        running = servers_running(self.root)
        if running:
            raise LabError(f"{running} from {self.root}, outside this lab's control (`python -m deploy up`, or by "
                           "hand): stop them first; a lab there would rewrite the mission under them"
                           + (" and --fresh delete their files" if self.fresh else ""))
        if self.fresh:
            clear_lab(self.root)
        self.root.mkdir(parents=True, exist_ok=True)
        ports = choose_ports(len(self.sites), self.base_port)
        path = write_lab_mission(self.root, self.sites, ports, self.timeouts)
        mission = load_mission(path)
        made = certs.create(mission, self.sites, force=True) if missing_tls(mission, self.sites) else []
        problem = preflight(mission, self.sites, str(path))
        if problem:
            raise LabError(problem)
        self.say(f"[bold]RCM lab[/]: sites {', '.join(self.tag(s) for s in self.sites)}, every link through a "
                 f"proxy you control; timeouts '{self.timeouts}' (suspect {mission.rcm.suspect_timeout:g} s); "
                 f"mission {escape(str(path))}")
        if mission.rcm.tls:
            self.say("  mutual TLS between the sites' RCM servers, as the hf example mission has it (the web, IRC "
                     "and TUI ports stay plaintext on loopback)"
                     + (f" (a mission CA and site certificates made: {len(made)} files)" if made else ""))
        self.say(f"  creating accounts {', '.join(self.users)} at every site ...")
        await add_users(path, {s: self.users for s in self.sites}, PASSWORD, roles=("flash",))
        sup = Supervisor(path, log_level=self.log_level, on_event=self.event)
        links = LinkSet(mission)
        base = hf_links(self.timeouts)
        control = LabControl(links, sup, self.note, base=base)
        state = self.root / STATE_FILE
        try:
            await links.start()
            if base is not None:
                for a, b in links.pairs():
                    control.shape_base(a, b)
            await control.start("127.0.0.1", ports.control)
            state.write_text(json.dumps({"pid": os.getpid(), "control": control.url, "mission": str(path),
                                         "sites": self.sites, "users": self.users, "password": PASSWORD}))
            self.say("  starting every site's RCM and chat server (logs in "
                     f"{escape(str(self.root))}/<site>/logs/) ...")
            await sup.start()
            async with aiohttp.ClientSession() as http:
                await self.wait_up(sup, http)
                if not self.stop.is_set():
                    self.guide(mission, ports)
                    await self.watch(sup, http)
        finally:
            self.say("[bold]stopping[/]: chat servers, then RCM servers, then link proxies")
            await sup.stop()
            await control.close()
            await links.close()
            with contextlib.suppress(FileNotFoundError):
                state.unlink()          # last: `lab stop` waits for it
        self.say("[bold]lab stopped[/]: every process exited")
        return 0

    def event(self, site: str, role: str, what: str) -> None:
        style = "bold red" if ("exited" in what or "killed" in what or "cannot" in what) else "bold"
        self.note(f"{self.tag(site)} {role}: [{style}]{escape(what)}[/]")

    async def wait_up(self, sup: Supervisor, http: aiohttp.ClientSession, timeout: float = 90.0) -> None:
        def each_round(health: dict[str, dict[str, Any]]) -> None:
            failed = [sp for sp in sup.procs.values() if sp.state == "failed"]
            if failed:
                sp = failed[0]
                raise LabError(f"{sp.site}'s {sp.role} server cannot start" + (f": {sp.error}" if sp.error else "")
                               + f"; see {sp.log_path}")
        try:
            health = await wait_connected(sup.mission, self.sites, timeout, http=http, interval=0.2,
                                          on_round=each_round, stop=self.stop)
        except TimeoutError as e:
            raise LabError(f"{e}; the servers' logs are in {self.root}/<site>/logs/") from None
        self.statuses(health, quiet=True)

    def guide(self, mission: Mission, ports: LabPorts) -> None:
        """Where to connect, who to be, and the commands that steer the lab."""
        py = os.path.relpath(sys.executable) if sys.executable.startswith(os.getcwd()) else sys.executable
        lab = f"{py} -m deploy lab"
        d = self.dir_arg()
        s = self.sites
        self.say(f"\n[bold green]every site sees every other connected.[/] Accounts at every site: "
                 f"[bold]{', '.join(self.users)}[/], password [bold]{PASSWORD}[/] (all may send FLASH).")
        w = max(len(x) for x in s)
        for x in s:
            web, irc, tak = mission.site(x).chat, mission.site(x).irc, mission.site(x).tak
            assert irc is not None and tak is not None
            self.say(f"  {self.tag(x)}{' ' * (w - len(x))}  web http://{web.host}:{web.port}/   "
                     f"IRC {irc.host}:{irc.port}   TAK {tak.host}:{tak.port} (TCP)   TUI ws://{web.host}:{web.port}/ws")
        u = [self.users[i % len(self.users)] for i in range(4)]
        at = [s[i % len(s)] for i in (0, 2, 1, 3)]
        c = [mission.site(x).chat for x in at]
        irc = mission.site(at[2]).irc
        assert irc is not None
        joins = [(u[0], f"a browser at {at[0]}", f"http://{c[0].host}:{c[0].port}/"),
                 (u[1], f"a browser at {at[1]}", f"http://{c[1].host}:{c[1].port}/"),
                 (u[2], f"irssi at {at[2]}", f"irssi -c {irc.host} -p {irc.port} -w {PASSWORD} -n {u[2]}"),
                 (u[3], f"the TUI at {at[3]}", f"RCM_CHAT_PASSWORD={PASSWORD} {py} -m chat_tui "
                  f"ws://{c[3].host}:{c[3].port}/ws --user {u[3]}")]
        self.say("[bold]Join in[/] (one each, or all four; then join room ops):")
        uw, hw = max(len(j[0]) for j in joins), max(len(j[1]) for j in joins)
        for user, how, cmd in joins:
            self.say(f"  {escape(user):<{uw}} in {escape(how):<{hw}}  {escape(cmd)}")
        a, b, x = at[0], at[1] if at[1] != at[0] else s[-1], at[3]     # alice's and bob's link; dave's site
        self.say("[bold]Break it[/] (from another terminal; every command answers with what it did):")
        rows = [(f"cut {a} {b}{d}", "reset the link: connections drop; both stay connected via a third site"),
                (f"fade {a} {b}{d}", "a radio fade: sockets stay open, nothing crosses"),
                (f"slow {a} {b} --delay 0.5 --bandwidth 9600{d}", "a slow link (delay s, jitter s, bits/s)"),
                (f"heal {a} {b}{d}", "that link back to normal (`heal` alone: every link)"),
                (f"partition {x}{d}", f"{x} alone; past the suspect timeout ({mission.rcm.suspect_timeout:g} s) "
                 "it is disconnected, and repaired after `heal`"),
                (f"kill {b}{d}", "kill -9 its RCM and chat server (--role chat: only one); kept down"),
                (f"restart {b}{d}", "start them again"),
                (f"status{d}", "links, processes, and what every site sees (with via)"),
                (f"stop{d}", "stop the lab (or Ctrl-C here)")]
        width = max(len(r[0]) for r in rows)
        for cmd, what in rows:
            self.say(f"  {escape(lab)} {escape(cmd):<{width}}  [dim]# {escape(what)}[/]")
        self.say(f"  also: {py} -m deploy status --mission {escape(str(mission.path))}   "
                 f"[dim](the control port {escape(f'http://127.0.0.1:{ports.control}')} speaks JSON: "
                 "docs/faultinject.md's routes and /lab/...)[/]\n")

    def dir_arg(self) -> str:
        return "" if self.root == DEFAULT_DIR.resolve() else f" --dir {self.root}"

    async def watch(self, sup: Supervisor, http: aiohttp.ClientSession, interval: float = 0.5) -> None:
        """Until Ctrl-C: each site's view of its peers, printed when it changes."""
        while not self.stop.is_set():
            health = await sup.health(http)
            sup.write_status()
            self.statuses(health)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.stop.wait(), interval)

    def statuses(self, health: dict[str, dict[str, Any]], quiet: bool = False) -> None:
        for s, h in health.items():
            if h.get("status") == "down":
                if s not in self.down and not quiet:
                    self.note(f"{self.tag(s)}'s chat server is not answering")
                self.down.add(s)
                continue
            if s in self.down and not quiet:
                self.note(f"{self.tag(s)}'s chat server answers again")
            self.down.discard(s)
            hops, gone = h.get("via"), h.get("chat_down")
            via: dict[str, str] = hops if isinstance(hops, dict) else {}
            for p, st in (h.get("sites") or {}).items():
                if p == s:
                    continue
                now = (str(st), via.get(p) if st == LinkStatus.CONNECTED.value else None)
                if self.seen.get((s, p)) != now and not quiet:
                    hop = f" via {self.tag(now[1])}" if now[1] else ""
                    self.note(f"{self.tag(s)} sees {self.tag(p)} [{STATUS_STYLE.get(now[0], 'white')}]{now[0]}[/]{hop}")
                self.seen[(s, p)] = now
                down = isinstance(gone, list) and p in gone       # its chat server is gone (its will came)
                if self.chat_seen.get((s, p), False) != down and not quiet:
                    self.note(f"{self.tag(s)} sees {self.tag(p)}'s chat server " + ("[red]down[/]" if down else "back"))
                self.chat_seen[(s, p)] = down


async def run_lab(root: Path, console: Console, **kw: Any) -> int:
    return await Lab(root, console, **kw).run()
