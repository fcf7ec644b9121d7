"""A trial's verdict: the checkers with the scenario's bounds, and the paper's figures.

Pure functions over one trial's records (``History``) and its link timeline
(ground truth from the ``LinkSet``), used by ``faultinject/runner.py`` after
a trial ran and by tests on hand-built histories. Times in a ``History`` are
real seconds; every figure is reported in scenario seconds (divided by the
scale), every bound is computed in real seconds from the scaled settings plus
``[checks] slack``.
"""
from __future__ import annotations

import itertools
import statistics
from collections.abc import Callable
from typing import Any

from contracts.status import LinkStatus
from faultinject.checkers import (
    AwarenessBounds,
    History,
    LinkTimeline,
    Violation,
    check_connection_awareness,
    check_eventual_delivery,
    check_fifo,
    check_igo,
    check_journal_labels,
    check_no_duplicates,
    check_reliability,
    check_robustness,
)
from faultinject.checkers.confined import Confinement
from faultinject.checkers.history import UP, missing_count
from faultinject.checkers.properties import settle_with_window
from faultinject.scenario import Scenario, Trial

BASELINES = ("tcp", "tcp-suspect")
MAX_VIOLATIONS = 50


# -- checks ---------------------------------------------------------------------------------
def bounds_for(scen: Scenario, trial: Trial) -> tuple[AwarenessBounds, float, float]:
    """Awareness bounds, IGO margin and settle, in real seconds."""
    st = scen.rcm_for(trial.p2p, trial.routing, trial.repair)   # already scaled
    slack = scen.checks.slack
    hb, lv, sus, rc, hs = (st["heartbeat_timeout"], st["liveness_timeout"], st["suspect_timeout"],
                           st["reconnect_period"], st["handshake_timeout"])
    # Relaying: link-state news crosses up to max_hops links of the (scaled) delay and jitter.
    L = scen.links
    relay = (st.get("max_hops", 3) * (3 * (L.delay + L.jitter) * scen.time_scale + 0.05) + slack
             if trial.routing == "relay" else 0.0)
    bounds = AwarenessBounds(t_up=rc + hs + 2 * hb + slack, t_down=lv + hb + slack, suspect=max(0.0, sus - 0.05),
                             relay=relay)
    margin = 2 * hb + rc + slack
    settle = settle_with_window(4 * hb + 1.0 * scen.time_scale + 2 * slack, st["announce_delay"])
    return bounds, margin, settle


def run_checks(scen: Scenario, trial: Trial, h: History, lt: LinkTimeline,
               records: list[dict[str, Any]] | None = None) -> dict[str, dict[str, Any]]:
    """Every enabled check of the trial (``records``: its journals' records, for ``leaks``)."""
    bounds, margin, settle = bounds_for(scen, trial)
    # Confined sends (a labeled mission's) may wait for a path within their sites (checkers/confined.py): what
    # that wait holds up is excused, and only that, as in the simulator's checks (properties.check_all).
    conf = Confinement.for_checks(h, lt, bounds)
    fns: dict[str, Callable[[], list[Violation]]] = {
        # Labels: no site journals a message its clearance does not dominate (checkers/leaks.py).
        "leaks": lambda: check_journal_labels(records or []),
        "reliability": lambda: check_reliability(h, confinement=conf),
        "duplicates": lambda: check_no_duplicates(h),
        "fifo": lambda: check_fifo(h),
        "igo": lambda: check_igo(h, margin, settle, lt, confinement=conf),
        "awareness": lambda: check_connection_awareness(h, lt, bounds),
        "robustness": lambda: check_robustness(h, lt, bounds),
        # Issue 18: repair's promise; the window is repair's reaction time (a summary round, a stalled
        # request moved on after repair_period) plus the time its rate needs for the whole backlog.
        "eventual": lambda: check_eventual_delivery(
            h, lt, repair_window(scen, trial, bounds, h),
            durable=bool(scen.rcm_for(trial.p2p, trial.routing, trial.repair).get("durable", True)),
            confinement=conf),
    }
    out = {}
    for name in scen.checks.enabled:
        vs = fns[name]()
        informational = (name in scen.checks.informational or (name == "reliability" and trial.p2p in BASELINES)
                         or (name == "eventual" and trial.repair is False))    # the comparison run without repair
        out[name] = {"passed": not vs, "informational": informational, "count": len(vs),
                     "violations": [str(v) for v in vs[:MAX_VIOLATIONS]]}
    return out


