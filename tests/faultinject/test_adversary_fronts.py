"""A hostile client of the chat server's IRC and TAK front ends (faultinject.adversary.chat_probe's ``irc/...`` and
``tak/...`` kinds, drawn by ``irc_lines`` and ``tak_events``): the front ends' own reader code, fed without sockets.

Every write must be answered or dropped, nothing worse; cost work linear in its size; leave memory bounded; and
leave the honest user alice served on the WebSocket, IRC and TAK alike. ``bench/fuzz_bounds.py`` runs these kinds
(``--kinds chat/irc,chat/tak``; its ``--quick`` mode, run by tests/test_bench_quick.py, 50 of each); here one site
takes a few of every kind, to stay within the suite's time.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

from faultinject.adversary import chat_probe, irc_lines, tak_events
from faultinject.adversary.irc_lines import IrcLine

FRONT_KINDS = sorted([*irc_lines.KINDS, *tak_events.KINDS])
BENCH = Path(__file__).resolve().parents[2] / "bench" / "fuzz_bounds.py"


def test_the_front_end_kinds_are_fuzz_bounds_kinds_and_a_prefix_names_them():
    spec = importlib.util.spec_from_file_location("fuzz_bounds_under_test", BENCH)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert {f"chat/{k}" for k in FRONT_KINDS} <= set(bench.KINDS)
    work = bench._work([k for k in bench.KINDS if k.startswith("chat/tak/")], 200, 50, 1, 100)
    assert sorted(w[0] for w in work) == sorted(f"chat/{k}" for k in tak_events.KINDS)


def test_no_hostile_irc_or_tak_write_escapes_hangs_or_mutes_the_chat_server():
    probe = chat_probe.ChatProbe(seed=11)
    try:
        probe.warm(3)
        report = chat_probe.ChatReport("fronts")
        for kind in FRONT_KINDS:
            for _ in range(12):
                probe.feed(kind, report)
        probe._serve_alice(report, "(every front-end kind)")
        assert report.violation_count == 0, report.violations
        assert report.inputs == 12 * len(FRONT_KINDS) and report.served >= 1
        assert report.refused < report.inputs
        assert {"irc", "tak", "alice-irc", "alice-tak"} <= set(probe.links)
    finally:
        probe.close()


def test_the_probe_sees_an_irc_line_whose_targets_drive_the_work(monkeypatch):
    """It must fail on the bug class it found: a PRIVMSG naming one channel 500 times was 500 says."""
    from chat_server import irc_commands

    monkeypatch.setattr(irc_commands, "targets_of", lambda param: param.split(","))
    monkeypatch.setattr(irc_commands, "MAX_TARGETS", 10**6)
    line = IrcLine(b"PRIVMSG " + b",".join([b"#r0"] * 500) + b" :again\r\n")
    monkeypatch.setitem(chat_probe.KINDS, "irc/message", lambda inputs, hint: line)
    probe = chat_probe.ChatProbe(seed=5)
    try:
        probe.warm(2)
        report = chat_probe.ChatReport("irc/message")
        probe.feed("irc/message", report)
        assert report.violation_count > 0 and "calls for an input" in report.violations[0], report.violations
    finally:
        probe.close()
