"""Seeded fault schedules: partitions (also intransitive), blackholes, flapping, crashes.

Intransitive shapes, where a relay keeps sites talking (``[rcm] routing = "relay"``):
``intransitive`` (one link of a triangle down), ``oneway`` (one direction of a
link blackholed: one end still hears the other, which hears nothing), and
``chain`` (every link down but those of a line through three or more sites).

A schedule is a list of *episodes* drawn from the seed: each asks for some
links to be ``down`` or ``blackhole`` (or a site to be crashed) over an
interval. Episodes may overlap; a link's state is the worst one currently asked
for (down > blackhole > up) and a site is up when no crash episode holds it.
``compile_schedule`` turns episodes into the time-ordered changes the simulator
applies, which are also what the trace records.
"""
from __future__ import annotations

import itertools
import random
from dataclasses import dataclass
from typing import Any

from faultinject.checkers.history import BLACKHOLE, DOWN, UP, pair

SEVERITY = {UP: 0, BLACKHOLE: 2, DOWN: 3}
ONEWAY = "oneway:"
"""``oneway:S``: the link carries nothing *from* site S (the other direction works)."""


def oneway(src: str) -> str:
    return ONEWAY + src


def severity(state: str) -> int:
    return 1 if state.startswith(ONEWAY) else SEVERITY[state]


def worst(states: list[str]) -> str:
    """The state of a link several episodes ask for: the worst; both one-way directions make a blackhole."""
    if not states:
        return UP
    top = max(states, key=severity)
    if top.startswith(ONEWAY) and len({s for s in states if s.startswith(ONEWAY)}) > 1:
        return BLACKHOLE
    return top


@dataclass(frozen=True, slots=True)
class Episode:
    kind: str                    # partition | intransitive | oneway | chain | blackhole | flap | crash
    start: float
    end: float
    links: tuple[tuple[str, str, str], ...] = ()     # ((a, b, state), ...) held for the whole episode
    site: str | None = None      # crash
    phases: tuple[tuple[float, float, str], ...] = ()   # flap: ((t0, t1, state), ...) for links[0]


def _duration(rng: random.Random, liveness: float, suspect: float) -> float:
    """Short (under liveness), medium (suspected), or long (past suspect_timeout)."""
    r = rng.random()
    if r < 0.35:
        return rng.uniform(0.1, liveness * 0.8)
    if r < 0.75:
        return rng.uniform(liveness, suspect * 0.9)
    return rng.uniform(suspect * 1.1, suspect * 2.0)


def make_episodes(rng: random.Random, sites: list[str], chaos: float, count: int,
                  liveness: float, suspect: float, relaying: bool = False) -> list[Episode]:
    """``relaying``: also one-way fades and chains (the paper's direct links cannot route around them)."""
    eps: list[Episode] = []
    kinds = ["partition", "blackhole", "flap", "crash"]
    if len(sites) >= 3:
        kinds.append("intransitive")
        if relaying:
            kinds += ["oneway", "chain"]
    for _ in range(count):
        kind = rng.choice(kinds)
        start = rng.uniform(0.5, chaos * 0.9)
        dur = _duration(rng, liveness, suspect)
        end = min(start + dur, chaos)
        if kind == "partition":
            shuffled = sites[:]
            rng.shuffle(shuffled)
            cut = rng.randrange(1, len(sites))
            left, right = set(shuffled[:cut]), set(shuffled[cut:])
            state = BLACKHOLE if rng.random() < 0.3 else DOWN
            links = tuple((a, b, state) for a in sorted(left) for b in sorted(right))
            eps.append(Episode(kind, start, end, links))
        elif kind == "intransitive":
            a, b, c = rng.sample(sites, 3)
            eps.append(Episode(kind, start, end, ((a, c, DOWN),)))
        elif kind == "oneway":
            a, b = rng.sample(sites, 2)
            eps.append(Episode(kind, start, end, ((a, b, oneway(a)),)))
        elif kind == "chain":
            line = rng.sample(sites, rng.randint(3, len(sites)))
            keep = {frozenset(p) for p in zip(line, line[1:])}
            state = BLACKHOLE if rng.random() < 0.3 else DOWN
            links = tuple((a, b, state) for a, b in itertools.combinations(sorted(sites), 2)
                          if frozenset((a, b)) not in keep)
            eps.append(Episode(kind, start, end, links))
        elif kind == "blackhole":
            a, b = rng.sample(sites, 2)
            eps.append(Episode(kind, start, end, ((a, b, BLACKHOLE),)))
        elif kind == "flap":
            a, b = rng.sample(sites, 2)
            state = BLACKHOLE if rng.random() < 0.3 else DOWN
            t = start
            phases = []
            for _ in range(rng.randint(2, 6)):
                t0 = t
                t1 = min(t0 + rng.uniform(0.05, liveness * 1.5), chaos)
                phases.append((t0, t1, state))
                t = t1 + rng.uniform(0.05, liveness * 1.5)
                if t >= chaos:
                    break
            eps.append(Episode(kind, start, phases[-1][1], ((a, b, state),), phases=tuple(phases)))
        else:
            site = rng.choice(sites)
            eps.append(Episode(kind, start, end, site=site))
    return eps


