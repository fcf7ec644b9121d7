"""The local client API's frames: one codec for ``rcm.client`` and ``rcm.server``.

Theory of operation
-------------------
Local clients (the chat server, a monitor, a bot) reach their site's RCM
server on a Unix socket, ``data_dir/<site>/rcm/rcm.sock``. Frames use the
wire's framing (varint length, msgpack array) with a string tag first:

    client -> server: ["hello", name, since_incarnation|nil, since_n|nil]
                      ["send", ref, payload, dests|nil, precedence?, expires_at?|nil, within?]
                      ["publish", key, payload, expires_at]    (latest wins; no reply)
                      ["will", payload|nil, dests|nil]         (sent when the client is gone; no reply)
                      ["ack", n]        ["stats", ref]
    server -> client: ["welcome", site, sites, incarnation, statuses, ordering, first_n, last_n, via?, caps?]
                      ["accepted", ref, msg_id, seq, order|nil, skipped]
                      ["refused", ref, code, message]
                      ["d", n, origin, seq, order, late, payload, extras?]
                      ["status", site, status, via?]   ["missing", origin, [[first, last], ...]]
                      ["stats", ref, {...}]      ["error", message]
                      ["latest", origin, key, version, expires_at, payload, hops]

``send``'s ``within`` says how far a send to a subset of the sites may travel
(``Confine``): absent, only among its destinations and its origin (relays
included, docs/relay.md "Confinement"); a list of sites, among those too;
``false``, anywhere. ``expires_at`` is then written, ``nil`` when the message
does not expire.

``publish`` and ``latest`` are the latest-wins traffic class (``rcm.latest``,
docs/rcm.md "Latest wins (positions)"): a report of ``key`` (at most 64 bytes)
with a payload of at most 1024 bytes, expiring at ``expires_at`` (seconds since
the epoch, at most an hour ahead: later is clamped); only the newest report of
each (origin site, key) travels. A bad ``publish`` gets the usual ``error``
frame (and the connection closes); one already expired is dropped. Every
client gets every kept report (its own site's too) as ``latest``, not numbered
and not in the replay log; a client that says hello gets every live one at once.
``hops`` counts the relays the report crossed (0: this site's own, or from its
origin directly).

``caps`` (in ``welcome``, after ``via``, then always written, ``{}`` when no
peer is relayed) lists what the server takes beyond the first release's
requests: ``"will"``. A client says ``will`` only to a server that lists it
(``RcmClient.will`` returns False otherwise): a server of an earlier release
would take it for a bad request and close the connection, and during an
upgrade a new chat server meets the RCM server still running.

``will`` leaves a message for the server to send as this site's, to ``dests``
(nil: every site), once this client's connection ends: closed by the client,
dropped as too slow, or cut by its crash; a routine message like any ``send``
(MQTT's last will). ``nil`` takes it back; a later ``will`` replaces it. The
server's own stop, or its crash, sends none: the client is not gone then, its
server is, and peers see that as the site's status. It is checked when it is
left (a payload over ``max_payload_bytes`` or an unknown site is a bad
request: ``error``, and the connection closes). The chat server leaves one
that takes every user of its site offline at the other sites
(chat_server/payload.py, ``ServerGone``).

``via`` (in ``status``, and the welcome's ``{site: next hop}``) names the next
hop when the site is reached only through relays; it is absent when direct,
so a client of an older version reads every frame as before. In the same way a
delivery's ``extras`` map is present only when it says something: ``{"precedence":
"flash"}`` (absent: routine), ``{"repaired": true}`` (the message had been reported
missing here and was recovered by repair), ``{"expires_at": t}`` (the message
expires then, seconds since the epoch), ``{"expired": true}`` (it expired before
it reached this site, or before its turn, or before a replay: a *stub*, its
payload empty; docs/rcm.md "Expiry"); ``send`` carries ``precedence`` only when
it is not routine or ``expires_at`` follows, and ``expires_at`` only when the
message expires (a finite number, not yet past: a send already expired is
refused).

This module owns the frames' shapes: requests are decoded into small frozen
types for the server (``decode_request`` raises ``ValueError``/``TypeError``
for a bad one), and server frames into the client API's types
(``decode_event``). The types of the client API (``Accepted``, ``Delivery``,
``StatusChange``, ``Missing``, ``Latest``) live here and ``rcm.client`` exports them.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contracts.mission import Mission
from contracts.precedence import DEFAULT as DEFAULT_PRECEDENCE
from contracts.precedence import PRECEDENCES, rank
from rcm import ranges as _ranges
from rcm import wire
from rcm.wire.envelope import check_expires_at
from rcm.wire.latest import check_report

CLIENT_MAX_FRAME = 8 << 20
"""Largest frame on the local socket, both ways."""


def socket_path(mission: Mission, site: str) -> Path:
    """Where site ``site``'s RCM server listens for local clients."""
    return mission.site_dir(site) / "rcm" / "rcm.sock"


