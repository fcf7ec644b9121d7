"""An in-memory mesh that drives ordering protocols directly (no stack, no sockets).

Each directed link is a FIFO queue of data messages and control bodies; a test
moves them one at a time (or all, in a seeded random interleaving that keeps
per-link FIFO), sets logical statuses by hand, and advances a virtual clock.
"""
from __future__ import annotations

import random
from collections import deque
from typing import Any

import msgpack
import pytest

from ordering import CONNECTED, DISCONNECTED, Deliver, SendControl, make_protocol


class Mesh:
    def __init__(self, protocol: str, sites: list[str], now: float = 0.0, **options: Any) -> None:
        self.sites = sites
        self.now = now
        self.protos = {s: make_protocol(protocol, s, sites, now, **options) for s in sites}
        self.links: dict[tuple[str, str], deque] = {(a, b): deque() for a in sites for b in sites
                                                    if a != b}
        self.blocked: set[tuple[str, str]] = set()
        self.delivered: dict[str, list[Deliver]] = {s: [] for s in sites}
        self.controls: list[tuple[str, str, Any, bool]] = []   # (src, dst, body, reliable)
        self.seq = {s: 0 for s in sites}

    # -- set-up ------------------------------------------------------------------
    def status(self, a: str, b: str, status: str) -> None:
        """``a`` now sees ``b`` with ``status``."""
        p = self.protos[a]
        self._out(a, p.set_status(b, status, self.now))
        if status == CONNECTED:
            self._out(a, p.resync(b, self.now))
        self._out(a, p.flush(self.now))

    def connect_all(self) -> None:
        for a in self.sites:
            for b in self.sites:
                if a != b:
                    self.status(a, b, CONNECTED)

    def split(self, *groups: list[str], status: str = "suspected") -> None:
        """Sites in different groups see each other ``status``; links between them hold."""
        where = {s: i for i, g in enumerate(groups) for s in g}
        for a in self.sites:
            for b in self.sites:
                if a != b and where[a] != where[b]:
                    self.blocked.add((a, b))
                    self.status(a, b, status)

    def heal(self) -> None:
        for a, b in sorted(self.blocked):
            self.status(a, b, CONNECTED)
        self.blocked.clear()

    # -- traffic -----------------------------------------------------------------
    def send(self, site: str, payload: bytes = b"x", dests: list[str] | None = None, urgent: bool = False):
        """``urgent``: a FLASH/IMMEDIATE message, which overtakes everything queued on its links."""
        p = self.protos[site]
        self.seq[site] += 1
        seq = self.seq[site]
        live = [d for d in (dests if dests is not None else self.sites)
                if d != site and p.status[d] != DISCONNECTED]
        header, key, out = p.local_send(seq, payload, self.now, dests=tuple(live), urgent=urgent)
        msgpack.packb(header)   # headers must be serialisable
        for d in live:
            item = ("data", site, seq, header, payload, urgent)
            if urgent:
                self.links[(site, d)].appendleft(item)
            else:
                self.links[(site, d)].append(item)
        self._out(site, out)
        self._out(site, p.flush(self.now))
        return seq, header, key

    def _out(self, site: str, outs: list) -> None:
        p = self.protos[site]
        for o in outs:
            if isinstance(o, Deliver):
                self.delivered[site].append(o)
            elif isinstance(o, SendControl):
                msgpack.packb(o.body)
                targets = o.to if o.to is not None else [q for q in p.peers
                                                         if p.status[q] != DISCONNECTED]
                for t in targets:
                    self.controls.append((site, t, o.body, o.reliable))
                    self.links[(site, t)].append(("ctrl", o.body))
            else:
                raise AssertionError(f"unexpected output {o!r}")

    def step(self, a: str, b: str) -> bool:
        q = self.links[(a, b)]
        if not q or (a, b) in self.blocked:
            return False
        item = q.popleft()
        p = self.protos[b]
        if item[0] == "data":
            _, origin, seq, header, payload, urgent = item
            self._out(b, p.receive(origin, seq, header, payload, self.now, urgent=urgent))
        else:
            self._out(b, p.control(a, item[1], self.now))
        self._out(b, p.flush(self.now))
        return True

    def run(self, rng: random.Random | None = None, limit: int = 100_000) -> None:
        """Move everything movable, in a random interleaving (FIFO per link)."""
        rng = rng or random.Random(0)
        for _ in range(limit):
            ready = [k for k, q in self.links.items() if q and k not in self.blocked]
            if not ready:
                return
            self.step(*rng.choice(ready))
        raise AssertionError("messages kept flowing: announcement storm?")

    def advance(self, to: float) -> None:
        """Move the clock to ``to``, firing every protocol deadline on the way."""
        while True:
            due = [(d, s) for s, p in self.protos.items()
                   if (d := p.next_deadline()) is not None and d <= to]
            if not due:
                break
            d, s = min(due)
            self.now = max(self.now, d)
            before = self.protos[s].next_deadline()
            self._out(s, self.protos[s].tick(self.now))
            self._out(s, self.protos[s].flush(self.now))
            assert self.protos[s].next_deadline() != before or before is None or before > self.now, \
                "tick at a deadline must move the deadline"
        self.now = to
        for s, p in self.protos.items():
            self._out(s, p.tick(self.now))
            self._out(s, p.flush(self.now))

    # -- views -------------------------------------------------------------------
    def ids(self, site: str) -> list[str]:
        return [f"{d.origin}:{d.seq}" for d in self.delivered[site]]

    def keys(self, site: str) -> dict[str, tuple]:
        return {f"{d.origin}:{d.seq}": d.key for d in self.delivered[site]}

    def check_site_invariants(self) -> None:
        """Per site: in-order keys increase, late keys below them, FIFO, no duplicates."""
        for s, ds in self.delivered.items():
            frontier = None
            last_seq: dict[str, int] = {}
            seen = set()
            for d in ds:
                mid = (d.origin, d.seq)
                assert mid not in seen, f"{s} delivered {mid} twice"
                seen.add(mid)
                assert d.seq > last_seq.get(d.origin, 0), f"{s}: FIFO broken for {mid}"
                last_seq[d.origin] = d.seq
                if d.late:
                    assert frontier is not None and d.key < frontier, f"{s}: bad late {d}"
                else:
                    assert frontier is None or d.key > frontier, f"{s}: {d.key} after {frontier}"
                    frontier = d.key


@pytest.fixture
def mesh():
    return Mesh
