"""Scenario files (TOML): sites, RCM settings, link schedules, process faults, workload.

A scenario says what to run and what to do to it, in *scenario seconds*; the
runner (``faultinject/runner.py``) multiplies every time by ``time_scale``
(timeouts, link intervals, fault times, the duration, the send period) and
divides every rate by it, so a one-hour experiment at ``time_scale = 0.1``
runs in six minutes with the same shape. Results are reported back in
scenario seconds.

``faultinject.scenario_file.load_scenario(path)`` parses and validates a
file and returns a :class:`Scenario`; every refusal is a
:class:`ScenarioError` whose message names the key. ``Scenario.trials()`` expands a ``[sweep]`` into one
:class:`Trial` per point (p2p mode x routing x outage length); a scenario
without a sweep has one trial. ``[sweep] routing = ["direct", "relay"]`` runs
the same schedule with the paper's direct links and with relaying, side by
side. The format is documented in docs/faultinject.md
("Scenario files").
"""
from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from contracts.mission import parse_rcm_settings, scaled_rcm_table
from faultinject.schedule import Schedule, flapping, partitions, periodic
from faultinject.shaping import BlackholePolicy, LinkMode

PROCESSES = ("rcm", "chat")
CHECKS = ("reliability", "duplicates", "fifo", "igo", "awareness", "robustness", "leaks")
OPTIONAL_CHECKS = ("eventual",)       # issue 18: enabled by name in [checks] enabled
# Chat [chat] keys that are intervals: scaled with the scenario.
CHAT_INTERVALS = ("receipt_interval", "presence_interval", "rcm_retry_max", "rcm_ack_interval")


class ScenarioError(ValueError):
    """A scenario file is unusable; the message names the key."""


# -- the parsed scenario -------------------------------------------------------------
@dataclass(frozen=True)
class Periodic:
    pairs: tuple[tuple[str, str], ...]
    up: float
    down: float
    start: float = 0.0
    cycles: int | None = None
    until: float | None = None


@dataclass(frozen=True)
class PartitionStep:
    at: float
    groups: tuple[tuple[str, ...], ...] | None      # None heals


@dataclass(frozen=True)
class Flapping:
    pairs: tuple[tuple[str, str], ...]
    mean_up: float
    mean_down: float
    seed: int
    min_interval: float = 0.0
    start: float = 0.0
    until: float | None = None


@dataclass(frozen=True)
class Links:
    delay: float = 0.0
    jitter: float = 0.0
    bandwidth_bps: float | None = 56_000.0
    down_mode: LinkMode = LinkMode.BLACKHOLE
    policy: BlackholePolicy = BlackholePolicy.BUFFER
    periodic: tuple[Periodic, ...] = ()
    partition: tuple[PartitionStep, ...] = ()
    flapping: tuple[Flapping, ...] = ()
    pace: bool = False                # every site paces every link to bandwidth_bps ([sites.A.rate])


@dataclass(frozen=True)
class Fault:
    """At ``at``, kill -9 ``process`` of ``site``; start it again ``restart_after`` later."""

    at: float
    site: str
    process: str
    restart_after: float


@dataclass(frozen=True)
class RandomFaults:
    count: int
    processes: tuple[str, ...]
    sites: tuple[str, ...]
    window: tuple[float, float]
    restart_after: tuple[float, float]
    seed: int


@dataclass(frozen=True)
class Workload:
    senders_per_site: int = 1
    rate: float = 2.0                 # messages per second per site (all its senders together)
    rooms: tuple[str, ...] = ("ops",)
    size: int = 100                   # bytes of text per message
    sites: tuple[str, ...] = ()       # sending sites (empty: every site)
    start: float = 0.0
    stop: float | None = None         # default: the scenario's duration
    precedence: tuple[tuple[str, float], ...] = ()   # shares of flash, immediate, priority; the rest routine
    labels: tuple[tuple[str, float], ...] = ()       # shares of labels above the room's floor (people's text)


@dataclass(frozen=True)
class Sweep:
    p2p: tuple[str, ...] = ()
    outage: tuple[float, ...] = ()    # sets `down` of every [[links.periodic]]
    routing: tuple[str, ...] = ()     # [rcm] routing of each trial (direct | relay)
    parallel: int = 1
    repair: tuple[bool, ...] = ()     # [rcm] repair of each trial (issue 18: with and without)


@dataclass(frozen=True)
class Checks:
    enabled: tuple[str, ...] = CHECKS
    informational: tuple[str, ...] = ()   # reported, never fail the run
    slack: float = 0.3                    # real seconds added to every timing bound (process jitter)


@dataclass(frozen=True)
class Trial:
    """One run of a scenario: a mission with its schedule, faults and workload."""

    name: str
    p2p: str
    outage: float | None
    duration: float
    schedule: Schedule
    faults: tuple[Fault, ...]
    periodic: tuple[Periodic, ...]
    routing: str = "relay"
    repair: bool | None = None        # swept [rcm] repair (None: as the scenario's [rcm] says)


