"""The stack's inbound half: what a frame from a connection does.

``SiteStack`` (``rcm.stack``) is one object in several files sharing its
state (listed in ``rcm.stackbase``): this one takes frames from connections
(the handshake, the frames of a peer's channel on its direct connection,
ROUTED frames to take or forward, link-state adverts); ``rcm.stack`` holds
the public events and the glue to the connection manager, ``rcm.paths`` the
outbound half (sending on paths), ``rcm.multicast`` the glue to the ordering
protocol. Splitting by concern keeps each file readable; the parts are one
object, so none reaches into another's collaborators.

A channel frame is taken at most once, whichever way it came: on the direct
connection it is numbered implicitly after the peer's SYNC
(``InboundChannel.accept``), in a ROUTED frame explicitly
(``InboundChannel.accept_at``); both move the same frontier. The ordering
protocol checks a frame before it is counted, logged or acknowledged.
"""
from __future__ import annotations

from typing import Any

from contracts.status import LinkStatus
from ordering import KEY_INT_MAX, honest_ceiling

from . import handshake, lanes, ranges, records, relay, wire
from .actions import Log, Missing, ProtocolViolation
from .peer import MISSED_RANGES_MAX, Conn, Peer
from .relay import Direct, Relay, Routed
from .stackbase import StackBase


