"""How loaded the machine was during a trial: the harness's own stalls and the kernel's CPU pressure.

A run of real processes holds statuses to real-time bounds (a heartbeat within the liveness timeout), and
its link proxies live in the harness's event loop: when that loop stalls, every link it carries stalls with
it, and when the machine has more runnable tasks than cores, any RCM server may wait its turn past the
timeout. A checker cannot tell that from a protocol fault, so the trial records both beside its verdict:

* *loop stalls*: wake-ups of a watcher task that came later than ``threshold`` after they were due (the
  harness's loop was busy or not scheduled: its proxies forwarded nothing meanwhile);
* *CPU pressure*: the share of the trial's wall time in which at least one runnable task waited for a core
  (Linux's pressure stall information, ``/proc/pressure/cpu``, "some"; ``None`` where the kernel has none).

``LagLog`` is pure (it is told when a wake-up was due and when it came); ``watch`` is the task that feeds it.
"""
from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PRESSURE = Path("/proc/pressure/cpu")


@dataclass
class LagLog:
    """The watcher's late wake-ups: each stall longer than ``threshold`` seconds, and the longest of all."""

    threshold: float = 0.1
    stalls: list[tuple[float, float]] = field(default_factory=list)    # (when it began, how long), wall clock
    max_lag: float = 0.0
    wakeups: int = 0

    def observe(self, due: float, woke: float) -> None:
        """A wake-up due at ``due`` came at ``woke`` (both wall-clock seconds)."""
        lag = max(0.0, woke - due)
        self.wakeups += 1
        self.max_lag = max(self.max_lag, lag)
        if lag > self.threshold:
            self.stalls.append((due, lag))

    def summary(self, t0: float, scale: float = 1.0) -> dict[str, Any]:
        """For the trial's metrics: stalls at scenario time from ``t0`` (times over ``scale``), lags in seconds."""
        return {"loop_lag_max_s": round(self.max_lag, 3), "loop_wakeups": self.wakeups,
                "loop_stalls": [[round((due - t0) / scale, 2), round(lag, 3)] for due, lag in self.stalls]}


def cpu_pressure_total() -> int | None:
    """Microseconds in which some runnable task waited for a CPU, since boot; ``None`` without PSI."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in PRESSURE.read_text().splitlines():
            if line.startswith("some "):
                return int(dict(kv.split("=", 1) for kv in line.split()[1:])["total"])
    return None


def pressure_share(before: int | None, after: int | None, wall_seconds: float) -> float | None:
    """The share of ``wall_seconds`` with CPU pressure, from two readings of ``cpu_pressure_total``."""
    if before is None or after is None or wall_seconds <= 0:
        return None
    return round(min(1.0, (after - before) / 1e6 / wall_seconds), 3)


async def watch(log: LagLog, clock: Any, period: float = 0.02) -> None:
    """Wake every ``period`` seconds until cancelled, telling ``log`` how late each wake-up came.

    ``clock`` is the wall clock the trial's times use (``time.time``)."""
    while True:
        due = clock() + period
        await asyncio.sleep(period)
        log.observe(due, clock())
