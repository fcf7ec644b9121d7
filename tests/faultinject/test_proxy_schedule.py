"""Link schedules (faultinject/schedule.py) as data and on a virtual clock."""
from __future__ import annotations

import pytest

from faultinject.schedule import (
    LinkAction,
    Schedule,
    ScheduleCursor,
    cross_pairs,
    flapping,
    pair,
    partitions,
    periodic,
    run_schedule,
    within_pairs,
)
from faultinject.shaping import LinkMode

UP, RESET, HOLE = LinkMode.UP, LinkMode.RESET, LinkMode.BLACKHOLE


def test_pair_is_unordered() -> None:
    assert pair("B", "A") == pair("A", "B") == ("A", "B")
    with pytest.raises(ValueError):
        pair("A", "A")


def test_partition_pairs() -> None:
    groups = [["A", "B"], ["C", "D"]]
    assert cross_pairs(groups) == [("A", "C"), ("A", "D"), ("B", "C"), ("B", "D")]
    assert within_pairs(groups) == [("A", "B"), ("C", "D")]
    with pytest.raises(ValueError, match="two partition groups"):
        cross_pairs([["A", "B"], ["B", "C"]])


def test_periodic_is_the_papers_30_up_10_down() -> None:
    s = periodic([("B", "A")], up=30, down=10, cycles=3)
    assert [(a.at, a.mode) for a in s.actions] == [
        (30, RESET), (40, UP), (70, RESET), (80, UP), (110, RESET), (120, UP)]
    assert all(a.pairs == (("A", "B"),) for a in s.actions)


def test_periodic_until_ends_with_links_up() -> None:
    s = periodic([("A", "B")], up=30, down=10, until=75, down_mode=HOLE)
    assert [(a.at, a.mode) for a in s.actions] == [(30, HOLE), (40, UP), (70, HOLE), (75, UP)]
    with pytest.raises(ValueError, match="exactly one"):
        periodic([("A", "B")], up=1, down=1)


def test_scaled_multiplies_every_time() -> None:
    s = periodic([("A", "B")], up=30, down=10, cycles=2).scaled(0.1)
    assert [a.at for a in s.actions] == pytest.approx([3.0, 4.0, 7.0, 8.0])
    with pytest.raises(ValueError):
        s.scaled(0)


def test_partitions_cut_between_and_raise_within() -> None:
    s = partitions([(10, [["A", "B"], ["C", "D"]]), (20, [["A", "C"], ["B", "D"]]), (30, None)])
    at10 = [a for a in s.actions if a.at == 10]
    assert [(a.mode, a.pairs) for a in at10] == [
        (UP, (("A", "B"), ("C", "D"))),
        (RESET, (("A", "C"), ("A", "D"), ("B", "C"), ("B", "D")))]
    at20 = {a.mode: set(a.pairs) for a in s.actions if a.at == 20}
    assert at20[UP] == {("A", "C"), ("B", "D")}
    assert at20[RESET] == {("A", "B"), ("A", "D"), ("B", "C"), ("C", "D")}
    heal = [a for a in s.actions if a.at == 30]
    assert len(heal) == 1 and heal[0].mode is UP and len(heal[0].pairs) == 6


def test_flapping_is_a_function_of_the_seed() -> None:
    pairs = [("A", "B"), ("A", "C"), ("B", "C")]
    one = flapping(pairs, seed=42, mean_up=30, mean_down=10, duration=600)
    two = flapping(list(reversed(pairs)), seed=42, mean_up=30, mean_down=10, duration=600)
    other = flapping(pairs, seed=43, mean_up=30, mean_down=10, duration=600)
    assert one == two
    assert one != other
    for p in pairs:
        modes = [a.mode for a in one.actions if a.pairs == (p,)]
        assert modes, f"{p} never flapped in 600 s"
        # strictly alternating, starting with a down, ending up
        assert modes[0] is RESET and modes[-1] is UP
        assert all(m1 is not m2 for m1, m2 in zip(modes, modes[1:]))
    assert all(0 < a.at <= 600 for a in one.actions)


def test_flapping_min_interval_is_a_floor() -> None:
    s = flapping([("A", "B")], seed=1, mean_up=0.01, mean_down=0.01, duration=10, min_interval=1.0)
    times = [a.at for a in s.actions]
    assert all(b - a >= 1.0 - 1e-9 for a, b in zip(times, times[1:]))


def test_cursor_returns_each_action_once_when_due() -> None:
    s = periodic([("A", "B")], up=30, down=10, cycles=2)
    c = ScheduleCursor(s, start=1000.0, time_scale=0.5)
    assert c.next_at() == 1015.0
    assert c.due(1014.9) == []
    assert [a.mode for a in c.due(1015.0)] == [RESET]
    assert c.due(1015.0) == []
    assert c.next_at() == 1020.0
    assert [a.mode for a in c.due(1100.0)] == [UP, RESET, UP]
    assert c.done and c.next_at() is None


class VirtualClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def time(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


async def test_run_schedule_on_a_virtual_clock() -> None:
    clock = VirtualClock()
    applied: list[tuple[float, LinkMode]] = []

    async def apply(action: LinkAction) -> None:
        applied.append((clock.now, action.mode))

    s = Schedule((LinkAction(5, (("A", "B"),), RESET), LinkAction(5, (("A", "C"),), HOLE),
                  LinkAction(60, (("A", "B"), ("A", "C")), UP)))
    await run_schedule(apply, s, time_scale=2.0, clock=clock.time, sleep=clock.sleep)
    assert applied == [(10.0, RESET), (10.0, HOLE), (120.0, UP)]
    assert clock.sleeps == [10.0, 110.0]