def repair_window(scen: Scenario, trial: Trial, bounds: AwarenessBounds, h: History) -> float:
    st = scen.rcm_for(trial.p2p, trial.routing, trial.repair)
    backlog = missing_count(h.missing) * (scen.workload.size + 200)
    return (bounds.t_up + bounds.relay + float(st.get("repair_period", 30.0 * scen.time_scale))
            + backlog / int(st.get("repair_rate", 16384)) + 4 * scen.checks.slack)


def repair_metrics(h: History, lt: LinkTimeline, t0: float, end: float, s: float) -> dict[str, Any]:
    """Issue 18: when the last link came back, and how long until every message sent before was everywhere."""
    heal = max((t for tl in lt.links.values() for t, v in zip(tl.times, tl.values) if v == UP and t <= end),
               default=t0)
    got: dict[tuple[str, str], float] = {}
    for site, ds in h.deliveries.items():
        for d in ds:
            got.setdefault((site, d.msg_id), d.at)
    before = [(site, mid) for mid, r in h.sends.items() if float(r["at"]) < heal for site in h.sites]
    missing = [p for p in before if p not in got]
    last = max((got[p] for p in before if p in got), default=heal)
    return {"heal_s": round((heal - t0) / s, 3),
            "repaired": sum(d.repaired for ds in h.deliveries.values() for d in ds),
            "reported_missing": missing_count(h.missing),
            "undelivered_sent_before_heal": len(missing),
            "all_delivered_s_after_heal": None if missing else round(max(0.0, last - heal) / s, 3)}


# -- measurements -----------------------------------------------------------------------------
def _segments(tl: Any, t0: float, t1: float) -> list[tuple[float, float, Any]]:
    """Constant pieces of a step function over [t0, t1]."""
    pts = [(t0, tl.at(t0))] + [(t, v) for t, v in tl.changes(t0, t1)]
    return [(t, pts[i + 1][0] if i + 1 < len(pts) else t1, v) for i, (t, v) in enumerate(pts)
            if (pts[i + 1][0] if i + 1 < len(pts) else t1) > t]


