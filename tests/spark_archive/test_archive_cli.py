"""Command-line contract: --help, one clear line on bad arguments."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "spark_archive", *args], capture_output=True,
                          text=True, timeout=180)


def test_help() -> None:
    done = run("--help")
    assert done.returncode == 0
    assert "--journals" in done.stdout and "--master" in done.stdout


@pytest.mark.parametrize("case", ["missing", "empty", "file", "no-args", "bad-flag"])
def test_bad_arguments_give_one_line(tmp_path: Path, case: str) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "plain").write_text("x")
    (tmp_path / "j" / "A" / "journal").mkdir(parents=True)
    (tmp_path / "j" / "A" / "journal" / "1.jsonl").write_text("")
    args = {
        "missing": ["--journals", str(tmp_path / "nope"), "--out", str(tmp_path / "o")],
        "empty": ["--journals", str(tmp_path / "empty"), "--out", str(tmp_path / "o")],
        "file": ["--journals", str(tmp_path / "j"), "--out", str(tmp_path / "plain")],
        "no-args": [],
        "bad-flag": ["--journals", str(tmp_path / "j"), "--out", "o", "--report-rows", "many"],
    }[case]
    done = run(*args)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert "Traceback" not in done.stderr


# The CLI's own JVM, next to the test session's: allow for a busy 2-core machine.
@pytest.mark.timeout(240)
def test_demo_sized_mission(spark, tmp_path: Path) -> None:
    """A mission the size of ``make demo`` (4 sites, about 1,000 records) through the CLI as
    an operator runs it: the driver plan, and the answers the generator and the reference
    know. (``bench/archive.py --small`` times it; no timing is asserted here.)"""
    from pyspark.testing import assertDataFrameEqual

    from spark_archive.generate import generate
    from spark_archive.journals import list_journal_files
    from spark_archive.reference import TRANSCRIPT_COLUMNS, canonical_rows, reference_transcript

    journals, out = tmp_path / "journals", tmp_path / "out"
    info = generate(journals, sites=4, messages=260, seed=3)
    done = run("--journals", str(journals), "--out", str(out), "--master", "local[2]", "--quiet")
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["plan"] == "driver"
    assert 950 <= summary["records"] <= 1100 and summary["sites"] == info["sites"]
    assert (summary["messages"], summary["deliveries"], summary["late_deliveries"],
            summary["never_arrived"], summary["bad_lines"], summary["redeliveries"]) == (
        info["messages"], info["deliveries"], info["late"], info["lost"], info["torn_lines"],
        info["redeliveries"])
    assert summary["late_unexplained"] == summary["late_unflagged"] == 0
    ref = reference_transcript(list_journal_files(journals))
    actual = spark.read.parquet(str(out / "transcript")).select(*TRANSCRIPT_COLUMNS)
    assertDataFrameEqual(actual, spark.createDataFrame(canonical_rows(ref.rows), actual.schema),
                         rtol=0.0, atol=0.0)
    rooms = {p.parent.name for p in (out / "transcript_json").glob("room=*/*.json")}
    assert rooms == {f"room={r}" for r in summary["rooms"]}
    assert "data:image/png;base64," in (out / "report.html").read_text()


@pytest.mark.timeout(240)
def test_the_archive_benchmark_quick_mode_runs(tmp_path: Path) -> None:
    """``bench/archive.py --quick`` (tests/test_bench_quick.py leaves it to this module, so that it runs on
    the Spark tests' worker, one JVM at a time): exits 0 and prints its summary line, the outputs agreeing
    with the pure-Python reference. No figure is asserted."""
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "RCM_BENCH_RESULTS": str(tmp_path / "results"), "PYTHONHASHSEED": "0"}
    done = subprocess.run([sys.executable, str(root / "bench" / "archive.py"), "--quick", "--data", str(tmp_path)],
                          cwd=root, env=env, capture_output=True, text=True, timeout=230)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    summary = [line for line in done.stdout.splitlines() if line.startswith("archive")]
    assert summary and "agree with the reference: True" in summary[0], done.stdout[-2000:]
