"""``python -m deploy demo`` (``make demo``): the whole suite on this machine, in a few minutes.

1. writes a four-site mission modelled on the paper's testbed (ground1,
   ground2 on the ground; awacs, jstars airborne) under
   ``var/demo/run-<time>/`` with free loopback ports and a link proxy on
   every inter-site link;
2. creates the demo accounts (scripted operators, and ``guest`` for you);
3. starts the link proxies in this process: ground links fast, air links with
   delay and jitter, and the paper's outage schedule (30 s up, 10 s down) on
   the awacs-ground2, jstars-ground1 and awacs-jstars links;
4. starts and supervises every site's RCM and chat server (``deploy up``'s
   supervisor; their logs go to ``<run>/<site>/logs/``);
5. once every site sees every other connected: prints each site's web UI URL
   and the TUI command to join, starts scripted operators chatting in three
   rooms, and shows progress (links, site statuses, messages) until the
   duration ends or Ctrl-C;
6. stops the operators, servers and links, runs the Spark archive over the
   journals, and prints the transcript summary and the HTML report's path.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
from rich.console import Console, Group
from rich.live import Live
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from chat_server.launcher import add_users, peers_connected, wait_connected
from contracts.mission import load_mission
from contracts.status import LinkStatus
from faultinject.links import LinkSet
from faultinject.missions import fixed_ports, write_mission
from faultinject.schedule import periodic
from faultinject.shaping import Shape

from .operators import Operator
from .supervisor import Supervisor
from .up import preflight, site_colors

REPO = Path(__file__).resolve().parents[1]
SITES = {"ground1": False, "ground2": False, "awacs": True, "jstars": True}     # site -> airborne
OPERATORS = {"ground1": ["kim", "lee"], "ground2": ["ortiz", "patel"], "awacs": ["hawk", "raven"],
             "jstars": ["viper", "falcon"]}
ROOMS = {"kim": ["ops", "intel"], "lee": ["ops", "logistics"], "ortiz": ["ops", "logistics"],
         "patel": ["intel"], "hawk": ["ops", "intel"], "raven": ["ops"], "viper": ["ops", "intel"],
         "falcon": ["logistics", "ops"]}
GUEST, PASSWORD = "guest", "demo"
PAPER_RCM = {"heartbeat_timeout": 1.0, "liveness_timeout": 5.0, "silence_timeout": 10.0,
             "suspect_timeout": 60.0, "reconnect_period": 3.0, "ordering": "lamport", "p2p": "robust",
             "tls": False}
OUTAGE_PAIRS = [("awacs", "ground2"), ("ground1", "jstars"), ("awacs", "jstars")]
GROUND_SHAPE = Shape(delay=0.01)
AIR_BPS = 256_000
AIR_SHAPE = Shape(delay=0.12, jitter=0.05, bandwidth_bps=AIR_BPS)
CONNECTED = LinkStatus.CONNECTED.value
STATUS_STYLE = {CONNECTED: "green", LinkStatus.SUSPECTED.value: "yellow", LinkStatus.DISCONNECTED.value: "red",
                LinkStatus.UNKNOWN.value: "white", "down": "red"}            # ("down": a chat server not answering)


class Demo:
    def __init__(self, root: Path, duration: float, console: Console, *, up: float = 30.0, down: float = 10.0,
                 seed: int = 1, archive: bool = True, mean_interval: float = 6.0) -> None:
        self.root, self.duration, self.console = root, duration, console
        self.up, self.down, self.seed, self.archive = up, down, seed, archive
        self.mean_interval = mean_interval
        self.run_dir = root / time.strftime("run-%Y%m%d-%H%M%S")
        self.color = site_colors(list(SITES))
        self.stop = asyncio.Event()          # end of the chatting phase (duration, or Ctrl-C)
        self.abort = asyncio.Event()         # a second Ctrl-C: skip the drain
        self.interrupted = False
        self.schedule: asyncio.Task[None] | None = None
        self.operators: list[Operator] = []
        self.health: dict[str, dict[str, Any]] = {}
        self.sup: Supervisor | None = None
        self.links: LinkSet | None = None

    def tag(self, site: str) -> str:
        return f"[{self.color.get(site, 'white')}]{site}[/]"

    def say(self, text: str) -> None:
        self.console.print(text, soft_wrap=True)

    # -- set-up ----------------------------------------------------------------------------------
    def write_mission(self) -> Path:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        latest = self.root / "latest"
        with contextlib.suppress(OSError):
            if latest.is_symlink() or latest.exists():
                latest.unlink()
            latest.symlink_to(self.run_dir.name)
        n = len(SITES)
        site_ports, proxy_ports = fixed_ports(n, n * (n - 1))
        path = write_mission(self.run_dir / "mission.toml", "demo", list(SITES), rcm=PAPER_RCM, data_dir=".",
                             proxies=True, ports=site_ports, proxy_ports=proxy_ports)
        text = path.read_text()
        header = ("# The paper's four-site testbed (MILCOM 2004), written by `python -m deploy demo`:\n"
                  "# two ground sites, two airborne; paper timeouts; every site dials every peer through\n"
                  "# a link proxy (the [sites.X.dial] tables) that the demo runs in-process.\n")
        path.write_text(header + text)
        return path

    async def wait_connected(self, http: aiohttp.ClientSession, timeout: float = 90.0) -> None:
        sup = self.sup
        assert sup is not None

        def each_round(health: dict[str, dict[str, Any]]) -> None:
            self.health = sup.last_health = health
            failed = [sp for sp in sup.procs.values() if sp.state == "failed"]
            if failed:
                raise RuntimeError(f"{failed[0].site}'s {failed[0].role} server cannot start: "
                                   f"{_tail(failed[0].log_path, 1)}")
        try:
            await wait_connected(sup.mission, list(SITES), timeout, http=http, interval=0.3, on_round=each_round,
                                 stop=self.stop)
        except TimeoutError:
            tails = "\n".join(f"--- {s} ---\n{_tail(sup.procs[(s, r)].log_path)}"
                              for s in SITES for r in ("rcm", "chat"))
            raise RuntimeError(f"the sites did not all connect within {timeout:g} s; last log lines:\n{tails}"
                               ) from None

    # -- display ---------------------------------------------------------------------------------
    def table(self) -> Table:
        t = Table(box=None, padding=(0, 1), show_edge=False)
        for col in ("site", "peers", "sent", "received", "late", "restarts"):
            t.add_column(col, justify="left" if col in ("site", "peers") else "right", no_wrap=True)
        assert self.sup is not None
        for s in SITES:
            h = self.health.get(s) or {}
            peers = {p: st for p, st in (h.get("sites") or {}).items() if p != s}
            if h.get("status") == "down":
                sees = "[red]chat server down[/]"
            else:
                ok = sum(st == CONNECTED for st in peers.values())
                bad = " ".join(f"[{STATUS_STYLE.get(st, 'white')}]{p}:{st[:4]}[/]" for p, st in peers.items()
                               if st != CONNECTED)
                sees = f"[{'green' if ok == len(peers) else 'yellow'}]{ok}/{len(peers)}[/] {bad}"
            ops = [o for o in self.operators if o.site == s]
            received: set[str] = set().union(*(o.stats.received for o in ops)) if ops else set()
            t.add_row(self.tag(s), sees, str(sum(o.stats.acked for o in ops)), str(len(received)),
                      str(len(set().union(*(o.stats.late for o in ops)))) if ops else "0",
                      str(sum(self.sup.procs[(s, r)].restarts for r in ("rcm", "chat"))))
        return t

    def links_line(self) -> str:
        assert self.links is not None
        parts = []
        for a, b in OUTAGE_PAIRS:
            m = self.links.mode(a, b).value
            parts.append(f"{a}-{b} [{'green' if m == 'up' else 'red'}]{m}[/]")
        return "flapping links: " + ", ".join(parts)

    def plain_status(self, elapsed: float) -> str:
        assert self.sup is not None
        cells = []
        for s in SITES:
            h = self.health.get(s) or {}
            ok = sum(1 for p, st in (h.get("sites") or {}).items() if p != s and st == CONNECTED)
            ops = [o for o in self.operators if o.site == s]
            rec = len(set().union(*(o.stats.received for o in ops))) if ops else 0
            cells.append(f"{s} {ok}/{len(SITES) - 1} peers, {sum(o.stats.acked for o in ops)} sent, {rec} received")
        return f"t={elapsed:5.0f}/{self.duration:.0f}s  " + "; ".join(cells)

    # -- the run ---------------------------------------------------------------------------------
    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self._interrupt)
        mission_path = self.write_mission()
        problem = preflight(load_mission(mission_path), list(SITES), str(mission_path))
        if problem:
            self.say(f"[bold red]cannot run the demo:[/] {escape(problem)}")
            return 2
        self.say(f"[bold]RCM suite demo[/]: the paper's four-site testbed (2 ground, 2 airborne), "
                 f"{self.duration:.0f} s; Ctrl-C ends it early")
        self.say(f"  mission file {mission_path}")
        self.say("  creating demo accounts ...")
        users = {s: OPERATORS[s] + [GUEST] for s in SITES}
        await add_users(mission_path, users, PASSWORD, roles=("flash",))     # try FLASH: [chat] flash_role
        self.sup = Supervisor(mission_path, log_level="info",
                              on_event=lambda s, r, w: self.say(f"  {self.tag(s)} {r}: {escape(w)}"))
        mission = self.sup.mission
        self.links = LinkSet(mission, shape=GROUND_SHAPE, seed=self.seed)
        for a in SITES:
            for b in SITES:
                if a != b and (SITES[a] or SITES[b]):
                    self.links.set_shape(a, b, AIR_SHAPE)
        code = 0
        tasks: list[asyncio.Task[None]] = []
        try:
            await self.links.start()
            self.say(f"  link proxies on {len(self.links.proxies)} directed links (air links: "
                     f"{AIR_SHAPE.delay * 1000:.0f} ms + up to {AIR_SHAPE.jitter * 1000:.0f} ms jitter, "
                     f"{AIR_BPS // 1000} kbit/s)")
            self.say("  starting the RCM and chat server of every site ...")
            await self.sup.start()
            async with aiohttp.ClientSession() as http:
                await self.wait_connected(http)
                if not self.stop.is_set():
                    self.print_join_info()
                    tasks = self.start_workload()
                    await self.progress(http)
                    self.stop.set()
                    await asyncio.gather(*tasks, return_exceptions=True)
                    await self.drain(http)
        except RuntimeError as e:
            self.say(f"[bold red]demo failed:[/] {escape(str(e))}")
            code = 1
        finally:
            self.stop.set()
            await asyncio.gather(*tasks, return_exceptions=True)
            for o in self.operators:
                await o.close()
            self.say("stopping: chat servers, then RCM servers, then link proxies")
            await self.sup.stop()
            await self.links.close()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)
        if code:
            return code
        self.summary_of_run()
        if self.archive:
            return await self.run_archive(mission.data_dir)
        return 0

    def _interrupt(self) -> None:
        if not self.stop.is_set():
            self.interrupted = True
            self.console.print("[bold]Ctrl-C: ending the run; the archive follows (Ctrl-C again: stop waiting "
                               "for messages in flight, or stop the archive)[/]")
        else:
            self.abort.set()
        self.stop.set()

    async def drain(self, http: aiohttp.ClientSession, timeout: float = 45.0) -> None:
        """Links up, then wait until every site has delivered every message (so the archive is complete)."""
        assert self.sup is not None and self.links is not None
        if self.schedule is not None:
            self.schedule.cancel()
            await asyncio.gather(self.schedule, return_exceptions=True)
        await self.links.heal()
        acked = sum(o.stats.acked for o in self.operators)
        self.say(f"draining: every link up, waiting (at most {timeout:g} s) until every site has delivered "
                 f"every message ...")
        deadline = time.monotonic() + timeout
        counts: dict[str, int] = {}
        while time.monotonic() < deadline and not self.abort.is_set():
            self.health = await self.sup.health(http)
            counts = {s: int(h.get("n", 0)) for s, h in self.health.items()}
            peers_ok = all(peers_connected(h, self.sup.mission.peers_of(s)) for s, h in self.health.items())
            if peers_ok and len(set(counts.values())) == 1 and min(counts.values()) >= acked:
                self.say(f"  every site has delivered all {min(counts.values())} messages")
                return
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.abort.wait(), 0.5)
        self.say(f"  not every message reached every site (deliveries per site: {counts}); the archive shows which")

    def print_join_info(self) -> None:
        assert self.sup is not None
        self.say("\n[bold]every site sees every other connected.[/] Join in (user "
                 f"[bold]{GUEST}[/], password [bold]{PASSWORD}[/], at any site):")
        py = os.path.relpath(sys.executable) if sys.executable.startswith(os.getcwd()) else sys.executable
        for s in SITES:
            url = self.sup.chat_http(s)
            c = self.sup.mission.site(s).chat
            self.say(f"  {self.tag(s):<8} web UI {url}/    TUI: RCM_CHAT_PASSWORD={PASSWORD} "
                     f"{py} -m chat_tui ws://{c.host}:{c.port}/ws --user {GUEST}")
        self.say("rooms ops, intel, logistics; scripted operators: "
                 + ", ".join(f"{', '.join(OPERATORS[s])} ({s})" for s in SITES))
        self.say(f"outages: {', '.join(f'{a}-{b}' for a, b in OUTAGE_PAIRS)} go down for {self.down:g} s "
                 f"after every {self.up:g} s up (the paper's schedule)\n")

    def start_workload(self) -> list[asyncio.Task[None]]:
        assert self.sup is not None and self.links is not None
        pairs = OUTAGE_PAIRS
        self.schedule = self.links.start_schedule(periodic(pairs, up=self.up, down=self.down, until=self.duration))
        for s in SITES:
            c = self.sup.mission.site(s).chat
            for u in OPERATORS[s]:
                self.operators.append(Operator(s, u, PASSWORD, f"ws://{c.host}:{c.port}/ws", ROOMS[u],
                                               SITES[s], self.mean_interval, self.seed))
        return [asyncio.create_task(o.run(self.stop), name=f"operator {o.user}") for o in self.operators]

    async def progress(self, http: aiohttp.ClientSession) -> None:
        assert self.sup is not None and self.links is not None
        t0 = time.monotonic()
        seen_events = len(self.links.history)
        last_status: dict[tuple[str, str], str] = {}
        for s, h in self.health.items():
            for p, st in (h.get("sites") or {}).items():
                last_status[(s, p)] = st
        bar = Progress(TextColumn("[bold]demo"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"),
                       TimeElapsedColumn(), console=self.console, transient=False)
        task = bar.add_task("run", total=self.duration)
        live = Live(Group(bar, self.table(), self.links_line()), console=self.console, refresh_per_second=2,
                    transient=False) if self.console.is_terminal else None
        next_plain = 0.0
        with live if live is not None else contextlib.nullcontext():
            while not self.stop.is_set():
                elapsed = time.monotonic() - t0
                if elapsed >= self.duration:
                    break
                self.health = await self.sup.health(http)
                for ev in self.links.history[seen_events:]:
                    if ev.kind == "mode":
                        style = "green" if ev.value == "up" else "red"
                        self.console.print(f"[dim]{elapsed:5.0f}s[/] link {ev.link}: [{style}]{ev.value}[/]")
                seen_events = len(self.links.history)
                for s, h in self.health.items():
                    for p, st in (h.get("sites") or {}).items():
                        if p != s and last_status.get((s, p)) != st:
                            last_status[(s, p)] = st
                            self.console.print(f"[dim]{elapsed:5.0f}s[/] {self.tag(s)} sees {self.tag(p)} "
                                               f"[{STATUS_STYLE.get(st, 'white')}]{st}[/]")
                if live is not None:
                    bar.update(task, completed=elapsed)
                    live.update(Group(bar, self.table(), self.links_line()))
                elif elapsed >= next_plain:
                    self.console.print(self.plain_status(elapsed), soft_wrap=True)
                    next_plain = elapsed + 15.0
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self.stop.wait(), 1.0)
            if live is not None:
                bar.update(task, completed=min(self.duration, time.monotonic() - t0))
                live.update(Group(bar, self.table(), self.links_line()))

    def summary_of_run(self) -> None:
        said = sum(o.stats.said for o in self.operators)
        acked = sum(o.stats.acked for o in self.operators)
        self.say(f"\n[bold]run over[/]{' (interrupted)' if self.interrupted else ''}: "
                 f"{len(self.operators)} operators said {said} messages, {acked} acknowledged; "
                 f"logs and journals in {self.run_dir}")
        if not self.console.is_terminal:
            self.console.print(self.table())
        self.say("[dim]received, late: what each site's operators saw in the rooms they joined"
                 + ("; the archive below counts every delivery at every site[/]" if self.archive else "[/]"))

    async def run_archive(self, data_dir: Path) -> int:
        if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
            self.say("[bold red]no Java runtime:[/] the Spark archive needs one (`make sysdeps`, or "
                     "apt-get install openjdk-17-jre-headless); skipping it. Journals are in "
                     f"{data_dir}/<site>/journal/")
            return 1
        out = data_dir / "archive"
        self.say(f"\n[bold]archiving[/]: python -m spark_archive --journals {data_dir} --out {out}")
        loop = asyncio.get_running_loop()
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "spark_archive", "--journals", str(data_dir), "--out", str(out),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": str(REPO)}, start_new_session=True)
        def stop_archive() -> None:
            if proc.returncode is None:
                proc.terminate()

        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop_archive)

        async def relay(stream: asyncio.StreamReader | None, style: str) -> None:
            assert stream is not None
            while line := await stream.readline():
                self.console.print(f"[{style}]  {escape(line.decode(errors='replace').rstrip())}[/]",
                                   soft_wrap=True)
        await asyncio.gather(relay(proc.stdout, "default"), relay(proc.stderr, "dim"))
        code = await proc.wait()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        if code != 0:
            self.say(f"[bold red]the archive job {'was stopped' if code < 0 else f'failed (exit {code})'}[/]; "
                     f"journals are in {data_dir}/<site>/journal/")
            return 1
        self.print_transcript_summary(out)
        return 0

    def print_transcript_summary(self, out: Path) -> None:
        try:
            summary = json.loads((out / "summary.json").read_text())
        except (OSError, ValueError) as e:
            self.say(f"[red]cannot read {out / 'summary.json'}: {e}[/]")
            return
        self.say("\n[bold]mission transcript[/]: "
                 f"{summary['messages']} messages in {len(summary.get('rooms', {}))} rooms "
                 f"({', '.join(f'{r} {n}' for r, n in sorted(summary.get('rooms', {}).items()))}); "
                 f"{summary['deliveries']} deliveries at {len(summary.get('sites', []))} sites, "
                 f"{summary['late_deliveries']} late, {summary['never_arrived']} never arrived")
        for row in summary.get("per_site", []):
            self.say(f"  {row['site']:>8}: {row['deliveries']} delivered, {row['late']} late, "
                     f"{row['out_of_place']} out of place, {row['never_arrived']} never arrived")
        self.say(f"[bold]HTML report:[/] {summary.get('report')}")


def _tail(path: Path, lines: int = 8) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


async def run_demo(root: Path, duration: float, console: Console, **kw: Any) -> int:
    return await Demo(root, duration, console, **kw).run()
