"""Contract 3 extensions with known answers: control records in the ordering checks, a
repaired delivery, relayed deliveries, precedence levels and a FLASH acknowledged twice.

Three sites, Lamport keys [t, origin]. The global order of everything delivered:
A:1 [1,A], A:2 [2,A], A:3 [3,A] (flash), control C:1 [4,C], A:4 [5,A], control C:2 [6,C],
B:1 [7,B]; the transcript holds the five chat messages.

* A delivers C:2 (key 6) before its own A:4 (key 5) without flagging A:4 late: unflagged.
* B lost A:2 in an outage, reported it missing at 104.5 (by ranges, with every seq from A:9
  to A:2^53, which no journal holds) and at 105 (by seqs), and got it repaired at 112.
  C reported A:3 missing by ranges (with seqs that disagree: the ranges count).
* C delivers the control messages C:1 and C:2 before A:4, which it flags late: the
  control record C:2 explains the flag (without it C's frontier would be A:2's key).
  C also flags B:1 late although nothing ahead of it was delivered: unexplained.
* A:1 and B:1 reached C through a relay; A:3 is a flash that B and C acknowledged
  (C's acknowledgement is journaled twice); A acknowledged the routine B:1.
* Position reports of two units (known_positions.py): their tracks and ages are known.
* Security labels (levels UNCLASSIFIED < RESTRICTED < SECRET, caveats GBR and USA): A is cleared
  SECRET//REL TO GBR, USA, B SECRET//REL TO USA, C SECRET//REL TO GBR, USA at first and then
  RESTRICTED (its latest clearance, the one that counts). A:1 and B:1 are UNCLASSIFIED, A:2
  RESTRICTED, A:3 SECRET//REL TO USA, A:4 SECRET//REL TO GBR: three planted leaks, A:3 and A:4
  at C (level) and A:4 at B (caveat).
"""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from known_positions import BAD_POSITION_LINES, POSITION_AGE, POSITION_LINES, TRACKS

from spark_archive.job import run_archive
from spark_archive.journals import list_journal_files
from spark_archive.local_tables import all_tables
from spark_archive.reference import build_transcript, read_journals
from spark_archive.tracks import POSITION_AGE_COLUMNS, TRACK_COLUMNS

pytestmark = pytest.mark.timeout(300)

LEVELS = ["UNCLASSIFIED", "RESTRICTED", "SECRET"]


def label(level: str, *caveats: str) -> dict:
    return {"level": level, "caveats": list(caveats)}


MESSAGES = {
    "A:1": dict(order=[1, "A"], room="ops", user="alice", text="one", sent_at=100.0, label=label("UNCLASSIFIED")),
    "A:2": dict(order=[2, "A"], room="ops", user="alice", text="two", sent_at=101.0, label=label("RESTRICTED")),
    "A:3": dict(order=[3, "A"], room="ops", user="alice", text="flash one", sent_at=102.0,
                precedence="flash", label=label("SECRET", "USA")),
    "A:4": dict(order=[5, "A"], room="ops", user="alice", text="four", sent_at=103.0, label=label("SECRET", "GBR")),
    "B:1": dict(order=[7, "B"], room="intel", user="bob", text="copy", sent_at=104.0, label=label("UNCLASSIFIED")),
}


def line(**fields: object) -> str:
    """One journal line, compact JSON as a chat server writes it."""
    return json.dumps(fields, separators=(",", ":"))


def send(site: str, msg_id: str, **extra: object) -> str:
    origin, seq = msg_id.split(":")
    m = MESSAGES[msg_id]
    return line(kind="send", site=site, at=m["sent_at"], msg_id=msg_id, origin=origin, seq=int(seq),
                **m, **extra)


def deliver(site: str, msg_id: str, n: int, at: float, late: bool = False, **extra: object) -> str:
    origin, seq = msg_id.split(":")
    return line(kind="deliver", site=site, n=n, at=at, msg_id=msg_id, origin=origin, seq=int(seq),
                late=late, **MESSAGES[msg_id], **extra)


