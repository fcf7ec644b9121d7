"""Every journal line parsed once, shuffled once: the per-message table and the side table.

Theory of operation
-------------------
Parsing JSON is most of the job's cost (about 14 s per 10 million lines on
two cores), so the journals are read exactly once. Every line goes through one
hash shuffle keyed by ``msg_id`` (lines that are not messages share the null
key), and two hash aggregations read that same shuffle output:

* the **message aggregation** groups message records by ``msg_id`` and their
  content (origin, seq, room, user, text, sent_at, order). Every record of a
  message normally carries the same content, so a message is one group; its
  per-site facts are numeric *pivot* columns, one set per mission site (first
  delivery ``n``, its ``at`` and ``late``, record counts, and sums of a line
  hash that tell one, two or more distinct lines apart). Only numeric
  aggregation buffers, so Spark keeps it a hash aggregation: no sort.
* the **side aggregation** groups every line by (file, valid, site, kind), and
  status and missing records by their content as well: per-file counts,
  mission bounds, status events and missing reports, a few thousand rows.

Both hang off one exchange only if the optimizer does not push each branch's
column pruning below it; ``shared_shuffle`` turns the ``ColumnPruning`` rule
off while the query runs (the scan still reads only the selected columns), and
Spark then reuses the exchange (``ReusedExchange``).

What the pivot cannot settle exactly is flagged ``rare`` and rebuilt by the
general path (``transforms.message_table``) from a second, filtered read of
just those messages: three or more distinct lines of one message at one site,
two distinct deliveries with the same ``n``, two distinct send lines, records
that disagree on content or order (several groups for one ``msg_id``).
Records naming a site that is not in the pivot make the caller run again
with the full site list.
"""
from __future__ import annotations

import contextlib
import functools
import operator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Sequence

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from . import transforms as tf
from .journals import JournalFile
from .orderkey import sortable_key_col

CONTENT = ("origin", "seq", "room", "user", "text", "sent_at", "order")
# A message's ``sites`` entries, as ``transforms.message_table`` types them.
SITE_ENTRY = ("struct<site:string,n:bigint,at:double,late:boolean,deliver_records:bigint,"
              "deliver_lines:int,send_records:bigint,send_lines:int>")
# Line hashes are compared through sums of their low 20 bits (sums of squares stay in a long).
_LOW = (1 << 20) - 1


@contextlib.contextmanager
def shared_shuffle(spark: SparkSession) -> Iterator[None]:
    """Let the branches of one query share a single scan and exchange (see module doc)."""
    key = "spark.sql.optimizer.excludedRules"
    before = spark.conf.get(key, "") or ""
    rule = "org.apache.spark.sql.catalyst.optimizer.ColumnPruning"
    spark.conf.set(key, ",".join(r for r in (before, rule) if r))
    try:
        yield
    finally:
        if before:
            spark.conf.set(key, before)
        else:
            spark.conf.unset(key)


def _lookup(index: dict[str, int], column: Column) -> Column:
    """``index[column]`` (null when absent)."""
    if not index:
        return F.lit(None).cast("int")
    return F.try_element_at(F.create_map(*[x for name, i in index.items()
                                           for x in (F.lit(name), F.lit(i))]), column)


def file_index(paths: Sequence[str]) -> Column:
    """Index in ``paths`` of each line's file, from Spark's ``_metadata.file_path``.

    Spark writes a local file as ``file:/x`` there (``file:///x`` elsewhere) and
    percent-encodes what a URI must: every spelling maps to the index.
    """
    index = {}
    for i, path in enumerate(paths):
        uri = Path(path).as_uri()                    # file:///x%20y
        for name in (uri, "file:" + uri[len("file://"):], "file://" + path, "file:" + path):
            index[name] = i
    return _lookup(index, F.col("_metadata.file_path"))


