"""Link schedules as data: when which site pairs go up or down.

A :class:`Schedule` is a sorted tuple of :class:`LinkAction` (time offset in
seconds from the schedule's start, the unordered site pairs it touches, the
mode they take). Builders produce the shapes the experiments need: the
paper's periodic outages (30 s up, 10 s down, two two-site partitions),
partitions by groups at given times, and random flapping where every draw
comes from one seed. ``Schedule.scaled(f)`` multiplies every time by ``f``
(0.1 runs a 40 s cycle in 4 s), in step with ``contracts.mission.scaled_rcm_table``.

:class:`ScheduleCursor` is the sans-IO driver (``now`` in, due actions out);
:func:`run_schedule` is the thin asyncio loop around it, with injectable
``clock`` and ``sleep`` so it can run on a virtual clock.
"""
from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass

from faultinject.shaping import LinkMode

Pair = tuple[str, str]


def pair(a: str, b: str) -> Pair:
    """The unordered site pair {a, b}, spelled in sorted order."""
    if a == b:
        raise ValueError(f"a link joins two different sites, got {a!r} twice")
    return (a, b) if a < b else (b, a)


def _check_groups(groups: Sequence[Iterable[str]]) -> list[list[str]]:
    seen: dict[str, int] = {}
    out: list[list[str]] = []
    for i, g in enumerate(groups):
        members = list(g)
        if not members:
            raise ValueError(f"partition group {i} is empty")
        for s in members:
            if s in seen:
                raise ValueError(f"site {s!r} is in two partition groups")
            seen[s] = i
        out.append(members)
    return out


def cross_pairs(groups: Sequence[Iterable[str]]) -> list[Pair]:
    """Pairs whose sites are in different groups (the links a partition cuts)."""
    gs = _check_groups(groups)
    return sorted({pair(a, b) for g, h in itertools.combinations(gs, 2) for a in g for b in h})


def within_pairs(groups: Sequence[Iterable[str]]) -> list[Pair]:
    """Pairs whose sites are in the same group (the links a partition leaves up)."""
    gs = _check_groups(groups)
    return sorted({pair(a, b) for g in gs for a, b in itertools.combinations(g, 2)})


@dataclass(frozen=True, slots=True)
class LinkAction:
    """At ``at`` seconds after the schedule starts, every pair in ``pairs`` takes ``mode``."""

    at: float
    pairs: tuple[Pair, ...]
    mode: LinkMode
    label: str = ""


@dataclass(frozen=True, slots=True)
class Schedule:
    """Link actions in time order (ties keep their given order)."""

    actions: tuple[LinkAction, ...] = ()

    def __post_init__(self) -> None:
        for a in self.actions:
            if not a.at >= 0:
                raise ValueError(f"schedule time {a.at!r} must be >= 0")
        object.__setattr__(self, "actions", tuple(sorted(self.actions, key=lambda a: a.at)))

    def scaled(self, factor: float) -> Schedule:
        """Every time multiplied by ``factor``."""
        if not factor > 0:
            raise ValueError(f"time scale {factor!r} must be > 0")
        return Schedule(tuple(LinkAction(a.at * factor, a.pairs, a.mode, a.label) for a in self.actions))

    def __add__(self, other: Schedule) -> Schedule:
        return Schedule(self.actions + other.actions)

    @property
    def end(self) -> float:
        """Time of the last action (0 for an empty schedule)."""
        return self.actions[-1].at if self.actions else 0.0

    def pairs(self) -> set[Pair]:
        return {p for a in self.actions for p in a.pairs}


def periodic(pairs: Iterable[Pair], *, up: float, down: float, cycles: int | None = None,
             until: float | None = None, down_mode: LinkMode = LinkMode.RESET,
             start: float = 0.0) -> Schedule:
    """``pairs`` alternate ``up`` seconds up then ``down`` seconds down, from ``start``.

    Stops after ``cycles`` up/down cycles or at ``until`` (whichever is given;
    exactly one is required) and always ends with the pairs back up.
    """
    ps = tuple(sorted({pair(*p) for p in pairs}))
    if not ps:
        raise ValueError("periodic schedule needs at least one pair")
    if not (up > 0 and down > 0):
        raise ValueError(f"up = {up!r} and down = {down!r} must both be > 0 seconds")
    if (cycles is None) == (until is None):
        raise ValueError("give exactly one of cycles= or until=")
    if down_mode is LinkMode.UP:
        raise ValueError("down_mode must be reset or blackhole")
    actions: list[LinkAction] = []
    t = start
    n = 0
    while True:
        if cycles is not None and n >= cycles:
            break
        down_at = t + up
        if until is not None and down_at >= until:
            break
        actions.append(LinkAction(down_at, ps, down_mode, f"cycle {n} down"))
        up_at = down_at + down
        if until is not None and up_at > until:
            actions.append(LinkAction(until, ps, LinkMode.UP, f"cycle {n} up (end)"))
            break
        actions.append(LinkAction(up_at, ps, LinkMode.UP, f"cycle {n} up"))
        t = up_at
        n += 1
    return Schedule(tuple(actions))


