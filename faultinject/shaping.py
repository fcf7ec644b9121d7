"""Sans-IO link model: link modes, per-direction shapes, and the release-time shaper.

Theory of operation
-------------------
A link proxy (``faultinject/proxy.py``) reads chunks from one socket and writes
them to another. Every timing decision is made here, without I/O: the proxy
hands each chunk to a :class:`Shaper` with the current time and gets back the
time at which the chunk may be written out. The shaper models one direction of
one link as

1. a serialisation queue shared by every connection on the link: a chunk of
   ``n`` bytes starts transmitting when the link is free (or at its arrival,
   whichever is later) and occupies it for ``n * 8 / bandwidth_bps`` seconds;
2. a propagation delay: the chunk is released ``delay`` seconds after its last
   bit went out, plus a jitter drawn uniformly from ``[0, jitter]`` (so
   ``delay`` is a lower bound, never undercut);
3. FIFO per connection: a chunk is never released before an earlier chunk of
   the same connection, whatever the jitter drew.

The shaper also keeps the bytes it holds (submitted, release time not yet
reached). When they reach ``queue_bytes`` the proxy stops reading from the
sender until :meth:`Shaper.room_at`, which is how a full link queue turns into
TCP back-pressure on the sending site. Because held bytes include the
propagation delay line, throughput through a link is also bounded by
``queue_bytes / delay``, as TCP's window bounds it on a long-delay path.
"""
from __future__ import annotations

import heapq
import random
from collections.abc import Hashable
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any


class LinkMode(StrEnum):
    """What a link does with traffic."""

    UP = "up"                # forward normally (with the link's shape)
    RESET = "reset"          # down: live connections are reset (RST), new ones reset at once
    BLACKHOLE = "blackhole"  # down: connections stay open, nothing flows (a radio fade)


class BlackholePolicy(StrEnum):
    """What a blackholed link does with bytes that arrive during the fade."""

    DISCARD = "discard"  # lost, as a fade loses them (the receiver sees a gap in the stream)
    BUFFER = "buffer"    # held (up to the queue limit, then back-pressure) and delivered on recovery


@dataclass(frozen=True, slots=True)
class Shape:
    """How one direction of a link treats the bytes that cross it.

    ``delay`` and ``jitter`` in seconds; ``bandwidth_bps`` in bits per second
    (``None``: unlimited); ``queue_bytes``: bytes the direction may hold before
    the proxy stops reading from the sender; ``segment_bytes``: with a
    bandwidth cap, chunks are cut into segments of at most this size so that
    release is smooth rather than one large store-and-forward burst.
    """

    delay: float = 0.0
    jitter: float = 0.0
    bandwidth_bps: float | None = None
    queue_bytes: int = 1 << 20
    segment_bytes: int = 1460

    def __post_init__(self) -> None:
        if not self.delay >= 0:
            raise ValueError(f"delay = {self.delay!r} must be >= 0 seconds")
        if not self.jitter >= 0:
            raise ValueError(f"jitter = {self.jitter!r} must be >= 0 seconds")
        if self.bandwidth_bps is not None and not self.bandwidth_bps > 0:
            raise ValueError(f"bandwidth_bps = {self.bandwidth_bps!r} must be > 0 (or None for unlimited)")
        if isinstance(self.queue_bytes, bool) or not isinstance(self.queue_bytes, int) or self.queue_bytes <= 0:
            raise ValueError(f"queue_bytes = {self.queue_bytes!r} must be a positive integer")
        if isinstance(self.segment_bytes, bool) or not isinstance(self.segment_bytes, int) or self.segment_bytes <= 0:
            raise ValueError(f"segment_bytes = {self.segment_bytes!r} must be a positive integer")

    def serialisation_time(self, nbytes: int) -> float:
        """Seconds the link is busy sending ``nbytes`` (0 when unlimited)."""
        if self.bandwidth_bps is None:
            return 0.0
        return nbytes * 8.0 / self.bandwidth_bps

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def updated(self, changes: dict[str, Any]) -> Shape:
        """A copy with ``changes`` applied; unknown keys raise ``ValueError``."""
        allowed = {"delay", "jitter", "bandwidth_bps", "queue_bytes", "segment_bytes"}
        unknown = sorted(set(changes) - allowed)
        if unknown:
            raise ValueError(f"unknown shape key {unknown[0]!r} (allowed: {', '.join(sorted(allowed))})")
        values = self.as_dict()
        values.update(changes)
        for key in ("delay", "jitter"):
            if isinstance(values[key], bool) or not isinstance(values[key], (int, float)):
                raise ValueError(f"{key} = {values[key]!r} must be a number of seconds")
            values[key] = float(values[key])
        bps = values["bandwidth_bps"]
        if bps is not None and (isinstance(bps, bool) or not isinstance(bps, (int, float))):
            raise ValueError(f"bandwidth_bps = {bps!r} must be a number or null")
        return Shape(**values)