def shuffled_lines(spark: SparkSession, paths: Sequence[str], sites: Sequence[str],
                   partitions: int) -> DataFrame:
    """Every non-blank line, parsed, hash-partitioned by ``msg_key`` (null for non-messages).

    A line carries the index of its file in ``paths`` and of its site in ``sites``.
    """
    parsed = tf.read_journal_records(spark, paths, file=file_index(paths))
    is_message = F.col("valid") & F.col("kind").isin("send", "deliver")
    site_idx = _lookup({site: i for i, site in enumerate(sites)}, F.col("site"))
    low = F.col("line_hash").bitwiseAND(F.lit(_LOW))
    lines = parsed.select(
        "file", "valid", "kind", "site", "at", "n", "late", "line_hash", "peer", "status", "seqs",
        F.when(is_message, F.col("msg_id")).alias("msg_key"),
        F.when(is_message & (F.col("kind") == "deliver"), site_idx).alias("d_site"),
        F.when(is_message & (F.col("kind") == "send"), site_idx).alias("s_site"),
        F.try_add(F.try_multiply(F.col("n"), F.lit(2)), F.col("late").cast("long")).alias("n_late"),
        low.alias("h20"),
        (low * low).alias("h40"),
        *[F.col(c) for c in CONTENT],
    )
    return lines.repartition(partitions, "msg_key")


def _per_site(i: int, site: str) -> tuple[list[Column], Column, Column]:
    """Pivot aggregates for site ``i``, its ``sites`` entry, and its rare flag.

    Ten aggregates a site, each on an integer test and a precomputed input:
    every line updates all of them, so their number is the cost.
    """
    deliver = F.col("d_site") == i
    send = F.col("s_site") == i
    p = f"s{i}_"
    aggs = [
        # Deliver records in the low 32 bits, send records above.
        F.sum(F.when(deliver, F.lit(1)).when(send, F.lit(1 << 32))).alias(p + "count"),
        F.min(F.when(deliver, F.col("n_late"))).alias(p + "n_late"),
        F.max(F.when(deliver, F.col("n"))).alias(p + "nmax"),
        F.min_by(F.when(deliver, F.col("at")), F.when(deliver, F.col("n"))).alias(p + "at"),
        F.min(F.when(deliver, F.col("line_hash"))).alias(p + "hmin"),
        F.max(F.when(deliver, F.col("line_hash"))).alias(p + "hmax"),
        F.sum(F.when(deliver, F.col("h20"))).alias(p + "s1"),
        F.sum(F.when(deliver, F.col("h40"))).alias(p + "s2"),
        F.min(F.when(send, F.col("line_hash"))).alias(p + "shmin"),
        F.max(F.when(send, F.col("line_hash"))).alias(p + "shmax"),
    ]
    c = lambda name: F.col(p + name)  # noqa: E731
    dc = F.coalesce(c("count"), F.lit(0)).bitwiseAND(F.lit((1 << 32) - 1))
    sc = F.shiftright(F.coalesce(c("count"), F.lit(0)), 32)
    n = F.shiftright(c("n_late"), 1)
    # Deliver lines: one when every hash is equal; two when the counts solve
    # x*a + (dc-x)*b = s1 and x*a^2 + (dc-x)*b^2 = s2 for a whole x in [1, dc-1].
    a, b = c("hmin").bitwiseAND(F.lit(_LOW)), c("hmax").bitwiseAND(F.lit(_LOW))
    x = F.try_divide(c("s1") - dc * b, a - b)
    xl = x.cast("long")
    two = ((a != b) & (x == F.floor(x)) & (x >= 1) & (x <= dc - 1)
           & (c("s2") == xl * a * a + (dc - xl) * b * b))
    one = c("hmin") == c("hmax")
    lines = F.when(dc == 0, 0).when(one, 1).when(two, 2)
    # Two lines with one n: which came first is not known here.
    # (An ``n`` too large to pack with ``late`` leaves ``n_late`` null: also rare.)
    rare = ((dc > 0) & (c("n_late").isNull() | (~one & (~two | (n == c("nmax"))))))\
        | ((sc > 0) & (c("shmin") != c("shmax")))
    entry = F.struct(
        F.lit(site).alias("site"),
        n.alias("n"),
        c("at").alias("at"),
        (c("n_late").bitwiseAND(F.lit(1)) == 1).alias("late"),
        dc.alias("deliver_records"),
        lines.cast("long").alias("deliver_lines"),
        sc.alias("send_records"),
        F.when(sc > 0, 1).otherwise(0).cast("long").alias("send_lines"),
    )
    return aggs, entry, F.coalesce(rare, F.lit(False))


