"""TEST HELPER: an in-process double of the RCM client API (``rcm.client``) for chat server tests.

It mirrors the API the chat server codes against (RcmClient.connect/send/events/
ack/close, Delivery/StatusChange/Missing/Accepted, RcmError/RcmBackpressure/
RcmUnavailable) over a ``FakeNetwork`` of sites in one event loop, so chat
server behaviour (fan-out, awareness, missing and late notices, replay after an
RCM restart) is tested without processes. The real RCM is exercised by
test_chat_integration.py.

Semantics kept from RCM: every site (self included) gets each message it is
addressed to, in one global order (a global counter: order ``[t, origin]``);
a destination that is *suspected* receives the message only when the link
comes back, marked late with its original order; a destination that is
*disconnected* is skipped (``Accepted.skipped``) and learns of the loss by a
``Missing`` event when the link comes back, and may get them later by
``repair`` (late and repaired). Deliveries are numbered per RCM incarnation and
replayed to a client that connects with ``since``.

Expiry (RCM's, issue 36): ``send(..., expires_at=t)`` is refused once ``t`` is
past (by the network's ``clock``, which tests may set); a delivery carries
``expires_at``, and one made at or after it (a held message released late, a
repair, a replay to a client after a restart) is RCM's *stub*: the same
message, order and seq, an empty payload, ``expired=True``. Nothing is dropped.

Latest wins (``publish``/``Latest``): each site holds the newest entry per
(origin, key); a publish reaches the origin and every connected site at once,
and a site that comes back (``set_link`` connected) gets the newest entries
it lacks, once; a client that connects gets every live entry.
"""
from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field, replace

from contracts.precedence import rank
from rcm.client import Accepted, Delivery, Latest, Missing, RcmBackpressure, RcmError, RcmUnavailable, StatusChange  # noqa: F401

_END = object()


def stub_if_expired(d: Delivery, now: float) -> Delivery:
    """``d`` as RCM writes it at ``now``: its stub (no payload, ``expired``) once past its ``expires_at``."""
    if d.expires_at is None or now < d.expires_at or d.expired:
        return d
    return replace(d, payload=b"", expired=True)


@dataclass
class _Site:
    name: str
    incarnation: int = 1
    up: bool = True
    n: int = 0
    seq: int = 0
    log: list[Delivery] = field(default_factory=list)          # retained deliveries (for since= replay)
    acked: int = 0
    clients: list[FakeRcmClient] = field(default_factory=list)
    held: list[tuple[str, Delivery]] = field(default_factory=list)   # (origin, delivery) waiting for a link
    lost: dict[str, list[int]] = field(default_factory=dict)        # origin -> seqs never sent here
    latest: dict[tuple[str, bytes], Latest] = field(default_factory=dict)   # (origin, key) -> newest entry


