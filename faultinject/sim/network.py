"""Discrete-event core and a simulated TCP network on a virtual clock.

Theory of operation
-------------------
``EventLoop`` is a heap of ``(time, order, callback)``; ``run_until`` pops in
time order (ties in scheduling order), so a run is a pure function of the seed.

``Network`` models what RCM servers see of TCP over a poor inter-site network:

* a *link* joins each pair of sites and is ``up``, ``down`` or ``blackhole``;
  each link has its own one-way delay distribution (base plus exponential
  jitter, capped);
* a *connection* is two byte streams. A write is cut into segments (sometimes
  split at random points) that arrive after the link delay, in order; arriving
  segments that are due together are coalesced into one ``data_received``.
  So frames are split and coalesced arbitrarily, as TCP does;
* ``down``: every connection over the link breaks at once, in-flight bytes are
  lost and both ends see a reset shortly after; dials fail fast;
* ``blackhole``: silence without a reset. Segments stall; dials hang until
  ``connect_timeout`` and fail. When the blackhole lifts, stalled bytes arrive
  (after a retransmission delay) and the connection carries on, unless an end
  closed it meanwhile;
* ``oneway:S``: a blackhole for the bytes S sends only; the other direction
  flows. Dials hang as over a blackhole (a handshake needs both ways);
* a closed connection delivers what was written before the close, then EOF to
  the other end (``connection_lost``); a crashed site's connections are reset
  (or, over a blackholed link, fail when bytes next reach the dead end).

The network never calls the stacks itself: it calls the ``Host`` callbacks,
which the simulation implements by feeding the site's ``SiteStack``.
"""
from __future__ import annotations

import heapq
import math
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from faultinject.checkers.history import BLACKHOLE, DOWN, UP, pair

from .schedule import ONEWAY

End = tuple[int, str]       # one end of a connection: (connection number, its site)


class SimError(Exception):
    """The simulation itself went wrong (a livelock, an impossible event)."""


class EventLoop:
    """Virtual time: a heap of timed callbacks."""

    def __init__(self) -> None:
        self.now = 0.0
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._order = 0
        self.events = 0

    def at(self, t: float, fn: Callable[[], None]) -> None:
        if t < self.now:
            t = self.now
        self._order += 1
        heapq.heappush(self._heap, (t, self._order, fn))

    def run_until(self, end: float) -> None:
        heap = self._heap
        while heap and heap[0][0] <= end:
            t, _, fn = heapq.heappop(heap)
            self.now = t
            self.events += 1
            fn()
        self.now = end


class Host(Protocol):
    def connection_made(self, site: str, conn: End, peer: str | None) -> None: ...
    def data_received(self, site: str, conn: End, data: bytes) -> None: ...
    def connection_lost(self, site: str, conn: End) -> None: ...
    def dial_failed(self, site: str, peer: str) -> None: ...


@dataclass(slots=True)
class LinkModel:
    """One link's one-way delay: ``base + Exp(jitter)``, at most ``cap`` (seconds)."""

    base: float
    jitter: float
    cap: float

    def sample(self, rng: random.Random) -> float:
        return min(self.base + rng.expovariate(1.0 / self.jitter), self.cap)


@dataclass(slots=True)
class _Stream:
    """One direction of a connection."""

    src: str
    dst: str
    queue: deque[tuple[float, bytes | None]] = field(default_factory=deque)   # None = EOF
    last_ready: float = 0.0
    scheduled: bool = False
    stalled: bool = False


@dataclass(slots=True)
class _Conn:
    number: int
    a: str            # dialer
    b: str            # acceptor
    streams: dict[str, _Stream] = field(default_factory=dict)   # src site -> _Stream
    open_ends: set[str] = field(default_factory=set)   # sites whose end is still open
    crashed: set[str] = field(default_factory=set)     # ends lost with their host
    broken: bool = False

    def end(self, site: str) -> End:
        return (self.number, site)


