"""The sortable order key: pure Python and Spark agree, and both keep the global order."""
from __future__ import annotations

import json
import random

from hypothesis import given
from hypothesis import strategies as st
from pyspark.sql import functions as F

from spark_archive.orderkey import STRING_TAG, sortable_key, sortable_key_col
from spark_archive.reference import parse_record

site_names = st.from_regex(r"[A-Za-z][A-Za-z0-9_.-]{0,31}", fullmatch=True)
integers = st.integers(min_value=0, max_value=2**64 - 1)


def test_lamport_key_examples() -> None:
    assert sortable_key([17, "B"]) == bytes([2]) + b"17" + bytes([STRING_TAG]) + b"B\x00"
    assert sortable_key(["017", "B"]) == sortable_key([17, "B"])  # leading zeros ignored
    assert sortable_key([9, "B"]) < sortable_key([10, "A"]) < sortable_key([10, "B"])
    assert sortable_key([3]) < sortable_key([3, "A"])          # a prefix sorts first
    assert sortable_key(None) is None


@st.composite
def same_shape_pairs(draw: st.DrawFn) -> tuple[list, list]:
    """Two order keys of one protocol: integers and names at the same places."""
    shape = draw(st.lists(st.booleans(), min_size=1, max_size=6))
    a = [draw(integers) if is_int else draw(site_names) for is_int in shape]
    b = [draw(integers) if is_int else draw(site_names) for is_int in shape]
    return a, b


@given(same_shape_pairs())
def test_sortable_key_keeps_the_order_of_keys(pair: tuple[list, list]) -> None:
    a, b = pair
    assert (sortable_key(a) < sortable_key(b)) == (tuple(a) < tuple(b))
    assert (sortable_key(a) == sortable_key(b)) == (tuple(a) == tuple(b))


def _random_orders(count: int, seed: int) -> list[list]:
    rng = random.Random(seed)
    names = ["A", "B", "awacs", "Site_9", "x.y-z", "Z" * 32]
    out = []
    for _ in range(count):
        shape = rng.choice([(int, str), (int,), (int, int, str), (str, int),
                            (int, str, int, str, int, str), ()])
        out.append([rng.choice([0, 1, 9, 10, 99, 100, 2**31, 2**63 - 1, 2**64 - 1,
                                rng.randrange(10**6)]) if t is int else rng.choice(names)
                    for t in shape])
    return out


def test_spark_and_python_agree(spark) -> None:
    orders = _random_orders(300, seed=8)
    orders += [[None, "A"], [1.5, "B"], ["-3", 2], [[1], "x"], ["0" * 300, "A"], ["ä", "a"],
               ["007", "0", "00"], ["", " 5", "5\n", "٣", "+1", "1e3"]]
    lines = spark.createDataFrame([(i, json.dumps({"order": o})) for i, o in enumerate(orders)],
                                  "i long, value string")
    keyed = (lines.select("i", F.from_json("value", "order array<string>").alias("r"))
             .select("i", sortable_key_col(F.col("r.order")).alias("key")))
    got = {r["i"]: bytes(r["key"]) for r in keyed.collect()}
    assert got == {i: sortable_key(o) for i, o in enumerate(orders)}
    spark_order = [r["i"] for r in keyed.orderBy("key", "i").collect()]
    python_order = sorted(range(len(orders)), key=lambda i: (sortable_key(orders[i]), i))
    assert spark_order == python_order


def test_a_lone_surrogate_in_a_journal_line_reads_as_spark_reads_it(spark) -> None:
    """JSON's "\\ud800" escape decodes to a lone surrogate, which UTF-8 cannot hold: the reference (and with it the
    driver plan) failed on such a line. It now reads it as Spark's reader does, each lone surrogate as "?" (a pair
    stays the character it escapes), so both plans give the same order key and text, and neither fails."""
    line = ('{"kind":"deliver","site":"A","n":2,"at":1.2,"msg_id":"A:2","origin":"A","seq":2,"order":[2,"\\ud800x"],'
            '"late":false,"room":"ops","user":"u\\udfff","text":"\\ud83d\\ude00 \\udc00","sent_at":1.1}')
    rec = parse_record(line)
    assert rec is not None and rec["raw_order"] == [2, "?x"] and (rec["user"], rec["text"]) == ("u?", "\U0001F600 ?")
    row = (spark.createDataFrame([(line,)], "value string")
           .select(F.from_json("value", "order array<string>, user string, text string").alias("r"))
           .select(sortable_key_col(F.col("r.order")).alias("key"), "r.user", "r.text").collect()[0])
    assert (bytes(row["key"]), row["user"], row["text"]) == (sortable_key(rec["raw_order"]), rec["user"], rec["text"])
