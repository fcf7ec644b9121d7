"""Scenario files: the library parses, sweeps expand, times scale, bad keys are named."""
from __future__ import annotations

import copy
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from faultinject.runner import REPO, rebase
from faultinject.runner_cli import scenario_from_args
from faultinject.scenario import ScenarioError
from faultinject.scenario_file import load_scenario, parse_scenario
from faultinject.shaping import LinkMode

LIBRARY = REPO / "faultinject" / "scenarios"


def raw(name: str) -> dict:
    return tomllib.loads((LIBRARY / f"{name}.toml").read_text())


@pytest.mark.parametrize("name", ["paper-fig6", "paper-fig7", "paper-fig8", "paper-12h", "chaos", "labels-triangle"])
def test_library_scenarios_parse(name: str) -> None:
    scen = load_scenario(LIBRARY / f"{name}.toml")
    assert scen.name == name
    trials = scen.trials()
    assert trials and all(t.duration > 0 for t in trials)
    # The paper's RCM settings, scaled into the generated mission.
    r = scen.rcm_for("robust")
    assert r["liveness_timeout"] == pytest.approx(5.0 * scen.time_scale)
    assert r["liveness_timeout"] > r["heartbeat_timeout"]


def test_fig7_sweep_expands_modes_times_outages() -> None:
    scen = load_scenario(LIBRARY / "paper-fig7.toml")
    trials = scen.trials()
    assert len(trials) == 3 * 21
    by = {(t.p2p, t.outage): t for t in trials}
    zero = by[("tcp", 0.0)]
    assert zero.schedule.actions == ()          # outage 0: links stay up
    assert zero.duration == pytest.approx(3 * 30.0)
    t30 = by[("robust", 30.0)]
    assert t30.duration == pytest.approx(3 * (30.0 + 30.0))
    downs = [a.at for a in t30.schedule.actions if a.mode is not LinkMode.UP]
    ups = [a.at for a in t30.schedule.actions if a.mode is LinkMode.UP]
    assert downs == [30.0, 90.0, 150.0] and ups == [60.0, 120.0, 180.0]
    # Only the links between the two partitions go down.
    assert set(t30.schedule.pairs()) == {("A", "C"), ("A", "D"), ("B", "C"), ("B", "D")}


def test_chaos_random_faults_are_seeded_and_do_not_overlap() -> None:
    a = load_scenario(LIBRARY / "chaos.toml").trials()[0].faults
    b = load_scenario(LIBRARY / "chaos.toml").trials()[0].faults
    assert a == b and len(a) == 4
    r = raw("chaos")
    r["random_faults"]["seed"] = 99
    assert parse_scenario(r).trials()[0].faults != a
    busy: dict = {}
    for f in a:
        assert f.at >= busy.get((f.site, f.process), -1.0)
        busy[(f.site, f.process)] = f.at + f.restart_after


def test_chaos_partition_wins_a_tie_with_the_end_of_flapping() -> None:
    sched = load_scenario(LIBRARY / "chaos.toml").trials()[0].schedule
    at100 = [a for a in sched.actions if a.at == 100.0]
    # The flaps' closing "up" come first, then the partition cuts C off.
    assert at100[-1].mode is LinkMode.BLACKHOLE and set(at100[-1].pairs) == {("A", "C"), ("B", "C")}


def test_scaled_chat_and_rcm_times() -> None:
    r = raw("paper-fig6")
    r["scenario"]["time_scale"] = 0.1
    scen = parse_scenario(r)
    m = scen.rcm_for("tcp-suspect")
    assert m["p2p"] == "tcp-suspect"
    assert m["suspect_timeout"] == pytest.approx(6.0) and m["reconnect_period"] == pytest.approx(0.3)
    assert m["handshake_timeout"] == pytest.approx(0.5) and m["ack_interval"] == pytest.approx(0.02)
    c = scen.chat_for()
    assert c["rcm_retry_max"] == pytest.approx(0.5) and c["kdf_n"] == 1024


