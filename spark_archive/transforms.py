"""Pure DataFrame-in, DataFrame-out transforms of the mission archive.

Theory of operation
-------------------
``read_journal_records`` turns every journal line into one row (a torn or
otherwise unusable line is kept, flagged ``valid = false``, so it is counted per
file and never fatal). The job reads the journals through ``onepass.py``, which
builds the message table from one shuffle with a numeric pivot; the functions
here are the general definitions and the steps after it:

* ``message_table`` groups send and deliver records by ``msg_id``: per
  (message, site) keep the first delivery, count exact duplicate lines and
  re-deliveries; per message take the content from the send. It is the
  general path, used for the messages the one pass leaves ``rare``.
* ``flat_messages`` turns its rows into the message columns the transcript is
  made of (``MESSAGE_COLUMNS``: deliveries, the sites where a message came late
  and never arrived, duplicate line counts), as ``onepass.pivot_messages``
  does for the pivot's rows.
* ``transcript`` adds the sites that journaled a message ``missing``;
  ``number_transcript`` and the functions after it give its position in the
  global order (order-key order; ties, which a correct protocol never makes,
  broken by ``msg_id``).
* ``site_deliveries`` explodes the transcript back to one row per delivery;
  ``divergence``, ``latency_by_pair`` and ``latency_over_time`` aggregate it.
* ``connectivity_intervals`` turns status events into intervals per
  (site, peer) with window functions; ``availability`` sums them up.

Only built-in column, higher-order and window functions are used: nothing
leaves the JVM.
"""
from __future__ import annotations

from typing import Sequence

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from .orderkey import sortable_key_col

KINDS = ("send", "deliver", "status", "missing")
STATUSES = ("connected", "suspected", "disconnected")

JOURNAL_SCHEMA = T.StructType([
    T.StructField("kind", T.StringType()),
    T.StructField("site", T.StringType()),
    T.StructField("at", T.DoubleType()),
    T.StructField("n", T.LongType()),
    T.StructField("msg_id", T.StringType()),
    T.StructField("origin", T.StringType()),
    T.StructField("seq", T.LongType()),
    T.StructField("order", T.ArrayType(T.StringType())),
    T.StructField("late", T.BooleanType()),
    T.StructField("room", T.StringType()),
    T.StructField("user", T.StringType()),
    T.StructField("text", T.StringType()),
    T.StructField("sent_at", T.DoubleType()),
    T.StructField("peer", T.StringType()),
    T.StructField("status", T.StringType()),
    T.StructField("seqs", T.ArrayType(T.LongType())),
])

# Strict JSON, as Python's json module reads it (Spark allows single quotes by default).
JSON_OPTIONS = {"mode": "PERMISSIVE", "allowSingleQuotes": "false"}
CORRUPT = "_corrupt_line"
# The JSON data source with a fixed schema: a line that is not a JSON object or
# has a field of the wrong type is kept whole in CORRUPT (and is a bad line).
READ_SCHEMA = T.StructType(JOURNAL_SCHEMA.fields + [T.StructField(CORRUPT, T.StringType())])
READ_OPTIONS = {**JSON_OPTIONS, "columnNameOfCorruptRecord": CORRUPT}

def _valid(r: Column) -> Column:
    """A record is usable when it has the fields its kind needs."""
    base = r.kind.isin(*KINDS) & r.site.isNotNull() & r.at.isNotNull()
    by_kind = (
        F.when(r.kind == "send", r.msg_id.isNotNull())
        .when(r.kind == "deliver", r.msg_id.isNotNull() & r.n.isNotNull())
        .when(r.kind == "status", r.peer.isNotNull() & r.status.isin(*STATUSES))
        .when(r.kind == "missing", r.origin.isNotNull() & r.seqs.isNotNull())
        .otherwise(F.lit(False))
    )
    return F.coalesce(base & by_kind, F.lit(False))


