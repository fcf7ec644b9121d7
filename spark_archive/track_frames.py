"""Tracks and position ages with Spark, from the one pass's side rows (``onepass.position_lines``).

Theory of operation
-------------------
Position lines go through the one pass like every line: keyed by their unit
in the shuffle (so they spread over the partitions instead of joining the
status lines' null key), they make side rows per (file, site, report,
coordinates) with their line count and earliest ``at`` (``onepass.side_rows``).
From those rows, already cached with the pass:

* ``receipts`` keeps each site's earliest line of each report (the smallest
  ``struct(at, lat, lon, alt)``, as ``tracks.receipt_order``) and counts the
  site's lines;
* ``track_frame`` takes each report's first receipt anywhere (smallest ``at``,
  then site) and numbers each unit's reports by ``sent_at`` with a window
  partitioned by unit;
* ``position_age`` bins the remote receipts' ages per site into the archive's
  latency histogram (``analysis.binned``, ``analysis.percentile_table``) and
  compares each (site, unit)'s newest report with the unit's newest anywhere.

The definitions are in ``tracks.py``; ``local_tracks`` computes the same rows in
plain Python. Built-in functions only.
"""
from __future__ import annotations

from collections.abc import Sequence

from pyspark import StorageLevel
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from .analysis import binned, percentile_table
from .tracks import AGE_STATS, POSITION_AGE_COLUMNS, TRACK_COLUMNS, TRACK_ORDER

REPORT = ("origin", "unit", "sent_at")


def receipts(lines: DataFrame) -> DataFrame:
    """Side rows of position lines (site, origin, unit, sent_at, lat, lon, alt, count, first_at) -> one row
    per (site, report): the earliest line's ``at`` and coordinates, and the site's ``lines`` of it."""
    first = F.min(F.struct(F.col("first_at").alias("at"), "lat", "lon", "alt")).alias("r")
    return (lines.groupBy("site", *REPORT).agg(first, F.sum("count").alias("lines"))
            .select("site", *REPORT, "r.at", "r.lat", "r.lon", "r.alt", "lines"))


def track_frame(received: DataFrame) -> DataFrame:
    """One row per distinct report (``tracks.TRACK_COLUMNS``): its first receipt anywhere, numbered by
    ``sent_at`` within its unit."""
    first = F.min(F.struct("at", "site", "lat", "lon", "alt")).alias("f")
    reports = received.groupBy(*REPORT).agg(first, F.count(F.lit(1)).alias("sites"))
    point = F.row_number().over(Window.partitionBy("unit").orderBy("sent_at", "origin")) - 1
    return reports.select(
        "unit", point.cast("long").alias("point"), "sent_at", "origin", "f.lat", "f.lon", "f.alt",
        F.col("f.site").alias("first_site"), F.col("f.at").alias("first_at"), "sites",
    ).select(*TRACK_COLUMNS)


def track_totals(tracks: DataFrame) -> DataFrame:
    """One row: distinct ``reports`` and ``units``."""
    return tracks.agg(F.count(F.lit(1)).alias("reports"), F.count_distinct("unit").alias("units"))


def position_age(received: DataFrame, sites: Sequence[str]) -> DataFrame:
    """Per mission site: lines, receipts, remote receipts and their ages, units and staleness
    (``tracks.POSITION_AGE_COLUMNS``)."""
    site = F.col("site")
    remote = received.where(F.col("origin") != site)
    ages = percentile_table(binned(remote, ["site"], F.col("at") - F.col("sent_at")), ("site",), count="remote")
    counts = received.groupBy("site").agg(F.sum("lines").alias("lines"), F.count(F.lit(1)).alias("reports"))
    newest = received.groupBy("site", "unit").agg(F.max("sent_at").alias("newest"))
    top = newest.groupBy("unit").agg(F.max("newest").alias("top"))
    behind = (newest.join(top, "unit").groupBy("site")
              .agg(F.count(F.lit(1)).alias("units"),
                   F.count(F.when(F.col("newest") < F.col("top"), 1)).alias("units_behind"),
                   F.max(F.col("top") - F.col("newest")).alias("behind_max")))
    unit_count = top.agg(F.count(F.lit(1)).alias("all_units"))
    everyone = received.sparkSession.createDataFrame([(s,) for s in sites], "site string")
    zero = F.lit(0).cast("long")
    return (everyone.join(counts, "site", "left").join(ages, "site", "left").join(behind, "site", "left")
            .crossJoin(unit_count)
            .select("site",
                    *[F.coalesce(c, zero).alias(c) for c in ("lines", "reports", "remote", "units")],
                    (F.col("all_units") - F.coalesce("units", zero)).alias("units_unseen"),
                    F.coalesce("units_behind", zero).alias("units_behind"), "behind_max",
                    *[F.col(s).alias(f"age_{s}") for s in AGE_STATS])
            .select(*POSITION_AGE_COLUMNS))


def position_frames(received: DataFrame | None, sites: Sequence[str], frames: dict[str, DataFrame],
                    cached: list[DataFrame]) -> DataFrame | None:
    """The tracks in track order, persisted and added to ``cached`` (None without receipts), with
    ``position_age`` and ``position_totals`` added to the job's small ``frames``."""
    if received is None:
        return None
    tracks = track_frame(received).orderBy(*TRACK_ORDER).persist(StorageLevel.MEMORY_AND_DISK)
    cached.append(tracks)
    frames["position_age"] = position_age(received, sites)
    frames["position_totals"] = track_totals(tracks)
    return tracks
