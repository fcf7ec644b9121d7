"""The archive job: read every site's journal, run the transforms, write the outputs.

``run_archive`` takes a live SparkSession and explicit paths, so tests drive it
with their session-scoped local session and the CLI with a session built from
``--master`` (``session.build_session``). The job runs few Spark jobs whatever
the input: one pass over the journals (``onepass.read_mission``), the
transcript's numbering, one job gathering every small table to the driver
(``outputs.collect_tables``), and the writes, a few at a time. The transcript
is never collected, except the capped slice shown in the HTML report; the
tracks (``track_frames``) come to the driver a partition at a time, for
``tracks.csv`` and the report's plot.
"""
from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from contracts.precedence import Precedence

from . import analysis as an
from . import labels, track_frames
from . import transforms as tf
from .journals import JournalFile, list_journal_files
from .missing import lost_table
from .onepass import ScannedMission, read_mission
from .outputs import (
    ACK_COLUMNS,
    OUTPUT_DATASETS,
    SMALL_TABLES,
    TRANSCRIPT_COLUMNS,
    Writers,
    collect_tables,
    small_table_writer,
    sort_rows,
    write_csv,
)
from .scan_tables import scan_tables
from .session import LOCAL_CONF, build_session, choose_plan, materialize, release  # noqa: F401  (the CLI's and tests' entry)
from .tracks import TRACK_COLUMNS, TRACK_SCHEMA, summary_section, write_tracks_csv

log = logging.getLogger("spark_archive")


@dataclass
class Progress:
    """Timed steps, logged as they finish (``on_step`` lets a CLI show a progress bar)."""

    steps: list[tuple[str, float]] = field(default_factory=list)
    on_step: Any = None

    def step(self, name: str) -> _Step:
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


from .local_tables import bucket_seconds as _bucket_seconds  # noqa: E402  (one definition)

# Up to this many messages the keys (about 50 bytes each) are broadcast to the join.
BROADCAST_KEYS = 4_000_000
# Up to this many position reports the tracks are collected in one job (about 100 MB of rows at most).
TRACKS_COLLECTED = 200_000


@dataclass
class Transcript:
    """The numbered keys and the positioned transcript (``build_transcript``)."""

    numbered: DataFrame      # msg_id, room, order_key, chat, gidx: chat and control messages
    keys: DataFrame          # msg_id, gidx, position, room_position: chat messages
    positioned: DataFrame    # transcript rows with gidx, position and room_position

    def unpersist(self) -> None:
        for df in (self.numbered, self.keys, self.positioned):
            release(df)


def build_transcript(spark: SparkSession, messages: DataFrame, missing: tf.ReportedPieces,
                     control_keys: DataFrame | None = None, *, persist: bool = True) -> Transcript:
    """The transcript in global order.

    ``messages`` have the ``transforms.MESSAGE_COLUMNS``, ``missing`` are the
    missing reports (pieces of seq ranges), ``control_keys`` (``msg_id``, ``order_key``) the control
    messages, numbered with the chat messages so that ordering checks see them.
    Only the keys are sorted: ``numbered`` holds ``gidx`` in global order and
    is materialized (``session.materialize``), since ``gidx`` must not be
    recomputed; chat messages take a dense ``position`` from it and a
    ``room_position`` from a window over these narrow keys (``keys``). The
    transcript rows then take both by a broadcast join (a sort-merge join beyond
    ``BROADCAST_KEYS`` messages) and are hash-partitioned by room and sorted by
    position (``transforms.room_ordered``), so each room is written as one file in order.
    ``positioned`` is materialized when ``persist`` is set.
    """
    chat_keys = messages.select("msg_id", "room", "order_key", F.lit(True).alias("chat"))
    if control_keys is not None:
        chat_keys = chat_keys.unionByName(control_keys.select(
            "msg_id", F.lit(None).cast("string").alias("room"), "order_key", F.lit(False).alias("chat")))
    numbered = materialize(tf.number_transcript(chat_keys))
    chat = tf.chat_index(numbered)
    offsets = tf.partition_offsets(chat).collect()
    offsets_df = spark.createDataFrame([(r["part"], r["offset"]) for r in offsets],
                                       "part long, offset long")
    # The room window runs on the narrow keys (a shuffle of 1.1M rows of four columns),
    # not on the joined transcript rows (measured at 10M records: the window over
    # whole rows cost 3 CPU-s more than a plain hash partitioning and sort of them).
    keys = materialize(tf.room_positions(
        tf.add_positions(chat, offsets_df).select("msg_id", "room", "gidx", "position")).drop("room"))
    count = keys.count()
    rows = tf.transcript(messages, missing)
    joined = rows.join(F.broadcast(keys) if count <= BROADCAST_KEYS else keys, "msg_id")
    # Each room's rows in one partition, in position order: the order each room's file is written in.
    positioned = tf.room_ordered(joined)
    if persist:
        positioned = materialize(positioned)
    return Transcript(numbered, keys, positioned)