def _record_columns(r: Column, ok: Column) -> list[Column]:
    """The parsed columns of a record struct ``r`` (``ok``: the line parsed cleanly).

    Every schema field, in schema order; a message's missing ``origin``/``seq``
    are taken from its ``msg_id``, and a missing ``late`` is false.
    """
    is_message = r.kind.isin("send", "deliver")
    derived = {
        "origin": F.when(is_message, F.coalesce(r.origin, F.substring_index(r.msg_id, ":", 1)))
        .otherwise(r.origin),
        "seq": F.when(is_message, F.coalesce(
            r.seq, F.substring_index(r.msg_id, ":", -1).try_cast("long"))).otherwise(r.seq),
        "late": F.coalesce(r.late, F.lit(False)),
    }
    return [(ok & _valid(r)).alias("valid"),
            *[derived.get(f.name, r[f.name]).alias(f.name) for f in JOURNAL_SCHEMA.fields]]


IDENTITY_FIELDS = tuple(f.name for f in JOURNAL_SCHEMA.fields
                        if not isinstance(f.dataType, T.ArrayType))


def _record_hash(r: Column) -> Column:
    """Identity of a record: equal for lines that parse to the same scalar fields (a replayed line).

    The arrays (``order``, ``seqs``) are left out: hashing them cost a third of
    the parse, and two lines of one message that differ only there are no replay.
    """
    return F.xxhash64(*[r[name] for name in IDENTITY_FIELDS])


def read_journal_records(spark: SparkSession, paths: Sequence[str],
                         file: Column | None = None) -> DataFrame:
    """Journal files -> one row per non-blank line, flagged ``valid``, by the JSON data source.

    Jackson parses only the schema's fields straight into columns, about twice
    as fast as reading text and applying ``from_json``; blank lines are skipped,
    and a torn or mistyped line arrives with ``CORRUPT`` set. ``file`` names
    each line's file (default: Spark's ``_metadata.file_path``). The record's
    columns are gathered into a struct for ``_record_columns``; Spark folds it
    away and reads the fields directly.
    """
    raw = spark.read.schema(READ_SCHEMA).options(**READ_OPTIONS).json(list(paths))
    r = F.struct(*[F.col(f.name) for f in JOURNAL_SCHEMA.fields])
    file = F.col("_metadata.file_path") if file is None else file
    return raw.select(file.alias("file"), _record_hash(r).alias("line_hash"),
                      *_record_columns(r, F.col(CORRUPT).isNull()))


