"""Running a scenario: real processes, scripted faults, checked journals.

Theory of operation
-------------------
A scenario (``faultinject/scenario.py``) expands into trials (one, or one per
sweep point). Each trial:

1. writes a mission file with every time scaled by ``time_scale`` and a link
   proxy address for every directed pair (``faultinject.missions.write_mission``);
2. starts a ``LinkSet`` in this process (bandwidth divided and delays
   multiplied by the scale, so a scaled run carries the same bytes per
   scenario second), one ``python -m rcm`` and one ``python -m chat_server``
   per site, and creates the workload's accounts;
3. waits until every site sees every other connected; that instant is
   scenario time 0;
4. runs, from time 0, the link schedule, the process faults (kill -9, then a
   restart) and the workload (chat users saying texts at a fixed rate
   through ``chat_server.client``), with a progress bar;
5. at the duration heals every link, lets the system drain, stops the chat
   servers then the RCM servers, and reads every site's journal;
6. runs the checkers over the journals, the link timeline (ground truth
   from the ``LinkSet``) and the runner's own record of crashes and restarts
   (``crash``/``start`` records, which journals do not have); and measures
   the paper's figures from the same records.

Everything measured is reported in scenario seconds (real seconds divided by
the scale). ``results.json`` and the PNG plots go to the output directory.
The command line, ``python -m faultinject run SCENARIO``, is
``faultinject/runner_cli.py``.
"""
from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import random
import secrets
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from chat_server.client import ChatClient, ChatError
from contracts.labels import Scheme
from contracts.mission import Mission, load_mission
from contracts.precedence import DEFAULT, Precedence
from faultinject.checkers import History, LinkEvent, LinkTimeline, load_journals
from faultinject.checkers.history import BLACKHOLE, DOWN, UP
from faultinject.links import LinkSet
from faultinject.loadwatch import LagLog, cpu_pressure_total, pressure_share, watch
from faultinject.metrics import path_metrics
from faultinject.missions import write_mission
from faultinject.procs import LocalChat, LocalRcm, wait_connected
from faultinject.scenario import Scenario, Trial
from faultinject.shaping import Shape
from faultinject.verdict import measure, repair_metrics, run_checks

REPO = Path(__file__).resolve().parents[1]
PASSWORD = "fault-inject-pw"
STATE = {"up": UP, "reset": DOWN, "blackhole": BLACKHOLE}


def _draw(rng: random.Random, mix: tuple[tuple[str, float], ...], rest: str) -> str:
    """A value drawn from a ``[workload]`` mix of (value, share) (``rest`` for the remaining share)."""
    x = rng.random() if mix else 1.0
    for value, share in mix:
        if x < share:
            return value
        x -= share
    return rest


def _precedence(rng: random.Random, mix: tuple[tuple[str, float], ...]) -> str:
    """A say's precedence drawn from ``[workload] precedence`` (routine for the rest)."""
    return _draw(rng, mix, DEFAULT)


@dataclass
class TrialResult:
    trial: str
    p2p: str
    outage: float | None
    duration: float
    directory: str
    checks: dict[str, dict[str, Any]]
    metrics: dict[str, Any]
    workload: dict[str, int]
    faults: list[dict[str, Any]]
    error: str | None = None
    plots: list[str] = field(default_factory=list)
    routing: str = "relay"

    @property
    def passed(self) -> bool:
        return self.error is None and all(c["passed"] or c["informational"] for c in self.checks.values())


