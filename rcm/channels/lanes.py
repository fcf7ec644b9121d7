"""Precedence on the RCM wire, lanes of a paced channel, and the pacer, sans-IO.

Theory of operation
-------------------
**On the wire.** A message's precedence (``contracts.precedence``) travels
inside the header its DATA frame already carries (``rcm.wire.envelope``, the
home of the wrapper, with the expiry and the stub mark; ``wrap`` and ``unwrap``
are re-exported here): a ROUTINE message's header is the ordering protocol's
header as before (old frames and logs read as routine), any other is
``{"p": rank, "h": header}`` (a map: no ordering header is one). Because the
header goes everywhere the message goes (DATA and
ROUTED frames, ``LocalSend``/``Received``/``Pending``/``Outbound`` log
records), precedence survives relays and restarts with no field of its own.

**Lanes.** A channel to a paced peer (``[sites.A.rate]``, robust channels
only) keeps the frames it has not written yet in lanes, unnumbered: FLASH,
IMMEDIATE, and the *ordered* lane (PRIORITY and ROUTINE, reliable control,
clock announcements). A frame gets its link sequence number when it is
written, from the highest non-empty lane, so the implicit numbering of the
wire, cumulative acks and resend-after-reconnect work unchanged on what was
written. PRIORITY shares the ordered lane with ROUTINE on purpose: a PRIORITY
message is delivered in global order, after every ROUTINE message ordered
before it, so overtaking them on the link would gain it nothing, while every
ordering protocol relies on the ordered lane being FIFO per origin (an
announcement after data means the data arrived). Urgent messages
(``URGENT``: FLASH, IMMEDIATE) never teach the receiver anything about what
else is in flight, so they may overtake. ``[rcm] lanes = false`` keeps one
FIFO lane (the baseline ``bench/precedence.py`` compares with).

**Pacing.** ``Pacer`` is a token bucket in time: ``free_at`` is when the link
has sent everything written so far at ``rate`` bits per second. A lane frame
is written while ``free_at`` is at most ``burst`` seconds ahead of now, so the
kernel never holds more than about one frame plus ``burst`` and a FLASH waits
at most that long. Heartbeats, acks and handshakes are never held: they are
written at once and counted (``charge``), so they are never starved and the
average rate still holds.

**The urgent lanes' share.** Strict precedence alone lets a flood of FLASH
(anyone sending faster than the link) starve the ordered lane for as long as
it lasts, and with it PRIORITY, ROUTINE, reliable control and the clock
announcements every site's global order waits for. So while the ordered lane
has frames waiting, the urgent lanes get at most ``URGENT_SHARE`` (3/4) of the
bytes written to the link (``LaneShare``: a weighted round robin in bytes,
between two classes, urgent and ordered). When the ordered lane is empty, or
the share allows, a FLASH still goes first: one FLASH after an outage jumps
the whole backlog as before, and a burst of them is slowed by a third at most;
what the ordered lane gets under a flood (a quarter of the link: 14 kbit/s of
56) carries several chat lines a second and every announcement. Resends
(frames numbered before a reconnection) stay outside the share: they go
first, as the stream's numbering requires. FLASH keeps strict precedence over
IMMEDIATE within the urgent class. Every urgent send makes its site announce
its clock, so a flood would also fill the ordered lane with announcements: a
newer one supersedes one still waiting last in the lanes
(``OutboundChannel.supersede_announcement``), and the stack asks the ordering
protocol to ``resync`` that peer instead (an absolute state, at the tail).

**Relayed frames** (a ROUTED frame of another site's stream, forwarded to a
paced neighbour) wait in that neighbour's ``ForwardQueue``, written by the
same pacer as this site's own lanes: the lower lane goes first, whoever's
frame it is, so this site's FLASH does not wait behind a relayed backlog; and
they take part in the same share (a stream whose head is urgent counts as
urgent), so a relayed flood starves neither this site's ordered lane nor
other origins' ordered streams.
Within one origin's stream the queue is FIFO (its frames are numbered by
their origin and the destination takes only the next one), so a stream's
head decides its turn; a relayed ACK is written at once, as a direct one is.
What does not fit in ``FORWARD_QUEUE_BYTES`` is dropped and counted: the
origin resends it after its relay timeout, as it would a frame lost with a
connection.

**Latest wins.** LATEST frames (``rcm.latest``: position reports, the newest of
each key only) are no channel's: they wait as keys in a neighbour's dirty set
and are written by the same pacer, below the urgent lanes and byte for byte
with the ordered lane (``LATEST_SHARE`` in a second ``LaneShare``, where they
play the urgent part), and only when the link is idle (``Pacer.idle``): at
most one LATEST frame is ever ahead of a FLASH, and a key updated while its
frame waits is written once, with its newest report.

**Paced beyond the first hop.** Because a relay keeps each origin's stream
FIFO, an origin's FLASH would wait there behind that origin's own backlog if
the origin wrote it all at once (its link to the relay unpaced, the relay's
onward link slow). So the origin keeps the backlog itself: a channel whose
route crosses a paced link after its first hop (``Route.slowest``, from the
mission's rate tables, which every site reads) gets a ``RouteLimit``: its
frames are written at that link's rate and at most ``ROUTE_WINDOW`` seconds
of it may be written and not yet acknowledged. The rate keeps the relay's
queue short when the origin is alone on the slow link; the window bounds
what waits there when several origins share it. Either way the backlog waits
in the origin's lanes, where its FLASH passes it; the channel keeps the urgent
share within its own stream too (the route's pacer has a ``LaneShare``), or an
origin's FLASH flood would starve its own ordered lane for that route. A channel is *laned* (its
new frames wait in lanes, unnumbered) while its path crosses a paced link or
it has none; on an unpaced path frames are numbered at once, so a multicast
still crosses each link once.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from contracts.precedence import URGENT
from rcm.wire.envelope import unwrap as unwrap  # re-exported: the wrapper's home is rcm.wire.envelope
from rcm.wire.envelope import wrap as wrap

LANES = 3
"""Lane indexes: 0 FLASH, 1 IMMEDIATE, 2 ordered (PRIORITY, ROUTINE, control)."""
ORDERED_LANE = LANES - 1
BURST = 0.05
"""Seconds of link time written ahead of the pacer (at 56 kbit/s: 350 bytes)."""
URGENT_SHARE = 0.75
"""Most of a paced link's bytes the urgent lanes take while the ordered lane has frames waiting."""
LATEST_SHARE = 0.5
"""Most of the non-urgent bytes of a paced link LATEST frames (``rcm.latest``) take while the ordered lane
has frames waiting, and the least they get (byte for byte with the ordered lane)."""