def make_repair_episodes(rng: random.Random, sites: list[str], chaos: float, count: int, suspect: float,
                         repair_period: float) -> list[Episode]:
    """Repair's faults (issue 18): a site cut off from every other past ``suspect`` (so messages to it are
    skipped and reported missing), then, just after the heal while the repair runs, a crash of that site
    or of another (a holder)."""
    eps: list[Episode] = []
    for _ in range(count):
        site = rng.choice(sites)
        start = rng.uniform(0.5, max(0.5, chaos - 2.5 * suspect))
        end = min(start + rng.uniform(1.2 * suspect, 2.5 * suspect), chaos)
        links = tuple(pair(site, o) + (DOWN,) for o in sites if o != site)
        eps.append(Episode("partition", start, end, links))
        crash_at = min(end + rng.uniform(0.0, repair_period), chaos)
        victim = site if rng.random() < 0.5 else rng.choice([o for o in sites if o != site])
        eps.append(Episode("crash", crash_at, min(crash_at + rng.uniform(0.3, 3.0), chaos), site=victim))
    return eps


def compile_schedule(episodes: list[Episode], sites: list[str]) -> list[tuple[Any, ...]]:
    """Time-ordered changes: ``(t, "link", a, b, state)`` and ``(t, "crash"|"restart", site)``."""
    marks: list[tuple[float, int, str, Any, Any]] = []   # (t, +1/-1, what, key: a site or a pair, tag)
    for i, e in enumerate(episodes):
        if e.kind == "crash":
            marks.append((e.start, 1, "site", e.site, i))
            marks.append((e.end, -1, "site", e.site, i))
        elif e.kind == "flap":
            a, b, state = e.links[0]
            for j, (t0, t1, st) in enumerate(e.phases):
                marks.append((t0, 1, "link", pair(a, b), (st, i, j)))
                marks.append((t1, -1, "link", pair(a, b), (st, i, j)))
        else:
            for a, b, state in e.links:
                marks.append((e.start, 1, "link", pair(a, b), (state, i)))
                marks.append((e.end, -1, "link", pair(a, b), (state, i)))
    # Ends before starts at equal times, so back-to-back episodes show a change.
    marks.sort(key=lambda m: (m[0], m[1]))
    active_links: dict[tuple[str, str], list[Any]] = {pair(a, b): [] for a, b in itertools.combinations(sites, 2)}
    crashed: dict[str, int] = {s: 0 for s in sites}
    link_state = {k: UP for k in active_links}
    out: list[tuple[Any, ...]] = []
    for t, sign, what, key, tag in marks:
        if what == "site":
            before = crashed[key] > 0
            crashed[key] += sign
            after = crashed[key] > 0
            if before != after:
                out.append((t, "crash" if after else "restart", key))
        else:
            lst = active_links[key]
            if sign > 0:
                lst.append(tag)
            else:
                lst.remove(tag)
            new = worst([x[0] for x in lst])
            if new != link_state[key]:
                link_state[key] = new
                out.append((t, "link", key[0], key[1], new))
    return out
