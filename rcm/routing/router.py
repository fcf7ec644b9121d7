"""The routing layer: link-state, routes, the path each peer's channel takes, and advert timers (sans-IO).

Theory of operation (docs/relay.md has the long form)
----------------------------------------------------
The router owns everything routing knows: the link-state database
(``rcm.routing.linkstate``), the routes and next hops derived from it, the path each
peer's channel takes (``Direct`` on the peer's connection, ``Relay`` through a
neighbour, or none), whether each neighbour hears us on our direct link (its
own adverts on that connection say), and when to refresh our advert. It never
writes a frame or touches another layer: its answers are effects.

* ``Write(conn, data)``: an encoded LINKS frame for one connection (a flood is
  one per open connection; the router counts their bytes);
* ``PathUpdate``: per peer, after a recomputation: its path (and whether it
  changed), whether it is reachable without its direct link (``relayed``: the
  connection manager then raises no suspicion when the direct link goes), whether
  the peer said it does not hear us (``deaf``), the rate of the slowest paced
  link of its route beyond the first hop (the pacing layer limits the channel to it),
  and whether its unconfined path moved (``acks_moved``: what we acknowledged of the
  peer's stream on the old one may be lost there, a blackholed link drops it silently).

**Confinement** (docs/relay.md, "Confinement"). A channel that holds
confined frames (``rcm.wire.envelope``) may go only through the sites all of
them allow: the channel layer tells the router that set (``confine``, a
bitmask of the mission's sorted sites), and the channel's path is then its
direct link if usable, else the shortest route over the link-state graph
restricted to those sites, else its silent direct connection, else none (the
channel waits). Relays forward a confined frame by ``next_hops_within`` its
mask. The peer's status and ``via`` stay those of the unrestricted graph:
the peer is reachable; only that channel waits.

The stack tells the router what the connection layer knows (``neighbours``:
per peer its connection and whether we hear it) at each recomputation; a
recomputation is due (``dirty``) after any connection or link change, and the
stack runs it once per input batch, so a frame that revives a link and the
advert behind it make no blip.
"""
from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from contracts.mission import RcmSettings
from contracts.status import LinkStatus
from rcm import wire
from rcm.actions import Log, StatusChange
from rcm.routing.linkstate import Advert, LinkState, Route
from rcm.routing.relay import Direct, Path, Relay

ADVERT_REFRESH_HEARTBEATS = 30
"""A site re-floods its link-state advert every this many heartbeat_timeouts (30 s at the paper's) ..."""
ADVERT_REFRESH_SITES = 8
"""... times the mission's sites over this many, when more: every advert is flooded to every site, so a fixed
period made each site's link-state bytes grow with the mission (bench/scaling.py: 4,246 B per site per minute
at 64 sites, N^1.1), where this keeps them about flat. A changed advert still goes at once; what grows is how
long a forged advert outlives its forger (four refreshes: 16 minutes at 64 sites)."""


def advert_refresh(heartbeat: float, sites: int) -> float:
    """Seconds between refreshes of a site's own link-state advert in a mission of ``sites`` sites."""
    return ADVERT_REFRESH_HEARTBEATS * heartbeat * max(1.0, sites / ADVERT_REFRESH_SITES)
ADVERT_TTL_REFRESHES = 4
"""An advert not renewed for this many refreshes is dropped (a forged version ages out: rcm.routing.linkstate)."""


@dataclass(frozen=True, slots=True)
class Write:
    """Write ``data`` (an encoded LINKS frame) on connection ``conn``."""

    conn: Hashable
    data: bytes


@dataclass(frozen=True, slots=True)
class PathUpdate:
    """A peer's channel after a route recomputation (see the module docstring)."""

    peer: str
    path: Path | None
    switched: bool
    relayed: bool
    deaf: bool
    route_rate: int | None
    acks_moved: bool = False     # the unconfined path (what acknowledges the peer's stream) moved to another one


@dataclass(frozen=True, slots=True)
class Neighbour:
    """What the connection layer knows of a peer: its adopted connection, and whether we hear on it."""

    conn: Hashable | None
    hearing: bool


