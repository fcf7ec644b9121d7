"""The ordering layer: local sends numbered and checked, the ordering protocol fed, its outputs read (sans-IO).

Theory of operation
-------------------
This layer owns the site's message numbering (``msg_seq``), the intermittent
global order protocol (``ordering``: Lamport, sequencer or hybrid, chosen by
the mission), the precedence of messages it holds (delivered at their order
key, with the precedence they were sent with) and, with a write-ahead log,
the messages the protocol still holds (a compacted log writes them out).

A local send is checked and numbered here (``prepare``: payload size,
destinations, precedence, back-pressure from full channels and from the
order being held back, the protocol's own limits) and becomes a ``Prepared``
send: the stack then offers it to every live destination's channel (the
channel layer numbers its frames), and ``sent`` records it. Destinations
that are disconnected are skipped, not refused: the send reports them, and
the channel layer tells them later in MISSED frames. A message received from
a peer goes to the protocol through ``received``; a control body through
``control``. The protocol's outputs (``Deliver``, ``SendControl``) go back to
the stack, which delivers (after the repair layer has kept the message) or
sends them on the channels.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from contracts.mission import RcmSettings
from contracts.precedence import DEFAULT, URGENT, rank
from contracts.status import LinkStatus
from ordering import ClockExhausted, Deliver, OrderingProtocol, make_protocol
from ordering.base import Output
from rcm import wire
from rcm.actions import Action, Backpressure, Log, Persist, SendRefused
from rcm.channels import lanes
from rcm.channels.peer import Peer
from rcm.durability import records
from rcm.wire import envelope


@dataclass(frozen=True, slots=True)
class Prepared:
    """A local send checked and numbered, with what the protocol said about it."""

    seq: int
    header: Any                 # as the wire and the log carry it (precedence wrapped in)
    key: tuple[Any, ...] | None
    live: list[str]             # destinations that get it now
    skipped: tuple[str, ...]    # disconnected destinations (told later, in MISSED frames)
    outputs: list[Output]
    lane: int
    expires_at: float | None = None
    reach: int | None = None    # confined to these sites (dests and this one: ``rcm.wire.envelope``)


class Multicast:
    """Message numbering and the ordering protocol of one site (see the module docstring)."""

    def __init__(self, site: str, peers: Sequence[str], settings: RcmSettings, ordering: str | None, now: float,
                 first_seq: int, durable: bool, out: list[Action]) -> None:
        self.site = site
        self.settings = settings
        self.durable = durable
        self.out = out
        self.msg_seq = first_seq - 1
        name = ordering or settings.ordering
        # The clock protocols' announcement window (ordering.window); the sequencer announces no clock.
        options = ({"announce_delay": settings.announce_delay}
                   if name in ("lamport", "hybrid") and settings.announce_delay else {})
        self.ordering: OrderingProtocol = make_protocol(name, site, peers, now, **options)
        self.precedence: dict[tuple[str, int], str] = {}    # undelivered messages that are not routine
        # Undelivered messages that expire: (expires_at, arrived as a stub) (``rcm.wire.envelope``).
        self.expiry: dict[tuple[str, int], tuple[float, bool]] = {}
        self.undelivered: dict[tuple[str, int], tuple[Any, bytes]] = {}
        self.reach: dict[tuple[str, int], int] = {}     # undelivered messages that are confined (their masks)
        self.index = {s: i for i, s in enumerate(sorted([site, *peers]))}
        self.exhausted_log_at = float("-inf")       # the last CRITICAL line for an exhausted clock

    def check(self, payload: Any, dests: Sequence[str] | None, peers: Mapping[str, Peer]) -> None:
        """``SendRefused`` if no send of ``payload`` to ``dests`` could be taken, whenever it is made: not bytes,
        over ``max_payload_bytes``, or to a site the mission lacks (``prepare``'s first check; a client's will,
        ``SiteStack.check_send``, is checked when it is left, not only when it is sent)."""
        if not isinstance(payload, (bytes, bytearray)):
            raise SendRefused("payload must be bytes")
        if len(payload) > self.settings.max_payload_bytes:
            raise SendRefused(f"payload of {len(payload)} bytes exceeds max_payload_bytes = "
                              f"{self.settings.max_payload_bytes}")
        unknown = [d for d in dests or () if d != self.site and d not in peers]
        if unknown:
            raise SendRefused(f"unknown destination site {unknown[0]!r}")

    def prepare(self, payload: Any, dests: Sequence[str] | None, now: float, precedence: str,
                peers: Mapping[str, Peer], expires_at: float | None = None,
                within: bool | Sequence[str] = True) -> Prepared:
        """Check and number a local send (``SendRefused``, ``Backpressure``) and give it to the protocol."""
        self.check(payload, dests, peers)
        try:
            rank(precedence)
            if expires_at is not None:
                expires_at = envelope.check_expires_at(expires_at)
        except ValueError as e:
            raise SendRefused(str(e)) from None
        if expires_at is not None and expires_at <= now:
            raise SendRefused(f"expires_at {expires_at:.3f} is already past (now {now:.3f}): the message "
                              "would never be sent")
        reach = None
        if dests is None:
            targets = list(peers)
        else:
            targets = sorted({d for d in dests if d != self.site})
            if len(targets) < len(peers) and within is not False:
                # Confined: its content may reach only its destinations, this site and those ``within`` names
                # (docs/relay.md).
                allowed = {self.site, *targets}
                if within is not True:
                    strangers = [w for w in within if w != self.site and w not in peers]
                    if strangers:
                        raise SendRefused(f"unknown site {strangers[0]!r} in within")
                    allowed.update(within)
                if len(allowed) <= len(peers):
                    reach = envelope.reach_mask(sorted(allowed), self.index)
        skipped = [d for d in targets if peers[d].cm.status is LinkStatus.DISCONNECTED]
        live = [d for d in targets if d not in skipped]
        size = lanes.frame_bytes(wire.DATA, payload)
        full = [d for d in live if not peers[d].out.has_room(1, size)]
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
        try:
            if precedence in URGENT:
                header, key, outputs = self.ordering.local_send(seq, bytes(payload), now, dests=tuple(live),
                                                                urgent=True)
            else:
                header, key, outputs = self.ordering.local_send(seq, bytes(payload), now, dests=tuple(live))
        except ClockExhausted as e:
            # Not silent: the operator must start a new mission epoch (docs/ordering.md). Logged with
            # the next batch's actions, at most once a minute.
            if now >= self.exhausted_log_at + 60.0:
                self.exhausted_log_at = now
                self.out.append(Log("critical", f"{e}; this site can send nothing more in this mission "
                                                "(docs/ordering.md, 'At the bound')"))
            raise SendRefused(str(e)) from None
        self.msg_seq = seq
        if precedence != DEFAULT:
            self.precedence[(self.site, seq)] = precedence
        if expires_at is not None:
            self.expiry[(self.site, seq)] = (expires_at, False)
        if reach is not None:
            self.reach[(self.site, seq)] = reach
        return Prepared(seq, envelope.wrap(header, precedence, expires_at, reach=reach),
                        tuple(key) if key is not None else None, live, tuple(skipped), list(outputs),
                        lanes.lane(precedence, self.settings.lanes), expires_at, reach)

    def sent(self, p: Prepared, payload: bytes, links: dict[str, int]) -> None:
        """The send is in its destinations' channels (``links``: their link seqs, 0 while in a lane)."""
        if self.durable:
            self.out.append(Persist(records.LocalSend(p.seq, p.header, payload, links, p.skipped)))
            self.undelivered[(self.site, p.seq)] = (p.header, payload)

    def received(self, origin: str, seq: int, header: Any, precedence: str, payload: bytes,
                 now: float, expires_at: float | None = None, expired: bool = False,
                 reach: int | None = None) -> list[Output]:
        """A message from ``origin`` (its ordering header, precedence and expiry; ``expired``: a stub; ``reach``:
        its confinement) to the protocol (``PeerInputError``)."""
        if precedence in URGENT:
            outs = self.ordering.receive(origin, seq, header, payload, now, urgent=True)
        else:       # the call every protocol has taken since the first version
            outs = self.ordering.receive(origin, seq, header, payload, now)
        if precedence != DEFAULT:
            self.precedence[(origin, seq)] = precedence
        if expires_at is not None:
            self.expiry[(origin, seq)] = (expires_at, expired)
        if reach is not None:
            self.reach[(origin, seq)] = reach
        return outs

    def logged(self, origin: str, seq: int, wire_header: Any, payload: bytes) -> None:
        """A received message was logged (durable): the protocol may hold it over a compaction."""
        if self.durable:
            self.undelivered[(origin, seq)] = (wire_header, payload)

    def delivering(self, d: Deliver) -> tuple[str, float | None, bool, int | None]:
        """``d`` goes up: its precedence, expiry, stub mark and confinement (the protocol no longer holds it)."""
        self.undelivered.pop((d.origin, d.seq), None)
        expires_at, expired = self.expiry.pop((d.origin, d.seq), (None, False))
        return (self.precedence.pop((d.origin, d.seq), DEFAULT), expires_at, expired,
                self.reach.pop((d.origin, d.seq), None))

    # -- recovery (``rcm.stack.recovery``) ---------------------------------------------------------------------
    def restore(self, msg_seq: int, snapshot: Any) -> None:
        """The numbering and the protocol's snapshot read back from the log."""
        self.msg_seq = max(self.msg_seq, msg_seq)
        if snapshot is not None:
            self.ordering.restore(snapshot)

    def recovered(self, origin: str, seq: int, wire_header: Any, key: tuple[Any, ...], late: bool) -> None:
        """A logged message delivered before the restart: the protocol learns from it (``ValueError``)."""
        self.ordering.recovered(origin, seq, envelope.unwrap(wire_header)[0], key, late)

    def replayed(self, origin: str, seq: int, wire_header: Any, payload: bytes, now: float) -> list[Output]:
        """A logged message not delivered before the restart: to the protocol again (``ValueError``)."""
        env = envelope.open_(wire_header)
        outs = self.received(origin, seq, env.header, env.precedence, payload, now, env.expires_at, env.expired,
                             env.reach)
        self.undelivered[(origin, seq)] = (wire_header, payload)
        return outs

