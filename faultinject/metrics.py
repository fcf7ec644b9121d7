"""Relay figures from a run's records: latency over flapping links, late share, order kept.

Shared by the scenario runner (``faultinject/runner.py``) and ``bench/relay.py``;
pure functions over a ``History`` (real journals or RCM client deliveries).

* *flapping pairs*: the (origin, destination) pairs whose direct link is on
  the outage schedule; their deliveries are split by whether that link was up
  when the message was sent;
* *late share*: deliveries flagged late over all deliveries;
* *out of place*: per site, how many deliveries are not in the longest run
  of deliveries whose order keys increase: the fewest messages that would
  have to move for the site's sequence to be in global order.
"""
from __future__ import annotations

import bisect
from collections.abc import Iterable
from typing import Any

from faultinject.checkers.history import UP, History, LinkTimeline, pair


def out_of_place(keys: Iterable[tuple[Any, ...]]) -> int:
    """Deliveries not in a longest increasing run of order keys (patience sorting, O(n log n))."""
    tails: list[tuple[Any, ...]] = []
    n = 0
    for k in keys:
        n += 1
        i = bisect.bisect_left(tails, k)
        if i == len(tails):
            tails.append(k)
        else:
            tails[i] = k
    return n - len(tails)


def percentile(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    ys = sorted(xs)
    return ys[min(len(ys) - 1, int(round(q / 100.0 * (len(ys) - 1))))]


def path_metrics(h: History, lt: LinkTimeline, flapping: Iterable[tuple[str, str]], t0: float, t1: float,
                 scale: float = 1.0) -> dict[str, Any]:
    """Latency (scenario seconds) for flapping pairs, late share and out-of-place counts, sent in [t0, t1]."""
    flap = {pair(*p) for p in flapping}
    send = {mid: r for mid, r in h.sends.items() if t0 <= float(r["at"]) <= t1}
    up_lat: list[float] = []
    down_lat: list[float] = []
    total = late = 0
    for site, ds in h.deliveries.items():
        for d in ds:
            r = send.get(d.msg_id)
            if r is None:
                continue
            total += 1
            late += d.late
            if d.origin == site or pair(d.origin, site) not in flap:
                continue
            lat = (d.at - float(r["at"])) / scale
            (up_lat if lt.state(d.origin, site, float(r["at"])) == UP else down_lat).append(lat)
    misplaced = {site: out_of_place(d.key for d in ds if d.msg_id in send) for site, ds in h.deliveries.items()}

    def stats(xs: list[float]) -> dict[str, Any]:
        return {"n": len(xs), "p50": percentile(xs, 50), "p95": percentile(xs, 95),
                "max": max(xs) if xs else None}
    return {"flapping_link_up": stats(up_lat), "flapping_link_down": stats(down_lat),
            "flapping_all": stats(up_lat + down_lat), "deliveries": total, "late": late,
            "late_share": late / total if total else None, "out_of_place": misplaced,
            "out_of_place_max": max(misplaced.values(), default=0)}