def control(site: str, msg_id: str, at: float, order: list, late: bool = False) -> str:
    origin, seq = msg_id.split(":")
    return line(kind="control", site=site, at=at, msg_id=msg_id, origin=origin, seq=int(seq),
                order=order, late=late)


def clearance(site: str, at: float, level: str, *caveats: str) -> str:
    return line(kind="clearance", site=site, at=at, clearance=label(level, *caveats), levels=LEVELS,
                caveats=["GBR", "USA"])


def ack(site: str, msg_id: str, at: float, user: str) -> str:
    return line(kind="acknowledge", site=site, at=at, msg_id=msg_id, user=user)


HUGE = 2**53
JOURNALS = {
    "A": [
        clearance("A", 99.0, "SECRET", "GBR", "USA"),
        line(kind="status", site="A", at=99.0, peer="B", status="connected"),
        send("A", "A:1"), deliver("A", "A:1", 1, 100.1),
        send("A", "A:2"), deliver("A", "A:2", 2, 101.1),
        send("A", "A:3"), deliver("A", "A:3", 3, 102.05),
        control("A", "C:1", 102.6, [4, "C"]),
        send("A", "A:4"),
        control("A", "C:2", 103.2, [6, "C"]),
        deliver("A", "A:4", 4, 103.3),                       # behind C:2, not flagged: unflagged
        deliver("A", "B:1", 5, 104.3),
        ack("A", "B:1", 105.0, "alice"),                     # a routine message: "other"
        # An unknown precedence level makes the line unusable.
        line(kind="deliver", site="A", n=9, at=120.0, msg_id="A:9", precedence="urgent"),
    ],
    "B": [
        clearance("B", 99.0, "SECRET", "USA"),
        line(kind="status", site="B", at=99.0, peer="A", status="connected"),
        deliver("B", "A:1", 1, 100.5, via=[]),
        deliver("B", "A:4", 2, 104.0),
        send("B", "B:1", precedence="routine"), deliver("B", "B:1", 3, 104.1),
        line(kind="missing", site="B", at=105.0, origin="A", seqs=[2]),
        # Second round: by ranges alone, A:2 again (earlier) and every seq from A:9 to 2^53.
        line(kind="missing", site="B", at=104.5, origin="A", ranges=[[2, 2], [9, HUGE]], count=HUGE - 7),
        deliver("B", "A:3", 4, 106.0, late=True),
        ack("B", "A:3", 110.0, "bob"),
        deliver("B", "A:2", 5, 112.0, late=True, repaired=True),
    ],
    "C": [
        clearance("C", 99.0, "SECRET", "GBR", "USA"),
        clearance("C", 99.5, "RESTRICTED"),                # restarted with a lower clearance: this one counts
        deliver("C", "A:1", 1, 101.0, via=["B"]),
        deliver("C", "A:2", 2, 101.5, via=[]),
        deliver("C", "A:3", 3, 102.3, via=[]),
        control("C", "C:1", 102.4, [4, "C"]),
        control("C", "C:2", 103.0, [6, "C"]),
        deliver("C", "A:4", 4, 103.5, late=True, via=[]),  # explained by C:2
        ack("C", "A:3", 104.0, "carol"),
        ack("C", "A:3", 104.0, "carol"),                   # replayed after a restart
        deliver("C", "B:1", 5, 104.5, late=True, via=["A"]),  # nothing ahead of it: unexplained
        # Ranges win over seqs that disagree; pairs out of order or short name nothing; a range of
        # a non-number makes the line unusable.
        line(kind="missing", site="C", at=101.2, origin="A", ranges=[[3, 3]], count=1, seqs=[4]),
        line(kind="missing", site="C", at=101.3, origin="B", ranges=[[5, 1], [7]], count=0),
        line(kind="missing", site="C", at=101.4, origin="A", ranges=[[1, "x"]], count=1),
    ],
}


