"""Retention: the delivered messages a site keeps so that it can repair other sites (sans-IO).

Theory of operation
-------------------
Every message a site delivers (its own included) is kept, with its order key
and the time it was delivered, for ``[rcm] retention`` seconds and within
``retention_bytes`` of payload: a peer that was cut off long enough to be
told the message is missing can fetch it here later (``rcm.repair.antientropy``).
Messages leave by age, oldest first, and when the byte cap is reached the
oldest go early; both are counted (``expired``, ``expired_bytes``, and
``evicted`` for the cap) and reported in ``stats``.

A message that expires (``rcm.wire.envelope``) is kept as long as any, but
its payload goes when it expires (``strip``, at the next sweep or when it is
served): from then on it is held, and served, as a stub, so a site repaired
after the expiry learns that the message existed, never its content.

A confined message (``rcm.wire.envelope``: sent to a subset of the sites)
is kept with its confinement mask: repair serves it only to a site in it.

Per origin, the sequence numbers held are kept as a canonical range list
(``rcm.ranges``), so a summary of what this site holds is one frontier and a
few gaps per origin, whatever the number of messages.

Durability: with a write-ahead log, each delivery is already logged (the
server's ``Delivered`` record); a compacted log keeps the retained messages
as ``Kept`` records with their delivery time. After a restart, messages read
back from ``Delivered`` records of the live log count as delivered at the
restart (their time is not in that record), so they stay a little longer
than ``retention``, never shorter.
"""
from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, replace
from typing import Any

from contracts.precedence import DEFAULT
from rcm import ranges
from rcm.durability.records import Kept

ENTRY_OVERHEAD = 64
"""Bytes a retained message costs beyond its payload, counted against ``retention_bytes``."""


@dataclass(frozen=True, slots=True)
class Held:
    """A retained message: its order key as delivered here, when, its payload and precedence."""

    key: tuple[Any, ...]
    at: float
    payload: bytes
    repaired: bool = False      # delivered here by repair (rcm.repair.antientropy)
    precedence: str = DEFAULT   # a repaired FLASH is still a FLASH where it arrives
    expires_at: float | None = None     # the message expires then (rcm.wire.envelope)
    expired: bool = False       # held as a stub: its payload went when it expired
    reach: int | None = None    # confined to these sites (``rcm.wire.envelope``): served to no other


class Retention:
    """Delivered messages per origin, kept by age and size (see the module docstring)."""

    def __init__(self, seconds: float, max_bytes: int) -> None:
        self.seconds = seconds
        self.max_bytes = max_bytes
        self.msgs: dict[str, dict[int, Held]] = {}
        self.held: dict[str, list[list[int]]] = {}      # origin -> canonical ranges of seqs held
        self._age: deque[tuple[float, str, int]] = deque()   # (at, origin, seq) in the order kept
        self.bytes = 0
        self.expired = 0          # left by age
        self.evicted = 0          # left early, for retention_bytes
        self.expired_bytes = 0    # payload bytes of both
        self.stripped = 0         # payloads dropped when their message expired (rcm.wire.envelope)
        self._expiring: list[tuple[float, str, int]] = []     # heap of (expires_at, origin, seq) with a payload

    def __len__(self) -> int:
        return sum(len(m) for m in self.msgs.values())

    def add(self, origin: str, seq: int, key: tuple[Any, ...], payload: bytes, at: float,
            repaired: bool = False, precedence: str = DEFAULT, expires_at: float | None = None,
            expired: bool = False, reach: int | None = None) -> bool:
        """Keep a delivered message (confined to the sites of mask ``reach``); False if it is already kept."""
        per = self.msgs.setdefault(origin, {})
        if seq in per:
            return False
        per[seq] = Held(tuple(key), at, b"" if expired else payload, repaired, precedence, expires_at, expired,
                        reach)
        ranges.insert(self.held.setdefault(origin, []), seq)
        self._age.append((at, origin, seq))
        if expires_at is not None and not expired:
            heapq.heappush(self._expiring, (expires_at, origin, seq))
        self.bytes += len(per[seq].payload) + ENTRY_OVERHEAD
        while self.bytes > self.max_bytes and self._age:
            self._drop_oldest(evicted=True)
        return True

    def get(self, origin: str, seq: int) -> Held | None:
        return self.msgs.get(origin, {}).get(seq)

    def has(self, origin: str, seq: int) -> bool:
        return seq in self.msgs.get(origin, {})

    def expire(self, now: float) -> int:
        """Drop what was delivered ``retention`` seconds before ``now`` or earlier; how many left. The payloads
        of messages whose own expiry passed go too (``strip``): they are served as stubs from then on."""
        n = 0
        while self._age and self._age[0][0] + self.seconds <= now:     # as next_expiry computes it
            self._drop_oldest(evicted=False)
            n += 1
        while self._expiring and self._expiring[0][0] <= now:
            _, origin, seq = heapq.heappop(self._expiring)
            if self.has(origin, seq):
                self.strip(origin, seq)
        if len(self._expiring) > 2 * len(self) + 64:
            # Messages that left by age keep their place in the heap until it is rebuilt: bounded by what is held.
            self._expiring = [e for e in self._expiring if self.has(e[1], e[2]) and not self.msgs[e[1]][e[2]].expired]
            heapq.heapify(self._expiring)
        return n

    def strip(self, origin: str, seq: int) -> Held:
        """The held message ``origin:seq`` as a stub from now on: its payload dropped (it expired)."""
        h = self.msgs[origin][seq]
        if not h.expired:
            self.bytes -= len(h.payload)
            self.stripped += 1
            h = self.msgs[origin][seq] = replace(h, payload=b"", expired=True)
        return h

    def next_expiry(self) -> float | None:
        return self._age[0][0] + self.seconds if self._age else None

    def _drop_oldest(self, evicted: bool) -> None:
        _, origin, seq = self._age.popleft()
        per = self.msgs.get(origin)
        h = per.pop(seq, None) if per is not None else None
        if h is None:
            return
        ranges.discard(self.held[origin], seq)
        self.bytes -= len(h.payload) + ENTRY_OVERHEAD
        self.expired_bytes += len(h.payload)
        if evicted:
            self.evicted += 1
        else:
            self.expired += 1

    def holdings(self) -> dict[str, list[list[int]]]:
        """Per origin, the canonical ranges of sequence numbers held (origins holding none left out)."""
        return {o: [list(r) for r in rs] for o, rs in self.held.items() if rs}

    def records(self) -> list[Kept]:
        """The retained messages as compacted-log records, oldest first."""
        out = []
        for at, origin, seq in self._age:
            h = self.msgs.get(origin, {}).get(seq)
            if h is not None and h.at == at:
                out.append(Kept(origin, seq, list(h.key), at, h.payload, h.precedence, h.expires_at, h.expired,
                                h.reach))
        return out

    def stats(self) -> dict[str, Any]:
        return {"messages": len(self), "bytes": self.bytes, "expired": self.expired,
                "evicted": self.evicted, "expired_bytes": self.expired_bytes, "stripped": self.stripped,
                "oldest_at": self._age[0][0] if self._age else None}
