"""The sans-IO shaper of faultinject/shaping.py, on a virtual clock, with exact times."""
from __future__ import annotations

import random

import pytest

from faultinject.shaping import LinkEvent, Shape, Shaper, mode_timeline, segments


def test_unshaped_link_releases_at_arrival() -> None:
    s = Shaper(Shape())
    assert s.submit(10.0, 500) == 10.0
    assert s.submit(10.5, 500) == 10.5
    assert s.held_bytes(10.5) == 0


def test_delay_adds_to_arrival() -> None:
    s = Shaper(Shape(delay=0.25))
    assert s.submit(1.0, 100) == 1.25
    assert s.submit(1.1, 100) == pytest.approx(1.35)


def test_bandwidth_serialises_chunks_back_to_back() -> None:
    # 56 kbit/s: 700 bytes = 5600 bits = 0.1 s on the wire.
    s = Shaper(Shape(bandwidth_bps=56_000))
    assert s.submit(0.0, 700) == pytest.approx(0.1)
    assert s.submit(0.0, 700) == pytest.approx(0.2)   # queued behind the first
    assert s.submit(0.05, 700) == pytest.approx(0.3)  # still queued
    assert s.submit(1.0, 700) == pytest.approx(1.1)   # link idle again: starts at arrival


def test_bandwidth_is_shared_across_connections() -> None:
    s = Shaper(Shape(bandwidth_bps=8_000))  # 1000 bytes/s
    assert s.submit(0.0, 100, conn=1) == pytest.approx(0.1)
    assert s.submit(0.0, 100, conn=2) == pytest.approx(0.2)


def test_bandwidth_then_delay() -> None:
    s = Shaper(Shape(bandwidth_bps=8_000, delay=0.5))
    assert s.submit(0.0, 1000) == pytest.approx(1.5)  # 1 s serialisation + 0.5 s propagation
    assert s.submit(0.0, 1000) == pytest.approx(2.5)


def test_jitter_draws_from_the_given_generator_within_bounds() -> None:
    s = Shaper(Shape(delay=0.1, jitter=0.05), random.Random(7))
    twin = random.Random(7)
    expected = []
    last = 0.0
    for i in range(50):
        now = i * 0.01
        want = max(now + 0.1 + twin.uniform(0.0, 0.05), last)
        last = want
        expected.append(want)
    got = [s.submit(i * 0.01, 10) for i in range(50)]
    assert got == pytest.approx(expected)
    assert all(g >= i * 0.01 + 0.1 for i, g in enumerate(got))


def test_jitter_never_reorders_a_connection() -> None:
    s = Shaper(Shape(delay=0.0, jitter=1.0), random.Random(3))
    releases = [s.submit(i * 0.001, 1, conn="c") for i in range(200)]
    assert releases == sorted(releases)
    # ...and the clamp really was needed: raw jitter would have reordered.
    raw = random.Random(3)
    rng_for_shaper = [i * 0.001 + raw.uniform(0.0, 1.0) for i in range(200)]
    assert rng_for_shaper != sorted(rng_for_shaper)


def test_fifo_is_per_connection_not_global() -> None:
    class Fixed(random.Random):
        def __init__(self, draws: list[float]) -> None:
            super().__init__(0)
            self.draws = draws

        def uniform(self, a: float, b: float) -> float:
            return self.draws.pop(0)

    s = Shaper(Shape(jitter=1.0), Fixed([0.9, 0.1, 0.0]))
    assert s.submit(0.0, 1, conn="a") == pytest.approx(0.9)
    assert s.submit(0.0, 1, conn="b") == pytest.approx(0.1)  # other connection: not held back
    assert s.submit(0.0, 1, conn="a") == pytest.approx(0.9)  # same connection: waits for the first


def test_forget_drops_connection_ordering() -> None:
    s = Shaper(Shape(delay=1.0))
    s.submit(0.0, 1, conn=1)
    s.shape = Shape()
    assert s.submit(0.0, 1, conn=1) == 1.0
    s.forget(1)
    assert s.submit(0.0, 1, conn=1) == 0.0


def test_held_bytes_and_room_at_model_the_queue_limit() -> None:
    s = Shaper(Shape(bandwidth_bps=8_000, queue_bytes=250))  # 1000 bytes/s
    assert s.room_at(0.0) == 0.0
    assert s.submit(0.0, 100) == pytest.approx(0.1)
    assert s.submit(0.0, 100) == pytest.approx(0.2)
    assert s.held_bytes(0.0) == 200
    assert s.room_at(0.0) == 0.0                       # 200 < 250: may read on
    assert s.submit(0.0, 100) == pytest.approx(0.3)
    assert s.held_bytes(0.0) == 300
    assert s.room_at(0.0) == pytest.approx(0.1)        # after the first release 200 < 250
    assert s.held_bytes(0.1) == 200
    assert s.room_at(0.15) == 0.15
    assert s.held_bytes(0.31) == 0  # (0.1 + 0.1 + 0.1 is a hair above 0.3 in floats)


def test_room_at_may_need_several_releases() -> None:
    s = Shaper(Shape(bandwidth_bps=8_000, queue_bytes=100))
    for _ in range(5):
        s.submit(0.0, 100)                              # released at .1 .2 .3 .4 .5
    assert s.room_at(0.0) == pytest.approx(0.5)         # below 100 only when all are gone
    assert s.room_at(0.45) == pytest.approx(0.5)


def test_reshape_applies_to_later_chunks_only() -> None:
    s = Shaper(Shape(delay=1.0))
    first = s.submit(0.0, 10, conn=1)
    s.shape = Shape(delay=0.0)
    assert first == 1.0
    assert s.submit(0.5, 10, conn=2) == 0.5
    assert s.submit(0.5, 10, conn=1) == 1.0  # conn 1 still may not overtake its first chunk


def test_shape_validation_names_the_field() -> None:
    with pytest.raises(ValueError, match="delay"):
        Shape(delay=-1)
    with pytest.raises(ValueError, match="bandwidth_bps"):
        Shape(bandwidth_bps=0)
    with pytest.raises(ValueError, match="queue_bytes"):
        Shape(queue_bytes=0)
    with pytest.raises(ValueError, match="unknown shape key 'latency'"):
        Shape().updated({"latency": 1})
    assert Shape().updated({"delay": 1, "bandwidth_bps": 56_000}) == Shape(delay=1.0, bandwidth_bps=56_000)
    with pytest.raises(ValueError, match="nbytes"):
        Shaper().submit(0.0, 0)


def test_segments_cut_only_when_bandwidth_is_capped() -> None:
    data = bytes(range(256)) * 20
    assert segments(data, Shape()) == [data]
    parts = segments(data, Shape(bandwidth_bps=1000, segment_bytes=1000))
    assert [len(p) for p in parts] == [1000] * 5 + [120]
    assert b"".join(parts) == data


def test_mode_timeline_steps() -> None:
    events = [LinkEvent(100.0, 1.0, "A-B", "start", "up"),
              LinkEvent(101.0, 2.0, "A-C", "mode", "reset"),
              LinkEvent(102.0, 3.0, "A-B", "mode", "blackhole"),
              LinkEvent(103.0, 4.0, "A-B", "shape", {"direction": "forward"}),
              LinkEvent(104.0, 5.0, "A-B", "mode", "up"),
              LinkEvent(105.0, 6.0, "A-B", "stop", "up")]
    assert mode_timeline(events, "A-B") == [(100.0, "up"), (102.0, "blackhole"), (104.0, "up"),
                                            (105.0, "stopped")]
