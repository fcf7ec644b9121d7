"""Link-state among sites, and the routes every site derives from it (pure).

Theory of operation
-------------------
Each site advertises which of its direct links are connected: a LINKS frame

    [LINKS, origin, boot, n, [neighbour, ...]]      (sites as indexes into the sorted site list)

versioned by ``(boot, n)``: ``boot`` counts the origin's process starts and
``n`` its advertisements since, so a newer one always wins, across restarts
too. A site sends its own when the set changes (and every ``REFRESH`` as a
slow refresh), and floods every advertisement it has not seen on its other
connections; a new connection gets the whole database at once. TCP carries
them, so nothing is lost on a connection, and the database exchange repairs
whatever a broken one lost.

A link X-Y is *up* when both X and Y list each other (a one-way fade leaves
one end deaf, and it withdraws the link). A site's own links come from its
own connection manager instead (``usable``). ``routes`` runs a breadth-first
search from the site over the up links, at most ``max_hops`` links deep, with
neighbours taken in name order: the route to a destination is a fewest-hops
path, and of several, the one through the smallest names. Every site with the
same database breaks ties the same way, so routes are stable. A route also
names its *slowest* paced link beyond the first hop (``[sites.X.rate]`` of the
mission, which every site reads): the origin of a relayed channel paces it to
that rate, so its backlog waits in its own lanes, not at the relay.

Versions from the network are bounded, and forged ones cannot stay. A version
beyond what any honest run can have reached (``ordering.honest_ceiling``)
is a protocol violation (the link it came on closes). Only the origin itself
raises its own version: an advert claiming to be ours with a version we never
said is refused and counted (``forged_own``), never adopted (one of
(2^64-1, 2^64-1) once made a site overflow every advert it encoded). Other
sites cannot tell a forged advert of a third site from a real one, so what a
forger's advert can do is bounded in time instead: every advert is kept only
``ttl`` (four refreshes) after it was last taken, and its origin refreshes it
every ``REFRESH``; a forged version above the origin's real one ages out once
the forger stops renewing it, and the origin's next refresh is taken again.
A site's own state file holds its boot count, so a restart never needs to go
past an older advert of its own; one whose state was lost waits out ``ttl``.

Flooding is paced per origin: an origin's adverts are flooded on at most once
per ``pace`` (half a heartbeat); a newer one within it is kept and flooded
when the interval ends (``due``), so a site that issues adverts as fast as it
can costs each link at most two adverts a heartbeat, whatever it sends.

Stale adverts. A site we cannot reach may have lost links since its last
advert reached us (it crashed, or a partition kept its news away), so its
advert is marked *stale* when it becomes unreachable; a stale advert may end a
path (its site is reached if a site we vouch for lists it and it lists that
site back) but never lead further: its claims about other links are not
believed. A newer advert clears the
mark, and so does the same advert met again on a new connection's database
exchange (a site gives only adverts it vouches for) or the advert of a
neighbour heard again on a live connection (``vouch``); either is flooded on
(once per site), so that sites further away clear their mark too: a partition that heals needs no flooding storm and no
refresh to be routed through again.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ordering import honest_ceiling
from rcm import wire
from rcm.actions import ProtocolViolation

Version = tuple[int, int]


@dataclass(frozen=True, slots=True)
class Advert:
    """One site's advertisement: its version and its connected direct links."""

    origin: str
    version: Version
    neighbours: frozenset[str]


@dataclass(frozen=True, slots=True)
class Route:
    """How to reach a destination: the first hop, the number of links, and the rate in bits per
    second of the slowest paced link after the first hop (None: none of them is paced)."""

    next_hop: str
    hops: int
    slowest: int | None = None


