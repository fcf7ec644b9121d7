"""Mission archive benchmark, led by the figures that hold on any machine.

Absolute speeds differ threefold between two 2-core machines; ratios measured
in one run do not. So the full run prints, in this order:

1. the **ratio to the pure-Python reference**: the Spark job (``--plan spark``,
   ``--master local[2]``) against ``bench/archive_reference.py`` (the same
   transcript and tables in one process, without writing datasets) on the same
   journals (default 10M records, 10 sites), one after the other on this machine;
   the two results are compared (transcript order, per-site, latency, repair and
   availability tables);
2. **records per CPU-second** of each (user + system time of the process tree,
   JVM included: on a shared machine wall time depends on everyone else);
3. wall figures (job proper and whole process) and **peak memory** (the process
   tree's proportional set size: pages shared after a fork counted once);
4. **scale-out**: the same journals on a local Spark standalone cluster, first
   with one worker (one core), then with two (one core each); the ratio of
   the two job times.

Journals are generated once under ``--data`` and reused; they hold position
reports of ``--positions`` units a site (default 2; 0 for the journals of the
runs before positions), on top of the records asked for, and the comparison
covers the position ages and the tracks' CSV too. Results go to
bench/results/archive.json.

    .venv/bin/python bench/archive.py                  # the full run (about 20 min)
    .venv/bin/python bench/archive.py --small          # a demo-sized mission through the CLI
    .venv/bin/python bench/archive.py --quick          # seconds: the demo mission, checked
    .venv/bin/python bench/archive.py --records 2000000 --no-cluster
    .venv/bin/python bench/archive.py --extended --no-cluster   # journals with every Contract 3 extension
"""
from __future__ import annotations

import argparse
import csv
import dataclasses
import hashlib
import json
import math
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._common import RESULTS  # noqa: E402
from spark_archive.generate import EXTENDED, Extensions, generate  # noqa: E402

DEMO = {"sites": 4, "messages": 260, "seed": 3}     # about 1,060 chat records, like `make demo`'s journals
UNITS = 2       # units per site reporting positions (--positions): tracks in every benchmark's journals


def count_records(root: Path) -> int:
    """Non-blank journal lines under ``root``."""
    total = 0
    for path in root.rglob("*.jsonl"):
        with open(path, "rb") as fh:
            total += sum(1 for line in fh if line.strip())
    return total


PLAIN = Extensions()     # the paper's journals: no extension


def journals_for(records: int, sites: int, seed: int, cache: Path,
                 extensions: Extensions = PLAIN) -> tuple[Path, int]:
    """A generated mission of about ``records`` chat records (reused when already on disk); with
    ``extensions``, the Contract 3 extensions as real journals have them now. Position reports
    (``extensions.positions`` units a site) come on top: they follow the mission's length, not
    its messages."""
    extended = dataclasses.replace(extensions, positions=0) != PLAIN
    units = f"-positions{extensions.positions}" if extensions.positions else ""
    target = cache / f"sites{sites}-records{records}-seed{seed}{'-extended' if extended else ''}{units}"
    marker = target / "generator.json"
    if marker.exists():
        return target, json.loads(marker.read_text())["records"]
    pilot = cache / "pilot"
    shutil.rmtree(pilot, ignore_errors=True)
    pilot_info = generate(pilot, sites, 4000, seed, duration=4000 / 20.0, extensions=extensions)
    per_message = (count_records(pilot) - pilot_info["position_lines"]) / 4000
    shutil.rmtree(pilot, ignore_errors=True)
    shutil.rmtree(target, ignore_errors=True)
    t0 = time.perf_counter()
    generate(target, sites, max(1, round(records / per_message)), seed, extensions=extensions)
    info = json.loads(marker.read_text())
    info["records"] = count_records(target)
    marker.write_text(json.dumps(info, indent=2))
    print(f"generated {info['records']} records in {time.perf_counter() - t0:.1f}s under {target}",
          file=sys.stderr)
    return target, info["records"]


