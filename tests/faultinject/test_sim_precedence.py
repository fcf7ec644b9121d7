"""Mixed precedence on paced links in the simulator (issue 19): every checker passes, and catches
broken urgent handling (the style of test_sim_broken)."""
from __future__ import annotations

import random

import pytest

from faultinject.checkers import summarize
from faultinject.sim import SimConfig, simulate
from faultinject.sim.cluster import paced_links
from ordering import Deliver, registry
from ordering.lamport import LamportIGO

MIX = (0.05, 0.05, 0.15)       # flash, immediate, priority; the rest routine (faultinject sim --precedence)


def _config(protocol: str, **kw) -> SimConfig:
    return SimConfig(protocol=protocol, precedence_mix=MIX, link_rate=56_000, **kw)


@pytest.mark.parametrize("protocol", ["lamport", "sequencer", "hybrid"])
def test_mixed_precedence_on_paced_links_keeps_every_property(protocol):
    failures = []
    urgent = early = 0
    for seed in range(8):
        r = simulate(seed, _config(protocol, durable=seed % 2 == 1))
        if r.violations:
            failures.append(f"seed {seed}: {r.violations[0]} (replay: python -m faultinject sim --protocol "
                            f"{protocol} --seed {seed} --precedence{' --durable' if seed % 2 else ''})")
        frontier: dict[tuple[str, int], tuple] = {}
        for rec in r.records:
            if rec["kind"] != "deliver":
                continue
            k, key = (rec["site"], rec["inc"]), tuple(rec["order"])
            if rec.get("precedence") in ("flash", "immediate"):
                urgent += 1
                early += rec["late"] and k in frontier and key > frontier[k]
            elif not rec["late"]:
                frontier[k] = key
    assert not failures, "\n".join(failures[:10])
    assert urgent > 100         # the mix really sends urgent traffic


def test_some_links_paced_mixes_paced_and_unpaced_hops_and_keeps_every_property():
    """``paced_share``: only some pairs are paced, so a relayed channel may cross a paced link beyond an
    unpaced first hop (its origin then paces it: ``rcm.channels.lanes.RouteLimit``), and channels move between
    paced and unpaced paths with frames waiting in their lanes."""
    names = ["A", "B", "C", "D", "E"]
    rates = paced_links(random.Random("paced-3"), names, 56_000, 0.5)
    assert rates is not None
    paced = {frozenset((a, b)) for a, table in rates.items() for b in table}
    assert all(rates[b].get(a) == 56_000 for a, table in rates.items() for b in table)   # both ways
    assert 0 < len(paced) < 10
    assert paced_links(random.Random(1), names, 0, 0.5) is None
    failures = []
    for seed in range(4):
        r = simulate(seed, _config("lamport", sites=5, paced_share=0.5, durable=seed % 2 == 1))
        if r.violations:
            failures.append(f"seed {seed}: {r.violations[0]}")
    assert not failures, "\n".join(failures)


class UrgentWrongKey(LamportIGO):
    """Delivers urgent messages from peers on arrival, one clock tick off the key their sender gave them."""

    name = "broken-urgent-key"

    def receive(self, origin, seq, header, payload, now, urgent=False):
        if urgent:
            return [Deliver(origin, seq, (header + 1, origin), True, payload)]
        return super().receive(origin, seq, header, payload, now)


class UrgentNeverLate(LamportIGO):
    """Delivers urgent messages on arrival and never says when they overtook their place."""

    name = "broken-urgent-neverlate"

    def receive(self, origin, seq, header, payload, now, urgent=False):
        out = super().receive(origin, seq, header, payload, now, urgent)
        return [Deliver(d.origin, d.seq, d.key, False, d.payload) if urgent and isinstance(d, Deliver) else d
                for d in out]


class UrgentSwapper(LamportIGO):
    """Holds every other urgent message of a peer back until the next one: FIFO within a lane broken."""

    name = "broken-urgent-swapper"

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.stash = {}

    def receive(self, origin, seq, header, payload, now, urgent=False):
        if not urgent:
            return super().receive(origin, seq, header, payload, now)
        held = self.stash.pop(origin, None)
        if held is None:
            self.stash[origin] = (seq, header, payload)
            return []
        return [*super().receive(origin, seq, header, payload, now, True),
                *super().receive(origin, *held, now, True)]


@pytest.mark.parametrize("cls, kind, mix", [
    (UrgentWrongKey, "igo-key", MIX),
    (UrgentNeverLate, "igo-order", MIX),
    (UrgentSwapper, "fifo", (0.15, 0.0, 0.0)),
])
def test_broken_urgent_handling_is_caught(monkeypatch, cls, kind, mix):
    monkeypatch.setitem(registry.PROTOCOLS, cls.name, cls)
    found: dict[str, int] = {}
    for seed in range(6):
        r = simulate(seed, SimConfig(protocol=cls.name, precedence_mix=mix, link_rate=56_000))
        for k, v in summarize(r.violations).items():
            found[k] = found.get(k, 0) + v
    assert found.get(kind, 0) > 0, found


def test_the_precedence_scenario_paces_its_links_and_mixes_precedence(tmp_path):
    from pathlib import Path

    from contracts.mission import load_mission
    from faultinject.missions import write_mission
    from faultinject.scenario import ScenarioError
    from faultinject.scenario_file import load_scenario, parse_scenario

    scen = load_scenario(Path(__file__).resolve().parents[2] / "faultinject/scenarios/precedence-flap.toml")
    assert scen.links.pace and scen.links.bandwidth_bps == 56_000 and scen.links.flapping
    assert dict(scen.workload.precedence) == {"flash": 0.1, "immediate": 0.1, "priority": 0.2}
    m = load_mission(write_mission(tmp_path / "m.toml", "m", ["A", "B"], rates={"A": {"B": 280_000}}))
    assert m.sites["A"].rate == {"B": 280_000} and m.sites["B"].rate == {}
    raw = {"scenario": {"name": "x", "duration": 10.0}, "sites": {"names": ["A", "B"]}}
    for bad, words in (({"workload": {"precedence": {"flash": 0.7, "priority": 0.5}}}, "add up to more than 1"),
                       ({"workload": {"precedence": {"urgent": 0.1}}}, "urgent"),
                       ({"links": {"pace": "yes"}}, "pace = 'yes' must be true or false")):
        with pytest.raises(ScenarioError, match=words):
            parse_scenario({**raw, **bad})


@pytest.mark.parametrize(("protocol", "seed", "durable"), [("lamport", 800125, True), ("sequencer", 800125, True),
                                                           ("lamport", 800142, True), ("lamport", 800286, False)])
def test_seeds_that_lost_a_withheld_message_or_stalled_behind_a_lost_acknowledgement(protocol, seed, durable):
    """Fresh seeds of ``--precedence`` (2026-11-28) that failed: a durable site sent, after a restart, the DATA of a
    confined message it had withheld (C delivered a message it had reported missing: reliability, fifo), and a
    channel waited behind a confined frame whose acknowledgement a blackhole swallowed (igo-stall).
    tests/rcm/test_confinement.py has both mechanisms."""
    r = simulate(seed, _config(protocol, durable=durable))
    assert not r.violations, r.violations[:5]
