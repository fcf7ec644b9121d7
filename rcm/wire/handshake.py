"""The HELLO handshake between two sites, as pure functions.

Theory of operation
-------------------
A new inter-site connection opens with HELLO both ways (the dialer speaks
first; the acceptor answers once it knows who called), then SYNC and a
HEARTBEAT acknowledging what the sender holds at that moment (a dialer's HELLO
is as old as its dial). HELLO says who the sender is and where each
direction's reliable stream resumes:

    [HELLO, version, mission, site, stream, known_peer_stream, frontier, boot, dial, terms, caps?]

``stream`` is the identity (incarnation) of the sender's reliable stream;
``known_peer_stream`` and ``frontier`` the receiver's stream as the sender
holds it (the last link sequence number it has); ``boot`` counts the sender's
process starts; ``dial`` numbers the dialer's dials; ``terms`` is what every
site of a mission must share (``Terms``); ``caps``, optional, is a bit set of
what the sender offers on this connection (1: zstd compression of the rest of
the stream; 2: with the shipped chat dictionary as both contexts' first
history, used only when both ends offer it: ``rcm.wire.compress``,
``CAP_ZSTD``/``CAP_DICT``; 4: a cut connection's TLS may be continued without
a handshake on a slow link, ``CAP_TLS_CONTINUE``, ``rcm.server.tlscontinue``).
The stack builds HELLOs without it; the edge
that applies an option adds it on the way out (``offer``) and reads the
peer's (``offered``), so a site that offers nothing sends the HELLO of earlier
versions, and a HELLO with it is accepted whether or not this site offers
anything.

``check_hello`` decides what to do with a received HELLO: a ``Hello`` to adopt,
a ``Refused`` (a clear reason, sent back in a BYE and logged on both sides),
or ``ProtocolViolation`` for a malformed frame. The order of the checks
matters: the version first (a newer frame may have another shape), the
identity before the terms (with TLS, only the site itself can set what its
refusal says). ``keeps_new`` is the dialing rule that makes both ends of a
pair keep the same one of two connections without negotiating.

Nothing here touches a socket, a clock or the stack's state.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rcm import wire
from rcm.actions import ProtocolViolation

BIG = 2 ** 64 - 1


@dataclass(frozen=True, slots=True)
class Terms:
    """What every site of a mission must agree on: ordering protocol, channel mode, sites, routing."""

    ordering: str
    p2p: str
    sites: tuple[str, ...]
    routing: str = "direct"
    max_hops: int = 1

    def encode(self) -> list[Any]:
        return [self.ordering, self.p2p, list(self.sites), self.routing, self.max_hops]

    @classmethod
    def decode(cls, raw: Any) -> Terms:
        if (not isinstance(raw, list) or len(raw) != 5 or not all(isinstance(t, str) for t in raw[:2])
                or not isinstance(raw[2], list) or not all(isinstance(t, str) for t in raw[2])
                or not isinstance(raw[3], str) or type(raw[4]) is not int):
            raise ProtocolViolation("malformed HELLO terms")
        return cls(raw[0], raw[1], tuple(raw[2]), raw[3], raw[4])


@dataclass(frozen=True, slots=True)
class Hello:
    """A HELLO that passed every check."""

    site: str
    incarnation: int          # the peer's stream
    known_incarnation: int    # our stream, as the peer holds it
    frontier: int             # the last link seq of our stream the peer holds
    boot: int
    dial_seq: int


@dataclass(frozen=True, slots=True)
class Refused:
    """A HELLO we do not accept: ``reason``, and the site it came from if that is known and proven.

    ``claimed``: for another protocol version, the site the HELLO names (unproven: it only
    attributes the refusal, so that a redialing old site is logged once a minute).
    """

    reason: str
    peer: str | None = None
    claimed: str | None = None


def hello_frame(mission: str, site: str, incarnation: int, known_incarnation: int, frontier: int,
                boot: int, dial_seq: int, terms: Terms) -> list[Any]:
    """The HELLO this site sends (``known_incarnation``/``frontier``: the peer's stream as we hold it)."""
    return [wire.HELLO, wire.PROTOCOL_VERSION, mission, site, incarnation, known_incarnation, frontier,
            boot, dial_seq, terms.encode()]


HELLO_FIELDS = 10      # without the optional capabilities
CAP_ZSTD = 1           # the capability bits (``offer``): zstd compression of the rest (rcm.wire.compress),
CAP_DICT = 2           # with the dictionary of rcm.wire.chat_dict as both contexts' first history,
CAP_TLS_CONTINUE = 4   # and this site continues a cut connection's TLS on a slow link (rcm.server.tlscontinue)
_FIXARRAY = 0x90


def offer(hello: bytes, caps: int) -> bytes:
    """Our encoded first frame (varint length + msgpack), with capability bits ``caps`` appended if it is
    a HELLO without any (a BYE, say, goes as it is)."""
    end = 1
    while end <= len(hello) and hello[end - 1] & 0x80:
        end += 1
    body = hello[end:]
    if (not body or body[0] != _FIXARRAY | HELLO_FIELDS or len(body) < 2 or body[1] != wire.HELLO
            or not 0 <= caps < 0x80):
        return hello
    body = bytes((_FIXARRAY | (HELLO_FIELDS + 1),)) + body[1:] + bytes((caps,))
    return wire.encode_varint(len(body)) + body


def offered(first: bytes) -> int:
    """The capability bits of a peer's encoded first frame (0 if it is not a HELLO offering any).

    Only the edge reads this, and only the first frame of a connection (at most the stack's HELLO
    limit); the stack decodes and checks the same HELLO in full.
    """
    end = 1
    while end <= len(first) and first[end - 1] & 0x80:
        end += 1
    body = first[end:]
    if (len(body) < 2 or body[0] != _FIXARRAY | (HELLO_FIELDS + 1) or body[1] != wire.HELLO
            or body[-1] >= 0x80):
        return 0
    return body[-1]


def frame_limit(mission: str, site: str, terms: Terms, max_frame_bytes: int) -> int:
    """Largest frame accepted before HELLO: 4 KiB, or room for two of this mission's HELLOs.

    A HELLO lists the mission's sites; a peer whose mission file lists more
    must still get through to be refused with the reason.
    """
    hello = hello_frame(mission, site, BIG, BIG, BIG, BIG, BIG, terms)
    return min(max_frame_bytes, max(4096, 2 * len(wire.encode_frame(hello)) + 1024))


def check_hello(f: list[Any], *, mission: str, me: str, peers: Sequence[str], dialed: str | None,
                identity: tuple[str, str] | None, terms: Terms) -> Hello | Refused:
    """Accept or refuse a received HELLO; ``ProtocolViolation`` if it is malformed.

    ``dialed``: the site we dialed (None if we accepted the connection);
    ``identity``: (site, mission) from the peer's verified TLS certificate.
    """
    if len(f) >= 2 and f[1] != wire.PROTOCOL_VERSION:
        claimed = identity[0] if identity is not None else (f[3] if len(f) > 3 else None)
        return Refused(f"protocol version {f[1]!r}, this server speaks {wire.PROTOCOL_VERSION}",
                       claimed=claimed if isinstance(claimed, str) and claimed in peers else None)
    if len(f) == HELLO_FIELDS + 1:
        if type(f[-1]) is not int or not 0 <= f[-1] < 0x80:
            raise ProtocolViolation("malformed HELLO capabilities")
        f = f[:HELLO_FIELDS]
    if len(f) != HELLO_FIELDS:
        raise ProtocolViolation("malformed HELLO")
    _, _, their_mission, site, incarnation, known_inc, frontier, boot, dial_seq, raw_terms = f
    if their_mission != mission:
        return Refused(f"wrong mission {their_mission!r} (this is {mission!r})")
    if not isinstance(site, str) or site not in peers:
        return Refused(f"unknown site {site!r}")
    if dialed is not None and site != dialed:
        return Refused(f"dialed {dialed} but {site} answered")
    if identity is not None and identity != (site, their_mission):
        return Refused(f"HELLO claims site {site!r} but the certificate is for site "
                       f"{identity[0]!r} of mission {identity[1]!r}")
    why = disagreement(site, me, Terms.decode(raw_terms), terms)
    if why is not None:
        return Refused(why, site)
    if (type(incarnation) is not int or incarnation <= 0 or type(known_inc) is not int
            or type(frontier) is not int or frontier < 0 or type(boot) is not int
            or type(dial_seq) is not int):
        raise ProtocolViolation("malformed HELLO fields")
    return Hello(site, incarnation, known_inc, frontier, boot, dial_seq)


def disagreement(site: str, me: str, theirs: Terms, ours: Terms) -> str | None:
    """Why a peer's terms rule out talking to it, or None if they match ours.

    The reason names both sites: the refused peer logs it too, where "this
    site" would mislead.
    """
    if theirs.ordering != ours.ordering:
        return (f"{site} orders messages with {theirs.ordering!r}, {me} with {ours.ordering!r}: "
                "every site of a mission must use the same [rcm] ordering")
    if theirs.p2p != ours.p2p:
        return (f"{site} runs {theirs.p2p!r} channels, {me} {ours.p2p!r}: "
                "every site of a mission must use the same [rcm] p2p")
    if (theirs.routing, theirs.max_hops) != (ours.routing, ours.max_hops):
        return (f"{site} routes with routing = {theirs.routing!r}, max_hops = {theirs.max_hops}, {me} with "
                f"{ours.routing!r}, {ours.max_hops}: every site of a mission must use the same [rcm] routing")
    if sorted(theirs.sites) != sorted(ours.sites):
        only_there = sorted(set(theirs.sites) - set(ours.sites))
        only_here = sorted(set(ours.sites) - set(theirs.sites))
        diff = "; ".join(part for part in (
            only_there and f"only {site}'s has {', '.join(only_there)}",
            only_here and f"only {me}'s has {', '.join(only_here)}") if part)
        return (f"the mission files of {site} and {me} list different sites ({diff or 'duplicates'}): "
                "every site must load the same mission file")
    return None


@dataclass(frozen=True, slots=True)
class Candidate:
    """One of two connections between the same pair, as the dialing rule sees it."""

    peer_boot: int     # the peer's boot counter in its HELLO
    dialer: str        # the site that dialed it
    dial_seq: int      # which dial of its dialer it is


def keeps_new(new: Candidate, old: Candidate) -> bool:
    """Is connection ``new`` the one both ends keep over ``old``?"""
    if new.peer_boot != old.peer_boot:
        # The peer restarted since ``old`` was made: ``old`` is dead (its end
        # is gone), even if a silent link hid its reset from us.
        return new.peer_boot > old.peer_boot
    if new.dialer == old.dialer:
        # The same site dialed twice: the later dial wins. Both ends compare
        # the dialer's own dial numbers, so they agree whatever the order in
        # which the two handshakes completed at each end.
        return new.dial_seq > old.dial_seq
    return new.dialer < old.dialer
