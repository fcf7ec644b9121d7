"""A minimal virtual-time network for driving SiteStacks in unit tests.

Links have a fixed one-way delay and can be cut ("down": both ends see the
connection lost), blackholed ("blackhole": nothing flows, no reset; bytes are
held and flow when the link heals, as TCP would retransmit them) or made
"lossy" (bytes vanish without a reset: not TCP semantics, an intermediary
fault the stack must detect). With ``tls=True`` every connection comes with
the identity a verified certificate would give (the peer's site and the
mission), so the stack trusts HELLO frontiers as it does over TLS. The full seeded
simulator lives in faultinject/sim; this harness is small on purpose so a
failing layer test is easy to read.
"""
from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field

from contracts.mission import RcmSettings
from rcm.actions import Close, Delivery, Dial, Latest, Log, Missing, Persist, StatusChange, Transmit
from rcm.stack import SiteStack


@dataclass
class SiteLog:
    delivered: list[Delivery] = field(default_factory=list)
    status: list[tuple[float, str, str]] = field(default_factory=list)
    missing: list[Missing] = field(default_factory=list)
    logs: list[str] = field(default_factory=list)
    latest: list[Latest] = field(default_factory=list)


class Net:
    def __init__(self, sites: list[str], settings: RcmSettings | None = None, delay: float = 0.01,
                 ordering: str | None = None, mission: str = "test", durable: bool = False,
                 tls: bool = False, rates: dict[str, dict[str, int]] | None = None) -> None:
        self.settings = settings or RcmSettings()
        self.rates = rates or {}           # site -> {peer: bits per second} ([sites.A.rate])
        self.now = 0.0
        self.delay = delay
        self.ordering = ordering
        self.mission = mission
        self.durable = durable
        self.tls = tls
        self.persisted: dict[str, list[Persist]] = {s: [] for s in sites}
        self.site_names = list(sites)
        self.queue: list = []
        self._n = itertools.count()
        self.incarnations = {s: 1 for s in sites}
        self.stacks: dict[str, SiteStack] = {}
        self.logs: dict[str, SiteLog] = {s: SiteLog() for s in sites}
        self.link_state: dict[frozenset, str] = {}   # pair -> "up" | "down" | "blackhole"
        self.conn_peer: dict[tuple, tuple] = {}       # (site, id) -> (other site, other id)
        self.alive: dict[str, bool] = {}
        self.held: dict[frozenset, list] = {}
        self.boots: dict[str, int] = {}
        self.written: list[tuple[str, str, bytes]] = []   # (from, to, bytes): every write on a connection
        for s in sites:
            self._boot(s)

    def _boot(self, s: str, records: list | None = None) -> list:
        self.boots[s] = self.boots.get(s, 0) + 1
        st = SiteStack(s, self.site_names, self.settings, self.incarnations[s], self.now,
                       mission=self.mission, ordering=self.ordering, durable=self.durable,
                       boot=self.boots[s], rates=self.rates.get(s), link_rates=self.rates)
        self.stacks[s] = st
        self.alive[s] = True
        restored = st.restore(records, self.now) if records is not None else []
        self._run_actions(s, restored)
        self._run_actions(s, st.start(self.now))
        return restored

    # -- control --------------------------------------------------------------
    def link(self, a: str, b: str) -> str:
        return self.link_state.get(frozenset((a, b)), "up")

    def set_link(self, a: str, b: str, state: str) -> None:
        self.link_state[frozenset((a, b))] = state
        if state == "up":
            for o, oid, data in self.held.pop(frozenset((a, b)), []):
                self._at(self.now + self.delay, self._recv, o, oid, data)
        if state == "down":
            for (s, cid), (o, _oid) in list(self.conn_peer.items()):
                if {s, o} == {a, b}:
                    self._lose(s, cid)

    def crash(self, s: str) -> None:
        self.alive[s] = False
        for (site, cid), (o, oid) in list(self.conn_peer.items()):
            if site == s:
                del self.conn_peer[(site, cid)]
                if self.link(s, o) != "blackhole":
                    self._lose(o, oid)

    def restart(self, s: str, records: list | None = None) -> list:
        """Restart ``s``: a new incarnation, or with ``records`` its durable
        stream resumed from a write-ahead log (same stream identity)."""
        if records is None:
            self.incarnations[s] += 1
        return self._boot(s, records)

    def send(self, s: str, payload: bytes, dests=None, precedence: str = "routine", expires_at: float | None = None,
             within=True):
        result, actions = self.stacks[s].send(payload, dests, self.now, precedence, expires_at, within)
        self._run_actions(s, actions)
        return result

    def publish(self, s: str, key: bytes, payload: bytes, ttl: float = 60.0) -> None:
        """A latest-wins report at ``s`` (``rcm.latest``), expiring ``ttl`` seconds from now."""
        self._run_actions(s, self.stacks[s].publish(key, payload, self.now + ttl, self.now))

    # -- engine ---------------------------------------------------------------
    def _at(self, t: float, fn, *args) -> None:
        heapq.heappush(self.queue, (t, next(self._n), fn, args))

    def _lose(self, s: str, cid) -> None:
        if self.conn_peer.pop((s, cid), None) is not None and self.alive[s]:
            self._run_actions(s, self.stacks[s].connection_lost(cid, self.now))

    def _run_actions(self, s: str, actions) -> None:
        log = self.logs[s]
        for a in actions:
            if isinstance(a, Transmit):
                other = self.conn_peer.get((s, a.conn))
                if other is None:
                    continue
                o, oid = other
                self.written.append((s, o, a.data))
                state = self.link(s, o)
                if state == "up":
                    self._at(self.now + self.delay, self._recv, o, oid, a.data)
                elif state == "blackhole":
                    self.held.setdefault(frozenset((s, o)), []).append((o, oid, a.data))
            elif isinstance(a, Close):
                other = self.conn_peer.pop((s, a.conn), None)
                if other is not None and self.link(s, other[0]) == "up":
                    self._at(self.now + self.delay, self._lose, *other)
            elif isinstance(a, Dial):
                self._at(self.now + self.delay, self._dial, s, a.peer)
            elif isinstance(a, Delivery):
                log.delivered.append(a)
            elif isinstance(a, StatusChange):
                log.status.append((self.now, a.peer, a.status))
            elif isinstance(a, Missing):
                log.missing.append(a)
            elif isinstance(a, Latest):
                log.latest.append(a)
            elif isinstance(a, Log):
                log.logs.append(a.message)
            elif isinstance(a, Persist):
                self.persisted[s].append(a)

    def _recv(self, s: str, cid, data: bytes) -> None:
        if (s, cid) in self.conn_peer and self.alive[s]:
            self._run_actions(s, self.stacks[s].data_received(cid, data, self.now))

    def _dial(self, s: str, peer: str) -> None:
        if not self.alive[s]:
            return
        if self.link(s, peer) == "up" and self.alive[peer]:
            a, b = ("c", next(self._n)), ("c", next(self._n))
            self.conn_peer[(s, a)] = (peer, b)
            self.conn_peer[(peer, b)] = (s, a)
            who = (lambda site: (site, self.mission)) if self.tls else (lambda site: None)
            self._run_actions(peer, self.stacks[peer].connection_made(b, self.now, None, identity=who(s)))
            self._run_actions(s, self.stacks[s].connection_made(a, self.now, peer, identity=who(peer)))
        else:
            self._run_actions(s, self.stacks[s].dial_failed(peer, self.now))

    def run(self, until: float) -> None:
        while True:
            t_timer, site = min(((st.next_deadline() or float("inf"), s)
                                 for s, st in self.stacks.items() if self.alive[s]),
                                default=(float("inf"), None))
            t_event = self.queue[0][0] if self.queue else float("inf")
            t = min(t_timer, t_event)
            if t > until:
                self.now = until
                return
            self.now = max(self.now, t)
            if t_event <= t_timer:
                _, _, fn, args = heapq.heappop(self.queue)
                fn(*args)
            else:
                self._run_actions(site, self.stacks[site].timer(self.now))

    def crossed(self, marker: bytes) -> set[tuple[str, str]]:
        """The links (from, to) on which bytes containing ``marker`` were written."""
        return {(a, b) for a, b, data in self.written if marker in data}

    def status(self, s: str, peer: str) -> str:
        return self.stacks[s].status(peer)