def demo_journals(cache: Path, units: int = UNITS) -> tuple[Path, int]:
    """The demo-sized mission (``DEMO``), with ``units`` units a site reporting positions."""
    target = cache / (f"demo-positions{units}" if units else "demo")
    if not (target / "generator.json").exists():
        shutil.rmtree(target, ignore_errors=True)
        generate(target, DEMO["sites"], DEMO["messages"], DEMO["seed"], extensions=Extensions(positions=units))
    return target, count_records(target)


def _tree(root_pid: int, cpu: dict[int, float]) -> int:
    """Memory of a process and its descendants (``_pss``); records their CPU seconds in ``cpu``."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    ticks: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
        rss[int(entry)] = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
        ticks[int(entry)] = int(fields[11]) + int(fields[12])
    total, todo = 0, [root_pid]
    while todo:
        pid = todo.pop()
        total += _pss(pid, rss.get(pid, 0))
        cpu[pid] = max(cpu.get(pid, 0.0), ticks.get(pid, 0) / os.sysconf("SC_CLK_TCK"))
        todo.extend(children.get(pid, []))
    return total


def _pss(pid: int, rss: int) -> int:
    """A process's proportional set size: pages it shares count by their share. Summed RSS
    counted a JVM twice whenever it had just forked a child (a shell command, before its
    exec: 7.8 GiB for a 4.7 GiB job); ``rss`` if the kernel does not say."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return rss


def measured(cmd: list[str], timeout: float | None = None) -> dict[str, Any]:
    """Run ``cmd``; its wall time, CPU seconds and peak memory (process tree's PSS, sampled every 0.2 s)."""
    peak, cpu = 0, {}  # type: ignore[var-annotated]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stop = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not stop.is_set():
            peak = max(peak, _tree(proc.pid, cpu))
            stop.wait(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    stdout, stderr = proc.communicate(timeout=timeout)
    wall = time.perf_counter() - t0
    stop.set()
    sampler.join()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:4])}... failed ({proc.returncode}): {stderr.strip()[-2000:]}")
    return {"wall_seconds": wall, "cpu_seconds": sum(cpu.values()), "peak_pss_bytes": peak}


def run_job(journals: Path, out: Path, master: str, driver_memory: str, plan: str = "spark",
            conf: tuple[str, ...] = ()) -> dict[str, Any]:
    """The archive CLI in a child process: summary seconds and steps, wall, CPU, peak memory."""
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, "-m", "spark_archive", "--journals", str(journals), "--out", str(out),
           "--master", master, "--driver-memory", driver_memory, "--plan", plan, "--quiet"]
    for item in conf:
        cmd += ["--conf", item]
    result = measured(cmd)
    summary = json.loads((out / "summary.json").read_text())
    from spark_archive import cds
    return {**result, "job_seconds": summary["seconds"], "steps": summary["steps"],
            "plan": summary["plan"], "messages": summary["messages"], "records": summary["records"],
            # Whether the JVM started from the class data sharing archive (spark_archive/cds.py).
            "class_archive": bool(cds.java_options())}


def run_reference(journals: Path, result: Path) -> dict[str, Any]:
    """``bench/archive_reference.py`` in a child process."""
    run = measured([sys.executable, str(ROOT / "bench" / "archive_reference.py"), str(journals), str(result)])
    return {**run, **{k: v for k, v in json.loads(result.read_text()).items() if k in ("seconds", "steps")}}


# --- comparing the two results -----------------------------------------------------------------

KEYS = {"divergence": ("site",), "latency_pairs": ("origin", "destination"), "latency_precedence": ("precedence",),
        "latency_route": ("hops",), "repairs": ("origin", "destination"), "availability": ("site", "peer"),
        "position_age": ("site",)}


def _same(a: Any, b: Any) -> bool:
    if a in (None, "") and b in (None, ""):
        return True
    try:
        x, y = float(a), float(b)
    except (TypeError, ValueError):
        return str(a) == str(b)
    return math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-9)


