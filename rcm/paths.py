"""The stack's outbound half: each peer's channel on its path, and the paths themselves.

``SiteStack`` (``rcm.stack``) is one object in several files by concern
(listed in ``rcm.stackbase``): ``rcm.stack`` (public events, the connection
manager glue, durability), ``rcm.inbound`` (frames in, the handshake),
``rcm.multicast`` (sends, the ordering protocol's outputs) and this one: a
channel's frames written on its path (the direct connection, numbered
implicitly, with piggybacked acks; or ROUTED frames to a next hop), link-state
(``rcm.linkstate``) turned into paths, the switch of a channel to a new path,
a multicast as one copy per next hop, relayed SYNCs, resends and acks. The
parts share the object's state; none reaches into a collaborator's fields.
See docs/relay.md.
"""
from __future__ import annotations

from typing import Any

from contracts.status import LinkStatus

from . import lanes, records, relay, wire
from .actions import StatusChange
from .connman import TcpState
from .linkstate import Advert
from .p2p import ANNOUNCE_IN_LANE, OutFrame
from .peer import Conn, Peer
from .relay import Direct, Path, Relay, Routed
from .stackbase import StackBase


class Paths(StackBase):
    """Paths and relayed sending (mixed into ``SiteStack``)."""

    # -- a peer's channel, on its path -------------------------------------------------
    def _send_frame(self, p: Peer, frame: list[Any], now: float, tail: Any = None) -> bool:
        """Write a frame on the peer's direct connection, piggybacking an ack (and ``tail`` after it)."""
        if p.conn is None:
            return False
        c = self.conns[p.conn]
        inb = p.inb
        acked = False
        # An ack rides only on the path the peer hears us on (relay paths ack with ROUTED ACKs).
        if (inb.unacked() or inb.frontier > c.tx_ack_base) and (not self.relaying or p.relay.path == Direct(c.id)):
            frame.append(inb.frontier - c.tx_ack_base)
            c.tx_ack_base = inb.acknowledged()
            acked = True
        if tail is not None:
            if not acked:
                frame.append(None)
            frame.append(tail)
        self._write(c, frame)
        p.cm.frame_sent(now)
        return True

    def _heartbeat(self, p: Peer, now: float) -> None:
        if p.conn is not None:
            self._send_frame(p, [wire.HEARTBEAT, self.conns[p.conn].tx_next % wire.CHECK_MOD], now)

    def _send_ack(self, p: Peer, now: float, flags: int = 0) -> None:
        """Acknowledge ``p``'s stream on the path it hears us on: a heartbeat, or a ROUTED ACK."""
        path = self._path(p)
        if isinstance(path, Direct) and not flags:
            self._heartbeat(p, now)
        elif path is not None:
            frontier = p.inb.acknowledged()
            ack = Routed(1, self.site, relay.stream_check(p.inb.peer_incarnation), ((p.name, frontier),),
                         wire.ACK, (flags,))
            self._send_routed(p, ack, now)

    def _acked(self, p: Peer, upto: int, now: float) -> None:
        """``p`` holds our stream up to ``upto``."""
        if p.out.ack(upto):
            if self.durable:
                self._persist(records.Acked(p.name, p.out.acked))
            p.relay.rto = self.rto_base
            p.relay.rto_at = now + p.relay.rto if p.out.sent_upto > p.out.acked and p.relay.rto_at else None
            if p.route_limit is not None and p.out.next_lane() is not None:
                self._pump(p, now)      # its window opened
        if p.out.held():
            self._resume_held(p, now)

    def _resume_held(self, p: Peer, now: float) -> None:
        """End a hold of ``p``'s stream (``Inbound._hello``): the peer acknowledged on the new connection
        (or its deadline passed). The stream goes on after what it holds, then the protocol's state."""
        start = p.out.release()
        c = self.conns.get(p.conn) if p.conn is not None else None
        if c is None:
            return
        if start is not None:
            self._write(c, [wire.SYNC, start, self.announce_gen])
            c.tx_next, c.tx_msg_base = start, 0
        self._pump(p, now)
        # Announcements were not sent while held (they must not overtake the frames): send the state now.
        self._ordering_outputs(self.ordering.resync(p.name, now), now)

    def _pump(self, p: Peer, now: float, fwd: tuple[int, list[int]] | None = None) -> None:
        """Write whatever the peer's channel may send now, on its path.

        Robust channels keep writing to a silent connection: TCP queues it, and
        if the connection dies the frontier exchange resends exactly what was
        lost. Only the tcp-suspect baseline holds frames back while suspected.
        Best-effort announcements never overtake reliable frames this way.
        ``fwd``: (msg_seq, [site, link_seq, ...]) copies of that message the
        peer relays on, carried on its DATA frame.
        """
        if p.out.lanes and (p.out.holding() or self._laned(p)):
            hop = self._hop_of(p)
            if hop is not None:
                self._service(hop, now)
            return
        path = self._path(p)
        if path is None:
            p.out.drop_unsendable()
            return
        if isinstance(path, Relay):
            hop = self.peers[path.hop]
            if hop.conn is None:
                return                  # the route is being recomputed: the frames wait
            frames = p.out.to_transmit()
            for f in frames:
                self._send_routed(p, Routed(1, self.site, relay.stream_check(self.incarnation),
                                            ((p.name, f.link_seq),), f.kind, _body(f)), now)
            if frames and p.relay.rto_at is None:
                p.relay.rto_at = now + p.relay.rto
            return
        c = self.conns.get(path.conn)
        if c is None:
            return
        if p.out.mode == "tcp-suspect" and p.cm.tcp is not TcpState.CONNECTED:
            return
        for f in p.out.to_transmit():
            self._write_direct(p, c, f, now, fwd)

    def _write_direct(self, p: Peer, c: Conn, f: OutFrame, now: float,
                      fwd: tuple[int, list[int]] | None = None) -> None:
        """One reliable frame of ``p``'s channel on its direct connection ``c`` (numbered implicitly)."""
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
        self._send_frame(p, frame, now, tail)

    # -- paced channels: lanes, highest first, at the neighbour's rate (rcm.lanes) -------------
    def _laned(self, p: Peer) -> bool:
        """Do ``p``'s new frames wait in lanes, numbered when written? While its path crosses a paced
        link, or it has no path yet (the next may); on an unpaced path they are numbered at once, so
        that a multicast crosses each link once."""
        if not p.out.lanes:
            return False
        path = self._path(p)
        if isinstance(path, Direct):
            return p.pacer is not None
        if isinstance(path, Relay):
            return self.peers[path.hop].pacer is not None or p.route_limit is not None
        return True

    def _lane_for(self, p: Peer, lane: int | None) -> int | None:
        """The lane a new frame for ``p`` waits in (None: numbered at once). Behind frames that
        already wait in lanes, always: a channel stays FIFO within a lane."""
        return lane if lane is not None and (self._laned(p) or p.out.holding()) else None

    def _may_write(self, q: Peer, now: float) -> bool:
        """Does ``q``'s route let it write a frame now (``rcm.lanes.RouteLimit``)?"""
        limit = q.route_limit
        return limit is None or limit.ready(q.out.in_flight(), now)

    def _hop_of(self, p: Peer) -> Peer | None:
        """The neighbour ``p``'s channel is written to now (``p`` itself when direct), if any."""
        path = self._path(p)
        if isinstance(path, Direct):
            return p if path.conn in self.conns else None
        if isinstance(path, Relay):
            hop = self.peers[path.hop]
            return hop if hop.conn is not None else None
        return None

    def _service(self, hop: Peer, now: float) -> None:
        """Write what the laned channels through neighbour ``hop`` hold, highest lane first, while
        ``hop``'s pacer lets us (frames numbered not yet written go before any lane: a resend), the
        urgent lanes taking at most their share while the ordered lane waits (``rcm.lanes.LaneShare``)."""
        if hop.pacer is not None and hop.cm.tcp is not TcpState.CONNECTED:
            # A silent link: what is written now would wait in the network, behind which no FLASH
            # can pass. It waits in the lanes until the neighbour is heard again (or a new connection).
            return
        chans = [q for q in self.peers.values() if q.out.lanes and self._hop_of(q) is hop]
        while hop.pacer is None or hop.pacer.ready(now):
            resend, best = self._candidates(chans, now)
            if resend is not None:
                self._write_lane_frame(resend, now)     # outside the share: the stream's order requires it
                continue
            fwd = hop.fwd
            relayed = [fwd.head(), fwd.head(lanes.ORDERED_LANE)] if fwd is not None else [None, None]
            if relayed[0] is not None and relayed[0][0] == lanes.ORDERED_LANE:
                relayed[0] = None
            waits = [best[c] is not None or relayed[c] is not None for c in (0, 1)]
            if not (waits[0] or waits[1]):
                return
            urgent = hop.pacer.share.urgent_next(*waits) if hop.pacer is not None else waits[0]
            mine, theirs = best[0 if urgent else 1], relayed[0 if urgent else 1]
            tie = theirs is not None and mine is not None and theirs[0] == mine[0]
            take_relayed = theirs is not None and (mine is None or theirs[0] < mine[0] or (tie and hop.fwd_turn))
            if tie:
                hop.fwd_turn = not take_relayed     # turn about
            floor = 0 if urgent else lanes.ORDERED_LANE
            written = hop.bytes_out         # the bytes on the wire (a clock announcement is a dozen)
            if take_relayed:
                self._write_forwarded(hop, now, floor)
            else:
                assert mine is not None
                q = mine[1]
                route = q.route_limit.pacer.share if q.route_limit is not None else None
                both = q.out.next_lane() != lanes.ORDERED_LANE and q.out.next_lane(lanes.ORDERED_LANE) is not None
                self._write_lane_frame(q, now, floor)
                if route is not None:
                    route.wrote(urgent, hop.bytes_out - written, both)
            if hop.pacer is not None:
                hop.pacer.share.wrote(urgent, hop.bytes_out - written, waits[0] and waits[1])

    def _candidates(self, chans: list[Peer], now: float
                    ) -> tuple[Peer | None, list[tuple[int, Peer] | None]]:
        """A channel with a numbered frame to write again (it goes first), or none and the best
        (lane, channel) of each class, urgent and ordered, among ``chans`` that may write now."""
        best: list[tuple[int, Peer] | None] = [None, None]
        for q in chans:
            if not self._may_write(q, now):
                continue
            offers = self._offers(q)
            if offers is None:
                return q, best
            for cls, ln in enumerate(offers):
                cand = best[cls]
                if ln is not None and (cand is None or ln < cand[0]):
                    best[cls] = (ln, q)
        return None, best

    def _offers(self, q: Peer) -> tuple[int | None, int | None] | None:
        """The lanes ``q``'s channel offers its hop now, (urgent, ordered), either None; None when it
        has a numbered frame to write again first. A channel paced to its route keeps the urgent
        share within its own stream: when it is the ordered lane's turn there, it offers only that."""
        ln = q.out.next_lane()
        if ln is not None and ln < 0:
            return None
        if ln is None or ln == lanes.ORDERED_LANE:
            return None, ln
        ordered = q.out.next_lane(lanes.ORDERED_LANE)
        limit = q.route_limit
        if limit is not None and not limit.pacer.share.urgent_next(True, ordered is not None):
            return None, ordered
        return ln, ordered

    def _write_forwarded(self, hop: Peer, now: float, floor: int = 0) -> None:
        """The next relayed frame waiting for paced neighbour ``hop`` (rcm.lanes.ForwardQueue), of lane
        ``floor`` or below."""
        assert hop.fwd is not None
        data, entries = hop.fwd.pop(floor)
        if hop.conn is None:
            self.relay_dropped += entries
            return
        self._write_bytes(self.conns[hop.conn], data)
        self.relay_forwarded += entries
        hop.cm.frame_sent(now)

    def _write_lane_frame(self, q: Peer, now: float, floor: int = 0) -> None:
        """Write ``q``'s next frame: a resend, else the head of its highest lane from ``floor`` down."""
        taken = q.out.take(floor)
        if taken is None:
            return
        f, numbered = taken
        if q.route_limit is not None:
            q.route_limit.wrote(lanes.frame_bytes(f.kind, f.payload), now)
        if numbered and self.durable:
            body = [f.msg_seq, f.header, f.payload] if f.kind == wire.DATA else f.payload
            self._persist(records.Outbound(q.name, f.link_seq, f.kind, body))
        path = self._path(q)
        if isinstance(path, Direct):
            if f.kind == ANNOUNCE_IN_LANE:
                self._send_frame(q, [wire.ANNOUNCE, self.announce_gen, f.payload], now)
            else:
                c = self.conns[path.conn]
                if f.link_seq != c.tx_next:
                    # Acknowledged by a relay path while it waited for the pacer: the peer holds
                    # the frames before it, so the stream on this connection resumes here.
                    self._write(c, [wire.SYNC, f.link_seq, self.announce_gen])
                    c.tx_next, c.tx_msg_base = f.link_seq, 0
                self._write_direct(q, c, f, now)
        elif isinstance(path, Relay):
            if f.kind == ANNOUNCE_IN_LANE:
                # After the last frame of the stream: applied once those arrived.
                self._send_routed(q, Routed(1, self.site, relay.stream_check(self.incarnation),
                                            ((q.name, q.out.next_seq - 1),), wire.ANNOUNCE,
                                            (self.boot, self.announce_gen, f.payload)), now)
                return
            self._send_routed(q, Routed(1, self.site, relay.stream_check(self.incarnation),
                                        ((q.name, f.link_seq),), f.kind, _body(f)), now)
            if q.relay.rto_at is None:
                q.relay.rto_at = now + q.relay.rto

    def _service_due(self, now: float) -> None:
        """Timer: every paced neighbour whose laned channels wait gets written to, if its pacer allows."""
        hops: dict[str, Peer] = {}
        for q in self.peers.values():
            if q.out.lanes and q.out.next_lane() is not None:
                hop = self._hop_of(q)
                if hop is not None:
                    hops[hop.name] = hop
            if q.fwd is not None and q.fwd.streams:
                hops[q.name] = q
        for hop in hops.values():
            self._service(hop, now)

    def _paced_deadline(self) -> float | None:
        """When a paced neighbour with waiting frames may be written to next."""
        ds: list[float] = []
        for q in self.peers.values():
            if q.out.lanes and q.out.next_lane() is not None:
                at = self._lanes_ready_at(q)
                if at is not None:
                    ds.append(at)
            if q.fwd is not None and q.fwd.streams and q.pacer is not None and q.cm.tcp is TcpState.CONNECTED:
                ds.append(q.pacer.ready_at())
        return min(ds) if ds else None

    def _lanes_ready_at(self, q: Peer) -> float | None:
        """When ``q``'s waiting frames may be written, if time is what they wait for: None when they
        go at once (nothing paces them) or wait for something else (a silent link, an acknowledgement)."""
        hop = self._hop_of(q)
        if hop is None or (hop.pacer is not None and hop.cm.tcp is not TcpState.CONNECTED):
            return None
        at = hop.pacer.ready_at() if hop.pacer is not None else None
        limit = q.route_limit
        if limit is not None:
            if not limit.open(q.out.in_flight()):
                return None         # a full window opens with an acknowledgement
            at = limit.pacer.ready_at() if at is None else max(at, limit.pacer.ready_at())
        return at

    def _path(self, p: Peer) -> Path | None:
        """The way ``p``'s channel goes now: its direct connection, a relay, or none."""
        if self.relaying:
            return p.relay.path
        return Direct(p.conn) if p.conn is not None else None

    def _via(self, p: Peer) -> str | None:
        path = p.relay.path
        return path.hop if isinstance(path, Relay) and p.cm.status is LinkStatus.CONNECTED else None

    # -- relaying: sending ------------------------------------------------------------------------
    def _multicast(self, live: list[str], links: dict[str, int], seq: int, header: Any, payload: bytes,
                   now: float) -> None:
        """A new message to its live destinations: one copy per next hop.

        Destinations reached through the same neighbour share one ROUTED frame;
        if that neighbour is a destination itself, its DATA frame carries the
        others (``fwd``). Destinations with a backlog on their path go alone.
        """
        relayed: dict[str, list[tuple[str, int]]] = {}
        alone: list[str] = []
        for d in live:
            p = self.peers[d]
            path = p.relay.path
            if (isinstance(path, Relay) and self.peers[path.hop].conn is not None
                    and p.out.sent_upto == links[d] - 1):
                p.out.to_transmit()     # just this frame: it goes in the shared copy
                relayed.setdefault(path.hop, []).append((d, links[d]))
                if p.relay.rto_at is None:
                    p.relay.rto_at = now + p.relay.rto
            else:
                alone.append(d)
        for d in alone:
            p = self.peers[d]
            fwd = None
            if d in relayed and isinstance(p.relay.path, Direct) and p.out.sent_upto == links[d] - 1:
                fwd = (seq, [x for dest, ls in relayed.pop(d) for x in (self.index[dest], ls)])
            self._pump(p, now, fwd)
        for hop, entries in relayed.items():
            r = Routed(1, self.site, relay.stream_check(self.incarnation), tuple(entries), wire.DATA,
                       (seq, header, payload))
            self._write_routed(hop, r, now)

    def _send_routed(self, dest: Peer, r: Routed, now: float) -> bool:
        """A ROUTED frame for ``dest`` on its path (its direct connection, or its next hop)."""
        path = self._path(dest)
        if isinstance(path, Relay):
            dest.relay.counters["relayed_out"] += 1
            return self._write_routed(path.hop, r, now)
        if isinstance(path, Direct):
            return self._write_routed(dest.name, r, now)
        return False

    def _write_routed(self, hop: str, r: Routed, now: float) -> bool:
        """Write ``r`` on the connection to neighbour ``hop``."""
        p = self.peers[hop]
        if p.conn is None:
            return False
        self._write(self.conns[p.conn], relay.encode(r, self.index))
        p.cm.frame_sent(now)
        return True

    def _resend(self, p: Peer, now: float) -> None:
        """Start a relayed run again after the last acknowledged frame (a relayed SYNC, then the frames)."""
        p.out.rewind()
        p.relay.sync_sent_at = now
        p.relay.counters["resends"] += 1
        p.relay.rto_at = None
        sync = Routed(1, self.site, relay.stream_check(self.incarnation), ((p.name, p.out.acked + 1),),
                      wire.SYNC, (self.incarnation, self.boot, self.announce_gen))
        self._send_routed(p, sync, now)
        self._pump(p, now)

    def _write_advert(self, c: Conn, ad: Advert) -> None:
        before = len(self._tx.get(c.id, ()))
        self._write(c, self.links.encode(ad))
        self.advert_bytes += len(self._tx[c.id][before])

    def _flood(self, ad: Advert, but: Any = ()) -> None:
        """Send a link-state advert on every open connection (but those in ``but``)."""
        for c in self.conns.values():
            if c.open and c.id not in but:
                self._write_advert(c, ad)

    def _update_paths(self, now: float) -> None:
        """Recompute routes, advertise our links if they changed, and move channels to their new paths."""
        self._routes_dirty = False
        # We advertise the links we hear on; we send on those the other end hears on too.
        hearing = {n for n, p in self.peers.items() if p.conn is not None and p.cm.tcp is TcpState.CONNECTED}
        usable = {n for n in hearing if self._two_way(self.peers[n])}
        ad = self.links.set_own(hearing)
        # A neighbour on a new connection, or one usable again (a fade lifted), gets the whole
        # database: what it missed meanwhile, and the confirmation of what it holds as stale.
        revived = [self.peers[n].conn for n in sorted(usable - self._usable)]
        new_conns = list(dict.fromkeys([*self._db_due, *revived]))
        self._db_due, self._usable = [], usable
        if ad is not None:
            self._flood(ad, but=new_conns)
        for cid in new_conns:
            if cid in self.conns and self.conns[cid].open:
                for a in self.links.adverts():
                    self._write_advert(self.conns[cid], a)
        fresh = {n for n in usable if self.peers[n].relay.hears_us is not None}
        for confirmed in self.links.vouch(fresh):
            self._flood(confirmed)
        routes = self.links.routes(usable, fresh)
        self.links.unreachable(routes)
        self._next_hops = {d: r.next_hop for d, r in routes.items()}
        for name, p in self.peers.items():
            r = routes.get(name)
            # Reachable without the direct link? Then losing it is not an outage: no blip of
            # suspicion (and of early deliveries) while the route moves to a relay.
            if name in usable:
                alt = self.links.routes(usable - {name}, fresh).get(name)
                relayed = alt is not None
            else:
                relayed = r is not None
            new: Path | None
            if name in usable:
                new = Direct(p.conn)
            elif r is not None:
                new = Relay(r.next_hop)
            elif p.conn is not None:
                new = Direct(p.conn)      # a silent connection: TCP queues, the frontier resends
            else:
                new = None
            slowest = r.slowest if isinstance(new, Relay) and r is not None else None
            if slowest is None:
                p.route_limit = None
            elif p.route_limit is None or p.route_limit.rate != slowest:
                p.route_limit = lanes.RouteLimit(slowest)
            if new != p.relay.path:
                p.relay.path = new
                self._switch(p, new, now)
            self._effects(p, p.cm.path_changed(relayed, now, deaf=p.relay.hears_us is False), now)
            if p.relay.reported != (p.cm.status.value, self._via(p)):
                self._report(p)

    def _two_way(self, p: Peer) -> bool:
        """Is our direct link to ``p`` usable both ways? Not once ``p`` tells us, on it, that it does not hear us.

        Only ``p``'s own adverts on this connection count: they follow its handshake, while one
        relayed by others may be older than the connection."""
        return p.relay.hears_us is not False

    def _switch(self, p: Peer, new: Path | None, now: float) -> None:
        """``p``'s channel takes a new path: everything not acknowledged goes again, on it."""
        p.relay.rto, p.relay.rto_at = self.rto_base, None
        if new is None:
            return
        p.out.rewind()
        self.announce_gen = relay.next_generation(self.announce_gen)
        if isinstance(new, Direct):
            c = self.conns[new.conn]
            self._write(c, [wire.SYNC, p.out.acked + 1, self.announce_gen])
            c.tx_next, c.tx_msg_base = p.out.acked + 1, 0
            self._pump(p, now)
        else:
            self._resend(p, now)
        # Announcements sent on the old path may be lost: the protocol sends its state again.
        self._ordering_outputs(self.ordering.resync(p.name, now), now)

    def _report(self, p: Peer) -> None:
        via = self._via(p)
        p.relay.reported = (p.cm.status.value, via)
        self._out.append(StatusChange(p.name, p.cm.status.value, via))


def _body(f: OutFrame) -> tuple[Any, ...]:
    """A channel frame's body as a ROUTED frame carries it."""
    if f.kind == wire.DATA:
        return (f.msg_seq, f.header, f.payload)
    return (f.payload,)
