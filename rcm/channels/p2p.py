"""Point-to-point channels: Robust P2P and the paper's two TCP baselines.

Theory of operation
-------------------
The sending half (``OutboundChannel``) numbers every reliable frame for one peer
with a link sequence number and keeps it until the peer acknowledges it
cumulatively. When a connection (re)opens, the peer's HELLO names the last link
sequence number it received from this incarnation (its *frontier*); the
channel drops everything up to the frontier and retransmits only what follows.
The paper's protocol resent everything unacknowledged and named the overlap as
its inefficiency; the frontier removes it.

A frontier can be older than what the peer holds: a dialer writes its HELLO
when it dials, and when both ends dial at once the connection they keep may
open after frames went out on the other one (without TLS no frontier counts,
and the stream would restart after the last acknowledgement). The stack then
``hold``s the stream until the peer's first acknowledgement on the new
connection (each end sends one right behind its SYNC) and ``release``s it
after what that says (``rcm.stack.inbound``, the handshake).

The receiving half (``InboundChannel``, its frontier and what it acknowledges)
is ``rcm.channels.receiving``.

Modes (``[rcm] p2p``):

* ``robust``: the above; reliable while the two sites never see each other
  disconnected. The buffer holds at most ``max_buffered_messages`` frames and
  ``max_buffered_bytes`` bytes; past that ``offer`` refuses with back-pressure.
* ``tcp``: the paper's first baseline. A frame is written to the current
  connection if there is one, else lost; what a broken connection had in
  flight is lost.
* ``tcp-suspect``: the second baseline. Frames produced while the peer is not
  ``TCP_Connected`` wait and go out when it is again; what was in flight on a
  broken connection is lost.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rcm import ranges, wire
from rcm.channels.lanes import frame_bytes
from rcm.channels.released import Released
from rcm.repair.frames import repair_reach, stub_repair
from rcm.wire import envelope

ANNOUNCE_IN_LANE = 3
"""``OutFrame.kind`` of a best-effort body waiting in a lane (``wire.ANNOUNCE``; not numbered)."""


class ChannelFull(Exception):
    """The outbound buffer for a peer is at its cap."""


def stubbed(kind: int, header: Any, payload: Any, now: float) -> tuple[Any, Any] | None:
    """(header, payload) of the stub a channel frame becomes when written at ``now``: a DATA frame whose message
    expired by then, or a REPAIR of one (``rcm.wire.envelope``); None: it goes as it is."""
    if kind == wire.DATA:
        return (envelope.stub(header), b"") if envelope.expiring(header, now) else None
    if kind == wire.REPAIR:
        body = stub_repair(payload, now)
        return (header, body) if body is not None else None
    return None


@dataclass(slots=True)
class OutFrame:
    link_seq: int        # 0 while it waits in a lane, unnumbered (``rcm.channels.lanes``)
    kind: int            # wire.DATA / CTRL / MISSED (wire.ANNOUNCE: a best-effort body in a lane)
    msg_seq: int         # DATA only
    header: Any
    payload: Any         # bytes for DATA, body for CTRL/MISSED
    lane: int = 0
    offset: int = 0      # bytes (about: ``lanes.frame_bytes``) of the channel's frames numbered before it
    frag: Any = None     # while written in pieces on a paced link: ``rcm.channels.fragments.Outgoing``
    reach: int | None = None    # confined content: the mask of sites it may cross (``frame_reach``)


def frame_reach(kind: int, header: Any, payload: Any) -> int | None:
    """The confinement mask of a channel frame's content (``rcm.wire.envelope``): a confined DATA's, or a
    REPAIR's of a confined message; None for anything else (control frames carry no message content)."""
    if kind == wire.DATA:
        return envelope.reach_of(header)
    if kind == wire.REPAIR:
        return repair_reach(payload)
    return None