# -- one trial ------------------------------------------------------------------------------
class TrialRun:
    """Everything one trial starts, and what it recorded."""

    def __init__(self, scen: Scenario, trial: Trial, directory: Path,
                 progress: Callable[[float, str], None] | None = None) -> None:
        self.scen = scen
        self.trial = trial
        self.dir = directory
        self.s = scen.time_scale
        self.progress = progress or (lambda t, phase: None)
        self.lifetimes: list[dict[str, Any]] = []   # crash/start records for RCM kills
        self.fault_log: list[dict[str, Any]] = []
        self._fault_locks: dict[tuple[str, str], asyncio.Lock] = {}
        self.counts = {"said": 0, "acked": 0, "refused": 0, "unanswered": 0}
        self.t0_wall = 0.0
        self.end_wall = 0.0
        self.workload_end_wall = 0.0
        self.mission: Mission | None = None
        self.lag = LagLog()                          # the harness's own stalls while the trial runs
        self.pressure: list[tuple[float, int | None]] = []     # (wall clock, CPU pressure total): start, end

    def users(self) -> dict[str, list[str]]:
        w = self.scen.workload
        return {site: [f"{site.lower()}user{i}" for i in range(1, w.senders_per_site + 1)]
                for site in (w.sites or self.scen.sites)}

    async def run(self) -> TrialResult:
        scen, trial, s = self.scen, self.trial, self.s
        self.dir.mkdir(parents=True, exist_ok=True)
        L = scen.links
        # Paced links: each site writes to each peer at the links' (time-scaled) bandwidth.
        rates = ({a: {b: int(L.bandwidth_bps / s) for b in scen.sites if b != a} for a in scen.sites}
                 if L.pace and L.bandwidth_bps is not None else None)
        scheme = Scheme.from_table(scen.labels) if scen.labels else None
        clearances = ({site: scheme.parse(text).to_json() for site, text in scen.clearances.items()}
                      if scheme is not None else None)
        mpath = write_mission(self.dir / "mission.toml", f"{scen.name}-{trial.name}", list(scen.sites),
                              rcm=scen.rcm_for(trial.p2p, trial.routing, trial.repair), chat=scen.chat_for(),
                              proxies=True, data_dir="data", rates=rates, labels=scen.labels or None,
                              clearances=clearances)
        mission = load_mission(mpath)
        self.mission = mission
        shape = Shape(delay=L.delay * s, jitter=L.jitter * s,
                      bandwidth_bps=None if L.bandwidth_bps is None else L.bandwidth_bps / s)
        links = LinkSet(mission, shape=shape, policy=L.policy, seed=scen.seed)
        rcm = LocalRcm(mpath)
        chat = LocalChat(mpath)
        clients: list[ChatClient] = []
        error: str | None = None
        await links.start()
        try:
            self.progress(0, "starting")
            await asyncio.to_thread(rcm.start_all, 30.0)
            # A workload that says FLASH needs the role ([chat] flash_role); its rate is the scenario's own
            # ([chat] urgent_per_minute: Scenario.chat_for).
            says_flash = any(level == Precedence.FLASH.value for level, _ in scen.workload.precedence)
            flash = ("flash",) if says_flash else ()        # the role's default name
            # In a labeled mission every user holds its site's clearance (and says labels it dominates).
            clear = {site: str(mission.clearance(site)) for site in scen.sites} if mission.labels.enabled else None
            await asyncio.to_thread(chat.add_users, self.users(), PASSWORD, flash, clear)
            for site in scen.sites:
                chat.start(site)
            for site in scen.sites:
                await asyncio.to_thread(chat.wait_ready, site, 30.0)
            await wait_connected(chat.mission, self.scen.sites, 60.0)   # every site sees every other
            clients = await self._connect_clients(chat)
            self.progress(0, "running")
            await self._run_timeline(links, rcm, chat, clients)
        except Exception as e:     # noqa: BLE001 - reported as the trial's error, the run goes on
            error = f"{type(e).__name__}: {e}"
        finally:
            self.end_wall = self.end_wall or time.time()
            for c in clients:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(c.close(), 5)
            await asyncio.to_thread(chat.stop_all)
            await asyncio.to_thread(rcm.stop_all)
            await links.close()
        self.progress(trial.duration, "checking")
        # In a thread: a sweep's other trials are still running on this event loop (their link
        # proxies and chat clients), and evaluation (journals, checkers, plots) takes seconds.
        return await asyncio.to_thread(self._evaluate, links, mission.data_dir, error)

    async def _connect_clients(self, chat: LocalChat) -> list[ChatClient]:
        out = []
        for site, names in self.users().items():
            for u in names:
                c = await ChatClient.connect(chat.url(site), u, PASSWORD, reconnect=True,
                                             reconnect_delay=max(0.05, 0.5 * self.s))
                for room in self.scen.workload.rooms:
                    await c.join(room)
                c.site = site  # type: ignore[attr-defined]
                out.append(c)
        return out

    async def _run_timeline(self, links: LinkSet, rcm: LocalRcm, chat: LocalChat,
                            clients: list[ChatClient]) -> None:
        loop = asyncio.get_running_loop()
        s, trial, w = self.s, self.trial, self.scen.workload
        t0 = loop.time()
        self.t0_wall = time.time()
        watcher = asyncio.ensure_future(watch(self.lag, time.time))
        self.pressure = [(time.time(), cpu_pressure_total())]
        sched = links.start_schedule(trial.schedule, time_scale=s) if trial.schedule.actions else None
        tasks = [asyncio.ensure_future(self._fault(f, t0, rcm, chat)) for f in trial.faults]
        stop = w.stop if w.stop is not None else trial.duration
        pending: set[asyncio.Task[None]] = set()
        tasks += [asyncio.ensure_future(self._sender(c, i, t0, w.start, stop, pending))
                  for i, c in enumerate(clients)]
        end = t0 + trial.duration * s
        try:
            while loop.time() < end:
                self.progress((loop.time() - t0) / s, "running")
                await asyncio.sleep(min(0.25, max(0.0, end - loop.time())))
            self.workload_end_wall = time.time()
            if sched is not None:
                await sched
            await asyncio.gather(*tasks)
        finally:
            for t in tasks:         # on an error, nothing of this trial may outlive it
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)
            self.pressure.append((time.time(), cpu_pressure_total()))
        await links.heal()
        self.progress(trial.duration, "draining")
        if pending:
            await asyncio.wait(pending, timeout=max(5.0, self.scen.drain * s))
        self.counts["unanswered"] = sum(1 for t in pending if not t.done())
        for t in pending:
            t.cancel()
        await asyncio.sleep(self.scen.drain * s)
        self.end_wall = time.time()

    async def _sender(self, client: ChatClient, index: int, t0: float, start: float, stop: float,
                      pending: set[asyncio.Task[None]]) -> None:
        """Say one text every period from ``start`` to ``stop`` (scenario seconds), not waiting for acks."""
        loop = asyncio.get_running_loop()
        w, s = self.scen.workload, self.s
        period = w.senders_per_site / w.rate
        # Senders of different sites are spread over one period so that sends do not all coincide.
        offset = period * ((index * 0.618) % 1.0)
        rng = random.Random(f"{self.scen.seed}-{client.user}")
        labels = self.sendable(client.site, w.labels)       # type: ignore[attr-defined]
        for k in itertools.count():
            at = start + offset + k * period
            if at >= stop:
                return
            delay = t0 + at * s - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            room = w.rooms[k % len(w.rooms)]
            tag = f"{client.site}/{client.user}/{k} "    # type: ignore[attr-defined]
            text = tag + "x" * max(0, w.size - len(tag))
            self.counts["said"] += 1
            task = asyncio.ensure_future(self._say(client, room, text, _precedence(rng, w.precedence),
                                                   _draw(rng, labels, "")))
            pending.add(task)
            task.add_done_callback(pending.discard)

    def sendable(self, site: str, mix: tuple[tuple[str, float], ...]) -> tuple[tuple[str, float], ...]:
        """The workload's labels a user of ``site`` may send (its users hold the site's clearance)."""
        m = self.mission
        if not mix or m is None:
            return ()
        cl = m.clearance(site)
        return tuple((text, share) for text, share in mix if cl.dominates(m.labels.parse(text)))

    async def _say(self, client: ChatClient, room: str, text: str, precedence: str = DEFAULT,
                   label: str = "") -> None:
        try:
            if precedence == DEFAULT:
                await client.say(room, text, label=label or None)
            else:
                frame = {"type": "say", "room": room, "text": text, "client_id": secrets.token_hex(8),
                         "precedence": precedence}
                if label:
                    frame["label"] = label
                await client.request(frame)
            self.counts["acked"] += 1
        except (TimeoutError, ChatError, ConnectionError):
            self.counts["refused"] += 1

    async def _fault(self, f: Any, t0: float, rcm: LocalRcm, chat: LocalChat) -> None:
        loop = asyncio.get_running_loop()
        await asyncio.sleep(max(0.0, t0 + f.at * self.s - loop.time()))
        # A process is killed again only once its previous restart is complete (a restart takes
        # real seconds that the scenario's times do not know about).
        async with self._fault_locks.setdefault((f.site, f.process), asyncio.Lock()):
            await self._kill_and_restart(f, rcm, chat)

    async def _kill_and_restart(self, f: Any, rcm: LocalRcm, chat: LocalChat) -> None:
        killed = time.time()
        if f.process == "rcm":
            await asyncio.to_thread(rcm.kill, f.site)
            self.lifetimes.append({"kind": "crash", "site": f.site, "at": killed})
        else:
            await asyncio.to_thread(chat.kill, f.site)
        await asyncio.sleep(f.restart_after * self.s)
        restarted = time.time()
        if f.process == "rcm":
            await asyncio.to_thread(rcm.start, f.site)
            await asyncio.to_thread(rcm.wait_ready, f.site, 30.0)
            inc = _incarnation(rcm.mission.site_dir(f.site))
            self.lifetimes.append({"kind": "start", "site": f.site, "at": restarted, "inc": inc})
        else:
            chat.start(f.site)
            await asyncio.to_thread(chat.wait_ready, f.site, 30.0)
        self.fault_log.append({"site": f.site, "process": f.process, "at": f.at,
                               "restart_after": f.restart_after,
                               "killed_at": round((killed - self.t0_wall) / self.s, 3),
                               "ready_at": round((time.time() - self.t0_wall) / self.s, 3)})

    # -- evaluation -----------------------------------------------------------------------
    def _evaluate(self, links: LinkSet, data_dir: Path, error: str | None) -> TrialResult:
        scen, trial, s = self.scen, self.trial, self.s
        records, _, bad = load_journals(data_dir) if data_dir.exists() else ([], [], 0)
        end = self.end_wall
        records = [r for r in records if float(r.get("at", 0)) <= end]
        records = rebase(records, scen.sites, self.t0_wall) if self.t0_wall else records
        records += self.lifetimes
        records.sort(key=lambda r: float(r.get("at", 0)))
        events = link_events(links)
        h = History(records, scen.sites, end=end, infer_repaired=True)
        relaying = trial.routing == "relay"
        hops = int(scen.rcm_for(trial.p2p, trial.routing, trial.repair).get("max_hops", 3))
        lt = LinkTimeline(events, scen.sites, max_hops=hops if relaying else None)
        checks = run_checks(scen, trial, h, lt, records) if error is None else {}
        metrics = measure(scen, trial, h, lt, self.t0_wall, self.workload_end_wall or end, end)
        metrics["torn_journal_lines"] = bad
        # How loaded the machine was while the workload ran (faultinject/loadwatch.py): read beside a real-time
        # checker's failure, it tells a starved harness or machine from a protocol fault.
        (w0, p0), (w1, p1) = self.pressure if len(self.pressure) == 2 else ((0.0, None), (0.0, None))
        metrics["machine"] = {**self.lag.summary(self.t0_wall, s),
                              "cpu_pressure_share": pressure_share(p0, p1, w1 - w0)}
        flapping = {p for per in trial.periodic for p in per.pairs} or set(lt.links)
        metrics["paths"] = path_metrics(h, lt, flapping, self.t0_wall, self.workload_end_wall or end, s)
        metrics["link_bytes"] = sum(p.stats().forward.bytes_in + p.stats().reverse.bytes_in
                                    for p in links.proxies.values())
        metrics["bytes_per_message"] = metrics["link_bytes"] / len(h.sends) if h.sends else None
        metrics["repair"] = repair_metrics(h, lt, self.t0_wall, self.workload_end_wall or end, s)
        # The raw material of the plots, in scenario seconds from time 0.
        (self.dir / "timeline.json").write_text(json.dumps({
            "t0": self.t0_wall, "time_scale": s, "links": [e.to_json() for e in events],
            "lifetimes": self.lifetimes}, indent=1))
        from faultinject import plots
        pngs = plots.plot_trial(scen, trial, h, lt, self.t0_wall, self.workload_end_wall or end, self.dir) \
            if self.t0_wall else []
        res = TrialResult(trial.name, trial.p2p, trial.outage, trial.duration, str(self.dir), checks, metrics,
                          dict(self.counts), self.fault_log, error, [str(p) for p in pngs], trial.routing)
        (self.dir / "trial.json").write_text(json.dumps(asdict(res), indent=1, default=str))
        return res


