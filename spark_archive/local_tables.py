"""The archive's small tables in plain Python, from ``reference.read_journals`` and
``reference.build_transcript``: the same definitions as ``analysis.py``, row for row.

The driver plan writes these for small missions; tests hold them against the
Spark plan's. Percentiles use the same histogram (1%-wide log-scale bins, the
largest value in the bin holding the nearest rank), so both report a value
that occurred; means may differ in the last bits (sums in another order).
"""
from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

from contracts.precedence import PRECEDENCES, Precedence
from contracts.status import REPORTED, LinkStatus

from .missing import lost_in_memory
from .reference import Journals, Transcript

URGENT_CODES = frozenset(p.code for p in Precedence if p.urgent)   # delivered on arrival (as ``transforms``)
CONNECTED, DISCONNECTED = LinkStatus.CONNECTED.value, LinkStatus.DISCONNECTED.value
_BIN_WIDTH = 0.01
_FLOOR = 1e-6
_LOG_STEP = math.log1p(_BIN_WIDTH)


def value_bin(v: float) -> int:
    """The histogram bin of a duration (as ``analysis.value_bin``)."""
    magnitude = math.floor(math.log(max(abs(v), _FLOOR) / _FLOOR) / _LOG_STEP)
    return magnitude if v >= 0 else -magnitude - 1


def percentiles(values: Iterable[float]) -> dict[str, float | None]:
    """p50/p95/p99 (nearest rank, from the bins), max and mean of ``values``."""
    bins: dict[int, list[float]] = {}   # bin -> [count, largest, sum]
    for v in values:
        b = bins.setdefault(value_bin(v), [0.0, -math.inf, 0.0])
        b[0] += 1
        b[1] = max(b[1], v)
        b[2] += v
    total = sum(b[0] for b in bins.values())
    if not total:
        return {"p50": None, "p95": None, "p99": None, "max": None, "mean": None}
    out: dict[str, float | None] = {}
    ordered = [bins[k] for k in sorted(bins)]
    for name, p in (("p50", 0.5), ("p95", 0.95), ("p99", 0.99)):
        rank = max(math.ceil(total * p - 1e-9), 1)
        cum = 0.0
        for b in ordered:
            cum += b[0]
            if cum >= rank:
                out[name] = b[1]
                break
    out["max"] = max(b[1] for b in ordered)
    out["mean"] = sum(b[2] for b in ordered) / total
    return out


def _grouped(rows: Iterable[tuple[Any, float]]) -> dict[Any, list[float]]:
    groups: dict[Any, list[float]] = defaultdict(list)
    for key, value in rows:
        groups[key].append(value)
    return groups


def bucket_seconds(duration: float, buckets: int = 60) -> float:
    """A round bucket width giving about ``buckets`` buckets over the mission."""
    raw = max(duration / buckets, 1.0)
    for nice in (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400, 21600, 43200):
        if nice >= raw:
            return float(nice)
    return float(math.ceil(raw / 86400.0) * 86400)


class Delivery(NamedTuple):
    """A kept chat delivery or control record (as ``analysis.ORDERED``)."""

    site: str
    msg_id: str
    origin: str
    sent_at: float | None
    gidx: int
    n: int | None
    at: float
    late: bool
    repaired: bool
    hops: int
    prec: int
    control: bool


def chat_deliveries(t: Transcript) -> list[Delivery]:
    """One row per kept chat delivery (as ``analysis.site_deliveries``)."""
    out = []
    for row, prec in zip(t.rows, t.prec):
        msg_id, origin, sent_at = row[3], row[4], row[8]
        gidx = t.gidx[(msg_id, True)]
        for site, n, at, late, repaired, hops in row[11]:
            out.append(Delivery(site, msg_id, origin, sent_at, gidx, n, at, late, repaired, hops, prec, False))
    return out