def message_table(parsed: DataFrame, partitions: int | None = None) -> DataFrame:
    """Send and deliver records -> one row per message with its deduplicated deliveries.

    Per (message, site) the first delivery (smallest ``n``, then ``at``) is kept;
    exact duplicate lines and re-deliveries (same message, same site, another
    line) are counted. The message's content comes from its send record when
    there is one, otherwise from its delivery at the smallest site name.
    """
    is_send = F.col("kind") == "send"
    is_deliver = F.col("kind") == "deliver"
    records = parsed.where(F.col("valid") & F.col("kind").isin("send", "deliver"))
    by_message = (records.repartition(partitions, "msg_id") if partitions
                  else records.repartition("msg_id"))
    content = F.struct(
        F.when(is_send, 0).otherwise(1).alias("prio"),
        F.col("at"),
        F.coalesce(F.col("n"), F.lit(-1)).alias("n"),
        "origin", "seq", "room", "user", "text", "sent_at",
    )
    per_site = by_message.groupBy("msg_id", "site").agg(
        F.min(content).alias("content"),
        F.min(F.when(is_deliver, F.struct("n", "at", "late"))).alias("first"),
        F.count(F.when(is_deliver, 1)).alias("deliver_records"),
        F.size(F.collect_set(F.when(is_deliver, F.col("line_hash")))).alias("deliver_lines"),
        F.count(F.when(is_send, 1)).alias("send_records"),
        F.size(F.collect_set(F.when(is_send, F.col("line_hash")))).alias("send_lines"),
        F.min("order").alias("order_min"),
        F.max("order").alias("order_max"),
    )
    c = F.col("content")
    per_message = per_site.groupBy("msg_id").agg(
        F.min(F.struct(c.prio.alias("prio"), F.col("site"), c.at.alias("at"), c.n.alias("n"),
                       c.origin.alias("origin"), c.seq.alias("seq"), c.room.alias("room"),
                       c.user.alias("user"), c.text.alias("text"),
                       c.sent_at.alias("sent_at"))).alias("m"),
        F.min("order_min").alias("order_min"),
        F.max("order_max").alias("order_max"),
        F.array_sort(F.collect_list(F.struct(
            F.col("site"),
            F.col("first.n").alias("n"),
            F.col("first.at").alias("at"),
            F.col("first.late").alias("late"),
            F.col("deliver_records"),
            F.col("deliver_lines"),
            F.col("send_records"),
            F.col("send_lines"),
        ))).alias("sites"),
    )
    m = F.col("m")
    return per_message.select(
        "msg_id",
        (m.prio == 0).alias("has_send"),
        m.origin.alias("origin"),
        m.seq.alias("seq"),
        m.room.alias("room"),
        m.user.alias("user"),
        m.text.alias("text"),
        m.sent_at.alias("sent_at"),
        # Every record of a message names one order (the normal case): encode it once here.
        # When they differ, ``resolve_order_keys`` puts the smallest key in.
        F.when(F.col("order_min") == F.col("order_max"), sortable_key_col(F.col("order_min")))
        .alias("order_key"),
        F.col("order_min").alias("order"),
        (F.col("order_min") != F.col("order_max")).alias("orders_differ"),
        "sites",
    )


def smallest_order_keys(records: DataFrame, msg_ids: DataFrame) -> DataFrame:
    """(msg_id, order_key, order): the smallest order key among the records of these messages."""
    chosen = (records.where(F.col("valid") & F.col("kind").isin("send", "deliver")
                            & F.col("order").isNotNull())
              .join(msg_ids.select("msg_id"), "msg_id", "left_semi")
              .select("msg_id", F.struct(sortable_key_col(F.col("order")).alias("k"),
                                         F.col("order").alias("o")).alias("key")))
    return (chosen.groupBy("msg_id").agg(F.min("key").alias("key"))
            .select("msg_id", F.col("key.k").alias("fix_order_key"), F.col("key.o").alias("fix_order")))


def resolve_order_keys(messages: DataFrame, records: DataFrame) -> DataFrame:
    """Messages whose records name different orders get the smallest key among them."""
    fixes = smallest_order_keys(records, messages.where("orders_differ"))
    joined = messages.join(fixes, "msg_id", "left")
    differ = F.coalesce(F.col("orders_differ"), F.lit(False))
    return joined.select(*[
        F.when(differ, F.col(f"fix_{c}")).otherwise(F.col(c)).alias(c) if c in ("order_key", "order")
        else F.col(c) for c in messages.columns if c != "orders_differ"])


def order_display(order: Column) -> Column:
    """The order as the journal wrote it, each element as text (a JSON null as ``null``)."""
    return F.transform(order, lambda e: F.coalesce(e, F.lit("null")))


# A message's first delivery at a site, and its per-site line counts when not all zero.
DELIVERY = "struct<site:string,n:bigint,at:double,late:boolean>"
LINE_COUNTS = "struct<site:string,duplicate_lines:bigint,redeliveries:bigint,resends:bigint>"
# The message table the transcript is made from (``flat_messages``, ``onepass.pivot_messages``).
MESSAGE_COLUMNS = ("msg_id", "has_send", "origin", "seq", "room", "user", "text", "sent_at",
                   "order_key", "order", "deliveries", "late_sites", "never_arrived",
                   "duplicate_lines", "redeliveries", "line_counts")