def message_rows(lines: DataFrame, sites: Sequence[str]) -> DataFrame:
    """One row per (msg_id, content) group: the ``message_table`` columns plus ``rare``.

    ``sites`` are the pivot's sites (sorted); records naming another site are
    left out (``read_mission`` runs again with them in the pivot).
    """
    is_message = F.col("msg_key").isNotNull()
    aggs: list[Column] = []
    entries: list[Column] = []
    rares: list[Column] = []
    for i, site in enumerate(sites):
        a, entry, rare = _per_site(i, site)
        aggs += a
        entries.append(entry)
        rares.append(rare)
    grouped = lines.groupBy("msg_key", *[F.when(is_message, F.col(c)).alias(c) for c in CONTENT]).agg(
        F.count(F.when(F.col("kind") == "send", 1)).alias("send_records"),
        *aggs,
    )
    present = F.filter(F.array(*entries), lambda e: e.deliver_records + e.send_records > 0) \
        if entries else F.array().cast(f"array<{SITE_ENTRY}>")
    return grouped.select(
        F.col("msg_key").alias("msg_id"),
        (F.col("send_records") > 0).alias("has_send"),
        "origin", "seq", "room", "user", "text", "sent_at",
        sortable_key_col(F.col("order")).alias("order_key"),
        "order",
        present.alias("sites"),
        functools.reduce(operator.or_, rares, F.lit(False)).alias("rare"),
    )


def side_rows(lines: DataFrame) -> DataFrame:
    """Per (file, valid, site, kind): line count and ``at`` bounds; status and missing records
    keep their content in the key (one row per distinct line per file)."""
    valid = F.col("valid")
    is_status = valid & (F.col("kind") == "status")
    is_missing = valid & (F.col("kind") == "missing")
    keep = is_status | is_missing
    return lines.groupBy(
        "file", "valid",
        F.when(valid, F.col("site")).alias("site"),
        F.when(valid, F.col("kind")).alias("kind"),
        F.when(is_status, F.col("peer")).alias("peer"),
        F.when(is_status, F.col("status")).alias("status"),
        F.when(keep, F.col("at")).alias("event_at"),
        F.when(keep, F.col("line_hash")).alias("line_hash"),
        F.when(is_missing, F.col("origin")).alias("origin"),
        F.when(is_missing, F.col("seqs")).alias("seqs"),
    ).agg(
        F.count(F.lit(1)).alias("count"),
        F.min(F.when(valid, F.col("at"))).alias("first_at"),
        F.max(F.when(valid, F.col("at"))).alias("last_at"),
    )


def one_pass(lines: DataFrame, sites: Sequence[str]) -> DataFrame:
    """Message rows (``part`` = "m") and side rows (``part`` = "s") of one shuffle, in one frame."""
    messages = message_rows(lines, sites).withColumn("part", F.lit("m"))
    side = side_rows(lines).withColumn("part", F.lit("s"))
    # Side columns get a prefix so they never meet a message column of another type.
    side = side.select("part", *[F.col(c).alias(f"side_{c}") for c in side.columns if c != "part"])
    return messages.unionByName(side, allowMissingColumns=True)


MESSAGE_COLUMNS = ("msg_id", "has_send", "origin", "seq", "room", "user", "text", "sent_at",
                   "order_key", "order", "sites")


@dataclass
class Mission:
    """What the one pass read: messages (``message_table`` rows) and the small side tables."""

    messages: DataFrame
    missing: DataFrame       # msg_id, origin, seq, reported_by (as ``missing_reports``)
    status: DataFrame        # site, peer, at, status: status events, exact duplicates removed
    scan: list[dict]         # side rows, file by path: (file, valid, site, kind, count, first_at, ...)
    sites: list[str]         # every site named by a path or a usable record, sorted
    status_duplicates: int
    rare_messages: int       # rebuilt by the general path
    passes: int              # 2 when records named sites missing from the first pivot
    _cached: list[DataFrame] = field(default_factory=list)

    def unpersist(self) -> None:
        for df in self._cached:
            df.unpersist()


