"""The receiving half of a point-to-point channel: its frontier, duplicates, what it acknowledges.

Theory of operation
-------------------
The sending half (``rcm.channels.p2p.OutboundChannel``) numbers the peer's
reliable frames with link sequence numbers; this half (``InboundChannel``)
holds where the peer's stream stands here. It knows the next expected link sequence
number on the current connection (from the sender's SYNC); anything at or below
its frontier is a duplicate and is dropped. It acknowledges its frontier
piggybacked on outgoing frames, or on a heartbeat after ``ack_wait``
(``ack_interval``, longer where no link is paced: ``rcm.channels.layer``).

A relayed frame names its link sequence number (``accept_at``): one past the
frontier is taken, at or below it is a duplicate, further on is a gap (dropped:
the stack NACKs and the sender resends, ``rcm.stack.inbound``). A SYNC
that moves the stream past frames never received (``sync``, ``relay_sync``)
moves the frontier with it, so acknowledgements go on, and says which frames
were skipped when this end held the stream from its first frame: they will
never come, and the sender names their messages in a MISSED notice
(``rcm.channels.released``). The state is the same whatever the ``[rcm] p2p``
mode: only the sending half differs between the robust channel and the
baselines.
"""
from __future__ import annotations

from dataclasses import dataclass

NEW, DUPLICATE, GAP = 1, 0, -1
"""What ``InboundChannel.accept_at`` did with a relayed frame."""


@dataclass(slots=True)
class InboundChannel:
    """The receiving half of one peer's channel."""

    peer_incarnation: int = 0       # the incarnation of the peer this state belongs to
    frontier: int = 0               # highest link seq received in order
    expected: int = 1               # link seq of the next reliable frame on this connection
    acked_sent: int = 0             # frontier value last acknowledged to the peer
    unacked_since: float | None = None
    duplicates: int = 0
    gaps: int = 0                   # link seqs skipped by a SYNC (baselines / lost state)
    continuous: bool = False        # we hold this stream from its first frame (not reset since a SYNC)

    def restore(self, incarnation: int, frontier: int) -> None:
        """Resume from a write-ahead log: the peer's stream ``incarnation``, held up to ``frontier``."""
        self.peer_incarnation = incarnation
        self.frontier = frontier
        self.acked_sent = 0
        self.continuous = True

    def unacked(self) -> bool:
        """Is there something received that the peer has not been told of?"""
        return self.frontier > self.acked_sent

    def ack_due(self) -> float | None:
        """Since when something waits for an acknowledgement (None: nothing)."""
        return self.unacked_since if self.frontier > self.acked_sent else None

    def acknowledged(self) -> int:
        """The frontier is being acknowledged now; returns it."""
        self.acked_sent = self.frontier
        self.unacked_since = None
        return self.frontier

    def reset(self, incarnation: int) -> None:
        self.peer_incarnation = incarnation
        self.frontier = 0
        self.expected = 1
        self.acked_sent = 0
        self.unacked_since = None
        self.continuous = False

    def sync(self, start: int) -> tuple[int, int] | None:
        """The peer's stream resumes at ``start`` on this connection. Returns ``(frontier, start - 1)`` when
        that skips frames of a stream we held continuously: they will never come (``rcm.channels.released``)."""
        jumped = self._jump(start)
        self.expected = start
        return jumped

    def _jump(self, start: int) -> tuple[int, int] | None:
        held, self.continuous = self.continuous, True
        if start <= self.frontier + 1:
            return None
        gap = (self.frontier, start - 1)
        self.gaps += start - self.frontier - 1
        # Skipped frames will never come: move the frontier so acks advance.
        self.frontier = start - 1
        return gap if held else None

    def accept_at(self, link_seq: int, now: float) -> int:
        """A relayed frame numbered ``link_seq``: ``NEW`` (taken), ``DUPLICATE`` or ``GAP`` (dropped)."""
        if link_seq <= self.frontier:
            self.duplicates += 1
            return DUPLICATE
        if link_seq > self.frontier + 1:
            return GAP
        self.frontier = link_seq
        if self.unacked_since is None:
            self.unacked_since = now
        return NEW

    def relay_sync(self, start: int) -> tuple[int, int] | None:
        """A relayed run of the peer's stream starts at ``start`` (a relayed SYNC); a gap as ``sync``."""
        return self._jump(start)

    def next_is_new(self) -> bool:
        """Would ``accept`` take the next reliable frame as new (not a duplicate)?"""
        return self.expected > self.frontier

    def accept(self, now: float) -> bool:
        """Number the next reliable frame; False if it is a duplicate."""
        seq = self.expected
        self.expected = seq + 1
        if seq <= self.frontier:
            self.duplicates += 1
            return False
        self.frontier = seq
        if self.unacked_since is None:
            self.unacked_since = now
        return True
