"""The inbound path: typed frames from a connection to the layers that take them (sans-IO).

Theory of operation
-------------------
``rcm.stack.frames`` decodes each frame once; this module hands it on. Before a
connection's HELLO only HELLO (``rcm.channels.sessions``) and a refusing BYE are
taken. After it, a frame of the peer's channel is taken at most once,
whichever way it came: on the direct connection it is numbered implicitly
after the peer's SYNC (``InboundChannel.accept``), in a ROUTED frame
explicitly (``InboundChannel.accept_at``); both move the same frontier, and
both call the same handlers here (``_message``, ``_control``, ``_missed``,
``_repair``). The ordering protocol checks a message before it is counted,
logged or acknowledged; its ``PeerInputError`` (and a decoding error) is the
peer's fault and closes that connection; anything else is ours and is raised.

A LATEST frame (``rcm.latest``) is no channel's: it goes to the latest-wins
layer as it comes. A FRAG frame is a piece of a large frame on a paced link
(``rcm.channels.fragments``): the connection keeps it until the last piece
makes the frame whole, which is then decoded and taken as if it had come in
one piece (so it takes its place in the stream only then; a relayed frame's
pieces make a ROUTED frame).

ROUTED frames: this site takes its own entry and forwards the others along
its routes (``Channels.forward``); a DATA frame may also carry copies for
sites behind this one (``fwd``), relayed the same way.
"""
from __future__ import annotations

from typing import Any, Protocol

from contracts.mission import RcmSettings
from ordering import PeerInputError, honest_ceiling
from ordering.base import Output
from rcm import wire
from rcm.actions import Action, Missing, Persist, ProtocolViolation
from rcm.channels import fragments
from rcm.channels.layer import Channels
from rcm.channels.peer import Conn, Peer
from rcm.connman import Effect
from rcm.durability import records
from rcm.latest.layer import LatestLayer
from rcm.repair.antientropy import Offer
from rcm.repair.frames import Repaired
from rcm.repair.service import RepairService
from rcm.routing import relay
from rcm.routing.router import Router
from rcm.stack import frames
from rcm.stack.multicast import Multicast
from rcm.wire import envelope


class InboundHooks(Protocol):
    """What the inbound path asks of the stack that composes the layers."""

    def ordering_outputs(self, outputs: list[Output], now: float) -> None: ...
    def cm_effects(self, p: Peer, effects: list[Effect], now: float) -> None: ...
    def repair_offers(self, offers: list[Offer], now: float) -> None: ...
    def deliver_repaired(self, got: Repaired, now: float) -> None: ...
    def drop(self, c: Conn, reason: str, now: float, bye: bool = False, incompatible: bool = False,
             level: str = "warning", replaced: bool = False) -> None: ...
    def hello(self, c: Conn, f: list[Any], now: float) -> None: ...
    def refused_by_peer(self, c: Conn, f: frames.Bye, now: float) -> None: ...
    def peer_stream(self, p: Peer, incarnation: int) -> None: ...