def rebase(records: list[dict[str, Any]], sites: tuple[str, ...], t0: float) -> list[dict[str, Any]]:
    """The history as it stands from scenario time 0: every site starts just before ``t0``.

    Start-up churn (statuses journaled while the sites came up) is replaced by
    each site's statuses as they were at ``t0`` (the runner waits for all
    connected before ``t0``); records from ``t0`` on are kept as they are.
    """
    start = t0 - 1e-3
    at_t0: dict[tuple[str, str], str] = {}
    out: list[dict[str, Any]] = [{"kind": "start", "site": s, "at": start, "inc": 1} for s in sites]
    for r in records:
        if float(r.get("at", 0)) >= t0:
            continue
        if r.get("kind") == "status":
            at_t0[(r["site"], r["peer"])] = r["status"]
        else:
            out.append(r)      # nothing else happens before t0; kept so a checker would see it
    out += [{"kind": "status", "site": s, "at": start + 1e-6, "peer": p, "status": st}
            for (s, p), st in sorted(at_t0.items())]
    return out + [r for r in records if float(r.get("at", 0)) >= t0]


def _incarnation(site_dir: Path) -> int:
    try:
        return int(json.loads((site_dir / "rcm" / "state.json").read_text())["incarnation"])
    except (OSError, ValueError, KeyError):
        return 0


