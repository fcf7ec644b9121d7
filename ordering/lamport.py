"""Intermittent global order on Lamport logical time (the RCM paper's protocol).

Theory of operation
-------------------
Each site keeps a Lamport clock. A local send ticks the clock and stamps the
message with ``(clock, site)``: that pair is the message's order key. Receiving
a message raises the clock to at least the message's timestamp.

A site also tracks, per peer, the highest clock value it has heard from that
peer (``known``), from the peer's messages and from its clock announcements.
Because a peer's clock only grows and its messages arrive FIFO, a future
message from peer ``s`` has a key of at least ``(known[s] + 1, s)``.

A held-back message with the smallest key ``k`` is delivered once no
*connected* peer can still send something ordered before it. Suspected and
disconnected peers are not waited for (the IGO modification of the standard
protocol): their messages that arrive after their place has passed are
delivered at once, flagged late, with their key.

Latency does not depend on how often sites send: whenever a site's clock has
advanced past what it last announced, it announces the clock at the end of the
input batch (``flush``). A message sent at ``t`` is therefore deliverable
everywhere after about two one-way delays: one for the message, one for the
announcements it triggers. A message multicast to a subset of sites also
announces the sender's clock to the others, so they do not hold it up.

On slow links (HF radio) those announcements cost more than the data: every
site that hears a message announces its raised clock to every peer, so a
message to n sites makes (n-1)^2 announcements, each its own write (a TLS
record and a packet). ``announce_delay`` (``[rcm] announce_delay``, 0: off)
holds an announcement to a peer for up to that long instead (the bookkeeping
is ``ordering.window``'s, shared with the hybrid protocol), and it is never
sent if something else tells the peer as much first:

* a later clock rise joins it (the window runs from the first): one
  announcement, of the clock at the time it goes, stands for all of them;
* a non-urgent data message of ours to that peer makes it moot: the data's
  timestamp is the clock at the send, at least any clock owed, and it arrives
  reliably, in FIFO with our earlier data (an urgent one does not: it may
  overtake, so its timestamp teaches nothing);
* a write to that peer made anyway in the same input batch (an
  acknowledgement, a heartbeat, a frame of another layer: ``riding``, which
  the stack calls after ``flush``) takes it along, so it costs a few bytes
  and no write of its own.

Why this keeps IGO: an announcement only ever raises ``known`` at its
receiver, i.e. it tells the receiver that nothing of ours ordered before the
clock will come; holding it (or never sending it because the data told as
much) makes that lower bound lag, never lie. So it can hold messages back at
most ``announce_delay`` longer, never reorder them, never make one late (a
message is late only where a later key was delivered first, and a site that
waits longer delivers nothing earlier). Nothing waits on it forever: every
owed announcement goes when its window ends (``tick`` at ``next_deadline``),
and a peer that disconnects is owed nothing since ``resync`` tells it the
clock afresh when a connection opens. Urgent messages never wait on
announcements (they are delivered on arrival), so FLASH latency does not
move; routine delivery in a stable period takes up to ``announce_delay``
longer (the simulator's stable-period bound grows by it).

Timestamps and announced clocks beyond what an honest run can have reached by
now (``ordering.base.honest_ceiling``: far below 2^53 for centuries) are
refused with ``ValueError`` (the stack closes that peer's link), so no peer
can move the clock to its bound; at the bound a local send raises
``ClockExhausted``. A log written before that rule may hold such a clock: it
is brought back to the ceiling on restore (``clamped`` says so; docs/ordering.md).
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Sequence
from typing import Any

from sortedcontainers import SortedDict

from .base import (
    CONNECTED,
    DISCONNECTED,
    KEY_INT_MAX,
    ClockExhausted,
    Deliver,
    OrderingProtocol,
    OrderKey,
    Output,
    SendControl,
    key_int,
    peer_int,
    urgent_late,
)
from .window import AnnounceWindow


class LamportIGO(OrderingProtocol):
    """IGO on Lamport clocks; order key ``(timestamp, origin)``."""

    name = "lamport"

    def __init__(self, site: str, peers: Iterable[str], now: float = 0.0, announce_delay: float = 0.0) -> None:
        super().__init__(site, peers, now)
        self.window = AnnounceWindow(announce_delay)     # announcements held back (``announce_delay`` > 0)
        self.clock = 0
        self.known: dict[str, int] = {p: 0 for p in self.peers}
        self.pending: SortedDict = SortedDict()  # key -> (origin, seq, payload)
        self.frontier: OrderKey | None = None  # key of the last in-order delivery
        self.announced = 0
        # FIFO per origin beats lateness: a late message waits behind messages
        # of the same origin that are still held (its clock restarted from zero
        # after a non-durable restart, say); they are delivered first.
        self.held_from: Counter[str] = Counter()
        self.max_held: dict[str, OrderKey] = {}
        self.behind: dict[str, list[tuple[OrderKey, int, bytes]]] = {}

    def local_send(self, seq: int, payload: bytes, now: float, dests: Sequence[str] = (),
                   urgent: bool = False) -> tuple[Any, OrderKey, list[Output]]:
        if self.clock >= KEY_INT_MAX:
            raise ClockExhausted(f"the Lamport clock of {self.site} is at its bound 2^53 = {KEY_INT_MAX}: "
                                 "no later timestamp exists (a site announced a clock no honest run reaches)")
        self.clock += 1
        key = (self.clock, self.site)
        out: list[Output] = []
        if urgent:
            self._urgent(self.site, seq, key, payload, out)
        else:
            self._hold(self.site, seq, key, payload)
        # Peers that do not get the message must still learn the clock, or
        # they would never announce past it and would hold it up here. The
        # stack passes the live destinations explicitly: an empty tuple means
        # no peer gets the data (all addressed ones are disconnected).
        others = tuple(p for p in self.peers
                       if p not in dests and self.status[p] != DISCONNECTED)
        if others:
            if self.window:
                self.window.owe(others, now)
            else:
                out.append(SendControl(self.clock, reliable=False, to=others))
        if not urgent:      # the data tells its destinations; an urgent message teaches them nothing
            self.announced = max(self.announced, self.clock)
            self.window.settle(dests)   # ... and covers whatever clock was owed to them (it is at least that)
        out.extend(self._drain())
        return self.clock, key, out

    def receive(self, origin: str, seq: int, header: Any, payload: bytes,
                now: float, urgent: bool = False) -> list[Output]:
        ts = peer_int(header, "Lamport timestamp", now)
        if ts > self.clock:
            self.clock = ts
        out: list[Output] = []
        if urgent:
            # It may have overtaken earlier messages of its origin: ``known`` stays.
            self._urgent(origin, seq, (ts, origin), payload, out)
            return out
        if ts > self.known.get(origin, 0):
            self.known[origin] = ts
        self._admit(origin, seq, (ts, origin), payload, out)
        # Late or not, ``known[origin]`` may just have grown: drain what it held.
        out.extend(self._drain())
        return out

    def recovered(self, origin: str, seq: int, header: Any, key: OrderKey, late: bool) -> None:
        ts = self.restored_int(key_int(header, "Lamport timestamp"))
        if origin != self.site and ts > self.known.get(origin, 0):
            self.known[origin] = ts
        self.clock = max(self.clock, ts)
        super().recovered(origin, seq, header, (ts, *key[1:]), late)

    def _admit(self, origin: str, seq: int, key: OrderKey, payload: bytes, out: list[Output]) -> None:
        if origin in self.behind or (self.held_from[origin] and key < self.max_held[origin]):
            # The origin's clock went back (it restarted without its state):
            # keep FIFO, let its earlier held messages go first.
            self.behind.setdefault(origin, []).append((key, seq, payload))
        elif self.frontier is not None and key <= self.frontier:
            # At or below the last in-order key: its place has passed. Equal happens too: an origin that
            # restarted without its state can stamp a message with the key its last one had.
            out.append(Deliver(origin, seq, key, True, payload))
        else:
            self._hold(origin, seq, key, payload)

    def _urgent(self, origin: str, seq: int, key: OrderKey, payload: bytes, out: list[Output]) -> None:
        """Deliver an urgent message now: late if its place had passed here (``base.urgent_late``); in place,
        and the frontier moves to it, only if nothing can still come before it; else early."""
        late = urgent_late(key, self.frontier)
        if not late and self._blocked_by(key) is None and not (self.pending and self.pending.peekitem(0)[0] < key):
            self.frontier = key
        out.append(Deliver(origin, seq, key, late, payload))

    def _hold(self, origin: str, seq: int, key: OrderKey, payload: bytes) -> None:
        self.pending[key] = (origin, seq, payload)
        self.held_from[origin] += 1
        if origin not in self.max_held or key > self.max_held[origin]:
            self.max_held[origin] = key

    def control(self, peer: str, body: Any, now: float) -> list[Output]:
        clock = peer_int(body, "announced Lamport clock", now)
        # Adopting the announced clock keeps clocks close, so a site that
        # restarted from zero does not stamp its first messages late. It causes
        # no announcement storm: a site re-announces only when its clock grows.
        if clock > self.clock:
            self.clock = clock
        if clock > self.known.get(peer, 0):
            self.known[peer] = clock
            return self._drain()
        return []

    def set_status(self, peer: str, status: str, now: float) -> list[Output]:
        old = self.status.get(peer)
        super().set_status(peer, status, now)
        if status == DISCONNECTED:
            self.window.settle([peer])      # ``resync`` tells it afresh when a connection opens
        if old == CONNECTED and status != CONNECTED:
            return self._drain()
        return []

    def resync(self, peer: str, now: float) -> list[Output]:
        # Tell the (re)connected peer where we are; it does the same, and until
        # its announcement arrives its stale clock holds delivery here.
        self.window.settle([peer])
        return [SendControl(self.clock, reliable=False, to=(peer,))]

    def flush(self, now: float) -> list[Output]:
        if self.clock > self.announced:
            self.announced = self.clock
            if not self.window:
                return [SendControl(self.clock, reliable=False)]
            self.window.owe([p for p in self.peers if self.status[p] != DISCONNECTED], now)
        return self._tell(self.window.due(now))

    def tick(self, now: float) -> list[Output]:
        return self._tell(self.window.due(now))

    def next_deadline(self) -> float | None:
        return self.window.deadline()

    def riding(self, peers: Collection[str], now: float) -> list[Output]:
        """Something is written to ``peers`` in this batch: what is owed to them rides in the same write."""
        return self._tell(self.window.take(peers))

    def _tell(self, peers: Sequence[str]) -> list[Output]:
        """Announce the clock as it is now (never less than what was owed: it only grows) to ``peers``."""
        return [SendControl(self.clock, reliable=False, to=tuple(peers))] if peers else []

    def pending_count(self) -> int:
        return len(self.pending) + sum(len(v) for v in self.behind.values())

    def snapshot(self) -> Any:
        return {"clock": self.clock, "known": dict(self.known), "announced": self.announced,
                "frontier": list(self.frontier) if self.frontier is not None else None}

    def restore(self, snapshot: Any) -> None:
        if not snapshot:
            return
        # A log written before the honest ceiling may hold a clock at the bound: ``restored_int``.
        self.clock = max(self.clock, self.restored_int(snapshot["clock"]))
        for peer, value in snapshot["known"].items():
            if peer in self.known:
                self.known[peer] = max(self.known[peer], self.restored_int(value))
        self.announced = max(self.announced, self.restored_int(snapshot["announced"]))
        if snapshot["frontier"] is not None:
            ts, *rest = snapshot["frontier"]
            self.frontier = (self.restored_int(ts), *rest)

    def _blocked_by(self, key: OrderKey) -> str | None:
        """A connected peer that may still send something ordered before ``key``."""
        ts, origin = key
        for peer in self.peers:
            if self.status[peer] != CONNECTED:
                continue
            nxt = self.known[peer] + 1
            if nxt < ts or (nxt == ts and peer < origin):
                return peer
        return None

    def _drain(self) -> list[Output]:
        out: list[Output] = []
        pending = self.pending
        while True:
            released: list[tuple[str, OrderKey, int, bytes]] = []
            while pending:
                key = pending.peekitem(0)[0]
                if self._blocked_by(key) is not None:
                    break
                origin, seq, payload = pending.popitem(0)[1]
                self.frontier = key
                out.append(Deliver(origin, seq, key, False, payload))
                self.held_from[origin] -= 1
                if not self.held_from[origin]:
                    del self.held_from[origin]
                    self.max_held.pop(origin, None)
                    released += [(origin, k, sq, pl) for k, sq, pl in self.behind.pop(origin, ())]
            if not released:
                return out
            for origin, key, seq, payload in released:
                self._admit(origin, seq, key, payload, out)
