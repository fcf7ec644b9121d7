"""The archive's output datasets: their columns, how small ones are gathered and written.

Small tables (per site, per pair, per level...) are gathered to the driver
(``collect_tables``) or computed there (the driver plan), and written as a
one-file Parquet dataset and a CSV file each. ``Writers`` runs those writes
(and the transcript's) a few at a time: each is mostly the driver's fixed work
(planning, committing), and two cores do two of them at once (11 small writes:
2.2 s one after the other, 1.1 s three at a time).
"""
from __future__ import annotations

import csv
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from .tracks import POSITION_AGE_COLUMNS, POSITION_AGE_SCHEMA

TRANSCRIPT_COLUMNS = ("position", "room", "room_position", "msg_id", "origin", "seq", "user",
                      "text", "sent_at", "order", "order_key", "deliveries", "late_sites",
                      "never_arrived", "reported_missing_at", "precedence")
DIVERGENCE_COLUMNS = ("site", "deliveries", "late", "out_of_place", "order_breaks",
                      "max_displacement", "mean_displacement", "duplicate_lines", "redeliveries",
                      "resends", "never_arrived", "never_arrived_reported", "control_deliveries",
                      "control_late", "repaired", "late_unexplained", "late_unflagged")
PERCENTILES = ("p50", "p95", "p99", "max", "mean")
LATENCY_COLUMNS = ("origin", "destination", "deliveries", "late", *PERCENTILES, "relayed", "repaired")
LATENCY_TIME_COLUMNS = ("origin", "destination", "bucket_start", "deliveries", "late", *PERCENTILES)
LATENCY_PRECEDENCE_COLUMNS = ("precedence", "deliveries", "late", *PERCENTILES)
LATENCY_ROUTE_COLUMNS = ("hops", "route", "deliveries", "share", "late", *PERCENTILES)
REPAIR_COLUMNS = ("origin", "destination", "repaired", "reported", "delay_p50", "delay_p95",
                  "delay_max", "delay_mean", "latency_mean", "latency_max")
ACK_COLUMNS = ("msg_id", "position", "origin", "room", "precedence", "sent_at", "acknowledgements",
               "first_seconds", "last_seconds", "acknowledged_by")
ACK_LEVEL_COLUMNS = ("precedence", "messages", "acknowledged", "acknowledgements", "first_p50",
                     "first_p95", "first_max", "first_mean")
CONNECTIVITY_COLUMNS = ("site", "peer", "status", "start", "end", "seconds")
AVAILABILITY_COLUMNS = ("site", "peer", "connected_seconds", "suspected_seconds",
                        "disconnected_seconds", "availability")
FILE_COLUMNS = ("file", "path_site", "bytes", "lines", "records", "bad_lines", "sites",
                "first_at", "last_at")
LOST_COLUMNS = ("msg_id", "origin", "seq", "reported_by")
# Second round: traffic per security label and the leaks found (labels.py).
LABEL_COLUMNS = ("label", "level", "caveats", "rank", "messages", "deliveries")
LEAK_COLUMNS = ("site", "msg_id", "kinds", "at", "label", "clearance", "reason")

