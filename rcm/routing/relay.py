"""Relaying: ROUTED frames, the path a peer's channel takes, and its relay-side timers (pure).

Theory of operation (docs/relay.md has the long form and a worked triangle)
---------------------------------------------------------------------------
Each pair of sites keeps one end-to-end robust channel (``rcm.channels.p2p``): link
sequence numbers from origin to destination, a buffer at the origin until
the destination acknowledges, a frontier at the destination that drops
duplicates. Its frames take one *path* at a time:

* ``Direct(conn)``: the direct connection, numbered implicitly after a SYNC
  (the paper's channel, unchanged);
* ``Relay(hop)``: ROUTED frames to ``hop``, a neighbour that forwards them
  along its own routes (``rcm.routing.linkstate``), each frame naming its link
  sequence number explicitly.

Whenever the path changes, the origin rewinds the channel to the first
unacknowledged frame and sends it all again on the new path (after a SYNC, or
a relayed SYNC that names its stream's identity), so the destination sees
each path carry a contiguous run from at most its frontier + 1. It takes a
frame only at exactly frontier + 1: a duplicate (a copy that came the other
way) is dropped, a frame past a gap (a relay lost what was in flight when a
link broke) is dropped and answered with a NACK. Lost relayed frames come
again after a NACK, or after ``rto`` without acknowledgement (doubling up to
``RTO_MAX``). So each destination delivers every message once, in the order
its origin sent it, whatever mix of paths the copies took.

A best-effort control body (a Lamport clock announcement) on a relay path
carries ``after``, the last link sequence number the origin had sent the
destination: the destination applies it only once its frontier has reached
``after`` (it keeps the latest one until then), so an announcement never
overtakes the data it vouches for, as on a direct connection. ``after`` and
the destination's announcement generation travel in the destination's entry
(``announce_value``), both being per destination: so one announcement to
every destination behind a hop is one frame whatever their channels'
generations (each peer channel has its own since e7af4d8; with the
generation in the body, announcements to destinations whose generations
differed went one frame each, and a Lamport site's announcements grew with
the sites times the path: docs/experiments.md, "Growth with the number of
sites").

ROUTED frame:

    [ROUTED, hops, origin, stream_check, [dest, value, dest, value, ...], kind, body...]

``hops``: links crossed when it arrives (the origin sends 1; relays add one
and drop past ``max_hops``). ``stream_check``: the origin's stream identity
mod 2^16 (for ACK: the check of the stream it acknowledges, the
destination's, as the acknowledging origin holds it; ``SEVERAL_CHECKS`` when
its entries name one each).
Sites are indexes into the mission's sorted sites. One frame carries one
message to every destination behind the same next hop (``value``: that
destination's link sequence number), so a multicast crosses each link once.

    kind DATA      body: msg_seq, header, payload
    kind CTRL      body: control body                value: link seq
    kind MISSED    body: ranges                      value: link seq
    kind SUMMARY, FETCH, REPAIR   body: as on a direct link (rcm.repair.frames)   value: link seq
    kind ANNOUNCE  body: boot, control body    entries: [dest, after, generation, ...] (three per destination;
                   in ``Routed.entries`` one value, ``announce_value``)
    kind SYNC      body: stream identity, boot, generation     value: first link seq of the run
    kind ACK       body: flags (1: NACK, a gap)      value: frontier
                   body: 2 (GAP), upto               value: the frontier before a SYNC carried it to upto
                   (frames frontier + 1 .. upto will never come: the origin names them in a MISSED)
                   A site's acknowledgements of the streams behind one next hop, due or not, go in one frame
                   when one is due: stream_check ``SEVERAL_CHECKS`` (-1) and three per destination, [dest,
                   frontier, stream check, ...]. In ``Routed.entries`` each value is ``ack_value``.
"""
from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ordering import KEY_INT_MAX
from rcm import wire
from rcm.actions import ProtocolViolation

STREAM_CHECK_MOD = 1 << 16
GENERATIONS = 128           # announcement generations, compared in serial-number arithmetic
NACK = 1
SEVERAL_CHECKS = -1         # a ROUTED ACK's stream_check when each of its entries names its own
GAP = 2
RELAYED_KINDS = frozenset({wire.DATA, wire.CTRL, wire.MISSED, wire.ANNOUNCE, wire.SYNC, wire.ACK,
                           *wire.REPAIR_KINDS})