def control_deliveries(j: Journals, t: Transcript) -> list[Delivery]:
    """The kept control records in the shape of ``chat_deliveries``."""
    return [Delivery(site, msg_id, msg_id.split(":", 1)[0], None, t.gidx[(msg_id, False)], None, at, late,
                     False, 0, Precedence.ROUTINE.code, True)
            for (msg_id, site), (at, late) in j.control.items()]


def divergence(j: Journals, t: Transcript, ordered: list[Delivery]) -> list[dict[str, Any]]:
    """Per site: order measures and the late-flag checks over chat and control deliveries."""
    by_site: dict[str, list[Delivery]] = defaultdict(list)
    for d in ordered:
        by_site[d.site].append(d)
    never: dict[str, list[int]] = {s: [0, 0] for s in j.sites}
    for row in t.rows:
        for site in row[13]:
            never[site][0] += 1
            never[site][1] += site in row[14]
    out = []
    for site in j.sites:
        ds = sorted(by_site.get(site, []), key=lambda d: (d.at, d.n is not None, d.n or 0, d.gidx))
        rank = {g: i for i, g in enumerate(sorted(d.gidx for d in ds))}
        counts = dict.fromkeys(("deliveries", "late", "out_of_place", "order_breaks", "max_displacement",
                                "control_deliveries", "control_late", "repaired", "late_unexplained",
                                "late_unflagged"), 0)
        frontier = previous = None
        total = 0
        for i, d in enumerate(ds):
            displacement = abs(i - rank[d.gidx])
            total += displacement
            counts["max_displacement"] = max(counts["max_displacement"], displacement)
            counts["out_of_place"] += displacement > 0
            counts["order_breaks"] += previous is not None and d.gidx < previous
            kind = "control_" if d.control else ""
            counts[f"{kind}deliveries"] += 1
            counts[f"{kind}late"] += d.late
            counts["repaired"] += d.repaired
            if d.late:
                counts["late_unexplained"] += frontier is None or d.gidx > frontier
            elif frontier is not None and d.gidx < frontier:
                counts["late_unflagged"] += 1
            if not d.late and d.prec not in URGENT_CODES:
                frontier = d.gidx if frontier is None else max(frontier, d.gidx)
            previous = d.gidx
        dup, redeliveries, resends = t.line_counts.get(site, (0, 0, 0))
        out.append({"site": site, **counts, "mean_displacement": total / len(ds) if ds else 0.0,
                    "duplicate_lines": dup, "redeliveries": redeliveries, "resends": resends,
                    "never_arrived": never[site][0], "never_arrived_reported": never[site][1]})
    return out


def _table(groups: dict[Any, list[Any]], keys: Sequence[str], count: str, value: Callable[[Any], float],
           sums: dict[str, Callable[[Any], Any]] | None = None) -> list[dict[str, Any]]:
    out = []
    for key, items in sorted(groups.items(), key=lambda kv: tuple((v is None, v or 0) for v in kv[0])):
        row = dict(zip(keys, key))
        row[count] = len(items)
        for name, f in (sums or {}).items():
            row[name] = sum(1 for x in items if f(x))
        row.update(percentiles(value(x) for x in items))
        out.append(row)
    return out


