"""The channel layer: each peer's point-to-point channel on its path (sans-IO).

Theory of operation (docs/rcm.md, docs/relay.md)
-----------------------------------------------
Every peer has one robust channel (``rcm.channels.p2p`` and ``rcm.channels.receiving``: a
numbered outbound stream kept until acknowledged, an inbound frontier that drops duplicates), its
connection manager (``rcm.connman``), the connection adopted for it, and its
relay-side stream state (``rcm.routing.relay.RelayState``). This layer owns them
(``Peer``, ``rcm.channels.peer``) and keeps each channel on the path the routing
layer gives it; ``rcm.channels.writer`` writes the frames (on the direct
connection, through a relay as ROUTED frames, and on a paced link as the pacing
layer, ``rcm.channels.pacing``, decides; with it what other sites route through
this one, ``rcm.channels.forwarding``). This layer resends what a relay lost
(NACKs, a retransmission timer), holds a stream after a double dial until the
peer says what it holds (``hold``), and turns a gap a peer reports into a
MISSED notice (``rcm.channels.released``). It writes through the connection layer and
appends its other effects (``Persist``, ``Log``) to the stack's actions; what
the layers above must do (the ordering protocol's state after a path change)
it asks of them through ``ChannelHooks``.

Acknowledgements ride on whatever goes back to the peer (data, an
announcement); one goes alone (a HEARTBEAT, or a ROUTED ACK through a relay)
only when nothing went back for ``ack_wait``: ``ack_interval`` in a mission
with a paced link (a relayed run's window, ``lanes.ROUTE_WINDOW``, waits for
acknowledgements there), ``UNPACED_ACK_FACTOR`` times it where no link is
paced, where a later acknowledgement costs nothing but buffer and gives the
peer's next frame longer to carry it (docs/rcm.md, "Acknowledgements").
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from contracts.mission import RcmSettings
from contracts.status import LinkStatus
from rcm import ranges, wire
from rcm.actions import Action, Log, Persist, ProtocolViolation
from rcm.channels import lanes
from rcm.channels.connections import Connections
from rcm.channels.p2p import ChannelFull, OutboundChannel, OutFrame
from rcm.channels.pacing import Pacing
from rcm.channels.peer import MISSED_RANGES_MAX, Conn, Peer
from rcm.channels.receiving import InboundChannel
from rcm.channels.writer import ChannelWriter, WriterHooks
from rcm.connman import Effect, PeerConnection, dial_yield, redial_period
from rcm.durability import records
from rcm.routing import relay
from rcm.routing.relay import Direct, Path, Relay, Routed
from rcm.routing.router import Router

UNPACED_ACK_FACTOR = 2.5
"""Where no link of the mission is paced, a lone acknowledgement waits this many ``ack_interval``s (0.5 s by
default; at most half the relay retransmission timer, ``rto_base``): ``bench/peer_irc_outage.py --sim`` (its
trials on the virtual clock): 1.14-1.16x fewer writes per message, each message delivered as soon."""


class ChannelHooks(WriterHooks, Protocol):
    """What the channel layer asks of the layers above it (the stack composes them; the writing's too)."""

    def resync(self, peer: str, now: float) -> None:
        """The ordering protocol's best-effort state for ``peer`` may have been lost: send it again."""

    def cm_effects(self, p: Peer, effects: list[Effect], now: float) -> None:
        """Effects of ``p``'s connection manager to carry out."""


class Channels:
    """The peers' channels of one site (see the module docstring)."""

    def __init__(self, site: str, peers: Sequence[str], settings: RcmSettings, incarnation: int, boot: int,
                 now: float, laned: bool, durable: bool, connections: Connections, router: Router,
                 pacing: Pacing, out: list[Action], hooks: ChannelHooks) -> None:
        """``laned``: every channel keeps precedence lanes (a link of the mission is paced)."""
        self.site = site
        self.settings = settings
        self.relaying = settings.relaying
        self.incarnation = incarnation      # identity of this site's reliable stream
        self.boot = boot
        self.durable = durable
        self.connections = connections
        self.router = router
        self.pacing = pacing
        self.out = out
        self.hooks = hooks
        self.index = router.index
        # Both ends dial at once: sites start in any order, and waiting would
        # only delay the first connection. A duplicate is resolved by the dialing rule. On a slow link the
        # site that dials second yields at the first dial too (``connman.dial_yield``): the first site's
        # connection is then the one made, and it holds the TLS session its later reconnections resume (a
        # dialer whose first connection was the peer's dial has none: a full handshake, 10.6 s at 2.4 kbit/s).
        self.peers: dict[str, Peer] = {
            p: Peer(p, PeerConnection(p, settings, now, first_dial=now + dial_yield(site, p, pacing.rate(p)),
                                      redial=redial_period(site, p, pacing.rate(p), settings.reconnect_period)),
                    OutboundChannel(settings.p2p, settings.max_buffered_messages, lanes.LANES if laned else 0,
                                    max_bytes=settings.max_buffered_bytes), InboundChannel())
            for p in peers
        }
        # Per peer channel: moves on at every path change of that channel, so announcements sent by its old
        # paths are stale (one counter for the site would let 64 path changes of one channel make every other
        # peer take the next announcement as older than the last: tests/faultinject/test_sim_announce_generations.py).
        self.announce_gens: dict[str, int] = {p: 0 for p in peers}
        self.rto_base = max(4 * settings.ack_interval, 2 * settings.heartbeat_timeout)
        self.rto_max = max(self.rto_base, 2 * settings.liveness_timeout)
        # How long a received frame waits for something going back to carry its acknowledgement (module docstring).
        self.ack_wait = (settings.ack_interval if laned
                         else min(UNPACED_ACK_FACTOR * settings.ack_interval, self.rto_base / 2))
        for peer in self.peers.values():
            peer.relay.rto = self.rto_base
        self.writer = ChannelWriter(site, incarnation, boot, settings, durable, self.peers, self.announce_gens,
                                    connections, router, pacing, out, hooks)
        self.forwarding = self.writer.forwarding
        # Channels holding confined frames with no way within their sites, since when (``watch_confined``).
        self.stuck: dict[str, float] = {}

    # -- the path ------------------------------------------------------------------------------
    def path(self, p: Peer) -> Path | None:
        """The way ``p``'s channel goes now (``ChannelWriter.path``)."""
        return self.writer.path(p)

    def via(self, p: Peer) -> str | None:
        return self.router.via(p.name, p.cm.status)

    def lane_for(self, p: Peer, lane: int | None) -> int | None:
        """The lane a new frame for ``p`` waits in (None: numbered at once). Behind frames that
        already wait in lanes, always: a channel stays FIFO within a lane."""
        return lane if lane is not None and (self.writer.laned(p) or p.out.holding()) else None

    def confine(self, p: Peer, now: float) -> None:
        """``p``'s channel took or released confined frames (``rcm.wire.envelope``): its path must lead only
        through the sites they all allow (``Router.confine``). On a new path it goes again at once, before
        anything more is written (a path that crossed another site never carries them); with none it waits."""
        changed, new = self.router.confine(p.name, p.out.confinement(), p.conn)
        if changed:
            self.switch(p, new, now)

    def watch_confined(self, now: float) -> None:
        """End of a batch: note the channels whose confined frames have no way within their sites now (and
        forget those that have one again)."""
        for name in [n for n in self.stuck if n not in self.router.confined]:
            del self.stuck[name]
        for name in self.router.confined:
            if self.router.stuck(name, self.peers[name].conn):
                self.stuck.setdefault(name, now)
            else:
                self.stuck.pop(name, None)

    def withhold_stuck(self, now: float) -> None:
        """A channel stuck for ``liveness_timeout`` (as long as a silent peer stays connected) gives its confined
        frames up to repair (``OutboundChannel.withhold``): the destination's order, which waits for what it
        was sent, waits no longer for a path that may never come."""
        for name, since in list(self.stuck.items()):
            if now >= since + self.settings.liveness_timeout:
                del self.stuck[name]
                p = self.peers[name]
                if p.out.withhold():
                    self.confine(p, now)

    def unplug(self, p: Peer, forwarded_too: bool = False) -> None:
        """``p``'s connection is gone (or closed by us for silence): its channel forgets it. With
        ``forwarded_too`` the frames relayed for it go as well (their origins resend them)."""
        p.conn = None
        p.out.connection_lost()
        self.pacing.connection_gone(p.name)     # unreported bytes, and the cost per byte, start over
        if forwarded_too:
            self.forwarding.connection_gone(p.name)

    def restore(self, name: str, acked: int, frames: dict[int, OutFrame], queued: Sequence[OutFrame],
                inbound: tuple[int, int] | None, missed: list[list[int]]) -> None:
        """One peer's channel as the log left it (``rcm.stack.recovery``)."""
        p = self.peers[name]
        p.out.restore(acked, frames, queued)
        self.router.confine(name, p.out.confinement(), p.conn)     # a confined frame read back stays confined
        if inbound is not None:
            p.inb.restore(*inbound)
        p.missed = missed

    # -- offering frames ---------------------------------------------------------------------------
    def offer_reliable(self, p: Peer, kind: int, body: Any, lane: int | None = None) -> int | None:
        """Put a reliable frame in ``p``'s channel and log it when durable: its link sequence number (0: it
        waits in a lane, numbered when written); None when the buffer is full."""
        try:
            f = p.out.offer(kind, 0, None, body, self.lane_for(p, lane))
        except ChannelFull:
            return None
        if self.durable:
            self.out.append(Persist(records.Outbound(p.name, f.link_seq, kind, body)))
        return f.link_seq

    def offer_missed(self, p: Peer, now: float) -> None:
        """Queue MISSED frames for what ``p`` will never get, each under the frame cap.

        What does not fit the outbound buffer waits for the next connection.
        """
        pending = p.missed
        taken = 0
        for chunk in ranges.chunks(pending, ranges.per_frame(self.settings.max_frame_bytes)):
            if self.offer_reliable(p, wire.MISSED, [list(r) for r in chunk]) is None:
                break
            taken += len(chunk)
        p.missed = pending[taken:]
        self.pump(p, now)

    # -- writing (``rcm.channels.writer``) --------------------------------------------------------------
    def pump(self, p: Peer, now: float, fwd: tuple[int, list[int]] | None = None) -> None:
        """Write whatever ``p``'s channel may send now, on its path (``ChannelWriter.pump``)."""
        self.writer.pump(p, now, fwd)

    def service(self, hop: Peer, now: float) -> None:
        """Write what paced neighbour ``hop``'s link takes now (``ChannelWriter.service``)."""
        self.writer.service(hop, now)

    def send_frame(self, p: Peer, frame: list[Any], now: float, tail: Any = None) -> bool:
        """A frame on ``p``'s direct connection, an ack riding on it (``ChannelWriter.send_frame``)."""
        return self.writer.send_frame(p, frame, now, tail)

    def heartbeat(self, p: Peer, now: float) -> None:
        self.writer.heartbeat(p, now)

    def multicast(self, live: list[str], links: dict[str, int], seq: int, header: Any, payload: bytes,
                  now: float) -> None:
        """A new message to its live destinations: one copy per next hop (``ChannelWriter.multicast``)."""
        self.writer.multicast(live, links, seq, header, payload, now)

    def multicast_control(self, live: list[str], links: dict[str, int], body: Any, now: float) -> None:
        """A reliable control frame offered to each of ``live`` (``links``: its link sequence number in each
        channel): one copy per next hop (``ChannelWriter.multicast_control``)."""
        self.writer.multicast_control(live, links, body, now)

    def write_routed(self, hop: str, r: Routed, now: float) -> bool:
        """Write ``r`` on the connection to neighbour ``hop`` (``ChannelWriter.write_routed``)."""
        return self.writer.write_routed(hop, r, now)

    # -- acknowledgements -------------------------------------------------------------------------------
    def ack_in(self, c: Conn, p: Peer, delta: int | None, now: float) -> None:
        """A piggybacked ack delta on ``p``'s direct connection."""
        if delta is None:
            return
        c.rx_ack_base += delta
        if c.rx_ack_base >= p.out.next_seq:
            raise ProtocolViolation(f"ack {c.rx_ack_base} for a frame never sent")
        self.acked(p, c.rx_ack_base, now)

    def acked(self, p: Peer, upto: int, now: float) -> None:
        """``p`` holds our stream up to ``upto``."""
        if p.out.ack(upto):
            if self.durable:
                self.out.append(Persist(records.Acked(p.name, p.out.acked)))
            if p.name in self.router.confined:
                self.confine(p, now)        # confined frames left: the channel may take a wider path
            p.relay.rto = self.rto_base
            p.relay.rto_at = now + p.relay.rto if p.out.sent_upto > p.out.acked and p.relay.rto_at else None
            if self.pacing.limited(p.name) and p.out.next_lane() is not None:
                self.pump(p, now)      # its window opened
        if p.out.held():
            self.resume_held(p, now)

    def resume_held(self, p: Peer, now: float) -> None:
        """End a hold of ``p``'s stream (``rcm.channels.sessions``): the peer acknowledged on the new connection
        (or its deadline passed). The stream goes on after what it holds, then the protocol's state."""
        start = p.out.release()
        c = self.connections.get(p.conn) if p.conn is not None else None
        if c is None:
            return
        if start is not None:
            self.connections.write(c, [wire.SYNC, start, self.announce_gens[p.name]])
            c.tx_next, c.tx_msg_base = start, 0
        self.pump(p, now)
        # Announcements were not sent while held (they must not overtake the frames): send the state now.
        self.hooks.resync(p.name, now)

    def ack_again(self, p: Peer, now: float) -> None:
        """``p``'s stream is acknowledged on a new path now (``Router.unconfined``): what went on the old one may be
        lost (a blackholed link drops it silently), and a sender whose channel waits behind a confined frame it
        wrote (it may have arrived: it is never withheld) writes nothing more until that frame is acknowledged.
        So the frontier goes again, on the new path, if we hold anything of the stream."""
        if p.inb.frontier:
            self.writer.send_ack(p, now)

    def relayed_ack(self, p: Peer, check: int, frontier: int, nack: bool, now: float) -> None:
        """``p`` acknowledges our stream up to ``frontier`` (with NACK: it saw a gap after it)."""
        if check != relay.stream_check(self.incarnation):
            # It does not hold our current stream: start a relayed run it can take.
            if isinstance(self.path(p), Relay) and now >= p.relay.sync_sent_at + self.settings.ack_interval:
                self.resend(p, now)
            return
        if frontier >= p.out.next_seq:
            # Forged by a relay: believed, it would make us forget frames the peer never got.
            raise ProtocolViolation(f"relayed ACK of {p.name} for frame {frontier} of our stream, which was never "
                                    f"sent (the last is {p.out.next_seq - 1})")
        self.acked(p, frontier, now)
        if (nack and isinstance(self.path(p), Relay) and p.out.sent_upto > frontier
                and not (p.relay.rewound_to == frontier and now < p.relay.rewound_at + p.relay.rto)):
            p.relay.rewound_to, p.relay.rewound_at = frontier, now
            self.resend(p, now)

    def nack(self, p: Peer, now: float) -> None:
        """Tell ``p`` (at most once per ``ack_interval``) where its stream stands here: it resends after."""
        if now < p.relay.nack_at + self.settings.ack_interval:
            return
        p.relay.nack_at = now
        p.relay.counters["nacks"] += 1
        self.writer.send_ack(p, now, relay.NACK)

    def report_gap(self, p: Peer, frontier: int, upto: int, now: float) -> None:
        """A SYNC carried ``p``'s stream past frames we never got: tell ``p``, which names their messages in a
        MISSED notice (``gap_reported``). Only robust channels promise them; baselines skip by design."""
        if self.settings.p2p != "robust" or not self.relaying:
            return                      # direct links: only the peer itself acknowledges or syncs
        p.relay.counters["gaps_reported"] += 1
        self.out.append(Log("warning", f"{p.name}'s stream skipped frames {frontier + 1}..{upto} that never "
                                       "arrived here: asking it to name their messages"))
        value = relay.ack_value(frontier, relay.stream_check(p.inb.peer_incarnation))
        self.writer.write_ack(p, Routed(1, self.site, 0, ((p.name, value),), wire.ACK, (relay.GAP, upto)), now)

    def gap_reported(self, p: Peer, check: int, frontier: int, upto: int, now: float) -> None:
        """``p`` never got frames ``frontier + 1 .. upto`` of our stream (a forged acknowledgement made us drop
        them, or a forged SYNC skipped them): their messages become MISSED notices, so they are reported
        and can be repaired, never lost silently (``rcm.channels.released``)."""
        if check != relay.stream_check(self.incarnation):
            return                      # about a stream of ours before a restart: nothing to name
        if not frontier < upto < p.out.next_seq:
            raise ProtocolViolation(f"GAP report of {p.name} for frames {frontier + 1}..{upto}, not a range of "
                                    f"frames sent (the last is {p.out.next_seq - 1})")
        named, forgotten = p.out.carried(frontier, upto)
        p.relay.counters["gaps_named"] += ranges.count(named)
        self.out.append(Log("warning", f"{p.name} never got frames {frontier + 1}..{upto} of our stream, though "
                                       f"they were acknowledged or skipped: {ranges.count(named)} messages reported "
                                       f"to it as missed" + (f", {forgotten} frames too old to name" if forgotten
                                                            else "")))
        if named:
            p.missed = ranges.cap(ranges.normalize([*p.missed, *named]), MISSED_RANGES_MAX)
            if p.cm.status is LinkStatus.CONNECTED:
                self.offer_missed(p, now)

    # -- relayed runs ------------------------------------------------------------------------------------
    def new_generation(self, p: Peer) -> int:
        """``p``'s channel changed path or connection: its announcement generation moves on (and is returned)."""
        gen = self.announce_gens[p.name] = relay.next_generation(self.announce_gens[p.name])
        return gen

    def resend(self, p: Peer, now: float) -> None:
        """Start a relayed run again after the last acknowledged frame (a relayed SYNC, then the frames)."""
        p.out.rewind()
        p.relay.sync_sent_at = now
        p.relay.counters["resends"] += 1
        p.relay.rto_at = None
        sync = Routed(1, self.site, relay.stream_check(self.incarnation), ((p.name, p.out.acked + 1),),
                      wire.SYNC, (self.incarnation, self.boot, self.announce_gens[p.name]))
        self.writer.send_routed(p, sync, now)
        self.pump(p, now)

    def switch(self, p: Peer, new: Path | None, now: float) -> None:
        """``p``'s channel took a new path: everything not acknowledged goes again, on it."""
        p.relay.rto, p.relay.rto_at = self.rto_base, None
        if new is None:
            return
        p.out.rewind()
        gen = self.new_generation(p)
        if isinstance(new, Direct):
            c = self.connections[new.conn]
            self.connections.write(c, [wire.SYNC, p.out.acked + 1, gen])
            c.tx_next, c.tx_msg_base = p.out.acked + 1, 0
            self.pump(p, now)
        else:
            self.resend(p, now)
        # Announcements sent on the old path may be lost: the protocol sends its state again.
        self.hooks.resync(p.name, now)

    def timers(self, now: float) -> None:
        """Per peer: its connection manager's timers, acknowledgements due, a hold that ran out, a relayed run
        a relay lost; then the paced links that may write again."""
        for p in self.peers.values():
            self.hooks.cm_effects(p, p.cm.tick(now), now)
            due = p.inb.ack_due()
            if due is not None and now >= due + self.ack_wait:
                self.writer.send_ack(p, now)
            if p.out.held_until is not None and now >= p.out.held_until:
                self.resume_held(p, now)       # the peer never acknowledged on the new connection
            rto = p.relay.rto_at
            if rto is not None and now >= rto:
                p.relay.rto_at = None
                if isinstance(self.path(p), Relay) and p.out.sent_upto > p.out.acked:
                    # Nothing acknowledged for a while on a relay path: a relay lost it.
                    p.relay.rto = min(2 * p.relay.rto, self.rto_max)
                    self.resend(p, now)
        self.withhold_stuck(now)
        self.writer.service_due(now)

    def next_deadline(self) -> float | None:
        ds: list[float] = []
        for p in self.peers.values():
            d = p.cm.next_deadline()
            if d is not None:
                ds.append(d)
            due = p.inb.ack_due()
            if due is not None and self.router.unconfined(p.name, p.conn) is not None:
                ds.append(due + self.ack_wait)
            if p.relay.rto_at is not None:
                ds.append(p.relay.rto_at)
            if p.out.held_until is not None:
                ds.append(p.out.held_until)
        ds += [since + self.settings.liveness_timeout for since in self.stuck.values()]
        d = self.writer.paced_deadline()
        if d is not None:
            ds.append(d)
        return min(ds) if ds else None

    # -- stats -----------------------------------------------------------------------------------------------
    def stats(self) -> dict[str, dict[str, Any]]:
        out = {}
        for name, p in self.peers.items():
            out[name] = {**p.stats(), **self.pacing.peer_stats(name), "via": self.via(p)}
        return out