class Shaper:
    """Release times for the chunks of one link direction (sans-IO; see module doc)."""

    def __init__(self, shape: Shape | None = None, rng: random.Random | None = None) -> None:
        self._shape = shape if shape is not None else Shape()
        self._rng = rng if rng is not None else random.Random(0)
        self._link_free_at = float("-inf")
        self._last_release: dict[Hashable, float] = {}
        self._held: list[tuple[float, int, int]] = []  # heap of (release time, seq, nbytes)
        self._held_bytes = 0
        self._seq = 0

    @property
    def shape(self) -> Shape:
        return self._shape

    @shape.setter
    def shape(self, shape: Shape) -> None:
        """Reshape the direction; applies to chunks submitted from now on."""
        self._shape = shape

    def submit(self, now: float, nbytes: int, conn: Hashable = 0) -> float:
        """Accept ``nbytes`` arriving at ``now`` on connection ``conn``; return its release time."""
        if nbytes <= 0:
            raise ValueError(f"nbytes = {nbytes} must be positive")
        s = self._shape
        start = max(now, self._link_free_at)
        finish = start + s.serialisation_time(nbytes)
        if s.bandwidth_bps is not None:
            self._link_free_at = finish
        release = finish + s.delay
        if s.jitter > 0:
            release += self._rng.uniform(0.0, s.jitter)
        # Never reorder within a connection: wait for the previous chunk.
        release = max(release, self._last_release.get(conn, release))
        self._last_release[conn] = release
        self._seq += 1
        heapq.heappush(self._held, (release, self._seq, nbytes))
        self._held_bytes += nbytes
        return release

    def _expire(self, now: float) -> None:
        while self._held and self._held[0][0] <= now:
            _, _, n = heapq.heappop(self._held)
            self._held_bytes -= n

    def held_bytes(self, now: float) -> int:
        """Bytes submitted whose release time is still after ``now``."""
        self._expire(now)
        return self._held_bytes

    def room_at(self, now: float) -> float:
        """Earliest time (>= ``now``) at which held bytes are below ``queue_bytes``."""
        self._expire(now)
        limit = self._shape.queue_bytes
        if self._held_bytes < limit:
            return now
        remaining = self._held_bytes
        for release, _, n in sorted(self._held):
            remaining -= n
            if remaining < limit:
                return release
        raise AssertionError("unreachable: held bytes drop to 0 after the last release")

    def forget(self, conn: Hashable) -> None:
        """Drop per-connection ordering state once ``conn`` is closed."""
        self._last_release.pop(conn, None)


def segments(data: bytes, shape: Shape) -> list[bytes]:
    """``data`` cut into segments for release (whole when the link is unlimited)."""
    if shape.bandwidth_bps is None or len(data) <= shape.segment_bytes:
        return [data]
    n = shape.segment_bytes
    return [data[i:i + n] for i in range(0, len(data), n)]


@dataclass(slots=True)
class DirectionCounters:
    """Traffic of one direction of a link proxy, since it started."""

    bytes_in: int = 0        # read from the sender
    chunks_in: int = 0       # reads from the sender
    bytes_out: int = 0       # written to the receiver
    chunks_out: int = 0      # writes to the receiver (segments, when a bandwidth cap cuts chunks)
    bytes_dropped: int = 0   # discarded while blackholed
    chunks_dropped: int = 0
    bytes_lost: int = 0      # still on their way when their connection ended (reset, closed): never delivered

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


@dataclass(slots=True)
class ConnectionCounters:
    """Connections seen by a link proxy, since it started."""

    accepted: int = 0          # every connection accepted on the listening address
    active: int = 0            # currently forwarding (or waiting for a blackhole to clear)
    closed: int = 0            # ended by either end (EOF or the ends' own reset)
    reset_by_link: int = 0     # live connections reset because the link went down by reset
    refused: int = 0           # accepted while down by reset, and reset at once
    connect_failures: int = 0  # the target could not be reached; the client was reset
    abandoned: int = 0         # accepted during a fade and closed by the client before it ended

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class LinkEvent:
    """One change of a link's state: ``at`` Unix seconds, ``t`` event-loop (monotonic) seconds."""

    at: float
    t: float
    link: str
    kind: str   # "start" | "stop" | "mode" | "shape"
    value: Any  # the new mode (str), or {"direction": ..., "shape": {...}} for "shape"

    def as_dict(self) -> dict[str, Any]:
        return {"at": self.at, "t": self.t, "link": self.link, "kind": self.kind, "value": self.value}


def mode_timeline(events: list[LinkEvent], link: str) -> list[tuple[float, str]]:
    """``(at, mode)`` steps of ``link`` from its events (for plotting link state over time)."""
    steps: list[tuple[float, str]] = []
    for e in sorted((e for e in events if e.link == link), key=lambda e: e.t):
        if e.kind == "mode":
            steps.append((e.at, str(e.value)))
        elif e.kind == "start":
            steps.append((e.at, str(e.value)))
        elif e.kind == "stop":
            steps.append((e.at, "stopped"))
    return steps


__all__ = ["LinkMode", "BlackholePolicy", "Shape", "Shaper", "segments", "DirectionCounters",
           "ConnectionCounters", "LinkEvent", "mode_timeline"]
