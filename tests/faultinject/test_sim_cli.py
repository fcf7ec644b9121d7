"""``python -m faultinject sim``: exit codes, replay commands, traces."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from contracts import journal as J
from faultinject.__main__ import main
from ordering import registry
from ordering.lamport import LamportIGO


class Eager(LamportIGO):
    name = "lamport"

    def _blocked_by(self, key):
        return None


def test_passing_seeds_exit_zero_with_a_table(capsys, tmp_path):
    code = main(["sim", "--protocol", "all", "--seeds", "3", "--seed", "40", "--quiet",
                 "--trace-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0
    for proto in ("lamport", "sequencer", "hybrid"):
        assert f"{proto}: 3 seeds" in out and f"| {proto} | 3 | 0 |" in out
    assert not list(tmp_path.iterdir())


def test_a_failure_prints_its_seed_a_replay_command_and_writes_the_trace(capsys, tmp_path,
                                                                          monkeypatch):
    monkeypatch.setitem(registry.PROTOCOLS, "lamport", Eager)
    code = main(["sim", "--protocol", "lamport", "--seeds", "4", "--quiet", "--trace-dir",
                 str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 1
    assert "FAIL lamport seed" in out
    assert "replay: python -m faultinject sim --protocol lamport --seed" in out
    traces = sorted(tmp_path.glob("lamport-seed*.json"))
    assert traces
    doc = json.loads(traces[0].read_text())
    assert doc["violations"] and doc["records"] and "faults" in doc
    seed = doc["seed"]
    code = main(["sim", "--protocol", "lamport", "--seed", str(seed), "--quiet", "--trace-dir",
                 str(tmp_path)])
    assert code == 1 and f"seed {seed}" in capsys.readouterr().out


def test_replaying_one_good_seed_can_dump_its_records(capsys, tmp_path):
    code = main(["sim", "--protocol", "hybrid", "--seed", "3", "--records", "--trace-dir",
                 str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0 and out.startswith("ok hybrid seed 3")
    lines = (tmp_path / "hybrid-seed3.records.jsonl").read_text().splitlines()
    assert lines and all(J.dumps(json.loads(x)) == x for x in lines)      # journal lines, by the one writer


@pytest.mark.parametrize("args", [["sim", "--sites", "1"], ["sim", "--seeds", "0"],
                                  ["sim", "--protocol", "nope"], []])
def test_bad_arguments_exit_non_zero(args, capsys):
    try:
        code = main(args)
    except SystemExit as e:
        code = e.code
    assert code == 2


def test_module_entry_point_runs():
    p = subprocess.run([sys.executable, "-m", "faultinject", "sim", "--help"], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0 and "--protocol" in p.stdout and "--seeds" in p.stdout