_PCT = ", ".join(f"{c} double" for c in PERCENTILES)
# (columns, Spark schema, sort key) of every small dataset.
SMALL_TABLES: dict[str, tuple[Sequence[str], str, Sequence[str]]] = {
    "divergence": (DIVERGENCE_COLUMNS,
                   "site string, deliveries long, late long, out_of_place long, order_breaks long, "
                   "max_displacement long, mean_displacement double, duplicate_lines long, "
                   "redeliveries long, resends long, never_arrived long, never_arrived_reported long, "
                   "control_deliveries long, control_late long, repaired long, "
                   "late_unexplained long, late_unflagged long", ("site",)),
    "latency_pairs": (LATENCY_COLUMNS, f"origin string, destination string, deliveries long, late long, "
                                       f"{_PCT}, relayed long, repaired long", ("origin", "destination")),
    "latency_over_time": (LATENCY_TIME_COLUMNS, f"origin string, destination string, bucket_start double, "
                                                f"deliveries long, late long, {_PCT}",
                          ("origin", "destination", "bucket_start")),
    "latency_precedence": (LATENCY_PRECEDENCE_COLUMNS, f"precedence string, deliveries long, late long, {_PCT}",
                           ("precedence",)),
    "latency_route": (LATENCY_ROUTE_COLUMNS, f"hops int, route string, deliveries long, share double, "
                                             f"late long, {_PCT}", ("hops",)),
    "repairs": (REPAIR_COLUMNS, "origin string, destination string, repaired long, reported long, "
                                "delay_p50 double, delay_p95 double, delay_max double, delay_mean double, "
                                "latency_mean double, latency_max double", ("origin", "destination")),
    "connectivity": (CONNECTIVITY_COLUMNS, "site string, peer string, status string, start double, "
                                           "end double, seconds double", ("site", "peer", "start")),
    "availability": (AVAILABILITY_COLUMNS, "site string, peer string, connected_seconds double, "
                                           "suspected_seconds double, disconnected_seconds double, "
                                           "availability double", ("site", "peer")),
    "files": (FILE_COLUMNS, "file string, path_site string, bytes long, lines long, records long, "
                            "bad_lines long, sites array<string>, first_at double, last_at double", ("file",)),
    "lost_messages": (LOST_COLUMNS, "msg_id string, origin string, seq long, reported_by array<string>",
                      ("origin", "seq")),
    "position_age": (POSITION_AGE_COLUMNS, POSITION_AGE_SCHEMA, ("site",)),
    "labels": (LABEL_COLUMNS, "label string, level string, caveats array<string>, rank int, messages long, "
                              "deliveries long", ("rank", "label")),
    "leaks": (LEAK_COLUMNS, "site string, msg_id string, kinds array<string>, at double, label string, "
                            "clearance string, reason string", ("site", "at", "msg_id")),
}
# Written by Spark straight from the transcript's frames (they grow with the mission).
# (``tracks`` also as ``tracks.csv``, one file: ``tracks.write_tracks_csv``.)
LARGE_DATASETS = ("transcript", "transcript_json", "acknowledgements", "tracks")
OUTPUT_DATASETS = LARGE_DATASETS + tuple(SMALL_TABLES)


def _sort_value(v: object) -> tuple[bool, object]:
    return (v is None, v if v is not None else 0)


def sort_rows(rows: list[dict[str, Any]], keys: Sequence[str]) -> list[dict[str, Any]]:
    """Rows sorted by ``keys`` (nulls last)."""
    return sorted(rows, key=lambda r: tuple(_sort_value(r.get(k)) for k in keys))


def collect_tables(frames: dict[str, DataFrame], workers: int = 3) -> dict[str, list[dict[str, Any]]]:
    """Every frame's rows as dicts, a few frames at a time.

    Each small query costs the driver far more planning than running; planning
    runs in the calling thread, so two cores plan two at once. (One union of
    them all, one job, planned for tens of seconds on a cold JVM: ten times
    the separate jobs.)
    """
    def rows(df: DataFrame) -> list[dict[str, Any]]:
        return [r.asDict(recursive=True) for r in df.collect()]
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="archive-collect") as pool:
        futures = {name: pool.submit(rows, df) for name, df in frames.items()}
        return {name: future.result() for name, future in futures.items()}


def write_csv(path: Path, rows: list[dict[str, Any]], columns: Sequence[str]) -> None:
    """A CSV file of ``rows`` (lists joined with ``;``)."""
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(columns)
        for row in rows:
            writer.writerow(["" if row.get(c) is None else
                             (";".join(map(str, row[c])) if isinstance(row[c], list) else row[c])
                             for c in columns])


def small_table_writer(spark: SparkSession, out_dir: Path, name: str,
                       rows: list[dict[str, Any]]) -> Callable[[], None]:
    """A task writing one small table as a one-file Parquet dataset (the CSV file is
    written with the report)."""
    columns, schema, _ = SMALL_TABLES[name]

    def write() -> None:
        df = spark.createDataFrame([tuple(r.get(c) for c in columns) for r in rows], schema)
        df.coalesce(1).write.mode("overwrite").parquet(str(out_dir / name))
    return write


class Writers:
    """Output writes running a few at a time beside the driver's other work."""

    def __init__(self, workers: int = 3) -> None:
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="archive-write")
        self._pending: list[Future[None]] = []

    def submit(self, task: Callable[[], None]) -> None:
        self._pending.append(self._pool.submit(task))

    def wait(self) -> None:
        """Wait for every write; raise the first failure."""
        try:
            for future in self._pending:
                future.result()
        finally:
            self._pending.clear()

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
