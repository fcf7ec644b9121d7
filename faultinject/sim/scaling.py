"""One simulated mission on a partial mesh, measured for growth with the number of sites.

Theory of operation
-------------------
``measure_mission(spec)`` builds a ``ring_with_chords`` partial mesh of
``spec.sites`` sites (``spec.sites`` chords: mean degree 4), makes a quarter of
the chords flap (``spec.up`` seconds up, ``spec.down`` down, seeded phases;
the ring never flaps, so every site always has a path), and runs the real RCM
stacks on it in the simulator with relaying and repair on and a modest chat
load: every site sends ``spec.rate`` messages a second (exponential gaps) of
``spec.payload`` bytes to every other site. The run has three phases:
``warm`` seconds (connections, the link-state exchange; not measured), then
``measure`` seconds that are, then ``drain`` seconds with no new message and no
flap, so everything sent is delivered (the delivered share says so).
An *idle* mission (``rate = 0``, ``flap_share = 0``) measures what a site pays
before anyone speaks: heartbeats and the link-state refresh.

A ``traffic.Tally`` on the network counts what each site writes during the
measured window by kind of frame. Figures, per minute of virtual time:

* per site (mean over sites, and every site's own with its degree, for fits
  against the number of neighbours): heartbeat, link-state, ordering, ack,
  handshake, repair, data, all control (every kind but data) and all bytes;
* per message: all bytes on the links / messages sent in the window / links of
  the mesh (``bytes_per_message_per_link``), and per message copy (/ (sites - 1));
* IGO delivery latency (virtual seconds, delivery at a site minus the send at
  the origin, messages sent in the window, every other site): p50 and p95,
  and the late share;
* with ``spec.check``: the simulator's checkers (every property, relay-aware)
  and their violations.

``fit(xs, ys)`` is the least-squares line of log y against log x (the growth
exponent and the factor); ``fit2`` fits log y against log(sites) and
log(neighbours) together, over every site of every size.
"""
from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from contracts.mission import RcmSettings

from .cluster import SimConfig, Simulation
from .measure import percentile
from .topology import degrees, hop_counts, periodic_flaps, ring_pairs, ring_with_chords, site_names
from .traffic import CONTROL_KINDS, KINDS, Tally

PAPER = RcmSettings(heartbeat_timeout=1.0, liveness_timeout=5.0, silence_timeout=10.0, suspect_timeout=60.0,
                    reconnect_period=3.0, routing="relay", repair=True, max_hops=8)
"""The paper's timeouts, relaying (paths up to 8 links: longer than any of these meshes' diameters) and repair."""


@dataclass(frozen=True)
class MissionSpec:
    sites: int
    protocol: str = "lamport"
    seed: int = 1
    warm: float = 10.0
    measure: float = 60.0
    drain: float = 10.0
    rate: float = 2.0 / 60.0          # messages per second per site
    payload: int = 60                 # bytes (a 60-character line)
    flap_share: float = 0.25          # of the chords
    up: float = 30.0
    down: float = 10.0
    settings: RcmSettings = PAPER
    check: bool = True


def mesh(spec: MissionSpec) -> tuple[list[str], tuple[tuple[str, str], ...], list[tuple[str, str]]]:
    """The sites, the links and the flapping links of ``spec``'s mission."""
    names = site_names(spec.sites)
    links = ring_with_chords(names, spec.sites, spec.seed)
    ring = ring_pairs(names)
    chords = [p for p in links if p not in ring]
    flapping = chords[::max(1, round(1 / spec.flap_share))] if spec.flap_share > 0 and chords else []
    return names, links, flapping


