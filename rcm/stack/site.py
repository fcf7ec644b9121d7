"""The whole RCM protocol stack of one site, sans-IO: a composition of layers that own their state.

Theory of operation
-------------------
``SiteStack`` composes, bottom to top (JGroups' model: each layer an object
that owns its state and is reached only through its methods; h11's
discipline: events and ``now`` in, actions out):

* connections (``rcm.channels.connections``): inter-site connections, their bytes out,
  the handshake limits; sessions (``rcm.channels.sessions``): HELLO both ways, the
  dialing rule, adopting a connection for its peer;
* frames (``rcm.stack.frames``): every frame decoded once into a small type; the
  inbound path (``rcm.stack.inbound``) hands each to the layer that takes it;
* channels (``rcm.channels.layer``): per peer, the robust point-to-point channel
  (``rcm.channels.p2p``) and its connection manager (``rcm.connman``, which turns
  connection events and timers into connected / suspected / disconnected),
  written on the path routing gives it; pacing (``rcm.channels.pacing``): which frame
  a paced link writes next;
* routing (``rcm.routing.router``): link-state, routes and paths (docs/relay.md);
* repair (``rcm.repair.service``): retention and anti-entropy;
* latest wins (``rcm.latest``): the newest report of each (origin, key), flooded
  hop by hop outside the channels' streams (positions);
* ordering (``rcm.stack.multicast``): message numbering and the intermittent
  global order protocol.

The stack passes events down and effects up: the layers meet only in its
junction (``rcm.stack.junction``: the connection manager's effects, the
ordering protocol's outputs, repair's offers, routing's path updates), and the
end of every input batch (``_finish``) recomputes routes once, flushes the
ordering protocol's announcements, serves repair, settles the pacers and hands
the edge one ``Transmit`` per connection. It never touches a socket or a clock. The edge
(``rcm.server`` for real sockets, ``faultinject.sim`` for the simulator)
calls the event methods with the current time and executes the returned
actions (``rcm.actions``): ``Transmit`` bytes on a connection, ``Close`` it,
``Dial`` a peer, hand a message up (``Delivery``), report a ``StatusChange``
or ``Missing`` messages, ``Persist`` a write-ahead log record (``rcm.durability.records``)
or ``Log`` a line. ``rcm.stack.recovery`` reads a log back into each layer.
"""
from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any

from contracts.mission import RcmSettings
from contracts.precedence import DEFAULT
from ordering import OrderingProtocol
from rcm import wire
from rcm.actions import (
    Action,
    Latest,
    ProtocolViolation,
    SendResult,
)
from rcm.channels.connections import Connections
from rcm.channels.layer import Channels
from rcm.channels.pacing import Pacing
from rcm.channels.peer import Conn, Peer
from rcm.channels.sessions import Sessions
from rcm.connman import holds_dial, slow_link
from rcm.durability import records
from rcm.latest.layer import LatestLayer
from rcm.repair.antientropy import Repair
from rcm.repair.retention import Retention
from rcm.repair.service import RepairService
from rcm.routing.router import Router
from rcm.stack import frames, recovery
from rcm.stack.inbound import Inbound
from rcm.stack.junction import Junction
from rcm.stack.multicast import Multicast
from rcm.wire import handshake