def decoder() -> wire.FrameDecoder:
    """A frame decoder for the local socket (string tags, ``CLIENT_MAX_FRAME``)."""
    return wire.FrameDecoder(CLIENT_MAX_FRAME, tag=str)


# -- the client API's values -----------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Accepted:
    msg_id: str
    seq: int
    order: list[Any] | None
    skipped: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Delivery:
    n: int
    origin: str
    seq: int
    msg_id: str
    order: list[Any]
    late: bool
    payload: bytes
    precedence: str = DEFAULT_PRECEDENCE
    repaired: bool = False       # reported missing here earlier, recovered by repair (late as well)
    expires_at: float | None = None  # the message expires then (seconds since the epoch)
    expired: bool = False        # it expired before it was delivered (or replayed) here: no payload


@dataclass(frozen=True, slots=True)
class StatusChange:
    """``site`` is now ``status``; ``via``: the next hop when only relays reach it (None: direct)."""

    site: str
    status: str
    via: str | None = None


@dataclass(frozen=True, slots=True)
class Missing:
    """Messages of ``origin`` this site will never get, as inclusive ``(first, last)`` seq ranges.

    Ranges are sorted and disjoint; one disconnection may be reported in
    several ``Missing`` events (each fits a frame). ``count`` is the number of
    messages, ``msg_id``s are ``f"{origin}:{seq}"`` for every seq in the ranges.
    """

    origin: str
    ranges: tuple[tuple[int, int], ...]

    @classmethod
    def from_seqs(cls, origin: str, seqs: Iterable[int]) -> Missing:
        """The event for a collection of sequence numbers."""
        return cls(origin, tuple((a, b) for a, b in _ranges.of_seqs(seqs)))

    @property
    def count(self) -> int:
        """How many messages are missing."""
        return _ranges.count(self.ranges)


@dataclass(frozen=True, slots=True)
class Latest:
    """The newest report of ``key`` by site ``origin`` (latest wins, ``rcm.latest``): a newer ``version``
    supersedes it; it is void after ``expires_at`` (seconds since the epoch); ``hops``: the relays it
    crossed (0: this site's own, or from its origin directly)."""

    origin: str
    key: bytes
    version: int
    expires_at: float
    payload: bytes
    hops: int


@dataclass(frozen=True, slots=True)
class Welcome:
    site: str
    sites: list[str]
    incarnation: int          # the server's log id: identity of the delivery numbering
    statuses: dict[str, str]
    ordering: str
    first_n: int
    last_n: int
    via: dict[str, str | None]
    caps: tuple[str, ...] = ()    # what the server takes beyond the first release's requests (``CAPS``)


@dataclass(frozen=True, slots=True)
class Reply:
    """The answer to request ``ref``: an ``Accepted``, a stats dict, or a ``Refusal``."""

    ref: int
    value: Any


@dataclass(frozen=True, slots=True)
class Refusal:
    code: str       # "refused" | "backpressure"
    message: str


@dataclass(frozen=True, slots=True)
class ServerError:
    message: str


# -- requests ----------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Hello:
    name: str
    since_incarnation: int | None
    since_n: int | None


Confine = bool | tuple[str, ...]
"""How far a send to a subset of the sites may travel (docs/relay.md, "Confinement"): ``True`` (the
default) only among its destinations and its origin; a tuple of site names: among those too (relays the
sender trusts with the content, e.g. every site cleared for its label); ``False``: anywhere (data that is no
secret of its destinations, such as a chat server's receipts and rosters). A send to every site is never
confined."""
MAX_WITHIN = 4096       # most site names a send's ``within`` may list


@dataclass(frozen=True, slots=True)
class Send:
    ref: Any
    payload: bytes
    dests: list[str] | None
    precedence: str = DEFAULT_PRECEDENCE
    expires_at: float | None = None
    within: Confine = True      # a subset send's confinement (``Confine``; True: to its destinations)


@dataclass(frozen=True, slots=True)
class Publish:
    key: bytes
    payload: bytes
    expires_at: float