def totals_frame(positioned: DataFrame) -> DataFrame:
    """One row: the transcript's counts, messages per precedence level among them."""
    return positioned.agg(
        F.count(F.lit(1)).alias("messages"),
        F.coalesce(F.sum(F.size("deliveries")), F.lit(0)).alias("deliveries"),
        F.coalesce(F.sum(F.size("late_sites")), F.lit(0)).alias("late_deliveries"),
        F.coalesce(F.sum(F.size("never_arrived")), F.lit(0)).alias("never_arrived"),
        F.coalesce(F.sum("duplicate_lines"), F.lit(0)).alias("duplicate_lines"),
        F.coalesce(F.sum("redeliveries"), F.lit(0)).alias("redeliveries"),
        F.count(F.when(F.col("order_key").isNull(), 1)).alias("messages_without_order"),
        *[F.count(F.when(F.col("prec") == level.code, 1)).alias(f"precedence_{level.value}") for level in Precedence],
    )


def analysis_frames(spark: SparkSession, mission: ScannedMission, transcript: Transcript, start: float,
                    end: float, report_rows: int, *, acknowledgements: bool = True
                    ) -> tuple[dict[str, DataFrame], list[DataFrame], DataFrame | None]:
    """Every small table of the archive but the totals as a Spark frame, and the frames they
    share that were persisted (to unpersist once the tables are collected and written). Without
    ``acknowledgements`` (no flash or immediate message, no acknowledge record) the
    acknowledgement tables are left out: their scans would find nothing. With them, the
    per-message acknowledgement table is computed once for its two small tables and the
    dataset (the third value; None without them)."""
    positioned, sites = transcript.positioned, mission.sites
    chat = an.site_deliveries(positioned)
    ordered = chat.select(*an.ORDERED).unionByName(
        an.control_deliveries(mission.control, transcript.numbered).select(*an.ORDERED))
    per_site = an.divergence(ordered, an.site_line_counts(mission.messages), sites) \
        .join(an.never_arrived_counts(positioned, sites), "site")
    # Four latency tables read the histogram: computed once (it is small).
    hist = an.latency_histogram(chat, start, _bucket_seconds(end - start)).persist(StorageLevel.MEMORY_AND_DISK)
    status = mission.status
    intervals = an.connectivity_intervals(status, an.all_pairs(status, sites), start, end)
    frames = {
        "divergence": per_site,
        "latency_pairs": an.latency_by_pair(hist),
        "latency_over_time": an.latency_over_time(hist),
        "latency_precedence": an.latency_by_precedence(hist),
        "latency_route": an.latency_by_route(hist),
        "repairs": an.repairs(positioned, mission.missing),
        "connectivity": intervals,
        "availability": an.availability(intervals),
        "rooms": positioned.groupBy("room").count(),
        "shown": positioned.where(F.col("room_position") < report_rows)
        .select(*[c for c in TRANSCRIPT_COLUMNS if c != "order_key"]),
    }
    if mission.missing.pieces:
        # Gathered for ``missing.lost_table`` (``_spark_plan``): never a row per reported seq.
        frames["lost_runs"], frames["lost_seen"] = an.lost_frames(positioned, mission.missing)
    cached = [hist]
    acks = None
    if acknowledgements:
        acks = an.acknowledgements(positioned, mission.acks).persist(StorageLevel.MEMORY_AND_DISK)
        cached.append(acks)
        urgent = positioned.where(F.col("prec").isin(*tf.URGENT_CODES)).select("msg_id")
        frames.update({
            "acknowledgement_levels": an.acknowledgement_levels(acks),
            "acknowledgements_shown": acks.where(F.col("position") < report_rows),
            "acknowledgements_other": mission.acks.join(urgent, "msg_id", "left_anti")
            .agg(F.count(F.lit(1)).alias("count")),
        })
    return frames, cached, acks