def flat_messages(messages: DataFrame, sites: Sequence[str]) -> DataFrame:
    """``message_table`` rows -> ``MESSAGE_COLUMNS``: the deliveries, the sites where a
    message came late and never arrived, and its duplicate line counts.

    ``sites`` are all sites of the mission; a message never arrived at a site of
    it that has no delivery of the message.
    """
    all_sites = F.array(*[F.lit(s) for s in sorted(sites)]) if sites else \
        F.array().cast("array<string>")
    delivered = F.filter("sites", lambda e: e.n.isNotNull())
    deliveries = F.transform(delivered, lambda e: F.struct(
        e.site.alias("site"), e.n.alias("n"), e.at.alias("at"), e.late.alias("late")))
    dups = lambda e: (e.deliver_records - e.deliver_lines + e.send_records - e.send_lines).cast("long")  # noqa: E731
    redeliveries = lambda e: F.greatest(e.deliver_lines - 1, F.lit(0)).cast("long")  # noqa: E731
    resends = lambda e: F.greatest(e.send_lines - 1, F.lit(0)).cast("long")  # noqa: E731
    return messages.select(
        "msg_id", "has_send", "origin", "seq", "room", "user", "text", "sent_at", "order_key", "order",
        deliveries.alias("deliveries"),
        F.transform(F.filter(delivered, lambda e: e.late), lambda e: e.site).alias("late_sites"),
        F.array_except(all_sites, F.transform(delivered, lambda e: e.site)).alias("never_arrived"),
        F.aggregate("sites", F.lit(0).cast("long"), lambda acc, e: acc + dups(e)).alias("duplicate_lines"),
        F.aggregate("sites", F.lit(0).cast("long"), lambda acc, e: acc + redeliveries(e)).alias("redeliveries"),
        F.transform(F.filter("sites", lambda e: dups(e) + redeliveries(e) + resends(e) > 0),
                    lambda e: F.struct(e.site.alias("site"), dups(e).alias("duplicate_lines"),
                                       redeliveries(e).alias("redeliveries"),
                                       resends(e).alias("resends"))).alias("line_counts"),
    )


def transcript(messages: DataFrame, missing: DataFrame) -> DataFrame:
    """``MESSAGE_COLUMNS`` rows -> transcript rows (unsorted): the order as written, and the
    sites that journaled the message ``missing``."""
    reported = missing.select("msg_id", "reported_by")
    return (
        messages.join(F.broadcast(reported), "msg_id", "left")
        .select(
            "msg_id", "has_send", "origin", "seq", "room", "user", "text", "sent_at",
            order_display(F.col("order")).alias("order"),
            "order_key", "deliveries", "late_sites", "never_arrived",
            F.coalesce(F.col("reported_by"), F.array().cast("array<string>")).alias("reported_missing_at"),
            "duplicate_lines", "redeliveries",
        )
    )


def number_transcript(transcript_df: DataFrame) -> DataFrame:
    """Sort rows in global order and add ``gidx``, monotone in that order (not dense).

    ``gidx`` is ``monotonically_increasing_id`` right after the sort: partition
    index in the high bits, row within the partition in the low 33 bits.
    Persist the result before deriving ``partition_offsets`` from it. The job
    sorts only the keys (``msg_id``, ``room``, ``order_key``): moving whole
    transcript rows through a range shuffle cost several times more.
    """
    ordered = transcript_df.orderBy(F.asc_nulls_last("order_key"), F.asc("msg_id"))
    return ordered.withColumn("gidx", F.monotonically_increasing_id())


def partition_offsets(numbered: DataFrame) -> DataFrame:
    """(part, offset): how many rows come before each partition of a numbered transcript."""
    counts = numbered.groupBy(F.shiftright("gidx", 33).alias("part")).count()
    w = Window.orderBy("part").rowsBetween(Window.unboundedPreceding, -1)
    return counts.select("part", F.coalesce(F.sum("count").over(w), F.lit(0)).cast("long").alias("offset"))


