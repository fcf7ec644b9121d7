"""Intermittent global order on hybrid logical clocks, with a bounded wait.

Theory of operation
-------------------
Each site keeps a hybrid logical clock (after Kulkarni et al., 2014): a pair
``(l, c)`` where ``l`` is the largest physical time seen, in integer
milliseconds, and ``c`` counts events within the same ``l``. A local send sets
``l = max(l, pt)`` (``pt``: this site's physical clock, the ``now`` it is given)
and bumps ``c`` when ``l`` did not move; a receipt (data or announcement)
adopts the sender's pair if it is larger (see ``_merge`` for why not the
textbook receive rule). The order key of a message is ``(l, c, origin)``: it follows causality
like a Lamport timestamp and stays within the clock skew of real time, so a
message that is delivered late after a partition is placed among the messages
sent at about the same real time, not in the distant past as a Lamport clock
left behind during the partition would place it.

A held-back message with the smallest key ``k`` is delivered when either

* every *connected* peer is known past ``k`` (from its data headers and from
  its clock announcements, coalesced in ``flush`` like the Lamport protocol's:
  a site announces its pair whenever it grew, and adopts a larger announced
  pair as is, so a message makes every site announce once): about two one-way
  delays; or
* the bounded wait ran out: the local clock reached ``min(l, arrival) +
  max_wait``. The protocol does not wait to hear from every site; a message
  delayed by more than ``max_wait`` minus the clock skew arrives after its
  place and is delivered late, with that place.

Suspected and disconnected peers are never waited for. So no site, slow link or
silent-but-connected peer holds delivery for more than ``max_wait``; in a stable
component whose links deliver within ``max_wait - skew`` the order is the same
everywhere and nothing is late.

On slow links announcements can be held back up to ``announce_delay``
(``ordering.window``, as for Lamport): a pair announced later is still a
lower bound, so it only makes a message wait longer, and never past its
bounded wait.

Wire cost: header ``[l, c]`` (about 11 bytes); announcements ``[dl, c, 1]``
(4-6 bytes), ``l`` relative to the previous announcement to the same peer, as
a lower bound that stays safe if one is lost (see ``_announce``).

Received ``l`` and ``c`` above ``KEY_INT_MAX`` (2^53; ``l`` is milliseconds,
so about 285,000 years) are refused with ``ValueError`` before any state
changes, so a peer cannot push the pair past the bound; a send whose pair
would pass it raises ``ClockExhausted``.
"""
from __future__ import annotations

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
    PeerInputError,
    SendControl,
    key_int,
    peer_int,
    urgent_late,
)
from .window import AnnounceWindow


def _ms(now: float) -> int:
    """Physical time in whole milliseconds, within ``[0, KEY_INT_MAX]`` (keys are bounded ints)."""
    return min(KEY_INT_MAX, max(0, int(now * 1000.0)))


