"""Writing each peer's channel on its path: direct, relayed, paced (sans-IO; part of the channel layer).

Theory of operation (docs/rcm.md, docs/relay.md)
-----------------------------------------------
The channel layer (``rcm.channels.layer``) keeps each channel's state: its
path and confinement, acknowledgements, holds, gaps, resends and timers. This
module puts the channels' frames on the wire, on the path the routing layer
gives each (``path``), through the connection layer (``rcm.channels.connections``):

* on the direct connection, numbered implicitly after a SYNC, each frame
  carrying the acknowledgement of the peer's stream when one is due
  (``send_frame``; an acknowledgement alone is a HEARTBEAT, ``send_ack``);
* through a relay, as ROUTED frames naming their link sequence numbers; a
  multicast to several destinations behind one neighbour is one frame, and
  one whose neighbour is a destination itself rides on that one's DATA frame
  (``multicast``). An acknowledgement alone is a ROUTED ACK, on the path that
  carries no content (``Router.unconfined``).

On a paced link the channel's new frames wait in lanes (``rcm.channels.lanes``)
and the pacing layer (``rcm.channels.pacing``) decides which goes when:
a resend first, then the highest lane within the urgent share, the frames
this site relays for others (``rcm.channels.forwarding``, hosted here because
they share the link's turns) and LATEST frames (``WriterHooks``) in their
turn. This module writes what it chose (``service``), numbering a lane frame
only when written, and on a paced direct link a large frame a piece at a time
(``rcm.channels.fragments``), so a FLASH waits at most one piece behind it.

It writes the channel layer's records (``Peer``, ``Conn``, ``OutFrame``) as the
writing requires (a connection's delta bases, a relayed run's retransmission
deadline, a frame's pieces) and appends ``Persist`` for a frame numbered when
written; announcement generations it only reads (the layer moves them on).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from contracts.mission import RcmSettings
from rcm import wire
from rcm.actions import Action, Persist
from rcm.channels import fragments, lanes
from rcm.channels.connections import Connections
from rcm.channels.forwarding import Forwarding
from rcm.channels.p2p import ANNOUNCE_IN_LANE, OutFrame
from rcm.channels.pacing import Forwarded, LaneFrame, LatestTurn, Pacing, Resend
from rcm.channels.peer import Conn, Peer
from rcm.connman import TcpState
from rcm.durability import records
from rcm.routing import relay
from rcm.routing.relay import Direct, Path, Relay, Routed
from rcm.routing.router import Router


class WriterHooks(Protocol):
    """What the writing asks of the layers above it (the stack composes them; ``ChannelHooks`` extends it)."""

    def latest_waiting(self, neighbour: str) -> bool:
        """Has ``neighbour`` LATEST frames (``rcm.latest``) that may be written now?"""

    def latest_write(self, hop: Peer, now: float) -> bool:
        """Write ``hop``'s next LATEST frame; False if none was live."""


