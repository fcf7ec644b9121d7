"""Where the archive job's time goes: per step, per stage, and in the JVM's own threads.

Runs the Spark plan once over a journal directory with Spark's event log on,
then prints:

* per step of the job (``summary.json`` ``steps``): wall seconds, and the CPU,
  run and garbage-collection seconds of the tasks of the Spark jobs it started
  (tasks of the writer and collector threads are listed as ``(other threads)``);
* the stages with the most task run time, with their shuffle writes and spills;
* the JVM as a whole: process CPU, time in the JIT compiler and in garbage
  collection (from its management beans), next to the tasks' CPU.

Task CPU against process CPU is the first thing to look at: at 10M records on
two cores the JIT compiler took a fifth of the JVM's CPU (``docs/archive.md``).
Timing claims belong to ``bench/archive.py``; this is a microscope, not a benchmark.

    .venv/bin/python bench/archive_profile.py /tmp/rcm-archive-bench/sites10-records10000000-seed1
    .venv/bin/python bench/archive_profile.py DIR --conf spark.sql.shuffle.partitions=16
"""
from __future__ import annotations

import argparse
import collections
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

OTHER = "(other threads)"


def event_lines(log_dir: Path) -> list[str]:
    """The event log's lines: one file, or a rolled log's ``events_<n>_...`` files in order."""
    def order(path: Path) -> tuple[int, str]:
        parts = path.name.split("_")
        return (int(parts[1]) if len(parts) > 2 and parts[1].isdigit() else 0, path.name)
    files = sorted((p for p in log_dir.rglob("*") if p.is_file() and not p.name.startswith((".", "appstatus"))),
                   key=order)
    return [line for path in files for line in path.read_text().splitlines()]


def stage_table(lines: list[str]) -> tuple[dict[int, dict[str, Any]], dict[int, str]]:
    """Per stage: the step that started it and its tasks' summed metrics (seconds, bytes)."""
    stages: dict[int, dict[str, Any]] = collections.defaultdict(lambda: collections.Counter())
    step_of: dict[int, str] = {}
    for line in lines:
        event = json.loads(line)
        kind = event["Event"]
        if kind == "SparkListenerJobStart":
            step = (event.get("Properties") or {}).get("spark.jobGroup.id") or OTHER
            for stage in event["Stage IDs"]:
                step_of[stage] = step
        elif kind == "SparkListenerTaskEnd":
            m = event.get("Task Metrics") or {}
            s = stages[event["Stage ID"]]
            s["tasks"] += 1
            s["cpu"] += m.get("Executor CPU Time", 0) / 1e9
            s["run"] += m.get("Executor Run Time", 0) / 1e3
            s["gc"] += m.get("JVM GC Time", 0) / 1e3
            s["spill"] += m.get("Disk Bytes Spilled", 0)
            s["shuffle_write"] += (m.get("Shuffle Write Metrics") or {}).get("Shuffle Bytes Written", 0)
        elif kind == "SparkListenerStageCompleted":
            info = event["Stage Info"]
            stages[info["Stage ID"]]["name"] = info["Stage Name"]
    return dict(stages), step_of


def jvm_totals(spark: Any) -> dict[str, float]:  # a SparkSession (py4j's JVM views are untyped)
    """Process CPU, JIT compilation and garbage-collection seconds of the driver JVM."""
    mf = spark.sparkContext._jvm.java.lang.management.ManagementFactory
    gc = sum(max(b.getCollectionTime(), 0) for b in mf.getGarbageCollectorMXBeans()) / 1e3
    cpu = spark.sparkContext._jvm.java.lang.ProcessHandle.current().info().totalCpuDuration()
    # Spark's own code generator: classes Janino compiled (a cache hit compiles none), and
    # their compile time (count times the mean of Spark's sampled histogram).
    janino = spark.sparkContext._jvm.org.apache.spark.metrics.source.CodegenMetrics.METRIC_COMPILATION_TIME()
    return {"process_cpu": cpu.get().toMillis() / 1e3 if cpu.isPresent() else float("nan"),
            "jit_compiling": mf.getCompilationMXBean().getTotalCompilationTime() / 1e3,
            "gc_pauses": gc, "codegen_classes": janino.getCount(),
            "codegen_seconds": janino.getCount() * janino.getSnapshot().getMean() / 1e3}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("journals", type=Path)
    parser.add_argument("--out", type=Path, default=None, help="archive output (default: a temporary directory)")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--driver-memory", default="4g")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--stages", type=int, default=15, help="stages listed (most run time first)")
    args = parser.parse_args()

    from spark_archive.job import Progress, run_archive
    from spark_archive.journals import list_journal_files
    from spark_archive.session import build_session

    work = Path(tempfile.mkdtemp(prefix="archive-profile-"))
    out = args.out or work / "out"
    log_dir = work / "events"
    log_dir.mkdir()
    conf = {"spark.eventLog.enabled": "true", "spark.eventLog.dir": str(log_dir),
            "spark.eventLog.compress": "false", "spark.driver.memory": args.driver_memory,
            **dict(kv.split("=", 1) for kv in args.conf)}
    size = sum(f.size for f in list_journal_files(args.journals))
    spark = build_session(args.master, conf=conf, input_bytes=size)

    def on_step(name: str, took: float | None) -> None:
        if took is None:   # jobs started by this thread from now on belong to the step
            spark.sparkContext.setJobGroup(name, name)
    t0 = time.perf_counter()
    summary = run_archive(spark, args.journals, out, plan="spark", progress=Progress(on_step=on_step))
    wall = time.perf_counter() - t0
    totals = jvm_totals(spark)
    spark.stop()

    stages, step_of = stage_table(event_lines(log_dir))
    print(f"{summary['records']:,} records, job {wall:.1f} s wall\n")
    print(f"{'step':24s} {'wall':>7s} {'task cpu':>9s} {'task run':>9s} {'task gc':>8s}")
    steps = dict(summary["steps"])
    for step in [*steps, OTHER]:
        mine = [s for i, s in stages.items() if step_of.get(i, OTHER) == step]
        print(f"{step:24s} {steps.get(step, float('nan')):7.1f} {sum(s['cpu'] for s in mine):9.1f} "
              f"{sum(s['run'] for s in mine):9.1f} {sum(s['gc'] for s in mine):8.1f}")
    task_cpu = sum(s["cpu"] for s in stages.values())
    print(f"\nJVM: {totals['process_cpu']:.1f} CPU-s in all; tasks {task_cpu:.1f}; "
          f"JIT compiling {totals['jit_compiling']:.1f} s; GC pauses {totals['gc_pauses']:.1f} s; "
          f"Spark generated {totals['codegen_classes']} classes, compiled in about "
          f"{totals['codegen_seconds']:.1f} s\n")
    print(f"{'stage':>5s} {'step':20s} {'tasks':>5s} {'cpu':>6s} {'run':>6s} {'gc':>5s} "
          f"{'shuffle MB':>10s} {'spill MB':>8s}  name")
    for i, s in sorted(stages.items(), key=lambda kv: -kv[1]["run"])[:args.stages]:
        print(f"{i:5d} {step_of.get(i, OTHER)[:20]:20s} {s['tasks']:5d} {s['cpu']:6.1f} {s['run']:6.1f} "
              f"{s['gc']:5.1f} {s['shuffle_write'] / 1e6:10.0f} {s['spill'] / 1e6:8.0f}  {str(s.get('name', ''))[:40]}")


if __name__ == "__main__":
    main()
