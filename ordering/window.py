"""Holding clock announcements back on slow links (``[rcm] announce_delay``).

Theory of operation
-------------------
The clock protocols (Lamport, hybrid) announce their clock to every peer
whenever it grew, at the end of every input batch: a message to n sites makes
about (n-1)^2 announcements, each a write of its own. On a slow link (HF
radio, 2,400 bit/s) every write is also a TLS record and a packet, and the
announcements cost more than the data. An ``AnnounceWindow`` remembers, per
peer, since when an announcement is *owed* to it instead of sending it, for at
most ``delay`` seconds; the protocol announces its clock *as it is then*, so
one announcement stands for every rise in the window. It is settled without
being sent when something else told the peer as much (a non-urgent data
message of ours: its header is the clock at the send, at least any clock
owed), taken early when the stack writes to that peer anyway (``take``:
``OrderingProtocol.riding``), and forgotten for a peer that disconnects (the
protocol's ``resync`` tells it afresh when a connection opens).

Announcements only raise lower bounds at their receiver (what a peer can
still send), so holding one back makes a bound lag, never lie: delivery may
wait up to ``delay`` longer, the order and the late marks cannot change, and
nothing is lost (the argument in full: docs/ordering.md, "Announcements on
slow links"). ``delay`` 0 holds nothing: the protocols announce as before.
The window owns only this bookkeeping; what an announcement says is the
protocol's.
"""
from __future__ import annotations

from collections.abc import Iterable


class AnnounceWindow:
    """Per peer, since when a clock announcement is owed to it (at most ``delay`` seconds)."""

    def __init__(self, delay: float = 0.0) -> None:
        if not delay >= 0.0:
            raise ValueError(f"announce_delay = {delay!r} must be 0 or more seconds")
        self.delay = float(delay)
        self.owed: dict[str, float] = {}

    def __bool__(self) -> bool:
        """Does this window hold announcements at all (``delay`` > 0)?"""
        return self.delay > 0.0

    def owe(self, peers: Iterable[str], now: float) -> None:
        """The clock grew: ``peers`` are owed it; the window runs from the first rise not yet told."""
        for p in peers:
            self.owed.setdefault(p, now)

    def settle(self, peers: Iterable[str]) -> None:
        """``peers`` were told the clock some other way (data, a fresh connection's resync) or are gone."""
        for p in peers:
            self.owed.pop(p, None)

    def due(self, now: float) -> list[str]:
        """The peers whose window has ended by ``now``: no longer owed, to be told now."""
        if not self.owed:
            return []       # the common case, on every batch (and always with the window off)
        return self.take([p for p, t in self.owed.items() if t + self.delay <= now])

    def take(self, peers: Iterable[str]) -> list[str]:
        """Those of ``peers`` that are owed an announcement (no longer owed: to be told now)."""
        if not self.owed:
            return []
        return [p for p in peers if self.owed.pop(p, None) is not None]

    def deadline(self) -> float | None:
        """When the earliest window ends, or None."""
        return min(self.owed.values()) + self.delay if self.owed else None
