"""bench/_disk_probe.py: the disk's flush latency beside a benchmark round (peer_irc_fanout.py --disk-probe)."""
from __future__ import annotations

import time
from pathlib import Path

from bench._disk_probe import disk_probe, summarize


def test_a_summary_reads_the_tail_and_counts_the_slow_syncs() -> None:
    s = summarize([0.001] * 98 + [0.06, 0.9])
    assert s == {"syncs": 100, "p50_ms": 1.0, "p99_ms": 900.0, "max_ms": 900.0, "over_50ms": 2}
    assert summarize([]) == {"syncs": 0}


def test_the_probe_syncs_while_the_round_runs_and_reports_when_it_ends(tmp_path: Path) -> None:
    with disk_probe(tmp_path) as probe:
        assert probe.summary is None
        log = tmp_path / "disk-probe.log"
        while not log.exists() or log.stat().st_size < 3 * 300:     # three syncs made
            time.sleep(0.01)
    assert probe.summary is not None and probe.summary["syncs"] >= 3
    assert probe.summary["max_ms"] >= probe.summary["p50_ms"] > 0
