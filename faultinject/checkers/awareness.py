"""Connection awareness and robustness: statuses against the real links (needs a link timeline).

The definitions (*joined*, the bounds ``t_up``, ``t_down``, ``suspect``,
``relay``) are in ``faultinject/checkers/properties.py``'s docstring, which
states every property; this module holds the two that compare what sites saw
with what the network did, and the path computations they share with
``checkers.eventual`` (which sites a path of up links joins, and when).
"""
from __future__ import annotations

import itertools
import operator
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from contracts.status import LinkStatus

from .history import DOWN, UP, History, LinkTimeline, Timeline, Violation

EPS = 1e-6


# -- connectivity ----------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class AwarenessBounds:
    """How quickly statuses must follow the network (seconds)."""

    t_up: float        # link up -> both ends connected
    t_down: float      # link failed -> not connected any more
    suspect: float     # suspect_timeout: not connected -> disconnected no sooner
    relay: float = 0.0  # relaying sites: a path's change reaches its ends within this (link-state adverts)

    @property
    def t_robust(self) -> float:
        return max(self.t_up + self.relay, self.t_down + self.relay + self.suspect) + 1.0


def hop_reach(live: list[str], usable: Callable[[str, str], bool], hops: int) -> dict[str, set[str]]:
    """Per site of ``live``: the sites it reaches (itself included) over at most ``hops`` links ``usable``."""
    adj = {s: [q for q in live if q != s and usable(s, q)] for s in live}
    reach: dict[str, set[str]] = {}
    for s in live:
        seen, frontier = {s}, [s]
        for _ in range(hops):
            frontier = [q for x in frontier for q in adj[x] if q not in seen]
            seen.update(frontier)
        reach[s] = seen
    return reach


def _joined(h: History, links: LinkTimeline, s: str, p: str, settled: float = 0.0,
            linger: float = 0.0) -> Timeline:
    """Are ``s`` and ``p`` joined (UP) or not (DOWN, or the link's state) over time? Cached per history.

    Relaying sites only: ``settled``: only links up for at least that long count (the time their
    ends need to connect again); ``linger``: links (and relaying sites) up at any time in the
    last ``linger`` seconds count (the time a failure takes to be noticed and advertised).
    """
    cache = getattr(links, "_joined_cache", None)
    if cache is None or cache[0] is not h:
        cache = (h, {})
        links._joined_cache = cache  # type: ignore[attr-defined]
    tables: dict[tuple[float, float], dict[tuple[str, str], Timeline]] = cache[1]
    if links.max_hops is None:
        settled = linger = 0.0
    mode = (settled, linger)
    if mode not in tables:
        tables[mode] = _reach_all(h, links, settled, linger) if links.max_hops is not None else {}
    key = (s, p) if s < p else (p, s)
    tl = tables[mode].get(key)
    if tl is None:
        tl = tables[mode][key] = _effective(h, links, s, p)
    return tl


def _up_within(tl: Timeline, value: object, t0: float, t1: float) -> bool:
    return tl.at(t0) == value or any(v == value for _, v in tl.changes(t0, t1))


def _reach_all(h: History, links: LinkTimeline, settled: float, linger: float) -> dict[tuple[str, str], Timeline]:
    """Relaying sites: per pair, UP while a path of at most ``max_hops`` up links joins them."""
    hops = links.max_hops or 1
    alive_times = [t for tl in h.alive.values() for t in tl.times]
    moments = {0.0, *links.change_times, *alive_times}
    if settled:
        moments |= {t + settled for t in [*links.change_times, *alive_times]}
    if linger:
        moments |= {t + linger for t in [*links.change_times, *alive_times]}
    times = sorted(moments)

    def usable(a: str, b: str, t: float) -> bool:
        tl = links.link(a, b)
        if linger:
            return _up_within(tl, UP, max(0.0, t - linger), t)
        if tl.at(t) != UP:
            return False
        # Up since the start counts as established (the run begins connected).
        return not settled or tl.constant(max(0.0, t - settled), t, UP)

    def alive(s: str, t: float) -> bool:
        tl = h.alive[s]
        if linger:
            return bool(tl.at(t)) or tl.at(max(0.0, t - linger)) != 0 or any(v for _, v in tl.changes(t - linger, t))
        if settled:
            # A site that just (re)started has not connected yet: it relays once settled.
            t0 = max(0.0, t - settled)
            return bool(tl.at(t0)) and not tl.changes(t0, t)
        return bool(tl.at(t))

    out = {(a, b): Timeline(None) for a, b in itertools.combinations(h.sites, 2)}
    last: dict[tuple[str, str], str] = {}
    for t in times:
        live = [s for s in h.sites if alive(s, t)]
        reach = hop_reach(live, partial(usable, t=t), hops)
        for a, b in out:
            v = UP if a in reach and b in reach[a] else DOWN
            if last.get((a, b)) != v:
                out[(a, b)].set(t, v)
                last[(a, b)] = v
    return out


