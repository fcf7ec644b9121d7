"""Group commit off the event loop: which effects wait for which log sync, and what may go meanwhile (sans-IO).

Theory of operation
-------------------
With durability on, the RCM server (``rcm.server.process``) makes no promise
before the records it rests on are on disk (``rcm.durability.wal``). It used to
call ``fdatasync`` inside its event loop, so a disk that stalled for seconds
froze the whole site: no frame read, no heartbeat written, and every peer
suspected it (and it every peer, once it woke). Now the sync runs in one
worker thread and the loop goes on reading and processing; only what a batch
*promises* waits. This module decides what waits for what; the edge owns the
thread.

``Commits`` is a queue of event batches in the order the stack made them, each
with a ticket. A batch's effects (frames to peers, replies and deliveries to
clients, status events, dials, closes: everything the edge would have done at
once) are held when the batch appended a forced record or when an earlier
batch is still held: a batch's frames may carry state (an acknowledgement, a
delivery number) that rests on an earlier batch's records, and frames to one
connection must keep their order, so batches are released strictly in order.
A batch that logged nothing forced and finds nothing held goes at once.

Group commit: at most one sync is in flight. ``start`` says whether one should
start now (none in flight, a forced batch waiting); it then covers every batch
added so far, whose records the edge hands to the worker in one piece. While
it runs, new batches append their records to the log's buffer and queue here;
when it completes (``done``) the batches it covered are released, with the
unforced batches right behind them, and the next sync covers everything that
queued meanwhile: one ``fdatasync`` for all of them. So the number of syncs
per message falls as load (or the disk's latency) rises. A failed sync
(``fail``) drops every held batch, released never: the server halts.

What may overtake a pending sync (``Keepalive``). Reading and processing
inbound frames never waits: the stack keeps running, so this site's view of
its peers' liveness stays right. The peers' view of *this* site needs frames
from it: a stack HEARTBEAT cannot simply go ahead, because it is written
after the held frames on its connection (its check byte counts them, and an
acknowledgement on it may cover frames received in an unsynced batch, which
would let the peer forget what we have not logged). So the edge writes its
own liveness-only frame: a HEARTBEAT *without* an acknowledgement whose check
byte is the stream position of the last bytes *released* on that connection,
exactly what the stack would have written at that point in its stream
(``Conn.tx_next`` read when the batch was made). It carries no promise and
changes no delta state on either side (no ack, no message sequence number);
it goes into the connection's outbox after everything released, before
anything held, so the codec and TLS see it in the order it is written. It is
written only on a connection whose released stream is open (past its SYNC),
and only while something is held: once ``heartbeat_timeout`` passed since
bytes were last released to the connection, then every ``heartbeat_timeout``.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

from rcm import wire

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class _Batch(Generic[T]):
    ticket: int
    forced: bool
    effects: T


class Commits(Generic[T]):
    """Event batches waiting for the log sync that covers them, released in order (see the module docstring)."""

    __slots__ = ("_held", "_ticket", "_covered", "in_flight", "failed", "syncs_started")

    def __init__(self) -> None:
        self._held: deque[_Batch[T]] = deque()
        self._ticket = 0              # the last batch's ticket
        self._covered = 0             # the sync in flight covers the batches up to this ticket
        self.in_flight = False
        self.failed = False
        self.syncs_started = 0

    def __len__(self) -> int:
        """Batches held."""
        return len(self._held)

    def add(self, effects: T, forced: bool) -> list[T]:
        """A new batch (``forced``: it appended a record that must be on disk first): what may be done now."""
        self._ticket += 1
        if self.failed:
            return []
        if not forced and not self._held:
            return [effects]
        self._held.append(_Batch(self._ticket, forced, effects))
        return []

    def start(self) -> bool:
        """Should a sync start now? Then it covers every batch added so far (the log's whole buffer)."""
        if self.in_flight or self.failed or not self._held:
            return False
        # Released up to the first forced batch no sync covered: the head is one, and waits for this sync.
        self.in_flight = True
        self._covered = self._ticket
        self.syncs_started += 1
        return True

    def done(self) -> list[T]:
        """The sync in flight completed: the batches it covered and the unforced ones right behind them."""
        assert self.in_flight, "no sync in flight"
        self.in_flight = False
        out: list[T] = []
        held = self._held
        while held and (held[0].ticket <= self._covered or not held[0].forced):
            out.append(held.popleft().effects)
        return out

    def fail(self) -> int:
        """The sync failed: nothing held is ever released (the server halts). Returns how many batches."""
        dropped = len(self._held)
        self._held.clear()
        self.in_flight = False
        self.failed = True
        return dropped


@dataclass(frozen=True, slots=True)
class Stream:
    """Where a connection's stream stands after a batch's bytes (``Conn.tx_next``; None before its SYNC): the
    edge holds it with the batch and tells ``Keepalive.released`` once the batch is released."""
    conn: Hashable
    position: int | None


class Keepalive:
    """Liveness-only heartbeats that may overtake held frames, per connection (see the module docstring)."""

    __slots__ = ("interval", "_check", "_at")

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._check: dict[Hashable, int] = {}     # released stream position (tx_next) mod CHECK_MOD, once open
        self._at: dict[Hashable, float] = {}      # when bytes were last written to the connection

    def released(self, conn: Hashable, position: int | None, now: float) -> None:
        """Bytes of ``conn`` were released; ``position``: its ``tx_next`` after them, None before its SYNC."""
        if position is not None:
            self._check[conn] = position % wire.CHECK_MOD
        self._at[conn] = now

    def lost(self, conn: Hashable) -> None:
        self._check.pop(conn, None)
        self._at.pop(conn, None)

    def due(self, now: float) -> list[tuple[Hashable, bytes]]:
        """The heartbeats to write now (call only while something is held), each counted as a write."""
        out: list[tuple[Hashable, bytes]] = []
        for conn, check in self._check.items():
            if now >= self._at.get(conn, now) + self.interval:
                out.append((conn, wire.encode_frame([wire.HEARTBEAT, check])))
                self._at[conn] = now
        return out

    def next_due(self) -> float | None:
        """When the next heartbeat falls due (if something is still held then)."""
        times = [self._at[c] + self.interval for c in self._check if c in self._at]
        return min(times) if times else None
