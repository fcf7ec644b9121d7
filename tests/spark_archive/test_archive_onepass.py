"""The one pass reads the journals once: one scan, one shuffle shared by both aggregations."""
from __future__ import annotations

from pathlib import Path

from spark_archive import onepass
from spark_archive.journals import list_journal_files


def test_both_aggregations_share_one_scan_and_exchange(spark, known_journals: Path) -> None:
    files = list_journal_files(known_journals)
    sites = sorted({f.path_site for f in files if f.path_site})
    with onepass.shared_shuffle(spark):
        both = onepass.one_pass(onepass.shuffled_lines(spark, [f.path for f in files], sites, 4), sites)
        rows = both.collect()
        plan = both._jdf.queryExecution().executedPlan().toString()
    assert plan.count("ReusedExchange") == 1
    assert plan.count("FileScan json") == 1
    assert sum(1 for r in rows if r["part"] == "m" and r["msg_id"]) == 4
    # The rule is back on once the query has run.
    assert "ColumnPruning" not in (spark.conf.get("spark.sql.optimizer.excludedRules", "") or "")


def test_without_the_shared_shuffle_each_branch_scans(spark, known_journals: Path) -> None:
    """What ``shared_shuffle`` is for: left alone, Spark prunes each branch and scans twice."""
    files = list_journal_files(known_journals)
    sites = sorted({f.path_site for f in files if f.path_site})
    both = onepass.one_pass(onepass.shuffled_lines(spark, [f.path for f in files], sites, 4), sites)
    both.collect()
    plan = both._jdf.queryExecution().executedPlan().toString()
    assert plan.count("FileScan json") == 2