class SiteStack:
    """Sans-IO RCM stack for one site: the layers, composed (see the module docstring)."""

    def __init__(self, site: str, sites: Sequence[str], settings: RcmSettings, incarnation: int,
                 now: float, mission: str = "sim", ordering: str | None = None,
                 first_seq: int = 1, durable: bool = False, boot: int | None = None,
                 rates: Mapping[str, int] | None = None,
                 link_rates: Mapping[str, Mapping[str, int]] | None = None) -> None:
        """``rates``: peer -> bits per second this site paces its writes to (``[sites.A.rate]``);
        ``link_rates``: every site's such table (default: this site's), for routes that cross a
        paced link further on. Channels keep precedence lanes when a link of the mission is paced
        (``rcm.channels.lanes``)."""
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
        self.durable = durable
        self.relaying = settings.relaying
        self.out: list[Action] = []         # this batch's actions, every layer appends its own
        self._written: set[str] = set()     # peers written to in this batch (their heartbeat timers restart)
        peers = [s for s in self.sites if s != site]
        robust = settings.p2p == "robust"
        mission_rates = {site: dict(rates or {})} if link_rates is None else link_rates
        self.multicast = Multicast(site, peers, settings, ordering, now, first_seq, durable, self.out)
        self.terms = handshake.Terms(self.multicast.ordering.name, settings.p2p, tuple(self.sites),
                                     settings.routing if self.relaying else "direct",
                                     settings.max_hops if self.relaying else 1)
        self.router = Router(site, self.sites, peers, self.boot, settings, mission_rates if robust else None, now)
        self.pacing = Pacing({p: bps for p, bps in (rates or {}).items() if p in peers and robust})
        # Connections that have not finished HELLO cost memory and prove nothing: at most
        # ``max_handshaking`` accepted ones, each decoding frames of at most the HELLO's size.
        self.connections = Connections(site, handshake.frame_limit(mission, site, self.terms,
                                                                   settings.max_frame_bytes),
                                       settings.max_handshaking or max(32, 4 * len(peers)),
                                       settings.handshake_timeout, self.out, self._wrote,
                                       {p: t for p in peers if (t := self.pacing.linger(p))})
        # Where the layers meet (rcm.stack.junction): the hooks of those made from here on.
        self.junction = Junction(site, incarnation, self.boot, self.relaying, self.multicast, self.router,
                                 self.pacing, self.connections, self.out)
        # Every channel keeps lanes when a link of the mission is paced: its path may cross it.
        self.channels = Channels(site, peers, settings, incarnation, self.boot, now,
                                 robust and any(mission_rates.values()), durable, self.connections, self.router,
                                 self.pacing, self.out, self.junction)
        self.repairs = RepairService(site, self.sites, settings, now)
        self.latest = LatestLayer(site, self.relaying, self.terms.max_hops, self.channels, self.router, self.out)
        self.sessions = Sessions(site, mission, settings, incarnation, self.boot, self.terms, durable,
                                 self.connections, self.channels, self.router, self.out, self.junction)
        self.inbound = Inbound(site, settings, durable,
                               frames.FrameDecoder(site, self.sites, self.router.links, settings.max_payload_bytes,
                                                   self.relaying, self.terms.max_hops, settings.max_frame_bytes),
                               self.channels, self.router, self.multicast, self.repairs, self.latest, self.out,
                               self.junction)
        self.junction.join(self.channels, self.repairs, self.latest, self.sessions)
        for p in peers:
            self.multicast.ordering.set_status(p, self.peers[p].cm.status.value, now)

    # -- views of the layers, for the edge and for tests ----------------------------------------------
    @property
    def peers(self) -> dict[str, Peer]:
        return self.channels.peers

    @property
    def conns(self) -> dict[Hashable, Conn]:
        return self.connections.conns

    @property
    def ordering(self) -> OrderingProtocol:
        return self.multicast.ordering

    @property
    def msg_seq(self) -> int:
        return self.multicast.msg_seq

    @property
    def retention(self) -> Retention:
        return self.repairs.retention

    @property
    def repair(self) -> Repair | None:
        return self.repairs.repair

    @property
    def index(self) -> dict[str, int]:
        return self.router.index

    @property
    def max_handshaking(self) -> int:
        return self.connections.max_handshaking

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
        if peer is not None and peer not in self.peers:
            raise ValueError(f"dialed unknown peer {peer!r}")
        c = self.connections.made(conn, now, peer, identity)
        if c is None:
            self.router.changed()
        elif peer is not None:
            # The dialer speaks first; the acceptor answers once it knows who called.
            self.connections.write(c, self.sessions.hello_frame(peer, c.dial_seq))
        return self._finish(now)

    def data_received(self, conn: Hashable, data: bytes, now: float) -> list[Action]:
        c = self.connections.get(conn)
        if c is None:
            return []
        try:
            if c.peer is not None:
                self.peers[c.peer].bytes_in += len(data)
            while conn in self.connections:
                # Before HELLO one frame at a time, under the small limit; the
                # frames behind the HELLO in the same read get the full one.
                raw = c.decoder.feed(data, most=None if c.open else 1)
                data = b""
                if not raw:
                    break
                for f in raw:
                    if conn not in self.connections:
                        break  # closed by an earlier frame of this batch
                    self.inbound.frame(c, f, now)
        except (wire.FrameError, ProtocolViolation) as e:
            self.junction.drop(c, f"protocol error from {c.who()}: {e}", now, bye=True)
        return self._finish(now)

    def connection_lost(self, conn: Hashable, now: float) -> list[Action]:
        c = self.connections.lost(conn)
        if c is None:
            return []
        self.junction.detach(c, now)
        return self._finish(now)

    def dial_timeout(self, peer: str) -> float:
        """How long the edge waits for a dial of ``peer`` to connect: ``reconnect_period``, or the peer's redial
        period if longer (``connman.redial_period``). Not the shorter redial period of the site that dials
        first on a slow link (1 s): TCP's own handshake over a radio takes about that long (a 60-byte SYN and
        its answer at 2.4 kbit/s with 300 ms each way: 1.0 s, more with a half-duplex radio's turnarounds),
        so such a connect would be given up just before it completed, every time. On a dead link the kernel
        sends the SYN again after 1 s, and the next dial comes a second after this one gave up: a SYN 1 s and
        3 s apart in turn, a restore noticed 1.25 s later on average (docs/rcm.md)."""
        p = self.peers.get(peer)
        redial = p.cm.redial if p is not None else 0.0
        return max(redial, self.settings.reconnect_period)

    def holds_dial(self, peer: str, upgrading: int) -> bool:
        """Does the edge hold its due dial of ``peer`` (then ``dial_failed``)? ``upgrading``: accepted
        connections still in their TLS handshake, which the stack does not see (``connman.holds_dial``)."""
        return holds_dial(self.site, peer, self.pacing.rate(peer), upgrading + self.handshaking())

    def slow_link(self, peer: str) -> bool:
        """Is the link to ``peer`` paced slower than ``rcm.connman.SLOW_LINK_BPS`` (its TLS is continued after a
        cut: rcm.server.tlscontinue)?"""
        return slow_link(self.pacing.rate(peer))

    def dial_failed(self, peer: str, now: float) -> list[Action]:
        p = self.peers.get(peer)
        if p is not None:
            p.cm.dial_failed(now)
        return self._finish(now)

    def timer(self, now: float) -> list[Action]:
        for c in self.connections.expired(now):
            self.junction.drop(c, f"no handshake within {self.settings.handshake_timeout:g} s", now)
        self.channels.timers(now)
        self.latest.expire(now)
        self.junction.router_writes(self.router.tick(self.connections.open_ids(), now))
        self.junction.ordering_outputs(self.ordering.tick(now), now)
        self.junction.repair_offers(self.repairs.tick(now), now)
        return self._finish(now)

    def send(self, payload: bytes, dests: Sequence[str] | None, now: float, precedence: str = DEFAULT,
             expires_at: float | None = None, within: bool | Sequence[str] = True) -> tuple[SendResult, list[Action]]:
        """The local client sends ``payload`` to ``dests`` (None: every site) at ``precedence``; after
        ``expires_at`` (seconds since the epoch) it goes on as a stub only (``rcm.wire.envelope``).

        A message to a subset of the sites is *confined*: its content travels only among ``dests`` and this
        site (written only on paths whose relays are destinations, relayed and repaired only within them;
        a channel with no such path waits for one), and among the sites ``within`` names too; ``within=False``:
        not confined. docs/relay.md, "Confinement"."""
        sent = self.multicast.prepare(payload, dests, now, precedence, self.peers, expires_at, within)
        payload = bytes(payload)
        links: dict[str, int] = {}
        for d in sent.live:
            # 0: waiting in a lane of a paced channel, numbered when written (``rcm.channels.lanes``).
            peer = self.peers[d]
            links[d] = peer.out.offer(wire.DATA, sent.seq, sent.header, payload,
                                      self.channels.lane_for(peer, sent.lane)).link_seq
        self.multicast.sent(sent, payload, links)
        if sent.reach is not None:
            for d in sent.live:
                # Before anything is written: the channel's path leads only through the message's sites.
                self.channels.confine(self.peers[d], now)
        self.channels.multicast(sent.live, links, sent.seq, sent.header, payload, now)
        for d in sent.skipped:
            self.peers[d].missed_send(sent.seq)
        self.junction.ordering_outputs(sent.outputs, now)
        result = SendResult(f"{self.site}:{sent.seq}", sent.seq, list(sent.key) if sent.key is not None else None,
                            sent.skipped)
        return result, self._finish(now)

    def check_send(self, payload: bytes, dests: Sequence[str] | None) -> None:
        """``SendRefused`` if ``send(payload, dests, ...)`` could never be taken (a client's will, checked when
        it is left: rcm.server.localapi)."""
        self.multicast.check(payload, dests, self.peers)

    def publish(self, key: bytes, payload: bytes, expires_at: float, now: float) -> list[Action]:
        """A local client's latest-wins report (``rcm.latest``; ``LatestError`` out of bounds)."""
        self.latest.publish(key, payload, expires_at, now)
        return self._finish(now)

    def latest_entries(self, now: float) -> list[Latest]:
        """Every live latest-wins entry, for a local client that says hello."""
        return self.latest.live(now)

    def handshaking(self) -> int:
        """Accepted connections that have not finished their HELLO."""
        return self.connections.handshaking()

    def refused_at_edge(self) -> None:
        """The edge refused a connection for ``max_handshaking`` before the stack saw it (counted)."""
        self.connections.refused += 1

    def wire_sent(self, conn: Hashable, sent: int, plain: int, now: float) -> bool:
        """The edge put ``sent`` bytes on ``conn``'s socket in one write for ``plain`` bytes the stack wrote to it
        (link compression, TLS records): its peer's pacer counts what crossed the link (``Pacing.adjust``).
        True when a pacer moved (the stack's deadlines may have: the edge schedules again only then)."""
        c = self.connections.get(conn)
        if c is None or c.peer is None or not self.pacing.paced(c.peer):
            return False
        self.pacing.adjust(c.peer, sent, plain, now)
        return True

    def next_deadline(self) -> float | None:
        ds = [d for d in (self.channels.next_deadline(), self.router.next_deadline(),
                          self.connections.next_deadline(), self.ordering.next_deadline(),
                          self.repairs.next_deadline()) if d is not None]
        return min(ds) if ds else None

    # -- durability -------------------------------------------------------------
    def restore(self, log: Iterable[records.Record], now: float) -> list[Action]:
        """Rebuild state from the write-ahead log before ``start`` (``rcm.stack.recovery.restore``).

        Returns the deliveries of messages that were logged but not delivered
        before the restart (every peer is disconnected now, so they are
        delivered at once, in order-key order).
        """
        return recovery.restore(self, log, now)

    def snapshot_records(self) -> list[records.Record]:
        """The live state as log records, for a compacted log (``rcm.stack.recovery.snapshot``)."""
        return recovery.snapshot(self)

    # -- introspection --------------------------------------------------------
    def status(self, peer: str) -> str:
        return self.peers[peer].cm.status.value

    def statuses(self) -> dict[str, str]:
        return {p: self.peers[p].cm.status.value for p in self.peers}

    def vias(self) -> dict[str, str | None]:
        """Per peer, the next hop when only relays reach it (None: direct, or no path)."""
        return {name: self.channels.via(p) for name, p in self.peers.items()}

    def stats(self) -> dict[str, Any]:
        return {"site": self.site, "incarnation": self.incarnation, "ordering": self.ordering.name,
                "p2p": self.settings.p2p, "routing": self.terms.routing, "msg_seq": self.msg_seq,
                "held_back": self.ordering.pending_count(), "delivered": self.junction.delivered_local,
                "relay_forwarded": self.channels.forwarding.forwarded,
                "relay_dropped": self.channels.forwarding.dropped,
                "relay_stubbed": self.channels.forwarding.stubbed, "relay_cut": self.channels.forwarding.cut,
                "relay_confined": self.channels.forwarding.confined_forwarded,
                "relay_confined_dropped": self.channels.forwarding.confined_dropped,
                "handshakes_refused": self.connections.refused, "peers": self.channels.stats(),
                **self.router.stats(), **self.repairs.stats(), **self.latest.stats()}

    # -- the end of a batch --------------------------------------------------------------------------
    def _finish(self, now: float) -> list[Action]:
        """End of an input batch: routes once, announcements, repair, pacers, then the batch's actions."""
        if self.relaying and self.router.dirty:
            self.junction.update_paths(now)
        if self.router.confined or self.channels.stuck:
            self.channels.watch_confined(now)
        self.junction.ordering_outputs(self.ordering.flush(now), now)
        if self._written:       # an announcement held back for a peer written to anyway rides along
            self.junction.ordering_outputs(self.ordering.riding(self._written, now), now)
        if self.repairs.serving():
            backlog = {name: len(p.out) for name, p in self.peers.items()}
            self.junction.repair_offers(self.repairs.serve(now, backlog, self.junction.open_within), now)
        self.latest.flush(now)
        self.pacing.settle(now)
        for name in self._written:
            # Whatever went to a peer (a link-state advert, a SYNC, a relayed frame) tells it we are
            # alive as well as a heartbeat would: the heartbeat waits heartbeat_timeout after it.
            self.peers[name].cm.frame_sent(now)
        self._written.clear()
        out = list(self.out)
        self.out.clear()
        # A Close already carried its connection's bytes; the rest go out now, one Transmit per connection.
        out.extend(self.connections.flush())
        return out

    def _wrote(self, peer: str, n: int) -> None:
        """``n`` bytes were written to ``peer``'s connection (the connection layer tells)."""
        p = self.peers[peer]
        p.bytes_out += n
        p.frames_out += 1
        self._written.add(peer)
        self.pacing.charge(peer, n)
