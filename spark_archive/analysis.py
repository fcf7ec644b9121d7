"""Tables computed from the positioned transcript: ordering checks, latency, repairs,
acknowledgements and connectivity. Pure DataFrame-in, DataFrame-out.

Theory of operation
-------------------
``site_deliveries`` explodes the transcript back to one row per kept chat
delivery, and ``control_deliveries`` gives the kept ``control`` records (RCM
deliveries of chat control data) the same shape. Both carry ``gidx``, the
index of their message in one global order (``transforms.number_transcript``
numbers chat and control messages together), so:

* ``divergence`` ranks every ordered delivery of a site, chat and control, in
  the site's order (by ``at``, then ``n``, then ``gidx``) and in the global
  order, and checks each ``late`` flag against the site's *frontier*: the
  furthest message in global order the site had delivered in order before
  (not late, and not flash or immediate, which are delivered on arrival and
  do not move it). A late delivery at or beyond the frontier is
  ``late_unexplained``; one behind it without the flag is ``late_unflagged``.
  A control record delivered ahead is what explains a chat message marked
  late above every chat delivery before it.
* Latency tables read one histogram of chat deliveries per (origin,
  destination, time bucket, precedence, relay hops, bin): percentiles are the
  largest latency in the 1%-wide log-scale bin holding the nearest rank (within
  1% of the exact nearest-rank percentile), for pairs, time buckets, precedence
  levels and direct against relayed deliveries alike.
* ``repairs`` measures each repaired delivery from the site's own ``missing``
  report of the message; ``acknowledgements`` gives every flash and immediate
  message its acknowledgements and the time to the first and the last.
* ``connectivity_intervals`` turns status events into intervals per (site,
  peer) with window functions; ``availability`` sums them up.

Only built-in column and window functions: nothing leaves the JVM.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from contracts.precedence import Precedence
from contracts.status import REPORTED, LinkStatus

from .filekeys import lookup
from .missing import LOST_LISTED
from .transforms import URGENT_CODES, ReportedPieces, precedence_name, with_piece

ORDERED = ("site", "msg_id", "origin", "sent_at", "gidx", "n", "at", "late", "repaired", "hops",
           "prec", "control")


def site_deliveries(positioned: DataFrame) -> DataFrame:
    """Transcript -> one row per chat delivery (the first of a message at a site)."""
    return positioned.select(
        "msg_id", "origin", "sent_at", "gidx", "prec", F.explode("deliveries").alias("e")
    ).select(
        F.col("e.site").alias("site"), "msg_id", "origin", "sent_at", "gidx",
        F.col("e.n").alias("n"), F.col("e.at").alias("at"), F.col("e.late").alias("late"),
        F.col("e.repaired").alias("repaired"), F.col("e.hops").alias("hops"), "prec",
        F.lit(False).alias("control"),
    )


def control_deliveries(control: DataFrame, numbered: DataFrame) -> DataFrame:
    """Kept control records (``msg_id``, ``site``, ``at``, ``late``) -> the shape of
    ``site_deliveries``, with ``gidx`` from the numbered keys."""
    gidx = numbered.where(~F.col("chat")).select("msg_id", "gidx")
    return control.join(gidx, "msg_id").select(
        "site", "msg_id", "origin", F.lit(None).cast("double").alias("sent_at"), "gidx",
        F.lit(None).cast("long").alias("n"), "at", "late", F.lit(False).alias("repaired"),
        F.lit(0).alias("hops"), F.lit(Precedence.ROUTINE.code).cast("byte").alias("prec"),
        F.lit(True).alias("control"))


def site_line_counts(messages: DataFrame) -> DataFrame:
    """Per site: duplicate lines, re-deliveries and resends, from the messages' ``line_counts``."""
    e = F.col("e")
    return (messages.select(F.explode("line_counts").alias("e"))
            .groupBy(e.site.alias("site"))
            .agg(F.sum(e.duplicate_lines).alias("duplicate_lines"),
                 F.sum(e.redeliveries).alias("redeliveries"),
                 F.sum(e.resends).alias("resends")))