SessionSource = SparkSession | Callable[[], SparkSession]


@dataclass
class _Result:
    """What either plan hands to the writing and the summary."""

    plan: str
    sites: list[str]
    file_table: list[dict[str, Any]]
    site_counts: list[dict[str, Any]]
    bounds: tuple[float | None, float | None]  # (mission start, end)
    tables: dict[str, Any]  # mostly rows (list[dict]); also transcript tuples, track_points: unit -> points
    facts: dict[str, Any]   # plan-specific summary entries


def run_archive(spark: SessionSource, journals: str | os.PathLike[str], out: str | os.PathLike[str],
                *, report_rows: int = 200, persist: bool = True, plan: str = "auto",
                progress: Progress | None = None) -> dict[str, Any]:
    """Run the whole archive job; return the summary (also written to ``summary.json``).

    ``plan``: ``spark`` computes everything with Spark; ``driver`` computes in this
    process (``reference``, ``local_tables``) and uses Spark only to write the
    datasets, for small missions; ``auto`` picks by size and master
    (``session.choose_plan``). ``spark`` may be a callable giving the session
    when first needed: the driver plan computes while the JVM starts.
    """
    progress = progress or Progress()
    t_start = time.perf_counter()
    files = list_journal_files(journals)
    out_dir = Path(out).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    session: Callable[[], SparkSession] = spark if callable(spark) else (lambda: spark)  # type: ignore[assignment,return-value]
    if plan == "auto":
        plan = choose_plan(session().sparkContext.master or "", sum(f.size for f in files))
    if plan not in ("spark", "driver"):
        raise ValueError(f"unknown plan {plan!r}")
    writers = Writers()
    try:
        if plan == "driver":
            # Everything but the Parquet and JSON datasets is written before Spark is needed (but for a labeled
            # mission's label tables: the leak check is Spark's, labels.py).
            result = _driver_plan(files, report_rows, progress)
            started = labels.labeled(result.site_counts)
            if started:
                with progress.step("start Spark"):
                    spark = session()
                with progress.step("labels"):
                    result.tables.update(labels.label_tables(spark, [f.path for f in files]))
            else:
                result.tables.update(labels.unlabeled_tables(result.tables["totals"][0]))
            summary = _report(journals, out_dir, files, result, report_rows, progress)
            if not started:
                with progress.step("start Spark"):
                    spark = session()
            with progress.step("write datasets"):
                # (spark is session()'s SparkSession here: both branches above assigned it)
                _write_driver_datasets(cast(SparkSession, spark), result, out_dir, writers)
                _write_small_tables(cast(SparkSession, spark), result.tables, out_dir, writers)
        else:
            result = _spark_plan(session(), files, out_dir, report_rows, persist, writers, progress)
            with progress.step("write tables"):
                _write_small_tables(session(), result.tables, out_dir, writers)
            summary = _report(journals, out_dir, files, result, report_rows, progress)
    finally:
        writers.close()
    summary["seconds"] = round(time.perf_counter() - t_start, 3)
    summary["steps"] = {name: round(took, 3) for name, took in progress.steps}
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    return summary