class HybridIGO(OrderingProtocol):
    """IGO on hybrid logical clocks; order key ``(l_ms, c, origin)``."""

    name = "hybrid"

    def __init__(self, site: str, peers: Iterable[str], now: float = 0.0,
                 max_wait: float = 1.0, announce_delay: float = 0.0) -> None:
        super().__init__(site, peers, now)
        self.window = AnnounceWindow(announce_delay)     # announcements held back (``ordering.window``)
        if not max_wait > 0:
            raise ValueError("max_wait must be positive")
        self.max_wait = float(max_wait)
        self.l = _ms(now)
        self.c = 0
        self.known: dict[str, tuple[int, int]] = {p: (0, 0) for p in self.peers}
        self.pending: SortedDict = SortedDict()   # key -> (seq, payload, deadline)
        self.frontier: OrderKey | None = None
        self.announced: tuple[int, int] = (self.l, self.c)
        self.told: dict[str, tuple[int, int]] = {}    # peer -> last pair announced to it
        self.heard: dict[str, tuple[int, int]] = {}   # peer -> last pair it announced to me

    # -- clock ----------------------------------------------------------------
    def _tick_send(self, now: float) -> tuple[int, int]:
        pt = _ms(now)
        if pt > self.l:
            self.l, self.c = pt, 0
        elif self.c < KEY_INT_MAX:
            self.c += 1
        elif self.l < KEY_INT_MAX:
            self.l, self.c = self.l + 1, 0   # still above every earlier pair
        else:
            raise ClockExhausted(f"the hybrid clock of {self.site} is at its bound (2^53, 2^53): "
                                 "no later pair exists (a site announced a clock no honest run reaches)")
        return self.l, self.c

    def _merge(self, lm: int, cm: int) -> None:
        """Adopt a larger pair as is: no physical time, no increment.

        Causality still holds, because a send moves the pair strictly up
        (``_tick_send``); and every site that saw a message ends with the same
        pair, so one message makes each site announce once, not once per
        distinct physical time (the textbook HLC receive rule, which takes
        ``max(l, lm, pt)`` and bumps ``c``, would set off a cascade of
        announcements here).
        """
        if (lm, cm) > (self.l, self.c):
            self.l, self.c = lm, cm

    # -- events ---------------------------------------------------------------
    def local_send(self, seq: int, payload: bytes, now: float, dests: Sequence[str] = (),
                   urgent: bool = False) -> tuple[Any, OrderKey, list[Output]]:
        l, c = self._tick_send(now)
        key = (l, c, self.site)
        if urgent:
            urgent_out = [self._urgent(seq, key, payload)]
        else:
            urgent_out = []
            self.pending[key] = (seq, payload, self._deadline(l, now))
        if not urgent:      # the data message tells its destinations (an urgent one teaches nothing)
            self.announced = (l, c)
        out: list[Output] = []
        # Peers that do not get the message learn the clock, or they would
        # hold it up here until the bounded wait runs out. ``dests`` are the
        # live destinations: empty means no peer gets the data.
        others = [p for p in self.peers if p not in dests and self.status[p] == CONNECTED]
        if self.window:
            self.window.owe(others, now)
        else:
            out.extend(self._announce(others, absolute=False))
        if not urgent:
            self.window.settle(dests)       # the data's pair is at least any pair owed to them
        out.extend(urgent_out)
        out.extend(self._drain(now))
        return [l, c], key, out

    def receive(self, origin: str, seq: int, header: Any, payload: bytes,
                now: float, urgent: bool = False) -> list[Output]:
        lm, cm = self._pair(header, now)
        self._merge(lm, cm)
        key = (lm, cm, origin)
        if urgent:
            # It may have overtaken earlier messages of its origin: ``known`` stays.
            return [self._urgent(seq, key, payload)]
        self._know(origin, lm, cm)
        if self.frontier is not None and key < self.frontier:
            # Late; but ``known[origin]`` may just have grown: drain what it held.
            return [Deliver(origin, seq, key, True, payload), *self._drain(now)]
        self.pending[key] = (seq, payload, self._deadline(lm, now))
        return self._drain(now)

    def recovered(self, origin: str, seq: int, header: Any, key: OrderKey, late: bool) -> None:
        lm, cm = self._pair(header)
        if origin != self.site:
            self._know(origin, lm, cm)
        self._merge(lm, cm)
        super().recovered(origin, seq, header, key, late)

    def control(self, peer: str, body: Any, now: float) -> list[Output]:
        if isinstance(body, (list, tuple)) and len(body) == 3:
            # [dl, c, 1]: l is dl above the last pair this peer announced to me.
            dl, cm, tag = body
            if type(dl) is not int or type(cm) is not int or dl < 0 or cm < 0 or tag != 1:
                raise PeerInputError("hybrid announcement must be [dl, c, 1] with non-negative ints")
            peer_int(cm, "announced hybrid c", now)
            base = self.heard.get(peer)
            if base is None:
                return []       # no absolute pair on this chain yet: nothing safe to learn
            lm = peer_int(base[0] + dl, "announced hybrid l (previous l + dl)", now)
        else:
            lm, cm = self._pair(body, now)
        self.heard[peer] = (lm, cm)
        self._know(peer, lm, cm)
        self._merge(lm, cm)
        return self._drain(now)

    def set_status(self, peer: str, status: str, now: float) -> list[Output]:
        old = self.status.get(peer)
        super().set_status(peer, status, now)
        if status == DISCONNECTED:
            self.window.settle([peer])      # ``resync`` tells it afresh when a connection opens
        if old == CONNECTED and status != CONNECTED:
            return self._drain(now)
        return []

    def resync(self, peer: str, now: float) -> list[Output]:
        # A new connection: earlier announcements may be lost; restart the
        # peer's delta chain from an absolute pair.
        self.told.pop(peer, None)
        self.window.settle([peer])
        return self._announce([peer], absolute=True)

    def tick(self, now: float) -> list[Output]:
        return [*self._drain(now), *self._announce(self.window.due(now), absolute=False)]

    def next_deadline(self) -> float | None:
        ds = [d for d in (self.pending.peekitem(0)[1][2] if self.pending else None, self.window.deadline())
              if d is not None]
        return min(ds) if ds else None

    def flush(self, now: float) -> list[Output]:
        if (self.l, self.c) > self.announced:
            peers = [p for p in self.peers if self.status[p] != DISCONNECTED]
            if not self.window:
                return self._announce(peers, absolute=False)
            self.announced = (self.l, self.c)
            self.window.owe(peers, now)
        return self._announce(self.window.due(now), absolute=False)

    def riding(self, peers: Collection[str], now: float) -> list[Output]:
        """Something is written to ``peers`` in this batch: what is owed to them rides in the same write."""
        return self._announce(self.window.take(peers), absolute=False)

    def pending_count(self) -> int:
        return len(self.pending)

    # -- durability -------------------------------------------------------------
    def snapshot(self) -> Any:
        """The clock and frontier a restarted site needs to stay above its past keys."""
        return {"l": self.l, "c": self.c,
                "frontier": list(self.frontier) if self.frontier is not None else None}

    def restore(self, snapshot: Any) -> None:
        if not snapshot:
            return
        # A log written before the honest ceiling may hold a pair at the bound: ``restored_int``.
        self._merge(self.restored_int(snapshot["l"]), self.restored_int(snapshot["c"]))
        if snapshot["frontier"] is not None:
            lm, cm, *rest = snapshot["frontier"]
            self.frontier = (self.restored_int(lm), self.restored_int(cm), *rest)

    # -- internals --------------------------------------------------------------
    @staticmethod
    def _pair(value: Any, now: float | None = None) -> tuple[int, int]:
        """A pair from the wire (``now``: from a peer, so within the honest ceiling) or from our own log."""
        if not isinstance(value, (list, tuple)) or len(value) != 2:
            raise PeerInputError("hybrid clock must be [l, c]")
        lm, cm = value
        if now is None:
            return key_int(lm, "hybrid l"), key_int(cm, "hybrid c")
        return peer_int(lm, "hybrid l", now), peer_int(cm, "hybrid c", now)

    def _know(self, peer: str, lm: int, cm: int) -> None:
        if (lm, cm) > self.known.get(peer, (0, 0)):
            self.known[peer] = (lm, cm)

    def _announce(self, peers: Sequence[str], absolute: bool) -> list[Output]:
        """Tell ``peers`` the current pair: every later key of this site is above it.

        To a peer already told an absolute pair on this connection the body is
        ``[dl, c, 1]``, ``l`` relative to the last pair told (4-6 bytes instead
        of 11). If an announcement is lost, the peer adds later deltas to an
        older base and learns a lower pair than the true one: a safe lower
        bound. ``resync`` restarts the chain with an absolute pair.
        """
        if not peers:
            return []
        pair = (self.l, self.c)
        self.announced = pair
        same: dict[tuple[int, ...], list[str]] = {}     # peers told the same body: one output for them all
        for p in peers:
            base = self.told.get(p)
            if absolute or base is None:
                body: tuple[int, ...] = (pair[0], pair[1])
            else:
                body = (pair[0] - base[0], pair[1], 1)
            self.told[p] = pair
            same.setdefault(body, []).append(p)
        # (the stack writes one copy of an output per next hop on relay paths: rcm.routing.relay)
        return [SendControl(list(body), reliable=False, to=tuple(to)) for body, to in same.items()]

    def _urgent(self, seq: int, key: OrderKey, payload: bytes) -> Deliver:
        """An urgent message, delivered now: late only if its place had passed here (``base.urgent_late``); in
        place (the frontier moves) if nothing can still come before it, else early."""
        late = urgent_late(key, self.frontier)
        if not late and not self._blocked(key) and not (self.pending and self.pending.peekitem(0)[0] < key):
            self.frontier = key
        return Deliver(key[2], seq, key, late, payload)

    def _deadline(self, l_ms: int, now: float) -> float:
        """When the bounded wait for a message stamped ``l_ms`` arriving ``now`` ends."""
        return min(l_ms / 1000.0, now) + self.max_wait

    def _blocked(self, key: OrderKey) -> bool:
        """Can a connected peer still send a key below ``key``?

        A peer known at ``(l, c)`` sends next at ``(l, c + 1)`` or above, so
        its smallest possible next key is ``(l, c + 1, peer)``.
        """
        for peer in self.peers:
            if self.status[peer] == CONNECTED:
                kl, kc = self.known[peer]
                if (kl, kc + 1, peer) < key:
                    return True
        return False

    def _drain(self, now: float) -> list[Output]:
        out: list[Output] = []
        pending = self.pending
        while pending:
            key, (seq, payload, deadline) = pending.peekitem(0)
            if now < deadline and self._blocked(key):
                break
            del pending[key]
            self.frontier = key
            out.append(Deliver(key[2], seq, key, False, payload))
        return out
