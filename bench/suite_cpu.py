"""Where the test suite's time goes: CPU seconds per area, module and test, against the 7-minute budget.

``make test`` on this 2-core machine is CPU-bound: every core is busy from its first test to its last, so
its length is the CPU its tests use divided by two, not its longest test. This runs the suite as
``make test`` does (four pytest-xdist workers; the arguments after ``--`` replace ``-n 4 tests``) with
itself as a pytest plugin (``-p bench.suite_cpu``): each worker writes, per test, the CPU of its process
tree over the test (``_profile.tree_cpu``: the interpreter, and the JVMs, servers and browsers the test
started), set-up and teardown included. The machine's busy CPU over the whole run (``_profile.machine_cpu``)
counts what the trees miss (pytest-xdist's own work, daemons that left a tree, the kernel's network work).

The summary leads with the ratios that hold on any machine: the machine's CPU over the budget's (two cores
for 420 s) and the run's length over 420 s; then the shares of the areas (``tests/<dir>``) and the
heaviest modules and tests. Results go to bench/results/suite_cpu.json. docs/testing.md holds the figures.

    .venv/bin/python bench/suite_cpu.py                    # the whole suite, as make test runs it (~13 min)
    .venv/bin/python bench/suite_cpu.py -- -n 2 tests/rcm  # a part
    .venv/bin/python bench/suite_cpu.py --quick            # tests/contracts in one process (seconds)
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._common import RESULTS, write_result  # noqa: E402
from bench._profile import machine_cpu, tree_cpu  # noqa: E402

BUDGET_S = 420.0           # the suite's budget on this machine: 7 minutes
CORES = 2
OUT_ENV = "RCM_SUITE_CPU_OUT"


# --- the plugin: in each pytest process, one line per test ----------------------------------------------------
@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    out = os.environ.get(OUT_ENV)
    if not out:
        yield
        return
    me = os.getpid()
    cpu0, t0 = tree_cpu(me), time.monotonic()
    yield
    cpu, wall = tree_cpu(me) - cpu0, time.monotonic() - t0
    with open(out, "a") as f:       # one short line per write: the workers' lines never interleave
        f.write(json.dumps({"test": item.nodeid, "cpu": round(cpu, 2), "wall": round(wall, 2),
                            "worker": os.environ.get("PYTEST_XDIST_WORKER", "")}) + "\n")


# --- the benchmark -----------------------------------------------------------------------------------------------
def area(nodeid: str) -> str:
    """``tests/<dir>`` of a test, or its module for a module at the top of tests/."""
    parts = nodeid.split("::", 1)[0].split("/")
    return "/".join(parts[:2]) if len(parts) > 2 else "/".join(parts)


def summarise(rows: list[dict[str, Any]], machine: float, wall: float, top: int = 12) -> dict[str, Any]:
    attributed = sum(r["cpu"] for r in rows)
    areas: Counter[str] = Counter()
    modules: Counter[str] = Counter()
    counts: Counter[str] = Counter()
    for r in rows:
        where = area(r["test"])
        areas[where] += r["cpu"]
        counts[where] += 1
        modules[r["test"].split("::", 1)[0]] += r["cpu"]
    heaviest = sorted(rows, key=lambda r: -r["cpu"])[:top]
    return {
        "ratio_cpu_over_budget": round(machine / (CORES * BUDGET_S), 2),
        "ratio_wall_over_budget": round(wall / BUDGET_S, 2),
        "machine_cpu_s": round(machine, 1), "wall_s": round(wall, 1), "cores_busy": round(machine / wall, 2),
        "tests": len(rows), "attributed_cpu_s": round(attributed, 1),
        "areas": [{"area": a, "cpu_s": round(c, 1), "tests": counts[a]} for a, c in areas.most_common()],
        "modules": [{"module": m, "cpu_s": round(c, 1)} for m, c in modules.most_common(top)],
        "heaviest": [{"test": r["test"], "cpu_s": r["cpu"], "wall_s": r["wall"]} for r in heaviest],
    }


def render(s: dict[str, Any]) -> str:
    share = s["attributed_cpu_s"] / s["machine_cpu_s"] if s["machine_cpu_s"] else 0.0
    lines = [f"suite_cpu: CPU over the budget's (2 cores x 420 s) {s['ratio_cpu_over_budget']}, length over 420 s "
             f"{s['ratio_wall_over_budget']}: {s['tests']} tests used {s['machine_cpu_s']:.0f} CPU-s of the machine "
             f"in {s['wall_s']:.0f} s ({s['cores_busy']} cores busy); {share:.0%} of it in the tests' process trees",
             "", f"{'CPU-s':>8} {'share':>6} {'tests':>6}  area"]
    whole = max(s["machine_cpu_s"], 1e-9)
    lines += [f"{a['cpu_s']:8.1f} {a['cpu_s'] / whole:6.1%} {a['tests']:6d}  {a['area']}" for a in s["areas"]]
    lines += ["", f"{'CPU-s':>8}  module"]
    lines += [f"{m['cpu_s']:8.1f}  {m['module']}" for m in s["modules"]]
    lines += ["", f"{'CPU-s':>8} {'wall s':>7}  test"]
    lines += [f"{t['cpu_s']:8.1f} {t['wall_s']:7.1f}  {t['test']}" for t in s["heaviest"]]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="tests/contracts in one process: a smoke run")
    ap.add_argument("pytest_args", nargs="*", help="after --: what to run instead of '-n 4 tests'")
    a = ap.parse_args()
    args = a.pytest_args or (["-n", "0", "tests/contracts"] if a.quick else ["-n", "4", "tests"])
    # A base directory as short as the Makefile's (/tmp/rcmt.XXXXXX): the runs' Unix socket paths are made under
    # it and must stay under the kernel's 108 bytes (a longer one failed the scenario runner's tests).
    with tempfile.TemporaryDirectory(prefix="r.", dir="/tmp") as base, \
            tempfile.NamedTemporaryFile(prefix="rcm-suite-cpu-", suffix=".jsonl") as lines:
        out = Path(lines.name)
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "bench.suite_cpu", "-p", "no:cacheprovider",
               f"--basetemp={base}", *args]
        machine0, t0 = machine_cpu(), time.monotonic()
        # As the Makefile's test target runs it: bytecode cached under .venv/pycache (docs/testing.md).
        env = {**os.environ, OUT_ENV: str(out), "PYTHONDONTWRITEBYTECODE": "",
               "PYTHONPYCACHEPREFIX": str(ROOT / ".venv" / "pycache")}
        done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
        machine, wall = machine_cpu() - machine0, time.monotonic() - t0
        if done.returncode != 0:
            RESULTS.mkdir(parents=True, exist_ok=True)
            log = RESULTS / "suite_cpu_pytest.txt"
            log.write_text(done.stdout + done.stderr)
            sys.exit(f"suite_cpu: pytest exited {done.returncode}, so the figures would not be the suite's "
                     f"(its whole output: {log}):\n{done.stdout[-3000:]}{done.stderr[-2000:]}")
        rows = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    if not rows:
        sys.exit("suite_cpu: no test reported its CPU (was the plugin loaded?)")
    s = summarise(rows, machine, wall)
    s["pytest_args"] = args
    path = write_result("suite_cpu_quick" if a.quick else "suite_cpu", s)
    print(render(s))
    print(f"-> {path}")


if __name__ == "__main__":
    main()