def _short(value: Any, limit: int = 80) -> str:
    """``repr(value)`` cut to ``limit`` characters, for reasons and logs."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


class Inbound(StackBase):
    """Frames from connections (mixed into ``SiteStack``)."""

    # -- dispatch -------------------------------------------------------------------------
    def _frame(self, c: Conn, f: list[Any], now: float) -> None:
        kind = f[0]
        if not c.open:
            if kind == wire.HELLO:
                self._hello(c, f, now)
                return
            if kind == wire.BYE:
                self._refused_by_peer(c, f, now)
                return
            raise ProtocolViolation(f"{wire.FRAME_NAMES.get(kind, kind)} frame before HELLO")
        p = self.peers[c.peer]  # type: ignore[index]
        p.frames_in += 1
        self._effects(p, p.cm.frame_received(now), now)
        try:
            if kind == wire.DATA:
                _, check, dseq, header, payload, *rest = f
                # The delta is negative after an urgent message overtook older ones (rcm.lanes).
                if type(dseq) is not int or dseq == 0 or not isinstance(payload, bytes):
                    raise ProtocolViolation("malformed DATA frame")
                self._check(p, check)
                seq = c.rx_msg_base + dseq
                if seq < 1:
                    raise ProtocolViolation(f"message sequence number {seq} below 1")
                if seq > honest_ceiling(now):
                    raise ProtocolViolation(f"message sequence number {seq} is beyond what any honest site can "
                                            "have sent by now")
                c.rx_msg_base = seq
                self._ack_in(c, p, rest, now)
                if p.inb.next_is_new():
                    self._data(p, seq, header, payload, now)
                else:
                    p.inb.accept(now)
                if len(rest) > 1 and self.relaying:
                    self._forward_copies(p, seq, header, payload, rest[1], c.peer, now)
            elif kind == wire.CTRL or kind in wire.REPAIR_KINDS:
                _, check, body, *rest = f
                self._check(p, check)
                self._ack_in(c, p, rest, now)
                if not p.inb.next_is_new():
                    p.inb.accept(now)
                    return
                if kind == wire.CTRL:
                    self._control(p, body, True, now)
                else:
                    self._repair_in(p, kind, body, now)
            elif kind == wire.ANNOUNCE:
                _, gen, body, *rest = f
                self._ack_in(c, p, rest, now)
                self._announced(p, relay.generation(gen), body, now)
            elif kind == wire.HEARTBEAT:
                self._check(p, f[1])
                self._ack_in(c, p, f[2:], now)
            elif kind == wire.MISSED:
                _, check, body, *rest = f
                self._check(p, check)
                missed = self._ranges(body, now)
                self._ack_in(c, p, rest, now)
                self._missed(p, missed, now)
            elif kind == wire.SYNC:
                start = f[1]
                if type(start) is not int or start < 1 or start > KEY_INT_MAX:
                    raise ProtocolViolation("malformed SYNC frame")
                gap = p.inb.sync(start)
                if gap is not None:
                    self._report_gap(p, *gap, now)
                if len(f) > 2:
                    p.relay.announce_gen = relay.generation(f[2])
                c.rx_msg_base = 0       # a run starts: message numbers are whole again
            elif kind == wire.ROUTED and self.relaying:
                self._routed(relay.decode(f, self.sites), c.peer, now)  # type: ignore[arg-type]
            elif kind == wire.LINKS and self.relaying:
                self._advert(self.links.decode(f, now), c, now)
            elif kind == wire.BYE:
                reason = f[1] if len(f) > 1 else ""
                self._drop(c, f"{p.name} closed the connection: {reason}", now)
            elif kind == wire.HELLO:
                raise ProtocolViolation("second HELLO on an open connection")
            else:
                raise ProtocolViolation(f"unknown frame type {kind}")
        except (ValueError, IndexError, TypeError) as e:  # too few fields, wrong types
            raise ProtocolViolation(f"malformed {wire.FRAME_NAMES.get(kind, kind)} frame: {e}") from None

    # -- a peer's channel ---------------------------------------------------------------------
    def _accept(self, p: Peer, now: float, link_seq: int | None) -> None:
        """Take the next frame of ``p``'s stream (implicitly numbered, or ``link_seq`` when relayed)."""
        if link_seq is None:
            p.inb.accept(now)
        else:
            p.inb.accept_at(link_seq, now)

    def _held_announcement(self, p: Peer, now: float) -> None:
        """After a frame's outputs: a relayed announcement waiting for it applies now."""
        pending = p.relay.announcement
        if pending is not None and p.inb.frontier >= pending[0]:
            p.relay.announcement = None
            if pending[1] == p.relay.peer_boot:     # else the peer restarted since: stale
                self._announced(p, pending[2], pending[3], now)

    def _announced(self, p: Peer, gen: int, body: Any, now: float) -> None:
        """A best-effort control body from ``p``, sent in announcement generation ``gen``.

        One sent before the peer's channel last changed path (an older generation) may
        arrive after newer ones by the other path: it is dropped, never applied out of order.
        """
        seen = p.relay.announce_gen
        if seen is not None and gen != seen:
            if not relay.newer(gen, seen):
                p.relay.counters["stale_announcements"] += 1
                return
        p.relay.announce_gen = gen
        self._control(p, body, False, now)

    def _data(self, p: Peer, seq: int, header: Any, payload: bytes, now: float,
              link_seq: int | None = None) -> None:
        """A new DATA frame of ``p``'s stream: to the ordering protocol, then counted, logged, acked."""
        try:
            outs = self._order_received(p.name, seq, header, payload, now)
        except (TypeError, ValueError) as e:
            raise ProtocolViolation(f"bad ordering header {_short(header)}: {e}") from None
        self._accept(p, now, link_seq)
        if self.durable:
            self._persist(records.Received(p.name, p.inb.peer_incarnation, p.inb.frontier, seq, header, payload))
            self.undelivered[(p.name, seq)] = (header, payload)
        self._ordering_outputs(outs, now)
        self._held_announcement(p, now)

    def _control(self, p: Peer, body: Any, reliable: bool, now: float, link_seq: int | None = None) -> None:
        """A control body from ``p`` (a new reliable CTRL frame, or a best-effort announcement)."""
        try:
            outs = self.ordering.control(p.name, body, now)
        except (TypeError, ValueError, KeyError, IndexError) as e:
            raise ProtocolViolation(f"bad control body {_short(body)}: {e}") from None
        if reliable:
            self._accept(p, now, link_seq)
            if self.durable:
                self._persist(records.ReceivedControl(p.name, p.inb.peer_incarnation, p.inb.frontier,
                                                      wire.CTRL, body))
        self._ordering_outputs(outs, now)
        if reliable:
            self._held_announcement(p, now)

    def _missed(self, p: Peer, missed: list[list[int]], now: float, link_seq: int | None = None) -> None:
        if link_seq is None and not p.inb.next_is_new():
            p.inb.accept(now)
            return
        self._accept(p, now, link_seq)
        if self.durable:
            self._persist(records.ReceivedControl(p.name, p.inb.peer_incarnation, p.inb.frontier,
                                                  wire.MISSED, missed))
        self._out.append(Missing(p.name, tuple((a, b) for a, b in missed)))
        self._repair_missing(p.name, missed, now)
        self._held_announcement(p, now)

    @staticmethod
    def _ranges(body: Any, now: float) -> list[list[int]]:
        """A MISSED frame's ranges: canonical, and naming no number the peer cannot have sent by now."""
        try:
            return ranges.parse(body, honest_ceiling(now))
        except ValueError as e:
            raise ProtocolViolation(f"malformed MISSED frame: {e}") from None

    def _check(self, p: Peer, check: Any) -> None:
        if check != p.inb.expected % wire.CHECK_MOD:
            raise ProtocolViolation(f"stream check {check!r} != {p.inb.expected % wire.CHECK_MOD}: "
                                    "frames were lost inside the connection")

    def _ack_in(self, c: Conn, p: Peer, rest: list[Any], now: float) -> None:
        if rest and rest[0] is not None:
            delta = rest[0]
            if type(delta) is not int or delta < 0:
                raise ProtocolViolation("malformed ack")
            c.rx_ack_base += delta
            if c.rx_ack_base >= p.out.next_seq:
                raise ProtocolViolation(f"ack {c.rx_ack_base} for a frame never sent")
            self._acked(p, c.rx_ack_base, now)

    # -- the handshake ------------------------------------------------------------------------
    def _hello(self, c: Conn, f: list[Any], now: float) -> None:
        got = handshake.check_hello(f, mission=self.mission, me=self.site, peers=list(self.peers),
                                    dialed=c.dialed_peer, identity=c.identity, terms=self.terms)
        if isinstance(got, handshake.Refused):
            self._refuse(c, got, now)
            return
        site = got.site
        p = self.peers[site]
        ours = got.known_incarnation == self.incarnation
        if ours and got.frontier > p.out.hwm:
            raise ProtocolViolation(f"HELLO frontier {got.frontier} is past the last frame {self.site} ever sent "
                                    f"to {site} ({p.out.hwm})")
        c.peer = site
        c.peer_boot = got.boot
        if c.dialed_peer is None:
            c.dial_seq = got.dial_seq
        written = p.out.sent_upto       # the last frame of our stream written on the connection before
        replaced = False
        # One connection per pair: prefer the one dialed by the site that sorts first.
        if p.conn is not None and p.conn != c.id:
            old = self.conns[p.conn]
            if not handshake.keeps_new(self._candidate(c), self._candidate(old)):
                if c.dialed_peer is not None:
                    p.cm.dial_ended()
                self._out.append(Log("info", f"two connections with {site} at once: keeping the one "
                                             f"{old.dialer(self.site)} dialed"))
                self._close(c, "duplicate connection: keeping the other one", bye=True)
                return
            self._out.append(Log("info", f"two connections with {site} at once: keeping the one "
                                         f"{c.dialer(self.site)} dialed"))
            replaced = True
            self._close(old, "replaced by a newer connection", bye=True)
            p.conn = None
            # Not a broken connection: we closed it ourselves, so even the
            # baselines resend what they wrote to it (resume below).
            p.out.rewind()
        if c.dialed_peer is None:
            self._write(c, self._hello_frame(site))
        if got.incarnation != p.inb.peer_incarnation:
            self._peer_stream(p, got.incarnation)
        c.open = True
        c.decoder.max_frame = self.settings.max_frame_bytes
        p.conn = c.id
        c.tx_ack_base = 0
        # A new connection: the peer's announcements start over (its SYNC says from which generation).
        p.relay.announce_gen, p.relay.peer_boot = None, got.boot
        self.announce_gen = relay.next_generation(self.announce_gen)
        # The frontier lets us forget what the peer holds, but only a peer whose
        # identity is proven (a TLS certificate) may make us forget anything:
        # on a plaintext connection the stream restarts after the last
        # acknowledged frame and the peer drops what it already has.
        proven = ours and c.identity is not None
        start = p.out.resume(got.frontier if proven else None)
        self._write(c, [wire.SYNC, start, self.announce_gen])
        c.tx_next = start
        # Say at once where we stand: our HELLO, if we dialed, is as old as the dial (and the peer
        # may be waiting for this, below).
        self._write(c, [wire.HEARTBEAT, start % wire.CHECK_MOD, p.inb.frontier])
        c.tx_ack_base = p.inb.acknowledged()
        if written >= start and p.out.mode == "robust" and (replaced if c.dialed_peer is None else not proven):
            # We wrote frames from ``start`` on on the last connection, and the peer may hold some of
            # them that ``start`` does not count: a dialer wrote its HELLO when it dialed, maybe before
            # it took them on the connection we just replaced (both ends dialed at once); without a
            # proven frontier ``start`` follows our last acknowledgement. Resent now, they would come
            # twice: the stream waits for the peer's first acknowledgement here (an acceptor sends it
            # with its HELLO, a dialer one trip later) and goes on after it (``_resume_held``).
            p.out.hold(now + self.settings.liveness_timeout)
        if self.relaying:
            p.relay.path = Direct(c.id)
            p.relay.hears_us = None
            self._db_due.append(c.id)          # once our own advert lists this link (_update_paths)
            self._routes_dirty = True
        self._effects(p, p.cm.handshake_completed(now), now)
        self._pump(p, now)
        # Best-effort state (clock announcements) sent on the old connection may
        # be lost: the ordering protocol re-sends it, after the resent frames.
        self._ordering_outputs(self.ordering.resync(site, now), now)

    def _peer_stream(self, p: Peer, incarnation: int) -> None:
        """``p``'s reliable stream is a new one (it restarted without its log)."""
        if p.inb.peer_incarnation:
            self._out.append(Log("info", f"{p.name} restarted (incarnation {incarnation})"))
        p.inb.reset(incarnation)
        p.relay.announcement = None
        if self.durable:
            self._persist(records.PeerStream(p.name, incarnation))

    def _candidate(self, c: Conn) -> handshake.Candidate:
        return handshake.Candidate(c.peer_boot, c.dialer(self.site), c.dial_seq)

    def _refuse(self, c: Conn, got: handshake.Refused, now: float) -> None:
        """Close a connection whose HELLO we cannot accept, and do not dial that peer again until it dials."""
        p = self.peers.get(c.dialed_peer or got.peer or got.claimed or "")
        reason = f"refused: {got.reason}"
        if p is not None:
            p.refused(got.reason)
            p.cm.hold_dials()
            last, at, since = p.refusal_log
            if last == got.reason and now < at + 60.0:
                # The same refusal again (an old peer redials every reconnect_period): once a minute.
                p.refusal_log = (last, at, since + 1)
                self._close(c, reason, bye=True, incompatible=True)
                self._detach(c, now)
                return
            if since:
                reason_log = f"{reason} ({since} more refused since the last such line)"
            else:
                reason_log = f"{reason}; not dialing {p.name} until it dials {self.site}"
            p.refusal_log = (got.reason, now, 0)
            self._out.append(Log("warning", f"closing connection: {reason_log}"))
            self._close(c, reason, bye=True, incompatible=True)
            self._detach(c, now)
            return
        self._drop(c, reason, now, bye=True, incompatible=True)

    def _refused_by_peer(self, c: Conn, f: list[Any], now: float) -> None:
        """A BYE before the HELLO: the peer refused our connection."""
        reason = f[1] if len(f) > 1 and isinstance(f[1], str) else ""
        why = reason.removeprefix("refused: ")
        who = c.dialed_peer or "the peer"
        if c.dialed_peer is not None:
            p = self.peers[c.dialed_peer]
            p.refused_us(f"{who} refused this site: {why}")
            # A peer of this version says when it is for good; an older one refuses
            # our version, and will as long as it runs.
            if (len(f) > 2 and f[2] == 1) or why.startswith("protocol version"):
                p.cm.hold_dials()
                why += f"; not dialing {who} until it dials {self.site}"
        self._drop(c, f"{who} refused the connection: {why}", now)

    def _refuse_handshake(self, c: Conn, now: float) -> None:
        """Close a connection accepted while ``max_handshaking`` others are still in HELLO.

        Logged at most once a minute (with how many were refused), so a flood
        of connections does not flood the log too.
        """
        reason = (f"refused: {self.site} has {self.max_handshaking} connections in handshake "
                  "([rcm] max_handshaking); try again later")
        self.handshakes_refused += 1
        self._handshake_log_count += 1
        if now >= self._handshake_log_at + 60.0:
            self._out.append(Log("warning", f"{reason} ({self._handshake_log_count} refused "
                                            "since the last such line)"))
            self._handshake_log_at = now
            self._handshake_log_count = 0
        self._close(c, reason, bye=True)

    def _hello_frame(self, peer: str, dial_seq: int = 0) -> list[Any]:
        inb = self.peers[peer].inb
        return handshake.hello_frame(self.mission, self.site, self.incarnation, inb.peer_incarnation,
                                     inb.frontier, self.boot, dial_seq, self.terms)

    # -- relaying -------------------------------------------------------------------------------
    def _routed(self, r: Routed, came_from: str, now: float) -> None:
        """A ROUTED frame from neighbour ``came_from``: take our entry, forward the others."""
        if r.origin == self.site:
            return                      # a loop while routes settle: drop it
        mine = [e for e in r.entries if e[0] == self.site]
        others = [e for e in r.entries if e[0] != self.site]
        if others:
            self._forward(r, others, came_from, now)
        if mine:
            self._routed_in(r, mine[0][1], now)

    def _forward(self, r: Routed, entries: list[tuple[str, int]], came_from: str, now: float) -> None:
        hops = r.hops + 1
        for hop, group in relay.group_by_hop(entries, self._next_hops).items():
            if hops > self.settings.max_hops or hop == came_from:
                self.relay_dropped += len(group)
                continue
            q = self.peers[hop]
            routed = r.only(group, hops)
            if q.fwd is not None and r.kind != wire.ACK:
                # A paced neighbour: behind the pacer, in lane order with our own frames (rcm.lanes);
                # counted as forwarded when written.
                data = wire.encode_frame(relay.encode(routed, self.index))
                if q.conn is not None and q.fwd.push(r.origin, self._relayed_lane(routed), data, len(group)):
                    self._service(q, now)
                else:
                    self.relay_dropped += len(group)
            elif self._write_routed(hop, routed, now):
                self.relay_forwarded += len(group)
            else:
                self.relay_dropped += len(group)
        self.relay_dropped += sum(1 for d, _ in entries if d not in self._next_hops)

    def _relayed_lane(self, r: Routed) -> int:
        """The lane a relayed frame waits in: a DATA frame's precedence, else the ordered lane."""
        if r.kind == wire.DATA:
            try:
                return lanes.lane(lanes.unwrap(r.body[1])[1], self.settings.lanes)
            except ValueError:
                pass                    # its destination refuses it; here it is just bytes to carry
        return lanes.ORDERED_LANE

    def _forward_copies(self, p: Peer, seq: int, header: Any, payload: bytes, fwd: Any, came_from: str | None,
                        now: float) -> None:
        """A DATA frame also carried copies for sites behind us (its ``fwd`` list): relay them."""
        if not isinstance(fwd, list) or len(fwd) % 2:
            raise ProtocolViolation("malformed DATA forward list")
        entries = tuple((self.links.site_at(fwd[i]), fwd[i + 1]) for i in range(0, len(fwd), 2))
        if not all(type(v) is int and 0 < v <= KEY_INT_MAX for _, v in entries):
            raise ProtocolViolation("malformed DATA forward list")
        r = Routed(1, p.name, relay.stream_check(p.inb.peer_incarnation), entries, wire.DATA,
                   (seq, header, payload))
        self._routed(r, came_from or p.name, now)

    def _routed_in(self, r: Routed, value: int, now: float) -> None:
        """Our entry of a ROUTED frame: a frame of ``r.origin``'s channel to us (or an ack of ours)."""
        p = self.peers[r.origin]
        p.relay.counters["relayed_in"] += 1
        if r.kind == wire.ACK:
            if r.body[0] == relay.GAP:
                self._gap_reported(p, r.check, value, r.body[1], now)
            else:
                self._relayed_ack(p, r.check, value, r.body[0], now)
            return
        if r.kind == wire.SYNC:
            incarnation, boot, gen = r.body
            if boot < p.relay.peer_boot:
                return                  # from before the peer's last restart, late by some path
            if p.name in self._usable:
                # We hear each other directly, so the peer syncs its stream on our connection itself. A relayed
                # SYNC now is late by some path or forged by a relay (which would reset or skip a stream that
                # is arriving directly): not applied; a relayed run at our frontier needs no SYNC anyway.
                p.relay.counters["syncs_ignored"] += 1
                return
            if incarnation != p.inb.peer_incarnation:
                self._peer_stream(p, incarnation)
            gap = p.inb.relay_sync(value)
            if gap is not None:
                self._report_gap(p, *gap, now)
            if boot != p.relay.peer_boot:
                p.relay.announce_gen, p.relay.peer_boot = None, boot
            if p.relay.announce_gen is None or relay.newer(gen, p.relay.announce_gen):
                p.relay.announce_gen = gen
            return
        if r.check != relay.stream_check(p.inb.peer_incarnation):
            self._nack(p, now)          # we do not hold this stream: the origin syncs it again
            return
        if r.kind == wire.ANNOUNCE:
            boot, gen, body = r.body
            if boot != p.relay.peer_boot:
                if boot < p.relay.peer_boot:
                    # From before the peer's last restart, late by some path. Its generation
                    # counts from the old boot's zero: taken, it would make every announcement
                    # of the new boot look stale (with a durable log the stream check is the same).
                    p.relay.counters["stale_announcements"] += 1
                    return
                p.relay.announce_gen, p.relay.peer_boot = None, boot
            if p.inb.frontier >= value:
                self._announced(p, gen, body, now)
            else:
                p.relay.announcement = (value, boot, gen, body)   # after the data it vouches for
            return
        if value <= p.inb.frontier:
            p.inb.accept_at(value, now)  # counted as a duplicate
            return
        if value > p.inb.frontier + 1:
            p.relay.counters["gaps"] += 1
            self._nack(p, now)
            return
        if r.kind == wire.DATA:
            seq, header, payload = r.body
            self._data(p, seq, header, payload, now, link_seq=value)
        elif r.kind == wire.CTRL:
            self._control(p, r.body[0], True, now, link_seq=value)
        elif r.kind == wire.MISSED:
            self._missed(p, self._ranges(r.body[0], now), now, link_seq=value)
        elif r.kind in wire.REPAIR_KINDS:
            self._repair_in(p, r.kind, r.body[0], now, link_seq=value)

    def _relayed_ack(self, p: Peer, check: int, frontier: int, flags: Any, now: float) -> None:
        """``p`` acknowledges our stream up to ``frontier`` (with NACK: it saw a gap after it)."""
        if check != relay.stream_check(self.incarnation):
            # It does not hold our current stream: start a relayed run it can take.
            if isinstance(p.relay.path, Relay) and now >= p.relay.sync_sent_at + self.settings.ack_interval:
                self._resend(p, now)
            return
        if frontier >= p.out.next_seq:
            # Forged by a relay: believed, it would make us forget frames the peer never got.
            raise ProtocolViolation(f"relayed ACK of {p.name} for frame {frontier} of our stream, which was never "
                                    f"sent (the last is {p.out.next_seq - 1})")
        self._acked(p, frontier, now)
        if (flags == relay.NACK and isinstance(p.relay.path, Relay) and p.out.sent_upto > frontier
                and not (p.relay.rewound_to == frontier and now < p.relay.rewound_at + p.relay.rto)):
            p.relay.rewound_to, p.relay.rewound_at = frontier, now
            self._resend(p, now)

    def _report_gap(self, p: Peer, frontier: int, upto: int, now: float) -> None:
        """A SYNC carried ``p``'s stream past frames we never got: tell ``p``, which names their messages in a
        MISSED notice (``_gap_reported``). Only robust channels promise them; baselines skip by design."""
        if self.settings.p2p != "robust" or not self.relaying:
            return                      # direct links: only the peer itself acknowledges or syncs
        p.relay.counters["gaps_reported"] += 1
        self._out.append(Log("warning", f"{p.name}'s stream skipped frames {frontier + 1}..{upto} that never "
                                        "arrived here: asking it to name their messages"))
        self._send_routed(p, Routed(1, self.site, relay.stream_check(p.inb.peer_incarnation), ((p.name, frontier),),
                                    wire.ACK, (relay.GAP, upto)), now)

    def _gap_reported(self, p: Peer, check: int, frontier: int, upto: int, now: float) -> None:
        """``p`` never got frames ``frontier + 1 .. upto`` of our stream (a forged acknowledgement made us drop
        them, or a forged SYNC skipped them): their messages become MISSED notices, so they are reported
        and can be repaired, never lost silently (``rcm.released``)."""
        if check != relay.stream_check(self.incarnation):
            return                      # about a stream of ours before a restart: nothing to name
        if not frontier < upto < p.out.next_seq:
            raise ProtocolViolation(f"GAP report of {p.name} for frames {frontier + 1}..{upto}, not a range of "
                                    f"frames sent (the last is {p.out.next_seq - 1})")
        named, forgotten = p.out.carried(frontier, upto)
        p.relay.counters["gaps_named"] += ranges.count(named)
        self._out.append(Log("warning", f"{p.name} never got frames {frontier + 1}..{upto} of our stream, though "
                                        f"they were acknowledged or skipped: {ranges.count(named)} messages reported "
                                        f"to it as missed" + (f", {forgotten} frames too old to name" if forgotten
                                                             else "")))
        if named:
            p.missed = ranges.cap(ranges.normalize([*p.missed, *named]), MISSED_RANGES_MAX)
            if p.cm.status is LinkStatus.CONNECTED:
                self._offer_missed(p, now)

    def _nack(self, p: Peer, now: float) -> None:
        """Tell ``p`` (at most once per ``ack_interval``) where its stream stands here: it resends after."""
        if now < p.relay.nack_at + self.settings.ack_interval:
            return
        p.relay.nack_at = now
        p.relay.counters["nacks"] += 1
        self._send_ack(p, now, relay.NACK)

    def _advert(self, ad: Any, c: Conn, now: float) -> None:
        """A link-state advert from neighbour ``c``: store and flood it if it is new."""
        if c.peer is not None and ad.origin == c.peer:
            self.peers[c.peer].relay.hears_us = self.site in ad.neighbours
            self._routes_dirty = True
        forged = self.links.forged_own
        if self.links.take(ad, now):
            self._routes_dirty = True
            released = self.links.release(ad.origin, now)
            if released is not None:
                self._flood(released, but=(c.id,))
        elif self.links.forged_own > forged and now >= self.forged_log_at + 60.0:
            self.forged_log_at = now
            self._out.append(Log("warning", f"an advert claiming to be {self.site}'s, version {ad.version}, came "
                                            f"from {c.who()}: this site never said it (refused; "
                                            f"{self.links.forged_own} so far)"))
