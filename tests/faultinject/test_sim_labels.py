"""``sim --labels``: seeded labels and clearances, sends only to the cleared sites, and no leak anywhere."""
from __future__ import annotations

import random
from dataclasses import replace

import pytest

from contracts import journal as J
from faultinject.__main__ import main
from faultinject.checkers import Violation
from faultinject.checkers.history import Clearance
from faultinject.checkers.leaks import token_of
from faultinject.sim import SIM_SETTINGS, SimConfig, Simulation, simulate
from faultinject.sim.labels import LabelPlan
from faultinject.sim.topology import ring_with_chords, site_names
from faultinject.sim.workload import make_workload

SHORT = {"chaos": 8.0, "heal": 8.0, "quiet": 2.0, "rate": 2.0, "faults": 3}


def test_a_plan_is_drawn_from_its_seed_and_every_label_is_one_its_origin_may_send():
    names = site_names(5)
    plan = LabelPlan.draw(random.Random("labels-3"), names)
    assert plan == LabelPlan.draw(random.Random("labels-3"), names)
    assert len(plan.scheme.levels) == 3 and 2 <= len(plan.scheme.caveats) <= 3
    rng = random.Random(1)
    for origin in names:
        for _ in range(20):
            label = plan.draw_label(rng, origin)
            assert plan.clearances[origin].dominates(label)
            reach = plan.reach(label, origin)
            assert origin not in reach
            assert all(plan.clearances[s].dominates(label) == (s in reach) for s in names if s != origin)


def test_labels_keep_the_workloads_send_times_and_send_only_to_the_cleared_sites():
    config = SimConfig(labels=True, sites=5)
    names = site_names(5)
    plain = make_workload(random.Random("work-4"), names, 35.0, config)
    plan = LabelPlan.draw(random.Random("labels-4"), names)
    labeled = make_workload(random.Random("work-4"), names, 35.0, config, plan, random.Random("labels-4-sends"))
    assert {(s.at, s.site) for s in labeled} < {(s.at, s.site) for s in plain}     # some had nobody cleared
    for s in labeled:
        label = plan.label_of(s.payload)
        assert label is not None and token_of(s.payload) is not None
        cleared = plan.reach(label, s.site)
        assert (s.dests or [n for n in names if n != s.site]) == cleared


def test_a_labeled_run_is_a_pure_function_of_its_seed_and_journals_labels():
    config = SimConfig(labels=True, **SHORT)
    a = simulate(5, config)
    sim = Simulation(5, config)
    b = sim.run()
    assert a.records == b.records and a.trace == b.trace and b.violations == []
    assert {r["site"] for r in b.records if r["kind"] == J.CLEARANCE} == set(sim.names)
    sends = {r["msg_id"]: r for r in b.records if r["kind"] == J.SEND}
    cleared = {r["site"]: Clearance.from_record(r) for r in b.records if r["kind"] == J.CLEARANCE}
    # Each origin says only labels its clearance dominates; each delivery's label, read off the payload that
    # arrived, is the one its send was journaled with.
    assert sends and all(cleared[r["origin"]].label.dominates(cleared[r["origin"]].scheme.from_json(r["label"]))
                         for r in sends.values())
    delivers = [r for r in b.records if r["kind"] == J.DELIVER]
    assert delivers and all(r["label"] == sends[r["msg_id"]]["label"] for r in delivers)
    assert sim.leaks is not None and sim.leaks.scanned > 0 and len(sim.leaks.messages) == len(sends)


@pytest.mark.parametrize("protocol", ["lamport", "sequencer", "hybrid"])
def test_labeled_runs_leak_nothing_through_relays_and_repair(protocol):
    """Relays on a partial mesh and repair faults: every frame, delivery, log record and journal record is
    checked against the clearances, with every other property."""
    ring = {"sites": 5, "topology": ring_with_chords(site_names(5), 5, seed=1),
            "settings": replace(SIM_SETTINGS, max_hops=8), "repair_faults": 1}
    failures = []
    for seed in (1, 2):
        for config in (SimConfig(protocol=protocol, labels=True, durable=True, **SHORT),
                       SimConfig(protocol=protocol, labels=True, **SHORT, **ring)):
            r = simulate(seed, config)
            failures += [f"seed {seed} {config.sites} sites: {v}" for v in r.violations]
    assert not failures, "\n".join(failures[:10])


def test_the_command_line_runs_labels_and_names_them_in_its_replay_command(capsys, tmp_path, monkeypatch):
    import faultinject.sim as sim_package

    real = sim_package.simulate

    def planted(seed, config):
        r = real(seed, config)
        assert config.labels
        if seed == 1:
            r.violations.append(Violation("leak", "B", "A-1", "a planted leak"))
        return r

    monkeypatch.setattr(sim_package, "simulate", planted)
    code = main(["sim", "--protocol", "lamport", "--seeds", "2", "--labels", "--chaos", "6", "--heal", "8",
                 "--quiet", "--trace-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 1 and "FAIL lamport seed 1: [leak] at B (A-1): a planted leak" in out
    assert "--seed 1 " in out and out.split("replay: ")[1].split("\n")[0].endswith("--labels")
    assert (tmp_path / "lamport-seed1.json").exists() and not (tmp_path / "lamport-seed0.json").exists()
