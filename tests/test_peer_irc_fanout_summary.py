"""bench/peer_irc_fanout.py's summary: medians and ratios to ngircd over the rounds, a round whose receivers fell
short (``ShortJoin``) left out of that system's figures and of every ratio that round, and counted."""
from __future__ import annotations

from typing import Any

from bench.peer_irc_fanout import line, summarize


def _run(p99: float, cpu: float = 3.0) -> dict[str, Any]:
    return {"p50_ms": p99 / 2, "p99_ms": p99, "server_rss_mib": 100.0, "settle_s": 1.0, "clients": 5000,
            "joined": 5000, "lines_received": 1000, "expected": 1000, "cpu_s_per_1000x1000": {"chat": cpu}}


def test_a_round_left_out_counts_in_no_median_and_no_ratio_and_is_said() -> None:
    rounds = [{"irc/uvloop": _run(100.0), "ngircd": _run(50.0)},
              {"irc/uvloop": _run(300.0), "ngircd": {"left_out": "only 4968 of 5000 joined"}},
              {"irc/uvloop": {"left_out": "only 4900 of 5000 joined"}, "ngircd": _run(60.0)},
              {"irc/uvloop": _run(120.0, cpu=2.0), "ngircd": _run(40.0)}]
    s = summarize(rounds)
    irc, ngircd = s["irc/uvloop"], s["ngircd"]
    assert irc["p99_ms_runs"] == [100.0, 300.0, 120.0] and irc["p99_ms"] == 120.0
    assert irc["ratio_p99_runs"] == [2.0, 3.0] and irc["ratio_p99"] == 2.5     # rounds 1 and 4 only
    assert irc["ratio_cpu_runs"] == [1.0, 2.0 / 3.0]
    assert ngircd["p99_ms_runs"] == [50.0, 60.0, 40.0]
    assert irc["rounds_left_out"] == 1 and ngircd["rounds_left_out"] == 1
    assert "1 rounds left out" in line("ngircd", ngircd)


def test_a_system_left_out_of_every_round_is_not_summarized_and_has_no_ratio_against_it() -> None:
    s = summarize([{"irc/uvloop": _run(100.0), "ngircd": {"left_out": "short"}}])
    assert set(s) == {"irc/uvloop"} and s["irc/uvloop"].get("ratio_p99") is None
