"""Delivery numbering and the local clients' replay log, sans-IO.

Theory of operation
-------------------
Every delivery a site's stack hands up gets a number ``n`` (1, 2, ...) and
goes into a replay log, so a local client that reconnects with
``since=(log_id, n)`` gets everything after ``n``. The log forgets what every
acknowledging client (by name) has processed, and the oldest entries past
``cap_bytes`` (payloads plus ``ENTRY_OVERHEAD`` per entry) or ``MAX_ENTRIES``.

With durability the numbering survives restarts: each delivery is logged as a
``Delivered`` record (forced) before any client sees it, client acks as
``ClientAck`` records, and a compacted log keeps the ``DeliveryCounter``
before the replay window (which may be empty). ``recover`` reads them back.
A message that expires (``rcm.wire.envelope``) is replayed as a stub once its
expiry passed (``window`` with the edge's ``now``), its payload dropped here too.
The server (``rcm.server``) and the simulator (``faultinject.sim``) share this.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Any

from rcm.actions import Delivery
from rcm.durability.records import ClientAck, Delivered, DeliveryCounter, Record
from rcm.wire.local import delivery_frame, expire_delivery

MAX_ENTRIES = 200_000
ENTRY_OVERHEAD = 160      # bytes an entry costs beyond its payload (counted against the byte cap)


class DeliveryLog:
    """Numbered deliveries, the replay window, and client acknowledgements."""

    def __init__(self, cap_bytes: int) -> None:
        self.cap_bytes = cap_bytes
        self.entries: deque[list[Any]] = deque()    # client frames ["d", n, origin, seq, key, late, payload]
        self.first = 1                  # n of entries[0] (or of the next delivery when empty)
        self.bytes = 0                  # what cap_bytes counts
        self.last_n = 0                 # the last number handed out
        self.acks: dict[str, int] = {}  # client name -> last n it processed

    def __len__(self) -> int:
        return len(self.entries)

    def add(self, d: Delivery) -> tuple[list[Any], Delivered]:
        """Number a delivery: its client frame and its log record."""
        self.last_n += 1
        frame = delivery_frame(self.last_n, d.origin, d.seq, d.key, d.late, d.payload, d.precedence,
                               repaired=d.repaired, expires_at=d.expires_at, expired=d.expired)
        self._append(frame)
        return frame, Delivered(self.last_n, d.origin, d.seq, list(d.key), d.late, frame[6], d.precedence,
                                d.repaired, d.expires_at, d.expired, d.reach)

    def ack(self, name: str, n: int) -> ClientAck:
        """Client ``name`` processed deliveries up to ``n``; the record to log (not forced)."""
        self.acks[name] = max(self.acks.get(name, 0), n)
        return ClientAck(name, n)

    def trim(self) -> None:
        """Forget what every acknowledging client has, and the oldest entries past the caps."""
        upto = min(self.acks.values()) if self.acks else 0
        entries = self.entries
        while entries and (self.first <= upto or self.bytes > self.cap_bytes or len(entries) > MAX_ENTRIES):
            frame = entries.popleft()
            self.bytes -= len(frame[6]) + ENTRY_OVERHEAD
            self.first += 1

    def window(self, start: int, now: float | None = None) -> Iterable[list[Any]]:
        """Entries from number ``start`` on (at or above ``first``); with ``now``, one whose message expired by
        then is replayed as a stub (and kept as one: ``rcm.wire.envelope``)."""
        i = max(0, start - self.first)
        for k in range(i, len(self.entries)):
            frame = self.entries[k]
            if now is not None:
                size = len(frame[6])
                if expire_delivery(frame, now):
                    self.bytes -= size
            yield frame

    def get(self, n: int) -> list[Any] | None:
        i = n - self.first
        return self.entries[i] if 0 <= i < len(self.entries) else None

    def recover(self, log: Iterable[Record]) -> None:
        """Numbering, replay window and client acks from the write-ahead log."""
        for r in log:
            if isinstance(r, DeliveryCounter):
                # Delivery counter at a compaction (the replay window may be empty).
                if r.n > self.last_n:
                    self.last_n = r.n
                    self.first = r.n + 1
            elif isinstance(r, Delivered):
                if self.entries and r.n <= self.last_n:
                    continue
                if not self.entries:
                    self.first = r.n
                self._append(delivery_frame(r.n, r.origin, r.seq, r.key, r.late, r.payload, r.precedence,
                                            repaired=r.repaired, expires_at=r.expires_at, expired=r.expired))
                self.last_n = r.n
            elif isinstance(r, ClientAck):
                self.acks[r.name] = max(self.acks.get(r.name, 0), r.n)
        self.trim()

    def snapshot_records(self) -> list[Record]:
        """The numbering, window and acks as records, for a compacted log."""
        # The numbering must survive even when every delivery was acknowledged
        # and the window is empty, or a restart would number from 1 again.
        out: list[Record] = [DeliveryCounter(self.first - 1 if self.entries else self.last_n)]
        out += [Delivered(f[1], f[2], f[3], f[4], f[5], f[6], _precedence(f), bool(_extras(f).get("repaired")),
                          _extras(f).get("expires_at"), bool(_extras(f).get("expired")))
                for f in self.entries]
        out += [ClientAck(name, n) for name, n in self.acks.items()]
        return out

    def _append(self, frame: list[Any]) -> None:
        self.entries.append(frame)
        self.bytes += len(frame[6]) + ENTRY_OVERHEAD


def _extras(frame: list[Any]) -> dict[str, Any]:
    """A client delivery frame's extras (empty when it has none)."""
    return frame[7] if len(frame) > 7 and isinstance(frame[7], dict) else {}


def _precedence(frame: list[Any]) -> str:
    """The precedence of a client delivery frame (in its extras when not routine)."""
    p: str = _extras(frame).get("precedence", "routine")
    return p