def measure_mission(spec: MissionSpec) -> dict[str, Any]:
    """Run ``spec``'s mission and return its figures (see the module docstring)."""
    names, links, flapping = mesh(spec)
    end_load = spec.warm + spec.measure
    episodes = periodic_flaps(flapping, spec.up, spec.down, end_load, spec.seed)
    config = SimConfig(protocol=spec.protocol, sites=spec.sites, chaos=end_load, heal=spec.drain,
                       quiet=spec.drain, rate=max(spec.rate, 1e-9), faults=0, subset_prob=0.0,
                       payload=(spec.payload, spec.payload), settings=replace(spec.settings),
                       topology=links, episodes=episodes, check=spec.check)
    sim = Simulation(spec.seed, config)
    tally = Tally()
    sim.net.tap = tally
    sim.loop.at(spec.warm, lambda: setattr(tally, "active", True))
    sim.loop.at(end_load, lambda: setattr(tally, "active", False))
    t0 = time.monotonic()
    result = sim.run()
    wall = time.monotonic() - t0

    minutes = spec.measure / 60.0
    deg = degrees(names, links)
    hops = hop_counts(names, links)
    n = spec.sites
    per_site = {k: sum(tally.count(s, k) for s in names) / n / minutes for k in KINDS}
    control = sum(per_site[k] for k in CONTROL_KINDS)
    sites_rows = []
    for s in names:
        sites_rows.append({"site": s, "neighbours": deg[s],
                           "heartbeat": tally.count(s, "heartbeat") / minutes,
                           "linkstate": tally.count(s, "linkstate") / minutes,
                           "ordering": tally.count(s, "ordering") / minutes,
                           "control": tally.site_total(s, CONTROL_KINDS) / minutes,
                           "total": tally.site_total(s) / minutes})

    sends = {r["msg_id"]: float(r["at"]) for r in result.records if r["kind"] == "send"}
    in_window = {m for m, at in sends.items() if spec.warm <= at < end_load}
    latencies: list[float] = []
    late = remote = 0
    for r in result.records:
        if r["kind"] != "deliver" or r["site"] == r["origin"]:
            continue
        remote += 1
        if r["msg_id"] in in_window:
            latencies.append(float(r["at"]) - sends[r["msg_id"]])
            late += bool(r.get("late"))
    messages = len(in_window)
    total_bytes = sum(tally.site_total(s) for s in names)
    data_bytes = sum(tally.count(s, "data") for s in names)
    copies = messages * (n - 1)
    return {
        "sites": n, "protocol": spec.protocol, "seed": spec.seed,
        "links": len(links), "flapping_links": len(flapping),
        "mean_neighbours": sum(deg.values()) / n, "min_neighbours": min(deg.values()),
        "max_neighbours": max(deg.values()), "diameter": max(hops.values()),
        "mean_hops": sum(hops.values()) / len(hops),
        "measured_s": spec.measure, "messages": messages, "sends": len(sends),
        "per_site_per_minute": {**per_site, "control": control, "total": control + per_site["data"]},
        "bytes_per_message_per_link": total_bytes / messages / len(links) if messages else None,
        "bytes_per_message_copy": total_bytes / copies if copies else None,
        "data_bytes_per_message_copy": data_bytes / copies if copies else None,
        "latency_p50_s": percentile(latencies, 50) if latencies else None,
        "latency_p95_s": percentile(latencies, 95) if latencies else None,
        "late_share": late / len(latencies) if latencies else None,
        "delivered_share": remote / (len(sends) * (n - 1)) if sends else None,
        "checked": spec.check, "violations": len(result.violations),
        "violation_examples": [str(v) for v in result.violations[:3]],
        "events": result.stats.get("events"), "wall_s": wall, "per_site": sites_rows,
    }


def fit(xs: Sequence[float], ys: Sequence[float | None]) -> dict[str, float] | None:
    """Least squares of log y = log a + b log x: ``{"exponent": b, "factor": a, "r2"}`` (None: too few points)."""
    pts = [(math.log(x), math.log(y)) for x, y in zip(xs, ys) if x > 0 and y is not None and y > 0]
    if len(pts) < 2:
        return None
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    sxx = sum((p[0] - mx) ** 2 for p in pts)
    if sxx == 0:
        return None
    b = sum((p[0] - mx) * (p[1] - my) for p in pts) / sxx
    a = my - b * mx
    ss = sum((p[1] - my) ** 2 for p in pts)
    res = sum((p[1] - a - b * p[0]) ** 2 for p in pts)
    return {"exponent": b, "factor": math.exp(a), "r2": 1 - res / ss if ss else 1.0}


def fit2(rows: list[tuple[float, float, float]]) -> dict[str, float] | None:
    """Least squares of log y = c + a log(sites) + b log(neighbours) over ``(sites, neighbours, y)`` rows:
    ``{"sites_exponent": a, "neighbours_exponent": b, "factor": e^c}`` (None: degenerate)."""
    pts = [(math.log(s), math.log(d), math.log(y)) for s, d, y in rows if s > 0 and d > 0 and y > 0]
    if len(pts) < 3:
        return None
    import numpy as np
    m = np.array([[1.0, p[0], p[1]] for p in pts])
    v = np.array([p[2] for p in pts])
    coef, _res, rank, _sv = np.linalg.lstsq(m, v, rcond=None)
    if rank < 3:
        return None
    return {"sites_exponent": float(coef[1]), "neighbours_exponent": float(coef[2]), "factor": float(math.exp(coef[0]))}


__all__ = ["PAPER", "MissionSpec", "fit", "fit2", "measure_mission", "mesh"]
