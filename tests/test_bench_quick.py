"""Benchmarks cannot rot (issue 23 item 4): every benchmark in bench/ runs in its ``--quick`` mode, exits 0
and prints its summary line (a line starting with its name). No figure is asserted: a benchmark on a
shared 2-core machine measures what it can; this only proves that it still runs end to end.

A benchmark is a ``bench/*.py`` with a ``__main__`` block; helpers are ``_*.py`` and the few named in
HELPERS (run by a benchmark, not on their own). A new benchmark without ``--quick`` fails here.
Outputs go to a temporary directory (``RCM_BENCH_RESULTS``), never over a real run's figures.

The quick runs mostly wait (on timers, links, outages): they all start at once, PARALLEL at a time, in
one module fixture, and each test reports its own benchmark's run (the suite's time, issue 20 item 6).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bench._common import TOO_LOADED

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
HELPERS = {
    "peer_irc.py": "the IRC peer and its client, used by peer_irc_fanout.py and peer_irc_outage.py",
    "archive_reference.py": "the pure-Python reference archive, a child process of archive.py",
    "archive_profile.py": "a profiler of the archive job, run by hand (docs/archive.md); "
                          "its event-log reading is tested in tests/spark_archive/test_archive_profile.py",
}
NEEDS = {                      # system programs a benchmark needs (deploy/sysdeps.sh installs them)
    "peer_irc_fanout.py": "/usr/sbin/ngircd",
    "peer_irc_outage.py": "/usr/sbin/ngircd",
    "archive.py": "java",
}
ELSEWHERE = {                  # run by another test module, beside the tests that share its resources
    "archive.py": "tests/spark_archive/test_archive_cli.py",   # on the Spark worker: one JVM at a time there
}
PENDING: dict[str, str] = {}   # a benchmark announced by another engineer, skipped until it has --quick
TIMEOUT = 240                  # seconds per benchmark: generous, a quick run takes a few on an idle machine
PARALLEL = 8                   # quick runs at once (most of a quick run is waiting)
SLOW_FIRST = ("hf.py", "relay.py", "peer_irc_fanout.py", "paced_drain.py", "search.py", "precedence.py",
              "fuzz_bounds.py", "peer_irc_outage.py", "positions.py", "login_storm.py", "client_memory.py")


def _positions_shape(doc: dict[str, Any]) -> None:
    """bench/positions.py: both modes, the two ratios, bytes for each of the four sites, age percentiles."""
    assert {"ratio_bytes_baseline_over_latest", "ratio_age_p95_baseline_over_latest", "latest", "baseline"} <= set(doc)
    assert len(doc["sites"]) == 4
    for mode in ("latest", "baseline"):
        m = doc[mode]
        assert set(m["bytes_per_site_per_minute"]) == set(doc["sites"])
        assert {"p50", "p95", "max"} <= set(m["age_s"]) and m["age_s"]["n"] > 0 and m["reports_sent"] > 0


def _scaling_shape(doc: dict[str, Any]) -> None:
    """bench/scaling.py: each size under load and idle, the per-site figures per kind, the growth fits."""
    assert doc["sizes"] == [4, 8, 16] and set(doc["runs"]) == set(doc["protocols"]) == {"lamport"}
    for r in (*doc["runs"]["lamport"], *doc["idle"]):
        assert {"heartbeat", "linkstate", "ordering", "control", "total"} <= set(r["per_site_per_minute"])
        assert len(r["per_site"]) == r["sites"] and {"latency_p50_s", "bytes_per_message_per_link"} <= set(r)
    assert [r["sites"] for r in doc["runs"]["lamport"]] == doc["sizes"]
    fits = doc["fits"]["lamport"]
    assert {"exponent", "factor"} <= set(fits["per_site_per_minute_vs_sites"]["control"])
    assert {"sites_exponent", "neighbours_exponent"} <= set(fits["per_site_vs_sites_and_neighbours"]["heartbeat"])


RESULT_SHAPES = {             # a benchmark's --quick result file and a check of its shape (never of its figures)
    "positions.py": ("positions_quick.json", _positions_shape),
    "scaling.py": ("scaling_quick.json", _scaling_shape),
}


def benchmarks() -> list[str]:
    out = []
    for p in sorted(BENCH.glob("*.py")):
        if p.name.startswith("_") or p.name in HELPERS:
            continue
        if re.search(r"""^if __name__ == ["']__main__["']""", p.read_text(), re.M):
            out.append(p.name)
    return out


def test_the_benchmarks_are_found():
    names = benchmarks()
    assert {"rcm_latency.py", "rcm_throughput.py", "rcm_wire.py", "chat_fanout.py", "soak.py",
            "precedence.py"} <= set(names)
    assert not set(HELPERS) & set(names)


def test_every_benchmark_writes_where_rcm_bench_results_says():
    """One home for where results go (bench/_common.py ``RESULTS``, moved by RCM_BENCH_RESULTS): a benchmark
    that made its own path wrote its quick run's figures over a real run's in bench/results."""
    own = [p.name for p in sorted(BENCH.glob("*.py")) if p.name != "_common.py"
           and re.search(r"""["']results["']""", p.read_text())]
    assert not own, f"these make their own results path instead of importing bench._common.RESULTS: {own}"


@dataclass
class Run:
    name: str
    returncode: int | None = None
    stdout: str = ""
    stderr: str = ""
    took: float = 0.0
    skipped: str = ""
    results: Path | None = None


def _run(name: str, results: Path) -> Run:
    if name in ELSEWHERE:
        return Run(name, skipped=f"run by {ELSEWHERE[name]}")
    source = (BENCH / name).read_text()
    if "--quick" not in source:
        return Run(name, skipped="no --quick")
    need = NEEDS.get(name)
    if need is not None and shutil.which(need) is None and not Path(need).exists():
        return Run(name, skipped=f"bench/{name} needs {need} (bash deploy/sysdeps.sh)")
    out = results / name[:-3]
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "RCM_BENCH_RESULTS": str(out), "PYTHONHASHSEED": "0"}
    t0 = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, str(BENCH / name), "--quick"], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired as e:
        return Run(name, None, str(e.stdout or ""), f"timed out after {TIMEOUT} s", time.monotonic() - t0)
    return Run(name, proc.returncode, proc.stdout, proc.stderr, time.monotonic() - t0, results=out)