def lane(precedence: str, lanes: bool = True) -> int:
    """The lane a message of ``precedence`` waits in (with ``lanes`` off: the ordered one)."""
    if not lanes or precedence not in URGENT:
        return ORDERED_LANE
    return URGENT.index(precedence)


class LaneShare:
    """How the urgent lanes and the ordered lane share one paced link: a weighted round robin in bytes.

    While both have frames waiting, the urgent lanes get at most ``share`` of the bytes written:
    ``balance`` is what the ordered lane is owed, ``(1 - share) * urgent - share * ordered`` over the
    bytes written while both waited; the urgent lanes go when it is not positive. Neither side banks
    time it had nothing waiting: an empty ordered lane owes nothing, an empty urgent class cannot
    claim back what the ordered lane wrote alone.
    """

    __slots__ = ("share", "balance")

    def __init__(self, share: float = URGENT_SHARE) -> None:
        if not 0.0 < share <= 1.0:
            raise ValueError("the urgent share must be in (0, 1]")
        self.share = share
        self.balance = 0.0

    def urgent_next(self, urgent: bool, ordered: bool) -> bool:
        """Does an urgent frame go next, given which of the two have a frame waiting?"""
        return urgent and (not ordered or self.balance <= 0.0)

    def wrote(self, urgent: bool, n: int, contended: bool) -> None:
        """``n`` bytes of an urgent (else ordered) frame were written; ``contended``: both had frames waiting."""
        if contended:
            self.balance += n * (1.0 - self.share) if urgent else -n * self.share
        elif urgent:
            self.balance = 0.0          # nothing ordered waited: nothing is owed
        else:
            self.balance = max(0.0, self.balance - n * self.share)


