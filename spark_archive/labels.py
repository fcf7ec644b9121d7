"""Security labels in the archive: traffic per label and an independent leak check, computed by Spark.

Theory of operation
-------------------
A labeled mission's chat servers journal each message's ``label``
(``{"level", "caveats"}``) on its ``send`` and ``deliver`` records, and at
every start a ``clearance`` record: what the site may hold, with the mission's
levels (lowest first) and caveats (DESIGN.md, Contract 3). The archive does
not trust the servers' filtering: it checks every site's journal itself.

``label_tables`` runs one Spark job over the journals (both plans run it: the
driver plan's tables are computed in this process, but the check is Spark's
alone, never a reading of files in the driver). Each line's label fields are
read as the JSON text of their values (``schema.LABEL_FIELDS``,
``transforms.read_journal_records(texts=...)``) and parsed here, so a malformed
label is a label the check cannot read, never a bad line that would hide it.
Among the usable ``send`` and ``deliver`` records (the transcript's):

* *traffic per label*: per label (level and sorted caveats; none: unlabeled),
  the distinct messages of its records and the distinct deliveries (site,
  message) (``LABEL_COLUMNS``). A label is spelled for people by
  ``contracts.labels`` (``str(Label)``: ``SECRET//REL TO GBR, USA``).
* *leaks*: a labeled record held at a site whose clearance does not dominate
  its label. The clearance is the site's *latest* ``clearance`` record
  overall (the largest ``at``): the journal as it stands is judged against
  what the site may hold now, as every reader of the journal does (a
  clearance lowered later makes content held from before a leak). Dominance
  is read from that record alone: the label's level ranks at most the
  clearance's in the record's ``levels`` and the clearance holds every caveat
  of the label. A labeled record is a leak too when its site journaled no
  usable clearance, when its level is not in ``levels``, or when its label
  cannot be read: dominance must be shown, not assumed. A leak is counted once
  per (site, message); the first ``LEAKS_LISTED`` are listed (``LEAK_COLUMNS``).
* *withheld*: (message, site) pairs without a delivery where the site's
  latest usable clearance does not dominate the message's label: need-to-know
  routing never sent the message there. The transcript's ``never_arrived``
  counts them too (it knows no labels); ``never_arrived - withheld`` is what
  was addressed to a site and never arrived.

Unlabeled journals (no ``clearance`` record anywhere: ``labeled``) need no
job: ``unlabeled_tables`` gives every message under "unlabeled" from the
totals the plans already have, and no leak. (A labeled record in a mission
where no site ever journaled its clearance is therefore not checked: such a
mission was not run as a labeled one.)
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from contracts.journal import FieldType
from contracts.labels import Label

from . import schema
from . import transforms as tf
from .outputs import LEAK_COLUMNS, SMALL_TABLES, collect_tables, sort_rows
from .session import materialize, release

LEAKS_LISTED = 20
UNLABELED = "unlabeled"
UNREADABLE = "(unreadable label)"

# A label's JSON, parsed: a level and its caveats (absent: none).
_LABEL = cast(T.StructType, tf.SPARK_TYPES[FieldType.LABEL])  # a StructType there (typed as any DataType)
_STRS = T.ArrayType(T.StringType())
_TEXTS = tuple(f.name for f in schema.LABEL_FIELDS)


def labeled(site_counts: Iterable[Mapping[str, Any]]) -> bool:
    """Whether the journals are a labeled mission's: some site journaled a clearance record."""
    return any(r.get("clearance_records", 0) > 0 for r in site_counts)


def spelled(level: str | None, caveats: Sequence[str] | None, rank: int = -1) -> str:
    """A label as people write it (``contracts.labels``); no level: unlabeled."""
    if level is None:
        return UNLABELED
    return str(Label(level, rank, frozenset(caveats or ())))


