"""Partial meshes for the simulator: which pairs of sites have a link, and links that flap on a period.

Theory of operation
-------------------
By default every pair of simulated sites has a link (a full mesh). A
*topology* (``SimConfig.topology``) is the tuple of pairs that do; every other
pair is *absent*: its link is down from the start, dials over it fail at once,
and no fault episode ever raises it (``Simulation`` drops the changes an
episode asks of an absent pair). Sites then reach non-neighbours only through
relays (``routing = "relay"``), as on a real tactical network where a unit's
radio reaches a few others.

``ring_with_chords(names, chords, seed)`` is the partial mesh the scaling
benchmark uses: a ring in name order (every site two neighbours, so the
mission stays connected whichever chords fail) plus ``chords`` links between
sites not yet linked, drawn from the seed. With ``chords = n`` the mean degree
is 4 and the degrees vary (2 to 7 or so), so a site's cost can be fitted
against its own number of neighbours as well as against the number of sites;
chords shorten paths (the diameter grows like log n, not n/2).

``periodic_flaps(pairs, up, down, until, seed)``: each pair is up ``up``
seconds then ``state`` (down by default: a reset, as ``bench/relay.py`` does)
for ``down`` seconds, over and over until ``until``, from a phase drawn from
the seed (so the flaps of different links do not all fall together). They are
``schedule.Episode``s of kind ``flap`` (``SimConfig.episodes``), compiled with
the seeded fault episodes.

``site_names(n)``: the simulator's site names: ``A``..``H`` up to eight sites
(as every recorded seed has them), ``S00``, ``S01``, ... beyond.
"""
from __future__ import annotations

import random
from collections.abc import Iterable, Sequence

from faultinject.checkers.history import DOWN, pair

from .schedule import Episode

LETTERS = ["A", "B", "C", "D", "E", "F", "G", "H"]

Pair = tuple[str, str]


def site_names(n: int) -> list[str]:
    """The names of ``n`` simulated sites, in sorted order."""
    if n < 2:
        raise ValueError("a mission has at least two sites")
    return LETTERS[:n] if n <= len(LETTERS) else [f"S{i:02d}" for i in range(n)]


def ring_with_chords(names: Sequence[str], chords: int, seed: int) -> tuple[Pair, ...]:
    """A ring through ``names`` plus ``chords`` seeded chords (fewer if the mesh fills up); sorted pairs."""
    n = len(names)
    links = {pair(names[i], names[(i + 1) % n]) for i in range(n)} if n > 2 else {pair(names[0], names[1])}
    rng = random.Random(f"ring-chords-{seed}-{n}")
    candidates = sorted(pair(a, b) for i, a in enumerate(names) for b in names[i + 1:]
                        if pair(a, b) not in links)
    rng.shuffle(candidates)
    links.update(candidates[:max(0, chords)])
    return tuple(sorted(links))


def ring_pairs(names: Sequence[str]) -> set[Pair]:
    """The ring's links of ``ring_with_chords`` (never chosen to flap by the benchmark)."""
    n = len(names)
    return {pair(names[i], names[(i + 1) % n]) for i in range(n)}


def degrees(names: Iterable[str], links: Iterable[Pair]) -> dict[str, int]:
    """Each site's number of neighbours."""
    out = {s: 0 for s in names}
    for a, b in links:
        out[a] += 1
        out[b] += 1
    return out


def hop_counts(names: Sequence[str], links: Iterable[Pair]) -> dict[Pair, int]:
    """Fewest links between every two sites (absent: not connected)."""
    adj: dict[str, list[str]] = {s: [] for s in names}
    for a, b in links:
        adj[a].append(b)
        adj[b].append(a)
    out: dict[Pair, int] = {}
    for src in names:
        seen = {src: 0}
        frontier = [src]
        while frontier:
            nxt = []
            for x in frontier:
                for y in adj[x]:
                    if y not in seen:
                        seen[y] = seen[x] + 1
                        nxt.append(y)
            frontier = nxt
        for dst, h in seen.items():
            if src < dst:
                out[(src, dst)] = h
    return out


def periodic_flaps(pairs: Iterable[Pair], up: float, down: float, until: float, seed: int,
                   state: str = DOWN) -> tuple[Episode, ...]:
    """Each pair ``up`` seconds up then ``down`` seconds ``state``, repeated until ``until``; seeded phases."""
    if up <= 0 or down <= 0:
        raise ValueError("up and down must be positive")
    rng = random.Random(f"flaps-{seed}")
    out = []
    for a, b in sorted(pair(*p) for p in pairs):
        t = rng.uniform(0.0, up + down) + up * 0.5     # the first outage after some time up
        phases = []
        while t < until:
            phases.append((t, min(t + down, until), state))
            t += down + up
        if phases:
            out.append(Episode("flap", phases[0][0], phases[-1][1], ((a, b, state),), phases=tuple(phases)))
    return tuple(out)


__all__ = ["degrees", "hop_counts", "periodic_flaps", "ring_pairs", "ring_with_chords", "site_names"]
