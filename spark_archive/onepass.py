"""Every journal line parsed once, shuffled once: the per-message table and the side table.

Theory of operation
-------------------
Parsing JSON is most of the job's cost (about 14 s per 10 million lines on
two cores), so the journals are read exactly once. Every line goes through one
hash shuffle keyed by ``msg_id`` (position lines by their unit, other lines
that are not messages share the null key), and two hash aggregations read that
same shuffle output:

* the **message aggregation**, in two levels on the same partitions: level 1
  per (``msg_id``, content, site), content being origin, seq, room, user,
  text, sent_at and order, which every record of a message normally shares
  (record counts, first delivery ``n`` with ``late``, its ``at``, and sums of
  a line hash that tell one, two or more distinct lines apart); level 2 per
  (``msg_id``, content), so a message is one group, with three numeric
  *pivot* columns per mission site. Only numeric aggregation buffers, so
  Spark keeps both hash aggregations: no sort. ``pivot_messages`` turns the
  pivot columns into the transcript's arrays with compiled ``concat``.
* the **side aggregation** groups every line by (file, valid, site, kind), and
  status, missing and position records by their content as well: per-file
  counts, mission bounds, status events and missing reports, a few thousand
  rows (a missing report's seq ranges stay ranges: ``missing.py``), and a row
  per position report and site (``track_frames``; counted, never collected).

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
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from contracts.journal import missing_ranges

from . import track_frames
from . import transforms as tf
from .filekeys import FileKeys, lookup
from .journals import JournalFile
from .missing import Report, build_pieces
from .orderkey import sortable_key_col
from .session import materialize, release

CONTENT = ("origin", "seq", "room", "user", "text", "sent_at", "prec", "order")
# The shuffle key of a position line: this prefix and its unit (no msg_id starts with a NUL).
POSITION_KEY = "\u0000position\u0000"
# Line hashes are compared through sums of their low 20 bits (sums of squares stay in a long).
_LOW = (1 << 20) - 1
# A delivery's facts packed into one long under its ``n``, so that ``min`` keeps them
# with the smallest ``n``: relay hops (4 bits, at most 15), repaired, late.
FLAG_BITS = 6
MAX_HOPS = 15


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


def shuffled_lines(spark: SparkSession, paths: Sequence[str], sites: Sequence[str],
                   partitions: int, files: FileKeys | None = None) -> DataFrame:
    """Every non-blank line, parsed, hash-partitioned by ``msg_key`` (null for non-messages).

    A line carries its file as ``files.column`` (default: ``FileKeys.hashed()``) and the
    index of its site in ``sites``.
    """
    files = files or FileKeys.hashed()
    parsed = tf.read_journal_records(spark, paths, file=files.column)
    # Control and acknowledge records are keyed by message too: the side
    # aggregation takes them, spread over every partition.
    keyed = F.col("valid") & F.col("kind").isin("send", "deliver", "control", "acknowledge")
    # Position lines are keyed by their unit (track_frames.py): spread over the partitions, and
    # a group of their own in the message aggregation, which drops it.
    # (Not ``valid &``: that made the message aggregation's keys too large for the optimizer, which then ran
    # out of memory; an unusable line keyed by its unit is harmless.)
    position = F.col("kind") == "position"
    site_idx = lookup({site: i for i, site in enumerate(sites)}, F.col("site"))
    flags = (F.least(F.col("hops"), F.lit(MAX_HOPS)).cast("long") * 4
             + F.col("repaired").cast("long") * 2 + F.col("late").cast("long"))
    lines = parsed.select(
        "file", "valid", "kind", "site", "at", "n", "late", "line_hash", "peer", "status", "seqs", "ranges",
        "unit", "lat", "lon", "alt",
        F.when(keyed, F.col("msg_id")).when(position, F.concat(F.lit(POSITION_KEY), F.col("unit")))
        .alias("msg_key"),
        F.when(keyed, site_idx).alias("s"),
        F.try_add(F.try_multiply(F.col("n"), F.lit(1 << FLAG_BITS)), flags).alias("n_late"),
        *[F.col(c) for c in CONTENT],
    )
    return lines.repartition(partitions, "msg_key")


def _site_facts(lines: DataFrame) -> DataFrame:
    """Level 1: one row per (message, content, site) with the site's facts about the message.

    ``nl`` is the first delivery's ``n`` packed with its flags (``FLAG_BITS``), ``at``
    its time, ``dups`` the exact duplicate lines, ``redeliveries`` the deliver
    lines after the first, ``extra`` both packed (null when both are zero) and
    ``rare`` what this level cannot settle. Each line updates a dozen aggregates, whatever the
    number of sites.
    """
    deliver = F.col("kind") == "deliver"
    send = F.col("kind") == "send"
    # (The low bits of the hash are taken here, not shuffled: two longs less per line.)
    low = F.col("line_hash").bitwiseAND(F.lit(_LOW))
    # (Lines that are no message share the null key and make one group: filtering them
    # out here would be pushed below the exchange, which the side aggregation could
    # then no longer share.)
    # The keys are the shuffle's own ``msg_key`` and ``s``, so both levels run on its
    # partitions: an expression over them is another key to Spark, and another shuffle
    # of every line. Control and acknowledge lines share the message key with null
    # content; ``message_rows`` drops their groups.
    is_message = F.col("msg_key").isNotNull() & (deliver | send)
    facts = lines.groupBy("msg_key", *[F.when(is_message, F.col(c)).alias(c) for c in CONTENT], "s").agg(
        F.count(F.when(deliver, 1)).alias("dc"),
        F.count(F.when(send, 1)).alias("sc"),
        F.min(F.when(deliver, F.col("n_late"))).alias("nl"),
        F.max(F.when(deliver, F.col("n"))).alias("nmax"),
        F.min_by(F.when(deliver, F.col("at")), F.when(deliver, F.col("n"))).alias("at"),
        F.min(F.when(deliver, F.col("line_hash"))).alias("hmin"),
        F.max(F.when(deliver, F.col("line_hash"))).alias("hmax"),
        F.sum(F.when(deliver, low)).alias("s1"),
        F.sum(F.when(deliver, low * low)).alias("s2"),
        F.min(F.when(send, F.col("line_hash"))).alias("shmin"),
        F.max(F.when(send, F.col("line_hash"))).alias("shmax"),
    )
    dc, sc = F.col("dc"), F.col("sc")
    # Deliver lines: one when every hash is equal; two when the counts solve
    # x*a + (dc-x)*b = s1 and x*a^2 + (dc-x)*b^2 = s2 for a whole x in [1, dc-1].
    a, b = F.col("hmin").bitwiseAND(F.lit(_LOW)), F.col("hmax").bitwiseAND(F.lit(_LOW))
    x = F.try_divide(F.col("s1") - dc * b, a - b)
    xl = x.cast("long")
    two = ((a != b) & (x == F.floor(x)) & (x >= 1) & (x <= dc - 1)
           & (F.col("s2") == xl * a * a + (dc - xl) * b * b))
    one = F.col("hmin") == F.col("hmax")
    dlines = F.when(dc == 0, 0).when(one, 1).when(two, 2).otherwise(3)
    slines = F.when(sc > 0, 1).otherwise(0)
    # Two lines with one n: which came first is not known here.
    # (An ``n`` too large to pack with ``late`` leaves ``nl`` null: also rare.)
    rare = ((dc > 0) & (F.col("nl").isNull()
                        | (~one & (~two | (F.shiftright("nl", FLAG_BITS) == F.col("nmax"))))))\
        | ((sc > 0) & (F.col("shmin") != F.col("shmax")))
    # Distinct send lines are never more than one here (two are rare): no resends.
    dups = dc - dlines + sc - slines
    redeliveries = F.greatest(dlines - 1, F.lit(0)).cast("long")
    return facts.select(
        "msg_key", *CONTENT, "s", "nl", "at", "dc", "sc",
        dups.alias("dups"), redeliveries.alias("redeliveries"),
        F.when(dups + redeliveries > 0, dups.bitwiseOR(F.shiftleft(redeliveries, 32))).alias("extra"),
        F.coalesce(rare, F.lit(False)).alias("rare"))


PIVOT = ("nl", "at", "extra")


def message_rows(lines: DataFrame, sites: Sequence[str]) -> DataFrame:
    """One row per (msg_id, content) group, with ``rare`` and flat pivot columns.

    Two hash aggregations on the one shuffle: level 1 per (message, content,
    site) (``_site_facts``), level 2 per (message, content) with three pivot
    columns a site, ``s<i>_nl``, ``s<i>_at`` and ``s<i>_extra`` for ``sites[i]``
    (the site's level 1 row: there is one at most). ``pivot_messages`` turns
    them into transcript columns. ``sites`` are the pivot's sites (sorted);
    records naming another site are left out (``read_mission`` runs again with
    them in the pivot).
    """
    mine: Callable[[int, str], Column] = lambda i, c: F.when(F.col("s") == i, F.col(c))  # noqa: E731
    grouped = _site_facts(lines).groupBy("msg_key", *CONTENT).agg(
        F.sum(F.col("dc") + F.col("sc")).alias("records"),
        F.sum("sc").alias("send_records"),
        F.sum("dups").alias("duplicate_lines"),
        F.sum("redeliveries").alias("redeliveries"),
        F.max("rare").alias("rare"),
        *[F.max(mine(i, c)).alias(f"s{i}_{c}") for i in range(len(sites)) for c in PIVOT],
    )
    # (Lines that are no message, and control, acknowledge and position lines, made groups
    # without a send or deliver record.)
    return grouped.where(F.col("records") > 0).select(
        F.col("msg_key").alias("msg_id"),
        (F.col("send_records") > 0).alias("has_send"),
        "origin", "seq", "room", "user", "text", "sent_at", "prec",
        "order", "duplicate_lines", "redeliveries", "rare",
        *[f"s{i}_{c}" for i in range(len(sites)) for c in PIVOT],
    )


def _compact(items: list[tuple[Column, Column]], element_type: str) -> Column:
    """The array of each ``value`` whose ``condition`` holds, in order.

    ``concat`` of one- and zero-element arrays is compiled code: about three
    times faster than ``array_except`` with a null, and ``filter`` interprets
    its lambda and every argument (at 10M records, more than the aggregation).
    """
    empty = F.array().cast(f"array<{element_type}>")
    if not items:
        return empty
    return F.concat(*[F.when(condition, F.array(value)).otherwise(empty) for condition, value in items])


def pivot_messages(rows: DataFrame, pivot: Sequence[str], sites: Sequence[str]) -> DataFrame:
    """``message_rows`` -> ``MESSAGE_COLUMNS`` (as ``transforms.flat_messages`` makes them).

    ``pivot`` are the sites of the pivot columns, ``sites`` every site of the
    mission (a superset: a site outside the pivot delivered nothing).
    """
    per = {site: (F.col(f"s{i}_nl"), F.col(f"s{i}_at"), F.col(f"s{i}_extra"))
           for i, site in enumerate(pivot)}
    low = F.lit((1 << 32) - 1)
    zero = F.lit(0).cast("long")
    bit: Callable[[Column, int], Column] = lambda nl, shift: F.shiftright(nl, shift).bitwiseAND(F.lit(1)) == 1  # noqa: E731
    return rows.select(
        "msg_id", "has_send", "origin", "seq", "room", "user", "text", "sent_at", "prec",
        # The order key here, not in ``message_rows``: there it took the aggregation's
        # generated method past the size the JIT compiles (``session.LOCAL_CONF``).
        sortable_key_col(F.col("order")).alias("order_key"), "order",
        _compact([(nl.isNotNull(), F.struct(
            F.lit(site).alias("site"), F.shiftright(nl, FLAG_BITS).alias("n"), at.alias("at"),
            bit(nl, 0).alias("late"), bit(nl, 1).alias("repaired"),
            F.shiftright(nl, 2).bitwiseAND(F.lit(MAX_HOPS)).cast("int").alias("hops")))
                  for site, (nl, at, _) in per.items()], tf.DELIVERY).alias("deliveries"),
        _compact([(nl.bitwiseAND(F.lit(1)) == 1, F.lit(site)) for site, (nl, _, _) in per.items()],
                 "string").alias("late_sites"),
        _compact([(per[site][0].isNull() if site in per else F.lit(True), F.lit(site))
                  for site in sites], "string").alias("never_arrived"),
        "duplicate_lines", "redeliveries",
        # Per-site counts only for the few messages that have any.
        F.when(F.col("duplicate_lines") + F.col("redeliveries") > 0, _compact(
            [(extra.isNotNull(), F.struct(F.lit(site).alias("site"),
                                          extra.bitwiseAND(low).alias("duplicate_lines"),
                                          F.shiftright(extra, 32).alias("redeliveries"),
                                          zero.alias("resends")))
             for site, (_, _, extra) in per.items()], tf.LINE_COUNTS))
        .otherwise(F.array().cast(f"array<{tf.LINE_COUNTS}>")).alias("line_counts"),
    )


def side_rows(lines: DataFrame) -> DataFrame:
    """Per (file, valid, site, kind): line count and ``at`` bounds; status and missing records
    keep their content in the key (one row per distinct line per file), control records
    their message, order and late flag, acknowledge records their message and user, position records
    their report and coordinates (``track_frames.receipts``)."""
    valid = F.col("valid")
    is_status = valid & (F.col("kind") == "status")
    is_missing = valid & (F.col("kind") == "missing")
    is_control = valid & (F.col("kind") == "control")
    is_ack = valid & (F.col("kind") == "acknowledge")
    is_position = valid & (F.col("kind") == "position")
    keep = is_status | is_missing
    return lines.groupBy(
        "file", "valid",
        F.when(valid, F.col("site")).alias("site"),
        F.when(valid, F.col("kind")).alias("kind"),
        F.when(is_status, F.col("peer")).alias("peer"),
        F.when(is_status, F.col("status")).alias("status"),
        F.when(keep, F.col("at")).alias("event_at"),
        F.when(keep, F.col("line_hash")).alias("line_hash"),
        F.when(is_missing | is_position, F.col("origin")).alias("origin"),
        F.when(is_missing, F.col("seqs")).alias("seqs"),
        F.when(is_missing, F.col("ranges")).alias("ranges"),
        F.when(is_control | is_ack, F.col("msg_key")).alias("msg_id"),
        F.when(is_control, F.col("order")).alias("order"),
        F.when(is_control, F.col("late")).alias("late"),
        F.when(is_ack, F.col("user")).alias("user"),
        *[F.when(is_position, F.col(c)).alias(c) for c in ("unit", "sent_at", "lat", "lon", "alt")],
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


# The JSON reader tests a pushed-down ``IN`` list value by value on every line:
# at 1M records, 3,000 names cost 22 s against 1 s for a broadcast semi join, and
# the two break even near 50 names (measured at local[2]; a plain semi join,
# which adaptive execution broadcasts when the names are few, took 1.1 s at 300).
ISIN_LIMIT = 50


@dataclass
class ScannedMission:
    """What the one pass read: messages (``transforms.MESSAGE_COLUMNS``) and the small side tables."""

    messages: DataFrame
    missing: tf.ReportedPieces  # what each site journaled missing, as pieces of seq ranges (missing.py)
    status: DataFrame        # site, peer, at, status: status events, exact duplicates removed
    control: DataFrame       # msg_id, site, origin, at, late: the first control record per site
    control_keys: DataFrame  # msg_id, order_key: the smallest order key of each control message
    acks: DataFrame          # msg_id, site, user, at: the earliest acknowledge record of each
    positions: DataFrame | None  # position receipts (track_frames.receipts); None without position records
    scan: list[dict[str, Any]]  # side rows, file by path: (file, valid, site, kind, count, first_at, ...)
    sites: list[str]         # every site named by a path or a usable record, sorted
    status_duplicates: int
    rare_messages: int       # rebuilt by the general path
    passes: int              # 2 when records named sites missing from the first pivot (or
                             # two paths' names hashed alike: ``FileKeys.decode``)
    _cached: list[DataFrame] = field(default_factory=list)

    def unpersist(self) -> None:
        for df in self._cached:
            release(df)


def read_mission(spark: SparkSession, files: Sequence[JournalFile], *,
                 partitions: int | None = None, isin_limit: int = ISIN_LIMIT) -> ScannedMission:
    """Read every journal once (see the module doc) and settle the rare messages.

    Rare messages are re-read with ``msg_id IN (...)`` pushed into the JSON
    reader when there are at most ``isin_limit`` of them, with a semi join otherwise.
    """
    level = StorageLevel.MEMORY_AND_DISK
    paths = [f.path for f in files]
    partitions = partitions or int(spark.conf.get("spark.sql.shuffle.partitions") or 8)
    pivot = sorted({f.path_site for f in files if f.path_site})
    passes = 0
    keys, files_of = FileKeys.hashed(), None
    while True:
        passes += 1
        with shared_shuffle(spark):
            both = materialize(one_pass(shuffled_lines(spark, paths, pivot, partitions, keys), pivot))
        side = [r.asDict() for r in _driver_side_rows(both).collect()]
        files_of = files_of or keys.decode(spark, paths)     # once, not again on a second pass
        if files_of is None:       # two paths' names share a hash: lines carry indexes instead
            release(both)
            keys = FileKeys.indexed(paths)
            continue
        message_sites = {r["site"] for r in side if r["valid"] and r["kind"] in ("send", "deliver")}
        if message_sites <= set(pivot):
            break
        release(both)
        pivot = sorted(set(pivot) | message_sites)
    record_sites = {r["site"] for r in side if r["valid"]}
    sites = sorted({f.path_site for f in files if f.path_site} | record_sites)

    groups = both.where((F.col("part") == "m") & F.col("msg_id").isNotNull())
    flagged = (groups.groupBy("msg_id")
               .agg(F.count(F.lit(1)).alias("groups"), F.max("rare").alias("rare"))
               .where((F.col("groups") > 1) | F.col("rare")).select("msg_id"))
    named = [r["msg_id"] for r in flagged.limit(isin_limit + 1).collect()]
    typed = pivot_messages(groups, pivot, sites)
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
        general = tf.flat_messages(general, sites)
        messages = typed.join(flagged, "msg_id", "left_anti").unionByName(general)
    else:
        messages = typed
    missing, status, duplicates = _side_tables(spark, side)
    # Journals without control or acknowledge records (the paper's) skip their scans.
    kinds = {r["kind"] for r in side if r["valid"]}
    control, control_keys = control_table(both) if "control" in kinds else (
        spark.createDataFrame([], CONTROL_SCHEMA), spark.createDataFrame([], CONTROL_KEY_SCHEMA))
    acks = ack_table(both) if "acknowledge" in kinds else spark.createDataFrame([], ACK_SCHEMA)
    positions = track_frames.receipts(_side(both, "position")) if "position" in kinds else None
    scan = _scan_rows(side, paths, files_of)
    return ScannedMission(messages, missing, status, control, control_keys, acks, positions, scan,
                   sites, duplicates, rare, passes, cached)


CONTROL_SCHEMA = "msg_id string, site string, origin string, at double, late boolean"
CONTROL_KEY_SCHEMA = "msg_id string, order_key binary"
ACK_SCHEMA = "msg_id string, site string, user string, at double"


_PER_MESSAGE_KINDS = ("control", "acknowledge", "position")


def _side(both: DataFrame, kind: str | None = None) -> DataFrame:
    """The side rows of ``one_pass`` without their prefix (only ``kind``'s usable ones if given)."""
    side = both.where(F.col("part") == "s")
    if kind is not None:
        side = side.where(F.col("side_valid") & (F.col("side_kind") == kind))
    return side.select(*[F.col(c).alias(c[len("side_"):]) for c in both.columns if c.startswith("side_")])


def _driver_side_rows(both: DataFrame) -> DataFrame:
    """Side rows for the driver: control, acknowledge and position records (one row per message
    or report, side tables of the size of the transcript) only as counts per (file, valid, site, kind)."""
    side = _side(both)
    per_message = side.where(F.col("valid") & F.col("kind").isin(*_PER_MESSAGE_KINDS))
    counts = per_message.groupBy("file", "valid", "site", "kind").agg(
        F.sum("count").alias("count"), F.min("first_at").alias("first_at"),
        F.max("last_at").alias("last_at"))
    rest = side.where(~(F.col("valid") & F.col("kind").isin(*_PER_MESSAGE_KINDS)))
    return rest.unionByName(counts, allowMissingColumns=True)


def control_table(both: DataFrame) -> tuple[DataFrame, DataFrame]:
    """(control, control_keys) from the side rows: the first control record of each message
    at each site, and the smallest order key of each control message."""
    rows = _side(both, "control")
    first = rows.groupBy("msg_id", "site").agg(F.min(F.struct("first_at", "late")).alias("f"))
    control = first.select("msg_id", "site", F.substring_index("msg_id", ":", 1).alias("origin"),
                           F.col("f.first_at").alias("at"), F.col("f.late").alias("late"))
    keys = (rows.select("msg_id", sortable_key_col(F.col("order")).alias("order_key"))
            .groupBy("msg_id").agg(F.min("order_key").alias("order_key")))
    return control, keys


def ack_table(both: DataFrame) -> DataFrame:
    """The earliest acknowledge record of each (message, site, user)."""
    return (_side(both, "acknowledge").groupBy("msg_id", "site", "user")
            .agg(F.min("first_at").alias("at")))


def _side_tables(spark: SparkSession, side: list[dict[str, Any]]) -> tuple[tf.ReportedPieces, DataFrame, int]:
    """(missing reports as pieces of seq ranges, status events, duplicate status lines) from
    the side rows. A report's ranges are never turned into seqs (``missing.build_pieces``)."""
    reports: list[Report] = []
    events: dict[tuple[str, int], tuple[str, str, float, str]] = {}
    status_lines = 0
    for r in side:
        if not r["valid"]:
            continue
        if r["kind"] == "missing":
            reports.append((r["origin"], r["site"], r["event_at"], missing_ranges(r["ranges"], r["seqs"])))
        elif r["kind"] == "status":
            status_lines += r["count"]
            events.setdefault((r["site"], r["line_hash"]),
                              (r["site"], r["peer"], r["event_at"], r["status"]))
    status = spark.createDataFrame(sorted(events.values()),
                                   "site string, peer string, at double, status string")
    return tf.reported_pieces(spark, build_pieces(reports)), status, status_lines - len(events)


def _scan_rows(side: list[dict[str, Any]], paths: Sequence[str], files_of: dict[int, int]) -> list[dict[str, Any]]:
    """The side rows for ``scan_tables.scan_tables`` (which sums them per file), the file by path
    (``files_of``: ``FileKeys.decode``)."""
    rows = []
    for r in side:
        i = files_of.get(r["file"]) if r["file"] is not None else None
        rows.append({**r, "file": paths[i] if i is not None else "(unknown file)"})
    return rows