DIVERGENCE_COUNTS = ("deliveries", "late", "out_of_place", "order_breaks", "max_displacement",
                     "control_deliveries", "control_late", "repaired", "late_unexplained",
                     "late_unflagged")


def divergence(ordered: DataFrame, counts: DataFrame, sites: Sequence[str]) -> DataFrame:
    """Per site: how its delivery order differs from the global order, and its late flags checked.

    ``ordered`` holds every ordered delivery (``site_deliveries`` and
    ``control_deliveries``, ``ORDERED`` columns), ``counts`` come from
    ``site_line_counts``. ``site_position`` is a delivery's rank in the site's
    order (``at``, then ``n``, then global order), ``transcript_position`` its
    rank in the global order restricted to what the site delivered;
    displacement is their absolute difference. A delivery is out of place when
    the two differ; an order break is a delivery ordered before the previous
    one. ``deliveries`` and ``late`` count chat deliveries, ``control_*``
    control records; the order measures count both.
    """
    # Narrow rows through the site shuffle, the site as its index in ``sites``: the
    # windows' sorts compare the site first, an int faster than a string (at 10M
    # records 4.7 against 5.7 s). Only ``sites`` are reported: deliveries at any other
    # site (none, when ``sites`` are the mission's) share the null index, left out below.
    delivered = ordered.select(lookup({site: i for i, site in enumerate(sites)}, F.col("site")).alias("s"),
                               "n", "at", "gidx", "late", "prec", "repaired", "control")
    by_site = Window.partitionBy("s").orderBy("at", "n", "gidx")
    before = by_site.rowsBetween(Window.unboundedPreceding, -1)
    by_order = Window.partitionBy("s").orderBy("gidx")
    in_order = ~F.col("late") & ~F.col("prec").isin(*URGENT_CODES)
    # One select: the three functions over the site's order share one Window operator
    # (one pass over each site's buffered rows; chained withColumn calls made two).
    ranked = delivered.select(
        "*",
        F.row_number().over(by_order).alias("transcript_position"),
        F.row_number().over(by_site).alias("site_position"),
        F.lag("gidx").over(by_site).alias("previous_gidx"),
        F.max(F.when(in_order, F.col("gidx"))).over(before).alias("frontier"))
    displacement = F.abs(F.col("site_position") - F.col("transcript_position"))
    chat, control, late = ~F.col("control"), F.col("control"), F.col("late")
    frontier, gidx = F.col("frontier"), F.col("gidx")
    count: Callable[[Column], Column] = lambda condition: F.count(F.when(condition, 1))  # noqa: E731
    names = F.array(*[F.lit(site) for site in sites]) if sites else F.array().cast("array<string>")
    per_site = ranked.groupBy("s").agg(
        count(chat).alias("deliveries"),
        count(chat & late).alias("late"),
        count(displacement > 0).alias("out_of_place"),
        count(gidx < F.col("previous_gidx")).alias("order_breaks"),
        F.max(displacement).alias("max_displacement"),
        F.avg(displacement).alias("mean_displacement"),
        count(control).alias("control_deliveries"),
        count(control & late).alias("control_late"),
        count(F.col("repaired")).alias("repaired"),
        count(late & (frontier.isNull() | (gidx > frontier))).alias("late_unexplained"),
        count(~late & (gidx < frontier)).alias("late_unflagged"),
    ).select(F.element_at(names, F.col("s") + 1).alias("site"), "*").drop("s")
    everyone = ordered.sparkSession.createDataFrame([(s,) for s in sites], "site string")
    zero = F.lit(0).cast("long")
    return (everyone.join(per_site, "site", "left").join(counts, "site", "left")
            .select("site",
                    *[F.coalesce(c, zero).alias(c) for c in DIVERGENCE_COUNTS],
                    F.coalesce("mean_displacement", F.lit(0.0)).alias("mean_displacement"),
                    *[F.coalesce(c, zero).alias(c) for c in
                      ("duplicate_lines", "redeliveries", "resends")]))


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
                    .alias("never_arrived_reported")))


