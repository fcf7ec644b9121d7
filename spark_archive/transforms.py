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
* ``transcript`` adds the sites that journaled a message ``missing``: its
  origin's reported seq ranges, cut into disjoint pieces on the driver
  (``missing.build_pieces``), are joined by (origin, bucket) with the piece's
  bounds as the condition (``with_piece``), never exploded into seqs;
  ``number_transcript`` and the functions after it give its position in the
  global order (order-key order; ties, which a correct protocol never makes,
  broken by ``msg_id``). Control deliveries' messages are numbered with the
  chat messages (``gidx``), so ordering checks see every ordered delivery,
  but only chat messages take a transcript ``position``.

The tables computed from the transcript (divergence, latency, connectivity,
the extensions) are in ``analysis.py``.

Only built-in column, higher-order and window functions are used: nothing
leaves the JVM.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from contracts.journal import FieldType
from contracts.precedence import PRECEDENCES, Precedence
from contracts.status import REPORTED

from . import schema
from .filekeys import file_name, lookup
from .missing import Piece, bucket_rows
from .orderkey import sortable_key_col
from .tracks import LAT_RANGE, LON_RANGE

KINDS = schema.KINDS
# Statuses (contracts.status: REPORTED) and precedence levels (Contract 3 extension) have one home,
# contracts/. A level's integer code here is its one code, ``Precedence.code``: 0 flash .. 3 routine
# (absent: routine), its index in PRECEDENCES, as RCM and the web page number them.
# Codes of the levels delivered on arrival at their order key: they do not move a site's in-order frontier.
URGENT_CODES = tuple(p.code for p in Precedence if p.urgent)

# Spark's type of each journal field type (contracts.journal): an order key's elements, integers
# and strings, are read as text.
SPARK_TYPES: dict[FieldType, T.DataType] = {
    FieldType.STR: T.StringType(),
    FieldType.INT: T.LongType(),
    FieldType.FLOAT: T.DoubleType(),
    FieldType.BOOL: T.BooleanType(),
    FieldType.ORDER: T.ArrayType(T.StringType()),
    FieldType.STRS: T.ArrayType(T.StringType()),
    FieldType.INTS: T.ArrayType(T.LongType()),
    FieldType.RANGES: T.ArrayType(T.ArrayType(T.LongType())),
    FieldType.LABEL: T.StructType([T.StructField("level", T.StringType()),
                                   T.StructField("caveats", T.ArrayType(T.StringType()))]),
}

JOURNAL_SCHEMA = T.StructType([T.StructField(f.name, SPARK_TYPES[f.type]) for f in schema.FIELDS])

# Strict JSON, as Python's json module reads it (Spark allows single quotes by default).
JSON_OPTIONS = {"mode": "PERMISSIVE", "allowSingleQuotes": "false"}
CORRUPT = "_corrupt_line"
# The JSON data source with a fixed schema: a line that is not a JSON object or
# has a field of the wrong type is kept whole in CORRUPT (and is a bad line).
READ_SCHEMA = T.StructType(JOURNAL_SCHEMA.fields + [T.StructField(CORRUPT, T.StringType())])
READ_OPTIONS = {**JSON_OPTIONS, "columnNameOfCorruptRecord": CORRUPT}

def _valid(r: Column) -> Column:
    """A record is usable when it has the fields its kind needs (and a known precedence)."""
    base = r.kind.isin(*KINDS) & r.site.isNotNull() & r.at.isNotNull() \
        & (r.precedence.isNull() | r.precedence.isin(*PRECEDENCES))
    by_kind = (
        F.when(r.kind == "send", r.msg_id.isNotNull())
        .when(r.kind == "deliver", r.msg_id.isNotNull() & r.n.isNotNull())
        .when(r.kind == "status", r.peer.isNotNull() & r.status.isin(*REPORTED))
        .when(r.kind == "missing", r.origin.isNotNull() & (r.ranges.isNotNull() | r.seqs.isNotNull()))
        .when(r.kind.isin("control", "acknowledge"), r.msg_id.isNotNull())
        .when(r.kind == "position", _usable_position(r))
        .when(r.kind == "clearance", F.lit(True))      # its labels: labels.py
        .otherwise(F.lit(False))
    )
    return F.coalesce(base & by_kind, F.lit(False))