def add_positions(numbered: DataFrame, offsets: DataFrame) -> DataFrame:
    """Add ``position``: dense 0-based rank in the global order, from ``gidx`` and offsets."""
    part = F.shiftright(F.col("gidx"), 33)
    return (numbered.withColumn("part", part)
            .join(F.broadcast(offsets), "part", "left")
            .withColumn("position",
                        F.col("offset") + (F.col("gidx") - F.shiftleft(F.col("part"), 33)))
            .drop("part", "offset"))


def room_positions(positioned: DataFrame) -> DataFrame:
    """Add ``room_position``: 0-based rank of a message in its room's transcript."""
    w = Window.partitionBy("room").orderBy("position")
    return positioned.withColumn("room_position", F.row_number().over(w) - 1)


def site_deliveries(positioned: DataFrame) -> DataFrame:
    """Transcript -> one row per delivery (the first of a message at a site)."""
    return positioned.select(
        "msg_id", "origin", "sent_at", "gidx", F.explode("deliveries").alias("e")
    ).select(
        F.col("e.site").alias("site"), "msg_id", "origin", "sent_at", "gidx",
        F.col("e.n").alias("n"), F.col("e.at").alias("at"), F.col("e.late").alias("late"),
    )


def site_line_counts(messages: DataFrame) -> DataFrame:
    """Per site: duplicate lines, re-deliveries and resends, from the messages' ``line_counts``."""
    e = F.col("e")
    return (messages.select(F.explode("line_counts").alias("e"))
            .groupBy(e.site.alias("site"))
            .agg(F.sum(e.duplicate_lines).alias("duplicate_lines"),
                 F.sum(e.redeliveries).alias("redeliveries"),
                 F.sum(e.resends).alias("resends")))


def divergence(deliveries: DataFrame, counts: DataFrame, sites: Sequence[str]) -> DataFrame:
    """Per site: how its delivery order (by ``n``) differs from the transcript order.

    ``deliveries`` come from ``site_deliveries``, ``counts`` from ``site_line_counts``.

    ``site_position`` is a delivery's rank in the site's order, ``transcript_position``
    its rank in the transcript restricted to what the site delivered;
    displacement is their absolute difference. A delivery is out of place when
    the two differ; an order break is a delivery ordered before the previous one.
    """
    # Narrow rows through the site shuffle; ties in ``n`` (never in a sane journal)
    # are broken by ``at``, then transcript order.
    delivered = deliveries.select("site", "n", "at", "gidx", "late")
    by_n = Window.partitionBy("site").orderBy("n", "at", "gidx")
    by_order = Window.partitionBy("site").orderBy("gidx")
    ranked = (delivered
              .withColumn("transcript_position", F.row_number().over(by_order))
              .withColumn("site_position", F.row_number().over(by_n))
              .withColumn("previous_gidx", F.lag("gidx").over(by_n)))
    displacement = F.abs(F.col("site_position") - F.col("transcript_position"))
    per_site = ranked.groupBy("site").agg(
        F.count(F.lit(1)).alias("deliveries"),
        F.sum((displacement > 0).cast("long")).alias("out_of_place"),
        F.sum((F.col("gidx") < F.col("previous_gidx")).cast("long")).alias("order_breaks"),
        F.sum(F.col("late").cast("long")).alias("late"),
        F.max(displacement).alias("max_displacement"),
        F.avg(displacement).alias("mean_displacement"),
    )
    everyone = deliveries.sparkSession.createDataFrame([(s,) for s in sites], "site string")
    zero = F.lit(0).cast("long")
    return (everyone.join(per_site, "site", "left").join(counts, "site", "left")
            .select("site",
                    *[F.coalesce(c, zero).alias(c) for c in
                      ("deliveries", "late", "out_of_place", "order_breaks", "max_displacement")],
                    F.coalesce("mean_displacement", F.lit(0.0)).alias("mean_displacement"),
                    *[F.coalesce(c, zero).alias(c) for c in
                      ("duplicate_lines", "redeliveries", "resends")])
            .orderBy("site"))


