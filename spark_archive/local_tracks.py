"""Tracks and position ages in plain Python, from ``reference.read_journals``' receipts: the driver plan's
tables and the yardstick of ``track_frames``, row for row.

Theory of operation
-------------------
``read_journals`` keeps one receipt per site and report (``Journals.positions``:
the site's earliest line, ``tracks.receipt_order``). From those, ``track_rows``
picks each report's first receipt anywhere and numbers each unit's reports by
``sent_at``; ``position_age`` sums the receipts up per site. The definitions are
in ``tracks.py``; percentiles are ``local_tables.percentiles`` (the histogram the
Spark plan uses too).
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from .local_tables import percentiles
from .tracks import AGE_STATS

Receipts = Mapping[tuple[str, str, str, float], tuple[float, float, float, float | None]]


def track_rows(receipts: Receipts) -> list[dict[str, Any]]:
    """One row per distinct report (``tracks.TRACK_COLUMNS``), in track order (unit, point)."""
    first: dict[tuple[str, float, str], list[Any]] = {}   # report -> [(at, site, lat, lon, alt), sites]
    for (site, origin, unit, sent_at), (at, lat, lon, alt) in receipts.items():
        report = (unit, sent_at, origin)
        kept = first.get(report)
        if kept is None:
            first[report] = [(at, site, lat, lon, alt), 1]
        else:
            kept[1] += 1
            if (at, site) < kept[0][:2]:      # one receipt per site: (at, site) decides
                kept[0] = (at, site, lat, lon, alt)
    rows: list[dict[str, Any]] = []
    point, previous = 0, None
    for report in sorted(first):
        unit, sent_at, origin = report
        (at, site, lat, lon, alt), sites = first[report]
        point = point + 1 if unit == previous else 0
        previous = unit
        rows.append({"unit": unit, "point": point, "sent_at": sent_at, "origin": origin, "lat": lat, "lon": lon,
                     "alt": alt, "first_site": site, "first_at": at, "sites": sites})
    return rows


def position_age(receipts: Receipts, sites: Sequence[str], lines: Mapping[str, int]) -> list[dict[str, Any]]:
    """Per mission site (``tracks.POSITION_AGE_COLUMNS``; none without receipts): ``lines`` are each site's
    usable position lines."""
    if not receipts:
        return []
    ages: dict[str, list[float]] = defaultdict(list)
    reports: dict[str, int] = defaultdict(int)
    newest: dict[tuple[str, str], float] = {}          # (site, unit) -> newest sent_at there
    for (site, origin, unit, sent_at), (at, *_) in receipts.items():
        reports[site] += 1
        if origin != site:
            ages[site].append(at - sent_at)
        key = (site, unit)
        if key not in newest or sent_at > newest[key]:
            newest[key] = sent_at
    top: dict[str, float] = {}                          # unit -> newest sent_at anywhere
    per_site_units: dict[str, list[float]] = defaultdict(list)   # site -> how far behind, per unit it has
    for (_, unit), sent_at in newest.items():
        top[unit] = max(top.get(unit, sent_at), sent_at)
    for (site, unit), sent_at in newest.items():
        per_site_units[site].append(top[unit] - sent_at)
    rows = []
    for site in sites:
        behind = per_site_units.get(site, [])
        stats = percentiles(ages.get(site, []))
        rows.append({"site": site, "lines": lines.get(site, 0), "reports": reports.get(site, 0),
                     "remote": len(ages.get(site, [])), "units": len(behind),
                     "units_unseen": len(top) - len(behind), "units_behind": sum(1 for b in behind if b > 0),
                     "behind_max": max(behind) if behind else None,
                     **{f"age_{s}": stats[s] for s in AGE_STATS}})
    return rows


def position_tables(receipts: Receipts, sites: Sequence[str], lines: Mapping[str, int]) -> dict[str, Any]:
    """``tracks``, ``position_age`` and ``position_totals`` (reports and units), as ``job`` names them."""
    tracks = track_rows(receipts)
    return {"tracks": tracks, "position_age": position_age(receipts, sites, lines),
            "position_totals": [{"reports": len(tracks), "units": len({r["unit"] for r in tracks})}]}
