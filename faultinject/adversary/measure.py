"""What both probes measure an input by: calls, the resident set, a watchdog, and a report per kind.

The RCM probe (``probe.py``) and the chat probe (``chat_probe.py``) hold their site and their budgets;
what a hostile input is measured with, and how a kind's report records it, lives here once.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

WATCHDOG = 5.0                  # seconds one input may run before it counts as a hang
RSS_BOUND = 256 << 20           # bytes above the warmed-up resident set
START = 1_795_000_000.0         # 2026-11-18 in Unix seconds: the honest ceiling of a real mission
VIOLATIONS_KEPT = 10            # a kind's first violations are kept verbatim; the rest are counted


class Hang(Exception):
    """An input ran for the watchdog's seconds."""


class MemoryRunaway(Exception):
    """The resident set grew past ``RSS_BOUND`` while an input ran."""


def rss() -> int:
    """This process's resident set in bytes."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


class Calls:
    """A profile hook counting calls (Python and C functions): work that does not depend on the machine."""

    def __init__(self) -> None:
        self.n = 0

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "call" or event == "c_call":
            self.n += 1


def short(item: Any, limit: int = 160) -> str:
    """An input as a violation names it: its repr, cut to ``limit`` characters."""
    text = repr(item)
    return text if len(text) <= limit else text[:limit - 3] + "..."


@dataclass
class Report:
    """What one kind of hostile input did: its violations (the first ones verbatim) and its latencies."""

    kind: str
    violations: list[str] = field(default_factory=list)
    violation_count: int = 0
    micros: list[float] = field(default_factory=list)

    def violation(self, what: str) -> None:
        self.violation_count += 1
        if len(self.violations) < VIOLATIONS_KEPT:
            self.violations.append(what)

    def latencies(self) -> dict[str, float]:
        """p50, p99 and the most microseconds an input took."""
        us = sorted(self.micros)
        if not us:
            return {"p50_us": 0.0, "p99_us": 0.0, "max_us": 0.0}
        p99 = us[min(len(us) - 1, int(0.99 * len(us)))]
        return {"p50_us": round(statistics.median(us), 1), "p99_us": round(p99, 1), "max_us": round(us[-1], 1)}