def _write_small_tables(spark: SparkSession, tables: dict[str, Any], out_dir: Path,
                        writers: Writers) -> None:
    for name in SMALL_TABLES:
        writers.submit(small_table_writer(spark, out_dir, name, tables[name]))
    writers.wait()


def _report(journals: str | os.PathLike[str], out_dir: Path, files: Sequence[JournalFile],
            result: _Result, report_rows: int, progress: Progress) -> dict[str, Any]:
    """The summary (returned), the CSV files and ``report.html``."""
    with progress.step("report"):
        summary = _summary(journals, out_dir, files, result)
        for name, (columns, _, _) in SMALL_TABLES.items():
            write_csv(out_dir / f"{name}.csv", result.tables[name], columns)
        if "track_points" not in result.tables:     # the driver plan's tracks (the Spark plan streamed its own)
            result.tables["track_points"] = write_tracks_csv(out_dir / "tracks.csv", result.tables["tracks"])
        from .report import write_report
        shown = sort_rows(result.tables["shown"], ("room", "room_position"))
        write_report(out_dir / "report.html", summary, shown, report_rows, result.tables)
    return summary


def _spark_plan(spark: SparkSession, files: Sequence[JournalFile], out_dir: Path, report_rows: int,
                persist: bool, writers: Writers, progress: Progress) -> _Result:
    with progress.step("scan journals"):
        mission = read_mission(spark, files)   # every line parsed once; see onepass.py
    file_table, site_counts, bounds = scan_tables(files, mission.scan)
    start, end = bounds[0] or 0.0, bounds[1] or 0.0
    with progress.step("transcript"):
        transcript = build_transcript(spark, mission.messages, mission.missing,
                                      mission.control_keys, persist=persist)
    positioned = transcript.positioned
    _write_transcript(writers, positioned.select(*TRANSCRIPT_COLUMNS), out_dir)
    with progress.step("tables"):
        totals = totals_frame(positioned).collect()[0].asDict()
        levels = {level: totals.pop(f"precedence_{level.value}") for level in Precedence}
        urgent = sum(n for level, n in levels.items() if level.urgent)
        with_acks = urgent > 0 or sum(r["acknowledge_records"] for r in site_counts) > 0
        frames, cached, per_message = analysis_frames(spark, mission, transcript, start, end, report_rows,
                                                      acknowledgements=with_acks)
        acks = per_message.select(*ACK_COLUMNS) if per_message is not None \
            else spark.createDataFrame([], ACK_SCHEMA)
        writers.submit(lambda: acks.write.mode("overwrite").parquet(str(out_dir / "acknowledgements")))
        tracks = track_frames.position_frames(mission.positions, mission.sites, frames, cached)
        written = tracks if tracks is not None else spark.createDataFrame([], TRACK_SCHEMA)
        writers.submit(lambda: written.write.mode("overwrite").parquet(str(out_dir / "tracks")))
        tables: dict[str, Any] = {"position_age": [], "position_totals": [{}], **collect_tables(frames)}
        # In track order: tracks.csv and the plot's points. One job gathers up to TRACKS_COLLECTED rows;
        # past that they are streamed a partition at a time (a job each: seconds on a cluster).
        reports = tables["position_totals"][0].get("reports") or 0
        rows = () if tracks is None else tracks.collect() if reports <= TRACKS_COLLECTED else tracks.toLocalIterator()
        tables["track_points"] = write_tracks_csv(out_dir / "tracks.csv", (r.asDict() for r in rows))
        tables["lost_messages"], lost = lost_table(
            mission.missing.pieces,
            {(r["origin"], r["lo"]): (r["seen"], r["top"]) for r in tables.pop("lost_seen", [])},
            [(r["origin"], r["lo"], r["first"], r["last"]) for r in tables.pop("lost_runs", [])])
        tables["lost_total"] = [{"count": lost}]
        tables["totals"] = [totals]
        tables.update(labels.label_tables(spark, [f.path for f in files]) if labels.labeled(site_counts)
                      else labels.unlabeled_tables(totals))
        # "prec": the level's code (contracts.precedence): sorted by it, the levels come highest first.
        tables["precedence"] = [{"precedence": level.value, "messages": n, "prec": level.code}
                                for level, n in levels.items() if n]
        if not with_acks:
            tables.update({"acknowledgement_levels": [], "acknowledgements_shown": [],
                           "acknowledgements_other": [{"count": 0}]})
        tables["files"] = file_table
        for name, (_, _, order) in SMALL_TABLES.items():
            tables[name] = sort_rows(tables[name], order)
        # The writes read the cached frames: wait for them before dropping the cache.
        writers.wait()
        for df in cached:
            release(df)
    transcript.unpersist()
    mission.unpersist()
    return _Result("spark", mission.sites, file_table, site_counts, bounds, tables, {
        "duplicate_status_lines": int(mission.status_duplicates),
        # Messages the one pass could not settle alone, and journal reads (see onepass.py).
        "rare_messages": mission.rare_messages,
        "scan_passes": mission.passes,
    })