@dataclass(frozen=True)
class Scenario:
    name: str
    path: Path | None
    description: str
    sites: tuple[str, ...]
    duration: float | None
    drain: float
    time_scale: float
    seed: int
    measure: tuple[str, str]
    rcm: dict[str, Any]
    chat: dict[str, Any]
    links: Links
    faults: tuple[Fault, ...]
    random_faults: RandomFaults | None
    workload: Workload
    sweep: Sweep
    checks: Checks
    raw: dict[str, Any] = field(default_factory=dict, compare=False)
    labels: dict[str, Any] = field(default_factory=dict)        # the mission's [labels] table (empty: none)
    clearances: dict[str, str] = field(default_factory=dict)    # site -> its clearance (people's text)

    # -- expansion -----------------------------------------------------------------
    def trials(self) -> list[Trial]:
        """One trial per sweep point (p2p x routing x outage); one trial without a sweep."""
        modes = self.sweep.p2p or (str(self.rcm.get("p2p", "robust")),)
        routings: tuple[str | None, ...] = self.sweep.routing or (None,)
        outages: tuple[float | None, ...] = self.sweep.outage or (None,)
        repairs: tuple[bool | None, ...] = self.sweep.repair or (None,)
        out = []
        for mode, routing, outage, repair in itertools.product(modes, routings, outages, repairs):
            pers = self.links.periodic
            if outage is not None:
                pers = tuple(replace(p, down=outage) for p in pers)
            duration = self.duration if self.duration is not None else _periodic_end(pers)
            name = mode if len(modes) > 1 or self.sweep.p2p else "run"
            if routing is not None:
                name = routing if name == "run" else f"{name}-{routing}"
            if outage is not None:
                name = f"{name}-out{outage:g}"
            if repair is not None:
                word = "repair" if repair else "no-repair"
                name = word if name == "run" else f"{name}-{word}"
            out.append(Trial(name, mode, outage, duration, self._schedule(pers, duration),
                             self._faults(duration), pers, self.routing_of(mode, routing), repair))
        return out

    def routing_of(self, p2p: str, swept: str | None = None) -> str:
        """The [rcm] routing a trial runs with: swept, given, or the default for its p2p mode."""
        if swept is not None:
            return swept
        return parse_rcm_settings({**self.rcm, "p2p": p2p}).routing

    def _schedule(self, pers: tuple[Periodic, ...], duration: float) -> Schedule:
        sched = Schedule()
        mode = self.links.down_mode
        for p in pers:
            if p.down <= 0:
                continue            # an outage length of 0: the links stay up
            kw: dict[str, Any] = ({"cycles": p.cycles} if p.cycles is not None
                                  else {"until": p.until if p.until is not None else duration})
            sched = sched + periodic(p.pairs, up=p.up, down=p.down, start=p.start,
                                     down_mode=mode, **kw)
        for f in self.links.flapping:
            until = f.until if f.until is not None else duration
            fl = flapping(f.pairs, seed=f.seed, mean_up=f.mean_up, mean_down=f.mean_down,
                          duration=until - f.start, down_mode=mode, min_interval=f.min_interval)
            if f.start:
                fl = Schedule(tuple(replace(a, at=a.at + f.start) for a in fl.actions))
            sched = sched + fl
        # Partitions after flaps: at a tie (a flap ends as a partition begins) the partition wins.
        if self.links.partition:
            sched = sched + partitions([(s.at, [list(g) for g in s.groups] if s.groups else None)
                                        for s in self.links.partition], mode=mode)
        return sched

    def _faults(self, duration: float) -> tuple[Fault, ...]:
        faults = list(self.faults)
        rf = self.random_faults
        if rf is not None:
            rng = random.Random(rf.seed)
            lo, hi = rf.window
            hi = min(hi, duration)
            for _ in range(rf.count):
                faults.append(Fault(round(rng.uniform(lo, hi), 3), rng.choice(rf.sites),
                                    rng.choice(rf.processes), round(rng.uniform(*rf.restart_after), 3)))
        faults.sort(key=lambda f: f.at)
        # Two faults of the same process must not overlap: the later one waits for the restart.
        busy: dict[tuple[str, str], float] = {}
        out = []
        for f in faults:
            key = (f.site, f.process)
            at = max(f.at, busy.get(key, -1.0) + 0.5)
            out.append(replace(f, at=at))
            busy[key] = at + f.restart_after
        return tuple(sorted(out, key=lambda f: f.at))

    def rcm_for(self, p2p: str, routing: str | None = None, repair: bool | None = None) -> dict[str, Any]:
        """The [rcm] table of the generated mission: times scaled, p2p (and routing, repair) set."""
        table = {**self.rcm, "p2p": p2p}
        if routing is not None:
            table["routing"] = routing
        if repair is not None:
            table["repair"] = repair
        return scaled_rcm_table(table, self.time_scale)

    def chat_for(self) -> dict[str, Any]:
        """The [chat] table of the generated mission: test-speed password hashing, intervals scaled."""
        out: dict[str, Any] = {"kdf_n": 1024, "rate_limit_frames": 1000.0, "rate_limit_burst": 4000,
                               "urgent_per_minute": 60_000.0, "urgent_burst": 1000}    # the workload sets the pace
        out.update(self.chat)
        defaults = {"receipt_interval": 0.5, "presence_interval": 0.5, "rcm_retry_max": 5.0,
                    "rcm_ack_interval": 0.2}
        for k in CHAT_INTERVALS:
            out[k] = round(max(0.01, float(out.get(k, defaults[k])) * self.time_scale), 6)
        return out


def _periodic_end(pers: tuple[Periodic, ...]) -> float:
    ends = []
    for p in pers:
        if p.cycles is None:
            raise ScenarioError("[scenario] duration is required unless every [[links.periodic]] "
                                "has cycles")
        ends.append(p.start + p.cycles * (p.up + max(p.down, 0.0)))
    if not ends:
        raise ScenarioError("[scenario] duration is required")
    return max(ends)


__all__ = ["CHECKS", "Checks", "Fault", "Flapping", "Links", "PartitionStep", "Periodic", "RandomFaults",
           "Scenario", "ScenarioError", "Sweep", "Trial", "Workload"]
