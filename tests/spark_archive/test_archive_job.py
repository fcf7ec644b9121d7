"""The archive job end to end (in-process) on hand-built journals with known answers."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from spark_archive.job import TRANSCRIPT_COLUMNS, run_archive
from spark_archive.orderkey import sortable_key
from spark_archive.tracks import TRACK_COLUMNS

SITES = ["A", "B", "C", "D", "E"]

# The whole job runs in the first test's set-up: allow for a busy 2-core machine.
pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module", params=["driver", "spark"])
def archive(request, spark, known_journals: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """The whole job, once per plan: every test below holds for both."""
    out = tmp_path_factory.mktemp(f"archive-{request.param}")
    summary = run_archive(spark, known_journals, out, report_rows=1, plan=request.param)
    assert summary["plan"] == request.param
    return out, summary


def d(site: str, n: int, at: float, late: bool = False) -> tuple:
    return (site, n, at, late, False, 0)


def test_transcript_in_global_order_with_late_and_never(spark, archive) -> None:
    out, _ = archive
    actual = spark.read.parquet(str(out / "transcript")).select(*TRANSCRIPT_COLUMNS)
    rows = [
        # position, room, room_position, msg_id, origin, seq, user, text, sent_at, order, order_key,
        # deliveries (first per site), late_sites, never_arrived, reported_missing_at (, precedence)
        (0, "ops", 0, "A:1", "A", 1, "alice", "hello", 101.0, ["1", "A"], sortable_key([1, "A"]),
         [d("A", 1, 101.1), d("B", 2, 102.5, True), d("C", 2, 103.5, True)],
         ["B", "C"], ["D", "E"], []),
        (1, "ops", 1, "B:1", "B", 1, "bob", "copy", 102.0, ["2", "B"], sortable_key([2, "B"]),
         [d("A", 2, 103.0), d("B", 1, 102.1)], [], ["C", "D", "E"], []),
        (2, "intel", 0, "B:2", "B", 2, "bob", "second", 104.0, ["3", "B"], sortable_key([3, "B"]),
         [d("A", 4, 108.0, True), d("B", 3, 104.1)], ["A"], ["C", "D", "E"], []),
        (3, "intel", 1, "C:1", "C", 1, "carol", "fires", 103.0, ["3", "C"], sortable_key([3, "C"]),
         [d("A", 3, 105.0), d("C", 1, 103.2)], [], ["B", "D", "E"], ["B"]),
    ]
    expected = spark.createDataFrame([row + ("routine",) for row in rows], actual.schema)
    assertDataFrameEqual(actual, expected)
    # The readable copy holds the same rows, one directory per room.
    readable = spark.read.json(str(out / "transcript_json"))
    assert sorted(r["msg_id"] for r in readable.where(F.col("room") == "intel").collect()) == ["B:2", "C:1"]


def test_summary_counts_torn_duplicate_and_empty(archive) -> None:
    out, summary = archive
    assert json.loads((out / "summary.json").read_text())["messages"] == 4
    assert summary["sites"] == SITES
    assert (summary["files"], summary["empty_files"]) == (6, 1)
    assert summary["bad_lines"] == 2            # the torn line and the garbage line
    assert summary["files_with_bad_lines"] == 2
    assert summary["duplicate_lines"] == 1      # A replayed B:2's delivery
    assert summary["redeliveries"] == 1         # A re-delivered C:1 with n=5
    assert summary["duplicate_status_lines"] == 1
    assert summary["deliveries"] == 9
    assert summary["late_deliveries"] == 3      # A:1 at B and C, B:2 at A
    assert summary["never_arrived"] == 11
    assert summary["missing_reported_unseen"] == 1
    assert summary["sites_without_records"] == ["D"]
    assert summary["sites_never_connected"] == ["D", "E"]  # E connects at the very end: 0 s
    assert (summary["mission_start"], summary["mission_end"]) == (100.0, 130.0)
    # No clearance record: an unlabeled mission, no label pass, no leak.
    assert (summary["leaks"], summary["leaks_listed"], summary["withheld"]) == (0, [], 0)
    assert summary["labels"] == {"unlabeled": {"messages": 4, "deliveries": 9}}


def test_files_table_counts_per_file(spark, archive) -> None:
    out, _ = archive
    files = {Path(r["file"]).relative_to(Path(r["file"]).parents[2]).as_posix(): r
             for r in spark.read.parquet(str(out / "files")).collect()}
    assert {k: (v["lines"], v["records"], v["bad_lines"], v["path_site"]) for k, v in files.items()} == {
        "A/journal/0001.jsonl": (10, 9, 1, "A"),
        "A/journal/0002.jsonl": (2, 2, 0, "A"),
        "B/journal/0001.jsonl": (7, 7, 0, "B"),
        "C/journal/0001.jsonl": (6, 5, 1, "C"),
        "D/journal/0001.jsonl": (0, 0, 0, "D"),
        "E/journal/0001.jsonl": (2, 2, 0, "E"),
    }


def test_divergence_per_site(spark, archive) -> None:
    out, _ = archive
    actual = spark.read.parquet(str(out / "divergence"))
    columns = ("site", "deliveries", "late", "out_of_place", "order_breaks", "max_displacement",
               "mean_displacement", "duplicate_lines", "redeliveries", "resends", "never_arrived",
               "never_arrived_reported")
    rows = [
        # A delivered A:1, B:1, C:1, B:2 (late); the transcript says A:1, B:1, B:2, C:1.
        ("A", 4, 1, 2, 1, 1, 0.5, 1, 1, 0, 0, 0),
        # B delivered B:1, A:1 (late), B:2; the transcript says A:1, B:1, B:2.
        ("B", 3, 1, 2, 1, 1, 2 / 3, 0, 0, 0, 1, 1),
        ("C", 2, 1, 2, 1, 1, 1.0, 0, 0, 0, 2, 0),
        ("D", 0, 0, 0, 0, 0, 0.0, 0, 0, 0, 4, 0),
        ("E", 0, 0, 0, 0, 0, 0.0, 0, 0, 0, 4, 0),
    ]
    assertDataFrameEqual(actual.select(*columns), spark.createDataFrame(rows, actual.select(*columns).schema))


def test_latency_per_pair(spark, archive) -> None:
    out, _ = archive
    actual = spark.read.parquet(str(out / "latency_pairs")).select(
        "origin", "destination", "deliveries", "late", "p50", "p99")
    rows = [("A", "A", 1, 0, 0.1, 0.1), ("A", "B", 1, 1, 1.5, 1.5), ("A", "C", 1, 1, 2.5, 2.5),
            ("B", "A", 2, 1, 1.0, 4.0), ("B", "B", 2, 0, 0.1, 0.1),
            ("C", "A", 1, 0, 2.0, 2.0), ("C", "C", 1, 0, 0.2, 0.2)]
    assertDataFrameEqual(actual, spark.createDataFrame(rows, actual.schema), atol=1e-6)


def test_connectivity_and_availability(spark, archive) -> None:
    out, _ = archive
    intervals = spark.read.parquet(str(out / "connectivity"))
    ab = intervals.where("site = 'A' and peer = 'B'").select("status", "start", "end")
    assertDataFrameEqual(ab, spark.createDataFrame(
        [("connected", 100.0, 104.0), ("suspected", 104.0, 107.0), ("connected", 107.0, 130.0)],
        ab.schema))
    avail = spark.read.parquet(str(out / "availability")).select(
        "site", "peer", "connected_seconds", "suspected_seconds", "disconnected_seconds", "availability")
    picked = avail.where("(site, peer) in (('A','B'), ('C','A'), ('D','A'), ('E','A'))")
    assertDataFrameEqual(picked, spark.createDataFrame([
        ("A", "B", 27.0, 3.0, 0.0, 0.9),
        ("C", "A", 29.6, 0.0, 0.4, 29.6 / 30),      # disconnected until its first event
        ("D", "A", 0.0, 0.0, 30.0, 0.0),            # never connected: no event at all
        ("E", "A", 0.0, 20.0, 10.0, 0.0),           # only status records
    ], picked.schema))
    assert avail.count() == 20                      # every ordered pair of the five sites


def test_lost_messages_and_report(spark, archive) -> None:
    out, summary = archive
    lost = spark.read.parquet(str(out / "lost_messages")).collect()
    assert [(r["msg_id"], r["reported_by"]) for r in lost] == [("C:7", ["B"])]
    report = (out / "report.html").read_text()
    assert report.count("data:image/png;base64,") == 3
    assert "Leak check: 0 leaks" in report and "every message is unlabeled" in report
    assert "Showing the first 1 of 2 messages" in report
    assert "hello" in report and "second" in report and "copy" not in report
    assert (out / "divergence.csv").read_text().splitlines()[0].startswith("site,deliveries,late")
    # No position record: an empty tracks dataset, a sentence instead of the plot.
    assert "No position reports were journaled" in report
    assert spark.read.parquet(str(out / "tracks")).count() == 0
    assert (out / "tracks.csv").read_text().splitlines() == [",".join(TRACK_COLUMNS)]
    assert summary["positions"] == {"lines": 0, "reports": 0, "units": 0, "duplicate_lines": 0, "per_site": []}
