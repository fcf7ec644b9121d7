"""bench/archive_profile.py reads Spark's event log: stages summed per step, rolled logs in order."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("archive_profile", ROOT / "bench" / "archive_profile.py")
profile = importlib.util.module_from_spec(spec)
spec.loader.exec_module(profile)


def _task(stage: int, cpu_ns: int, run_ms: int, gc_ms: int = 0, shuffle: int = 0) -> dict:
    return {"Event": "SparkListenerTaskEnd", "Stage ID": stage,
            "Task Metrics": {"Executor CPU Time": cpu_ns, "Executor Run Time": run_ms, "JVM GC Time": gc_ms,
                             "Disk Bytes Spilled": 0,
                             "Shuffle Write Metrics": {"Shuffle Bytes Written": shuffle}}}


def test_stages_are_summed_and_named_by_the_step_that_started_them(tmp_path: Path) -> None:
    rolled = tmp_path / "eventlog_v2_local-1"
    rolled.mkdir()
    first = [{"Event": "SparkListenerJobStart", "Job ID": 0, "Stage IDs": [0, 1],
              "Properties": {"spark.jobGroup.id": "scan journals"}},
             _task(0, 2_000_000_000, 2500, 100, shuffle=10**6), _task(0, 1_000_000_000, 1500)]
    second = [{"Event": "SparkListenerJobStart", "Job ID": 1, "Stage IDs": [2], "Properties": {}},
              _task(2, 500_000_000, 700),
              {"Event": "SparkListenerStageCompleted", "Stage Info": {"Stage ID": 0, "Stage Name": "scan"}}]
    # Rolled files are read in their number's order, whatever the names sort as.
    (rolled / "events_10_local-1").write_text("\n".join(json.dumps(e) for e in second) + "\n")
    (rolled / "events_9_local-1").write_text("\n".join(json.dumps(e) for e in first) + "\n")
    (rolled / "appstatus_local-1").write_text("")
    (rolled / ".events_9_local-1.crc").write_bytes(b"\x00crc")
    stages, step_of = profile.stage_table(profile.event_lines(tmp_path))
    assert step_of == {0: "scan journals", 1: "scan journals", 2: profile.OTHER}
    assert stages[0]["tasks"] == 2 and stages[0]["cpu"] == 3.0 and stages[0]["run"] == 4.0
    assert stages[0]["gc"] == 0.1 and stages[0]["shuffle_write"] == 10**6 and stages[0]["name"] == "scan"
    assert stages[2]["cpu"] == 0.5 and 1 not in stages