def unlabeled_tables(totals: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """The label tables of unlabeled journals: every message and delivery unlabeled, no leak."""
    messages, deliveries = int(totals.get("messages") or 0), int(totals.get("deliveries") or 0)
    rows: list[dict[str, Any]] = [{"label": UNLABELED, "level": None, "caveats": [], "rank": None,
                                   "messages": messages, "deliveries": deliveries}] if messages else []
    return {"labels": rows, "leaks": [], "leak_total": [{"count": 0}], "withheld": [{"count": 0}]}


def _parsed(text: Column) -> Column:
    """A label's JSON text -> struct(level, caveats); null when absent, level null when unreadable."""
    return F.from_json(text, _LABEL)


def _readable(text: Column, parsed: Column) -> Column:
    """Absent, or a label whose level and caveats (when given) parsed: caveats of another type are not read as
    none (that would hide them)."""
    return text.isNull() | (parsed.level.isNotNull()
                            & (parsed.caveats.isNotNull() | F.get_json_object(text, "$.caveats").isNull()))


def _not_dominated(lab: Column, clr: Column, levels: Column) -> Column:
    """Why clearance ``clr`` (read with the ``levels`` of its record) does not dominate the readable label
    ``lab``: "no clearance", "unknown level", "level", "caveats"; null when it does."""
    rank = F.array_position(levels, lab.level)
    held_rank = F.array_position(levels, clr.level)
    missing_caveats = F.size(F.array_except(F.coalesce(lab.caveats, F.array().cast(_STRS)),
                                            F.coalesce(clr.caveats, F.array().cast(_STRS))))
    return (F.when(clr.level.isNull() | levels.isNull() | (held_rank == 0), F.lit("no clearance"))
            .when(rank == 0, F.lit("unknown level"))
            .when(rank > held_rank, F.lit("level"))
            .when(missing_caveats > 0, F.lit("caveats")))


def _held(records: DataFrame, clearances: DataFrame) -> DataFrame:
    """Labeled records with their site's latest clearance and why each is a leak (``reason``: null if not)."""
    reason = F.when(~F.col("readable"), F.lit("unreadable label")).otherwise(
        _not_dominated(F.col("lab"), F.col("clr"), F.col("levels")))
    return (records.where(F.col("label").isNotNull()).join(clearances, "site", "left")
            .withColumn("reason", reason))


def _withheld(records: DataFrame, clearances: DataFrame) -> DataFrame:
    """(message, site) pairs without a delivery where the site's latest clearance does not dominate the message's
    readable label (a message with several labels: the greatest text of them): need-to-know routing never sent
    the message there. Sites without a usable clearance are left out (they hold nothing labeled lawfully)."""
    labeled = (records.where(F.col("readable") & F.col("label").isNotNull())
               .groupBy("msg_id").agg(F.max(F.to_json("lab")).alias("lab_text"))
               .select("msg_id", F.from_json("lab_text", _LABEL).alias("lab")))
    usable = clearances.where(F.col("clr.level").isNotNull() & (F.array_position("levels", F.col("clr.level")) > 0))
    delivered = records.where(F.col("kind") == "deliver").select("site", "msg_id")
    pairs = labeled.crossJoin(usable.select("site", "clr", "levels"))
    return (pairs.where(_not_dominated(F.col("lab"), F.col("clr"), F.col("levels")).isNotNull())
            .join(delivered, ["site", "msg_id"], "left_anti"))


def label_frames(narrow: DataFrame) -> dict[str, DataFrame]:
    """Traffic per label, the first leaks, the leak count and the latest clearances as Spark frames, from the
    journals' usable send, deliver and clearance records (``narrow_records``; see the module doc)."""
    records = narrow.where(F.col("kind").isin("send", "deliver")).select(
        "site", "kind", "msg_id", "at", "label", _parsed(F.col("label")).alias("lab"))
    records = records.withColumn("readable", _readable(F.col("label"), F.col("lab")))
    latest = (narrow.where(F.col("kind") == "clearance")
              .groupBy("site").agg(F.max(F.struct("at", "clearance", "levels")).alias("c")))
    clearances = latest.select(
        "site", _parsed(F.col("c.clearance")).alias("clr"), F.from_json(F.col("c.levels"), _STRS).alias("levels"),
        F.col("c.clearance").alias("clearance_text"), F.col("c.at").alias("clearance_at"))
    caveats = F.array_sort(F.coalesce(F.col("lab.caveats"), F.array().cast(_STRS)))
    keyed = records.select(
        "site", "kind", "msg_id",
        F.when(F.col("label").isNull(), F.lit(UNLABELED)).when(~F.col("readable"), F.lit(UNREADABLE)).alias("key"),
        F.when(F.col("readable"), F.col("lab.level")).alias("level"), caveats.alias("caveats"))
    traffic = keyed.groupBy("key", "level", "caveats").agg(
        F.count_distinct("msg_id").alias("messages"),
        F.count_distinct(F.when(F.col("kind") == "deliver", F.struct("site", "msg_id"))).alias("deliveries"))
    held = _held(records, clearances).where(F.col("reason").isNotNull())
    leaks = held.groupBy("site", "msg_id").agg(
        F.array_sort(F.collect_set("kind")).alias("kinds"), F.min("at").alias("at"),
        F.min("label").alias("label"), F.min("clearance_text").alias("clearance"), F.min("reason").alias("reason"))
    return {"traffic": traffic, "listed": leaks.orderBy("site", "at", "msg_id").limit(LEAKS_LISTED),
            "total": leaks.agg(F.count(F.lit(1)).alias("count")),
            "withheld": _withheld(records, clearances).agg(F.count(F.lit(1)).alias("count")),
            "clearances": clearances.select("site", "levels", "clearance_at")}


def narrow_records(spark: SparkSession, paths: Sequence[str]) -> DataFrame:
    """The usable send, deliver and clearance records, with their label fields as JSON text: one scan."""
    read = tf.read_journal_records(spark, paths, texts=_TEXTS)
    return read.where(F.col("valid") & F.col("kind").isin("send", "deliver", "clearance")).select(
        "site", "kind", "msg_id", "at", *_TEXTS)


def label_tables(spark: SparkSession, paths: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
    """The label tables gathered to the driver: ``labels`` (``LABEL_COLUMNS``; ranked by the levels of the
    latest clearance record), ``leaks`` (the first ``LEAKS_LISTED``, ``LEAK_COLUMNS``) and ``leak_total``.
    The journals are read once (kept while the four small queries run)."""
    narrow = materialize(narrow_records(spark, paths))
    try:
        got = collect_tables(label_frames(narrow))
    finally:
        release(narrow)
    latest = max(got["clearances"], key=lambda r: (r["clearance_at"], r["site"]), default=None)
    ranks = {level: i for i, level in enumerate((latest or {}).get("levels") or [])}
    labels = []
    for r in got["traffic"]:
        readable = r["key"] is None
        rank = ranks.get(r["level"]) if readable else None
        labels.append({"label": spelled(r["level"], r["caveats"], -1 if rank is None else rank) if readable
                       else r["key"], "level": r["level"] if readable else None,
                       "caveats": r["caveats"] if readable else [], "rank": rank,
                       "messages": r["messages"], "deliveries": r["deliveries"]})
    leaks = [{**r, "label": _spell_text(r["label"]), "clearance": _spell_text(r["clearance"])}
             for r in got["listed"]]
    return {"labels": sort_rows(labels, SMALL_TABLES["labels"][2]), "leaks": sort_rows(leaks, SMALL_TABLES["leaks"][2]),
            "leak_total": got["total"], "withheld": got["withheld"]}


def _spell_text(text: str | None) -> str | None:
    """A label's JSON text as people write it (the text itself when it is no readable label)."""
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return text
    if isinstance(value, dict) and isinstance(value.get("level"), str):
        caveats = value.get("caveats") or []
        if isinstance(caveats, list) and all(isinstance(c, str) for c in caveats):
            return spelled(value["level"], caveats)
    return text


def summary_section(tables: Mapping[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """The summary's entries: ``leaks`` (the count), the first leaks listed, ``withheld`` and traffic per label."""
    return {
        "leaks": int(tables["leak_total"][0]["count"]),
        # Message x site pairs need-to-know routing never sent a message to (in never_arrived too, not lost).
        "withheld": int(tables["withheld"][0]["count"]),
        "leaks_listed": [{c: r[c] for c in LEAK_COLUMNS} for r in tables["leaks"]],
        "labels": {r["label"]: {"messages": r["messages"], "deliveries": r["deliveries"]}
                   for r in tables["labels"]},
    }