def _effective(h: History, links: LinkTimeline, s: str, p: str) -> Timeline:
    """The link s-p as s can use it: down while either end is crashed."""
    tl = Timeline(None)
    times = sorted({0.0, *links.link(s, p).times, *h.alive[s].times, *h.alive[p].times})
    last = object()
    for t in times:
        if not h.alive[s].at(t) or not h.alive[p].at(t):
            v = DOWN
        else:
            v = links.state(s, p, t)
        if v != last:
            tl.set(t, v)
            last = v
    return tl


def _segments(tl: Timeline, end: float) -> list[tuple[float, float, str]]:
    pts = list(zip(tl.times, tl.values))
    return [(t, pts[i + 1][0] if i + 1 < len(pts) else end, v) for i, (t, v) in enumerate(pts)]


def check_connection_awareness(h: History, links: LinkTimeline,
                               bounds: AwarenessBounds) -> list[Violation]:
    """Statuses follow real links within the bounds; disconnected only after suspect_timeout."""
    out: list[Violation] = []
    for s, p in itertools.permutations(h.sites, 2):
        st = h.status_of(s, p)
        alive = h.alive[s]
        # Relaying: connected once a path of established links joins them, and the news crossed it.
        joined = _joined(h, links, s, p, settled=bounds.t_up if links.max_hops is not None else 0.0)
        for t1, t2, v in _segments(joined, h.end):
            if v != UP:
                continue
            a = t1 + (bounds.relay if links.max_hops is not None else bounds.t_up)
            if a >= t2 - EPS:
                continue
            bad = st.first_time(a, lambda x: x != LinkStatus.CONNECTED.value)
            if bad is not None and bad < t2 - EPS and alive.at(bad):
                what = "joined" if links.max_hops is not None else "link up"
                out.append(Violation("awareness", s, p,
                                     f"{what} since {t1:.3f} but {s} sees {p} {st.at(bad)} at {bad:.3f}"))
        # Not connected once no path could still be believed in: every path has a link (or a
        # relaying site) that failed longer ago than it takes to notice it and advertise it, twice
        # over: the news of one failure can be held up by a second failure on the path it travels,
        # which is noticed in turn. Direct links: t_down after the link failed.
        relaying = links.max_hops is not None
        linger = 2 * (bounds.t_down + bounds.relay)
        gone = _joined(h, links, s, p, linger=linger) if relaying else _joined(h, links, s, p)
        for t1, t2, v in _segments(gone, h.end):
            if v == UP:
                continue
            a = t1 if relaying else t1 + bounds.t_down
            if a >= t2 - EPS:
                continue
            bad = st.first_time(a, lambda x: x == LinkStatus.CONNECTED.value)
            if bad is not None and bad < t2 - EPS and alive.at(bad):
                out.append(Violation("awareness", s, p,
                                     f"link {v} since {t1:.3f} but {s} sees {p} connected "
                                     f"at {bad:.3f}"))
        # Disconnected only after suspect_timeout without being connected.
        starts = set(alive.times)
        left_connected: float | None = None
        prev = st.initial
        for t, v in zip(st.times, st.values):
            if t in starts and v in (LinkStatus.DISCONNECTED.value, LinkStatus.SUSPECTED.value):
                # A start: suspected since then, disconnected only suspect_timeout later.
                left_connected, prev = (t if v == LinkStatus.SUSPECTED.value else None), v
                continue
            if prev == LinkStatus.CONNECTED.value and v != LinkStatus.CONNECTED.value:
                left_connected = t
            if (v == LinkStatus.DISCONNECTED.value and prev != LinkStatus.DISCONNECTED.value
                    and left_connected is not None):
                if t - left_connected < bounds.suspect - EPS:
                    out.append(Violation("awareness", s, p,
                                         f"disconnected at {t:.3f}, only {t - left_connected:.3f} s "
                                         f"after leaving connected (suspect_timeout "
                                         f"{bounds.suspect:g})"))
            prev = v
    return out


def check_robustness(h: History, links: LinkTimeline, bounds: AwarenessBounds) -> list[Violation]:
    """Once the network is unchanged for t_robust, statuses match it."""
    out: list[Violation] = []
    times = sorted({0.0, *links.change_times, *(t for tl in h.alive.values() for t in tl.times)})
    times = [t for t in times if t <= h.end]
    for i, q1 in enumerate(times):
        q2 = times[i + 1] if i + 1 < len(times) else h.end
        a = q1 + bounds.t_robust
        if a >= q2 - EPS:
            continue
        for s, p in itertools.permutations(h.sites, 2):
            if not h.alive[s].at(a) or not h.alive[s].constant(a, q2 - EPS, h.alive[s].at(a)):
                continue
            up = h.alive[p].at(a) and _joined(h, links, s, p).at(a) == UP
            want = LinkStatus.CONNECTED.value if up else LinkStatus.DISCONNECTED.value
            st = h.status_of(s, p)
            if not st.constant(a, q2 - EPS, want):
                bad = st.first_time(a, partial(operator.ne, want))     # the first value != want
                out.append(Violation("robustness", s, p,
                                     f"network unchanged since {q1:.3f}, link "
                                     f"{'up' if up else 'not up'}, but {s} sees {p} "
                                     f"{st.at(bad if bad is not None else a)} at "
                                     f"{bad if bad is not None else a:.3f}"))
    return out