class FakeNetwork:
    """Sites joined by links whose status tests set."""

    def __init__(self, sites: Iterable[str]) -> None:
        self.sites = {s: _Site(s) for s in sites}
        self.status: dict[tuple[str, str], str] = {}
        self.via: dict[tuple[str, str], str | None] = {}
        for a in self.sites:
            for b in self.sites:
                if a != b:
                    self.status[(a, b)] = "connected"
        self._clock = itertools.count(1)
        self.backpressure: set[str] = set()
        self.gate: asyncio.Event | None = None     # when set and clear, send() waits for it
        self.sent_payloads: list[tuple[str, bytes, tuple[str, ...] | None]] = []
        # (site, payload, dests, within) of every send: how far RCM would let each travel (its confinement)
        self.withins: list[tuple[str, bytes, tuple[str, ...] | None, bool | tuple[str, ...]]] = []
        self.refusals: dict[tuple[str, str], str] = {}   # (site, peer) -> the peer's last_refusal in stats
        self.versions = itertools.count(1)
        self.published: list[tuple[str, bytes, bytes]] = []     # (origin, key, payload) of every publish
        self.clock: Callable[[], float] = time.time               # RCM's ``now`` for expiry

    # --- topology ------------------------------------------------------------------------------
    def set_link(self, a: str, b: str, status: str, via: str | None = None) -> None:
        """Both ends of the a-b link see each other as ``status`` (``via``: reached through that relay)."""
        for x, y in ((a, b), (b, a)):
            if self.status[(x, y)] == status and self.via.get((x, y)) == via:
                continue
            self.status[(x, y)] = status
            self.via[(x, y)] = via
            self._emit(x, StatusChange(y, status, via))
        if status == "connected":
            for x, y in ((a, b), (b, a)):
                self._release(x, y)
                for e in list(self.sites[y].latest.values()):
                    self._take_latest(x, e)

    def _release(self, site: str, peer: str) -> None:
        s = self.sites[site]
        lost = s.lost.pop(peer, None)
        if lost:
            self._emit(site, Missing.from_seqs(peer, lost))
        keep = []
        for origin, d in s.held:
            if origin == peer:
                self._deliver(site, d, late=True)
            else:
                keep.append((origin, d))
        s.held = keep

    # --- messages --------------------------------------------------------------------------------
    def send(self, origin: str, payload: bytes, dests: Iterable[str] | None, precedence: str = "routine",
             expires_at: float | None = None) -> Accepted:
        o = self.sites[origin]
        if origin in self.backpressure:
            raise RcmBackpressure("buffers full")
        if expires_at is not None and not expires_at > self.clock():
            raise RcmError(f"expires_at {expires_at} is past")
        targets = set(self.sites) if dests is None else set(dests) | {origin}
        o.seq += 1
        t = next(self._clock)
        d = Delivery(0, origin, o.seq, f"{origin}:{o.seq}", [t, origin], False, payload, precedence,
                      expires_at=expires_at)
        self.sent_payloads.append((origin, payload, None if dests is None else tuple(sorted(dests))))
        skipped = []
        for site in sorted(targets):
            if site == origin or self.status[(origin, site)] == "connected":
                self._deliver(site, d, late=False)
            elif self.status[(origin, site)] == "suspected":
                self.sites[site].held.append((origin, d))
            else:
                skipped.append(site)
                self.sites[site].lost.setdefault(origin, []).append(o.seq)
        return Accepted(d.msg_id, d.seq, list(d.order), tuple(skipped))

    def publish(self, origin: str, key: bytes, payload: bytes, expires_at: float) -> None:
        """RCM's latest-wins class: the origin and every connected site take the entry now."""
        self.published.append((origin, key, payload))
        e = Latest(origin, bytes(key), next(self.versions), expires_at, bytes(payload), 0)
        for site in self.sites:
            if site == origin or self.status[(origin, site)] == "connected":
                self._take_latest(site, e)

    def _take_latest(self, site: str, e: Latest) -> None:
        s = self.sites[site]
        held = s.latest.get((e.origin, e.key))
        if held is None or held.version < e.version:
            s.latest[(e.origin, e.key)] = e
            self._emit(site, e)

    def inject(self, site: str, origin: str, payload: bytes, order: list, seq: int | None = None,
               late: bool = False) -> Delivery:
        """Deliver at ``site`` a message as ``origin`` with any order key (a hostile or broken peer, or a
        late one)."""
        o = self.sites[origin]
        if seq is None:
            o.seq += 1
            seq = o.seq
        d = Delivery(0, origin, seq, f"{origin}:{seq}", order, late, payload)
        self._deliver(site, d, late=late)
        return d

    def inject_stub(self, site: str, origin: str, seq: int, order: list, *, expires_at: float, late: bool = True,
                    repaired: bool = False) -> Delivery:
        """Deliver at ``site`` RCM's stub of a message of ``origin`` that expired before it got there."""
        d = Delivery(0, origin, seq, f"{origin}:{seq}", order, late, b"", expires_at=expires_at, expired=True)
        self._deliver(site, d, late=late, repaired=repaired)
        return d

    def repair(self, site: str, origin: str, seqs: Iterable[int]) -> None:
        """RCM's repair: ``site`` gets messages of ``origin`` it was reported missing, from ``origin``'s log,
        late and repaired at their original order."""
        wanted = set(seqs)
        for d in list(self.sites[origin].log):
            if d.origin == origin and d.seq in wanted:
                wanted.discard(d.seq)
                self._deliver(site, d, late=True, repaired=True)

    def _deliver(self, site: str, d: Delivery, late: bool, repaired: bool = False) -> None:
        s = self.sites[site]
        s.n += 1
        dd = stub_if_expired(replace(d, n=s.n, order=list(d.order), late=late, repaired=repaired), self.clock())
        s.log.append(dd)
        self._emit(site, dd)

    def _emit(self, site: str, ev: object) -> None:
        for c in list(self.sites[site].clients):
            c._queue.put_nowait(ev)

    # --- process events ---------------------------------------------------------------------------
    def drop_clients(self, site: str, wills: bool = False) -> None:
        """The RCM connection of every client at ``site`` breaks (RcmUnavailable); ``wills``: the server
        dropped them while it runs (too slow), so their wills go, else it stopped."""
        s = self.sites[site]
        dropped, s.clients = list(s.clients), []
        for c in dropped:
            c._queue.put_nowait(_END)
            if wills:
                c.gone()

    def restart(self, site: str, replay_all: bool = True) -> None:
        """The RCM server of ``site`` restarts: new incarnation; unacked deliveries renumbered for replay."""
        self.drop_clients(site)
        s = self.sites[site]
        s.incarnation += 1
        keep = s.log if replay_all else [d for d in s.log if d.n > s.acked]
        s.log = [replace(d, n=i + 1) for i, d in enumerate(keep)]     # (the extras kept: precedence, expiry)
        s.n = len(s.log)
        s.acked = 0

    def connector(self, site: str):
        """The ``rcm_connect`` callable a ChatServer of ``site`` uses."""
        async def connect(since):
            return await FakeRcmClient.connect(self, site, since)
        return connect


