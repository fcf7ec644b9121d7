"""The whole RCM protocol stack of one site, sans-IO.

Theory of operation
-------------------
``SiteStack`` composes, bottom to top:

* socket channels: one TCP connection per peer at most, framed by ``rcm.wire``;
  a handshake (HELLO both ways, then SYNC; ``rcm.handshake``) identifies the
  peer, its incarnation, and where each direction's reliable stream resumes;
* the connection manager (``rcm.connman.PeerConnection`` per peer), which turns
  connection events and timers into the logical statuses connected /
  suspected / disconnected;
* point-to-point channels (``rcm.p2p``): robust, or one of the paper's baselines;
* multicast: a send is copied to the channel of every destination;
* intermittent global order: an ``ordering`` protocol decides when and how
  messages are delivered (both in ``rcm.multicast``, with the sends skipped
  for disconnected destinations and the MISSED frames that tell them).

It never touches a socket or a clock. The edge (``rcm.server`` for real
sockets, ``faultinject.sim`` for the simulator) calls the event methods with
the current time and executes the returned actions (``rcm.actions``):
``Transmit`` bytes on a connection, ``Close`` it, ``Dial`` a peer, hand a
message up (``Delivery``), report a ``StatusChange`` or ``Missing`` messages,
``Persist`` a write-ahead log record (``rcm.records``) or ``Log`` a line.

Trust: a HELLO's frontier (the last frame the peer holds of our stream) is
checked against what we ever sent: past it is a protocol violation. It drops
frames from our buffer only on a connection whose peer a TLS certificate
proved (``identity``); on a plaintext one the stream resumes after the last
acknowledged frame and the peer discards duplicates, so a HELLO alone can
never make this site forget buffered data. (Plaintext is refused off loopback
unless the mission says it is a lab: ``rcm.config``.)

Dialing rule: both sites dial while they have no connection; if two
connections between the same pair exist at once, both keep the one dialed by
the site whose name sorts first (for two dialed by the same site, the newer),
so the pair converges on a single connection without negotiating. The side
that replaces a connection it wrote frames on waits for the peer's first
acknowledgement on the one kept before it resends (``OutboundChannel.hold``):
the dialer's HELLO is as old as its dial, older than what it took meanwhile.

The stack changes its collaborators (connection manager, channels, ordering
protocol) only through their methods; the write-ahead log is read back, and
the live state written out for a compacted log, by ``rcm.recovery``, and each
collaborator restores its own part.
"""
from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any

from contracts.mission import RcmSettings
from contracts.status import LinkStatus
from ordering import make_protocol
from ordering.base import OrderingProtocol

from . import handshake, lanes, records, recovery, wire
from .actions import (
    Action,
    Backpressure,
    Close,
    Delivery,
    Dial,
    Log,
    Missing,
    Persist,
    ProtocolViolation,
    SendError,
    SendRefused,
    SendResult,
    StatusChange,
    Transmit,
)
from .connman import CloseSocket, DialPeer, Effect, PeerConnection, SendHeartbeat, TcpChange, TcpState
from .connman import StatusChange as LogicalChange
from .inbound import Inbound
from .linkstate import LinkState
from .multicast import Multicast
from .p2p import ChannelFull, InboundChannel, OutboundChannel
from .paths import Paths
from .peer import MISSED_RANGES_MAX, Conn, Peer
from .relay import Relay
from .repairing import Repairing

__all__ = ["SiteStack", "MISSED_RANGES_MAX", "Action", "Backpressure", "Close", "Delivery", "Dial", "Log",
           "Missing", "Persist", "ProtocolViolation", "SendError", "SendRefused", "SendResult",
           "StatusChange", "Transmit"]



ADVERT_REFRESH_HEARTBEATS = 30
"""A site re-floods its link-state advert every this many heartbeat_timeouts (30 s at the paper's)."""
ADVERT_TTL_REFRESHES = 4
"""An advert not renewed for this many refreshes is dropped (a forged version ages out: rcm.linkstate)."""