def latency_tables(deliveries: list[Delivery], start: float, end: float) -> dict[str, list[dict[str, Any]]]:
    """latency_pairs, latency_over_time, latency_precedence and latency_route (as in ``analysis``)."""
    bucket = bucket_seconds(end - start)
    lat = lambda d: d.at - d.sent_at  # noqa: E731
    pairs = defaultdict(list)
    over: dict[tuple[str, str, float], list[Delivery]] = defaultdict(list)
    levels: dict[tuple[int], list[Delivery]] = defaultdict(list)
    routes: dict[tuple[int], list[Delivery]] = defaultdict(list)
    for d in deliveries:
        if d.sent_at is None:
            continue
        pairs[(d.origin, d.site)].append(d)
        over[(d.origin, d.site, start + math.floor((d.sent_at - start) / bucket) * bucket)].append(d)
        if d.origin != d.site:
            levels[(d.prec,)].append(d)
            routes[(d.hops,)].append(d)
    late = {"late": lambda d: d.late}
    remote = sum(len(v) for v in routes.values())
    route_rows = _table(routes, ("hops",), "deliveries", lat, late)
    for r in route_rows:
        r["route"] = "direct" if r["hops"] == 0 else f"relayed, {r['hops']} hop(s)"
        r["share"] = r["deliveries"] / remote
    level_rows = _table(levels, ("prec",), "deliveries", lat, late)
    for r in level_rows:
        r["precedence"] = PRECEDENCES[r.pop("prec")]
    return {
        "latency_pairs": _table(pairs, ("origin", "destination"), "deliveries", lat,
                                {**late, "relayed": lambda d: d.hops > 0,
                                 "repaired": lambda d: d.repaired}),
        "latency_over_time": _table(over, ("origin", "destination", "bucket_start"), "deliveries", lat, late),
        "latency_precedence": level_rows,
        "latency_route": route_rows,
    }


def repairs(j: Journals, deliveries: list[Delivery]) -> list[dict[str, Any]]:
    """Per pair: repaired deliveries and the delay from the destination's missing report."""
    groups: dict[tuple[str, str], list[tuple[float | None, float | None]]] = defaultdict(list)
    for d in deliveries:
        if d.repaired:
            reported = j.missing.reports(d.msg_id).get(d.site)
            groups[(d.origin, d.site)].append(
                (None if reported is None else d.at - reported,
                 None if d.sent_at is None else d.at - d.sent_at))
    out = []
    for (origin, destination), items in sorted(groups.items()):
        delays = [x for x, _ in items if x is not None]
        latencies = [y for _, y in items if y is not None]
        stats = percentiles(delays)
        out.append({"origin": origin, "destination": destination, "repaired": len(items),
                    "reported": len(delays), **{f"delay_{k}": stats[k] for k in ("p50", "p95", "max", "mean")},
                    "latency_mean": sum(latencies) / len(latencies) if latencies else None,
                    "latency_max": max(latencies) if latencies else None})
    return out


def acknowledgements(j: Journals, t: Transcript) -> tuple[list[dict[str, Any]], list[dict[str, Any]], int]:
    """(per flash or immediate message, per level, acknowledgements of other messages)."""
    per_message: dict[str, list[tuple[float, str]]] = defaultdict(list)
    for (msg_id, site, user), at in j.acks.items():
        per_message[msg_id].append((at, f"{'?' if user is None else user}@{site}"))
    rows, urgent = [], set()
    for row, prec in zip(t.rows, t.prec):
        if prec not in URGENT_CODES:
            continue
        msg_id, sent_at = row[3], row[8]
        urgent.add(msg_id)
        acks = per_message.get(msg_id, [])
        times = [at for at, _ in acks]
        rows.append({"msg_id": msg_id, "position": row[0], "origin": row[4], "room": row[1],
                     "precedence": row[15], "sent_at": sent_at, "acknowledgements": len(acks),
                     "first_seconds": min(times) - sent_at if times and sent_at is not None else None,
                     "last_seconds": max(times) - sent_at if times and sent_at is not None else None,
                     "acknowledged_by": sorted(who for _, who in acks)})
    levels = []
    for level in sorted({r["precedence"] for r in rows}):
        mine = [r for r in rows if r["precedence"] == level]
        stats = percentiles(r["first_seconds"] for r in mine if r["first_seconds"] is not None)
        levels.append({"precedence": level, "messages": len(mine),
                       "acknowledged": sum(1 for r in mine if r["acknowledgements"] > 0),
                       "acknowledgements": sum(r["acknowledgements"] for r in mine),
                       **{f"first_{k}": stats[k] for k in ("p50", "p95", "max", "mean")}})
    other = sum(1 for (msg_id, _, _) in j.acks if msg_id not in urgent)
    return rows, levels, other