class FakeRcmClient:
    """Mirrors rcm.client.RcmClient."""

    def __init__(self, net: FakeNetwork, site: str) -> None:
        self.net = net
        self.site = site
        self.sites = list(net.sites)
        self.incarnation = net.sites[site].incarnation
        self.statuses = {p: net.status[(site, p)] for p in net.sites if p != site}
        self.via = {p: net.via.get((site, p)) for p in net.sites if p != site}
        self._queue: asyncio.Queue[object] = asyncio.Queue()
        self.closed = False
        self.acks: list[int] = []
        self._refs = itertools.count(1)
        self._asked: set[int] = set()       # sends not answered yet (held by the network's gate)
        self._will: tuple[bytes, list[str] | None] | None = None

    @classmethod
    async def connect(cls, net: FakeNetwork, site: str, since: tuple[int, int] | None) -> FakeRcmClient:
        s = net.sites[site]
        if not s.up:
            raise ConnectionRefusedError(f"no RCM server at {site}")
        c = cls(net, site)
        start = since[1] if since is not None and since[0] == s.incarnation else 0
        for d in s.log:
            if d.n > start:
                c._queue.put_nowait(stub_if_expired(d, net.clock()))   # a replay past expiry: the stub
        for p, st in c.statuses.items():
            c._queue.put_nowait(StatusChange(p, st))
        for e in s.latest.values():
            c._queue.put_nowait(e)
        s.clients.append(c)
        return c

    async def send(self, payload: bytes, dests: Iterable[str] | None = None, *,
                   precedence: str = "routine", expires_at: float | None = None,
                   within: bool | tuple[str, ...] = True) -> Accepted:
        if self.closed or self not in self.net.sites[self.site].clients:
            raise RcmUnavailable("connection to the RCM server is gone")
        ref = next(self._refs)
        self._asked.add(ref)
        try:
            await asyncio.sleep(0)
            if self.net.gate is not None:
                await self.net.gate.wait()
        finally:
            self._asked.discard(ref)
        rank(precedence)          # as RcmClient.send: a ValueError for anything but the four levels
        self.net.withins.append((self.site, bytes(payload), tuple(dests) if dests is not None else None, within))
        return self.net.send(self.site, payload, dests, precedence, expires_at)

    async def publish(self, key: bytes, payload: bytes, *, expires_at: float) -> None:
        if self.closed or self not in self.net.sites[self.site].clients:
            raise RcmUnavailable("connection to the RCM server is gone")
        self.net.publish(self.site, key, payload, expires_at)

    async def will(self, payload: bytes | None, dests: Iterable[str] | None = None) -> bool:
        """As RCM's: sent as this site's message when this client is gone (``close``, or the network's
        ``drop_clients``), not when its server stops (``restart``)."""
        self._will = (bytes(payload), list(dests) if dests is not None else None) if payload is not None else None
        return True

    def gone(self) -> None:
        """The connection ended while the server runs: the will goes, as RCM sends it."""
        will, self._will = self._will, None
        if will is not None and self.net.sites[self.site].up:
            self.net.send(self.site, will[0], will[1])

    def oldest_request(self) -> int | None:
        return min(self._asked) if self._asked else None

    def backlog(self) -> int:
        return sum(1 for ev in self._queue._queue if ev is not _END)     # type: ignore[attr-defined]

    async def events(self) -> AsyncIterator[object]:
        while True:
            ev = await self._queue.get()
            if ev is _END:
                raise RcmUnavailable("connection to the RCM server is gone")
            if isinstance(ev, StatusChange):
                self.statuses[ev.site] = ev.status
                self.via[ev.site] = ev.via
            yield ev

    async def ack(self, n: int) -> None:
        if self.closed:
            raise RcmUnavailable("closed")
        self.acks.append(n)
        s = self.net.sites[self.site]
        s.acked = max(s.acked, n)

    async def stats(self) -> dict:
        """The part of RCM's stats the chat server reads: each peer's status and last refusal."""
        return {"site": self.site, "peers": {
            p: {"status": self.net.status[(self.site, p)], "last_refusal": self.net.refusals.get((self.site, p), "")}
            for p in self.net.sites if p != self.site}}

    async def close(self) -> None:
        self.closed = True
        s = self.net.sites[self.site]
        if self in s.clients:
            s.clients.remove(self)
            self.gone()