# Percentiles come from a histogram, not a digest per group: values are binned on
# a log scale (bins 1% wide, signed, from a microsecond), the bins counted per
# group by a hash aggregation, and each percentile is the largest value in the
# bin holding its nearest rank (rank = ceil(p * count)): a value that occurred,
# within 1% of the exact nearest-rank percentile.
LATENCY_BIN_WIDTH = 0.01
_FLOOR_SECONDS = 1e-6


def value_bin(value: Column) -> Column:
    """The histogram bin of a duration in seconds (signed: negative durations bin below zero)."""
    magnitude = F.floor(F.log(F.greatest(F.abs(value), F.lit(_FLOOR_SECONDS)) / F.lit(_FLOOR_SECONDS))
                        / F.log1p(F.lit(LATENCY_BIN_WIDTH)))
    return F.when(value >= 0, magnitude).otherwise(-magnitude - 1)


def binned(rows: DataFrame, keys: Sequence[Column | str], value: Column,
           sums: dict[str, Column] | None = None) -> DataFrame:
    """Histogram of ``value`` per group of ``keys``: ``c``, ``top`` (largest value),
    ``total`` and a sum of each of ``sums`` per (keys, ``bin``)."""
    v = value
    return (rows.groupBy(*keys, value_bin(v).alias("bin"))
            .agg(F.count(F.lit(1)).alias("c"), F.max(v).alias("top"), F.sum(v).alias("total"),
                 *[F.sum(c.cast("long")).alias(name) for name, c in (sums or {}).items()]))


def percentile_table(hist: DataFrame, keys: Sequence[str], count: str = "deliveries",
                     sums: Sequence[str] = ()) -> DataFrame:
    """Per group of ``keys`` of a ``binned`` histogram: ``count``, the ``sums``,
    p50/p95/p99 (nearest rank, from the bins), max and mean."""
    hist = (hist.groupBy(*keys, "bin")
            .agg(F.sum("c").alias("c"), F.max("top").alias("top"), F.sum("total").alias("total"),
                 *[F.sum(s).alias(s) for s in sums]))
    upto = Window.partitionBy(*keys).orderBy("bin").rowsBetween(Window.unboundedPreceding, 0)
    ranked = hist.withColumn("cum", F.sum("c").over(upto)) \
        .withColumn("all", F.sum("c").over(Window.partitionBy(*keys)))

    def percentile(p: float) -> Column:
        reached = F.col("cum") >= F.greatest(F.ceil(F.col("all") * F.lit(p) - F.lit(1e-9)), F.lit(1))
        return F.min_by(F.when(reached, F.col("top")), F.when(reached, F.col("bin")))

    return (ranked.groupBy(*keys)
            .agg(F.sum("c").alias(count), *[F.sum(s).alias(s) for s in sums],
                 percentile(0.5).alias("p50"), percentile(0.95).alias("p95"),
                 percentile(0.99).alias("p99"), F.max("top").alias("max"),
                 (F.sum("total") / F.sum("c")).alias("mean")))


def latency_histogram(chat: DataFrame, start: float, bucket_seconds: float) -> DataFrame:
    """Latency bins of chat deliveries (``at`` − ``sent_at``) per (origin, destination,
    ``sent_at`` time bucket, precedence, relay hops): every latency table reads it."""
    bucket = F.floor((F.col("sent_at") - F.lit(start)) / F.lit(bucket_seconds))
    rows = chat.where(F.col("sent_at").isNotNull())
    return binned(rows, [F.col("origin"), F.col("site").alias("destination"),
                         (F.lit(start) + bucket * F.lit(bucket_seconds)).alias("bucket_start"),
                         "prec", "hops"],
                  F.col("at") - F.col("sent_at"),
                  {"late": F.col("late"), "repaired": F.col("repaired")})


