"""What a simulated run measures beyond its checks: latency in stable periods, hold-back, percentiles.

Theory of operation
-------------------
``measure`` splits every delivery by whether its message was sent inside a
stable period (``checkers.stable_periods``: a set of sites that see each other
connected and are joined by paths) at least ``margin`` after it began and
``settle`` before it ended: those latencies are the protocol's steady state;
the others (not flagged late) are what instability held back. ``percentile``
is the nearest-rank percentile every report of the simulator uses.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from faultinject.checkers import History, LinkTimeline, stable_periods

if TYPE_CHECKING:
    from .cluster import SimConfig


def measure(h: History, links: LinkTimeline, config: SimConfig) -> dict[str, Any]:
    """Latency in stable periods, late share, and hold-back during instability."""
    periods = stable_periods(h, links)
    stable_ids: dict[str, set[str]] = {}
    for p in periods:
        lo, hi = p.start + config.margin, p.end - config.settle
        for r in h.sends.values():
            if r["origin"] in p.sites and lo <= float(r["at"]) <= hi:
                stable_ids.setdefault(r["msg_id"], set()).update(p.sites)
    stable_lat: list[float] = []
    unstable_wait: list[float] = []
    late = total = 0
    for site, ds in h.deliveries.items():
        for d in ds:
            send = h.sends.get(d.msg_id)
            total += 1
            late += d.late
            if send is None:
                continue
            lat = d.at - float(send["at"])
            if site in stable_ids.get(d.msg_id, ()):
                stable_lat.append(lat)
            elif not d.late:
                unstable_wait.append(lat)
    return {"deliveries": total, "late": late, "stable_latencies": stable_lat,
            "unstable_waits": unstable_wait, "sends": len(h.sends)}


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile (nearest rank) of ``values``; NaN if empty."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100.0 * (len(ordered) - 1))))]