def write_journals(root: Path, skip_kind: str | None = None) -> Path:
    for site, lines in JOURNALS.items():
        path = root / site / "journal" / "0001.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        lines = lines + POSITION_LINES.get(site, [])
        path.write_text("\n".join(x for x in lines if skip_kind is None or f'"kind":"{skip_kind}"' not in x) + "\n")
    return root


@pytest.fixture(scope="module")
def journals(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_journals(tmp_path_factory.mktemp("extended"))


@pytest.fixture(scope="module", params=["driver", "spark"])
def archive(request, spark, journals: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp(f"extended-{request.param}")
    return out, run_archive(spark, journals, out, plan=request.param)


def table(spark, out: Path, name: str, *columns: str) -> list[tuple]:
    df = spark.read.parquet(str(out / name))
    return sorted(tuple(r[c] for c in (columns or df.columns)) for r in df.collect())


def test_transcript_marks_repaired_and_relayed_deliveries(spark, archive) -> None:
    out, _ = archive
    rows = {r["msg_id"]: r for r in spark.read.parquet(str(out / "transcript")).collect()}
    assert [m for m, _ in sorted(rows.items(), key=lambda kv: kv[1]["position"])] == \
        ["A:1", "A:2", "A:3", "A:4", "B:1"]
    a2 = {d["site"]: d for d in rows["A:2"]["deliveries"]}
    assert (a2["B"]["late"], a2["B"]["repaired"], a2["B"]["n"]) == (True, True, 5)
    assert rows["A:2"]["never_arrived"] == [] and rows["A:2"]["reported_missing_at"] == ["B"]
    assert {m: r["reported_missing_at"] for m, r in rows.items() if m != "A:2"} == {
        "A:1": [], "A:3": ["C"], "A:4": [], "B:1": []}
    assert {d["site"]: d["hops"] for d in rows["A:1"]["deliveries"]} == {"A": 0, "B": 0, "C": 1}
    assert {m: r["precedence"] for m, r in rows.items()} == {
        "A:1": "routine", "A:2": "routine", "A:3": "flash", "A:4": "routine", "B:1": "routine"}


def test_control_records_in_the_ordering_checks(spark, archive) -> None:
    out, _ = archive
    assert table(spark, out, "divergence", "site", "deliveries", "late", "control_deliveries",
                 "control_late", "out_of_place", "order_breaks", "max_displacement",
                 "late_unexplained", "late_unflagged", "repaired") == [
        ("A", 5, 0, 2, 0, 2, 1, 1, 0, 1, 0),
        ("B", 5, 2, 0, 0, 4, 2, 3, 0, 0, 1),
        ("C", 5, 2, 2, 0, 2, 1, 1, 1, 0, 0),
    ]
    means = dict(table(spark, out, "divergence", "site", "mean_displacement"))
    assert means == pytest.approx({"A": 2 / 7, "B": 1.6, "C": 2 / 7})


def test_without_control_records_the_late_flag_is_unexplained(tmp_path: Path) -> None:
    """The same journals without the control records: C's frontier is then A:2's key, so
    C's late A:4 is unexplained too, and A's A:4 is no longer behind anything."""
    root = write_journals(tmp_path, skip_kind="control")
    j = read_journals(list_journal_files(root))
    rows = {r["site"]: r for r in all_tables(j, build_transcript(j), 200)["divergence"]}
    assert (rows["C"]["late_unexplained"], rows["A"]["late_unflagged"]) == (2, 0)


def test_repair_delay_per_pair(spark, archive) -> None:
    out, _ = archive
    # From B's earliest report of A:2: the ranges record at 104.5.
    assert table(spark, out, "repairs", "origin", "destination", "repaired", "reported", "delay_p50",
                 "delay_max", "latency_mean") == [("A", "B", 1, 1, 7.5, 7.5, 11.0)]


def test_a_huge_missing_range_is_counted_and_listed_in_part_never_expanded(spark, archive) -> None:
    """A:9 to A:2^53 are in no journal: every one counted, the first 10,000 listed."""
    out, summary = archive
    assert summary["missing_reported_unseen"] == HUGE - 8
    lost = spark.read.parquet(str(out / "lost_messages")).orderBy("seq").collect()
    assert [(r["msg_id"], r["origin"], r["seq"], r["reported_by"]) for r in lost] == [
        (f"A:{q}", "A", q, ["B"]) for q in range(9, 10_009)]


def test_relayed_share_and_latency(spark, archive) -> None:
    out, summary = archive
    routes = table(spark, out, "latency_route", "route", "deliveries", "share", "late", "max")
    assert routes == [("direct", 8, pytest.approx(0.8), 3, pytest.approx(11.0)),
                      ("relayed, 1 hop(s)", 2, pytest.approx(0.2), 1, pytest.approx(1.0))]
    pairs = {(r[0], r[1]): r[2:] for r in table(spark, out, "latency_pairs", "origin", "destination",
                                                  "deliveries", "late", "relayed", "repaired")}
    assert pairs[("A", "B")] == (4, 2, 0, 1) and pairs[("A", "C")] == (4, 1, 1, 0)
    assert (summary["relayed_deliveries"], summary["remote_deliveries"]) == (2, 10)
    assert summary["relayed_share"] == pytest.approx(0.2)


def test_latency_per_precedence(spark, archive) -> None:
    out, summary = archive
    levels = {r[0]: r[1:] for r in table(spark, out, "latency_precedence", "precedence", "deliveries",
                                           "late", "p50", "p95", "max")}
    assert levels["flash"] == (2, 1, pytest.approx(0.3), pytest.approx(4.0), pytest.approx(4.0))
    assert levels["routine"][:2] == (8, 3)
    assert summary["precedence"] == {"routine": 4, "flash": 1}
    assert list(summary["precedence"]) == ["flash", "routine"]             # highest first: by contracts' code


def test_the_archives_precedence_code_is_the_one_code_of_contracts(spark) -> None:
    """One integer code everywhere (contracts.precedence: 0 flash .. 3 routine): the archive's ``prec`` of a
    level, in Spark and in the pure-Python reference, is its ``Precedence.code``; absent is routine; the
    levels delivered on arrival are the urgent ones."""
    from pyspark.sql import functions as F

    from contracts.precedence import PRECEDENCES, Precedence
    from spark_archive import transforms as tf
    from spark_archive.reference import parse_record

    levels = [*PRECEDENCES, None]
    rows = spark.createDataFrame([(p,) for p in levels], "precedence string").select(
        tf.precedence_code(F.col("precedence")).alias("code")).select(
        "code", tf.precedence_name(F.col("code")).alias("name")).collect()
    expected = [(Precedence(p or "routine").code, p or "routine") for p in levels]
    assert [(r.code, r.name) for r in rows] == expected
    base = {"kind": "deliver", "site": "A", "at": 1.0, "n": 1, "msg_id": "B:1", "order": [1, "B"], "late": False,
            "room": "ops", "user": "bob", "text": "hi", "sent_at": 0.5}
    parsed = [parse_record(json.dumps(base | ({"precedence": p} if p else {}))) for p in levels]
    assert [(r or {}).get("prec") for r in parsed] == [code for code, _ in expected]
    assert set(tf.URGENT_CODES) == {p.code for p in Precedence if p.urgent} == {0, 1}


def test_flash_acknowledged_twice(spark, archive) -> None:
    out, summary = archive
    assert table(spark, out, "acknowledgements", "msg_id", "precedence", "acknowledgements",
                 "first_seconds", "last_seconds", "acknowledged_by") == [
        ("A:3", "flash", 2, 2.0, 8.0, ["bob@B", "carol@C"])]
    level, = summary["acknowledgement_levels"]
    assert (level["precedence"], level["messages"], level["acknowledged"], level["acknowledgements"],
            level["first_p50"]) == ("flash", 1, 1, 2, 2.0)
    assert (summary["acknowledge_records"], summary["acknowledgements_other"]) == (4, 1)


def test_summary_and_report(archive) -> None:
    out, summary = archive
    assert json.loads((out / "summary.json").read_text())["control_deliveries"] == 4
    assert (summary["control_deliveries"], summary["control_late"], summary["control_duplicate_lines"]) == (4, 0, 0)
    assert (summary["late_unexplained"], summary["late_unflagged"], summary["repaired_deliveries"]) == (1, 1, 1)
    assert (summary["messages"], summary["deliveries"], summary["late_deliveries"]) == (5, 15, 4)
    # The precedence, the range and the position lines.
    assert summary["bad_lines"] == 2 + BAD_POSITION_LINES and summary["never_arrived"] == 0
    report = (out / "report.html").read_text()
    for heading in ("Ordering checks", "By precedence", "Direct and relayed", "Repairs",
                    "Acknowledgements of flash and immediate messages"):
        assert heading in report
    assert "bob@B, carol@C" in report and "<b>FLASH</b>" in report



def test_tracks_and_position_age(spark, archive) -> None:
    """Each unit's distinct reports as first received anywhere, in order of sending (Parquet and CSV); the age
    of the reports of other sites when they reached each site, and how far behind each site ended."""
    out, summary = archive
    assert table(spark, out, "tracks", *TRACK_COLUMNS) == TRACKS
    with open(out / "tracks.csv", newline="") as fh:
        assert [tuple(r.values()) for r in csv.DictReader(fh)] == [
            tuple("" if v is None else str(v) for v in row) for row in TRACKS]
    ages = {r[0]: r[1:] for r in table(spark, out, "position_age", *POSITION_AGE_COLUMNS)}
    assert ages == {site: pytest.approx(row) for site, row in POSITION_AGE.items()}
    positions = summary["positions"]
    assert (positions["lines"], positions["reports"], positions["units"], positions["duplicate_lines"]) == (9, 4, 2, 1)
    assert [r["site"] for r in positions["per_site"]] == ["A", "B", "C"]
    report = (out / "report.html").read_text()
    assert "Position age per site" in report and 'alt="unit tracks"' in report


def test_traffic_per_label_and_the_planted_leaks(spark, archive) -> None:
    """Messages and deliveries per label (people's spelling, lowest level first; they add up to the totals), and
    every leak the journals hold, found by Spark in both plans."""
    out, summary = archive
    assert summary["labels"] == {"UNCLASSIFIED": {"messages": 2, "deliveries": 6},
                                 "RESTRICTED": {"messages": 1, "deliveries": 3},
                                 "SECRET//REL TO GBR": {"messages": 1, "deliveries": 3},
                                 "SECRET//REL TO USA": {"messages": 1, "deliveries": 3}}
    assert summary["leaks"] == 3 == json.loads((out / "summary.json").read_text())["leaks"]
    assert summary["withheld"] == 0         # every message not cleared somewhere leaked there
    assert [(r["site"], r["msg_id"], r["kinds"], r["label"], r["clearance"], r["reason"])
            for r in summary["leaks_listed"]] == [
        ("B", "A:4", ["deliver"], "SECRET//REL TO GBR", "SECRET//REL TO USA", "caveats"),
        ("C", "A:3", ["deliver"], "SECRET//REL TO USA", "RESTRICTED", "level"),
        ("C", "A:4", ["deliver"], "SECRET//REL TO GBR", "RESTRICTED", "level")]
    assert table(spark, out, "leaks", "site", "msg_id") == [("B", "A:4"), ("C", "A:3"), ("C", "A:4")]
    assert table(spark, out, "labels", "rank", "label", "messages") == [
        (0, "UNCLASSIFIED", 2), (1, "RESTRICTED", 1), (2, "SECRET//REL TO GBR", 1), (2, "SECRET//REL TO USA", 1)]
    assert (out / "labels.csv").read_text().splitlines()[0] == "label,level,caveats,rank,messages,deliveries"
    report = (out / "report.html").read_text()
    assert "Leak check: 3 leak(s)" in report and 'alt="traffic per label"' in report
    assert "<td>SECRET//REL TO GBR</td><td>RESTRICTED</td><td>level</td>" in report
