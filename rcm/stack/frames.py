"""Inter-site frames decoded once, into small frozen types (as ``rcm.durability.records`` and ``rcm.wire.handshake``).

Theory of operation
-------------------
``rcm.wire`` turns bytes into msgpack lists; ``decode`` turns one list into
one of the types below, checking every field a peer controls: types, ranges
(message and link sequence numbers, MISSED and repair ranges within the
honest ceiling of ``ordering``), site indexes, the wrapper of a DATA header
(``rcm.wire.envelope``: precedence, expiry, and a stub's empty payload),
the bodies of repair frames (``rcm.repair.frames``
parsers). Only decoding raises ``ProtocolViolation``: a frame that decodes
is the peer's word, and what the stack then does with it is ours, so a bug
past this point is never blamed on the peer (it is raised, not turned into
a closed link). What decoding cannot know (the stream check, an ack beyond
what we sent) the stack checks against its state, and that too is the
peer's fault.

A ROUTED frame decodes into ``Routed`` with its entries; the body of the
entry for this site (if any) is decoded too, into the same types a direct
connection yields (``RoutedBody``), so the direct and the relayed paths of
the stack handle one set of types. Bodies for other sites are carried as
they came (``raw``): this site only forwards them.

A LATEST frame (``rcm.latest``) is outside the reliable stream: it decodes into
``LatestFrame`` with its entry (``rcm.wire.latest.parse_frame``: a frame whose
bytes are wrong is a violation; one late, expired or from a skewed clock is
not, the table drops it).

A FRAG frame (``rcm.channels.fragments``) decodes into ``Fragment``, its piece
checked; the frame its pieces make is decoded like any other once the inbound
path has put it together.

HELLO is decoded by ``rcm.wire.handshake`` (whose checks need the stack's terms);
``decode`` returns it as ``HelloFrame`` with the raw list.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from ordering import KEY_INT_MAX, honest_ceiling
from rcm import ranges, wire
from rcm.actions import ProtocolViolation
from rcm.channels import fragments
from rcm.repair import frames as repair
from rcm.routing import relay
from rcm.routing.linkstate import Advert, LinkState
from rcm.wire import envelope
from rcm.wire.latest import Entry, LatestError, parse_frame


@dataclass(frozen=True, slots=True)
class Message:
    """A message as DATA carries it: the ordering protocol's header, its precedence, and the payload.

    ``wire_header`` is the header as sent (the precedence and the expiry wrapped in, ``rcm.wire.envelope``):
    what logs and relayed copies carry. ``expired``: a stub (its payload is empty)."""

    header: Any
    precedence: str
    wire_header: Any
    payload: bytes
    expires_at: float | None = None
    expired: bool = False
    reach: int | None = None    # confined: the mask of the sites that may hold it (``rcm.wire.envelope``)


@dataclass(frozen=True, slots=True)
class HelloFrame:
    raw: list[Any]


@dataclass(frozen=True, slots=True)
class Data:
    check: int
    dseq: int                                    # msg seq delta (negative after an urgent overtook older ones)
    message: Message
    ack: int | None
    fwd: tuple[tuple[str, int], ...] | None      # copies of this message the receiver relays on


@dataclass(frozen=True, slots=True)
class Ctrl:
    check: int
    body: Any                                    # the ordering protocol checks it (``PeerInputError``)
    ack: int | None


@dataclass(frozen=True, slots=True)
class Announce:
    generation: int
    body: Any
    ack: int | None


@dataclass(frozen=True, slots=True)
class Heartbeat:
    check: int
    ack: int | None


@dataclass(frozen=True, slots=True)
class Missed:
    check: int
    ranges: list[list[int]]
    ack: int | None


@dataclass(frozen=True, slots=True)
class Bye:
    reason: str
    incompatible: bool


@dataclass(frozen=True, slots=True)
class Sync:
    start: int
    generation: int | None


@dataclass(frozen=True, slots=True)
class Links:
    advert: Advert


@dataclass(frozen=True, slots=True)
class Summary:
    check: int
    reply: bool
    held: dict[str, list[list[int]]]
    ack: int | None


@dataclass(frozen=True, slots=True)
class Fetch:
    check: int
    origin: str
    ranges: list[list[int]]
    ack: int | None


@dataclass(frozen=True, slots=True)
class RepairFrame:
    check: int
    repaired: repair.Repaired
    ack: int | None


@dataclass(frozen=True, slots=True)
class LatestFrame:
    entry: Entry


@dataclass(frozen=True, slots=True)
class Fragment:
    piece: fragments.Piece


# -- the body of a ROUTED frame's entry for this site -------------------------------------------------
@dataclass(frozen=True, slots=True)
class RoutedData:
    seq: int
    message: Message


@dataclass(frozen=True, slots=True)
class RoutedCtrl:
    body: Any


@dataclass(frozen=True, slots=True)
class RoutedMissed:
    ranges: list[list[int]]


@dataclass(frozen=True, slots=True)
class RoutedAnnounce:
    boot: int
    generation: int
    body: Any


@dataclass(frozen=True, slots=True)
class RoutedSync:
    incarnation: int
    boot: int
    generation: int


@dataclass(frozen=True, slots=True)
class RoutedAck:
    nack: bool
    gap_upto: int | None                         # GAP: a SYNC carried the stream from ``value`` to here
    check: int                                   # the stream check of the stream acknowledged (ours)


@dataclass(frozen=True, slots=True)
class RoutedSummary:
    reply: bool
    held: dict[str, list[list[int]]]


@dataclass(frozen=True, slots=True)
class RoutedFetch:
    origin: str
    ranges: list[list[int]]


@dataclass(frozen=True, slots=True)
class RoutedRepair:
    repaired: repair.Repaired


RoutedBody = (RoutedData | RoutedCtrl | RoutedMissed | RoutedAnnounce | RoutedSync | RoutedAck | RoutedSummary
              | RoutedFetch | RoutedRepair)


@dataclass(frozen=True, slots=True)
class Routed:
    """A ROUTED frame: ``frame`` as it came (forwarded entries re-encode from it), and the decoded body of
    this site's entry (``mine``: its value and body) when it names this site."""

    frame: relay.Routed
    mine: tuple[int, RoutedBody] | None