class Pacer:
    """Token bucket of one paced link, in time, and how its lanes share it (see the module docstring)."""

    __slots__ = ("rate", "burst", "free_at", "owed", "bytes", "share", "latest", "ratio", "est_owed", "plain_owed")

    def __init__(self, rate_bps: int, burst: float = BURST) -> None:
        if rate_bps <= 0:
            raise ValueError("rate must be positive")
        self.rate = rate_bps
        self.burst = burst
        self.free_at = float("-inf")
        self.owed = 0          # bytes written since the last settle (all at the current event's time)
        self.bytes = 0
        self.share = LaneShare()
        self.latest = LaneShare(LATEST_SHARE)    # LATEST frames ("urgent" here) against the ordered lane
        # Link bytes per stack byte of large writes (compression), and what was charged at it that the edge
        # has not reported yet (``rcm.channels.pacing.Pacing.adjust``).
        self.ratio = 1.0
        self.est_owed = 0
        self.plain_owed = 0

    def charge(self, n: int) -> None:
        """``n`` bytes were written in the current event."""
        self.owed += n
        self.bytes += n

    def settle(self, now: float) -> None:
        """Account the bytes written at ``now``: the link is busy for their time after what was queued."""
        if self.owed:
            self.free_at = max(self.free_at, now) + self.owed * 8 / self.rate
            self.owed = 0

    def ready(self, now: float) -> bool:
        """May a held frame be written now?"""
        self.settle(now)
        return self.ready_at() <= now      # the very expression of the deadline: no rounding gap

    def ready_at(self) -> float:
        """When ``ready`` turns true (after ``settle``)."""
        return self.free_at - self.burst

    def idle(self, now: float) -> bool:
        """Has everything written so far left at the link's rate (no burst ahead)? A LATEST frame is
        written only then, so at most one is ever ahead of a FLASH."""
        self.settle(now)
        return self.free_at <= now


FORWARD_QUEUE_BYTES = 1 << 20
"""Most bytes of relayed frames waiting for one paced neighbour (more are dropped; origins resend)."""


ROUTE_WINDOW = 1.0
"""Seconds of its route's slowest link a relayed channel may have written and not acknowledged."""
FRAME_OVERHEAD = 24
"""About what a channel frame adds to its body on the wire (for pacing a route, not billing it)."""


def frame_bytes(kind: int, body: Any) -> int:
    """About the bytes of one channel frame on the wire: its body (DATA: the payload) and framing."""
    return FRAME_OVERHEAD + (len(body) if isinstance(body, (bytes, bytearray)) else 2 * FRAME_OVERHEAD)


class RouteLimit:
    """A relayed channel whose route crosses a paced link after its first hop: written at that
    link's rate, with at most ``ROUTE_WINDOW`` seconds of it unacknowledged (module docstring)."""

    __slots__ = ("rate", "pacer", "window")

    def __init__(self, rate_bps: int) -> None:
        self.rate = rate_bps
        self.pacer = Pacer(rate_bps, burst=BURST)
        self.window = max(1, int(rate_bps / 8 * ROUTE_WINDOW))

    def open(self, in_flight: int) -> bool:
        """Is the window open with ``in_flight`` bytes unacknowledged? (A frame larger than the window
        still goes when nothing is in flight.)"""
        return in_flight < self.window

    def ready(self, in_flight: int, now: float) -> bool:
        """May the channel write a frame now?"""
        return self.open(in_flight) and self.pacer.ready(now)

    def wrote(self, n: int, now: float) -> None:
        """``n`` bytes of the channel were written at ``now``."""
        self.pacer.charge(n)
        self.pacer.settle(now)