def measure(scen: Scenario, trial: Trial, h: History, lt: LinkTimeline, t0: float, wend: float,
            end: float) -> dict[str, Any]:
    """The paper's quantities from one trial, in scenario seconds."""
    s = scen.time_scale
    rs = scen.rcm_for(trial.p2p, trial.routing, trial.repair)
    sus = rs["suspect_timeout"]
    out: dict[str, Any] = {}
    # Reliability (Figure 7): every message is multicast to every site, its origin included (the
    # paper's clients broadcast "to the four sites"); received/sent counts the copies delivered.
    got = {(d.site, d.msg_id) for ds in h.deliveries.values() for d in ds}
    sent = received = rsent = rreceived = 0
    for mid, r in h.sends.items():
        for dest in scen.sites:
            sent += 1
            received += (dest, mid) in got
            if dest != r["origin"]:
                rsent += 1
                rreceived += (dest, mid) in got
    out["sends"] = len(h.sends)
    out["copies_sent"] = sent
    out["copies_received"] = received
    out["received_ratio"] = received / sent if sent else None
    out["remote_ratio"] = rreceived / rsent if rsent else None
    # Connection awareness (Figure 6): suspicion after each outage, restoration after each return.
    suspicion, restoration = [], []
    unnoticed = 0
    connectivity, connected_share, link_up = [], [], []
    long_whole = long_excess = 0.0
    span = max(wend - t0, 1e-9)
    for a, b in itertools.permutations(scen.sites, 2):
        link = lt.link(a, b)
        st = h.status_of(a, b)
        for t1, t2, v in _segments(link, t0, wend):
            if not (h.alive[a].at(t1) and h.alive[b].at(t1)):
                pass                    # a crashed end: not the link's doing
            elif v == UP:
                if t1 > t0 and st.at(t1) != LinkStatus.CONNECTED.value:     # a suspicion (or worse) to reverse
                    back = st.first_time(t1, lambda x: x == LinkStatus.CONNECTED.value)
                    if back is not None:
                        restoration.append((back - t1) / s)
            elif st.at(t1) == LinkStatus.CONNECTED.value:
                gone = st.first_time(t1, lambda x: x != LinkStatus.CONNECTED.value)
                if gone is not None and gone <= t2:
                    suspicion.append((gone - t1) / s)
                else:
                    unnoticed += 1      # over before liveness_timeout: the connection rode it out
                if a < b and t2 - t1 > sus:
                    long_whole += t2 - t1
                    long_excess += t2 - t1 - sus
        segs = _segments(st, t0, wend)
        connectivity.append(sum(t2 - t1 for t1, t2, v in segs if v != LinkStatus.DISCONNECTED.value) / span)
        connected_share.append(sum(t2 - t1 for t1, t2, v in segs if v == LinkStatus.CONNECTED.value) / span)
        if a < b:
            link_up.append(sum(t2 - t1 for t1, t2, v in _segments(link, t0, wend) if v == UP) / span)
    npairs = max(1, len(scen.sites) * (len(scen.sites) - 1) // 2)
    out["awareness"] = {
        "suspicion_s": _stats(suspicion), "restoration_s": _stats(restoration), "unnoticed_outages": unnoticed,
        "logical_connectivity": statistics.fmean(connectivity), "connected_share": statistics.fmean(connected_share),
        "link_up_share": statistics.fmean(link_up),
        "long_outage_share": long_whole / (span * npairs),
        "long_outage_excess_share": long_excess / (span * npairs),
        "disconnections": sum(1 for tl in h.status.values() for t, v in tl.changes(t0, wend)
                              if v == LinkStatus.DISCONNECTED.value),
    }
    # Delivery rate and latency at the measured site (Figure 8), split by link state.
    site = scen.measure[0]
    down_pairs = {p for per in trial.periodic for p in per.pairs} or set(lt.links)
    send_at = {mid: float(r["at"]) for mid, r in h.sends.items()}
    lat_up, lat_down, n_up, n_down = [], [], 0, 0
    t_up = t_down = 0.0
    for t1, t2, _ in _union_segments(lt, down_pairs, t0, wend):
        if _all_up(lt, down_pairs, t1):
            t_up += t2 - t1
        else:
            t_down += t2 - t1
    max_lat = 0.0
    late = 0
    for d in h.deliveries.get(site, []):
        if d.msg_id not in send_at or not t0 <= d.at <= wend:
            continue
        lat = (d.at - send_at[d.msg_id]) / s
        max_lat = max(max_lat, lat)
        late += d.late
        if _all_up(lt, down_pairs, d.at):
            lat_up.append(lat)
            n_up += 1
        else:
            lat_down.append(lat)
            n_down += 1
    out["delivery"] = {
        "site": site, "late": late, "max_latency_s": max_lat,
        "rate_up": n_up / (t_up / s) if t_up else None, "rate_down": n_down / (t_down / s) if t_down else None,
        "latency_up": _stats(lat_up), "latency_down": _stats(lat_down),
    }
    return out


def _union_segments(lt: LinkTimeline, pairs: set[tuple[str, str]], t0: float,
                    t1: float) -> list[tuple[float, float, None]]:
    times = sorted({t0, t1, *(t for p in pairs for t in lt.links[p].times if t0 < t < t1)})
    return [(a, b, None) for a, b in zip(times, times[1:])]


def _all_up(lt: LinkTimeline, pairs: set[tuple[str, str]], t: float) -> bool:
    return all(lt.links[p].at(t) == UP for p in pairs)


def _stats(xs: list[float]) -> dict[str, Any]:
    if not xs:
        return {"n": 0}
    xs = sorted(xs)
    return {"n": len(xs), "mean": round(statistics.fmean(xs), 3), "min": round(xs[0], 3),
            "p50": round(xs[len(xs) // 2], 3), "p95": round(xs[min(len(xs) - 1, int(0.95 * len(xs)))], 3),
            "max": round(xs[-1], 3)}


__all__ = ["BASELINES", "bounds_for", "measure", "repair_metrics", "repair_window", "run_checks"]