def latency_by_pair(hist: DataFrame) -> DataFrame:
    """Delivery latency per origin/destination pair, with relayed and repaired counts."""
    hist = hist.withColumn("relayed", F.when(F.col("hops") > 0, F.col("c")).otherwise(F.lit(0)))
    return percentile_table(hist, ("origin", "destination"), sums=("late", "relayed", "repaired"))


def latency_over_time(hist: DataFrame) -> DataFrame:
    """Latency per origin/destination pair per time bucket of ``sent_at``."""
    return percentile_table(hist, ("origin", "destination", "bucket_start"), sums=("late",))


def _remote(hist: DataFrame) -> DataFrame:
    return hist.where(F.col("origin") != F.col("destination"))


def latency_by_precedence(hist: DataFrame) -> DataFrame:
    """Latency of deliveries to other sites per precedence level."""
    table = percentile_table(_remote(hist), ("prec",), sums=("late",))
    return table.select(precedence_name(F.col("prec")).alias("precedence"), "*").drop("prec")


def latency_by_route(hist: DataFrame) -> DataFrame:
    """Latency of deliveries to other sites by relay hops (0: direct), with each one's share."""
    table = percentile_table(_remote(hist), ("hops",), sums=("late",))
    share = F.col("deliveries") / F.sum("deliveries").over(Window.partitionBy())
    route = F.when(F.col("hops") == 0, F.lit("direct")) \
        .otherwise(F.concat(F.lit("relayed, "), F.col("hops").cast("string"), F.lit(" hop(s)")))
    return table.select("hops", route.alias("route"), "deliveries", share.alias("share"), "late",
                        "p50", "p95", "p99", "max", "mean")


def repairs(positioned: DataFrame, missing: ReportedPieces) -> DataFrame:
    """Per origin/destination pair: repaired deliveries and the repair delay (from the
    destination's earliest ``missing`` report of the message to the repaired delivery)."""
    # Only messages with a repaired delivery are exploded (a compiled test, not a lambda).
    chat = site_deliveries(positioned.where(F.array_contains(F.col("deliveries.repaired"), True)))
    # The destination's report among the piece's (a lambda, on the few repaired deliveries only).
    mine = F.filter("reports", lambda x: x["site"] == F.col("site"))
    repaired = (with_piece(chat.where(F.col("repaired")), missing)
                .withColumn("reported_at", F.get(mine, 0)["at"])
                .select("origin", F.col("site").alias("destination"),
                        (F.col("at") - F.col("reported_at")).alias("delay"),
                        (F.col("at") - F.col("sent_at")).alias("latency")))
    totals = repaired.groupBy("origin", "destination").agg(
        F.count(F.lit(1)).alias("repaired"), F.avg("latency").alias("latency_mean"),
        F.max("latency").alias("latency_max"))
    delays = percentile_table(binned(repaired.where(F.col("delay").isNotNull()),
                                     ["origin", "destination"], F.col("delay")),
                              ("origin", "destination"), count="reported")
    return totals.join(delays, ["origin", "destination"], "left").select(
        "origin", "destination", "repaired", F.coalesce("reported", F.lit(0).cast("long")).alias("reported"),
        *[F.col(c).alias(f"delay_{c}") for c in ("p50", "p95", "max", "mean")],
        "latency_mean", "latency_max")


def acknowledgements(positioned: DataFrame, acks: DataFrame) -> DataFrame:
    """Every flash and immediate message with its acknowledgements (``acks``: one row per
    message, site and user, its earliest ``at``) and the seconds from sending to the
    first and to the last."""
    urgent = positioned.where(F.col("prec").isin(*URGENT_CODES)).select(
        "msg_id", "position", "origin", "room", "precedence", "sent_at")
    who = F.concat(F.coalesce(F.col("user"), F.lit("?")), F.lit("@"), F.col("site"))
    per_message = acks.groupBy("msg_id").agg(
        F.count(F.lit(1)).alias("acknowledgements"), F.min("at").alias("first_at"),
        F.max("at").alias("last_at"), F.array_sort(F.collect_list(who)).alias("acknowledged_by"))
    joined = urgent.join(per_message, "msg_id", "left")
    return joined.select(
        "msg_id", "position", "origin", "room", "precedence", "sent_at",
        F.coalesce("acknowledgements", F.lit(0).cast("long")).alias("acknowledgements"),
        (F.col("first_at") - F.col("sent_at")).alias("first_seconds"),
        (F.col("last_at") - F.col("sent_at")).alias("last_seconds"),
        F.coalesce("acknowledged_by", F.array().cast("array<string>")).alias("acknowledged_by"))