def partitions(steps: Sequence[tuple[float, Sequence[Iterable[str]] | None]], *,
               mode: LinkMode = LinkMode.RESET) -> Schedule:
    """At each ``(at, groups)`` the network splits into ``groups``; ``groups=None`` heals.

    A split cuts the pairs between groups and brings up the pairs within a
    group; healing brings up every pair any step mentioned.
    """
    if mode is LinkMode.UP:
        raise ValueError("partition mode must be reset or blackhole")
    every: set[str] = set()
    for _, groups in steps:
        if groups is not None:
            every.update(s for g in groups for s in g)
    everyone = sorted(every)
    actions: list[LinkAction] = []
    for at, groups in steps:
        if groups is None:
            all_pairs = tuple(pair(a, b) for a, b in itertools.combinations(everyone, 2))
            actions.append(LinkAction(at, all_pairs, LinkMode.UP, "heal"))
            continue
        gs = _check_groups(groups)
        label = " | ".join(",".join(g) for g in gs)
        inside = tuple(within_pairs(gs))
        if inside:
            actions.append(LinkAction(at, inside, LinkMode.UP, f"partition {label}: within"))
        actions.append(LinkAction(at, tuple(cross_pairs(gs)), mode, f"partition {label}: cut"))
    return Schedule(tuple(actions))


def flapping(pairs: Iterable[Pair], *, seed: int, mean_up: float, mean_down: float,
             duration: float, down_mode: LinkMode = LinkMode.RESET,
             min_interval: float = 0.0) -> Schedule:
    """Each pair independently flaps: exponential up and down periods, one seed for all.

    Pairs are visited in sorted order and each draws from its own generator
    seeded from the master generator, so adding a pair never changes the
    draws of the others that sort before it. Every pair ends up at
    ``duration``. ``min_interval`` is a floor on every period.
    """
    ps = sorted({pair(*p) for p in pairs})
    if not (mean_up > 0 and mean_down > 0 and duration > 0):
        raise ValueError("mean_up, mean_down and duration must be > 0 seconds")
    if down_mode is LinkMode.UP:
        raise ValueError("down_mode must be reset or blackhole")
    master = random.Random(seed)
    actions: list[LinkAction] = []
    for p in ps:
        rng = random.Random(master.getrandbits(64))
        t = 0.0
        is_up = True
        while True:
            mean = mean_up if is_up else mean_down
            t += max(min_interval, rng.expovariate(1.0 / mean))
            if t >= duration:
                break
            is_up = not is_up
            actions.append(LinkAction(t, (p,), LinkMode.UP if is_up else down_mode, "flap"))
        if not is_up:
            actions.append(LinkAction(duration, (p,), LinkMode.UP, "flap end"))
    return Schedule(tuple(actions))


class ScheduleCursor:
    """Sans-IO walk through a schedule started at clock time ``start``."""

    def __init__(self, schedule: Schedule, start: float, time_scale: float = 1.0) -> None:
        self._actions = schedule.scaled(time_scale).actions if time_scale != 1.0 else schedule.actions
        self._start = start
        self._next = 0

    def next_at(self) -> float | None:
        """Clock time of the next action, or ``None`` when the schedule is done."""
        if self._next >= len(self._actions):
            return None
        return self._start + self._actions[self._next].at

    def due(self, now: float) -> list[LinkAction]:
        """Actions whose time is <= ``now`` and that were not returned before."""
        out: list[LinkAction] = []
        while self._next < len(self._actions) and self._start + self._actions[self._next].at <= now:
            out.append(self._actions[self._next])
            self._next += 1
        return out

    @property
    def done(self) -> bool:
        return self._next >= len(self._actions)


async def run_schedule(apply: Callable[[LinkAction], Awaitable[object]], schedule: Schedule, *,
                       time_scale: float = 1.0, clock: Callable[[], float] | None = None,
                       sleep: Callable[[float], Awaitable[object]] = asyncio.sleep) -> None:
    """Apply every action of ``schedule`` at its time; returns after the last one."""
    now = clock if clock is not None else asyncio.get_running_loop().time
    cursor = ScheduleCursor(schedule, now(), time_scale)
    while not cursor.done:
        at = cursor.next_at()
        assert at is not None
        wait = at - now()
        if wait > 0:
            await sleep(wait)
        for action in cursor.due(now()):
            await apply(action)