@dataclass(frozen=True, slots=True)
class Direct:
    conn: Hashable


@dataclass(frozen=True, slots=True)
class Relay:
    hop: str


Path = Direct | Relay


@dataclass(frozen=True, slots=True)
class Routed:
    hops: int
    origin: str
    check: int
    entries: tuple[tuple[str, int], ...]
    kind: int
    body: tuple[Any, ...]
    reach: int | None = None    # confined content (DATA, REPAIR): the mask of sites it may cross (not encoded:
    #                             it is inside the header or the REPAIR body; ``rcm.stack.frames`` reads it)

    def only(self, entries: Sequence[tuple[str, int]], hops: int) -> Routed:
        return Routed(hops, self.origin, self.check, tuple(entries), self.kind, self.body, self.reach)


def stream_check(incarnation: int) -> int:
    return incarnation % STREAM_CHECK_MOD


def stream_check_of(value: Any) -> int:
    """A stream check from the wire (``ProtocolViolation`` if it is not one)."""
    if type(value) is not int or not 0 <= value < STREAM_CHECK_MOD:
        raise ProtocolViolation(f"stream check {value!r} is not in [0, {STREAM_CHECK_MOD})")
    return value


def generation(value: Any) -> int:
    """An announcement generation from the wire (``ProtocolViolation`` if it is not one)."""
    if type(value) is not int or not 0 <= value < GENERATIONS:
        raise ProtocolViolation(f"announcement generation {value!r} is not in [0, {GENERATIONS})")
    return value


def next_generation(gen: int) -> int:
    return (gen + 1) % GENERATIONS


def announce_value(after: int, gen: int) -> int:
    """A ROUTED ANNOUNCE entry's value: the last link sequence number sent to the destination (``after``)
    and the destination's announcement generation, one int (relays copy values as they are)."""
    return after * GENERATIONS + gen


def announce_parts(value: int) -> tuple[int, int]:
    """``(after, generation)`` of a ROUTED ANNOUNCE entry's value (``announce_value``)."""
    return divmod(value, GENERATIONS)


def ack_value(frontier: int, check: int) -> int:
    """A ROUTED ACK entry's value: the frontier acknowledged and the check of the stream it is of."""
    return frontier * STREAM_CHECK_MOD + check


def ack_parts(value: int) -> tuple[int, int]:
    """``(frontier, stream check)`` of a ROUTED ACK entry's value (``ack_value``)."""
    return divmod(value, STREAM_CHECK_MOD)


def newer(gen: int, than: int) -> bool:
    """Is ``gen`` after ``than`` (at most half the circle ahead)?"""
    return 0 < (gen - than) % GENERATIONS < GENERATIONS // 2


def encode(r: Routed, index: dict[str, int]) -> list[Any]:
    flat: list[int] = []
    if r.kind == wire.ANNOUNCE:     # [dest, after, generation, ...] (announce_value)
        for dest, value in r.entries:
            flat += [index[dest], *announce_parts(value)]
    elif r.kind == wire.ACK:        # one stream check in the header, or one per entry (ack_value)
        parts = [(dest, *ack_parts(value)) for dest, value in r.entries]
        checks = {c for _, _, c in parts}
        if len(checks) == 1:
            flat = [x for dest, frontier, _ in parts for x in (index[dest], frontier)]
            return [wire.ROUTED, r.hops, index[r.origin], checks.pop(), flat, r.kind, *r.body]
        flat = [x for dest, frontier, c in parts for x in (index[dest], frontier, c)]
        return [wire.ROUTED, r.hops, index[r.origin], SEVERAL_CHECKS, flat, r.kind, *r.body]
    else:
        for dest, value in r.entries:
            flat += [index[dest], value]
    return [wire.ROUTED, r.hops, index[r.origin], r.check, flat, r.kind, *r.body]