def link_events(links: LinkSet) -> list[LinkEvent]:
    """Ground truth for the checkers: pair mode changes as commanded on the LinkSet."""
    out = []
    for e in links.history:
        if e.kind != "mode":
            continue
        a, b = e.link.split("-", 1)
        out.append(LinkEvent(e.at, a, b, STATE[str(e.value)]))
    return out


# -- the whole scenario ---------------------------------------------------------------------
async def run_scenario(scen: Scenario, out: Path, *, quiet: bool = False) -> dict[str, Any]:
    """Run every trial (``[sweep] parallel`` at a time); write results.json and the plots."""
    from faultinject import plots

    out.mkdir(parents=True, exist_ok=True)
    trials = scen.trials()
    progress = None
    if not quiet:
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
        progress = Progress(TextColumn("{task.description:22}"), BarColumn(),
                            TextColumn("{task.fields[t]:>7} / {task.total:g} s"),
                            TextColumn("{task.fields[phase]}"), TimeElapsedColumn())
        progress.start()
    sem = asyncio.Semaphore(scen.sweep.parallel)

    async def one(trial: Trial) -> TrialResult:
        async with sem:
            task = None
            if progress is not None:
                task = progress.add_task(trial.name, total=trial.duration, t="0", phase="starting")

            def report(t: float, phase: str) -> None:
                if progress is not None and task is not None:
                    progress.update(task, completed=min(t, trial.duration), t=f"{t:.0f}", phase=phase)
            res = await TrialRun(scen, trial, out / trial.name, report).run()
            if progress is not None and task is not None:
                progress.update(task, phase="passed" if res.passed else "FAILED")
            return res

    started = time.time()
    try:
        results = await asyncio.gather(*(one(t) for t in trials))
    finally:
        if progress is not None:
            progress.stop()
    doc: dict[str, Any] = {
        "scenario": scen.name, "file": str(scen.path) if scen.path else None, "description": scen.description,
        "time_scale": scen.time_scale, "seed": scen.seed, "parameters": scen.raw,
        "started": started, "wall_seconds": round(time.time() - started, 1),
        "passed": all(r.passed for r in results),
        "trials": [asdict(r) for r in results],
    }
    doc["figures"] = figures(scen, results)
    doc["plots"] = plots.plot_scenario(scen, results, out)
    (out / "results.json").write_text(json.dumps(doc, indent=1, default=str))
    return doc