def _write_transcript(writers: Writers, transcript_out: DataFrame, out_dir: Path) -> None:
    """The transcript as Parquet and as one JSON Lines file per room, in transcript order."""
    writers.submit(lambda: transcript_out.write.mode("overwrite").parquet(str(out_dir / "transcript")))
    writers.submit(lambda: (
        transcript_out.drop("order_key")
        .withColumn("sent_utc", F.date_format(F.timestamp_seconds("sent_at"), "yyyy-MM-dd HH:mm:ss.SSS"))
        .write.mode("overwrite").partitionBy("room").json(str(out_dir / "transcript_json"))))


TRANSCRIPT_SCHEMA = (
    "position long, room string, room_position int, msg_id string, origin string, seq long, "
    "user string, text string, sent_at double, order array<string>, order_key binary, "
    f"deliveries array<{tf.DELIVERY}>, late_sites array<string>, never_arrived array<string>, "
    "reported_missing_at array<string>, precedence string")
ACK_SCHEMA = ("msg_id string, position long, origin string, room string, precedence string, "
              "sent_at double, acknowledgements long, first_seconds double, last_seconds double, "
              "acknowledged_by array<string>")


def _driver_plan(files: Sequence[JournalFile], report_rows: int, progress: Progress) -> _Result:
    """Every table computed in this process (``reference``, ``local_tables``)."""
    from . import local_tables as lt
    from . import local_tracks as lk
    from .reference import build_transcript as local_transcript
    from .reference import read_journals

    with progress.step("scan journals"):
        journals = read_journals(files)
    with progress.step("transcript"):
        transcript = local_transcript(journals)
    with progress.step("tables"):
        tables = lt.all_tables(journals, transcript, report_rows)
        tables.update(lk.position_tables(journals.positions, journals.sites,
                                      {s: c["position_records"] for s, c in journals.site_counts.items()}))
        tables["files"] = journals.files
        tables["transcript"] = transcript.rows
        delivery = ("site", "n", "at", "late", "repaired", "hops")
        tables["shown"] = [
            {**dict(zip(TRANSCRIPT_COLUMNS, row)),
             "deliveries": [dict(zip(delivery, d)) for d in row[11]]}
            for row in transcript.rows if row[2] < report_rows]
        for name, (_, _, order) in SMALL_TABLES.items():
            if name in tables:      # (the label tables come from Spark: labels.py)
                tables[name] = sort_rows(tables[name], order)
    site_counts = sorted(journals.site_counts.values(), key=lambda r: r["site"])
    return _Result("driver", journals.sites, journals.files, site_counts, (journals.start, journals.end),
                   tables, {"duplicate_status_lines": journals.status_lines - len(journals.status),
                            "rare_messages": 0, "scan_passes": 1})


