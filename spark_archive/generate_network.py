"""The simulated network of a synthetic mission (used by ``spark_archive.generate``).

What happens, as opposed to what is written: the sites and their names, each
pair's link outages and the ``status`` records they make both ends journal,
the Lamport order keys of the messages sent, and the order in which one site
delivers what reaches it (IGO: hold-back in key order, resent, repaired and
urgent messages on arrival) with its ``late`` flags. Every draw comes from the
``numpy`` generator the caller passes, in the caller's order, so a seed replays
the mission.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from contracts import journal as J
from contracts.status import LinkStatus

SITE_NAMES = ["AOC", "AWACS", "CRC", "JSTARS", "RIVET", "TANKER", "ISR1", "ISR2",
              "SHIP1", "SHIP2", "FOB1", "FOB2", "UAV1", "UAV2", "HQ", "MEDEVAC"]

SUSPECT_TIMEOUT = 60.0
LIVENESS_TIMEOUT = 5.0


def site_names(count: int) -> list[str]:
    """Names of ``count`` sites, sorted (realistic call signs, then numbered)."""
    names = SITE_NAMES[:count] + [f"SITE{i:03d}" for i in range(len(SITE_NAMES), count)]
    return sorted(names)


@dataclass
class Outage:
    start: float
    end: float
    disconnected: bool  # outlasted the suspect timeout


@dataclass
class MissionPlan:
    sites: list[str]
    start: float
    end: float
    outages: dict[tuple[int, int], list[Outage]] = field(default_factory=dict)
    isolated: set[int] = field(default_factory=set)
    empty: set[int] = field(default_factory=set)


def plan_links(rng: np.random.Generator, mission: MissionPlan, outages_per_hour: float) -> None:
    n = len(mission.sites)
    duration = mission.end - mission.start
    for a in range(n):
        for b in range(a + 1, n):
            if {a, b} & (mission.isolated | mission.empty):
                mission.outages[(a, b)] = [Outage(mission.start - 1, mission.end + 1, True)]
                continue
            count = rng.poisson(outages_per_hour * duration / 3600.0)
            starts = np.sort(rng.uniform(mission.start + 30, mission.end - 30, count))
            lengths = rng.lognormal(np.log(30.0), 1.0, count)
            spans: list[Outage] = []
            for s, length in zip(starts, lengths):
                e = min(s + length, mission.end - 1)
                if spans and s <= spans[-1].end + 5:
                    continue  # keep outages of one link apart
                if e - s < 1.0:
                    continue
                spans.append(Outage(float(s), float(e), e - s > SUSPECT_TIMEOUT))
            mission.outages[(a, b)] = spans


def link_pair(a: int, b: int) -> tuple[int, int]:
    return (a, b) if a < b else (b, a)


def status_records(rng: np.random.Generator, mission: MissionPlan) -> list[list[tuple[float, str]]]:
    """Per site: (at, line) status records."""
    per_site: list[list[tuple[float, str]]] = [[] for _ in mission.sites]
    names = mission.sites

    def status(site: int, peer: int, at: float, what: LinkStatus) -> None:
        line = J.dumps(J.record(J.STATUS, site=names[site], at=round(at, 6), peer=names[peer], status=what.value))
        per_site[site].append((at, line))

    for (a, b), spans in mission.outages.items():
        if {a, b} & (mission.isolated | mission.empty):
            continue  # never connected: no status change is ever journaled
        for x, y in ((a, b), (b, a)):
            status(x, y, mission.start + float(rng.uniform(0.5, 5.0)), LinkStatus.CONNECTED)
            for o in spans:
                suspect_at = o.start + float(rng.uniform(0.5, LIVENESS_TIMEOUT))
                back_at = o.end + float(rng.uniform(0.1, 3.0))
                status(x, y, min(suspect_at, o.end), LinkStatus.SUSPECTED)
                if o.disconnected:
                    status(x, y, o.start + SUSPECT_TIMEOUT + float(rng.uniform(0.0, 1.0)),
                           LinkStatus.DISCONNECTED)
                status(x, y, back_at, LinkStatus.CONNECTED)
    return per_site


def lamport_keys(mission: MissionPlan, times: np.ndarray, origins: np.ndarray) -> np.ndarray:
    """Lamport timestamps: a send ticks past every clock heard from connected peers."""
    n = len(mission.sites)
    clocks = [0] * n
    stamps = np.empty(len(times), dtype=np.int64)
    # Link state changes, in time order, equalise clocks when a link comes back.
    ups: list[tuple[float, int, int]] = []
    for (a, b), spans in mission.outages.items():
        ups.extend((o.end, a, b) for o in spans if o.end < mission.end)
    ups.sort()
    cursor = 0
    bounds = {k: (np.array([o.start for o in v]), np.array([o.end for o in v]))
              for k, v in mission.outages.items()}

    def up(a: int, b: int, t: float) -> bool:
        starts, ends = bounds[link_pair(a, b)]
        i = int(np.searchsorted(starts, t, side="right")) - 1
        return not (i >= 0 and t < ends[i])

    # Connectivity is piecewise constant; cache the neighbour lists between changes.
    change_times = sorted({x for s, e in bounds.values() for x in (*s, *e)})
    neighbours: list[list[int]] = []
    next_change = -np.inf
    change_idx = 0
    for i, (t, o) in enumerate(zip(times.tolist(), origins.tolist())):
        while cursor < len(ups) and ups[cursor][0] <= t:
            _, a, b = ups[cursor]
            clocks[a] = clocks[b] = max(clocks[a], clocks[b])
            cursor += 1
        if t >= next_change:
            while change_idx < len(change_times) and change_times[change_idx] <= t:
                change_idx += 1
            next_change = change_times[change_idx] if change_idx < len(change_times) else np.inf
            neighbours = [[p for p in range(n) if p != s and up(s, p, t)] for s in range(n)]
        ts = clocks[o] + 1
        clocks[o] = ts
        stamps[i] = ts
        for p in neighbours[o]:
            if clocks[p] < ts:
                clocks[p] = ts
    return stamps



# Deliveries at one site are journaled at least this far apart (a held-back batch is
# delivered at one instant; 2 µs survive the journal's 6 decimals).
STEP = 2e-6


def delivery_order(arrive: np.ndarray, on_arrival: np.ndarray, keys: np.ndarray,
                urgent: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """IGO at one site: message indices in delivery order, and their late flags.

    Messages that arrived in the normal flow are held back and delivered in key
    order: each one no earlier than every message ordered before it
    (``arrive`` becomes the running maximum in key order). Messages resent
    after an outage, repaired, or flash and immediate ones are delivered on
    arrival. A delivery is late when its key is below the site's frontier, the
    largest key delivered in order before it by anything but a flash or
    immediate message (the archive's check). ``arrive`` is updated in place to
    delivery times, ``STEP`` apart.
    """
    normal = np.nonzero(~np.isnan(arrive) & ~on_arrival)[0]
    normal = normal[np.argsort(keys[normal], kind="stable")]
    if len(normal):
        arrive[normal] = np.maximum.accumulate(arrive[normal])
    rest = np.nonzero(~np.isnan(arrive) & on_arrival)[0]
    order = np.concatenate([normal, rest])
    order = order[np.lexsort((keys[order], arrive[order]))]
    steps = STEP * np.arange(len(order))
    if len(order):
        arrive[order] = steps + np.maximum.accumulate(arrive[order] - steps)
    late = np.zeros(len(order), dtype=bool)
    frontier = -1
    for pos, (key, hurry) in enumerate(zip(keys[order].tolist(), urgent[order].tolist())):
        if key < frontier:
            late[pos] = True
        elif not hurry and key > frontier:
            frontier = key
    return order, late
