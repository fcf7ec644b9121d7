"""The stack's multicast and intermittent global order: local sends in, the ordering protocol's outputs out.

``SiteStack`` (``rcm.stack``) is one object in several files by concern
(``rcm.stackbase``); this one holds the top of the composition:

* multicast: a local send (``send``) is checked, numbered, given to the
  ordering protocol and copied to the channel of every destination;
* intermittent global order: the ordering protocol decides when and how
  messages are delivered; its outputs (``Deliver``, ``SendControl``) become
  ``Delivery`` actions and reliable or best-effort control frames here, and
  a received message reaches it through ``_order_received`` with its
  precedence kept for the delivery.

Destinations that are disconnected when a message is sent are skipped, not
refused: the send reports them, and when such a peer connects again it gets
MISSED frames naming the messages it will never receive (its client sees a
``Missing`` event). Both carry inclusive ``[first, last]`` ranges of message
sequence numbers (``rcm.ranges``), split so that no frame passes
``max_frame_bytes``; the skipped numbers wait per peer as ranges too, at most
``MISSED_RANGES_MAX`` of them (past that the last one widens over the gap).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from contracts.precedence import DEFAULT, URGENT, rank
from contracts.status import LinkStatus
from ordering import ClockExhausted, Deliver, SendControl
from ordering.base import Output

from . import lanes, ranges, records, relay, wire
from .actions import Action, Backpressure, Delivery, Log, SendRefused, SendResult
from .peer import MISSED_RANGES_MAX, Peer
from .relay import Direct, Relay, Routed
from .stackbase import StackBase


class Multicast(StackBase):
    """Local sends and the ordering protocol's inputs and outputs (mixed into ``SiteStack``)."""

    def send(self, payload: bytes, dests: Sequence[str] | None, now: float, precedence: str = DEFAULT
             ) -> tuple[SendResult, list[Action]]:
        """The local client sends ``payload`` to ``dests`` (None: every site) at ``precedence``."""
        if not isinstance(payload, (bytes, bytearray)):
            raise SendRefused("payload must be bytes")
        try:
            rank(precedence)
        except ValueError as e:
            raise SendRefused(str(e)) from None
        if len(payload) > self.settings.max_payload_bytes:
            raise SendRefused(f"payload of {len(payload)} bytes exceeds max_payload_bytes = "
                              f"{self.settings.max_payload_bytes}")
        if dests is None:
            targets = list(self.peers)
        else:
            unknown = [d for d in dests if d != self.site and d not in self.peers]
            if unknown:
                raise SendRefused(f"unknown destination site {unknown[0]!r}")
            targets = sorted({d for d in dests if d != self.site})
        skipped = [d for d in targets if self.peers[d].cm.status is LinkStatus.DISCONNECTED]
        live = [d for d in targets if d not in skipped]
        size = lanes.frame_bytes(wire.DATA, payload)
        full = [d for d in live if not self.peers[d].out.has_room(1, size)]
        if full:
            raise Backpressure(f"outbound buffer to {full[0]} is full ({self.settings.max_buffered_messages} "
                               f"messages or {self.settings.max_buffered_bytes} bytes): try again later")
        held = self.ordering.pending_count()
        if held >= self.settings.max_buffered_messages and precedence not in URGENT:   # urgent: never held
            # The order waits on a connected site that has not let it advance (with Lamport, one that never
            # announces its clock): back-pressure bounds what every site holds back (issue 23 item 2).
            raise Backpressure(f"{held} messages are held back waiting for the global order "
                               f"(max_buffered_messages = {self.settings.max_buffered_messages}): "
                               "a connected site has not let it advance; try again later")
        seq = self.msg_seq + 1
        payload = bytes(payload)
        try:
            if precedence in URGENT:
                header, key, outputs = self.ordering.local_send(seq, payload, now, dests=tuple(live), urgent=True)
            else:
                header, key, outputs = self.ordering.local_send(seq, payload, now, dests=tuple(live))
        except ClockExhausted as e:
            # Not silent: the operator must start a new mission epoch (docs/ordering.md). Logged with
            # the next batch's actions, at most once a minute.
            if now >= self.exhausted_log_at + 60.0:
                self.exhausted_log_at = now
                self._out.append(Log("critical", f"{e}; this site can send nothing more in this mission "
                                                 "(docs/ordering.md, 'At the bound')"))
            raise SendRefused(str(e)) from None
        self.msg_seq = seq
        header = lanes.wrap(header, precedence)
        if precedence != DEFAULT:
            self.precedence[(self.site, seq)] = precedence
        lane = lanes.lane(precedence, self.settings.lanes)
        links: dict[str, int] = {}
        for d in live:
            # 0: waiting in a lane of a paced channel, numbered when written (``rcm.lanes``).
            peer = self.peers[d]
            links[d] = peer.out.offer(wire.DATA, seq, header, payload, self._lane_for(peer, lane)).link_seq
        if self.durable:
            self._persist(records.LocalSend(seq, header, payload, links, tuple(skipped)))
            self.undelivered[(self.site, seq)] = (header, payload)
        if self.relaying:
            self._multicast(live, links, seq, header, payload, now)
        else:
            for d in live:
                self._pump(self.peers[d], now)
        for d in skipped:
            ranges.add(self.peers[d].missed, seq, MISSED_RANGES_MAX)
        self._ordering_outputs(outputs, now)
        result = SendResult(f"{self.site}:{seq}", seq, list(key) if key is not None else None,
                            tuple(skipped))
        return result, self._finish(now)

    def _order_received(self, origin: str, seq: int, header: Any, payload: bytes, now: float) -> list[Output]:
        """A message (its wire header) to the ordering protocol, its precedence kept for the delivery."""
        inner, precedence = lanes.unwrap(header)
        if precedence in URGENT:
            outs = self.ordering.receive(origin, seq, inner, payload, now, urgent=True)
        else:       # the call every protocol has taken since the first version
            outs = self.ordering.receive(origin, seq, inner, payload, now)
        if precedence != DEFAULT:
            self.precedence[(origin, seq)] = precedence
        return outs

    def _offer_missed(self, p: Peer, now: float) -> None:
        """Queue MISSED frames for what ``p`` will never get, each under the frame cap.

        What does not fit the outbound buffer waits for the next connection.
        """
        pending = p.missed
        taken = 0
        for chunk in ranges.chunks(pending, ranges.per_frame(self.settings.max_frame_bytes)):
            if not self._offer_reliable(p, wire.MISSED, [list(r) for r in chunk]):
                break
            taken += len(chunk)
        p.missed = pending[taken:]
        self._pump(p, now)

    def _ordering_outputs(self, outputs: Sequence[Output], now: float) -> None:
        for o in outputs:
            if isinstance(o, Deliver):
                prec = self.precedence.pop((o.origin, o.seq), DEFAULT)
                if not self._kept(o.origin, o.seq, tuple(o.key), o.payload, now, precedence=prec):
                    self.undelivered.pop((o.origin, o.seq), None)
                    continue            # repaired already, before its copy came this way
                self.delivered_local += 1
                if self.durable:
                    self.undelivered.pop((o.origin, o.seq), None)
                if o.origin != self.site:
                    p = self.peers[o.origin]
                    p.delivered += 1
                    if o.late:
                        p.late += 1
                self._out.append(Delivery(o.origin, o.seq, tuple(o.key), o.late, o.payload, prec))
            elif isinstance(o, SendControl):
                targets = o.to if o.to is not None else [
                    n for n, p in self.peers.items() if p.cm.status is not LinkStatus.DISCONNECTED]
                relayed: dict[str, list[tuple[str, int]]] = {}
                for name in targets:
                    p = self.peers[name]
                    if o.reliable:
                        if not self._offer_reliable(p, wire.CTRL, o.body, lanes.ORDERED_LANE):
                            self._out.append(Log("warning", f"control to {name} dropped: buffer full"))
                            continue
                        self._pump(p, now)
                    else:
                        path = self._path(p)
                        if path is not None and p.out.supersede_announcement():
                            # One still waits last in the lanes (a FLASH flood makes one per send): the
                            # peer gets the protocol's state afresh instead, absolute (hybrid's deltas
                            # chain on what was told), in the place of both (rcm.lanes, the share).
                            self._ordering_outputs(self.ordering.resync(name, now), now)
                        elif path is not None and p.out.queue_announcement(o.body):
                            self._pump(p, now)       # behind the frames of a paced channel's lanes
                        elif isinstance(path, Direct):
                            if not p.out.held():    # else it goes afresh when the hold ends (_resume_held)
                                self._send_frame(p, [wire.ANNOUNCE, self.announce_gen, o.body], now)
                        elif isinstance(path, Relay) and self.peers[path.hop].conn is not None:
                            # After the last frame offered to it: applied once those arrived.
                            relayed.setdefault(path.hop, []).append((name, p.out.next_seq - 1))
                            p.relay.counters["relayed_out"] += 1
                for hop, entries in relayed.items():
                    self._write_routed(hop, Routed(1, self.site, relay.stream_check(self.incarnation),
                                                   tuple(entries), wire.ANNOUNCE,
                                                   (self.boot, self.announce_gen, o.body)), now)