Stub = tuple[float, Callable[[], bytes]]
"""When a relayed frame's message expires, and how to encode the stub that is written instead after that."""


class ForwardQueue:
    """Relayed frames waiting for one paced neighbour: FIFO per origin stream, streams by head lane. A frame
    whose message expires while it waits is written as its stub (``rcm.wire.envelope``). The pieces of a cut
    frame (``push_all``: ``rcm.channels.fragments``) go one after the other in their lane: once the first is
    written, no other stream's frame of that lane is (the receiver holds one partial relayed frame per lane)."""

    __slots__ = ("streams", "bytes", "max_bytes", "dropped", "cutting", "_n")

    def __init__(self, max_bytes: int = FORWARD_QUEUE_BYTES) -> None:
        # origin -> (lane, arrival, frame, destinations it carries, its stub when it expires, more pieces follow)
        self.streams: dict[str, deque[tuple[int, int, bytes, int, Stub | None, bool]]] = {}
        self.bytes = 0
        self.max_bytes = max_bytes
        self.dropped = 0
        self.cutting: dict[int, str] = {}       # lane -> the stream whose cut frame is going in pieces
        self._n = 0

    def __len__(self) -> int:
        return sum(len(q) for q in self.streams.values())

    def push(self, origin: str, lane_: int, data: bytes, entries: int = 1, stub: Stub | None = None,
             more: bool = False) -> bool:
        """Queue an encoded frame of ``origin``'s stream for ``entries`` destinations (``stub``: when it
        expires, and its stub; ``more``: a piece that the next frame of the stream continues); False (counted)
        if it does not fit."""
        if self.bytes + len(data) > self.max_bytes:
            self.dropped += 1
            return False
        self._n += 1
        self.streams.setdefault(origin, deque()).append((lane_, self._n, data, entries, stub, more))
        self.bytes += len(data)
        return True

    def push_all(self, origin: str, lane_: int, frames: list[tuple[bytes, int, Stub | None]]) -> bool:
        """Queue the pieces of one cut frame of ``origin``'s stream (``data, entries, stub`` each), all or
        none: False (counted once) if together they do not fit."""
        if self.bytes + sum(len(f[0]) for f in frames) > self.max_bytes:
            self.dropped += 1
            return False
        for i, (data, entries, stub) in enumerate(frames):
            self.push(origin, lane_, data, entries, stub, more=i < len(frames) - 1)
        return True

    def _heads(self, floor: int) -> list[tuple[tuple[int, int], str]]:
        """The streams' heads that may go next, ``floor`` or above: in a lane where a cut frame is going in
        pieces, only its stream's (the next piece is that stream's head: its pieces were queued together)."""
        cutting = self.cutting
        return [(q[0][:2], o) for o, q in self.streams.items()
                if q and q[0][0] >= floor and cutting.get(q[0][0], o) == o]

    def head(self, floor: int = 0) -> tuple[int, int] | None:
        """(lane, arrival) of the frame ``pop(floor)`` would return, or None when none waits."""
        heads = self._heads(floor)
        return min(heads)[0] if heads else None

    def pop(self, floor: int = 0, now: float | None = None) -> tuple[bytes, int]:
        """The frame of the lowest lane, ``floor`` or above, among the streams' heads (the earliest of
        that lane), and the destinations it carries; with ``now``, its stub when its message expired."""
        origin = min(self._heads(floor))[1]
        q = self.streams[origin]
        lane_, _, data, entries, stub, more = q.popleft()
        if more:
            self.cutting[lane_] = origin
        elif self.cutting.get(lane_) == origin:
            del self.cutting[lane_]
        if not q:
            del self.streams[origin]
        self.bytes -= len(data)
        if stub is not None and now is not None and stub[0] <= now:
            return stub[1](), entries
        return data, entries

    def clear(self) -> int:
        """Forget every frame (the connection they were for is gone); the destinations they carried."""
        n = sum(f[3] for q in self.streams.values() for f in q)
        self.streams.clear()
        self.cutting.clear()
        self.bytes = 0
        return n