class LinkState:
    """The link-state database of one site, and its routes."""

    def __init__(self, site: str, sites: Sequence[str], boot: int, max_hops: int,
                 rates: Mapping[str, Mapping[str, int]] | None = None, ttl: float = float("inf"),
                 pace: float = 0.0) -> None:
        """``rates``: the mission's ``[sites.X.rate]`` tables, site -> {peer: bits per second}; ``ttl``:
        seconds an advert is kept after it was last taken; ``pace``: least seconds between two floods
        of one origin's adverts (see the module docstring)."""
        self.site = site
        self.rates = {(a, b): bps for a, table in (rates or {}).items() for b, bps in table.items()}
        self.sites = sorted(sites)
        self.index = {s: i for i, s in enumerate(self.sites)}
        self.max_hops = max_hops
        self.own = Advert(site, (boot, 0), frozenset())
        self.db: dict[str, Advert] = {}
        self.stale: set[str] = set()     # origins of adverts we cannot vouch for (see the module doc)
        self._reached: set[str] = set()  # the sites our last routes reached
        self.received = 0            # adverts taken (new), for stats
        self.forged_own = 0          # adverts claiming to be ours with a version we never said
        self.expired = 0             # adverts dropped after ttl without renewal
        self.deferred = 0            # floods held back by the pace, for stats
        self.ttl = ttl
        self.pace = pace
        self._taken_at: dict[str, float] = {}     # origin -> when its stored advert was last taken
        self._flooded_at: dict[str, float] = {}   # origin -> when we last flooded its advert
        self._pending: set[str] = set()           # origins whose newest advert waits for the pace

    # -- the database ------------------------------------------------------------------------
    def set_own(self, neighbours: Iterable[str], refresh: bool = False) -> Advert | None:
        """This site's connected links; a new advert to flood if they changed (or ``refresh``)."""
        ns = frozenset(neighbours)
        if ns == self.own.neighbours and not refresh:
            return None
        boot, n = self.own.version
        self.own = Advert(self.site, (boot, n + 1), ns)
        return self.own

    def take(self, ad: Advert, now: float = 0.0) -> bool:
        """An advert from the network: True if it is new, or confirms a stale one (to flood on: ``release``)."""
        if ad.origin == self.site:
            if ad.version > self.own.version:
                self.forged_own += 1    # only we raise our version: never adopted (module docstring)
            return False
        old = self.db.get(ad.origin)
        if old is not None and old.version > ad.version:
            return False
        if old is not None and old.version == ad.version:
            if ad.origin not in self.stale:
                return False
            self.stale.discard(ad.origin)   # confirmed by a site that reaches it
            self._taken_at[ad.origin] = now
            return True
        self.db[ad.origin] = ad
        self.stale.discard(ad.origin)
        self._taken_at[ad.origin] = now
        self.received += 1
        return True

    def release(self, origin: str, now: float) -> Advert | None:
        """The advert of ``origin`` just taken, if it may be flooded now; else it waits for ``due``."""
        if now >= self._flooded_at.get(origin, float("-inf")) + self.pace:
            self._flooded_at[origin] = now
            self._pending.discard(origin)
            return self.db.get(origin)
        if origin not in self._pending:
            self._pending.add(origin)
            self.deferred += 1
        return None

    def due(self, now: float) -> list[Advert]:
        """Adverts held back by the pace whose time has come (to flood on every connection)."""
        out = []
        for origin in sorted(self._pending):
            if now >= self._flooded_at.get(origin, float("-inf")) + self.pace:
                self._pending.discard(origin)
                self._flooded_at[origin] = now
                if origin in self.db:
                    out.append(self.db[origin])
        return out

    def expire(self, now: float) -> bool:
        """Drop adverts not renewed for ``ttl``; True if any left (routes change)."""
        old = [o for o, at in self._taken_at.items() if now >= at + self.ttl]
        for origin in old:
            del self._taken_at[origin]
            self.db.pop(origin, None)
            self.stale.discard(origin)
            self._pending.discard(origin)
            self.expired += 1
        return bool(old)

    def next_deadline(self) -> float | None:
        ds = [self._flooded_at.get(o, float("-inf")) + self.pace for o in self._pending]
        if self._taken_at:
            ds.append(min(self._taken_at.values()) + self.ttl)
        return min(ds) if ds else None

    def vouch(self, neighbours: Iterable[str]) -> list[Advert]:
        """Neighbours whose adverts came on our live connections to them: no longer stale.

        Returns the adverts that were stale, to flood on as confirmations."""
        ns = set(neighbours)
        back = [self.db[n] for n in sorted(ns) if n in self.stale and n in self.db]
        self.stale -= ns
        return back

    def unreachable(self, reached: Iterable[str]) -> None:
        """The adverts of sites we could reach and cannot any more become stale.

        Only at that moment: an advert taken later, while the site is still out of reach,
        came from a site that vouched for it and is as fresh as news can be."""
        got = set(reached)
        self.stale.update(o for o in self._reached if o not in got and o in self.db)
        self._reached = got

    def adverts(self) -> list[Advert]:
        """Everything to give a new neighbour: ours first, then what we can vouch for (not stale)."""
        return [self.own, *(self.db[s] for s in sorted(self.db) if s not in self.stale)]

    def lists(self, origin: str, neighbour: str) -> bool | None:
        """Does ``origin``'s advert list ``neighbour``? None when we have none from it."""
        ad = self.db.get(origin)
        return None if ad is None else neighbour in ad.neighbours

    # -- routes --------------------------------------------------------------------------------
    def routes(self, usable: Iterable[str], fresh: Iterable[str] | None = None,
               within: frozenset[str] | None = None) -> dict[str, Route]:
        """Fewest-hops routes (ties: smallest names), through this site's ``usable`` direct links.

        ``fresh``: the neighbours whose advert came on our current connection to them; we route
        beyond those only (an older one may be from before the neighbour restarted). None: all.
        ``within``: only through these sites (a confined message's: docs/relay.md, "Confinement"); a
        route then crosses, and ends at, no other site. None: any.
        """
        mine = sorted(usable if within is None else set(usable) & within)
        beyond = set(mine) if fresh is None else set(fresh) & set(mine)
        out: dict[str, Route] = {}
        queue: deque[tuple[str, str, int]] = deque()
        for n in mine:
            if n in beyond:
                out[n] = Route(n, 1)
                queue.append((n, n, 1))
        while queue:
            node, first, hops = queue.popleft()
            if hops >= self.max_hops:
                continue
            ad = self.db.get(node)
            if ad is None or node in self.stale:
                continue                # a stale advert may end a path, never lead further
            for nxt in sorted(ad.neighbours):
                if nxt == self.site or nxt in out or (within is not None and nxt not in within):
                    continue
                back = self.db.get(nxt)
                if back is None or node not in back.neighbours:
                    continue            # both ends must advertise a link
                out[nxt] = Route(first, hops + 1, _slower(out[node].slowest, self.rates.get((node, nxt))))
                queue.append((nxt, first, hops + 1))
        for n in mine:
            out[n] = Route(n, 1)        # a direct link always wins, fresh or not
        return out

    # -- wire ------------------------------------------------------------------------------------
    def encode(self, ad: Advert) -> list[Any]:
        return [wire.LINKS, self.index[ad.origin], ad.version[0], ad.version[1],
                sorted(self.index[s] for s in ad.neighbours)]

    def decode(self, f: list[Any], now: float) -> Advert:
        """A LINKS frame; ``ProtocolViolation`` for a malformed one, or a version no honest site has reached."""
        if len(f) != 5:
            raise ProtocolViolation("malformed LINKS frame")
        _, origin, boot, n, ns = f
        if (type(boot) is not int or type(n) is not int or boot < 0 or n < 0 or not isinstance(ns, list)
                or len(ns) > len(self.sites) or not all(type(x) is int for x in ns)):
            raise ProtocolViolation("malformed LINKS frame")
        ceiling = honest_ceiling(now)
        if boot > ceiling or n > ceiling:
            raise ProtocolViolation(f"LINKS version ({boot}, {n}) is beyond what any honest site can have "
                                    "reached by now")
        return Advert(self.site_at(origin), (boot, n), frozenset(self.site_at(x) for x in ns))

    def site_at(self, index: Any) -> str:
        if type(index) is not int or not 0 <= index < len(self.sites):
            raise ProtocolViolation(f"site index {index!r} is not a site of this mission")
        return self.sites[index]


def _slower(a: int | None, b: int | None) -> int | None:
    """The lower of two rates, None meaning unpaced."""
    if a is None or b is None:
        return a if b is None else b
    return min(a, b)
