"""Spark transcript == pure-Python reference transcript on generated journals."""
from __future__ import annotations

import json

import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest
from pyspark.testing import assertDataFrameEqual

from spark_archive import transforms as tf
from spark_archive.generate import generate
from spark_archive.job import TRANSCRIPT_COLUMNS, build_transcript, read_journal_lines
from spark_archive.journals import list_journal_files
from spark_archive.reference import canonical_rows, reference_transcript

# The whole job runs in the first test's set-up: allow for a busy 2-core machine.
pytestmark = pytest.mark.timeout(300)


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


def copy_journals(root: Path, dest: Path, edit: Callable[[str], str | None]) -> None:
    """Copy every journal under ``root`` to ``dest``, each line through ``edit`` (None drops it)."""
    for path in sorted(root.rglob("*.jsonl")):
        target = dest / path.relative_to(root)
        target.parent.mkdir(parents=True, exist_ok=True)
        lines = (edit(text) for text in path.read_text().split("\n"))
        target.write_text("\n".join(line for line in lines if line is not None))


def assert_same_transcript(spark, root: Path, contains_limit: int = 64):
    """Build the transcript with Spark and with the reference; assert they are identical."""
    files = list_journal_files(root)
    ref = reference_transcript(files)
    lines = read_journal_lines(spark, files)
    records = tf.compact_records(tf.read_journal_records(spark, [f.path for f in files]))
    _, positioned, _ = build_transcript(spark, lines, records, ref.sites, contains_limit=contains_limit)
    actual = positioned.select(*TRANSCRIPT_COLUMNS)
    expected = spark.createDataFrame(canonical_rows(ref.rows), actual.schema)
    assertDataFrameEqual(actual, expected, rtol=0.0, atol=0.0)
    positioned.unpersist()
    return ref


def test_spark_transcript_matches_reference(spark, generated) -> None:
    root, info = generated
    ref = assert_same_transcript(spark, root)
    assert ref.sites == info["sites"]
    assert ref.bad_lines == info["torn_lines"]
    assert ref.redeliveries == info["redeliveries"]


@pytest.mark.parametrize("contains_limit", [64, 0])
def test_content_of_messages_without_a_send_record(spark, generated, tmp_path: Path,
                                                   contains_limit: int) -> None:
    """Sends lost with a journal: content comes from the delivery at the smallest site.

    With a limit of 64 the job re-reads only the lines naming the two messages;
    with 0 it re-reads every line; both must agree with the reference.
    """
    root, info = generated
    dropped = 0

    def drop_two_sends(text: str) -> str | None:
        nonlocal dropped
        if '"kind":"send"' in text and dropped < 2 and '"room":"ops"' in text:
            dropped += 1
            return None
        return text

    copy_journals(root, tmp_path, drop_two_sends)
    assert dropped == 2
    ref = assert_same_transcript(spark, tmp_path, contains_limit=contains_limit)
    assert len(ref.rows) == info["messages"]


def test_records_of_one_message_naming_different_orders(spark, generated, tmp_path: Path) -> None:
    """A delivery whose order differs from its send's: the smallest key wins, as in the reference."""
    root, _ = generated
    changed = 0

    def reorder_three_deliveries(text: str) -> str:
        nonlocal changed
        if changed < 3 and '"kind":"deliver"' in text and '"order":[' in text:
            record = json.loads(text)
            # 0 sorts before every Lamport clock; "007" is 7 written another way.
            record["order"] = [0, "ZZ"] if changed < 2 else ["007"] + record["order"][1:]
            changed += 1
            return json.dumps(record, separators=(",", ":"))
        return text

    copy_journals(root, tmp_path, reorder_three_deliveries)
    assert changed == 3
    assert_same_transcript(spark, tmp_path)


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