def acknowledgement_levels(table: DataFrame) -> DataFrame:
    """Per level of an ``acknowledgements`` table: messages, how many were acknowledged,
    and the time to the first acknowledgement (percentiles over acknowledged messages)."""
    counts = table.groupBy("precedence").agg(
        F.count(F.lit(1)).alias("messages"),
        F.count(F.when(F.col("acknowledgements") > 0, 1)).alias("acknowledged"),
        F.sum("acknowledgements").alias("acknowledgements"))
    times = percentile_table(binned(table.where(F.col("first_seconds").isNotNull()), ["precedence"],
                                    F.col("first_seconds")), ("precedence",), count="timed")
    return counts.join(times, "precedence", "left").select(
        "precedence", "messages", "acknowledged", "acknowledgements",
        *[F.col(c).alias(f"first_{c}") for c in ("p50", "p95", "max", "mean")])


def precedence_counts(positioned: DataFrame) -> DataFrame:
    """Messages per precedence level."""
    return positioned.groupBy("prec").agg(F.count(F.lit(1)).alias("messages")).select(
        precedence_name(F.col("prec")).alias("precedence"), "messages", "prec")


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
               .select("site", "peer", F.lit(start).alias("at"), F.lit(LinkStatus.DISCONNECTED.value).alias("status"),
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
            .where(F.col("seconds") > 0))


def availability(intervals: DataFrame) -> DataFrame:
    """Per (site, peer): seconds connected / suspected / disconnected and the connected fraction."""
    sums = [F.sum(F.when(F.col("status") == s, F.col("seconds")).otherwise(0.0)).alias(f"{s}_seconds")
            for s in REPORTED]
    total = sum((F.col(f"{s}_seconds") for s in REPORTED), F.lit(0.0))
    return (intervals.groupBy("site", "peer").agg(*sums)
            .withColumn("availability", F.when(total > 0, F.col("connected_seconds") / total)
                        .otherwise(F.lit(0.0))))


def all_pairs(status: DataFrame, sites: Sequence[str]) -> DataFrame:
    """Every ordered pair of mission sites, plus any (site, peer) named by a status event."""
    grid = status.sparkSession.createDataFrame([(a, b) for a in sites for b in sites if a != b],
                                               "site string, peer string")
    return grid.unionByName(status.select("site", "peer")).distinct()



def lost_frames(positioned: DataFrame, missing: ReportedPieces) -> tuple[DataFrame, DataFrame]:
    """What ``missing.lost_table`` needs of the transcript, never a row per reported seq:
    per piece, the messages seen in it and the highest; and the runs of unseen seqs before
    each seen one (a window over the piece's seen seqs), the first ``LOST_LISTED`` by (origin, first)."""
    seen = with_piece(positioned.where(F.size("reported_missing_at") > 0).select("msg_id"), missing) \
        .where(F.col("p_lo").isNotNull())
    prev = F.lag("key_seq").over(Window.partitionBy("key_origin", "p_lo").orderBy("key_seq"))
    runs = (seen.select(F.col("key_origin").alias("origin"), F.col("p_lo").alias("lo"),
                        F.coalesce(prev + 1, F.col("p_lo")).alias("first"),
                        F.try_subtract(F.col("key_seq"), F.lit(1)).alias("last"))
            .where(F.col("first") <= F.col("last"))
            .orderBy("origin", "first").limit(LOST_LISTED))
    counts = seen.groupBy(F.col("key_origin").alias("origin"), F.col("p_lo").alias("lo")).agg(
        F.count(F.lit(1)).alias("seen"), F.max("key_seq").alias("top"))
    return runs, counts
