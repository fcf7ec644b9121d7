"""Benchmarks cannot rot (issue 23 item 4): every benchmark in bench/ runs in its ``--quick`` mode, exits 0
and prints its summary line (a line starting with its name). No figure is asserted: a benchmark on a
shared 2-core machine measures what it can; this only proves that it still runs end to end.

A benchmark is a ``bench/*.py`` with a ``__main__`` block; helpers are ``_*.py`` and the few named in
HELPERS (run by a benchmark, not on their own). A new benchmark without ``--quick`` fails here.
Outputs go to a temporary directory (``RCM_BENCH_RESULTS``), never over a real run's figures.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
HELPERS = {
    "peer_irc.py": "the IRC peer and its client, used by peer_irc_fanout.py and peer_irc_outage.py",
    "archive_reference.py": "the pure-Python reference archive, a child process of archive.py",
}
NEEDS = {                      # system programs a benchmark needs (deploy/sysdeps.sh installs them)
    "peer_irc_fanout.py": "/usr/sbin/ngircd",
    "peer_irc_outage.py": "/usr/sbin/ngircd",
    "archive.py": "java",
}
PENDING = {                    # another engineer's benchmark whose --quick is announced: skipped until it has one
    "relay.py": "the RCM engineer's relaying benchmark",
}
TIMEOUT = 240                  # seconds per benchmark: generous, a quick run takes a few on an idle machine


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
    assert {"rcm_latency.py", "rcm_throughput.py", "rcm_wire.py", "chat_fanout.py", "soak.py"} <= set(names)
    assert not set(HELPERS) & set(names)


@pytest.mark.slow
@pytest.mark.timeout(TIMEOUT + 30)
@pytest.mark.parametrize("name", benchmarks())
def test_benchmark_quick_mode_runs_and_prints_its_summary_line(name: str, tmp_path: Path):
    source = (BENCH / name).read_text()
    if "--quick" not in source and name in PENDING:
        pytest.skip(f"bench/{name} ({PENDING[name]}) has no --quick mode yet")
    assert "--quick" in source, f"bench/{name} has no --quick mode (issue 23 item 4: every benchmark has one)"
    need = NEEDS.get(name)
    if need is not None and shutil.which(need) is None and not Path(need).exists():
        pytest.skip(f"bench/{name} needs {need} (bash deploy/sysdeps.sh)")
    env = {**os.environ, "RCM_BENCH_RESULTS": str(tmp_path), "PYTHONHASHSEED": "0"}
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, str(BENCH / name), "--quick"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=TIMEOUT)
    took = time.monotonic() - t0
    stem = name[:-3]
    summary = [line for line in proc.stdout.splitlines() if re.match(rf"{re.escape(stem)}[: ]", line)]
    assert proc.returncode == 0, f"bench/{name} --quick exited {proc.returncode} after {took:.1f} s:\n" \
                                 f"{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    assert summary, f"bench/{name} --quick printed no summary line starting with {stem!r}:\n{proc.stdout[-2000:]}"
    print(f"{name}: {took:.1f} s: {summary[0][:160]}")