def figures(scen: Scenario, results: list[TrialResult]) -> dict[str, Any]:
    """The headline numbers: per trial, and Figure 7's table for sweeps."""
    figs: dict[str, Any] = {}
    if len(results) > 1:
        table: dict[str, dict[str, float | None]] = {}
        for r in results:
            table.setdefault(r.p2p, {})[f"{r.outage:g}" if r.outage is not None else r.trial] = \
                r.metrics.get("received_ratio")
        figs["received_ratio"] = table
    for r in results:
        aw, dl = r.metrics["awareness"], r.metrics["delivery"]
        figs.setdefault("trials", {})[r.trial] = {
            "received_ratio": r.metrics.get("received_ratio"),
            "suspicion_mean_s": aw["suspicion_s"].get("mean"), "suspicion_max_s": aw["suspicion_s"].get("max"),
            "restoration_mean_s": aw["restoration_s"].get("mean"),
            "restoration_max_s": aw["restoration_s"].get("max"),
            "logical_connectivity": aw["logical_connectivity"], "link_up_share": aw["link_up_share"],
            "long_outage_share": aw["long_outage_share"], "disconnections": aw["disconnections"],
            "rate_up": dl["rate_up"], "rate_down": dl["rate_down"],
            "latency_up_mean_s": dl["latency_up"].get("mean"), "max_latency_s": dl["max_latency_s"],
        }
    return figs


__all__ = ["TrialResult", "TrialRun", "figures", "link_events", "run_scenario"]