def _usable_position(r: Column) -> Column:
    """``tracks.usable``, in few nodes without an OR (the optimizer's time grows fast with ``_valid``'s
    size: a form with ``between`` and ``alt IS NULL OR ...`` ran it out of memory). A NaN compares above
    every number in Spark, so it is out of bounds and not finite; an absent alt is 0."""
    return (r.origin.isNotNull() & r.unit.isNotNull() & (F.abs(r.lat) <= F.lit(LAT_RANGE[1]))
            & (F.abs(r.lon) <= F.lit(LON_RANGE[1]))
            & (F.abs(r.sent_at) + F.coalesce(F.abs(r.alt), F.lit(0.0)) < F.lit(float("inf"))))


def precedence_code(precedence: Column) -> Column:
    """A precedence level's code (``Precedence.code``: 0 flash .. 3 routine; absent: routine)."""
    code = F.lit(Precedence.ROUTINE.code)
    for level in Precedence:
        if level is not Precedence.ROUTINE:
            code = F.when(precedence == level.value, F.lit(level.code)).otherwise(code)
    return code.cast("byte")


def precedence_name(code: Column) -> Column:
    """The level of a code: ``PRECEDENCES[code]``."""
    return F.element_at(F.array(*[F.lit(p) for p in PRECEDENCES]), code.cast("int") + 1)


def _record_columns(r: Column, ok: Column) -> list[Column]:
    """The parsed columns of a record struct ``r`` (``ok``: the line parsed cleanly).

    Every schema field, in schema order; a message's missing ``origin``/``seq``
    are taken from its ``msg_id``, and a missing ``late`` is false.
    """
    is_message = r.kind.isin("send", "deliver", "control")
    derived = {
        "origin": F.when(is_message, F.coalesce(r.origin, F.substring_index(r.msg_id, ":", 1)))
        .otherwise(r.origin),
        "seq": F.when(is_message, F.coalesce(
            r.seq, F.substring_index(r.msg_id, ":", -1).try_cast("long"))).otherwise(r.seq),
        "late": F.coalesce(r.late, F.lit(False)),
        "repaired": F.coalesce(r.repaired, F.lit(False)),
    }
    return [(ok & _valid(r)).alias("valid"),
            *[derived.get(f.name, r[f.name]).alias(f.name) for f in JOURNAL_SCHEMA.fields],
            precedence_code(r.precedence).alias("prec"),
            # Relays a delivery went through (``via`` absent: direct).
            F.coalesce(F.when(r.via.isNotNull(), F.size(r.via)), F.lit(0)).alias("hops")]


IDENTITY_FIELDS = schema.IDENTITY


def _record_hash(r: Column) -> Column:
    """Identity of a record: equal for lines that parse to the same scalar fields (a replayed line).

    The arrays (``order``, ``seqs``, ``ranges``) are left out: hashing them cost a third of
    the parse, and two lines of one message that differ only there are no replay.
    """
    return F.xxhash64(*[r[name] for name in IDENTITY_FIELDS])


