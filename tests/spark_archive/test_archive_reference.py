"""Spark transcript == pure-Python reference transcript on generated journals."""
from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from spark_archive import transforms as tf
from spark_archive.generate import EXTENDED, generate
from spark_archive.job import TRANSCRIPT_COLUMNS, build_transcript, run_archive
from spark_archive.journals import list_journal_files
from spark_archive.onepass import message_rows, pivot_messages, read_mission, shuffled_lines
from spark_archive.outputs import SMALL_TABLES
from spark_archive.reference import canonical_rows, reference_transcript

# The whole job runs in the first test's set-up: allow for a busy 2-core machine.
pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    root = tmp_path_factory.mktemp("generated")
    info = generate(root, sites=6, messages=240, seed=11, duration=900.0, restart_prob=0.8,
                    torn_prob=0.5, outages_per_hour=12.0, extensions=dataclasses.replace(EXTENDED, positions=1))
    return root, info


def test_generator_injects_the_faults_it_claims(generated) -> None:
    _, info = generated
    assert info["restarts"] >= 1 and info["torn_lines"] >= 1 and info["redeliveries"] >= 1
    assert info["late"] >= 1 and info["lost"] >= 1 and len(info["empty"]) == 1
    assert min(info[k] for k in ("control_deliveries", "urgent_messages", "relayed", "repaired",
                                 "acknowledgements", "position_reports")) >= 1


def copy_journals(root: Path, dest: Path, edit: Callable[[str], str | None]) -> None:
    """Copy every journal under ``root`` to ``dest``, each line through ``edit`` (None drops it)."""
    for path in sorted(root.rglob("*.jsonl")):
        target = dest / path.relative_to(root)
        target.parent.mkdir(parents=True, exist_ok=True)
        lines = (edit(text) for text in path.read_text().split("\n"))
        target.write_text("\n".join(line for line in lines if line is not None))


def assert_same_transcript(spark, root: Path, isin_limit: int = 64, rare: int | None = None):
    """Build the transcript with Spark and with the reference; assert they are identical.

    ``rare``: how many messages the one pass must have left to the general path.
    """
    files = list_journal_files(root)
    ref = reference_transcript(files)
    mission = read_mission(spark, files, isin_limit=isin_limit)
    assert mission.sites == ref.sites
    if rare is not None:
        assert mission.rare_messages == rare
    transcript = build_transcript(spark, mission.messages, mission.missing, mission.control_keys)
    actual = transcript.positioned.select(*TRANSCRIPT_COLUMNS)
    expected = spark.createDataFrame(canonical_rows(ref.rows), actual.schema)
    assertDataFrameEqual(actual, expected, rtol=0.0, atol=0.0)
    transcript.unpersist()
    mission.unpersist()
    return ref


@pytest.mark.parametrize("isin_limit", [64, 0])
def test_messages_the_one_pass_leaves_to_the_general_path(spark, generated, tmp_path: Path,
                                                          isin_limit: int) -> None:
    """Records disagreeing on order or text, and three distinct lines at one site: the
    general path rebuilds those messages from a second read (filtered in the reader with
    a limit of 64, joined with 0) and the transcript still equals the reference's. Two sends
    lost with a journal: their content comes from the deliveries, settled by the one pass
    (no second read: the general path takes exactly the five messages above)."""
    root, info = generated
    changed: list[str] = []
    extra: list[str] = []
    dropped: list[str] = []

    def edit(text: str) -> str | None:
        if len(dropped) < 2 and '"kind":"send"' in text and '"room":"ops"' in text \
                and json.loads(text)["msg_id"] not in changed:
            dropped.append(json.loads(text)["msg_id"])
            return None
        if len(changed) < 5 and '"kind":"deliver"' in text and '"order":[' in text:
            record = json.loads(text)
            if record["msg_id"] in changed or record["msg_id"] in dropped:
                return text
            if len(changed) < 2:    # 0 sorts before every Lamport clock
                record["order"] = [0, "ZZ"]
            elif len(changed) < 3:  # "007" is 7 written another way
                record["order"] = ["007"] + record["order"][1:]
            elif len(changed) < 4:  # another text than the send's
                record["text"] = "garbled"
            else:                   # delivered twice more at this site: three lines
                for bump in (1_000_000, 1_000_001):
                    extra.append(json.dumps({**record, "n": record["n"] + bump, "at": record["at"] + 1},
                                            separators=(",", ":")))
            changed.append(record["msg_id"])
            return json.dumps(record, separators=(",", ":"))
        return text

    copy_journals(root, tmp_path, edit)
    assert len(changed) == 5 and len(dropped) == 2
    site = json.loads(extra[0])["site"]
    with open(tmp_path / site / "journal" / "0009.jsonl", "w") as fh:
        fh.write("\n".join(extra) + "\n")
    ref = assert_same_transcript(spark, tmp_path, isin_limit=isin_limit, rare=5)
    assert len(ref.rows) == info["messages"]