class SiteStack(Inbound, Paths, Multicast, Repairing):
    """Sans-IO RCM stack for one site (see the module docstring); frames in: ``rcm.inbound``,
    paths and relayed sending: ``rcm.paths``; sends and the ordering protocol's outputs:
    ``rcm.multicast``; retention and repair: ``rcm.repairing``."""

    def __init__(self, site: str, sites: Sequence[str], settings: RcmSettings, incarnation: int,
                 now: float, mission: str = "sim", ordering: str | None = None,
                 first_seq: int = 1, durable: bool = False, boot: int | None = None,
                 rates: Mapping[str, int] | None = None,
                 link_rates: Mapping[str, Mapping[str, int]] | None = None) -> None:
        """``rates``: peer -> bits per second this site paces its writes to (``[sites.A.rate]``);
        ``link_rates``: every site's such table (default: this site's), for routes that cross a
        paced link further on. Channels keep precedence lanes when a link of the mission is paced
        (``rcm.lanes``)."""
        if site not in sites:
            raise ValueError(f"site {site!r} is not among {list(sites)}")
        if incarnation <= 0:
            raise ValueError("incarnation must be positive")
        self.site = site
        self.sites = sorted(sites)
        self.settings = settings
        self.incarnation = incarnation      # identity of this site's reliable stream
        self.boot = boot if boot is not None else incarnation   # one more per process start
        self.mission = mission
        self.msg_seq = first_seq - 1
        peers = [s for s in self.sites if s != site]
        self.ordering: OrderingProtocol = make_protocol(ordering or settings.ordering, site, peers, now)
        # Both ends dial at once: sites start in any order, and waiting would
        # only delay the first connection. A duplicate is resolved by the dialing rule.
        self.peers: dict[str, Peer] = {
            p: Peer(p, PeerConnection(p, settings, now, first_dial=now),
                    OutboundChannel(settings.p2p, settings.max_buffered_messages,
                                    max_bytes=settings.max_buffered_bytes), InboundChannel())
            for p in peers
        }
        for p in peers:
            self.ordering.set_status(p, self.peers[p].cm.status.value, now)
        robust = settings.p2p == "robust"
        paced = {p: bps for p, bps in (rates or {}).items() if p in self.peers and robust}
        for p, bps in paced.items():
            self.peers[p].pacer = lanes.Pacer(bps)
            self.peers[p].fwd = lanes.ForwardQueue()
        mission_rates = {site: dict(rates or {})} if link_rates is None else link_rates
        if robust and any(mission_rates.values()):
            # Every channel keeps lanes: its path may run through a paced link, here or further on.
            for peer in self.peers.values():
                peer.out = OutboundChannel(settings.p2p, settings.max_buffered_messages, lanes.LANES,
                                           max_bytes=settings.max_buffered_bytes)
        self.precedence: dict[tuple[str, int], str] = {}    # undelivered messages that are not routine
        # Relaying (docs/relay.md): link-state, routes, and the path each peer's channel takes.
        self.relaying = settings.relaying
        self.terms = handshake.Terms(self.ordering.name, settings.p2p, tuple(self.sites),
                                     settings.routing if self.relaying else "direct",
                                     settings.max_hops if self.relaying else 1)
        refresh = ADVERT_REFRESH_HEARTBEATS * settings.heartbeat_timeout
        self.links = LinkState(site, self.sites, self.boot, settings.max_hops,
                               rates=mission_rates if robust else None,
                               ttl=ADVERT_TTL_REFRESHES * refresh, pace=settings.heartbeat_timeout / 2)
        self.forged_log_at = float("-inf")         # the last line about an advert forged in our name
        self.index = self.links.index
        self._next_hops: dict[str, str] = {}
        self._routes_dirty = True
        self._db_due: list[Hashable] = []          # new connections that get the whole database
        self._usable: set[str] = set()              # peers whose direct link was usable at the last update
        self._advert_due = now + ADVERT_REFRESH_HEARTBEATS * settings.heartbeat_timeout
        self.announce_gen = 0       # moves on at every path change: announcements by old paths are stale
        self.rto_base = max(4 * settings.ack_interval, 2 * settings.heartbeat_timeout)
        self.rto_max = max(self.rto_base, 2 * settings.liveness_timeout)
        for peer in self.peers.values():
            peer.relay.rto = self.rto_base
        self.relay_forwarded = 0
        self.relay_dropped = 0
        self.advert_bytes = 0
        self.conns: dict[Hashable, Conn] = {}
        self._out: list[Action] = []
        self._dials = 0
        self._tx: dict[Hashable, list[bytes]] = {}
        self.delivered_local = 0
        # Durability: emit Persist records, and remember what the ordering
        # protocol holds so a compaction can write it out.
        self.durable = durable
        self.undelivered: dict[tuple[str, int], tuple[Any, bytes]] = {}
        # Connections that have not finished HELLO cost memory and prove nothing:
        # there are at most ``max_handshaking`` accepted ones, each decoding
        # frames of at most ``hello_max_frame`` bytes until its HELLO is taken.
        self.max_handshaking = settings.max_handshaking or max(32, 4 * len(peers))
        self.hello_max_frame = handshake.frame_limit(mission, site, self.terms, settings.max_frame_bytes)
        self.handshakes_refused = 0
        self.exhausted_log_at = float("-inf")      # the last CRITICAL line for an exhausted clock
        self._handshake_log_at = float("-inf")
        self._handshake_log_count = 0
        self._repair_setup(now)         # retention of deliveries, repair of what was missed

    # ======================================================================
    # public events
    # ======================================================================
    def start(self, now: float) -> list[Action]:
        """First dials; call once."""
        return self.timer(now)

    def connection_made(self, conn: Hashable, now: float, peer: str | None = None,
                        identity: tuple[str, str] | None = None) -> list[Action]:
        """A TCP connection is up: dialed by us to ``peer``, or accepted (``peer=None``).

        ``identity``: with TLS, the (site, mission) named by the peer's verified
        certificate; the HELLO must then claim exactly that site and mission.
        """
        if conn in self.conns:
            raise ValueError(f"connection {conn!r} already known")
        if peer is not None and peer not in self.peers:
            raise ValueError(f"dialed unknown peer {peer!r}")
        c = Conn(conn, peer, wire.FrameDecoder(self.hello_max_frame), now, identity)
        if peer is None and self.handshaking() >= self.max_handshaking:
            self._refuse_handshake(c, now)
            return self._finish(now)
        self.conns[conn] = c
        if peer is not None:
            self._dials += 1
            c.dial_seq = self._dials
            # The dialer speaks first; the acceptor answers once it knows who called.
            self._write(c, self._hello_frame(peer, c.dial_seq))
        return self._finish(now)

    def data_received(self, conn: Hashable, data: bytes, now: float) -> list[Action]:
        c = self.conns.get(conn)
        if c is None:
            return []
        try:
            if c.peer is not None:
                self.peers[c.peer].bytes_in += len(data)
            while conn in self.conns:
                # Before HELLO one frame at a time, under the small limit; the
                # frames behind the HELLO in the same read get the full one.
                frames = c.decoder.feed(data, most=None if c.open else 1)
                data = b""
                if not frames:
                    break
                for frame in frames:
                    if conn not in self.conns:
                        break  # closed by an earlier frame of this batch
                    self._frame(c, frame, now)
        except (wire.FrameError, ProtocolViolation) as e:
            self._drop(c, f"protocol error from {c.who()}: {e}", now, bye=True)
        return self._finish(now)

    def connection_lost(self, conn: Hashable, now: float) -> list[Action]:
        c = self.conns.pop(conn, None)
        if c is None:
            return []
        self._tx.pop(conn, None)
        self._detach(c, now)
        return self._finish(now)

    def dial_failed(self, peer: str, now: float) -> list[Action]:
        p = self.peers.get(peer)
        if p is not None:
            p.cm.dial_failed(now)
        return self._finish(now)

    def timer(self, now: float) -> list[Action]:
        for c in list(self.conns.values()):
            if not c.open and now >= c.opened_at + self.settings.handshake_timeout:
                self._drop(c, f"no handshake within {self.settings.handshake_timeout:g} s", now)
        for p in self.peers.values():
            self._effects(p, p.cm.tick(now), now)
            due = p.inb.ack_due()
            if due is not None and now >= due + self.settings.ack_interval:
                self._send_ack(p, now)
            if p.out.held_until is not None and now >= p.out.held_until:
                self._resume_held(p, now)       # the peer never acknowledged on the new connection
            rto = p.relay.rto_at
            if rto is not None and now >= rto:
                p.relay.rto_at = None
                if isinstance(p.relay.path, Relay) and p.out.sent_upto > p.out.acked:
                    # Nothing acknowledged for a while on a relay path: a relay lost it.
                    p.relay.rto = min(2 * p.relay.rto, self.rto_max)
                    self._resend(p, now)
        self._service_due(now)
        if self.relaying:
            if now >= self._advert_due:
                self._advert_due = now + ADVERT_REFRESH_HEARTBEATS * self.settings.heartbeat_timeout
                ad = self.links.set_own(self.links.own.neighbours, refresh=True)
                if ad is not None:
                    self._flood(ad)
            if self.links.expire(now):
                self._routes_dirty = True
            for ad in self.links.due(now):
                self._flood(ad)
        self._ordering_outputs(self.ordering.tick(now), now)
        self._repair_timer(now)
        return self._finish(now)

    def handshaking(self) -> int:
        """Accepted connections that have not finished their HELLO."""
        return sum(1 for c in self.conns.values() if not c.open and c.dialed_peer is None)

    def next_deadline(self) -> float | None:
        ds: list[float] = []
        for p in self.peers.values():
            d = p.cm.next_deadline()
            if d is not None:
                ds.append(d)
            due = p.inb.ack_due()
            if due is not None and self._path(p) is not None:
                ds.append(due + self.settings.ack_interval)
            if p.relay.rto_at is not None:
                ds.append(p.relay.rto_at)
            if p.out.held_until is not None:
                ds.append(p.out.held_until)
        d = self._paced_deadline()
        if d is not None:
            ds.append(d)
        if self.relaying:
            ds.append(self._advert_due)
            d = self.links.next_deadline()
            if d is not None:
                ds.append(d)
        for c in self.conns.values():
            if not c.open:
                ds.append(c.opened_at + self.settings.handshake_timeout)
        for d in (self.ordering.next_deadline(), self._repair_deadline()):
            if d is not None:
                ds.append(d)
        return min(ds) if ds else None

    # -- durability -------------------------------------------------------------
    def restore(self, log: Iterable[records.Record], now: float) -> list[Action]:
        """Rebuild state from the write-ahead log before ``start`` (``rcm.recovery.restore``).

        Returns the deliveries of messages that were logged but not delivered
        before the restart (every peer is disconnected now, so they are
        delivered at once, in order-key order).
        """
        return recovery.restore(self, log, now)

    def snapshot_records(self) -> list[records.Record]:
        """The live state as log records, for a compacted log (``rcm.wal``; ``rcm.recovery.snapshot``)."""
        return recovery.snapshot(self)

    # -- introspection --------------------------------------------------------
    def status(self, peer: str) -> str:
        return self.peers[peer].cm.status.value

    def statuses(self) -> dict[str, str]:
        return {p: self.peers[p].cm.status.value for p in self.peers}

    def vias(self) -> dict[str, str | None]:
        """Per peer, the next hop when only relays reach it (None: direct, or no path)."""
        return {name: self._via(p) for name, p in self.peers.items()}

    def stats(self) -> dict[str, Any]:
        peers = {}
        for name, p in self.peers.items():
            peers[name] = p.stats()
            peers[name]["via"] = self._via(p)
        return {"site": self.site, "incarnation": self.incarnation, "ordering": self.ordering.name,
                "p2p": self.settings.p2p, "routing": self.terms.routing, "msg_seq": self.msg_seq,
                "held_back": self.ordering.pending_count(), "delivered": self.delivered_local,
                "relay_forwarded": self.relay_forwarded, "relay_dropped": self.relay_dropped,
                "advert_bytes": self.advert_bytes, "peers": peers,
                "adverts": {"forged_own": self.links.forged_own, "expired": self.links.expired,
                            "deferred": self.links.deferred},
                "link_state": {ad.origin: sorted(ad.neighbours) for ad in self.links.adverts()}
                if self.relaying else {}, **self._repair_stats()}

    # ======================================================================
    # internals
    # ======================================================================
    def _finish(self, now: float) -> list[Action]:
        if self.relaying and self._routes_dirty:
            self._update_paths(now)
        self._ordering_outputs(self.ordering.flush(now), now)
        self._repair_serve(now)
        for p in self.peers.values():
            if p.pacer is not None:
                p.pacer.settle(now)
        out = self._out
        if self._tx:
            # A Close already carried its connection's bytes; the rest go out now,
            # one Transmit per connection.
            out.extend(Transmit(conn, b"".join(chunks)) for conn, chunks in self._tx.items() if chunks)
            self._tx = {}
        self._out = []
        return out

    def _persist(self, record: records.Record) -> None:
        self._out.append(Persist(record))

    def _offer_reliable(self, p: Peer, kind: int, body: Any, lane: int | None = None) -> bool:
        """Put a reliable frame in ``p``'s channel and log it when durable; False when the buffer is full."""
        try:
            f = p.out.offer(kind, 0, None, body, self._lane_for(p, lane))
        except ChannelFull:
            return False
        if self.durable:
            self._persist(records.Outbound(p.name, f.link_seq, kind, body))
        return True

    def _write(self, c: Conn, frame: list[Any]) -> None:
        self._write_bytes(c, wire.encode_frame(frame))

    def _write_bytes(self, c: Conn, data: bytes) -> None:
        self._tx.setdefault(c.id, []).append(data)
        if c.peer is not None:
            p = self.peers[c.peer]
            p.bytes_out += len(data)
            p.frames_out += 1
            if p.pacer is not None:
                p.pacer.charge(len(data))

    def _close(self, c: Conn, reason: str, bye: bool, incompatible: bool = False) -> None:
        if bye:
            self._write(c, [wire.BYE, reason[:200], 1] if incompatible else [wire.BYE, reason[:200]])
        self._routes_dirty = True
        chunks = self._tx.pop(c.id, None)
        if chunks:
            self._out.append(Transmit(c.id, b"".join(chunks)))
        self._out.append(Close(c.id, reason))
        self.conns.pop(c.id, None)

    def _drop(self, c: Conn, reason: str, now: float, bye: bool = False, incompatible: bool = False) -> None:
        """Close a connection we decided to end, and tell the peer's machines."""
        self._out.append(Log("warning", f"closing connection: {reason}"))
        self._close(c, reason, bye, incompatible)
        self._detach(c, now)

    def _detach(self, c: Conn, now: float) -> None:
        if c.peer is not None and self.peers[c.peer].conn == c.id:
            p = self.peers[c.peer]
            p.conn = None
            p.out.connection_lost()
            if p.fwd is not None:
                # Relayed frames for the connection that is gone: their origins resend them.
                self.relay_dropped += p.fwd.clear()
            self._effects(p, p.cm.socket_error(now), now)
        elif not c.open and c.dialed_peer is not None:
            p = self.peers[c.dialed_peer]
            if p.conn is None:
                p.cm.dial_failed(now)

    def _effects(self, p: Peer, effects: list[Effect], now: float) -> None:
        for e in effects:
            if isinstance(e, LogicalChange):
                status = e.status.value
                if self.relaying:
                    # Reported at the end of the batch, once the paths settled: a frame that revives a
                    # link and the advert behind it saying the peer does not hear us make no blip.
                    self._routes_dirty = True
                else:
                    self._report(p)
                self._ordering_outputs(self.ordering.set_status(p.name, status, now), now)
                if e.status is LinkStatus.CONNECTED and p.missed:
                    self._offer_missed(p, now)
                self._repair_status(p, now)
            elif isinstance(e, TcpChange):
                self._routes_dirty = True
                if e.state is TcpState.CONNECTED:
                    p.cm.frame_sent(now)
                    self._pump(p, now)
            elif isinstance(e, SendHeartbeat):
                self._heartbeat(p, now)
            elif isinstance(e, CloseSocket):
                if p.conn is not None:
                    c = self.conns[p.conn]
                    p.conn = None
                    p.out.connection_lost()
                    self._out.append(Log("info", f"closing silent connection to {p.name}: {e.reason}"))
                    self._close(c, e.reason, bye=True)
            elif isinstance(e, DialPeer):
                self._out.append(Dial(p.name))