@pytest.mark.parametrize("edit, message", [
    (lambda r: r["scenario"].__setitem__("colour", "red"), "unknown key [scenario].colour"),
    (lambda r: r["rcm"].__setitem__("liveness_timeout", 0.5), "[rcm] liveness_timeout = 0.5"),
    (lambda r: r["rcm"].__setitem__("p2p", "udp"), "[rcm] p2p = 'udp'"),
    (lambda r: r["links"]["periodic"][0].__setitem__("up", -1), "[links.periodic][0] up = -1.0"),
    (lambda r: r["links"]["periodic"][0].__setitem__("groups", [["A", "B"], ["C", "Z"]]),
     "[links.periodic][0] groups = 'Z' is not a site"),
    (lambda r: r["links"].__setitem__("down_mode", "fade"), "[links] down_mode = 'fade'"),
    (lambda r: r["workload"].__setitem__("rate", "fast"), "[workload] rate = 'fast' must be a number"),
    (lambda r: r.__setitem__("faults", [{"at": 500.0, "site": "A", "process": "rcm"}]),
     "[[faults]] at = 500"),
    (lambda r: r.__setitem__("faults", [{"at": 5.0, "site": "A", "process": "tui"}]),
     "[faults][0] process = 'tui'"),
    (lambda r: r.__setitem__("sweep", {"p2p": ["robust", "quic"]}), "[sweep] p2p: 'quic'"),
    (lambda r: r["scenario"].__setitem__("time_scale", 0), "[scenario] time_scale = 0.0"),
    (lambda r: r["scenario"].__setitem__("measure", ["A", "A"]), "[scenario] measure"),
    (lambda r: r.__setitem__("checks", {"enabled": ["liveness"]}), "[checks] check 'liveness'"),
    (lambda r: r["chat"].__setitem__("kdf_n", 3) if "chat" in r else r.__setitem__("chat", {"kdf_n": 3}),
     "[chat] kdf_n = 3"),
    (lambda r: r.pop("sites"), "[sites] is required"),
    (lambda r: r["sites"].__setitem__("clearance", {"A": "SECRET"}), "[sites] clearance needs a [labels] table"),
    (lambda r: r["workload"].__setitem__("labels", {"SECRET": 0.5}), "[workload] labels needs a [labels] table"),
])
def test_bad_scenarios_name_the_key(edit, message: str) -> None:
    r = copy.deepcopy(raw("paper-fig6"))
    edit(r)
    with pytest.raises(ScenarioError) as e:
        parse_scenario(r)
    assert message in str(e.value)


def test_labels_read_clearances_and_the_workload_mix_against_the_scenarios_levels() -> None:
    scen = load_scenario(LIBRARY / "labels-triangle.toml")
    assert scen.clearances == {"A": "SECRET", "C": "SECRET"} and scen.workload.labels == (("SECRET", 0.5),)
    r = copy.deepcopy(raw("labels-triangle"))
    r["workload"]["labels"] = {"TOP SECRET": 0.1}
    with pytest.raises(ScenarioError, match="unknown level 'TOP SECRET'"):
        parse_scenario(r)
    r = copy.deepcopy(raw("labels-triangle"))
    r["sites"]["clearance"] = {"Z": "SECRET"}
    with pytest.raises(ScenarioError, match="is not a site"):
        parse_scenario(r)


def test_cli_bad_scenario_exits_2_with_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text((LIBRARY / "paper-fig6.toml").read_text().replace("rate = 2.0", "rate = 2.0\nburst = 3"))
    p = subprocess.run([sys.executable, "-m", "faultinject", "run", str(bad), "--out", str(tmp_path / "o")],
                       capture_output=True, text=True, cwd=REPO, timeout=60)
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "unknown key [workload].burst" in lines[0]
    assert not (tmp_path / "o").exists()


def test_cli_overrides_apply_and_are_validated() -> None:
    class A:
        scenario, time_scale, duration, p2p, outages, parallel = "paper-fig7", 0.5, None, "robust,tcp", "0,20", 2
        seed = 2026
    scen = scenario_from_args(A())  # type: ignore[arg-type]
    assert scen.time_scale == 0.5 and scen.sweep.parallel == 2 and scen.seed == 2026
    assert load_scenario(LIBRARY / "paper-fig7.toml").seed != 2026
    assert [(t.p2p, t.outage) for t in scen.trials()] == [("robust", 0.0), ("robust", 20.0), ("tcp", 0.0),
                                                           ("tcp", 20.0)]
    A.outages = "0,soon"
    with pytest.raises(ScenarioError, match="--outages"):
        scenario_from_args(A())  # type: ignore[arg-type]


