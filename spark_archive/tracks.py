"""Position reports in the archive: what a track and a report's age are, and the outputs they make.

Theory of operation
-------------------
A chat server journals a ``position`` record (Contract 3, second round) for
every position report it accepts from one of its users or TAK clients (then
``origin`` is the site itself) and for every report it receives from another
site. Reports are their own traffic class, newest first: a report superseded
on a slow link before it was sent is journaled nowhere but at its origin. So
one report is journaled by each site it reached, and a restart may journal it
twice at one site. The definitions, which both plans implement (the Spark
plan in ``track_frames``, the driver plan and the reference in
``local_tracks``):

* A **report** is identified by (``origin``, ``unit``, ``sent_at``): the unit's
  position at ``sent_at``, reported at ``origin``.
* A site's **receipt** of a report is its earliest line of it (smallest
  ``at``); further lines of it at the site are duplicates. (Lines of one report
  that disagree on the coordinates, which no chat server writes, are ordered
  after ``at`` by lat, lon and alt, a missing alt first.)
* A unit's **track** (``tracks/``, ``tracks.csv``) is the sequence of its
  distinct reports ordered by ``sent_at`` (then ``origin``), numbered from 0
  (``point``), each with its coordinates *as first received anywhere* (the
  receipt with the smallest ``at``, then the smallest site name), that
  receipt's site and time, and how many sites journaled the report. A unit is
  named by ``unit`` alone: a unit that later reports through another site
  keeps one track, and ``origin`` says where each point came from.
* The **age** of a receipt is ``at - sent_at``: how old the report was when it
  reached the site. ``position_age`` has one row per mission site: its lines,
  receipts, the remote receipts among them (reports of another site), the
  units it has reports of, and the age of its remote receipts (p50, p95, max,
  mean; the site's own reports are journaled as they are accepted, age about
  zero, and would only hide the links' figures). Then the **staleness** at the
  end of the mission: of the units the site has a report of, how many have a
  newer report at some other site (``units_behind``) and by how much at most
  (``behind_max``, seconds of ``sent_at``), and how many units reported
  somewhere never reached it (``units_unseen``). A mission without any usable
  position line has no rows.
* A ``position`` line is usable when it has ``origin``, ``unit``, ``lat`` within
  [-90, 90], ``lon`` within [-180, 180], a finite ``sent_at`` and, if present,
  a finite ``alt`` (``usable``); any other is a bad line, counted as such.

Percentiles are the archive's (the 1%-wide log-scale histogram of
``local_tables.percentiles`` and ``analysis.percentile_table``), so both plans
give the same figures. This module is pure Python (the reference and the report
import it without Spark): the definitions above, the output columns, the CSV
writer that also thins each track for the plot, and the summary section.
"""
from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

LAT_RANGE = (-90.0, 90.0)
LON_RANGE = (-180.0, 180.0)

TRACK_COLUMNS = ("unit", "point", "sent_at", "origin", "lat", "lon", "alt", "first_site", "first_at", "sites")
TRACK_SCHEMA = ("unit string, point long, sent_at double, origin string, lat double, lon double, alt double, "
                "first_site string, first_at double, sites long")
TRACK_ORDER = ("unit", "point")
AGE_STATS = ("p50", "p95", "max", "mean")
POSITION_AGE_COLUMNS = ("site", "lines", "reports", "remote", "units", "units_unseen", "units_behind",
                        "behind_max", *(f"age_{s}" for s in AGE_STATS))
POSITION_AGE_SCHEMA = ("site string, lines long, reports long, remote long, units long, units_unseen long, "
                       "units_behind long, behind_max double, "
                       + ", ".join(f"age_{s} double" for s in AGE_STATS))

# The plot draws at most this many points of a track (evenly spaced, the last one always) and this many units.
PLOT_POINTS = 2000
PLOT_UNITS = 60


def _finite(v: float | None) -> bool:
    return v is not None and math.isfinite(v)


def usable(origin: str | None, unit: str | None, lat: float | None, lon: float | None, alt: float | None,
           sent_at: float | None) -> bool:
    """Whether a ``position`` line's parsed fields make a usable record (see the module doc)."""
    return (origin is not None and unit is not None and _finite(sent_at) and (alt is None or _finite(alt))
            and lat is not None and LAT_RANGE[0] <= lat <= LAT_RANGE[1]
            and lon is not None and LON_RANGE[0] <= lon <= LON_RANGE[1])


def receipt_order(at: float, lat: float, lon: float, alt: float | None) -> tuple[float, float, float, bool, float]:
    """How two lines of one report at one site are ordered: the first is the site's receipt (as Spark orders
    ``struct(at, lat, lon, alt)``: a null first)."""
    return (at, lat, lon, alt is not None, alt or 0.0)


class TrackPoints:
    """Each unit's (lon, lat) points for the plot, thinned as they come: at most ``PLOT_POINTS`` evenly
    spaced ones per unit (every 2^k-th point), plus the last. Rows must come in track order."""

    def __init__(self, cap: int = PLOT_POINTS) -> None:
        self.cap = cap
        self._units: dict[str, list[Any]] = {}    # unit -> [stride, seen, points, last]

    def add(self, unit: str, lon: float, lat: float) -> None:
        entry = self._units.get(unit)
        if entry is None:
            entry = self._units[unit] = [1, 0, [], None]
        stride, seen, points, _ = entry
        if seen % stride == 0:
            points.append((lon, lat))
            if len(points) > self.cap:
                entry[2] = points[::2]
                entry[0] = stride * 2
        entry[1] = seen + 1
        entry[3] = (lon, lat)

    def result(self) -> dict[str, list[tuple[float, float]]]:
        """unit -> its points in track order, the last point included."""
        out = {}
        for unit, (stride, seen, points, last) in self._units.items():
            out[unit] = points + ([last] if (seen - 1) % stride else [])
        return out


def write_tracks_csv(path: Path, rows: Iterable[Mapping[str, Any]]) -> dict[str, list[tuple[float, float]]]:
    """Write ``tracks.csv`` from track rows in track order (streamed: rows may come from Spark a partition at
    a time) and return each unit's points for the plot (``TrackPoints``)."""
    points = TrackPoints()
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(TRACK_COLUMNS)
        for row in rows:
            writer.writerow(["" if row[c] is None else row[c] for c in TRACK_COLUMNS])
            points.add(row["unit"], row["lon"], row["lat"])
    return points.result()


def summary_section(per_site: Sequence[Mapping[str, Any]], totals: Mapping[str, int]) -> dict[str, Any]:
    """``summary.json``'s ``positions``: lines, distinct reports and units, duplicate lines, and the
    ``position_age`` rows (``totals``: ``reports`` and ``units`` of the tracks)."""
    lines = sum(r["lines"] for r in per_site)
    return {"lines": lines, "reports": int(totals.get("reports") or 0), "units": int(totals.get("units") or 0),
            "duplicate_lines": lines - sum(r["reports"] for r in per_site), "per_site": list(per_site)}
