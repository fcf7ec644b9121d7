"""Command-line contract: --help, one clear line on bad arguments."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "spark_archive", *args], capture_output=True,
                          text=True, timeout=60)


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