@pytest.fixture(scope="module")
def quick_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Run]:
    results = tmp_path_factory.mktemp("bench-results")
    with ThreadPoolExecutor(PARALLEL) as pool:
        names = sorted(benchmarks(), key=lambda n: (n not in SLOW_FIRST, SLOW_FIRST.index(n) if n in SLOW_FIRST else 0))
        runs = list(pool.map(lambda n: _run(n, results), names))
    return {r.name: r for r in runs}


@pytest.mark.slow
@pytest.mark.timeout(3 * TIMEOUT)
@pytest.mark.parametrize("name", benchmarks())
def test_benchmark_quick_mode_runs_and_prints_its_summary_line(name: str, quick_runs: dict[str, Run]):
    run = quick_runs[name]
    if run.skipped == "no --quick" and name in PENDING:
        pytest.skip(f"bench/{name} ({PENDING[name]}) has no --quick mode yet")
    assert run.skipped != "no --quick", f"bench/{name} has no --quick mode (issue 23 item 4: every benchmark has one)"
    if name in ELSEWHERE:
        # Not skipped silently: the module named runs it (and fails if it rots).
        assert f"bench/{name}" in (ROOT / ELSEWHERE[name]).read_text(), f"{ELSEWHERE[name]} no longer runs it"
        return
    if run.skipped:
        pytest.skip(run.skipped)
    if run.returncode == TOO_LOADED:                # it could not measure now, and said why
        pytest.skip(f"bench/{name} --quick: {run.stderr.strip()[-300:]}")
    stem = name[:-3]
    summary = [line for line in run.stdout.splitlines() if re.match(rf"{re.escape(stem)}[: ]", line)]
    assert run.returncode == 0, f"bench/{name} --quick exited {run.returncode} after {run.took:.1f} s:\n" \
                                f"{run.stdout[-2000:]}\n{run.stderr[-3000:]}"
    assert summary, f"bench/{name} --quick printed no summary line starting with {stem!r}:\n{run.stdout[-2000:]}"
    if name in RESULT_SHAPES:
        file, check = RESULT_SHAPES[name]
        assert run.results is not None
        check(json.loads((run.results / file).read_text()))
    print(f"{name}: {run.took:.1f} s: {summary[0][:160]}")