def read_journal_records(spark: SparkSession, paths: Sequence[str],
                         file: Column | None = None, texts: Sequence[str] = ()) -> DataFrame:
    """Journal files -> one row per non-blank line, flagged ``valid``, by the JSON data source.

    Jackson parses only the schema's fields straight into columns, about twice
    as fast as reading text and applying ``from_json``; blank lines are skipped,
    and a torn or mistyped line arrives with ``CORRUPT`` set. ``file`` names
    each line's file (default: Spark's name for it, ``filekeys.file_name``). The record's
    columns are gathered into a struct for ``_record_columns``; Spark folds it
    away and reads the fields directly. ``texts`` are more fields, read as the JSON
    text of their values (never making a line bad) and appended as columns.
    """
    read = READ_SCHEMA if not texts else T.StructType(
        READ_SCHEMA.fields + [T.StructField(name, T.StringType()) for name in texts])
    raw = spark.read.schema(read).options(**READ_OPTIONS).json(list(paths))
    r = F.struct(*[F.col(f.name) for f in JOURNAL_SCHEMA.fields])
    file = file_name() if file is None else file
    return raw.select(file.alias("file"), _record_hash(r).alias("line_hash"),
                      *_record_columns(r, F.col(CORRUPT).isNull()), *texts)


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
        "origin", "seq", "room", "user", "text", "sent_at", "prec",
    )
    per_site = by_message.groupBy("msg_id", "site").agg(
        F.min(content).alias("content"),
        F.min(F.when(is_deliver, F.struct("n", "at", "late", "repaired", "hops"))).alias("first"),
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
                       c.sent_at.alias("sent_at"), c.prec.alias("prec"))).alias("m"),
        F.min("order_min").alias("order_min"),
        F.max("order_max").alias("order_max"),
        F.array_sort(F.collect_list(F.struct(
            F.col("site"),
            F.col("first.n").alias("n"),
            F.col("first.at").alias("at"),
            F.col("first.late").alias("late"),
            F.col("first.repaired").alias("repaired"),
            F.col("first.hops").alias("hops"),
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
        m.prec.alias("prec"),
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


# A message's first delivery at a site (``hops``: relays it went through, 0 when direct),
# and its per-site line counts when not all zero.
DELIVERY = "struct<site:string,n:bigint,at:double,late:boolean,repaired:boolean,hops:int>"
LINE_COUNTS = "struct<site:string,duplicate_lines:bigint,redeliveries:bigint,resends:bigint>"
# The message table the transcript is made from (``flat_messages``, ``onepass.pivot_messages``).
MESSAGE_COLUMNS = ("msg_id", "has_send", "origin", "seq", "room", "user", "text", "sent_at", "prec",
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
        e.site.alias("site"), e.n.alias("n"), e.at.alias("at"), e.late.alias("late"),
        e.repaired.alias("repaired"), e.hops.cast("int").alias("hops")))
    dups: Callable[[Column], Column] = lambda e: (  # noqa: E731
        e.deliver_records - e.deliver_lines + e.send_records - e.send_lines).cast("long")
    redeliveries: Callable[[Column], Column] = lambda e: F.greatest(e.deliver_lines - 1, F.lit(0)).cast("long")  # noqa: E731
    resends: Callable[[Column], Column] = lambda e: F.greatest(e.send_lines - 1, F.lit(0)).cast("long")  # noqa: E731
    return messages.select(
        "msg_id", "has_send", "origin", "seq", "room", "user", "text", "sent_at", "prec", "order_key",
        "order", deliveries.alias("deliveries"),
        F.transform(F.filter(delivered, lambda e: e.late), lambda e: e.site).alias("late_sites"),
        F.array_except(all_sites, F.transform(delivered, lambda e: e.site)).alias("never_arrived"),
        F.aggregate("sites", F.lit(0).cast("long"), lambda acc, e: acc + dups(e)).alias("duplicate_lines"),
        F.aggregate("sites", F.lit(0).cast("long"), lambda acc, e: acc + redeliveries(e)).alias("redeliveries"),
        F.transform(F.filter("sites", lambda e: dups(e) + redeliveries(e) + resends(e) > 0),
                    lambda e: F.struct(e.site.alias("site"), dups(e).alias("duplicate_lines"),
                                       redeliveries(e).alias("redeliveries"),
                                       resends(e).alias("resends"))).alias("line_counts"),
    )


@dataclass
class ReportedPieces:
    """Every site's missing reports as disjoint pieces per origin (``missing.build_pieces``), and
    their bucket rows for ``with_piece`` (``frame``: None when nothing was reported)."""

    pieces: list[Piece]
    frame: DataFrame | None
    shifts: dict[str, int]


PIECE_SCHEMA = ("p_origin string, p_bucket long, p_lo long, p_hi long, reported_by array<string>, "
                "reports array<struct<site:string,at:double>>")


def reported_pieces(spark: SparkSession, pieces: list[Piece]) -> ReportedPieces:
    """The pieces as a small frame for ``with_piece`` (broadcast to its join)."""
    if not pieces:
        return ReportedPieces([], None, {})
    rows, shifts = bucket_rows(pieces)
    return ReportedPieces(pieces, spark.createDataFrame(rows, PIECE_SCHEMA), shifts)


def message_key(msg_id: Column) -> tuple[Column, Column]:
    """(origin, seq) of a ``msg_id`` ``<origin>:<seq>`` with the seq as ``str(int)`` writes a long,
    else nulls (as ``missing.msg_key``)."""
    tail = F.substring_index(msg_id, ":", -1)
    seq = tail.try_cast("long")
    ok = (F.instr(msg_id, ":") > 0) & (seq.cast("string") == tail)
    origin = msg_id.substr(F.lit(1), F.length(msg_id) - F.length(tail) - 1)
    return F.when(ok, origin), F.when(ok, seq)


def with_piece(rows: DataFrame, reported: ReportedPieces) -> DataFrame:
    """``rows`` (with ``msg_id``) and the piece holding each (null when none): ``key_origin``,
    ``key_seq``, ``p_lo``, ``reported_by``, ``reports``. A left join on (origin, bucket), the
    piece's bounds as its condition: each message meets the few pieces of its bucket."""
    origin, seq = message_key(F.col("msg_id"))
    keyed = rows.withColumn("key_origin", origin).withColumn("key_seq", seq)
    if reported.frame is None:
        return keyed.select("*", F.lit(None).cast("long").alias("p_lo"),
                            F.lit(None).cast("array<string>").alias("reported_by"),
                            F.lit(None).cast("array<struct<site:string,at:double>>").alias("reports"))
    shift = lookup(reported.shifts, F.col("key_origin"))     # (null for an origin nobody reported: no match)
    keyed = keyed.withColumn("key_bucket", F.call_function("shiftright", F.col("key_seq"), shift))
    p = F.broadcast(reported.frame)
    cond = ((keyed["key_origin"] == p["p_origin"]) & (keyed["key_bucket"] == p["p_bucket"])
            & keyed["key_seq"].between(p["p_lo"], p["p_hi"]))
    return keyed.join(p, cond, "left").drop("key_bucket", "p_origin", "p_bucket", "p_hi")


def transcript(messages: DataFrame, missing: ReportedPieces) -> DataFrame:
    """``MESSAGE_COLUMNS`` rows -> transcript rows (unsorted): the order as written, and the
    sites that journaled the message ``missing``."""
    return (
        with_piece(messages, missing)
        .select(
            "msg_id", "has_send", "origin", "seq", "room", "user", "text", "sent_at",
            order_display(F.col("order")).alias("order"),
            "order_key", "deliveries", "late_sites", "never_arrived",
            F.coalesce(F.col("reported_by"), F.array().cast("array<string>")).alias("reported_missing_at"),
            precedence_name(F.col("prec")).alias("precedence"), "prec",
            "duplicate_lines", "redeliveries",
        )
    )


def number_transcript(keys: DataFrame) -> DataFrame:
    """Sort keys in global order and add ``gidx``, monotone in that order (not dense).

    ``keys`` are chat messages and control deliveries' messages (``msg_id``,
    ``room``, ``order_key``, ``chat``). ``gidx`` is ``monotonically_increasing_id``
    right after the sort: partition index in the high bits, row within the
    partition in the low 33 bits. Persist the result before ``chat_index``.
    The job sorts only the keys: moving whole transcript rows through a range
    shuffle cost several times more.
    """
    ordered = keys.orderBy(F.asc_nulls_last("order_key"), F.asc("msg_id"), F.asc("chat"))
    return ordered.withColumn("gidx", F.monotonically_increasing_id())


def chat_index(numbered: DataFrame) -> DataFrame:
    """The chat rows of a persisted ``number_transcript`` with ``cidx``: like ``gidx``,
    counting chat rows only (a filter keeps partitions and their order)."""
    return numbered.where("chat").withColumn("cidx", F.monotonically_increasing_id())


def partition_offsets(indexed: DataFrame, index: str = "cidx") -> DataFrame:
    """(part, offset): how many rows come before each partition of a numbered frame."""
    counts = indexed.groupBy(F.shiftright(index, 33).alias("part")).count()
    w = Window.orderBy("part").rowsBetween(Window.unboundedPreceding, -1)
    return counts.select("part", F.coalesce(F.sum("count").over(w), F.lit(0)).cast("long").alias("offset"))


def add_positions(indexed: DataFrame, offsets: DataFrame, index: str = "cidx") -> DataFrame:
    """Add ``position``: dense 0-based rank from ``index`` and ``partition_offsets``."""
    part = F.shiftright(F.col(index), 33)
    return (indexed.withColumn("part", part)
            .join(F.broadcast(offsets), "part", "left")
            .withColumn("position",
                        F.col("offset") + (F.col(index) - F.shiftleft(F.col("part"), 33)))
            .drop("part", "offset"))


def room_positions(positioned: DataFrame) -> DataFrame:
    """Add ``room_position``: 0-based rank of a message in its room's transcript."""
    w = Window.partitionBy("room").orderBy("position")
    return positioned.withColumn("room_position", F.row_number().over(w) - 1)


def room_ordered(positioned: DataFrame) -> DataFrame:
    """The rows hash-partitioned by room and sorted by (room, position) within each
    partition: the layout the per-room JSON files are written from (as ``room_positions``
    leaves rows, without its window)."""
    return positioned.repartition("room").sortWithinPartitions("room", "position")


