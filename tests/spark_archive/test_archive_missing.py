"""Missing reports as pieces of seq ranges (spark_archive/missing.py), without Spark: the same
answers as listing every reported seq, with work that follows the ranges."""
from __future__ import annotations

import random
import time

from contracts.journal import missing_ranges as record_ranges
from spark_archive.missing import (
    BUCKETS,
    Lookup,
    bucket_rows,
    build_pieces,
    lost_in_memory,
    msg_key,
)


def listed(reports) -> dict[str, dict[str, float]]:
    """What the first round's archive built: msg_id -> {site: earliest report}, seq by seq."""
    out: dict[str, dict[str, float]] = {}
    for origin, site, at, ranges in reports:
        for first, last in ranges:
            for seq in range(first, last + 1):
                by = out.setdefault(f"{origin}:{seq}", {})
                by[site] = min(by.get(site, at), at)
    return out


def test_pieces_answer_as_the_listed_seqs_do_on_random_reports() -> None:
    for seed in range(300):
        rnd = random.Random(seed)
        reports = []
        for _ in range(rnd.randint(0, 6)):
            pairs = [[a, a + rnd.randint(0, 6)] for a in (rnd.randint(-3, 30) for _ in range(rnd.randint(0, 3)))]
            reports.append((rnd.choice("AB"), rnd.choice("XYZ"), float(rnd.randint(0, 5)), record_ranges(pairs, None)))
        expected = listed(reports)
        pieces = build_pieces(reports)
        lookup = Lookup(pieces)
        assert {f"{o}:{q}": lookup.reports(f"{o}:{q}") for o in "AB" for q in range(-5, 40)} == {
            f"{o}:{q}": expected.get(f"{o}:{q}", {}) for o in "AB" for q in range(-5, 40)}, seed
        seen = list(dict.fromkeys(f"{rnd.choice('AB')}:{rnd.randint(-3, 40)}" for _ in range(rnd.randint(0, 20))))
        cap = rnd.choice([3, 1000])
        rows, total = lost_in_memory(pieces, [*seen, "A:007", "no seq"], cap)
        lost = sorted((m.split(":")[0], int(m.split(":")[1]), sorted(by)) for m, by in expected.items()
                      if m not in seen)
        assert total == len(lost) and [(r["origin"], r["seq"], r["reported_by"]) for r in rows] == lost[:cap], seed


def test_a_range_of_2_53_seqs_costs_what_its_ranges_cost() -> None:
    t0 = time.process_time()
    reports = [("A", "B", 5.0, record_ranges([[1, 2**53]], None)), ("A", "C", 4.0, [(7, 7), (2**40, 2**40 + 9)])]
    pieces = build_pieces(reports)
    assert [(p.lo, p.hi, p.sites) for p in pieces] == [
        (1, 6, ["B"]), (7, 7, ["B", "C"]), (8, 2**40 - 1, ["B"]), (2**40, 2**40 + 9, ["B", "C"]),
        (2**40 + 10, 2**53, ["B"])]
    rows, shifts = bucket_rows(pieces)
    assert len(rows) <= BUCKETS + 1 + len(pieces) and max(r[1] for r in rows) == 2**53 >> shifts["A"] <= BUCKETS
    lost, total = lost_in_memory(pieces, ["A:1", "A:3", "A:7"], listed=5)
    assert total == 2**53 - 3 and [r["msg_id"] for r in lost] == ["A:2", "A:4", "A:5", "A:6", "A:8"]
    assert lost[-1]["reported_by"] == ["B"] and time.process_time() - t0 < 2.0


def test_records_and_msg_ids_are_read_as_the_spark_plan_reads_them() -> None:
    assert record_ranges([[9, 12], [1, 3], [4, 4], [7, 2], [5], None, [1, True], [2**63, 2**63]], [99]) == [
        (1, 4), (9, 12)]                                       # ranges win over seqs; malformed pairs ignored
    assert record_ranges(None, [5, None, 3, 4]) == [(3, 5)] and record_ranges(None, None) == []
    assert msg_key("a:b:5") == ("a:b", 5) and msg_key("A:-12") == ("A", -12)
    assert [msg_key(m) for m in ("A:05", "A:-0", "A: 5", "A:+5", "A", "A:", "A:9223372036854775808")] == [None] * 7