def never_arrived_counts(positioned: DataFrame, sites: Sequence[str]) -> DataFrame:
    """Per site: messages that never arrived there, and how many of those it reported missing."""
    rows = positioned.select(F.explode("never_arrived").alias("site"), "reported_missing_at")
    counts = rows.groupBy("site").agg(
        F.count(F.lit(1)).alias("never_arrived"),
        F.sum(F.array_contains("reported_missing_at", F.col("site")).cast("long"))
        .alias("never_arrived_reported"),
    )
    everyone = positioned.sparkSession.createDataFrame([(s,) for s in sites], "site string")
    return (everyone.join(counts, "site", "left")
            .select("site", F.coalesce("never_arrived", F.lit(0).cast("long")).alias("never_arrived"),
                    F.coalesce("never_arrived_reported", F.lit(0).cast("long"))
                    .alias("never_arrived_reported"))
            .orderBy("site"))


# Latency percentiles come from a histogram, not a digest per group: latencies
# are binned on a log scale (bins 1% wide, signed, from a microsecond), the bins
# counted per group by a hash aggregation, and each percentile is the largest
# latency in the bin holding its nearest rank (rank = ceil(p * deliveries)): a
# latency that occurred, within 1% of the exact nearest-rank percentile.
LATENCY_BIN_WIDTH = 0.01
_FLOOR_SECONDS = 1e-6


def _latency_bin(latency: Column) -> Column:
    magnitude = F.floor(F.log(F.greatest(F.abs(latency), F.lit(_FLOOR_SECONDS)) / F.lit(_FLOOR_SECONDS))
                        / F.log1p(F.lit(LATENCY_BIN_WIDTH)))
    return F.when(latency >= 0, magnitude).otherwise(-magnitude - 1)


def _latencies(deliveries: DataFrame) -> DataFrame:
    return (deliveries.where(F.col("sent_at").isNotNull())
            .select("origin", F.col("site").alias("destination"), "sent_at", "late",
                    (F.col("at") - F.col("sent_at")).alias("latency")))


def latency_histogram(deliveries: DataFrame, start: float, bucket_seconds: float) -> DataFrame:
    """Latency bins per (origin, destination, ``sent_at`` time bucket): the one pass over the
    deliveries that both latency tables are read from."""
    bucket = F.floor((F.col("sent_at") - F.lit(start)) / F.lit(bucket_seconds))
    return (_latencies(deliveries)
            .groupBy("origin", "destination",
                     (F.lit(start) + bucket * F.lit(bucket_seconds)).alias("bucket_start"),
                     _latency_bin(F.col("latency")).alias("bin"))
            .agg(F.count(F.lit(1)).alias("c"), F.sum(F.col("late").cast("long")).alias("late"),
                 F.max("latency").alias("top"), F.sum("latency").alias("total")))


def _latency_table(hist: DataFrame, keys: Sequence[str]) -> DataFrame:
    """Per group of ``keys``: deliveries, late, p50/p95/p99 (from the histogram), max, mean."""
    hist = (hist.groupBy(*keys, "bin")
            .agg(F.sum("c").alias("c"), F.sum("late").alias("late"), F.max("top").alias("top"),
                 F.sum("total").alias("total")))
    upto = Window.partitionBy(*keys).orderBy("bin").rowsBetween(Window.unboundedPreceding, 0)
    ranked = hist.withColumn("cum", F.sum("c").over(upto)) \
        .withColumn("all", F.sum("c").over(Window.partitionBy(*keys)))

    def percentile(p: float) -> Column:
        reached = F.col("cum") >= F.greatest(F.ceil(F.col("all") * F.lit(p) - F.lit(1e-9)), F.lit(1))
        return F.min_by(F.when(reached, F.col("top")), F.when(reached, F.col("bin")))

    return (ranked.groupBy(*keys)
            .agg(F.sum("c").alias("deliveries"), F.sum("late").alias("late"),
                 percentile(0.5).alias("p50"), percentile(0.95).alias("p95"),
                 percentile(0.99).alias("p99"), F.max("top").alias("max"),
                 (F.sum("total") / F.sum("c")).alias("mean"))
            .orderBy(*keys))