def test_rebase_starts_every_site_at_time_zero_with_its_statuses_then() -> None:
    t0 = 1000.0
    recs = [
        {"kind": "status", "site": "A", "at": 990.0, "peer": "B", "status": "connected"},
        {"kind": "status", "site": "A", "at": 995.0, "peer": "B", "status": "suspected"},
        {"kind": "status", "site": "A", "at": 998.0, "peer": "B", "status": "connected"},
        {"kind": "status", "site": "B", "at": 999.0, "peer": "A", "status": "connected"},
        {"kind": "status", "site": "A", "at": 1005.0, "peer": "B", "status": "suspected"},
    ]
    out = rebase(recs, ("A", "B"), t0)
    starts = [r for r in out if r["kind"] == "start"]
    assert {r["site"] for r in starts} == {"A", "B"} and all(r["at"] < t0 for r in starts)
    st = [(r["site"], r["status"], r["at"] >= t0) for r in out if r["kind"] == "status"]
    assert st == [("A", "connected", False), ("B", "connected", False), ("A", "suspected", True)]


def test_unknown_top_level_table_is_named() -> None:
    r = raw("paper-fig6")
    r["linkz"] = {}
    with pytest.raises(ScenarioError, match=r"unknown key \[linkz\]"):
        parse_scenario(r)


def _lost_message_history():
    from faultinject.checkers import History, LinkTimeline
    t = 1000.0
    recs = [{"kind": "start", "site": s, "at": t, "inc": 1} for s in ("A", "B")]
    recs += [{"kind": "status", "site": a, "at": t + 0.001, "peer": b, "status": "connected"}
             for a, b in (("A", "B"), ("B", "A"))]
    recs += [{"kind": "send", "site": "A", "at": t + 1, "msg_id": "A:1", "origin": "A", "seq": 1,
              "order": [1, "A"]},
             {"kind": "deliver", "site": "A", "n": 1, "at": t + 1.01, "msg_id": "A:1", "origin": "A", "seq": 1,
              "order": [1, "A"], "late": False}]
    return History(recs, ("A", "B"), end=t + 30), LinkTimeline([], ("A", "B"))


@pytest.mark.parametrize("mode", ["robust", "tcp", "tcp-suspect"])
def test_a_lost_message_fails_robust_and_is_informational_for_baselines(mode: str) -> None:
    from dataclasses import replace

    from faultinject.runner import TrialResult
    from faultinject.verdict import run_checks
    scen = load_scenario(LIBRARY / "paper-fig6.toml")
    trial = replace(scen.trials()[0], p2p=mode)
    h, lt = _lost_message_history()      # A:1 never reached B, and nobody saw anyone disconnected
    checks = run_checks(scen, trial, h, lt)
    assert not checks["reliability"]["passed"] and "A:1" in checks["reliability"]["violations"][0]
    assert checks["reliability"]["informational"] is (mode != "robust")
    assert checks["duplicates"]["passed"] and checks["fifo"]["passed"]
    result = TrialResult("run", mode, None, 10.0, ".", checks, {}, {}, [])
    assert result.passed is (mode != "robust")


def test_long_partition_sweeps_repair_on_and_off():
    scen = load_scenario(REPO / "faultinject" / "scenarios" / "long-partition.toml")
    trials = scen.trials()
    assert [(t.name, t.repair) for t in trials] == [("repair", True), ("no-repair", False)]
    assert [scen.rcm_for(t.p2p, t.routing, t.repair)["repair"] for t in trials] == [True, False]
    assert "eventual" in scen.checks.enabled
    raw = tomllib.loads((REPO / "faultinject" / "scenarios" / "long-partition.toml").read_text())
    raw["sweep"]["repair"] = ["yes"]
    with pytest.raises(ScenarioError, match="repair"):
        parse_scenario(raw, None)