def test_pivot_columns_match_the_general_path(spark, generated) -> None:
    """``pivot_messages`` (compiled ``concat`` over pivot columns) and
    ``flat_messages`` (the general path's lambdas) agree column for column,
    per-site line counts included, and a mission site outside the pivot (named
    by no message record) is a site every message never arrived at."""
    root, _ = generated
    files = list_journal_files(root)
    paths = [f.path for f in files]
    pivot = sorted({f.path_site for f in files if f.path_site})
    sites = pivot + ["ZULU"]
    rows = message_rows(shuffled_lines(spark, paths, pivot, 4), pivot).where("msg_id IS NOT NULL")
    assert rows.where("rare").count() == 0
    fast = pivot_messages(rows, pivot, sites)
    general = tf.flat_messages(tf.message_table(tf.read_journal_records(spark, paths)), sites)
    assert fast.where(F.size("line_counts") > 0).count() >= 1   # restarts replayed lines
    assert fast.where(F.array_contains("never_arrived", "ZULU")).count() == fast.count()
    assertDataFrameEqual(fast.select(*tf.MESSAGE_COLUMNS), general.select(*tf.MESSAGE_COLUMNS),
                         rtol=0.0, atol=0.0)


def _close(a: object, b: object) -> bool:
    """Equal, floats to 1e-9 relative (means are sums taken in another order)."""
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    return a == b


def test_the_two_plans_agree_on_every_output(spark, generated, tmp_path_factory) -> None:
    """The driver plan (the reference and ``local_tables``) and the Spark plan write the
    same rows in every dataset and the same summary, Contract 3 extensions included (and position
    reports: tracks.csv byte for byte)."""
    root, info = generated
    outs = {plan: tmp_path_factory.mktemp(f"plan-{plan}") for plan in ("driver", "spark")}
    summaries = {plan: run_archive(spark, root, out, plan=plan) for plan, out in outs.items()}
    for name in (*SMALL_TABLES, "transcript", "acknowledgements", "tracks"):
        rows = {}
        for plan, out in outs.items():
            df = spark.read.parquet(str(out / name))
            rows[plan] = sorted((tuple(r.asDict(recursive=True)[c] for c in df.columns) for r in df.collect()),
                                key=repr)
        assert len(rows["driver"]) == len(rows["spark"]), name
        for a, b in zip(rows["driver"], rows["spark"]):
            assert _close(a, b), (name, a, b)
    plan_specific = {"seconds", "steps", "out", "outputs", "report", "plan", "rare_messages", "scan_passes"}
    for key, value in summaries["driver"].items():
        if key not in plan_specific:
            assert _close(value, summaries["spark"][key]), key
    assert summaries["spark"]["control_deliveries"] > 0 and summaries["spark"]["repaired_deliveries"] > 0
    assert summaries["spark"]["late_unexplained"] == summaries["spark"]["late_unflagged"] == 0
    # Restarts, torn lines, replayed lines and re-deliveries: all settled by the one pass, as the generator made them.
    assert summaries["spark"]["rare_messages"] == 0 and summaries["spark"]["sites"] == info["sites"]
    assert (summaries["spark"]["bad_lines"], summaries["spark"]["redeliveries"]) == (info["torn_lines"],
                                                                                     info["redeliveries"])
    assert summaries["spark"]["positions"]["reports"] > 0 and summaries["spark"]["positions"]["duplicate_lines"] > 0
    assert (outs["driver"] / "tracks.csv").read_bytes() == (outs["spark"] / "tracks.csv").read_bytes()


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