class Inbound:
    """Frames in, to the layers (see the module docstring)."""

    def __init__(self, site: str, settings: RcmSettings, durable: bool, decoder: frames.FrameDecoder,
                 channels: Channels, router: Router, multicast: Multicast, repair: RepairService,
                 latest: LatestLayer, out: list[Action], hooks: InboundHooks) -> None:
        self.site = site
        self.settings = settings
        self.relaying = settings.relaying
        self.durable = durable
        self.decoder = decoder
        self.channels = channels
        self.peers = channels.peers
        self.router = router
        self.multicast = multicast
        self.repair = repair
        self.latest = latest
        self.out = out
        self.hooks = hooks

    # -- dispatch -------------------------------------------------------------------------------------
    def frame(self, c: Conn, raw: list[Any], now: float) -> None:
        """One frame from connection ``c`` (``ProtocolViolation``: the peer's fault, the caller closes ``c``)."""
        f = self.decoder.decode(raw, now)
        if not c.open:
            if isinstance(f, frames.HelloFrame):
                self.hooks.hello(c, f.raw, now)
            elif isinstance(f, frames.Bye):
                self.hooks.refused_by_peer(c, f, now)
            else:
                raise ProtocolViolation(f"{wire.FRAME_NAMES.get(raw[0], raw[0])} frame before HELLO")
            return
        assert c.peer is not None
        p = self.peers[c.peer]
        p.frames_in += 1
        self.hooks.cm_effects(p, p.cm.frame_received(now), now)
        if isinstance(f, frames.Fragment):
            made = self._piece(c, p, f.piece, now)
            if made is None:
                return
            f = made
        self._taken(c, p, c.peer, f, now)

    def _piece(self, c: Conn, p: Peer, piece: fragments.Piece, now: float) -> frames.Frame | None:
        """A piece of a large frame (``rcm.channels.fragments``): the frame, decoded, once it is whole."""
        p.fragments_in += 1
        if c.fragments is None:
            c.fragments = fragments.Reassembly(self.settings.max_frame_bytes)
        try:
            data = c.fragments.take(piece.lane, piece.offset, piece.chunk, piece.check is not None)
            if data is None:
                return None
            assert piece.check is not None
            if piece.relayed:
                raw = fragments.relayed_whole(data)
            else:
                raw = fragments.whole(data, piece.check, piece.ack, c.rx_msg_base)
        except fragments.FragmentError as e:
            raise ProtocolViolation(str(e)) from None
        return self.decoder.decode(raw, now)

    def _taken(self, c: Conn, p: Peer, peer: str, f: frames.Frame, now: float) -> None:
        """A whole frame of open connection ``c`` to ``p``, to the layer that takes it."""
        ch = self.channels
        if isinstance(f, frames.Data):
            self._check(p, f.check)
            seq = c.rx_msg_base + f.dseq
            if seq < 1:
                raise ProtocolViolation(f"message sequence number {seq} below 1")
            if seq > honest_ceiling(now):
                raise ProtocolViolation(f"message sequence number {seq} is beyond what any honest site can "
                                        "have sent by now")
            c.rx_msg_base = seq
            ch.ack_in(c, p, f.ack, now)
            if p.inb.next_is_new():
                self._message(p, seq, f.message, now)
            else:
                p.inb.accept(now)
            if f.fwd is not None and self.relaying:
                self._forward_copies(p, seq, f.message, f.fwd, peer, now)
        elif isinstance(f, (frames.Ctrl, frames.Missed, frames.Summary, frames.Fetch, frames.RepairFrame)):
            self._check(p, f.check)
            ch.ack_in(c, p, f.ack, now)
            if not p.inb.next_is_new():
                p.inb.accept(now)
                return
            if isinstance(f, frames.Ctrl):
                self._control(p, f.body, True, now)
            elif isinstance(f, frames.Missed):
                self._missed(p, f.ranges, now)
            else:
                self._repair(p, f, now)
        elif isinstance(f, frames.Announce):
            ch.ack_in(c, p, f.ack, now)
            self._announced(p, f.generation, f.body, now)
        elif isinstance(f, frames.Heartbeat):
            self._check(p, f.check)
            ch.ack_in(c, p, f.ack, now)
        elif isinstance(f, frames.Sync):
            gap = p.inb.sync(f.start)
            if gap is not None:
                ch.report_gap(p, *gap, now)
            if f.generation is not None:
                p.relay.announce_gen = f.generation
            c.rx_msg_base = 0       # a run starts: message numbers are whole again
        elif isinstance(f, frames.Routed):
            self._routed(f, peer, now)
        elif isinstance(f, frames.Links):
            writes, logs = self.router.advert(f.advert, c.id, peer, self.channels.connections.open_ids(), now)
            self.out.extend(logs)
            self._write(writes)
        elif isinstance(f, frames.LatestFrame):
            self.latest.received(p, f.entry, now)       # outside the reliable stream (rcm.latest)
        elif isinstance(f, frames.Bye):
            self.hooks.drop(c, f"{p.name} closed the connection: {f.reason}", now,
                            level="info" if f.reason in wire.ROUTINE_BYES else "warning",
                            replaced=f.reason == wire.BYE_REPLACED)
        else:
            raise ProtocolViolation("second HELLO on an open connection")

    def _write(self, writes: list[Any]) -> None:
        conns = self.channels.connections
        for w in writes:
            c = conns.get(w.conn)
            if c is not None:
                conns.write_bytes(c, w.data)

    # -- a peer's channel -------------------------------------------------------------------------------
    def _check(self, p: Peer, check: int) -> None:
        if check != p.inb.expected % wire.CHECK_MOD:
            raise ProtocolViolation(f"stream check {check!r} != {p.inb.expected % wire.CHECK_MOD}: "
                                    "frames were lost inside the connection")

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

    def _message(self, p: Peer, seq: int, m: frames.Message, now: float, link_seq: int | None = None) -> None:
        """A new message of ``p``'s stream: to the ordering protocol, then counted, logged, acked."""
        if m.reach is not None and not envelope.in_reach(m.reach, self.channels.index[p.name]):
            raise ProtocolViolation(f"a message of {p.name} confined away from {p.name} itself")
        try:
            outs = self.multicast.received(p.name, seq, m.header, m.precedence, m.payload, now, m.expires_at,
                                           m.expired, m.reach)
        except PeerInputError as e:
            raise ProtocolViolation(f"bad ordering header {_short(m.header)}: {e}") from None
        self._accept(p, now, link_seq)
        if self.durable:
            self.out.append(Persist(records.Received(p.name, p.inb.peer_incarnation, p.inb.frontier, seq,
                                                     m.wire_header, m.payload)))
            self.multicast.logged(p.name, seq, m.wire_header, m.payload)
        self.hooks.ordering_outputs(outs, now)
        self._held_announcement(p, now)

    def _control(self, p: Peer, body: Any, reliable: bool, now: float, link_seq: int | None = None) -> None:
        """A control body from ``p`` (a new reliable CTRL frame, or a best-effort announcement)."""
        try:
            outs = self.multicast.ordering.control(p.name, body, now)
        except PeerInputError as e:
            raise ProtocolViolation(f"bad control body {_short(body)}: {e}") from None
        if reliable:
            self._accept(p, now, link_seq)
            if self.durable:
                self.out.append(Persist(records.ReceivedControl(p.name, p.inb.peer_incarnation, p.inb.frontier,
                                                                wire.CTRL, body)))
        self.hooks.ordering_outputs(outs, now)
        if reliable:
            self._held_announcement(p, now)

    def _missed(self, p: Peer, missed: list[list[int]], now: float, link_seq: int | None = None) -> None:
        self._accept(p, now, link_seq)
        if self.durable:
            self.out.append(Persist(records.ReceivedControl(p.name, p.inb.peer_incarnation, p.inb.frontier,
                                                            wire.MISSED, missed)))
        self.out.append(Missing(p.name, tuple((a, b) for a, b in missed)))
        self.hooks.repair_offers(self.repair.missing(p.name, missed, now), now)
        self._held_announcement(p, now)

    def _repair(self, p: Peer, f: Any, now: float, link_seq: int | None = None) -> None:
        """A new SUMMARY, FETCH or REPAIR of ``p``'s stream (decoded and checked): counted, logged, handled."""
        offers, got = self.repair.frame(p.name, _parsed(f), now)
        self._accept(p, now, link_seq)
        if self.durable:
            self.out.append(Persist(records.ReceivedControl(p.name, p.inb.peer_incarnation, p.inb.frontier,
                                                            _REPAIR_KIND[type(f)], None)))
        if got is not None:
            self.hooks.deliver_repaired(got, now)
        self.hooks.repair_offers(offers, now)
        self._held_announcement(p, now)

    # -- relaying ------------------------------------------------------------------------------------------
    def _routed(self, f: frames.Routed, came_from: str, now: float) -> None:
        """A ROUTED frame from neighbour ``came_from``: take our entry, forward the others."""
        r = f.frame
        if r.origin == self.site:
            return                      # a loop while routes settle: drop it
        others = [e for e in r.entries if e[0] != self.site]
        if others:
            self.channels.forwarding.forward(r, others, came_from, now)
        if f.mine is not None:
            self._routed_in(r, f.mine[0], f.mine[1], now)

    def _forward_copies(self, p: Peer, seq: int, m: frames.Message, fwd: tuple[tuple[str, int], ...],
                        came_from: str, now: float) -> None:
        """A DATA frame also carried copies for sites behind us (its ``fwd`` list): relay them."""
        r = relay.Routed(1, p.name, relay.stream_check(p.inb.peer_incarnation), fwd, wire.DATA,
                         (seq, m.wire_header, m.payload), m.reach)
        mine = next((v for d, v in fwd if d == self.site), None)
        self._routed(frames.Routed(r, (mine, frames.RoutedData(seq, m)) if mine is not None else None),
                     came_from, now)

    def _routed_in(self, r: relay.Routed, value: int, body: frames.RoutedBody, now: float) -> None:
        """Our entry of a ROUTED frame: a frame of ``r.origin``'s channel to us (or an ack of ours)."""
        p = self.peers[r.origin]
        ch = self.channels
        p.relay.counters["relayed_in"] += 1
        if isinstance(body, frames.RoutedAck):
            if body.gap_upto is not None:
                ch.gap_reported(p, body.check, value, body.gap_upto, now)
            else:
                ch.relayed_ack(p, body.check, value, body.nack, now)
            return
        if isinstance(body, frames.RoutedSync):
            if body.boot < p.relay.peer_boot:
                return                  # from before the peer's last restart, late by some path
            if p.name in self.router.usable:
                # We hear each other directly, so the peer syncs its stream on our connection itself. A relayed
                # SYNC now is late by some path or forged by a relay (which would reset or skip a stream that
                # is arriving directly): not applied; a relayed run at our frontier needs no SYNC anyway.
                p.relay.counters["syncs_ignored"] += 1
                return
            if body.incarnation != p.inb.peer_incarnation:
                self.hooks.peer_stream(p, body.incarnation)
            gap = p.inb.relay_sync(value)
            if gap is not None:
                ch.report_gap(p, *gap, now)
            if body.boot != p.relay.peer_boot:
                p.relay.announce_gen, p.relay.peer_boot = None, body.boot
            if p.relay.announce_gen is None or relay.newer(body.generation, p.relay.announce_gen):
                p.relay.announce_gen = body.generation
            return
        if r.check != relay.stream_check(p.inb.peer_incarnation):
            ch.nack(p, now)             # we do not hold this stream: the origin syncs it again
            return
        if isinstance(body, frames.RoutedAnnounce):
            if body.boot != p.relay.peer_boot:
                if body.boot < p.relay.peer_boot:
                    # From before the peer's last restart, late by some path. Its generation
                    # counts from the old boot's zero: taken, it would make every announcement
                    # of the new boot look stale (with a durable log the stream check is the same).
                    p.relay.counters["stale_announcements"] += 1
                    return
                p.relay.announce_gen, p.relay.peer_boot = None, body.boot
            if p.inb.frontier >= value:
                self._announced(p, body.generation, body.body, now)
            else:
                p.relay.announcement = (value, body.boot, body.generation, body.body)   # after its data
            return
        if value <= p.inb.frontier:
            p.inb.accept_at(value, now)  # counted as a duplicate
            return
        if value > p.inb.frontier + 1:
            p.relay.counters["gaps"] += 1
            ch.nack(p, now)
            return
        if isinstance(body, frames.RoutedData):
            self._message(p, body.seq, body.message, now, link_seq=value)
        elif isinstance(body, frames.RoutedCtrl):
            self._control(p, body.body, True, now, link_seq=value)
        elif isinstance(body, frames.RoutedMissed):
            self._missed(p, body.ranges, now, link_seq=value)
        else:
            self._repair(p, body, now, link_seq=value)


_REPAIR_KIND: dict[type, int] = {frames.Summary: wire.SUMMARY, frames.RoutedSummary: wire.SUMMARY,
                                 frames.Fetch: wire.FETCH, frames.RoutedFetch: wire.FETCH,
                                 frames.RepairFrame: wire.REPAIR, frames.RoutedRepair: wire.REPAIR}


def _parsed(f: Any) -> tuple[int, Any]:
    """(kind, parsed body) of a decoded repair frame, direct or relayed, as ``rcm.repair`` takes it."""
    if isinstance(f, (frames.Summary, frames.RoutedSummary)):
        return wire.SUMMARY, (f.reply, f.held)
    if isinstance(f, (frames.Fetch, frames.RoutedFetch)):
        return wire.FETCH, (f.origin, f.ranges)
    return wire.REPAIR, f.repaired


def _short(value: Any, limit: int = 80) -> str:
    """``repr(value)`` cut to ``limit`` characters, for reasons and logs."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."