def _write_driver_datasets(spark: SparkSession, result: _Result, out_dir: Path, writers: Writers) -> None:
    """The transcript and acknowledgements of the driver plan, written by Spark."""
    tables = result.tables
    ordered = sorted(tables["transcript"], key=lambda r: (r[1] is None, r[1] or "", r[0]))
    rows = spark.createDataFrame(ordered, TRANSCRIPT_SCHEMA).coalesce(1) \
        .sortWithinPartitions("room", "position")   # the order each room's file is written in
    _write_transcript(writers, rows, out_dir)
    acks = [tuple(r[c] for c in ACK_COLUMNS) for r in tables["acknowledgements"]]
    writers.submit(lambda: spark.createDataFrame(acks, ACK_SCHEMA).coalesce(1).write
                   .mode("overwrite").parquet(str(out_dir / "acknowledgements")))
    tracks = [tuple(r[c] for c in TRACK_COLUMNS) for r in tables["tracks"]]
    writers.submit(lambda: spark.createDataFrame(tracks, TRACK_SCHEMA).coalesce(1).write
                   .mode("overwrite").parquet(str(out_dir / "tracks")))


def _summary(journals: str | os.PathLike[str], out_dir: Path, files: Sequence[JournalFile],
             result: _Result) -> dict[str, Any]:
    sites, tables, file_table, site_counts = result.sites, result.tables, result.file_table, result.site_counts
    per_site, bounds = tables["divergence"], result.bounds
    totals = tables["totals"][0]
    pairs = tables["latency_pairs"]
    remote = sum(r["deliveries"] for r in pairs if r["origin"] != r["destination"])
    relayed = sum(r["relayed"] or 0 for r in pairs)
    control_lines = sum(r["control_records"] for r in site_counts)
    return {
        "journals": str(Path(journals).resolve()),
        "out": str(out_dir),
        "sites": sites,
        "mission_start": bounds[0],
        "mission_end": bounds[1],
        "files": len(files),
        "lines": sum(f["lines"] for f in file_table),
        "records": sum(f["records"] for f in file_table),
        "bad_lines": sum(f["bad_lines"] for f in file_table),
        "files_with_bad_lines": sum(1 for f in file_table if f["bad_lines"]),
        "empty_files": sum(1 for f in file_table if f["lines"] == 0),
        **{k: int(v) for k, v in totals.items()},
        "resends": int(sum(r["resends"] for r in per_site)),
        # Reported missing, in no journal: every one counted, the first LOST_LISTED listed.
        "missing_reported_unseen": tables["lost_total"][0]["count"],
        "plan": result.plan,
        **result.facts,
        "rooms": dict(sorted((str(r["room"]), r["count"]) for r in tables["rooms"])),
        "sites_without_records": [s for s in sites if not any(r["site"] == s for r in site_counts)],
        "sites_never_connected": [s for s in sites if not any(
            r["connected_seconds"] > 0 for r in tables["availability"] if s in (r["site"], r["peer"]))],
        # Contract 3 extensions.
        "control_deliveries": sum(r["control_deliveries"] for r in per_site),
        "control_late": sum(r["control_late"] for r in per_site),
        "control_duplicate_lines": control_lines - sum(r["control_deliveries"] for r in per_site),
        "late_unexplained": sum(r["late_unexplained"] for r in per_site),
        "late_unflagged": sum(r["late_unflagged"] for r in per_site),
        "repaired_deliveries": sum(r["repaired"] for r in per_site),
        "remote_deliveries": remote,
        "relayed_deliveries": relayed,
        "relayed_share": relayed / remote if remote else 0.0,
        "precedence": {r["precedence"]: r["messages"] for r in sort_rows(tables["precedence"], ("prec",))},
        "acknowledge_records": sum(r["acknowledge_records"] for r in site_counts),
        "acknowledgement_levels": sort_rows(tables["acknowledgement_levels"], ("precedence",)),
        "acknowledgements_other": tables["acknowledgements_other"][0]["count"],
        # Second round: position reports (tracks.py).
        "positions": summary_section(tables["position_age"], tables["position_totals"][0]),
        # Second round: security labels, traffic per label and the leak check (labels.py).
        **labels.summary_section(tables),
        "outputs": {name: str(out_dir / name) for name in OUTPUT_DATASETS},
        "report": str(out_dir / "report.html"),
        "per_site": per_site,
    }
