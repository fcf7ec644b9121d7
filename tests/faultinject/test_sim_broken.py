"""Deliberately broken variants: each checker must catch the violation it is about."""
from __future__ import annotations

from dataclasses import replace

import pytest

from faultinject.checkers import summarize
from faultinject.sim import SIM_SETTINGS, SimConfig, simulate
from ordering import Deliver, registry
from ordering.hybrid import HybridIGO
from ordering.lamport import LamportIGO


class Forgetful(LamportIGO):
    """Never delivers every fifth message from a peer."""

    name = "broken-forgetful"

    def receive(self, origin, seq, header, payload, now):
        if seq % 5 == 0:
            if header > self.known.get(origin, 0):
                self.known[origin] = header
            return self._drain()
        return super().receive(origin, seq, header, payload, now)


class Stutter(LamportIGO):
    """Delivers every seventh message twice."""

    name = "broken-stutter"

    def _drain(self):
        out = []
        for d in super()._drain():
            out.append(d)
            if d.seq % 7 == 0:
                out.append(d)
        return out


class Swapper(LamportIGO):
    """Delivers some pairs of consecutive messages of one origin the wrong way round."""

    name = "broken-swapper"

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.stash = {}

    def receive(self, origin, seq, header, payload, now):
        held = self.stash.pop(origin, None)
        if held is None and seq % 3 == 1:
            self.stash[origin] = (seq, header, payload)
            return []
        out = super().receive(origin, seq, header, payload, now)
        if held is not None:
            out += super().receive(origin, held[0], held[1], held[2], now)
        return out


class Eager(LamportIGO):
    """Waits for nobody: the plain 'deliver on arrival' non-protocol."""

    name = "broken-eager"

    def _blocked_by(self, key):
        return None


class NeverLate(Eager):
    """Eager, and hides lateness: delivers below its frontier without the flag."""

    name = "broken-neverlate"

    def receive(self, origin, seq, header, payload, now):
        return [Deliver(d.origin, d.seq, d.key, False, d.payload) if isinstance(d, Deliver) else d
                for d in super().receive(origin, seq, header, payload, now)]


class FalseLate(LamportIGO):
    """Flags in-order deliveries as late."""

    name = "broken-falselate"

    def _drain(self):
        return [Deliver(d.origin, d.seq, d.key, d.seq % 4 == 0, d.payload) for d in super()._drain()]


class Sluggish(HybridIGO):
    """Always runs out the bounded wait, and waits far too long."""

    name = "broken-sluggish"

    def __init__(self, site, peers, now=0.0):
        super().__init__(site, peers, now, max_wait=4.0)

    def _blocked(self, key):
        return True


BROKEN = [Forgetful, Stutter, Swapper, Eager, NeverLate, FalseLate, Sluggish]


@pytest.fixture(autouse=True)
def _register(monkeypatch):
    for cls in BROKEN:
        monkeypatch.setitem(registry.PROTOCOLS, cls.name, cls)


def kinds_over(config, seeds=range(12)):
    total = {}
    for seed in seeds:
        for k, v in summarize(simulate(seed, config).violations).items():
            total[k] = total.get(k, 0) + v
    return total


@pytest.mark.parametrize("cls, kind", [
    (Forgetful, "reliability"),
    (Stutter, "duplicate"),
    (Swapper, "fifo"),
    (Eager, "igo-agreement"),
    (Eager, "igo-late-stable"),
    (NeverLate, "igo-order"),
    (FalseLate, "igo-late"),
    (Sluggish, "igo-stall"),
])
def test_broken_protocol_is_caught(cls, kind):
    found = kinds_over(SimConfig(protocol=cls.name))
    assert found.get(kind, 0) > 0, found


@pytest.mark.parametrize("stack, kind", [
    # Suspects far too slowly: status lags the real link. (Direct links: with relaying, a slowly
    # suspected link is nearly always covered by a path through the third site, so the status stays
    # right by paths and the damage shows as igo-stall instead; 40 relay seeds give no awareness.)
    (replace(SIM_SETTINGS, liveness_timeout=6.0, silence_timeout=8.0, routing="direct"), "awareness"),
    # Gives up on peers after 1 s instead of the configured 5 s.
    (replace(SIM_SETTINGS, suspect_timeout=1.0), "awareness"),
    # Never declares anyone disconnected: statuses never match a down link. (Direct links: with
    # relaying, a third site carries most cuts, so few seeds ever need a disconnection.)
    (replace(SIM_SETTINGS, suspect_timeout=1000.0, routing="direct"), "robustness"),
])
def test_misconfigured_connection_manager_is_caught(stack, kind):
    found = kinds_over(SimConfig(protocol="lamport", faults=6, stack_settings=stack,
                                 settings=replace(SIM_SETTINGS, routing=stack.routing)))
    assert found.get(kind, 0) > 0, found


@pytest.mark.parametrize("mode", ["tcp", "tcp-suspect"])
def test_the_papers_baseline_channels_lose_messages(mode):
    # The paper's Figure 7: plain TCP and TCP+Suspected lose messages over
    # outages that Robust P2P weathers; the reliability checker sees it.
    settings = replace(SIM_SETTINGS, p2p=mode)
    found = kinds_over(SimConfig(protocol="lamport", faults=6, settings=settings))
    assert found.get("reliability", 0) > 0, found


def test_the_eventual_delivery_checker_catches_sites_that_do_not_repair():
    # The checkers assume repair (the default); the stacks run without it: what a site missed while
    # cut off past the suspect timeout stays missing, and "eventual" says so.
    found = kinds_over(SimConfig(protocol="lamport", stack_settings=replace(SIM_SETTINGS, repair=False)))
    assert found.get("eventual", 0) > 0, found


def test_a_repair_that_delivers_twice_is_caught(monkeypatch):
    from rcm.repair.antientropy import Repair
    from rcm.repair.service import RepairService

    real_kept = RepairService.keep

    def careless(self, origin, seq, key, payload, now, repaired=False, precedence="routine", **expiry):
        real_kept(self, origin, seq, key, payload, now, repaired, precedence, **expiry)
        return True                             # never checks whether it was delivered already

    # Forgets that a wanted message came: it is fetched, and delivered, again and again.
    monkeypatch.setattr(Repair, "delivered", lambda self, origin, seq: None)
    monkeypatch.setattr(RepairService, "keep", careless)
    found = kinds_over(SimConfig(protocol="lamport", durable=True, repair_faults=2, chaos=30.0, heal=20.0),
                       seeds=range(2))
    assert found.get("duplicate", 0) > 0, found