def connectivity(j: Journals, start: float, end: float) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(intervals, availability) of every ordered pair (as ``analysis.connectivity_intervals``)."""
    events: dict[tuple[str, str], list[tuple[float, str]]] = defaultdict(list)
    for site, peer, at, status in j.status:
        events[(site, peer)].append((at, status))
    pairs = {(a, b) for a in j.sites for b in j.sites if a != b} | set(events)
    intervals = []
    for pair in sorted(pairs):
        evs = sorted(events.get(pair, []))
        kept = [e for i, e in enumerate(evs) if i == 0 or evs[i - 1][1] != e[1]]
        spans = []
        first = kept[0][0] if kept else end
        if first > start:
            spans.append([start, first, DISCONNECTED])
        for i, (at, status) in enumerate(kept):
            spans.append([at, kept[i + 1][0] if i + 1 < len(kept) else end, status])
        merged: list[list[Any]] = []
        for s in spans:
            if merged and merged[-1][2] == s[2]:
                merged[-1][1] = max(merged[-1][1], s[1])
            else:
                merged.append(s)
        for a, b, status in merged:
            if b - a > 0:
                intervals.append({"site": pair[0], "peer": pair[1], "status": status, "start": a,
                                  "end": b, "seconds": b - a})
    per_pair: dict[tuple[str, str], dict[str, float]] = {}
    for r in intervals:
        sums = per_pair.setdefault((r["site"], r["peer"]), dict.fromkeys(REPORTED, 0.0))
        sums[r["status"]] += r["seconds"]
    availability = []
    for (site, peer), sums in sorted(per_pair.items()):
        total = sum(sums.values())
        availability.append({"site": site, "peer": peer,
                             **{f"{s}_seconds": sums[s] for s in REPORTED},
                             "availability": sums[CONNECTED] / total if total > 0 else 0.0})
    return intervals, availability


def all_tables(j: Journals, t: Transcript, report_rows: int) -> dict[str, Any]:
    """Every small table of the archive, by the names ``job.analysis_frames`` gives them,
    plus ``acknowledgements`` (every row)."""
    start, end = j.start or 0.0, j.end or 0.0
    chat = chat_deliveries(t)
    ordered = chat + control_deliveries(j, t)
    intervals, availability = connectivity(j, start, end)
    acks, levels, other = acknowledgements(j, t)
    # Reported missing, in no journal: from the pieces of the reports, never a set of every reported seq.
    lost, lost_total = lost_in_memory(j.pieces, (row[3] for row in t.rows)) if j.pieces else ([], 0)
    rooms: dict[Any, int] = defaultdict(int)
    levels_seen: dict[int, int] = defaultdict(int)
    for row, prec in zip(t.rows, t.prec):
        rooms[row[1]] += 1
        levels_seen[prec] += 1
    rows = t.rows
    return {
        "divergence": divergence(j, t, ordered),
        **latency_tables(chat, start, end),
        "repairs": repairs(j, chat),
        "connectivity": intervals,
        "availability": availability,
        "lost_messages": lost,
        "lost_total": [{"count": lost_total}],
        "acknowledgements": acks,
        "acknowledgement_levels": levels,
        "acknowledgements_shown": [a for a in acks if a["position"] < report_rows],
        "acknowledgements_other": [{"count": other}],
        "precedence": [{"precedence": PRECEDENCES[p], "messages": c, "prec": p} for p, c in levels_seen.items()],
        "totals": [{
            "messages": len(rows),
            "deliveries": sum(len(r[11]) for r in rows),
            "late_deliveries": sum(len(r[12]) for r in rows),
            "never_arrived": sum(len(r[13]) for r in rows),
            "duplicate_lines": t.duplicate_lines,
            "redeliveries": t.redeliveries,
            "messages_without_order": sum(1 for r in rows if r[10] is None),
        }],
        "rooms": [{"room": room, "count": c} for room, c in rooms.items()],
    }