@dataclass(frozen=True, slots=True)
class Ack:
    n: int


@dataclass(frozen=True, slots=True)
class Stats:
    ref: Any


@dataclass(frozen=True, slots=True)
class Will:
    payload: bytes | None       # None: no will (taken back)
    dests: list[str] | None


Request = Hello | Send | Publish | Ack | Stats | Will
CAPS = ("will",)
"""What this server takes beyond the first release's requests, listed in its ``welcome``."""


def encode(frame: list[Any]) -> bytes:
    return wire.encode_frame(frame)


def hello(name: str, since: tuple[int, int] | None) -> bytes:
    inc, n = since if since is not None else (None, None)
    return encode(["hello", name, inc, n])


def send(ref: int, payload: bytes, dests: list[str] | None, precedence: str = DEFAULT_PRECEDENCE,
         expires_at: float | None = None, within: Confine = True) -> bytes:
    frame: list[Any] = ["send", ref, payload, dests]
    if precedence != DEFAULT_PRECEDENCE or expires_at is not None or within is not True:
        frame.append(precedence)
    if expires_at is not None or within is not True:
        frame.append(check_expires_at(expires_at) if expires_at is not None else None)
    if within is not True:
        frame.append(False if within is False else sorted(within))
    return encode(frame)


def publish(key: bytes, payload: bytes, expires_at: float) -> bytes:
    """A latest-wins report (``ValueError`` out of bounds: ``rcm.latest.table.check_report``)."""
    check_report(key, payload, expires_at)
    return encode(["publish", key, payload, float(expires_at)])


def will(payload: bytes | None, dests: list[str] | None) -> bytes:
    """A message to send when this client is gone (None: none; the module doc)."""
    return encode(["will", payload, dests])


def ack(n: int) -> bytes:
    return encode(["ack", int(n)])


def stats_request(ref: int) -> bytes:
    return encode(["stats", ref])


def decode_request(f: list[Any]) -> Request:
    """A client's request; ``ValueError``/``TypeError`` names what is wrong with a bad one."""
    op = f[0]
    if op == "send":
        _, ref, payload, dests, *rest = f
        if not isinstance(payload, bytes):
            raise TypeError("payload must be bytes")
        if len(rest) > 3:
            raise ValueError("send has at most 7 fields")
        precedence = rest[0] if rest else DEFAULT_PRECEDENCE
        if not isinstance(precedence, str):
            raise TypeError("precedence must be a string")
        rank(precedence)          # ValueError naming the levels
        # EnvelopeError, a ValueError, for a bad one
        expires_at = check_expires_at(rest[1]) if len(rest) > 1 and rest[1] is not None else None
        within: Confine = True
        if len(rest) > 2:
            w = rest[2]
            if w is False:
                within = False
            elif isinstance(w, list) and len(w) <= MAX_WITHIN and all(isinstance(x, str) for x in w):
                within = tuple(w)
            else:
                raise TypeError("within must be false or a list of site names")
        return Send(ref, payload, dests, precedence, expires_at, within)
    if op == "publish":
        if len(f) != 4:
            raise ValueError("publish has 4 fields: publish, key, payload, expires_at")
        _, key, payload, expires_at = f
        check_report(key, payload, expires_at)          # LatestError, a ValueError, naming the bound
        return Publish(key, payload, float(expires_at))
    if op == "will":
        if len(f) != 3:
            raise ValueError("will has 3 fields: will, payload|nil, dests|nil")
        _, payload, dests = f
        if payload is not None and not isinstance(payload, bytes):
            raise TypeError("payload must be bytes or nil")
        if dests is not None and not (isinstance(dests, list) and all(isinstance(d, str) for d in dests)):
            raise TypeError("dests must be nil or a list of site names")
        return Will(payload, dests)
    if op == "ack":
        return Ack(int(f[1]))
    if op == "hello":
        _, name, since_inc, since_n = f
        return Hello(str(name)[:64], since_inc, int(since_n) if since_n is not None else None)
    if op == "stats":
        return Stats(f[1])
    raise ValueError(f"unknown request {op!r}")


# -- server frames -----------------------------------------------------------------------
def welcome(site: str, sites: list[str], incarnation: int, statuses: Mapping[str, str], ordering: str,
            first_n: int, last_n: int, via: Mapping[str, str | None], caps: Iterable[str] = ()) -> bytes:
    frame = ["welcome", site, sites, incarnation, dict(statuses), ordering, first_n, last_n]
    routed = {s: v for s, v in via.items() if v is not None}
    caps = sorted(caps)
    if routed or caps:
        frame.append(routed)
    if caps:
        frame.append(caps)
    return encode(frame)


