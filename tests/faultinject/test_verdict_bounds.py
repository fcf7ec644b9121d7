"""The checker bounds of a real-process trial (``faultinject.verdict.bounds_for``)."""
from __future__ import annotations

import tomllib

import pytest

from faultinject.runner import REPO
from faultinject.scenario_file import parse_scenario
from faultinject.verdict import bounds_for

FIG6 = REPO / "faultinject" / "scenarios" / "paper-fig6.toml"


def _fig6(**rcm: float):
    raw = tomllib.loads(FIG6.read_text())
    raw["rcm"].update(rcm)
    scen = parse_scenario(raw)
    return scen, scen.trials()[0]


def test_announce_delay_widens_settle_by_the_scaled_window_and_leaves_the_rest() -> None:
    scen, trial = _fig6()
    windowed, wtrial = _fig6(announce_delay=2.5)
    bounds, margin, settle = bounds_for(scen, trial)
    wbounds, wmargin, wsettle = bounds_for(windowed, wtrial)
    # A held clock announcement delays a stable delivery by at most the window (scaled like every duration);
    # a new connection's resync is never held, so the margin after a view change and the awareness bounds stay.
    assert wsettle == pytest.approx(settle + 2.5 * scen.time_scale)
    assert (wbounds, wmargin) == (bounds, margin)
