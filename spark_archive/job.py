"""The archive job: read every site's journal, run the transforms, write the outputs.

``run_archive`` takes a live SparkSession and explicit paths, so tests drive it
with their session-scoped local session and the CLI with a session built from
``--master``. Small results (per-site, per-pair, per-file tables) are collected
to the driver for the readable files and the report; the transcript never is,
except the capped slice shown in the HTML report.
"""
from __future__ import annotations

import csv
import json
import logging
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from . import transforms as tf
from .journals import JournalFile, list_journal_files
from .onepass import read_mission

log = logging.getLogger("spark_archive")

TRANSCRIPT_COLUMNS = ("position", "room", "room_position", "msg_id", "origin", "seq", "user",
                      "text", "sent_at", "order", "order_key", "deliveries", "late_sites",
                      "never_arrived", "reported_missing_at")

LOCAL_CONF = {
    "spark.ui.enabled": "false",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.adaptive.enabled": "true",
    "spark.sql.adaptive.coalescePartitions.enabled": "true",
    "spark.ui.showConsoleProgress": "false",
    # The cached records are read a few times and dropped: compressing them cost
    # more than all the reads saved (measured: +5 s per 2M records at local[2]).
    "spark.sql.inMemoryColumnarStorage.compressed": "false",
}


def build_session(master: str = "local[*]", app_name: str = "rcm-spark-archive",
                  conf: dict[str, str] | None = None) -> SparkSession:
    """A SparkSession for the archive (loopback only, no UI)."""
    builder = SparkSession.builder.master(master).appName(app_name)
    defaults = dict(LOCAL_CONF)
    log_config = Path(__file__).with_name("log4j2.properties")
    # The throughput collector: about 10% faster than G1 on this job (measured at
    # local[2], 2M records); the job keeps little alive between its stages.
    java_options = "-XX:+UseParallelGC"
    if log_config.exists():  # only errors from Spark itself: the job logs its own progress
        java_options += f" -Dlog4j2.configurationFile=file:{log_config}"
    defaults["spark.driver.extraJavaOptions"] = java_options
    defaults["spark.executor.extraJavaOptions"] = "-XX:+UseParallelGC"
    for key, value in {**defaults, **(conf or {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    if "spark.sql.shuffle.partitions" not in (conf or {}):
        # Spark's 200 is far too many for a laptop and AQE cannot coalesce cached
        # or range-partitioned stages: a few partitions per core.
        cores = spark.sparkContext.defaultParallelism
        spark.conf.set("spark.sql.shuffle.partitions", str(max(8, 4 * cores)))
    return spark


@dataclass
class Progress:
    """Timed steps, logged as they finish (``on_step`` lets a CLI show a progress bar)."""

    steps: list[tuple[str, float]] = field(default_factory=list)
    on_step: Any = None

    def step(self, name: str) -> "_Step":
        return _Step(self, name)


class _Step:
    def __init__(self, progress: Progress, name: str) -> None:
        self.progress, self.name = progress, name

    def __enter__(self) -> None:
        self.t0 = time.perf_counter()
        if self.progress.on_step:
            self.progress.on_step(self.name, None)

    def __exit__(self, *exc: Any) -> None:
        took = time.perf_counter() - self.t0
        self.progress.steps.append((self.name, took))
        log.info("%s: %.2fs", self.name, took)
        if self.progress.on_step:
            self.progress.on_step(self.name, took)


def _rows(df: DataFrame) -> list[dict]:
    return [r.asDict(recursive=True) for r in df.collect()]


def _write_csv(path: Path, rows: list[dict], columns: Sequence[str]) -> None:
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(columns)
        for row in rows:
            writer.writerow(["" if row.get(c) is None else
                             (";".join(map(str, row[c])) if isinstance(row[c], list) else row[c])
                             for c in columns])


def _bucket_seconds(duration: float, buckets: int = 60) -> float:
    """A round bucket width giving about ``buckets`` buckets over the mission."""
    raw = max(duration / buckets, 1.0)
    for nice in (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400, 21600, 43200):
        if nice >= raw:
            return float(nice)
    return float(math.ceil(raw / 86400.0) * 86400)


def build_transcript(spark: SparkSession, messages: DataFrame, missing: DataFrame,
                     *, persist: bool = True) -> tuple[DataFrame, DataFrame]:
    """(keys, positioned): the transcript in global order.

    ``messages`` have the ``transforms.MESSAGE_COLUMNS``, ``missing`` are the missing reports.
    Only the keys are sorted: ``keys`` (``msg_id``, ``gidx``, ``position``)
    is numbered in global order and persisted, since ``gidx`` must not be
    recomputed. The transcript rows then take their positions from it by a
    broadcast join (a sort-merge join beyond ``BROADCAST_KEYS`` messages), and
    the ``room_position`` window hash-partitions them by room and sorts them by
    position, so each room is written as one file in order.
    ``positioned`` is persisted when ``persist`` is set.
    """
    level = StorageLevel.MEMORY_AND_DISK
    numbered = tf.number_transcript(messages.select("msg_id", "room", "order_key")).persist(level)
    offsets = tf.partition_offsets(numbered).collect()
    offsets_df = spark.createDataFrame([(r["part"], r["offset"]) for r in offsets],
                                       "part long, offset long")
    keys = tf.add_positions(numbered, offsets_df).select("msg_id", "gidx", "position").persist(level)
    count = keys.count()
    numbered.unpersist()
    rows = tf.transcript(messages, missing)
    joined = rows.join(F.broadcast(keys) if count <= BROADCAST_KEYS else keys, "msg_id")
    # The room window hash-partitions the rows by room and sorts them by position:
    # the order each room's file is written in.
    positioned = tf.room_positions(joined)
    if persist:
        positioned = positioned.persist(level)
        positioned.count()
    return keys, positioned


# Up to this many messages the keys (about 50 bytes each) are broadcast to the join.
BROADCAST_KEYS = 4_000_000


def run_archive(spark: SparkSession, journals: str | os.PathLike[str], out: str | os.PathLike[str],
                *, report_rows: int = 200, persist: bool = True,
                progress: Progress | None = None) -> dict:
    """Run the whole archive job; return the summary (also written to ``summary.json``)."""
    progress = progress or Progress()
    t_start = time.perf_counter()
    files = list_journal_files(journals)
    out_dir = Path(out).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)

    with progress.step("scan journals"):
        # Every line parsed once; see onepass.py.
        mission = read_mission(spark, files)
    scan, missing, sites = mission.scan, mission.missing, mission.sites
    file_table, site_counts, bounds = _scan_tables(files, scan)
    start, end = bounds
    with progress.step("transcript"):
        keys, positioned = build_transcript(spark, mission.messages, missing, persist=persist)
        transcript_out = positioned.select(*TRANSCRIPT_COLUMNS)
        transcript_out.write.mode("overwrite").parquet(str(out_dir / "transcript"))
        # Readable: one JSON Lines file per room, in transcript order.
        (transcript_out.drop("order_key")
         .withColumn("sent_utc", F.date_format(F.timestamp_seconds("sent_at"), "yyyy-MM-dd HH:mm:ss.SSS"))
         .write.mode("overwrite")
         .partitionBy("room").json(str(out_dir / "transcript_json")))

    with progress.step("divergence and latency"):
        deliveries = tf.site_deliveries(positioned)
        divergence = tf.divergence(deliveries, tf.site_line_counts(mission.messages), sites)
        never = tf.never_arrived_counts(positioned, sites)
        per_site = divergence.join(never, "site").orderBy("site")
        per_site_rows = _rows(per_site)
        bucket = _bucket_seconds((end or 0) - (start or 0))
        histogram = tf.latency_histogram(deliveries, start or 0.0, bucket).persist(StorageLevel.MEMORY_AND_DISK)
        latency_pairs = _rows(tf.latency_by_pair(histogram))
        latency_time = _rows(tf.latency_over_time(histogram))
        histogram.unpersist()
        totals = positioned.agg(
            F.count(F.lit(1)).alias("messages"),
            F.coalesce(F.sum(F.size("deliveries")), F.lit(0)).alias("deliveries"),
            F.coalesce(F.sum(F.size("late_sites")), F.lit(0)).alias("late_deliveries"),
            F.coalesce(F.sum(F.size("never_arrived")), F.lit(0)).alias("never_arrived"),
            F.coalesce(F.sum("duplicate_lines"), F.lit(0)).alias("duplicate_lines"),
            F.coalesce(F.sum("redeliveries"), F.lit(0)).alias("redeliveries"),
            F.count(F.when(F.col("order_key").isNull(), 1)).alias("messages_without_order"),
        ).collect()[0].asDict()
        unseen = missing.join(positioned.select("msg_id"), "msg_id", "left_anti")
        unseen_rows = _rows(unseen.orderBy("origin", "seq"))

    with progress.step("connectivity"):
        status = mission.status
        pairs = tf.all_pairs(status, sites)
        intervals = tf.connectivity_intervals(status, pairs, start or 0.0, end or 0.0)
        interval_rows = _rows(intervals)
        availability_rows = _rows(tf.availability(spark.createDataFrame(
            [tuple(r[c] for c in CONNECTIVITY_COLUMNS) for r in interval_rows],
            _SCHEMAS["connectivity"])))
        status_dups = mission.status_duplicates

    with progress.step("write tables"):
        _write_small_tables(spark, out_dir, {
            "divergence": (per_site_rows, DIVERGENCE_COLUMNS),
            "latency_pairs": (latency_pairs, LATENCY_COLUMNS),
            "latency_over_time": (latency_time, ("origin", "destination", "bucket_start") + LATENCY_COLUMNS[2:]),
            "connectivity": (interval_rows, CONNECTIVITY_COLUMNS),
            "availability": (availability_rows, AVAILABILITY_COLUMNS),
            "files": (file_table, FILE_COLUMNS),
            "lost_messages": (unseen_rows, ("msg_id", "origin", "seq", "reported_by")),
        })

    with progress.step("report"):
        shown = _rows(positioned.where(F.col("room_position") < report_rows)
                      .select(*TRANSCRIPT_COLUMNS).orderBy("room", "room_position"))
        room_sizes = {r["room"]: r["count"] for r in _rows(positioned.groupBy("room").count())}
        summary = {
            "journals": str(Path(journals).resolve()),
            "out": str(out_dir),
            "sites": sites,
            "mission_start": start,
            "mission_end": end,
            "files": len(files),
            "lines": sum(f["lines"] for f in file_table),
            "records": sum(f["records"] for f in file_table),
            "bad_lines": sum(f["bad_lines"] for f in file_table),
            "files_with_bad_lines": sum(1 for f in file_table if f["bad_lines"]),
            "empty_files": sum(1 for f in file_table if f["lines"] == 0),
            **{k: int(v) for k, v in totals.items()},
            "duplicate_status_lines": int(status_dups),
            "resends": int(sum(r["resends"] for r in per_site_rows)),
            "missing_reported_unseen": len(unseen_rows),
            # Messages the one pass could not settle alone, and journal reads (see onepass.py).
            "rare_messages": mission.rare_messages,
            "scan_passes": mission.passes,
            "rooms": dict(sorted((str(k), v) for k, v in room_sizes.items())),
            "sites_without_records": [s for s in sites if not any(
                r["site"] == s for r in site_counts)],
            "sites_never_connected": [s for s in sites if not any(
                r["connected_seconds"] > 0 for r in availability_rows if s in (r["site"], r["peer"]))],
            "outputs": {name: str(out_dir / name) for name in OUTPUT_DATASETS},
            "report": str(out_dir / "report.html"),
            "per_site": per_site_rows,
        }
        from .report import write_report
        write_report(out_dir / "report.html", summary, shown, report_rows, latency_pairs,
                     latency_time, interval_rows, availability_rows)
    for df in (keys, positioned):
        df.unpersist()
    mission.unpersist()
    summary["seconds"] = round(time.perf_counter() - t_start, 3)
    summary["steps"] = {name: round(took, 3) for name, took in progress.steps}
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    return summary


OUTPUT_DATASETS = ("transcript", "transcript_json", "divergence", "latency_pairs",
                   "latency_over_time", "connectivity", "availability", "files", "lost_messages")
DIVERGENCE_COLUMNS = ("site", "deliveries", "late", "out_of_place", "order_breaks",
                      "max_displacement", "mean_displacement", "duplicate_lines", "redeliveries",
                      "resends", "never_arrived", "never_arrived_reported")
LATENCY_COLUMNS = ("origin", "destination", "deliveries", "late", "p50", "p95", "p99", "max", "mean")
CONNECTIVITY_COLUMNS = ("site", "peer", "status", "start", "end", "seconds")
AVAILABILITY_COLUMNS = ("site", "peer", "connected_seconds", "suspected_seconds",
                        "disconnected_seconds", "availability")
FILE_COLUMNS = ("file", "path_site", "bytes", "lines", "records", "bad_lines", "sites",
                "first_at", "last_at")

_SCHEMAS = {
    "divergence": "site string, deliveries long, late long, out_of_place long, order_breaks long, "
                  "max_displacement long, mean_displacement double, duplicate_lines long, "
                  "redeliveries long, resends long, never_arrived long, never_arrived_reported long",
    "latency_pairs": "origin string, destination string, deliveries long, late long, p50 double, "
                     "p95 double, p99 double, max double, mean double",
    "latency_over_time": "origin string, destination string, bucket_start double, deliveries long, "
                         "late long, p50 double, p95 double, p99 double, max double, mean double",
    "connectivity": "site string, peer string, status string, start double, end double, seconds double",
    "availability": "site string, peer string, connected_seconds double, suspected_seconds double, "
                    "disconnected_seconds double, availability double",
    "files": "file string, path_site string, bytes long, lines long, records long, bad_lines long, "
             "sites array<string>, first_at double, last_at double",
    "lost_messages": "msg_id string, origin string, seq long, reported_by array<string>",
}


def _write_small_tables(spark: SparkSession, out_dir: Path,
                        tables: dict[str, tuple[list[dict], Sequence[str]]]) -> None:
    """Each small table as a one-file Parquet dataset and a CSV file."""
    for name, (rows, columns) in tables.items():
        df = spark.createDataFrame([tuple(r.get(c) for c in columns) for r in rows], _SCHEMAS[name])
        df.coalesce(1).write.mode("overwrite").parquet(str(out_dir / name))
        _write_csv(out_dir / f"{name}.csv", rows, columns)


def _scan_tables(files: Sequence[JournalFile], scan: list[dict]) -> tuple[list[dict], list[dict], tuple]:
    """Per-file table, per-site record counts and mission bounds from the scan aggregate."""
    stats: dict[str, dict] = {f.path: {"file": f.path, "path_site": f.path_site, "bytes": f.size,
                                       "lines": 0, "records": 0, "bad_lines": 0, "sites": set(),
                                       "first_at": None, "last_at": None} for f in files}
    per_site: dict[str, dict] = {}
    first = last = None
    for r in scan:
        path = r["file"]
        entry = stats.get(path) or stats.setdefault(path, {
            "file": path, "path_site": None, "bytes": None, "lines": 0, "records": 0, "bad_lines": 0, "sites": set(),
            "first_at": None, "last_at": None})
        entry["lines"] += r["count"]
        if not r["valid"]:
            entry["bad_lines"] += r["count"]
            continue
        entry["records"] += r["count"]
        entry["sites"].add(r["site"])
        for key, pick in (("first_at", min), ("last_at", max)):
            entry[key] = r[key] if entry[key] is None else pick(entry[key], r[key])
        counts = per_site.setdefault(r["site"], {"site": r["site"], "records": 0,
                                                 **{f"{k}_records": 0 for k in tf.KINDS}})
        counts["records"] += r["count"]
        counts[f"{r['kind']}_records"] += r["count"]
        first = r["first_at"] if first is None else min(first, r["first_at"])
        last = r["last_at"] if last is None else max(last, r["last_at"])
    table = []
    for path in sorted(stats):
        entry = stats[path]
        entry["sites"] = sorted(entry["sites"])
        table.append(entry)
    return table, sorted(per_site.values(), key=lambda r: r["site"]), (first, last)