def latency_by_pair(hist: DataFrame) -> DataFrame:
    """Delivery latency (delivery ``at`` minus ``sent_at``, seconds) per origin/destination
    pair, from ``latency_histogram``."""
    return _latency_table(hist, ("origin", "destination"))


def latency_over_time(hist: DataFrame) -> DataFrame:
    """Latency per origin/destination pair per time bucket of ``sent_at``, from
    ``latency_histogram``."""
    return _latency_table(hist, ("origin", "destination", "bucket_start"))


def connectivity_intervals(status: DataFrame, pairs: DataFrame, start: float, end: float) -> DataFrame:
    """Status events -> intervals (site, peer, status, start, end, seconds) up to ``end``.

    ``pairs`` (site, peer) lists every ordered pair to report; a pair counts as
    disconnected from ``start`` until its first event, or all along without one.
    Repeated statuses merge into one interval; events at the same instant are
    ordered by status name (connected < disconnected < suspected).
    """
    w = Window.partitionBy("site", "peer").orderBy("at", "status")
    events = (status.withColumn("previous", F.lag("status").over(w))
              .where(F.col("previous").isNull() | (F.col("previous") != F.col("status")))
              .drop("previous"))
    firsts = events.groupBy("site", "peer").agg(F.min("at").alias("first_at"))
    leading = (pairs.join(firsts, ["site", "peer"], "left")
               .select("site", "peer", F.lit(start).alias("at"), F.lit("disconnected").alias("status"),
                       F.coalesce(F.col("first_at"), F.lit(end)).alias("until"))
               .where(F.col("until") > F.col("at")))
    with_end = events.withColumn("until", F.coalesce(F.lead("at").over(w), F.lit(end)))
    merged = leading.unionByName(with_end)
    # The leading disconnected interval merges with a first event that is also disconnected.
    w2 = Window.partitionBy("site", "peer").orderBy("at")
    runs = (merged.withColumn("change", F.when(
                F.lag("status").over(w2) == F.col("status"), 0).otherwise(1))
            .withColumn("run", F.sum("change").over(w2.rowsBetween(Window.unboundedPreceding, 0))))
    return (runs.groupBy("site", "peer", "run", "status")
            .agg(F.min("at").alias("start"), F.max("until").alias("end"))
            .select("site", "peer", "status", "start", "end",
                    (F.col("end") - F.col("start")).alias("seconds"))
            .where(F.col("seconds") > 0)
            .orderBy("site", "peer", "start"))


def availability(intervals: DataFrame) -> DataFrame:
    """Per (site, peer): seconds connected / suspected / disconnected and the connected fraction."""
    sums = [F.sum(F.when(F.col("status") == s, F.col("seconds")).otherwise(0.0)).alias(f"{s}_seconds")
            for s in STATUSES]
    total = sum((F.col(f"{s}_seconds") for s in STATUSES), F.lit(0.0))
    return (intervals.groupBy("site", "peer").agg(*sums)
            .withColumn("availability", F.when(total > 0, F.col("connected_seconds") / total)
                        .otherwise(F.lit(0.0)))
            .orderBy("site", "peer"))


def all_pairs(status: DataFrame, sites: Sequence[str]) -> DataFrame:
    """Every ordered pair of mission sites, plus any (site, peer) named by a status event."""
    grid = status.sparkSession.createDataFrame([(a, b) for a in sites for b in sites if a != b],
                                   "site string, peer string")
    return grid.unionByName(status.select("site", "peer")).distinct()