def decode(f: list[Any], sites: Sequence[str]) -> Routed:
    """A ROUTED frame; ``ProtocolViolation`` for a malformed one."""
    def site(i: Any) -> str:
        if type(i) is not int or not 0 <= i < len(sites):
            raise ProtocolViolation(f"site index {i!r} is not a site of this mission")
        return sites[i]

    def bounded(v: Any, what: str) -> int:
        if type(v) is not int or not 0 <= v <= KEY_INT_MAX:
            raise ProtocolViolation(f"malformed ROUTED frame: {what} {v!r}")
        return v

    if len(f) < 7:
        raise ProtocolViolation("malformed ROUTED frame")
    _, hops, origin, check, flat, kind, *body = f
    several = kind == wire.ACK and check == SEVERAL_CHECKS
    if type(hops) is not int or hops < 1 or type(check) is not int or not (several or 0 <= check < STREAM_CHECK_MOD):
        raise ProtocolViolation("malformed ROUTED frame")
    stride = 3 if kind == wire.ANNOUNCE or several else 2
    if type(kind) is not int or kind not in RELAYED_KINDS or not isinstance(flat, list) or len(flat) % stride \
            or not flat:
        raise ProtocolViolation("malformed ROUTED frame")
    if kind == wire.ANNOUNCE:
        entries = tuple((site(flat[i]), announce_value(bounded(flat[i + 1], "value"), generation(flat[i + 2])))
                        for i in range(0, len(flat), 3))
    elif several:
        entries = tuple((site(flat[i]), ack_value(bounded(flat[i + 1], "value"), stream_check_of(flat[i + 2])))
                        for i in range(0, len(flat), 3))
    elif kind == wire.ACK:
        entries = tuple((site(flat[i]), ack_value(bounded(flat[i + 1], "value"), check))
                        for i in range(0, len(flat), 2))
    else:
        entries = tuple((site(flat[i]), bounded(flat[i + 1], "value")) for i in range(0, len(flat), 2))
    want = {wire.DATA: 3, wire.SYNC: 3, wire.ANNOUNCE: 2}.get(kind, 1)
    if kind == wire.ACK and body[:1] == [GAP]:
        want = 2
    if len(body) != want:
        raise ProtocolViolation(f"malformed ROUTED {wire.FRAME_NAMES[kind]} frame")
    if kind == wire.DATA:
        bounded(body[0], "message sequence number")
        if body[0] < 1 or not isinstance(body[2], bytes):
            raise ProtocolViolation("malformed ROUTED DATA frame")
    elif kind == wire.SYNC:
        if type(body[0]) is not int or body[0] <= 0 or type(body[1]) is not int:
            raise ProtocolViolation("malformed ROUTED SYNC frame")
        generation(body[2])
    elif kind == wire.ANNOUNCE:
        if type(body[0]) is not int:
            raise ProtocolViolation("malformed ROUTED ANNOUNCE frame")
    elif kind == wire.ACK:
        if type(body[0]) is not int or (len(body) == 2 and (type(body[1]) is not int or body[1] < 1)):
            raise ProtocolViolation("malformed ROUTED ACK frame")
    return Routed(hops, site(origin), check, entries, kind, tuple(body))


@dataclass(slots=True)
class RelayState:
    """One peer's relay-side stream state at this site (both directions of its channel). The path the
    channel takes, and whether the peer hears us, are the routing layer's (``rcm.routing.router``)."""

    # Sending: retransmission of what a relay path lost.
    rto: float = 0.0
    rto_at: float | None = None
    rewound_to: int = -1            # the frontier a NACK made us resend after, and when
    rewound_at: float = float("-inf")
    sync_sent_at: float = float("-inf")
    # Receiving: NACKs sent, and an announcement waiting for the data it vouches for.
    nack_at: float = float("-inf")
    announcement: tuple[int, int, int, Any] | None = None    # (after, boot, generation, body) waiting for data
    announce_gen: int | None = None     # the peer's announcement generation we are at (None: any)
    peer_boot: int = 0              # the latest boot of the peer we know of (HELLO, relayed SYNC)
    counters: dict[str, int] = field(default_factory=lambda: {
        "relayed_out": 0, "relayed_in": 0, "resends": 0, "nacks": 0, "gaps": 0, "stale_announcements": 0,
        "gaps_reported": 0, "gaps_named": 0, "syncs_ignored": 0})


def group_by_hop(entries: Sequence[tuple[str, int]], next_hop: dict[str, str]) -> dict[str, list[tuple[str, int]]]:
    """Entries grouped by the next hop towards their destination (those without a route left out)."""
    out: dict[str, list[tuple[str, int]]] = {}
    for dest, value in entries:
        hop = next_hop.get(dest)
        if hop is not None:
            out.setdefault(hop, []).append((dest, value))
    return out