class Router:
    """One site's routing state and decisions (see the module docstring)."""

    def __init__(self, site: str, sites: Sequence[str], peers: Sequence[str], boot: int, settings: RcmSettings,
                 rates: Mapping[str, Mapping[str, int]] | None, now: float) -> None:
        """``rates``: the mission's ``[sites.X.rate]`` tables (None: no link is paced, or baselines)."""
        self.site = site
        self.relaying = settings.relaying
        self.heartbeat = settings.heartbeat_timeout
        refresh = self.refresh = advert_refresh(settings.heartbeat_timeout, len(sites))
        self.links = LinkState(site, sites, boot, settings.max_hops, rates=rates,
                               ttl=ADVERT_TTL_REFRESHES * refresh, pace=settings.heartbeat_timeout / 2)
        self.index = self.links.index
        self.sites = list(self.links.sites)
        self.next_hops: dict[str, str] = {}
        self.paths: dict[str, Path | None] = {p: None for p in peers}     # what each channel takes (confined)
        self.free: dict[str, Path | None] = {p: None for p in peers}      # the same, unconfined (status, via)
        self.confined: dict[str, int] = {}       # peer -> the sites its channel may cross (its frames' masks' meet)
        self._usable: set[str] = set()           # at the last update: direct links usable both ways ...
        self._fresh: set[str] = set()            # ... and those we route beyond
        self._routes: dict[str, Route] = {}      # ... and the unrestricted routes
        self._within: dict[int, dict[str, Route]] = {}   # mask -> routes restricted to it, until the next update
        self._within_hops: dict[int, dict[str, str]] = {}  # mask -> their next hops (relays forwarding)
        self.hears_us: dict[str, bool | None] = {p: None for p in peers}   # the peer's own word, on our link
        self.reported: dict[str, tuple[str, str | None] | None] = {p: None for p in peers}
        self.usable: set[str] = set()        # peers whose direct link was usable both ways at the last update
        self.dirty = True
        self._db_due: list[Hashable] = []    # new connections that get the whole database
        self._advert_due = now + refresh
        self.advert_bytes = 0
        self.forged_log_at = float("-inf")   # the last line about an advert forged in our name

    # -- what the other layers ask -------------------------------------------------------------
    def path(self, peer: str, conn: Hashable | None) -> Path | None:
        """The way ``peer``'s channel goes now (without relaying: its direct connection, if any)."""
        if self.relaying:
            return self.paths[peer]
        return Direct(conn) if conn is not None else None

    def unconfined(self, peer: str, conn: Hashable | None) -> Path | None:
        """The path ``peer``'s channel would take if it held nothing confined: what carries no message content
        (its acknowledgements of ``peer``'s stream) takes it, so a confined backlog waiting for a path never
        holds up the acknowledgement of the other way."""
        if self.relaying:
            return self.free[peer]
        return Direct(conn) if conn is not None else None

    def next_hop(self, dest: str) -> str | None:
        return self.next_hops.get(dest)

    def via(self, peer: str, status: LinkStatus) -> str | None:
        """The next hop when only relays reach ``peer`` (None: direct, or no path), on the unrestricted graph."""
        path = self.free[peer]
        return path.hop if isinstance(path, Relay) and status is LinkStatus.CONNECTED else None

    def report(self, peer: str, status: LinkStatus, force: bool = False) -> StatusChange | None:
        """The status change to report for ``peer``, if it (or its next hop) changed since the last."""
        now = (status.value, self.via(peer, status))
        if not force and self.reported[peer] == now:
            return None
        self.reported[peer] = now
        return StatusChange(peer, now[0], now[1])

    def next_hops_within(self, mask: int | None) -> dict[str, str]:
        """Next hops towards each destination through the sites of ``mask`` only (None: ``next_hops``)."""
        if mask is None or not self.relaying:
            return self.next_hops
        hops = self._within_hops.get(mask)
        if hops is None:
            hops = self._within_hops[mask] = {d: r.next_hop for d, r in self._restricted(mask).items()}
        return hops

    def open_within(self, peer: str, mask: int, conn: Hashable | None) -> bool:
        """Is there a way to ``peer`` now through the sites of ``mask`` only: its direct link usable, or a route
        (a silent connection, TCP queueing, is no way)?"""
        if not self.relaying:
            return conn is not None
        if peer in self._usable and conn is not None:
            return True
        return peer in self._restricted(mask)

    def stuck(self, peer: str, conn: Hashable | None) -> bool:
        """Does ``peer``'s channel hold confined frames with no way within their sites (``open_within``)?"""
        mask = self.confined.get(peer)
        return mask is not None and not self.open_within(peer, mask, conn)

    def names(self, mask: int) -> frozenset[str]:
        """The sites of confinement mask ``mask``."""
        return frozenset(s for i, s in enumerate(self.sites) if mask >> i & 1)

    def confine(self, peer: str, mask: int | None, conn: Hashable | None) -> tuple[bool, Path | None]:
        """``peer``'s channel now holds frames confined to ``mask`` (None: none): (did its path change, its path)
        under that at once (``conn``: its direct connection). The channel layer switches the channel to a
        new path before writing anything on it."""
        if not self.relaying or self.confined.get(peer) == mask:
            return False, self.paths[peer]
        if mask is None:
            del self.confined[peer]
        else:
            self.confined[peer] = mask
        new, _ = self._choose(peer, conn, mask)
        if new == self.paths[peer]:
            return False, new
        self.paths[peer] = new
        self.dirty = True           # the batch's recomputation sets the new route's pacing rate
        return True, new

    # -- events ----------------------------------------------------------------------------------
    def adopted(self, peer: str, conn: Hashable) -> None:
        """``peer``'s new direct connection: its channel goes on it, and it gets our whole database."""
        self.paths[peer] = self.free[peer] = Direct(conn)
        self.hears_us[peer] = None
        self._db_due.append(conn)          # once our own advert lists this link (``update``)
        self.dirty = True

    def changed(self) -> None:
        """A connection or a link's state changed: routes are recomputed at the end of the batch."""
        self.dirty = True

    def advert(self, ad: Advert, conn: Hashable, neighbour: str | None, open_conns: Iterable[Hashable],
               now: float) -> tuple[list[Write], list[Log]]:
        """A link-state advert from the neighbour on ``conn``: take it, flood it on (paced), and learn from
        the neighbour's own whether it hears us."""
        logs: list[Log] = []
        if neighbour is not None and ad.origin == neighbour:
            self.hears_us[neighbour] = self.site in ad.neighbours
            self.dirty = True
        forged = self.links.forged_own
        writes: list[Write] = []
        if self.links.take(ad, now):
            self.dirty = True
            released = self.links.release(ad.origin, now)
            if released is not None:
                writes = self._flood(released, open_conns, but=(conn,))
        elif self.links.forged_own > forged and now >= self.forged_log_at + 60.0:
            self.forged_log_at = now
            logs.append(Log("warning", f"an advert claiming to be {self.site}'s, version {ad.version}, came "
                                       f"from {neighbour or 'a peer'}: this site never said it (refused; "
                                       f"{self.links.forged_own} so far)"))
        return writes, logs

    def tick(self, open_conns: Sequence[Hashable], now: float) -> list[Write]:
        """Timers: the slow refresh of our advert, adverts aging out, floods the pace held back."""
        if not self.relaying:
            return []
        writes: list[Write] = []
        if now >= self._advert_due:
            self._advert_due = now + self.refresh
            ad = self.links.set_own(self.links.own.neighbours, refresh=True)
            if ad is not None:
                writes += self._flood(ad, open_conns)
        if self.links.expire(now):
            self.dirty = True
        for ad in self.links.due(now):
            writes += self._flood(ad, open_conns)
        return writes

    def next_deadline(self) -> float | None:
        if not self.relaying:
            return None
        d = self.links.next_deadline()
        return self._advert_due if d is None else min(d, self._advert_due)

    def update(self, neighbours: Mapping[str, Neighbour], open_conns: Sequence[Hashable]
               ) -> tuple[list[Write], list[PathUpdate]]:
        """Recompute routes, advertise our links if they changed, and say where each channel goes now."""
        self.dirty = False
        # We advertise the links we hear on; we send on those the other end hears on too.
        hearing = {n for n, nb in neighbours.items() if nb.conn is not None and nb.hearing}
        usable = {n for n in hearing if self.hears_us[n] is not False}
        writes: list[Write] = []
        ad = self.links.set_own(hearing)
        # A neighbour on a new connection, or one usable again (a fade lifted), gets the whole
        # database: what it missed meanwhile, and the confirmation of what it holds as stale.
        revived = [neighbours[n].conn for n in sorted(usable - self.usable)]
        new_conns = list(dict.fromkeys([*self._db_due, *revived]))
        self._db_due, self.usable = [], usable
        if ad is not None:
            writes += self._flood(ad, open_conns, but=new_conns)
        opened = set(open_conns)
        for cid in new_conns:
            if cid in opened:
                for a in self.links.adverts():
                    writes.append(self._write(cid, a))
        fresh = {n for n in usable if self.hears_us[n] is not None}
        for confirmed in self.links.vouch(fresh):
            writes += self._flood(confirmed, open_conns)
        routes = self.links.routes(usable, fresh)
        self.links.unreachable(routes)
        self.next_hops = {d: r.next_hop for d, r in routes.items()}
        self._usable, self._fresh, self._routes, self._within, self._within_hops = usable, fresh, routes, {}, {}
        updates = []
        for name, nb in neighbours.items():
            r = routes.get(name)
            # Reachable without the direct link? Then losing it is not an outage: no blip of
            # suspicion (and of early deliveries) while the route moves to a relay.
            if name in usable:
                relayed = self.links.routes(usable - {name}, fresh).get(name) is not None
            else:
                relayed = r is not None
            free = self._choose(name, nb.conn, None)
            mask = self.confined.get(name)
            acks_moved = free[0] is not None and free[0] != self.free[name]
            self.free[name] = free[0]
            new, r = free if mask is None else self._choose(name, nb.conn, mask)     # (once when not confined)
            rate = r.slowest if isinstance(new, Relay) and r is not None else None
            switched = new != self.paths[name]
            self.paths[name] = new
            updates.append(PathUpdate(name, new, switched, relayed, self.hears_us[name] is False, rate, acks_moved))
        return writes, updates

    def stats(self) -> dict[str, Any]:
        return {"advert_bytes": self.advert_bytes,
                "adverts": {"forged_own": self.links.forged_own, "expired": self.links.expired,
                            "deferred": self.links.deferred},
                "link_state": {ad.origin: sorted(ad.neighbours) for ad in self.links.adverts()}
                if self.relaying else {}}

    # -- internals -------------------------------------------------------------------------------
    def _choose(self, name: str, conn: Hashable | None, mask: int | None) -> tuple[Path | None, Route | None]:
        """``name``'s path (and route) by the last update's state, through the sites of ``mask`` only (None: any):
        its usable direct link, else a route, else a silent connection (TCP queues, the frontier resends),
        else none."""
        if name in self._usable and conn is not None:
            return Direct(conn), None
        r = (self._routes if mask is None else self._restricted(mask)).get(name)
        if r is not None and name not in self._usable:
            return Relay(r.next_hop), r
        if conn is not None:
            return Direct(conn), None
        return None, None

    def _restricted(self, mask: int) -> dict[str, Route]:
        """Routes through the sites of ``mask`` only (cached until the next update)."""
        got = self._within.get(mask)
        if got is None:
            if len(self._within) >= 64:
                self._within.clear()            # bounded: masks come from frames
                self._within_hops.clear()
            got = self._within[mask] = self.links.routes(self._usable, self._fresh, within=self.names(mask))
        return got

    def _write(self, conn: Hashable, ad: Advert) -> Write:
        data = wire.encode_frame(self.links.encode(ad))
        self.advert_bytes += len(data)
        return Write(conn, data)

    def _flood(self, ad: Advert, open_conns: Iterable[Hashable], but: Iterable[Hashable] = ()) -> list[Write]:
        """``ad`` on every open connection (but those in ``but``)."""
        skip = set(but)
        return [self._write(c, ad) for c in open_conns if c not in skip]