def compare(reference: Path, out: Path) -> dict[str, Any]:
    """Differences between the reference's result and the Spark job's outputs."""
    ref = json.loads(reference.read_text())
    differences: list[str] = []
    for name, keys in KEYS.items():
        with open(out / f"{name}.csv", newline="") as fh:
            spark_rows = {tuple(r[k] for k in keys): r for r in csv.DictReader(fh)}
        ref_rows = {tuple(str(r[k]) for k in keys): r for r in ref["tables"][name]}
        if spark_rows.keys() != ref_rows.keys():
            differences.append(f"{name}: rows {sorted(ref_rows.keys() ^ spark_rows.keys())[:3]}")
            continue
        for key, row in ref_rows.items():
            bad = [c for c in row if c in spark_rows[key] and not _same(row[c], spark_rows[key][c])]
            if bad:
                differences.append(f"{name} {key}: {bad[:4]}")
    summary = json.loads((out / "summary.json").read_text())
    for name, value in ref["tables"]["totals"][0].items():
        if summary[name] != value:
            differences.append(f"summary {name}: {summary[name]} != {value}")
    for name, value in ref["tables"]["position_totals"][0].items():
        if summary["positions"][name] != value:
            differences.append(f"summary positions {name}: {summary['positions'][name]} != {value}")
    if hashlib.sha256((out / "tracks.csv").read_bytes()).hexdigest() != ref["tracks_csv_sha256"]:
        differences.append("tracks.csv differs")
    order = _spark_order(out)
    if order != [tuple(r) for r in ref["order"]]:
        first = next((i for i, (a, b) in enumerate(zip(order, ref["order"])) if tuple(b) != a), None)
        differences.append(f"transcript order differs (first at position {first}, {len(order)} rows)")
    return {"identical": not differences, "differences": differences[:20], "rows": len(ref["order"])}


def _spark_order(out: Path) -> list[tuple[Any, ...]]:
    """(msg_id, deliveries, late, never arrived) per position, from the job's JSON Lines transcript."""
    rows = []
    for path in out.glob("transcript_json/room=*/*.json"):
        with open(path) as fh:
            for line in fh:
                r = json.loads(line)
                rows.append((r["position"], r["msg_id"], len(r["deliveries"]), len(r.get("late_sites") or ()),
                             len(r.get("never_arrived") or ())))
    rows.sort()
    return [r[1:] for r in rows]


# --- a standalone cluster on this machine ------------------------------------------------------

def _free_ports(count: int) -> list[int]:
    socks = [socket.socket() for _ in range(count)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


class Standalone:
    """A Spark standalone master on loopback and workers of one core each, started on demand."""

    def __init__(self, work: Path, worker_memory: str) -> None:
        import pyspark
        self.home = Path(pyspark.__file__).parent
        self.work, self.worker_memory = work, worker_memory
        self.port, self.ui = _free_ports(2)
        self.procs: list[subprocess.Popen[bytes]] = []
        self._start("org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(self.port),
                    "--webui-port", str(self.ui), log="master")

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _start(self, cls: str, *args: str, log: str) -> None:
        self.work.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "SPARK_HOME": str(self.home), "SPARK_LOCAL_IP": "127.0.0.1",
               "SPARK_LOG_DIR": str(self.work)}
        with open(self.work / f"{log}.log", "wb") as sink:
            self.procs.append(subprocess.Popen([str(self.home / "bin" / "spark-class"), cls, *args], env=env,
                                               stdout=sink, stderr=subprocess.STDOUT, start_new_session=True))

    def add_worker(self) -> None:
        n = len(self.procs)
        port, ui = _free_ports(2)
        self._start("org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--port", str(port),
                    "--webui-port", str(ui), "--cores", "1", "--memory", self.worker_memory,
                    "--work-dir", str(self.work / f"worker{n}"), self.url, log=f"worker{n}")
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.ui}/json/", timeout=2) as resp:
                    if json.load(resp).get("aliveworkers", 0) >= n:
                        return
            except OSError:
                pass
            time.sleep(0.5)
        raise SystemExit("a standalone worker did not register in 90 s")

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()