Frame = (HelloFrame | Data | Ctrl | Announce | Heartbeat | Missed | Bye | Sync | Links | Summary | Fetch
         | RepairFrame | Routed | LatestFrame | Fragment)


class FrameDecoder:
    """Decodes one site's incoming frames (it knows the mission's sites, the payload cap, the routing)."""

    def __init__(self, site: str, sites: Sequence[str], links: LinkState, max_payload: int, relaying: bool,
                 max_hops: int = 1, max_frame: int = 1 << 20) -> None:
        """``max_hops``: the mission's terms' (1 without relaying): a LATEST frame crossed fewer relays;
        ``max_frame``: the frame limit (a fragmented frame's too)."""
        self.site = site
        self.max_frame = max_frame
        self.max_hops = max_hops
        self.sites = sorted(sites)
        self.index = self.sites.index(site)     # this site's bit in a confinement mask
        self.links = links
        self.max_payload = max_payload
        self.relaying = relaying

    def decode(self, f: list[Any], now: float) -> Frame:
        """One frame of an open connection (or a HELLO/BYE before it); ``ProtocolViolation`` if malformed."""
        kind = f[0]
        try:
            if kind == wire.DATA:
                return self._data(f, now)
            if kind in (wire.CTRL, wire.MISSED, wire.SUMMARY, wire.FETCH, wire.REPAIR):
                return self._reliable(f, now)
            if kind == wire.ANNOUNCE:
                _need(f, 3, 4, "ANNOUNCE")
                return Announce(relay.generation(f[1]), f[2], _ack(f, 3))
            if kind == wire.HEARTBEAT:
                _need(f, 2, 3, "HEARTBEAT")
                return Heartbeat(_check(f[1]), _ack(f, 2))
            if kind == wire.SYNC:
                _need(f, 2, 3, "SYNC")
                start = f[1]
                if type(start) is not int or not 1 <= start <= KEY_INT_MAX:
                    raise ProtocolViolation("malformed SYNC frame")
                return Sync(start, relay.generation(f[2]) if len(f) > 2 else None)
            if kind == wire.BYE:
                reason = f[1] if len(f) > 1 and isinstance(f[1], str) else ""
                return Bye(reason[:200], len(f) > 2 and f[2] == 1)
            if kind == wire.HELLO:
                return HelloFrame(f)
            if kind == wire.ROUTED and self.relaying:
                return self._routed(f, now)
            if kind == wire.LINKS and self.relaying:
                return Links(self.links.decode(f, now))
            if kind == wire.LATEST:
                return LatestFrame(parse_frame(f, self.links.site_at, self.max_hops))
            if kind == wire.FRAG:
                return Fragment(fragments.parse(f, self.max_frame))
        except (repair.RepairError, LatestError, fragments.FragmentError) as e:
            raise ProtocolViolation(str(e)) from None
        raise ProtocolViolation(f"unknown frame type {kind}")

    # -- direct frames -----------------------------------------------------------------------
    def _data(self, f: list[Any], now: float) -> Data:
        _need(f, 5, 7, "DATA")
        dseq, payload = f[2], f[4]
        if type(dseq) is not int or dseq == 0 or abs(dseq) > KEY_INT_MAX:
            raise ProtocolViolation("malformed DATA frame: message sequence number delta")
        fwd = None
        if len(f) > 6:
            fwd = self._entries(f[6], "DATA forward list", positive=True)
        return Data(_check(f[1]), dseq, self._message(f[3], payload), _ack(f, 5), fwd)

    def _reliable(self, f: list[Any], now: float) -> Ctrl | Missed | Summary | Fetch | RepairFrame:
        kind = f[0]
        _need(f, 3, 4, wire.FRAME_NAMES[kind])
        check, body, ack = _check(f[1]), f[2], _ack(f, 3)
        if kind == wire.CTRL:
            return Ctrl(check, body, ack)
        if kind == wire.MISSED:
            return Missed(check, missed_ranges(body, now), ack)
        ceiling = honest_ceiling(now)
        if kind == wire.SUMMARY:
            reply, held = repair.parse_summary(body, self.sites, ceiling)
            return Summary(check, reply, held, ack)
        if kind == wire.FETCH:
            origin, wanted = repair.parse_fetch(body, self.sites, ceiling)
            return Fetch(check, origin, wanted, ack)
        got = repair.parse_repair(body, self.sites, self.max_payload, ceiling)
        if not envelope.in_reach(got.reach, self.index):
            raise ProtocolViolation("a REPAIR of a message confined to other sites was sent here")
        return RepairFrame(check, got, ack)

    def _message(self, header: Any, payload: Any) -> Message:
        if not isinstance(payload, bytes) or len(payload) > self.max_payload:
            raise ProtocolViolation("malformed DATA frame: the payload is not bytes within max_payload_bytes")
        try:
            env = envelope.open_(header, len(self.sites))
            envelope.check_stub(env, payload)
        except envelope.EnvelopeError as e:
            raise ProtocolViolation(f"malformed DATA header: {e}") from None
        if not envelope.in_reach(env.reach, self.index):
            raise ProtocolViolation("a message confined to other sites was sent here")
        return Message(env.header, env.precedence, header, payload, env.expires_at, env.expired, env.reach)

    def _entries(self, flat: Any, what: str, positive: bool = False) -> tuple[tuple[str, int], ...]:
        if not isinstance(flat, list) or len(flat) % 2 or (positive and not flat):
            raise ProtocolViolation(f"malformed {what}")
        out = []
        for i in range(0, len(flat), 2):
            value = flat[i + 1]
            if type(value) is not int or not (1 if positive else 0) <= value <= KEY_INT_MAX:
                raise ProtocolViolation(f"malformed {what}: value {value!r:.40}")
            out.append((self.links.site_at(flat[i]), value))
        return tuple(out)

    # -- relayed frames ------------------------------------------------------------------------
    def _routed(self, f: list[Any], now: float) -> Routed:
        r = self._confined(relay.decode(f, self.sites))
        mine = next((value for dest, value in r.entries if dest == self.site), None)
        if mine is None or r.origin == self.site:
            return Routed(r, None)
        return Routed(r, self._routed_body(r, mine, now))

    def _confined(self, r: relay.Routed) -> relay.Routed:
        """``r`` with the confinement of the content it carries (a DATA's header, a REPAIR's body), checked
        strictly (a relay never carries a confined message as if it were not): a mask of this mission's
        sites, naming its origin, every destination and this site (``ProtocolViolation`` otherwise)."""
        try:
            if r.kind == wire.DATA:
                reach = envelope.reach_of(r.body[1])
                if reach is not None:
                    envelope.check_reach(reach, len(self.sites))
            elif r.kind == wire.REPAIR:
                reach = repair.repair_reach(r.body[0], len(self.sites))
            else:
                return r
        except (envelope.EnvelopeError, repair.RepairError) as e:
            raise ProtocolViolation(f"malformed ROUTED {wire.FRAME_NAMES[r.kind]} frame: {e}") from None
        if reach is None:
            return r
        if not envelope.in_reach(reach, self.index):
            raise ProtocolViolation(f"a ROUTED {wire.FRAME_NAMES[r.kind]} frame confined to other sites was "
                                    "sent here")
        index = self.links.index
        outside = [s for s in (r.origin, *(d for d, _ in r.entries)) if not envelope.in_reach(reach, index[s])]
        if outside:
            raise ProtocolViolation(f"ROUTED {wire.FRAME_NAMES[r.kind]} frame confined away from {outside[0]}, "
                                    "which it names")
        return replace(r, reach=reach)

    def _routed_body(self, r: relay.Routed, value: int, now: float) -> tuple[int, RoutedBody]:
        """Our entry's value and what ``r`` carries for us. An ANNOUNCE's value holds after and our generation
        (``relay.announce_value``), an ACK's the frontier and our stream's check (``relay.ack_value``)."""
        kind, body = r.kind, r.body
        ceiling = honest_ceiling(now)
        if kind == wire.DATA:
            return value, RoutedData(body[0], self._message(body[1], body[2]))
        if kind == wire.CTRL:
            return value, RoutedCtrl(body[0])
        if kind == wire.MISSED:
            return value, RoutedMissed(missed_ranges(body[0], now))
        if kind == wire.ANNOUNCE:
            after, gen = relay.announce_parts(value)
            return after, RoutedAnnounce(body[0], gen, body[1])
        if kind == wire.SYNC:
            return value, RoutedSync(body[0], body[1], body[2])
        if kind == wire.ACK:
            frontier, check = relay.ack_parts(value)
            return frontier, RoutedAck(body[0] == relay.NACK, body[1] if body[0] == relay.GAP else None, check)
        if kind == wire.SUMMARY:
            return value, RoutedSummary(*repair.parse_summary(body[0], self.sites, ceiling))
        if kind == wire.FETCH:
            return value, RoutedFetch(*repair.parse_fetch(body[0], self.sites, ceiling))
        return value, RoutedRepair(repair.parse_repair(body[0], self.sites, self.max_payload, ceiling))


def missed_ranges(body: Any, now: float) -> list[list[int]]:
    """A MISSED frame's ranges: canonical, and naming no number the peer cannot have sent by now."""
    try:
        return ranges.parse(body, honest_ceiling(now))
    except ValueError as e:
        raise ProtocolViolation(f"malformed MISSED frame: {e}") from None


def _need(f: list[Any], least: int, most: int, name: str) -> None:
    if not least <= len(f) <= most:
        raise ProtocolViolation(f"malformed {name} frame: {len(f)} fields")


def _check(value: Any) -> int:
    if type(value) is not int or not 0 <= value < wire.CHECK_MOD:
        raise ProtocolViolation(f"malformed stream check {value!r:.40}")
    return value


def _ack(f: list[Any], at: int) -> int | None:
    """The optional trailing ack delta at position ``at`` (nil when absent)."""
    if len(f) <= at or f[at] is None:
        return None
    delta = f[at]
    if type(delta) is not int or delta < 0:
        raise ProtocolViolation("malformed ack")
    return delta