def read_mission(spark: SparkSession, files: Sequence[JournalFile], *,
                 partitions: int | None = None, isin_limit: int = 10_000) -> Mission:
    """Read every journal once (see the module doc) and settle the rare messages.

    Rare messages are re-read with ``msg_id IN (...)`` pushed into the JSON
    reader when there are at most ``isin_limit`` of them, with a join otherwise.
    """
    level = StorageLevel.MEMORY_AND_DISK
    paths = [f.path for f in files]
    partitions = partitions or int(spark.conf.get("spark.sql.shuffle.partitions"))
    pivot = sorted({f.path_site for f in files if f.path_site})
    passes = 0
    while True:
        passes += 1
        with shared_shuffle(spark):
            both = one_pass(shuffled_lines(spark, paths, pivot, partitions), pivot).persist(level)
            both.count()
        side = [r.asDict() for r in both.where(F.col("part") == "s")
                .select(*[c for c in both.columns if c.startswith("side_")]).collect()]
        side = [{k[len("side_"):]: v for k, v in r.items()} for r in side]
        message_sites = {r["site"] for r in side if r["valid"] and r["kind"] in ("send", "deliver")}
        if message_sites <= set(pivot):
            break
        both.unpersist()
        pivot = sorted(set(pivot) | message_sites)
    record_sites = {r["site"] for r in side if r["valid"]}
    sites = sorted({f.path_site for f in files if f.path_site} | record_sites)

    groups = both.where((F.col("part") == "m") & F.col("msg_id").isNotNull())
    flagged = (groups.groupBy("msg_id")
               .agg(F.count(F.lit(1)).alias("groups"), F.max("rare").alias("rare"))
               .where((F.col("groups") > 1) | F.col("rare")).select("msg_id"))
    named = [r["msg_id"] for r in flagged.limit(isin_limit + 1).collect()]
    typed = groups.select(*[F.col(c) for c in MESSAGE_COLUMNS if c != "sites"],
                          F.col("sites").cast(f"array<{SITE_ENTRY}>").alias("sites"))
    cached = [both]
    rare = len(named) if len(named) <= isin_limit else flagged.count()
    if named:
        records = tf.read_journal_records(spark, paths)
        if len(named) <= isin_limit:
            records = records.where(F.col("msg_id").isin(named))
        else:
            records = records.join(flagged, "msg_id", "left_semi")
        records = records.persist(level)
        general = tf.message_table(records).persist(level)
        cached += [records, general]
        if general.where("orders_differ").limit(1).count():
            general = tf.resolve_order_keys(general, records)
        general = general.select(*MESSAGE_COLUMNS)
        messages = typed.join(flagged, "msg_id", "left_anti").unionByName(general)
    else:
        messages = typed
    missing, status, duplicates = _side_tables(spark, side)
    scan = _scan_rows(side, paths)
    return Mission(messages, missing, status, scan, sites, duplicates, rare, passes, cached)


def _side_tables(spark: SparkSession, side: list[dict]) -> tuple[DataFrame, DataFrame, int]:
    """(missing reports, status events, duplicate status lines) from the side rows."""
    reporters: dict[tuple[str, int], set[str]] = {}
    events: dict[tuple[str, int], tuple] = {}
    status_lines = 0
    for r in side:
        if not r["valid"]:
            continue
        if r["kind"] == "missing":
            for seq in r["seqs"] or ():
                if seq is not None:
                    reporters.setdefault((r["origin"], seq), set()).add(r["site"])
        elif r["kind"] == "status":
            status_lines += r["count"]
            events.setdefault((r["site"], r["line_hash"]),
                              (r["site"], r["peer"], r["event_at"], r["status"]))
    missing = spark.createDataFrame(
        [(f"{origin}:{seq}", origin, seq, sorted(by)) for (origin, seq), by in sorted(reporters.items())],
        "msg_id string, origin string, seq long, reported_by array<string>")
    status = spark.createDataFrame(sorted(events.values()),
                                   "site string, peer string, at double, status string")
    return missing, status, status_lines - len(events)


def _scan_rows(side: list[dict], paths: Sequence[str]) -> list[dict]:
    """The side rows for ``job._scan_tables`` (which sums them per file), the file by path."""
    return [{**r, "file": paths[r["file"]] if r["file"] is not None else "(unknown file)"}
            for r in side]
