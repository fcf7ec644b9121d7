"""faultinject.loadwatch: the harness's stalls and the machine's CPU pressure, recorded beside a trial."""
from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from faultinject import loadwatch
from faultinject.loadwatch import LagLog, cpu_pressure_total, pressure_share, watch


def test_a_late_wakeup_past_the_threshold_is_a_stall_at_scenario_time() -> None:
    log = LagLog(threshold=0.1)
    log.observe(100.0, 100.05)          # 50 ms late: not a stall
    log.observe(101.0, 101.9)           # 0.9 s late
    log.observe(102.0, 101.99)          # early (clock granularity): no lag
    s = log.summary(t0=99.0, scale=0.2)
    assert s["loop_wakeups"] == 3 and s["loop_lag_max_s"] == 0.9
    assert s["loop_stalls"] == [[10.0, 0.9]]          # (101 - 99) / 0.2 scenario seconds


def test_pressure_is_a_share_of_the_wall_time_and_absent_without_psi(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "cpu"
    f.write_text("some avg10=91.81 avg60=79.51 avg300=71.42 total=6192029789\n"
                 "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
    monkeypatch.setattr(loadwatch, "PRESSURE", f)
    assert cpu_pressure_total() == 6192029789
    assert pressure_share(1_000_000, 3_000_000, 4.0) == 0.5
    assert pressure_share(0, 10_000_000, 4.0) == 1.0
    f.write_text("garbage")
    assert cpu_pressure_total() is None
    monkeypatch.setattr(loadwatch, "PRESSURE", tmp_path / "absent")
    assert cpu_pressure_total() is None and pressure_share(None, 5, 1.0) is None


async def test_the_watcher_sees_its_loop_blocked() -> None:
    log = LagLog(threshold=0.1)
    clock = asyncio.get_running_loop().time
    task = asyncio.ensure_future(watch(log, clock, period=0.01))
    while log.wakeups < 3:
        await asyncio.sleep(0.01)
    time.sleep(0.3)                     # the loop blocked: the watcher's next wake-up comes that late
    while log.wakeups < 5 or not log.stalls:
        await asyncio.sleep(0.01)
    task.cancel()
    assert any(lag >= 0.25 for _, lag in log.stalls) and log.max_lag >= 0.25