def accepted(ref: Any, msg_id: str, seq: int, order: list[Any] | None, skipped: Iterable[str]) -> bytes:
    return encode(["accepted", ref, msg_id, seq, order, list(skipped)])


def refused(ref: Any, code: str, message: str) -> bytes:
    return encode(["refused", ref, code, message])


def delivery_frame(n: int, origin: str, seq: int, key: Iterable[Any], late: bool, payload: bytes,
                   precedence: str = DEFAULT_PRECEDENCE, repaired: bool = False, expires_at: float | None = None,
                   expired: bool = False) -> list[Any]:
    """A delivery as the replay log keeps it (``encode`` it to send); extras only when they say something."""
    frame: list[Any] = ["d", n, origin, seq, list(key), late, b"" if expired else payload]
    extras: dict[str, Any] = {}
    if precedence != DEFAULT_PRECEDENCE:
        extras["precedence"] = precedence
    if repaired:
        extras["repaired"] = True
    if expires_at is not None:
        extras["expires_at"] = float(expires_at)
    if expired:
        extras["expired"] = True
    if extras:
        frame.append(extras)
    return frame


def expire_delivery(frame: list[Any], now: float) -> bool:
    """Make a replay log's delivery frame a stub if its message expired by ``now`` (its payload dropped, the
    ``expired`` extra set); True if it changed."""
    extras = frame[7] if len(frame) > 7 and isinstance(frame[7], dict) else None
    if extras is None or extras.get("expired") or extras.get("expires_at", now + 1.0) > now:
        return False
    frame[6] = b""
    extras["expired"] = True
    return True


def status(site: str, status: str, via: str | None = None) -> bytes:
    return encode(["status", site, status] if via is None else ["status", site, status, via])


def missing(origin: str, chunk: list[list[int]]) -> bytes:
    return encode(["missing", origin, chunk])


def stats_reply(ref: Any, stats: dict[str, Any]) -> bytes:
    return encode(["stats", ref, stats])


def error(message: str) -> bytes:
    return encode(["error", message])


def latest(origin: str, key: bytes, version: int, expires_at: float, payload: bytes, hops: int) -> bytes:
    return encode(["latest", origin, key, version, float(expires_at), payload, hops])


Event = Welcome | Reply | Delivery | StatusChange | Missing | Latest | ServerError


def decode_event(f: list[Any]) -> Event | None:
    """A server frame as the client API's value (None for a kind this version does not know)."""
    kind = f[0]
    if kind == "d":
        _, n, origin, seq, order, late, payload, *rest = f
        extras = rest[0] if rest and isinstance(rest[0], dict) else {}
        precedence = extras.get("precedence", DEFAULT_PRECEDENCE)
        if precedence not in PRECEDENCES:
            precedence = DEFAULT_PRECEDENCE
        expires_at = extras.get("expires_at")
        return Delivery(n, origin, seq, f"{origin}:{seq}", order, late, payload, precedence,
                        bool(extras.get("repaired", False)),
                        float(expires_at) if isinstance(expires_at, (int, float)) else None,
                        bool(extras.get("expired", False)))
    if kind == "status":
        return StatusChange(f[1], f[2], f[3] if len(f) > 3 else None)
    if kind == "latest":
        _, origin, key, version, expires_at, payload, hops = f
        return Latest(origin, key, version, expires_at, payload, hops)
    if kind == "missing":
        return Missing(f[1], tuple((int(a), int(b)) for a, b in f[2]))
    if kind == "accepted":
        _, ref, msg_id, seq, order, skipped = f
        return Reply(ref, Accepted(msg_id, seq, order, tuple(skipped)))
    if kind == "stats":
        return Reply(f[1], f[2])
    if kind == "refused":
        return Reply(f[1], Refusal(f[2], f[3]))
    if kind == "error":
        return ServerError(f[1])
    if kind == "welcome":
        _, site, sites, inc, statuses, ordering, first_n, last_n, *rest = f
        via: dict[str, str | None] = {s: None for s in statuses}
        if rest and isinstance(rest[0], dict):
            via.update(rest[0])
        caps = tuple(c for c in rest[1] if isinstance(c, str)) if len(rest) > 1 and isinstance(rest[1], list) else ()
        return Welcome(site, list(sites), inc, dict(statuses), ordering, first_n, last_n, via, caps)
    return None