def scale_out(journals: Path, data: Path, executor_memory: str) -> dict[str, Any]:
    """The job on one worker, then on two: job and wall seconds of each, and their ratios."""
    cluster = Standalone(data / "standalone", worker_memory=executor_memory)
    runs = {}
    try:
        for workers in (1, 2):
            cluster.add_worker()
            runs[workers] = run_job(journals, data / f"out-cluster{workers}", cluster.url, "2g", conf=(
                f"spark.cores.max={workers}", f"spark.executor.memory={executor_memory}",
                f"spark.sql.shuffle.partitions={8}"))
    finally:
        cluster.stop()
    return {"one_worker": runs[1], "two_workers": runs[2],
            "speedup_job": runs[1]["job_seconds"] / runs[2]["job_seconds"],
            "speedup_wall": runs[1]["wall_seconds"] / runs[2]["wall_seconds"]}


# --- modes --------------------------------------------------------------------------------------

def small(args: argparse.Namespace) -> dict[str, Any]:
    """The demo-sized mission through the CLI as an operator runs it, and forced onto Spark."""
    journals, records = demo_journals(args.data, args.positions)
    auto = [run_job(journals, args.data / "out-demo", "local[2]", "1g", plan="auto") for _ in range(args.repeat)]
    spark = run_job(journals, args.data / "out-demo-spark", "local[2]", "1g", plan="spark")
    walls = [r["wall_seconds"] for r in auto]
    result = {"records": records, "plan": auto[0]["plan"], "wall_seconds": walls,
              "wall_median": statistics.median(walls),
              "cpu_seconds_median": statistics.median(r["cpu_seconds"] for r in auto),
              "peak_pss_bytes": max(r["peak_pss_bytes"] for r in auto), "spark_plan": spark,
              "load_average": os.getloadavg()}
    print(f"archive --small: {records} records, 4 sites, through the CLI (plan {result['plan']}): "
          f"median {result['wall_median']:.1f}s wall of {len(walls)} runs "
          f"({', '.join(f'{w:.1f}' for w in walls)}), {result['cpu_seconds_median']:.1f} CPU-s, "
          f"peak memory (PSS) {result['peak_pss_bytes'] / 2**20:.0f} MiB; "
          f"the Spark plan on it: {spark['wall_seconds']:.1f}s "
          f"wall, {spark['cpu_seconds']:.1f} CPU-s; target <= 15 s; load average {os.getloadavg()[0]:.1f}; "
          f"class data sharing archive: {'used' if spark['class_archive'] else 'not built'}")
    return result


def quick(args: argparse.Namespace) -> dict[str, Any]:
    """Seconds: the demo mission through the CLI, checked against the reference."""
    journals, records = demo_journals(args.data, args.positions)
    run = run_job(journals, args.data / "out-quick", "local[2]", "1g", plan="auto")
    ref = run_reference(journals, args.data / "reference-quick.json")
    check = compare(args.data / "reference-quick.json", args.data / "out-quick")
    steps = run["steps"]
    computing = sum(steps.get(k, 0.0) for k in ("scan journals", "transcript", "tables"))
    fixed = run["wall_seconds"] - computing
    print(f"archive --quick: {fixed / run['wall_seconds']:.0%} of the wall time is Spark's fixed cost "
          f"(start, writes; computing the archive took {computing:.2f}s): {records} records in "
          f"{run['wall_seconds']:.1f}s wall (plan {run['plan']}, {run['cpu_seconds']:.1f} CPU-s), "
          f"outputs agree with the reference: {check['identical']}")
    return {"records": records, "job": run, "reference": ref, "fixed_share": fixed / run["wall_seconds"], **check}


