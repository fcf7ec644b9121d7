"""Where the layers of a site's stack meet: each layer's effects carried to the others, sans-IO.

Theory of operation
-------------------
The layers of ``rcm.stack.site.SiteStack`` own their state and never call
each other sideways; what one decides that concerns another comes here, the
one place where they meet (the mediator of the composition). ``Junction``
implements what the layers ask of the stack that composes them
(``rcm.channels.layer.ChannelHooks``, ``rcm.channels.sessions.SessionHooks``,
``rcm.stack.inbound.InboundHooks``) and what the stack's events and its end of
batch hand on:

* a connection manager's effects (``cm_effects``): a logical status change
  to routing, the ordering protocol and repair; a TCP change to routing and
  the channel; heartbeats, closes of silent connections, dials;
* the ordering protocol's outputs (``ordering_outputs``): deliveries kept by
  repair and handed up (``Delivery``), control bodies out on the channels,
  reliable, queued as an announcement, sent directly or relayed;
* repair's offers into the channels of connected peers (``repair_offers``)
  and repaired messages up (``deliver_repaired``);
* routing's writes and path updates (``router_writes``, ``update_paths``):
  adverts out, channels onto their new paths, status reports;
* connections closed, dropped and detached from their peer's channel and
  connection manager; the handshake's and latest wins' requests, to the
  sessions and the latest-wins layer.

It owns no layer's state, only the count of deliveries handed up
(``delivered_local``); every effect it makes is appended to the batch's
actions (``out``, the stack's), which the stack's ``_finish`` hands the edge.
The layers are composed in two steps because they and the junction know
each other: those below the channels at construction, the rest with
``join`` once made (``SiteStack.__init__``).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from contracts.status import LinkStatus
from ordering import Deliver, OrderingProtocol, SendControl
from ordering.base import Output
from rcm import wire
from rcm.actions import Action, Delivery, Dial, Log
from rcm.channels import lanes
from rcm.channels.connections import Connections
from rcm.channels.layer import Channels
from rcm.channels.pacing import Pacing
from rcm.channels.peer import Conn, Peer
from rcm.channels.sessions import Sessions
from rcm.connman import CloseSocket, DialPeer, Effect, SendHeartbeat, TcpChange, TcpState
from rcm.connman import StatusChange as LogicalChange
from rcm.latest.layer import LatestLayer
from rcm.repair.antientropy import Offer
from rcm.repair.frames import Repaired
from rcm.repair.service import RepairService
from rcm.routing import relay
from rcm.routing.relay import Direct, Relay, Routed
from rcm.routing.router import Neighbour, Router
from rcm.stack import frames
from rcm.stack.multicast import Multicast


class Junction:
    """Where a site's layers meet (see the module docstring)."""

    channels: Channels
    peers: dict[str, Peer]
    repairs: RepairService
    latest: LatestLayer
    sessions: Sessions

    def __init__(self, site: str, incarnation: int, boot: int, relaying: bool, multicast: Multicast,
                 router: Router, pacing: Pacing, connections: Connections, out: list[Action]) -> None:
        self.site = site
        self.incarnation = incarnation      # identity of this site's reliable stream
        self.boot = boot
        self.relaying = relaying
        self.multicast = multicast
        self.router = router
        self.pacing = pacing
        self.connections = connections
        self.out = out                      # the stack's batch of actions
        self.delivered_local = 0

    def join(self, channels: Channels, repairs: RepairService, latest: LatestLayer, sessions: Sessions) -> None:
        """The layers made with this junction as their hooks."""
        self.channels = channels
        self.peers = channels.peers
        self.repairs = repairs
        self.latest = latest
        self.sessions = sessions

    @property
    def ordering(self) -> OrderingProtocol:
        return self.multicast.ordering

    def open_within(self, peer: str, mask: int) -> bool:
        """Is there a way to ``peer`` now within the sites of ``mask`` (repair serves a confined message only
        then: a REPAIR queued with none would hold the channel, and the requester's order, up)?"""
        return self.router.open_within(peer, mask, self.peers[peer].conn)

    def router_writes(self, writes: list[Any]) -> None:
        for w in writes:
            c = self.connections.get(w.conn)
            if c is not None:
                self.connections.write_bytes(c, w.data)

    def update_paths(self, now: float) -> None:
        """Routes recomputed: adverts out, and each channel on its new path."""
        neighbours = {n: Neighbour(p.conn, p.conn is not None and p.cm.tcp is TcpState.CONNECTED)
                      for n, p in self.peers.items()}
        writes, updates = self.router.update(neighbours, self.connections.open_ids())
        self.router_writes(writes)
        for u in updates:
            p = self.peers[u.peer]
            self.pacing.set_route(u.peer, u.route_rate)
            if u.switched:
                self.channels.switch(p, u.path, now)
            if u.acks_moved:
                self.channels.ack_again(p, now)
            self.cm_effects(p, p.cm.path_changed(u.relayed, now, deaf=u.deaf), now)
            self._report(p)

    def _report(self, p: Peer, force: bool = False) -> None:
        change = self.router.report(p.name, p.cm.status, force)
        if change is not None:
            self.out.append(change)

    def cm_effects(self, p: Peer, effects: list[Effect], now: float) -> None:
        """Carry out what ``p``'s connection manager decided."""
        for e in effects:
            if isinstance(e, LogicalChange):
                if self.relaying:
                    # Reported at the end of the batch, once the paths settled: a frame that revives a
                    # link and the advert behind it saying the peer does not hear us make no blip.
                    self.router.changed()
                else:
                    self._report(p, force=True)
                self.ordering_outputs(self.ordering.set_status(p.name, e.status.value, now), now)
                if e.status is LinkStatus.CONNECTED and p.missed:
                    self.channels.offer_missed(p, now)
                self.repair_offers(self.repairs.status(p.name, p.cm.status is LinkStatus.CONNECTED, now), now)
            elif isinstance(e, TcpChange):
                self.router.changed()
                if e.state is TcpState.CONNECTED:
                    p.cm.frame_sent(now)
                    self.channels.pump(p, now)
            elif isinstance(e, SendHeartbeat):
                self.channels.heartbeat(p, now)
            elif isinstance(e, CloseSocket):
                if p.conn is not None:
                    c = self.connections[p.conn]
                    self.channels.unplug(p)
                    self.out.append(Log("info", f"closing silent connection to {p.name}: {e.reason}"))
                    self.close(c, e.reason, bye=True)
            elif isinstance(e, DialPeer):
                self.out.append(Dial(p.name))

    def ordering_outputs(self, outputs: Sequence[Output], now: float) -> None:
        """The ordering protocol's deliveries go up (once kept), its control bodies out on the channels."""
        for o in outputs:
            if isinstance(o, Deliver):
                prec, expires_at, expired, reach = self.multicast.delivering(o)
                # Expired by its turn (or a stub already): it goes up as one, its content gone.
                expired = expired or (expires_at is not None and expires_at <= now)
                payload = b"" if expired else o.payload
                if not self.repairs.keep(o.origin, o.seq, tuple(o.key), payload, now, precedence=prec,
                                         expires_at=expires_at, expired=expired, reach=reach):
                    continue            # repaired already, before its copy came this way
                self.delivered_local += 1
                if o.origin != self.site:
                    p = self.peers[o.origin]
                    p.delivered += 1
                    if o.late:
                        p.late += 1
                self.out.append(Delivery(o.origin, o.seq, tuple(o.key), o.late, payload, prec,
                                         expires_at=expires_at, expired=expired, reach=reach))
            elif isinstance(o, SendControl):
                self._control_out(o, now)

    def _control_out(self, o: SendControl, now: float) -> None:
        ch = self.channels
        targets = o.to if o.to is not None else [
            n for n, p in self.peers.items() if p.cm.status is not LinkStatus.DISCONNECTED]
        relayed: dict[str, list[tuple[str, int]]] = {}     # hop -> entries (relay.announce_value)
        offered: dict[str, int] = {}                        # reliable: peer -> link seq
        for name in targets:
            p = self.peers[name]
            if o.reliable:
                link = ch.offer_reliable(p, wire.CTRL, o.body, lanes.ORDERED_LANE)
                if link is None:
                    self.out.append(Log("warning", f"control to {name} dropped: buffer full"))
                    continue
                offered[name] = link
            else:
                path = ch.path(p)
                if path is not None and p.out.supersede_announcement():
                    # One still waits last in the lanes (a FLASH flood makes one per send): the
                    # peer gets the protocol's state afresh instead, absolute (hybrid's deltas
                    # chain on what was told), in the place of both (rcm.channels.lanes, the share).
                    self.resync(name, now)
                elif path is not None and p.out.queue_announcement(o.body):
                    ch.pump(p, now)       # behind the frames of a paced channel's lanes
                elif isinstance(path, Direct):
                    if not p.out.held():    # else it goes afresh when the hold ends (Channels.resume_held)
                        ch.send_frame(p, [wire.ANNOUNCE, ch.announce_gens[name], o.body], now)
                elif isinstance(path, Relay) and self.peers[path.hop].conn is not None:
                    # After the last frame offered to it: applied once those arrived.
                    relayed.setdefault(path.hop, []).append(
                        (name, relay.announce_value(p.out.next_seq - 1, ch.announce_gens[name])))
                    p.relay.counters["relayed_out"] += 1
        for hop, entries in relayed.items():
            ch.write_routed(hop, Routed(1, self.site, relay.stream_check(self.incarnation), tuple(entries),
                                        wire.ANNOUNCE, (self.boot, o.body)), now)
        if offered:                 # one copy per next hop, as a message's
            ch.multicast_control(list(offered), offered, o.body, now)

    def repair_offers(self, offers: list[Offer], now: float) -> None:
        """Repair frames into the channels of connected peers (the ordered lane: FLASH and IMMEDIATE pass)."""
        for o in offers:
            p = self.peers[o.peer]
            if p.cm.status is not LinkStatus.CONNECTED:
                continue
            if self.channels.offer_reliable(p, o.kind, o.body, lanes.ORDERED_LANE) is None:
                self.out.append(Log("warning", f"repair frame to {o.peer} dropped: buffer full"))
                continue
            if o.kind == wire.REPAIR and len(o.body) == 8:
                self.channels.confine(p, now)       # a confined message's repair: its path within its reach
            self.channels.pump(p, now)

    def deliver_repaired(self, got: Repaired, now: float) -> None:
        """A repaired message goes up, late and repaired, at its original key (unless delivered already)."""
        key = tuple(got.key)
        expired = got.expired or (got.expires_at is not None and got.expires_at <= now)
        payload = b"" if expired else got.payload
        if self.repairs.keep(got.origin, got.seq, key, payload, now, repaired=True, precedence=got.precedence,
                             expires_at=got.expires_at, expired=expired, reach=got.reach):
            self.delivered_local += 1
            if got.origin in self.peers:
                self.peers[got.origin].delivered += 1
                self.peers[got.origin].late += 1
            self.out.append(Delivery(got.origin, got.seq, key, True, payload, got.precedence, repaired=True,
                                     expires_at=got.expires_at, expired=expired, reach=got.reach))

    def resync(self, peer: str, now: float) -> None:
        """Best-effort state sent to ``peer`` may have been lost: the ordering protocol sends it again."""
        self.ordering_outputs(self.ordering.resync(peer, now), now)

    # -- latest wins: the sessions' and the channels' requests (rcm.latest) ------------------------------
    def session_opened(self, p: Peer, now: float) -> None:
        self.latest.session_opened(p, now)

    def latest_waiting(self, neighbour: str) -> bool:
        return self.latest.waiting(neighbour)

    def latest_write(self, hop: Peer, now: float) -> bool:
        return self.latest.write_one(hop, now)

    # -- connections: the sessions' and the inbound path's requests -------------------------------------
    def hello(self, c: Conn, f: list[Any], now: float) -> None:
        self.sessions.hello(c, f, now)

    def refused_by_peer(self, c: Conn, f: frames.Bye, now: float) -> None:
        self.sessions.refused_by_peer(c, f.reason, f.incompatible, now)

    def peer_stream(self, p: Peer, incarnation: int) -> None:
        self.sessions.peer_stream(p, incarnation)

    def close(self, c: Conn, reason: str, bye: bool, incompatible: bool = False) -> None:
        self.connections.close(c, reason, bye, incompatible)
        self.router.changed()

    def drop(self, c: Conn, reason: str, now: float, bye: bool = False, incompatible: bool = False,
             level: str = "warning", replaced: bool = False) -> None:
        """Close a connection we decided to end, and tell the peer's machines (logged at ``level``: a routine
        close, ``rcm.wire.ROUTINE_BYES``, at INFO; ``replaced``: the peer closed it for another, ``detach``)."""
        self.out.append(Log(level, f"closing connection: {reason}"))
        self.close(c, reason, bye, incompatible)
        self.detach(c, now, replaced)

    def detach(self, c: Conn, now: float, replaced: bool = False) -> None:
        """``c`` is gone: if it was its peer's, the channel and the connection manager hear of it.

        Two connections crossed (both sites dialed at once): the peer keeps the one we dialed and closes
        the other (``replaced``, its BYE says so), and that BYE may come before its HELLO on ours. The link
        is not down then: the connection manager hears nothing while our dial is still in its handshake
        (no *suspected* for an instant, on every screen), and the handshake's end replaces the connection
        as usual; if the dial fails instead, the manager hears of it then (below). Its liveness timeout still
        runs meanwhile."""
        if c.peer is not None and self.peers[c.peer].conn == c.id:
            p = self.peers[c.peer]
            self.channels.unplug(p, forwarded_too=True)
            if replaced and self.connections.dialing(p.name):
                return
            self.cm_effects(p, p.cm.socket_error(now), now)
        elif not c.open and c.dialed_peer is not None:
            p = self.peers[c.dialed_peer]
            if p.conn is None:
                p.cm.dial_failed(now)
                if not self.connections.dialing(p.name):      # (a no-op unless the link waited for this dial)
                    self.cm_effects(p, p.cm.socket_error(now), now)