class Network:
    """Links, connections and dials between simulated sites."""

    def __init__(self, loop: EventLoop, rng: random.Random, sites: list[str],
                 models: dict[tuple[str, str], LinkModel], host: Host,
                 connect_timeout: float = 1.0, split_prob: float = 0.3) -> None:
        self.loop = loop
        self.rng = rng
        self.sites = sites
        self.models = models
        self.host = host
        self.connect_timeout = connect_timeout
        self.split_prob = split_prob
        self.state: dict[tuple[str, str], str] = {pair(a, b): UP for a in sites for b in sites if a < b}
        self.alive: dict[str, bool] = {s: True for s in sites}
        self.conns: dict[int, _Conn] = {}
        self._numbers = 0
        self.bytes_sent: dict[tuple[str, str], int] = {}
        self.segments = 0
        # Called with (site, connection number, bytes) for every write (``traffic.Tally``), or None.
        self.tap: Callable[[str, int, bytes], None] | None = None

    # -- helpers ----------------------------------------------------------------
    def _delay(self, a: str, b: str) -> float:
        return self.models[pair(a, b)].sample(self.rng)

    def link_state(self, a: str, b: str) -> str:
        return self.state[pair(a, b)]

    def _stalls(self, src: str, dst: str) -> bool:
        """Do bytes from ``src`` to ``dst`` stall (a blackhole, or one-way from ``src``)?"""
        state = self.state[pair(src, dst)]
        return state == BLACKHOLE or state == ONEWAY + src

    def _conns_between(self, a: str, b: str) -> list[_Conn]:
        return [c for c in self.conns.values() if {c.a, c.b} == {a, b}]

    # -- faults ------------------------------------------------------------------
    def set_link(self, a: str, b: str, new: str) -> None:
        key = pair(a, b)
        old = self.state[key]
        if old == new:
            return
        self.state[key] = new
        if new == DOWN:
            for c in self._conns_between(a, b):
                self._break(c)
        else:
            for c in self._conns_between(a, b):
                for st in c.streams.values():
                    # A direction that stalled before this change and flows after it resumes.
                    was = old == BLACKHOLE or old == ONEWAY + st.src
                    if was and (st.stalled or st.queue) and not self._stalls(st.src, st.dst):
                        self._resume(st, c)

    def crash(self, site: str) -> None:
        """The site's host is gone: its ends vanish without a goodbye."""
        self.alive[site] = False
        for c in list(self.conns.values()):
            if site not in (c.a, c.b):
                continue
            if site in c.open_ends:
                c.crashed.add(site)
            c.open_ends.discard(site)
            other = c.b if c.a == site else c.a
            st = c.streams[site]
            st.queue.clear()
            if self.link_state(site, other) == UP:
                # The peer's next packet (or keepalive) meets a reset.
                self._reset_end(c, other, self._delay(site, other))
            # Over a down link the connection already broke; over a blackhole the
            # peer learns when its bytes reach the dead host (see _pump).

    def restart(self, site: str) -> None:
        self.alive[site] = True

    # -- connections ---------------------------------------------------------------
    def dial(self, src: str, dst: str) -> None:
        state = self.link_state(src, dst)
        if state == DOWN:
            self.loop.at(self.loop.now + min(self._delay(src, dst) * 2, 0.2),
                         lambda: self._dial_fail(src, dst))
            return
        if state == BLACKHOLE or state.startswith(ONEWAY):
            self.loop.at(self.loop.now + self.connect_timeout, lambda: self._dial_fail(src, dst))
            return
        d1 = self._delay(src, dst)
        self.loop.at(self.loop.now + d1, lambda: self._syn_arrives(src, dst))

    def _dial_fail(self, src: str, dst: str) -> None:
        if self.alive[src]:
            self.host.dial_failed(src, dst)

    def _syn_arrives(self, src: str, dst: str) -> None:
        if self.link_state(src, dst) != UP or not self.alive[src]:
            self._dial_fail_later(src, dst)
            return
        if not self.alive[dst]:
            d = self._delay(src, dst)
            self.loop.at(self.loop.now + d, lambda: self._dial_fail(src, dst))   # RST back
            return
        self._numbers += 1
        c = _Conn(self._numbers, src, dst)
        c.streams = {src: _Stream(src, dst), dst: _Stream(dst, src)}
        c.open_ends = {dst}
        self.conns[c.number] = c
        self.host.connection_made(dst, c.end(dst), None)
        d2 = self._delay(src, dst)
        self.loop.at(self.loop.now + d2, lambda: self._synack_arrives(c))

    def _dial_fail_later(self, src: str, dst: str) -> None:
        self.loop.at(self.loop.now + self.connect_timeout, lambda: self._dial_fail(src, dst))

    def _synack_arrives(self, c: _Conn) -> None:
        if not self.alive[c.a]:
            return
        if c.broken or self.link_state(c.a, c.b) != UP:
            self._dial_fail(c.a, c.b)
            if not c.broken:
                self._reset_end(c, c.b, 0.0)
            return
        c.open_ends.add(c.a)
        self.host.connection_made(c.a, c.end(c.a), c.b)

    def write(self, site: str, conn: End, data: bytes) -> None:
        c = self.conns.get(conn[0])
        if c is None or c.broken or site not in c.open_ends or not data:
            return
        st = c.streams[site]
        other = st.dst
        key = (site, other)
        self.bytes_sent[key] = self.bytes_sent.get(key, 0) + len(data)
        if self.tap is not None:
            self.tap(site, c.number, data)
        pieces = [data]
        if len(data) > 1 and self.rng.random() < self.split_prob:
            cut = self.rng.randrange(1, len(data))
            pieces = [data[:cut], data[cut:]]
        now = self.loop.now
        for piece in pieces:
            ready = max(now + self._delay(site, other), st.last_ready)
            st.last_ready = ready
            st.queue.append((ready, piece))
        self._schedule(st, c)

    def close(self, site: str, conn: End) -> None:
        c = self.conns.get(conn[0])
        if c is None or site not in c.open_ends:
            return
        c.open_ends.discard(site)
        st = c.streams[site]
        if not c.broken:
            ready = max(self.loop.now + self._delay(site, st.dst), st.last_ready)
            st.last_ready = ready
            st.queue.append((ready, None))
            self._schedule(st, c)
        # Bytes still coming towards the closed end are dropped on arrival.
        self._maybe_forget(c)

    def _schedule(self, st: _Stream, c: _Conn) -> None:
        if st.scheduled or st.stalled or not st.queue:
            return
        st.scheduled = True
        self.loop.at(st.queue[0][0], lambda: self._pump(st, c))

    def _pump(self, st: _Stream, c: _Conn) -> None:
        st.scheduled = False
        if c.broken or not st.queue:
            return
        if self._stalls(st.src, st.dst):
            st.stalled = True
            return
        now = self.loop.now
        chunks: list[bytes] = []
        eof = False
        while st.queue and st.queue[0][0] <= now:
            _, piece = st.queue.popleft()
            if piece is None:
                eof = True
                break
            chunks.append(piece)
        dst = st.dst
        if dst not in c.open_ends:
            st.queue.clear()
            if dst in c.crashed and st.src in c.open_ends:
                # The bytes met a host that crashed: the sender gets a reset.
                self._reset_end(c, st.src, self._delay(st.src, dst))
            # Otherwise the receiving end closed: its EOF tells the sender.
            self._maybe_forget(c)
            return
        if chunks:
            self.segments += 1
            self.host.data_received(dst, c.end(dst), b"".join(chunks))
        if eof and dst in c.open_ends and not c.broken:
            c.open_ends.discard(dst)
            self.host.connection_lost(dst, c.end(dst))
            self._maybe_forget(c)
            return
        self._schedule(st, c)

    def _resume(self, st: _Stream, c: _Conn) -> None:
        st.stalled = False
        retransmit = self._delay(st.src, st.dst) + self.rng.uniform(0.0, 0.3)
        base = self.loop.now + retransmit
        st.queue = deque((max(ready, base), piece) for ready, piece in st.queue)
        if st.queue:
            st.last_ready = max(st.last_ready, st.queue[-1][0])
        self._schedule(st, c)

    def _break(self, c: _Conn) -> None:
        """The link failed: in-flight bytes are lost, both ends see a reset."""
        c.broken = True
        for st in c.streams.values():
            st.queue.clear()
        for site in sorted(c.open_ends):     # sorted: a set's order follows PYTHONHASHSEED, the seed must not
            self._reset_end(c, site, self.rng.uniform(0.0, 0.05))

    def _reset_end(self, c: _Conn, site: str, delay: float) -> None:
        def fire() -> None:
            if site in c.open_ends and self.alive[site]:
                c.open_ends.discard(site)
                c.broken = True
                self.host.connection_lost(site, c.end(site))
            self._maybe_forget(c)
        self.loop.at(self.loop.now + delay, fire)

    def _maybe_forget(self, c: _Conn) -> None:
        if not c.open_ends and not any(st.queue for st in c.streams.values()):
            self.conns.pop(c.number, None)


def default_models(rng: random.Random, sites: list[str]) -> dict[tuple[str, str], LinkModel]:
    """Per-link delay distributions: 5-80 ms base, 1-30 ms mean jitter, capped at 0.3 s."""
    models = {}
    for a in sites:
        for b in sites:
            if a < b:
                base = rng.uniform(0.005, 0.08)
                models[(a, b)] = LinkModel(base, rng.uniform(0.001, 0.03), min(0.3, base + 0.2))
    return models


__all__ = ["EventLoop", "Host", "LinkModel", "Network", "SimError", "default_models", "math"]