class ChannelWriter:
    """Writes the peers' channels of one site (see the module docstring)."""

    def __init__(self, site: str, incarnation: int, boot: int, settings: RcmSettings, durable: bool,
                 peers: Mapping[str, Peer], announce_gens: Mapping[str, int], connections: Connections,
                 router: Router, pacing: Pacing, out: list[Action], hooks: WriterHooks) -> None:
        """``announce_gens``: the layer's announcement generation per peer channel (read only here)."""
        self.site = site
        self.incarnation = incarnation      # identity of this site's reliable stream
        self.boot = boot
        self.relaying = settings.relaying
        self.durable = durable
        self.peers = peers
        self.announce_gens = announce_gens
        self.connections = connections
        self.router = router
        self.pacing = pacing
        self.out = out
        self.hooks = hooks
        self.index = router.index
        self.forwarding = Forwarding(settings, peers, connections, router, pacing, self.service)

    # -- the path --------------------------------------------------------------------------------------
    def path(self, p: Peer) -> Path | None:
        """The way ``p``'s channel goes now: its direct connection, a relay, or none."""
        return self.router.path(p.name, p.conn)

    def hop_of(self, p: Peer) -> Peer | None:
        """The neighbour ``p``'s channel is written to now (``p`` itself when direct), if any."""
        path = self.path(p)
        if isinstance(path, Direct):
            return p if path.conn in self.connections else None
        if isinstance(path, Relay):
            hop = self.peers[path.hop]
            return hop if hop.conn is not None else None
        return None

    def laned(self, p: Peer) -> bool:
        """Do ``p``'s new frames wait in lanes, numbered when written (``rcm.channels.pacing.Pacing.laned``)?"""
        return bool(p.out.lanes) and self.pacing.laned(p.name, self.path(p))

    # -- writing on the direct connection --------------------------------------------------------------
    def send_frame(self, p: Peer, frame: list[Any], now: float, tail: Any = None) -> bool:
        """Write a frame on the peer's direct connection, piggybacking an ack (and ``tail`` after it)."""
        if p.conn is None:
            return False
        c = self.connections[p.conn]
        inb = p.inb
        acked = False
        # An ack rides only on the path the peer hears us on (relay paths ack with ROUTED ACKs).
        if (inb.unacked() or inb.frontier > c.tx_ack_base) and (not self.relaying or self.path(p) == Direct(c.id)):
            frame.append(inb.frontier - c.tx_ack_base)
            c.tx_ack_base = inb.acknowledged()
            acked = True
        if tail is not None:
            if not acked:
                frame.append(None)
            frame.append(tail)
        self.connections.write(c, frame)
        p.cm.frame_sent(now)
        return True

    def heartbeat(self, p: Peer, now: float) -> None:
        if p.conn is not None:
            self.send_frame(p, [wire.HEARTBEAT, self.connections[p.conn].tx_next % wire.CHECK_MOD], now)

    def send_ack(self, p: Peer, now: float, flags: int = 0) -> None:
        """Acknowledge ``p``'s stream on the path it hears us on: a heartbeat, or a ROUTED ACK. An ACK carries
        no content: it takes the unconfined path (``Router.unconfined``), even while our own channel to ``p``
        waits for a path within its confined frames' sites. A relayed ACK takes along what we have not yet
        acknowledged of the other streams whose acknowledgements go through the same neighbour, due or not
        (one frame for all, each entry naming its stream's check: ``relay.ack_value``): a site receives
        every origin's messages, and they are due at different moments."""
        path = self.router.unconfined(p.name, p.conn)
        if isinstance(path, Direct) and not flags:
            self.heartbeat(p, now)
        elif path is not None:
            entries = [(p.name, relay.ack_value(p.inb.acknowledged(), relay.stream_check(p.inb.peer_incarnation)))]
            if isinstance(path, Relay) and not flags:
                for q in self.peers.values():
                    if q is not p and q.inb.unacked() and self.router.unconfined(q.name, q.conn) == path:
                        q.relay.counters["relayed_out"] += 1
                        entries.append((q.name, relay.ack_value(q.inb.acknowledged(),
                                                                relay.stream_check(q.inb.peer_incarnation))))
            self.write_ack(p, Routed(1, self.site, 0, tuple(entries), wire.ACK, (flags,)), now)

    def write_ack(self, p: Peer, ack: Routed, now: float) -> None:
        """A ROUTED ACK of ``p``'s stream on the unconfined path (it carries no content: ``send_ack``)."""
        path = self.router.unconfined(p.name, p.conn)
        if isinstance(path, Relay):
            p.relay.counters["relayed_out"] += 1
            self.write_routed(path.hop, ack, now)
        elif isinstance(path, Direct):
            self.write_routed(p.name, ack, now)

    def write_direct(self, p: Peer, c: Conn, f: OutFrame, now: float,
                     fwd: tuple[int, list[int]] | None = None) -> None:
        """One reliable frame of ``p``'s channel on its direct connection ``c`` (numbered implicitly); its
        stub when its message expired (``rcm.wire.envelope``)."""
        p.out.expire(f, now)
        check = f.link_seq % wire.CHECK_MOD
        tail = None
        if f.kind == wire.DATA:
            frame = [wire.DATA, check, f.msg_seq - c.tx_msg_base, f.header, f.payload]
            c.tx_msg_base = f.msg_seq
            if fwd is not None and fwd[0] == f.msg_seq:
                tail = fwd[1]
        else:
            frame = [f.kind, check, f.payload]
        c.tx_next = f.link_seq + 1
        self.send_frame(p, frame, now, tail)

    def pump(self, p: Peer, now: float, fwd: tuple[int, list[int]] | None = None) -> None:
        """Write whatever the peer's channel may send now, on its path.

        Robust channels keep writing to a silent connection: TCP queues it, and
        if the connection dies the frontier exchange resends exactly what was
        lost. Only the tcp-suspect baseline holds frames back while suspected.
        Best-effort announcements never overtake reliable frames this way.
        ``fwd``: (msg_seq, [site, link_seq, ...]) copies of that message the
        peer relays on, carried on its DATA frame.
        """
        if p.out.lanes and (p.out.holding() or self.laned(p)):
            hop = self.hop_of(p)
            if hop is not None:
                self.service(hop, now)
            return
        path = self.path(p)
        if path is None:
            p.out.drop_unsendable()
            return
        if isinstance(path, Relay):
            hop = self.peers[path.hop]
            if hop.conn is None:
                return                  # the route is being recomputed: the frames wait
            frames = p.out.to_transmit()
            for f in frames:
                p.out.expire(f, now)
                self.send_routed(p, Routed(1, self.site, relay.stream_check(self.incarnation),
                                           ((p.name, f.link_seq),), f.kind, _body(f)), now)
            if frames and p.relay.rto_at is None:
                p.relay.rto_at = now + p.relay.rto
            return
        c = self.connections.get(path.conn)
        if c is None:
            return
        if p.out.mode == "tcp-suspect" and p.cm.tcp is not TcpState.CONNECTED:
            return
        for f in p.out.to_transmit():
            self.write_direct(p, c, f, now, fwd)

    # -- paced links: the pacing layer decides, this layer writes --------------------------------------
    def service(self, hop: Peer, now: float) -> None:
        """Write what the laned channels through neighbour ``hop`` hold, and its LATEST frames, as long as
        ``hop``'s link takes frames (``rcm.channels.pacing``: a resend first, then highest lane first within
        the urgent share, LATEST frames sharing the ordered lane's turn when the link is idle)."""
        if self.pacing.paced(hop.name) and hop.cm.tcp is not TcpState.CONNECTED:
            # A silent link: what is written now would wait in the network, behind which no FLASH
            # can pass. It waits in the lanes until the neighbour is heard again (or a new connection).
            return
        chans = {q.name: q.out for q in self.peers.values() if q.out.lanes and self.hop_of(q) is hop}
        while self.pacing.ready(hop.name, now):
            choice = self.pacing.choose(hop.name, chans, now, self.hooks.latest_waiting(hop.name))
            if choice is None:
                return
            if isinstance(choice, Resend):
                self.write_lane_frame(self.peers[choice.peer], now)   # outside the share: the stream's order
                continue
            written = hop.bytes_out         # the bytes on the wire (a clock announcement is a dozen)
            if isinstance(choice, LatestTurn):
                self.hooks.latest_write(hop, now)
            elif isinstance(choice, Forwarded):
                self.forwarding.write(hop, now, choice.floor)
            else:
                assert isinstance(choice, LaneFrame)
                self.write_lane_frame(self.peers[choice.peer], now, choice.floor)
            self.pacing.wrote(hop.name, choice, hop.bytes_out - written)
            if not isinstance(choice, LatestTurn) and choice.urgent and hop.conn is not None:
                self.connections.urgent(hop.conn)       # written at once, not lingering (connections.py)

    def write_lane_frame(self, q: Peer, now: float, floor: int = 0) -> None:
        """Write ``q``'s next frame: a resend, else the head of its highest lane from ``floor`` down (on a
        paced direct link, a large one a piece at a time: ``rcm.channels.fragments``)."""
        piece = self.next_piece(q, floor, now)
        if piece is not None and not piece[1]:
            return                      # a piece went; the frame waits at the head of its lane for the next
        taken = q.out.take(floor)
        if taken is None:
            return
        f, numbered = taken
        q.out.expire(f, now)            # its turn came after its expiry: the stub goes (rcm.wire.envelope)
        self.pacing.wrote_on_route(q.name, lanes.frame_bytes(f.kind, f.payload), now)
        if numbered and self.durable:
            body = [f.msg_seq, f.header, f.payload] if f.kind == wire.DATA else f.payload
            self.out.append(Persist(records.Outbound(q.name, f.link_seq, f.kind, body)))
        path = self.path(q)
        if isinstance(path, Direct):
            if f.kind == ANNOUNCE_IN_LANE:
                self.send_frame(q, [wire.ANNOUNCE, self.announce_gens[q.name], f.payload], now)
            else:
                c = self.connections[path.conn]
                if f.link_seq != c.tx_next:
                    # Acknowledged by a relay path while it waited for the pacer: the peer holds
                    # the frames before it, so the stream on this connection resumes here.
                    self.connections.write(c, [wire.SYNC, f.link_seq, self.announce_gens[q.name]])
                    c.tx_next, c.tx_msg_base = f.link_seq, 0
                if piece is not None:
                    self.last_piece(q, c, f, piece[0], now)
                else:
                    self.write_direct(q, c, f, now)
        elif isinstance(path, Relay):
            if f.kind == ANNOUNCE_IN_LANE:
                # After the last frame of the stream: applied once those arrived.
                value = relay.announce_value(q.out.next_seq - 1, self.announce_gens[q.name])
                self.send_routed(q, Routed(1, self.site, relay.stream_check(self.incarnation),
                                           ((q.name, value),), wire.ANNOUNCE, (self.boot, f.payload)), now)
                return
            self.send_routed(q, Routed(1, self.site, relay.stream_check(self.incarnation),
                                       ((q.name, f.link_seq),), f.kind, _body(f)), now)
            if q.relay.rto_at is None:
                q.relay.rto_at = now + q.relay.rto

    def next_piece(self, q: Peer, floor: int, now: float) -> tuple[bytes, bool] | None:
        """On a paced direct link, when ``q``'s next lane frame is larger than a piece: write its next piece
        unless it is the last, and return (that piece, is it the last); None: the frame goes whole."""
        path = self.path(q)
        size = self.pacing.fragment_size(q.name) if isinstance(path, Direct) else None
        if size is None:
            return None
        assert isinstance(path, Direct)
        f = q.out.head(floor)
        if f is None or f.kind == ANNOUNCE_IN_LANE:
            return None
        if q.out.expire(f, now):
            # Expired while it went in pieces: its stub goes whole (the peer drops the partial frame at the
            # next offset 0 of that lane, or with the connection).
            f.frag = None
        if f.frag is None or f.frag.conn != path.conn:
            # Not started, or started on a connection that is gone (the peer dropped its partial frame).
            if isinstance(f.payload, (bytes, bytearray)) and len(f.payload) <= size - 32:
                return None
            data = fragments.inner(f)
            if len(data) <= size:
                return None
            f.frag = fragments.Outgoing(path.conn, data)
        out = f.frag
        n = fragments.piece(len(out.data), size)
        chunk = out.data[out.sent:out.sent + n]
        if out.sent + n < len(out.data):
            c = self.connections[path.conn]
            self.connections.write(c, [wire.FRAG, f.lane, out.sent, chunk])
            out.sent += n
            q.fragments_out += 1
            q.cm.frame_sent(now)
            return chunk, False
        return chunk, True

    def last_piece(self, q: Peer, c: Conn, f: OutFrame, chunk: bytes, now: float) -> None:
        """The last piece of ``f``, numbered just now: it completes the frame in the stream (its check byte,
        the acknowledgement riding on it)."""
        assert f.frag is not None
        offset = f.frag.sent
        f.frag = None
        c.tx_next = f.link_seq + 1
        if f.kind == wire.DATA:
            c.tx_msg_base = f.msg_seq
        q.fragments_out += 1
        self.send_frame(q, [wire.FRAG, f.lane, offset, chunk, f.link_seq % wire.CHECK_MOD], now)

    def service_due(self, now: float) -> None:
        """Timer: every paced neighbour whose laned channels wait gets written to, if its pacer allows."""
        hops: dict[str, Peer] = {}
        forwarding = set(self.pacing.forwarding())
        for q in self.peers.values():
            if q.out.lanes and q.out.next_lane() is not None:
                hop = self.hop_of(q)
                if hop is not None:
                    hops[hop.name] = hop
            if q.name in forwarding or (self.pacing.paced(q.name) and self.hooks.latest_waiting(q.name)):
                hops[q.name] = q
        for hop in hops.values():
            self.service(hop, now)

    def paced_deadline(self) -> float | None:
        """When a paced neighbour with waiting frames may be written to next."""
        ds: list[float] = []
        for q in self.peers.values():
            ln = q.out.next_lane() if q.out.lanes else None
            if ln is not None:
                hop = self.hop_of(q)
                at = self.pacing.ready_at(hop.name if hop is not None else None, q.name, q.out,
                                          hop is not None and hop.cm.tcp is TcpState.CONNECTED)
                if at is not None and hop is not None and ln == lanes.ORDERED_LANE:
                    at = self.pacing.after_latest(hop.name, at, self.hooks.latest_waiting(hop.name))
                if at is not None:
                    ds.append(at)
            if q.cm.tcp is TcpState.CONNECTED:
                waiting = self.hooks.latest_waiting(q.name)
                at = self.pacing.forward_ready_at(q.name)
                if at is not None:
                    ds.append(self.pacing.after_latest(q.name, at, waiting, forwarded=True))
                if waiting:
                    at = self.pacing.idle_at(q.name)         # a LATEST frame waits for an idle link
                    if at is not None:
                        ds.append(at)
        return min(ds) if ds else None

    # -- relayed sending -------------------------------------------------------------------------------
    def multicast(self, live: list[str], links: dict[str, int], seq: int, header: Any, payload: bytes,
                  now: float) -> None:
        """A new message to its live destinations: one copy per next hop.

        Destinations reached through the same neighbour share one ROUTED frame;
        if that neighbour is a destination itself, its DATA frame carries the
        others (``fwd``). Destinations with a backlog on their path go alone,
        as every destination does when the mission does not relay (direct paths only).
        """
        relayed, alone = self._shared_copies(live, links, now)
        for d in alone:
            p = self.peers[d]
            fwd = None
            if d in relayed and isinstance(self.path(p), Direct) and p.out.sent_upto == links[d] - 1:
                fwd = (seq, [x for dest, ls in relayed.pop(d) for x in (self.index[dest], ls)])
            self.pump(p, now, fwd)
        for hop, entries in relayed.items():
            r = Routed(1, self.site, relay.stream_check(self.incarnation), tuple(entries), wire.DATA,
                       (seq, header, payload))
            self.write_routed(hop, r, now)

    def multicast_control(self, live: list[str], links: dict[str, int], body: Any, now: float) -> None:
        """A reliable control frame (the same ``body`` in each of ``live``'s channels, at ``links``): the
        destinations reached through the same neighbour share one ROUTED CTRL frame, as a message's do
        (``multicast``; a sequencer's assignments go to every site); the others are pumped."""
        relayed, alone = self._shared_copies(live, links, now)
        for d in alone:
            self.pump(self.peers[d], now)
        for hop, entries in relayed.items():
            self.write_routed(hop, Routed(1, self.site, relay.stream_check(self.incarnation), tuple(entries),
                                          wire.CTRL, (body,)), now)

    def _shared_copies(self, live: list[str], links: dict[str, int],
                       now: float) -> tuple[dict[str, list[tuple[str, int]]], list[str]]:
        """Of ``live``, whose channels' next frame is the one at ``links``: those on a relay path with
        nothing before it to send, grouped by next hop (the frame is taken as sent: it goes in the shared
        copy), and the others."""
        relayed: dict[str, list[tuple[str, int]]] = {}
        alone: list[str] = []
        for d in live:
            p = self.peers[d]
            path = self.path(p)
            if (isinstance(path, Relay) and self.peers[path.hop].conn is not None
                    and p.out.sent_upto == links[d] - 1):
                p.out.to_transmit()     # just this frame: it goes in the shared copy
                relayed.setdefault(path.hop, []).append((d, links[d]))
                if p.relay.rto_at is None:
                    p.relay.rto_at = now + p.relay.rto
            else:
                alone.append(d)
        return relayed, alone

    def send_routed(self, dest: Peer, r: Routed, now: float) -> bool:
        """A ROUTED frame for ``dest`` on its path (its direct connection, or its next hop)."""
        path = self.path(dest)
        if isinstance(path, Relay):
            dest.relay.counters["relayed_out"] += 1
            return self.write_routed(path.hop, r, now)
        if isinstance(path, Direct):
            return self.write_routed(dest.name, r, now)
        return False

    def write_routed(self, hop: str, r: Routed, now: float) -> bool:
        """Write ``r`` on the connection to neighbour ``hop``."""
        p = self.peers[hop]
        if p.conn is None:
            return False
        self.connections.write(self.connections[p.conn], relay.encode(r, self.index))
        p.cm.frame_sent(now)
        return True


def _body(f: OutFrame) -> tuple[Any, ...]:
    """A channel frame's body as a ROUTED frame carries it."""
    if f.kind == wire.DATA:
        return (f.msg_seq, f.header, f.payload)
    return (f.payload,)
