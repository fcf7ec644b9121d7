"""CPU readings the benchmarks lead with: a process tree's (bench/_profile.py ``tree_cpu``), the machine's
(``machine_cpu``), and the suite's per-area summary built from them (bench/suite_cpu.py)."""
from __future__ import annotations

import os
import subprocess
import sys
import time

from bench import _profile
from bench.suite_cpu import area, summarise

BURN = "import time\nend = time.process_time() + 0.5\nwhile time.process_time() < end: pass\n"


def test_a_tree_counts_a_running_child_and_one_it_has_waited_for() -> None:
    before = _profile.tree_cpu(os.getpid())
    running = subprocess.Popen([sys.executable, "-c", BURN + "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        while (_profile.cpu_seconds(running.pid) or 0.0) < 0.5:    # the child has burned its half second
            time.sleep(0.01)                                        # (this process burning none meanwhile)
        assert _profile.tree_cpu(os.getpid()) - before >= 0.5       # alive: read from its own /proc entry
    finally:
        running.communicate(b"", timeout=60)
    subprocess.run([sys.executable, "-c", BURN], check=True, timeout=60)
    assert _profile.tree_cpu(os.getpid()) - before >= 1.0           # both waited for: in this process's cutime


def test_a_tree_is_its_root_and_no_process_none_and_the_machine_counts_every_process() -> None:
    machine = _profile.machine_cpu()
    outside = subprocess.Popen([sys.executable, "-c", BURN + "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        while (_profile.cpu_seconds(outside.pid) or 0.0) < 0.5:
            time.sleep(0.01)
        assert _profile.tree_cpu(outside.pid) >= 0.5
        assert _profile.tree_cpu(1 << 30) == 0.0                    # no such process: nothing
        assert _profile.machine_cpu() - machine >= 0.5
    finally:
        outside.communicate(b"", timeout=60)


def test_the_summary_splits_by_area_and_leads_with_the_budget_ratios() -> None:
    rows = [{"test": "tests/rcm/test_a.py::t1", "cpu": 30.0, "wall": 10.0},
            {"test": "tests/rcm/test_a.py::t2", "cpu": 10.0, "wall": 5.0},
            {"test": "tests/test_bench_quick.py::t[x]", "cpu": 20.0, "wall": 20.0}]
    s = summarise(rows, machine=84.0, wall=42.0)
    assert (s["ratio_cpu_over_budget"], s["ratio_wall_over_budget"], s["cores_busy"]) == (0.1, 0.1, 2.0)
    assert s["areas"] == [{"area": "tests/rcm", "cpu_s": 40.0, "tests": 2},
                          {"area": "tests/test_bench_quick.py", "cpu_s": 20.0, "tests": 1}]
    assert s["modules"][0] == {"module": "tests/rcm/test_a.py", "cpu_s": 40.0}
    assert [t["test"] for t in s["heaviest"]] == ["tests/rcm/test_a.py::t1", "tests/test_bench_quick.py::t[x]",
                                                  "tests/rcm/test_a.py::t2"]
    assert s["attributed_cpu_s"] == 60.0 and area("tests/chat_server/test_x.py::t") == "tests/chat_server"
