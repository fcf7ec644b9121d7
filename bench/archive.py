"""Mission archive benchmark: the Spark job end to end, and against a pure-Python transcript.

1. Generate (or reuse) ``--records`` synthetic journal records for ``--sites``
   sites and run ``python -m spark_archive`` on them at ``--master`` (default
   ``local[2]``) in a child process, sampling the resident memory of the whole
   process tree (driver JVM included) for the peak. Records/s is reported
   both over the job proper (``summary.json`` seconds: reading to report) and
   over the wall time including JVM start.
2. On ``--ref-records`` records, run the Spark job and the single-process
   pure-Python reference (``spark_archive.reference``), check that the two
   transcripts are identical row for row, and report the speed ratio.

Prints one summary line and writes bench/results/archive.json.

    .venv/bin/python bench/archive.py                        # 10M + 1M records
    .venv/bin/python bench/archive.py --records 2000000 --ref-records 500000
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from spark_archive.generate import generate  # noqa: E402

RESULTS = ROOT / "bench" / "results"


def count_records(root: Path) -> int:
    """Non-blank journal lines under ``root``."""
    total = 0
    for path in root.rglob("*.jsonl"):
        with open(path, "rb") as fh:
            total += sum(1 for line in fh if line.strip())
    return total


def journals_for(records: int, sites: int, seed: int, cache: Path) -> tuple[Path, int]:
    """A generated mission of about ``records`` records (reused when already on disk)."""
    target = cache / f"sites{sites}-records{records}-seed{seed}"
    marker = target / "generator.json"
    if marker.exists():
        return target, json.loads(marker.read_text())["records"]
    pilot = cache / "pilot"
    shutil.rmtree(pilot, ignore_errors=True)
    generate(pilot, sites, 4000, seed, duration=4000 / 20.0)
    per_message = count_records(pilot) / 4000
    shutil.rmtree(pilot, ignore_errors=True)
    shutil.rmtree(target, ignore_errors=True)
    t0 = time.perf_counter()
    generate(target, sites, max(1, round(records / per_message)), seed)
    info = json.loads(marker.read_text())
    info["records"] = count_records(target)
    marker.write_text(json.dumps(info, indent=2))
    print(f"generated {info['records']} records in {time.perf_counter() - t0:.1f}s under {target}",
          file=sys.stderr)
    return target, info["records"]


def _tree_usage(root_pid: int, cpu: dict[int, float]) -> int:
    """Resident bytes of a process and all its descendants (from /proc).

    Also records in ``cpu`` the CPU seconds (user + system) each of them has used so far.
    """
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    ticks: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
            ppid = int(fields[1])
            pages = int(fields[21])
            used = int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
        rss[int(entry)] = pages * os.sysconf("SC_PAGE_SIZE")
        ticks[int(entry)] = used
    total, todo = 0, [root_pid]
    hz = os.sysconf("SC_CLK_TCK")
    while todo:
        pid = todo.pop()
        total += rss.get(pid, 0)
        cpu[pid] = max(cpu.get(pid, 0.0), ticks.get(pid, 0) / hz)
        todo.extend(children.get(pid, []))
    return total


def run_job(journals: Path, out: Path, master: str, driver_memory: str) -> dict:
    """Run the archive CLI in a child process; return its summary plus wall time and peak RSS."""
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, "-m", "spark_archive", "--journals", str(journals), "--out", str(out),
           "--master", master, "--driver-memory", driver_memory, "--report-rows", "200", "--quiet"]
    peak = 0
    cpu: dict[int, float] = {}
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stop = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not stop.is_set():
            peak = max(peak, _tree_usage(proc.pid, cpu))
            stop.wait(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    stdout, stderr = proc.communicate()
    wall = time.perf_counter() - t0
    stop.set()
    sampler.join()
    if proc.returncode != 0:
        raise SystemExit(f"archive job failed ({proc.returncode}): {stderr.strip()[-2000:]}")
    summary = json.loads((out / "summary.json").read_text())
    return {"wall_seconds": wall, "job_seconds": summary["seconds"], "peak_rss_bytes": peak,
            "cpu_seconds": sum(cpu.values()),
            "steps": summary["steps"], "messages": summary["messages"], "records": summary["records"]}


def compare_with_reference(journals: Path, out: Path) -> dict:
    """Reference transcript in this process; compare with the Spark job's transcript dataset."""
    from spark_archive.journals import list_journal_files
    from spark_archive.reference import TRANSCRIPT_COLUMNS, canonical_rows, reference_transcript

    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    t0 = time.perf_counter()
    ref = reference_transcript(list_journal_files(journals))
    ref_seconds = time.perf_counter() - t0
    rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    from spark_archive.job import build_session

    spark = build_session("local[2]", app_name="archive-bench-compare")
    try:
        rows = (spark.read.parquet(str(out / "transcript")).select(*TRANSCRIPT_COLUMNS)
                .orderBy("position").collect())
    finally:
        spark.stop()
    spark_rows = canonical_rows(tuple(r[c] for c in TRANSCRIPT_COLUMNS) for r in rows)
    ref_rows = canonical_rows(ref.rows)
    mismatch = next((i for i, (a, b) in enumerate(zip(spark_rows, ref_rows)) if a != b), None)
    identical = len(spark_rows) == len(ref_rows) and mismatch is None
    return {"reference_seconds": ref_seconds, "reference_peak_rss_bytes": max(rss_after, rss_before),
            "identical": identical, "rows": len(ref_rows), "spark_rows": len(spark_rows),
            "first_mismatch": mismatch}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=10_000_000)
    parser.add_argument("--ref-records", type=int, default=1_000_000)
    parser.add_argument("--sites", type=int, default=10)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--driver-memory", default="4g")
    parser.add_argument("--data", type=Path, default=Path("/tmp/rcm-archive-bench"),
                        help="where generated journals and outputs live (reused between runs)")
    args = parser.parse_args()
    args.data.mkdir(parents=True, exist_ok=True)

    big, big_records = journals_for(args.records, args.sites, args.seed, args.data)
    big_run = run_job(big, args.data / "out-big", args.master, args.driver_memory)
    small, small_records = journals_for(args.ref_records, args.sites, args.seed, args.data)
    small_run = run_job(small, args.data / "out-small", args.master, args.driver_memory)
    check = compare_with_reference(small, args.data / "out-small")

    result = {
        "benchmark": "archive",
        "master": args.master,
        "sites": args.sites,
        "records": big_records,
        "records_per_second": big_records / big_run["job_seconds"],
        "records_per_second_wall": big_records / big_run["wall_seconds"],
        # On a shared machine wall time depends on everyone else: CPU seconds of the
        # job's process tree (JVM start included) do not. Two dedicated cores give
        # at best this rate.
        "records_per_cpu_second": big_records / big_run["cpu_seconds"],
        "records_per_second_two_dedicated_cores_estimate": 2 * big_records / big_run["cpu_seconds"],
        "target_records_per_second": 250_000,
        **{f"big_{k}": v for k, v in big_run.items()},
        "ref_records": small_records,
        "ref_spark_job_seconds": small_run["job_seconds"],
        "ref_spark_wall_seconds": small_run["wall_seconds"],
        **check,
        "speed_ratio_spark_over_python": check["reference_seconds"] / small_run["job_seconds"],
        "speed_ratio_wall": check["reference_seconds"] / small_run["wall_seconds"],
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "load_average_at_end": os.getloadavg()},
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "archive.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"archive: {big_records} records at {args.master}: {result['records_per_second']:,.0f} rec/s "
          f"(job {big_run['job_seconds']:.1f}s, wall {big_run['wall_seconds']:.1f}s, "
          f"peak RSS {big_run['peak_rss_bytes'] / 2**30:.2f} GiB, {big_run['cpu_seconds']:.0f} CPU-s "
          f"= {result['records_per_second_two_dedicated_cores_estimate']:,.0f} rec/s on 2 idle cores; "
          f"target 250,000 rec/s; load avg {os.getloadavg()[0]:.1f}) | "
          f"reference on {small_records} records: python {check['reference_seconds']:.1f}s vs "
          f"spark {small_run['job_seconds']:.1f}s (ratio {result['speed_ratio_spark_over_python']:.2f}x), "
          f"identical={check['identical']} -> bench/results/archive.json")
    return 0 if check["identical"] else 1


if __name__ == "__main__":
    sys.exit(main())
