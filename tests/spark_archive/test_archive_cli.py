"""Command-line contract: --help, one clear line on bad arguments."""
from __future__ import annotations

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


@pytest.mark.timeout(240)
def test_the_archive_benchmark_quick_mode_runs(tmp_path: Path) -> None:
    """``bench/archive.py --quick`` (tests/test_bench_quick.py leaves it to this module, so that it runs on
    the Spark tests' worker, one JVM at a time): exits 0 and prints its summary line, the outputs agreeing
    with the pure-Python reference (every table, the totals, the transcript's order), on the driver plan that
    ``auto`` picks for a mission of ``make demo``'s size. No figure is asserted. (The same CLI's answers
    against the generator's are checked on a standalone cluster: test_archive_cluster.py.)"""
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "RCM_BENCH_RESULTS": str(tmp_path / "results"), "PYTHONHASHSEED": "0"}
    done = subprocess.run([sys.executable, str(root / "bench" / "archive.py"), "--quick", "--data", str(tmp_path)],
                          cwd=root, env=env, capture_output=True, text=True, timeout=230)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    summary = [line for line in done.stdout.splitlines() if line.startswith("archive")]
    assert summary and "agree with the reference: True" in summary[0], done.stdout[-2000:]
    assert "(plan driver," in summary[0], summary[0]
