"""Spark transcript == pure-Python reference transcript on generated journals."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from pyspark.testing import assertDataFrameEqual

from spark_archive import transforms as tf
from spark_archive.generate import generate
from spark_archive.job import TRANSCRIPT_COLUMNS, build_transcript, read_journal_lines, small_records
from spark_archive.journals import list_journal_files
from spark_archive.reference import canonical_rows, reference_transcript


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    root = tmp_path_factory.mktemp("generated")
    info = generate(root, sites=6, messages=240, seed=11, duration=900.0, restart_prob=0.8,
                    torn_prob=0.5, outages_per_hour=12.0)
    return root, info


def test_generator_injects_the_faults_it_claims(generated) -> None:
    _, info = generated
    assert info["restarts"] >= 1 and info["torn_lines"] >= 1 and info["redeliveries"] >= 1
    assert info["late"] >= 1 and info["lost"] >= 1 and len(info["empty"]) == 1


def test_spark_transcript_matches_reference(spark, generated) -> None:
    root, info = generated
    files = list_journal_files(root)
    ref = reference_transcript(files)
    lines = read_journal_lines(spark, files)
    _, positioned, _ = build_transcript(spark, tf.parse_journal_lines(lines), small_records(lines),
                                        ref.sites)
    actual = positioned.select(*TRANSCRIPT_COLUMNS)
    expected = spark.createDataFrame(canonical_rows(ref.rows), actual.schema)
    assertDataFrameEqual(actual, expected, rtol=0.0, atol=0.0)
    assert ref.sites == info["sites"]
    assert ref.bad_lines == info["torn_lines"]
    assert ref.redeliveries == info["redeliveries"]


def test_generator_is_deterministic(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "spark_archive.generate", "--sites", "4", "--messages", "60",
           "--seed", "5"]
    for name in ("one", "two"):
        done = subprocess.run(cmd + ["--out", str(tmp_path / name)], capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 0, done.stderr
    one = sorted((p.relative_to(tmp_path / "one"), p.read_bytes())
                 for p in (tmp_path / "one").rglob("*.jsonl"))
    two = sorted((p.relative_to(tmp_path / "two"), p.read_bytes())
                 for p in (tmp_path / "two").rglob("*.jsonl"))
    assert one == two and len(one) >= 4
