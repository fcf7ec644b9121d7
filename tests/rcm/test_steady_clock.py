"""The RCM server's clock (rcm.server.clock.SteadyClock): a step back of the host's wall clock is slewed away, never
taken as a jump back, so that the stack's timers go on; a step forward is taken at once; and two real servers
across a step back of an hour."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from rcm.server.clock import SLEW, STEP_NOTICED, SteadyClock


def test_it_is_the_wall_clock_while_the_wall_clock_does_not_step() -> None:
    c = SteadyClock()
    assert c.read(1_000_000.0, 5.0) == 1_000_000.0
    assert c.read(1_000_010.0, 15.0) == 1_000_010.0
    assert c.read(1_000_010.5, 15.5) == 1_000_010.5
    assert c.offset() == 0.0 and c.take_step() is None


@pytest.mark.parametrize("step", [-3600.0, -10.0])
def test_a_step_back_is_noticed_once_and_slewed_away_never_running_back_or_fast(step: float) -> None:
    c = SteadyClock()
    wall, mono, dt = 1_000_000.0, 100.0, 20.0
    last = c.read(wall, mono)
    seen = []
    for i in range(1, 100_000):                      # a reading every dt seconds, the step at the 10th
        mono += dt
        wall += dt + (step if i == 10 else 0.0)
        now = c.read(wall, mono)
        # Never back, never faster than the monotonic clock, never slower by more than the slew.
        assert (1 - SLEW) * dt - 1e-6 <= now - last <= dt + 1e-6
        last = now
        if (s := c.take_step()) is not None:
            seen.append((i, s))
        if i > 10 and c.offset() == 0.0:
            break
    assert seen == [(10, step)]
    assert now == wall                               # caught up: the wall clock's time again
    assert (i - 10) * dt == pytest.approx(abs(step) / SLEW, abs=dt)   # in |step| / SLEW seconds


def test_a_step_forward_is_taken_at_once_and_noticed_once() -> None:
    c = SteadyClock()
    c.read(1_000.0, 0.0)
    assert c.read(1_001.0 + 3600.0, 1.0) == 4_601.0
    assert c.take_step() == 3600.0
    assert c.read(4_602.0, 2.0) == 4_602.0 and c.take_step() is None and c.offset() == 0.0


def test_a_step_back_then_forward_past_the_clock_is_the_wall_clock_again() -> None:
    c = SteadyClock()
    c.read(1_000.0, 0.0)
    ahead = c.read(1_001.0 - 600.0, 1.0)
    assert ahead == pytest.approx(1_001.0 - SLEW) and c.offset() == pytest.approx(600.0 - SLEW)
    assert c.read(2_000.0, 2.0) == 2_000.0 and c.offset() == 0.0


def test_jitter_below_a_step_is_followed_without_a_notice() -> None:
    c = SteadyClock()
    c.read(0.0, 0.0)
    assert c.read(1.0 - STEP_NOTICED / 2, 1.0) == pytest.approx(1.0 - SLEW)   # closing on it at the slew
    assert c.take_step() is None
    assert c.read(2.4, 2.0) == 2.4 and c.take_step() is None                  # ahead again: at once


def test_a_monotonic_reading_that_does_not_move_gives_the_same_time() -> None:
    c = SteadyClock()
    c.read(50.0, 1.0)
    a = c.read(40.0, 2.0)                            # stepped back 11 s
    assert c.read(40.0, 2.0) == a and c.read(39.0, 2.0) == a


@pytest.mark.timeout(60)
async def test_a_site_whose_wall_clock_steps_back_an_hour_still_suspects_a_silent_peer(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Two real servers through a link proxy: A's wall clock steps back an hour, then the link fades (nothing
    flows, no reset). A suspects B within its liveness timeout as it would without the step; fed the wall clock
    itself, its timers stopped for the hour and B stayed connected. The step is logged once."""
    from testkit import wait_until

    from contracts.mission import load_mission
    from faultinject.links import LinkSet
    from faultinject.missions import write_mission
    from faultinject.shaping import LinkMode
    from rcm.server import RcmServer

    m = load_mission(write_mission(tmp_path / "m.toml", "m", ["A", "B"], proxies=True, rcm={
        "heartbeat_timeout": 0.2, "liveness_timeout": 1.0, "silence_timeout": 2.0,
        "suspect_timeout": 30.0, "reconnect_period": 0.2}))
    shift = [0.0]
    a, b = RcmServer(m, "A", wall=lambda: time.time() + shift[0]), RcmServer(m, "B")
    links = LinkSet(m)

    def status(srv: RcmServer, peer: str) -> str | None:
        return srv.stack.statuses().get(peer)

    try:
        await links.start()
        for srv in (a, b):
            await srv.start()
        await wait_until(lambda: status(a, "B") == "connected" and status(b, "A") == "connected", "connected")
        shift[0] = -3600.0
        a.clock()                                    # (its next timer would read the step anyway)
        await links.cut("A", "B", LinkMode.BLACKHOLE)
        await wait_until(lambda: status(a, "B") not in (None, "connected"), "A suspects B", timeout=20)
        steps = [r.getMessage() for r in caplog.records if "wall clock stepped" in r.getMessage()]
        assert len(steps) == 1 and steps[0].startswith("A: the host's wall clock stepped back 3600.0 s"), steps
        assert "about 10.0 h" in steps[0], steps
    finally:
        for srv in (a, b):
            await srv.stop()
        await links.close()