@dataclass(slots=True)
class ChannelStats:
    sent: int = 0        # reliable frames offered
    transmitted: int = 0  # frames written to a connection (first time)
    resent: int = 0      # frames written again after a reconnection
    acked: int = 0
    lost: int = 0        # baselines only: frames dropped without delivery guarantee
    stubbed: int = 0     # messages written as stubs: they expired before their turn (rcm.wire.envelope)
    withheld: int = 0    # confined frames that waited too long for a path within their sites (``withhold``)


class OutboundChannel:
    """The sending half of one peer's point-to-point channel."""

    def __init__(self, mode: str, cap: int, lanes: int = 0, max_bytes: int = 1 << 62) -> None:
        """``cap``: most frames, ``max_bytes``: most bytes buffered (a frame alone always fits);
        ``lanes``: on a paced link, that many lanes of frames numbered only when written."""
        self.mode = mode
        self.cap = cap
        self.max_bytes = max_bytes
        self.bytes = 0               # about (``lanes.frame_bytes``) what the buffer and the lanes hold
        self.next_seq = 1
        self.acked = 0               # highest cumulative ack from the peer
        self.buffer: deque[OutFrame] = deque()
        self.lanes: list[deque[OutFrame]] = [deque() for _ in range(lanes)]
        self.queued = 0              # reliable frames waiting in lanes
        self.sent_upto = 0           # highest link seq written on the current connection
        self.hwm = 0                 # highest link seq ever written, or skipped by a SYNC
        self.numbered_bytes = 0      # ``offset`` of the next frame numbered
        self.released = Released()   # what acknowledged frames carried (a forged ack's gap is named from it)
        self.held_until: float | None = None   # ``hold``: nothing is written before the peer acknowledges
        self.reaches: dict[int, int] = {}      # confinement mask -> frames held (buffer and lanes) carrying it
        self.stats = ChannelStats()

    def __len__(self) -> int:
        return len(self.buffer) + self.queued

    def has_room(self, n: int = 1, nbytes: int = 0) -> bool:
        """Is there room for ``n`` more frames of ``nbytes`` in all (by count and by bytes)?"""
        return len(self) + n <= self.cap and (not len(self) or self.bytes + nbytes <= self.max_bytes)

    def offer(self, kind: int, msg_seq: int, header: Any, payload: Any, lane: int | None = None) -> OutFrame:
        """Buffer a reliable frame; with lanes (and a ``lane``) it waits there unnumbered (link_seq 0)."""
        if len(self) >= self.cap:
            raise ChannelFull(f"{len(self)} frames buffered")
        size = frame_bytes(kind, payload)
        if len(self) and self.bytes + size > self.max_bytes:
            raise ChannelFull(f"{self.bytes} bytes buffered")
        self.bytes += size
        self.stats.sent += 1
        if self.lanes and lane is not None:
            f = OutFrame(0, kind, msg_seq, header, payload, lane)
            self._confine(f)
            self.lanes[lane].append(f)
            self.queued += 1
            return f
        f = OutFrame(0, kind, msg_seq, header, payload)
        self._confine(f)
        self._number(f)
        self.buffer.append(f)
        return f

    def _confine(self, f: OutFrame) -> None:
        """``f`` joins the channel: its confinement (if any) narrows where the channel may go."""
        f.reach = frame_reach(f.kind, f.header, f.payload)
        if f.reach is not None:
            self.reaches[f.reach] = self.reaches.get(f.reach, 0) + 1

    def _unconfine(self, f: OutFrame) -> None:
        """``f`` left the channel (acknowledged, or lost by a baseline)."""
        if f.reach is not None:
            n = self.reaches[f.reach] - 1
            if n:
                self.reaches[f.reach] = n
            else:
                del self.reaches[f.reach]

    def confinement(self) -> int | None:
        """The sites every frame the channel holds may cross: the intersection of their confinement masks
        (None: no frame is confined). The channel's path may lead only through these (docs/relay.md)."""
        if not self.reaches:
            return None
        mask = -1
        for r in self.reaches:
            mask &= r
        return mask

    def _number(self, f: OutFrame) -> None:
        """Give ``f`` the next link seq, and its byte offset in the stream."""
        f.link_seq = self.next_seq
        self.next_seq += 1
        self._place(f)

    def _place(self, f: OutFrame) -> None:
        """Give ``f`` its byte offset: it follows every frame numbered so far."""
        f.offset = self.numbered_bytes
        self.numbered_bytes += frame_bytes(f.kind, f.payload)

    def expire(self, f: OutFrame, now: float) -> bool:
        """``f`` is about to be written at ``now``: if the message it carries (DATA, or a REPAIR of one) expired
        by then, it becomes its stub for good (``rcm.wire.envelope``: same header marked, no payload), so every
        write from now on (this one, a resend) carries no content. True if it changed."""
        got = stubbed(f.kind, f.header, f.payload, now)
        if got is None:
            return False
        before = frame_bytes(f.kind, f.payload)
        f.header, f.payload = got       # numbered already: the offsets after it stay (``in_flight`` is about)
        self.bytes -= before - frame_bytes(f.kind, f.payload)
        self.stats.stubbed += 1
        return True

    def withhold(self) -> int:
        """Every confined frame the channel holds stops waiting for a path within its sites (docs/relay.md,
        "Confinement"): a DATA of ours becomes a MISSED naming its message, so the destination reports it
        missing, its global order goes on, and repair brings the message later over a path within its sites;
        a REPAIR of a confined message becomes an empty SUMMARY reply (the requester asks again, later or
        elsewhere). Same link seq, in place, no content left (as ``expire``: offsets stay). How many.

        Only frames never written: one written already may have arrived (its acknowledgement lost with the
        path), and a MISSED for a message the destination delivered would be a false report to it (to a
        destination that restarted without its state, a message both delivered and missing). Those wait
        for a path within their sites as before."""
        n = 0
        for f in [*self.buffer, *(g for q in self.lanes for g in q)]:
            if f.reach is None or 0 < f.link_seq <= self.hwm:
                continue
            before = frame_bytes(f.kind, f.payload)
            self._unconfine(f)
            if f.kind == wire.DATA:
                f.kind, f.header, f.payload = wire.MISSED, None, [[f.msg_seq, f.msg_seq]]
            else:
                f.kind, f.header, f.payload = wire.SUMMARY, None, [0, []]
            f.msg_seq, f.reach = 0, None
            self.bytes -= before - frame_bytes(f.kind, f.payload)
            n += 1
        self.stats.withheld += n
        return n

    def queue_announcement(self, body: Any) -> bool:
        """A best-effort body must not overtake the lanes' frames: queue it last, or False if none wait."""
        if not self.lanes or (not any(self.lanes) and not self.unwritten()):
            return False        # nothing waits (not even an older announcement): it may go at once
        self.lanes[-1].append(OutFrame(0, ANNOUNCE_IN_LANE, 0, None, body, len(self.lanes) - 1))
        return True

    def supersede_announcement(self) -> bool:
        """A newer announcement makes one that waits last in the lanes (nothing queued after it) stale:
        drop it; False when the last frame waiting is not an announcement."""
        ordered = self.lanes[-1] if self.lanes else None
        if not ordered or ordered[-1].kind != ANNOUNCE_IN_LANE:
            return False
        ordered.pop()
        return True

    def holding(self) -> bool:
        """Does anything (a frame, an announcement) wait in a lane?"""
        return any(self.lanes)

    def in_flight(self) -> int:
        """Bytes (about: ``lanes.frame_bytes``) written on the current path and not acknowledged: from
        the offsets of the first buffered frame and of the last one written, whatever the window."""
        buf = self.buffer
        if not buf or self.sent_upto < buf[0].link_seq:
            return 0
        last = buf[min(self.sent_upto - buf[0].link_seq, len(buf) - 1)]
        return last.offset + frame_bytes(last.kind, last.payload) - buf[0].offset

    def unwritten(self) -> bool:
        """Are numbered frames waiting to be written on the current connection?"""
        return bool(self.buffer) and self.buffer[-1].link_seq > self.sent_upto

    def next_lane(self, floor: int = 0) -> int | None:
        """The lane of the frame ``take(floor)`` would write next (-1: a numbered frame to write again),
        or None."""
        if self.held_until is not None:
            return None
        if self.unwritten():
            return -1
        for i in range(floor, len(self.lanes)):
            if self.lanes[i]:
                return i
        return None

    def head(self, floor: int = 0) -> OutFrame | None:
        """The lane frame ``take(floor)`` would number and write next, left in its lane; None when a resend
        goes first, the stream is held or no lane from ``floor`` down has a frame."""
        if self.held_until is not None or self.unwritten():
            return None
        for q in self.lanes[floor:]:
            if q:
                return q[0]
        return None

    def take(self, floor: int = 0) -> tuple[OutFrame, bool] | None:
        """The next frame to write on a paced link, marked written: (frame, numbered just now).

        Numbered frames not yet written on this connection go first (a resend);
        then the head of the highest non-empty lane from ``floor`` down (the
        lanes above it are passed over: ``rcm.channels.lanes.LaneShare``), numbered now.
        An announcement comes back with link_seq 0: it is not part of the stream.
        """
        if self.held_until is not None:
            return None
        if self.unwritten():
            f = self.buffer[max(0, self.sent_upto + 1 - self.buffer[0].link_seq)]
            self._written(f)
            return f, False
        for q in self.lanes[floor:]:
            if q:
                f = q.popleft()
                if f.kind == ANNOUNCE_IN_LANE:
                    return f, False
                self.queued -= 1
                self._number(f)
                self.buffer.append(f)
                self._written(f)
                return f, True
        return None

    def _written(self, f: OutFrame) -> None:
        if f.link_seq <= self.hwm:
            self.stats.resent += 1
        else:
            self.stats.transmitted += 1
            self.hwm = f.link_seq
        self.sent_upto = f.link_seq

    def waiting(self) -> list[OutFrame]:
        """The reliable frames waiting in lanes, highest lane first (for a compacted log)."""
        return [f for q in self.lanes for f in q if f.kind != ANNOUNCE_IN_LANE]

    def ack(self, upto: int) -> int:
        """Cumulative ack; returns how many frames it released."""
        if upto <= self.acked:
            return 0
        upto = min(upto, self.next_seq - 1)
        self.acked = upto
        n = 0
        buf = self.buffer
        while buf and buf[0].link_seq <= upto:
            f = buf.popleft()
            self._unconfine(f)
            self.bytes -= frame_bytes(f.kind, f.payload)
            if f.kind == wire.DATA:
                self.released.data(f.link_seq, f.msg_seq)
            elif f.kind == wire.MISSED:
                self.released.missed(f.link_seq, f.payload)
            n += 1
        self.stats.acked += n
        return n

    def carried(self, after: int, upto: int) -> tuple[list[list[int]], int]:
        """The message numbers frames ``after + 1 .. upto`` carried (DATA, and what MISSED frames named),
        acknowledged or still buffered; and how many of them are too old to name (``rcm.channels.released``)."""
        named, forgotten = self.released.between(after, upto)
        more: list[list[int]] = []
        for f in self.buffer:
            if f.link_seq > upto:
                break
            if f.link_seq > after:
                if f.kind == wire.DATA:
                    more.append([f.msg_seq, f.msg_seq])
                elif f.kind == wire.MISSED:
                    more.extend(f.payload)
        return ranges.normalize([*named, *more]), forgotten

    def restore(self, acked: int, frames: dict[int, OutFrame], queued: Sequence[OutFrame] = ()) -> None:
        """Resume from a write-ahead log: ``acked`` by the peer, the logged frames by link seq, and
        the frames that were waiting in lanes (in the order they were queued)."""
        top = max(frames) if frames else acked
        self.acked = acked
        self.released = Released(floor=acked)       # what frames before the restart carried is not known
        self.next_seq = max(top, acked) + 1
        self.hwm = self.next_seq - 1
        self.buffer = deque(frames[ls] for ls in sorted(frames) if ls > acked)
        self.reaches = {}
        for f in self.buffer:
            self._place(f)
            self._confine(f)
        for f in queued:
            self._confine(f)
            if self.lanes:
                self.lanes[min(f.lane, len(self.lanes) - 1)].append(f)
                self.queued += 1
            else:
                # The link is not paced any more: number them now, in order.
                self._number(f)
                self.buffer.append(f)
        # What the log holds is kept whatever the cap (it was accepted): new sends wait below it.
        self.bytes = sum(frame_bytes(f.kind, f.payload) for f in [*self.buffer, *queued])

    def rewind(self) -> None:
        """Write again everything after the last acknowledged frame (we closed the connection ourselves)."""
        self.sent_upto = self.acked
        self.held_until = None

    def resume(self, peer_frontier: int | None) -> int:
        """A new connection: return the link seq the stream restarts at.

        ``peer_frontier`` is the last link seq the peer holds from this
        incarnation, or None if the peer knows nothing of it (restarted or new).
        """
        self.held_until = None
        if peer_frontier is not None:
            self.ack(peer_frontier)
        if self.mode != "robust":
            # Baselines: what was written to the old connection is gone.
            while self.buffer and self.buffer[0].link_seq <= self.sent_upto:
                self._lose(self.buffer.popleft())
        start = self.buffer[0].link_seq if self.buffer else self.next_seq
        self.sent_upto = start - 1
        # The SYNC tells the peer its frontier is start - 1: a baseline may have dropped frames
        # up to there unwritten, and a later HELLO with that frontier is no lie.
        self.hwm = max(self.hwm, start - 1)
        return start

    def hold(self, until: float) -> None:
        """Write nothing of the stream until ``release`` (at the latest at ``until``): the peer's first
        acknowledgement on the new connection says where it stands when its HELLO may not."""
        self.held_until = until

    def held(self) -> bool:
        """Is the stream held (``hold``)?"""
        return self.held_until is not None

    def release(self) -> int | None:
        """End a hold. Returns the link seq the stream now restarts at when acknowledgements taken
        meanwhile moved it past the start the SYNC already said (a new SYNC must say so), else None."""
        self.held_until = None
        if self.acked <= self.sent_upto:
            return None
        start = self.buffer[0].link_seq if self.buffer else self.next_seq
        self.sent_upto = start - 1
        return start

    def connection_lost(self) -> None:
        """The connection broke; baselines forget what they wrote to it."""
        if self.mode != "robust":
            while self.buffer and self.buffer[0].link_seq <= self.sent_upto:
                self._lose(self.buffer.popleft())

    def drop_unsendable(self) -> None:
        """``tcp`` mode: frames offered while there is no connection are lost."""
        if self.mode == "tcp":
            while self.buffer and self.buffer[-1].link_seq > self.sent_upto:
                self._lose(self.buffer.pop())

    def _lose(self, f: OutFrame) -> None:
        """Baselines: a frame dropped without a delivery guarantee."""
        self._unconfine(f)
        self.bytes -= frame_bytes(f.kind, f.payload)
        self.stats.lost += 1

    def to_transmit(self) -> list[OutFrame]:
        """Frames not yet written on the current connection, marking them written."""
        if self.held_until is not None or not self.buffer or self.buffer[-1].link_seq <= self.sent_upto:
            return []
        first = self.buffer[0].link_seq
        idx = max(0, self.sent_upto + 1 - first)
        frames = [self.buffer[i] for i in range(idx, len(self.buffer))]
        last = frames[-1].link_seq
        resent = max(0, min(last, self.hwm) - frames[0].link_seq + 1)
        self.stats.resent += resent
        self.stats.transmitted += len(frames) - resent
        self.hwm = max(self.hwm, last)
        self.sent_upto = last
        return frames