def full(args: argparse.Namespace) -> dict[str, Any]:
    journals, records = journals_for(args.records, args.sites, args.seed, args.data, dataclasses.replace(
        EXTENDED if args.extended else PLAIN, positions=args.positions))
    job = run_job(journals, args.data / "out-big", args.master, args.driver_memory)
    ref = run_reference(journals, args.data / "reference-big.json")
    check = compare(args.data / "reference-big.json", args.data / "out-big")
    result = {
        "records": records, "sites": args.sites, "master": args.master, "extended": args.extended,
        # 1. Ratios (the reference did the same work minus writing the datasets).
        "ratio_wall": ref["wall_seconds"] / job["wall_seconds"],
        "ratio_job": ref["seconds"] / job["job_seconds"],
        "ratio_cpu": ref["cpu_seconds"] / job["cpu_seconds"],
        # 2. Records per CPU-second.
        "records_per_cpu_second": records / job["cpu_seconds"],
        "reference_records_per_cpu_second": records / ref["cpu_seconds"],
        # 3. Wall and memory.
        "job": job, "reference": ref, **check,
    }
    kind = "extended records" if args.extended else "records"
    print(f"archive: {records:,} {kind}, {args.sites} sites: Spark job {result['ratio_wall']:.2f}x faster "
          f"than the pure-Python reference (wall; job proper {result['ratio_job']:.2f}x, target >= 3x), "
          f"outputs agree: {check['identical']}")
    print(f"  records per CPU-second: Spark {result['records_per_cpu_second']:,.0f} "
          f"({job['cpu_seconds']:.0f} CPU-s), reference {result['reference_records_per_cpu_second']:,.0f} "
          f"({ref['cpu_seconds']:.0f} CPU-s)")
    print(f"  wall: Spark {job['wall_seconds']:.1f}s (job {job['job_seconds']:.1f}s at {args.master}), "
          f"reference {ref['wall_seconds']:.1f}s; peak memory (PSS): Spark {job['peak_pss_bytes'] / 2**30:.2f} GiB "
          f"(driver memory {args.driver_memory}), reference {ref['peak_pss_bytes'] / 2**30:.2f} GiB; "
          f"class data sharing archive: {'used' if job['class_archive'] else 'not built'}")
    if not args.no_cluster:
        result["scale_out"] = scale_out(journals, args.data, args.executor_memory)
        s = result["scale_out"]
        print(f"  standalone cluster, same journals: one worker {s['one_worker']['job_seconds']:.1f}s, "
              f"two workers {s['two_workers']['job_seconds']:.1f}s (one core each): "
              f"{s['speedup_job']:.2f}x (wall {s['speedup_wall']:.2f}x)")
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=10_000_000)
    parser.add_argument("--sites", type=int, default=10)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--driver-memory", default="4g")
    parser.add_argument("--executor-memory", default="5g", help="per worker of the standalone cluster")
    parser.add_argument("--no-cluster", action="store_true", help="skip the standalone cluster runs")
    parser.add_argument("--extended", action="store_true",
                        help="journals with every Contract 3 extension (precedence, relays, repair, control, "
                             "acknowledgements), as the suite writes them now; results to archive-extended.json")
    parser.add_argument("--positions", type=int, default=UNITS, metavar="UNITS",
                        help=f"units per site reporting positions in the generated journals (default {UNITS}; 0: "
                             "none, the journals of the runs before positions)")
    parser.add_argument("--small", action="store_true", help="time a demo-sized mission through the CLI")
    parser.add_argument("--quick", action="store_true", help="seconds: the demo mission, checked")
    parser.add_argument("--repeat", type=int, default=3, help="runs of the demo mission (--small)")
    parser.add_argument("--data", type=Path, default=Path("/tmp/rcm-archive-bench"),
                        help="where generated journals and outputs live (reused between runs)")
    args = parser.parse_args()
    args.data.mkdir(parents=True, exist_ok=True)
    mode = "quick" if args.quick else "small" if args.small else "full"
    result = {"quick": quick, "small": small, "full": full}[mode](args)
    result = {"benchmark": "archive", "mode": mode, "at": time.strftime("%Y-%m-%dT%H:%M:%S"), **result,
              "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                          "load_average_at_end": os.getloadavg()},
              "command": " ".join([Path(sys.executable).name, *sys.argv])}
    RESULTS.mkdir(parents=True, exist_ok=True)
    name = ("archive-extended.json" if args.extended else "archive.json") if mode == "full" \
        else f"archive-{mode}.json"
    (RESULTS / name).write_text(json.dumps(result, indent=2, default=str) + "\n")
    return 0 if result.get("identical", True) else 1


if __name__ == "__main__":
    sys.exit(main())
