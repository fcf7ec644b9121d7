"""The frames of repair, read once and checked (``parse_*``), and written (``repair_body``).

Theory of operation
-------------------
Three reliable frames of a channel (``rcm.wire``: they take whatever path the
channel takes, direct or relayed, and are acknowledged and resent like data)
carry anti-entropy (``rcm.repair.antientropy``, the state machine that sends
and takes them):

* ``SUMMARY [reply, [[origin, ranges], ...]]``: what the sender holds, per
  origin, as canonical ranges (a frontier and the gaps below it); ``reply``
  1 asks the peer for its own.
* ``FETCH [origin, ranges]``: send me these.
* ``REPAIR [origin, seq, key, payload, rank?, expires_at?, 1?]`` (a confined
  message's: ``[origin, seq, key, payload, rank, expires_at|nil, 0|1, reach]``): one retained
  message, with the order key it was delivered with at the holder, and its
  precedence rank when it is not ROUTINE or an expiry follows
  (``contracts.precedence``): a repaired FLASH arrives as a FLASH, to be
  acknowledged. A message that expires carries its ``expires_at``; one
  served after it (or held as a stub) goes as a *stub* (``rcm.wire.envelope``):
  an empty payload and a trailing ``1``. The stub satisfies the want: the
  requester learns that the message existed, never its content.

A relay carrying another site's REPAIR reads only what it must, leniently
(``repair_reach``, strict: a confined message is never carried as if it were
not; ``repair_expiry`` and ``stub_repair``: a message that expired on the way
goes on as its stub).

Bounds: every frame is checked before anything changes (``parse_*``):
site indexes, canonical ranges inside ``[1, ceiling]`` (``ordering.honest_ceiling``:
no honest site has sent more), at most ``SUMMARY_RANGES`` ranges per origin and
``FETCH_RANGES`` per request, a request of at most ``FETCH_MESSAGES`` messages
(an honest requester never has more outstanding with one holder), keys of at
most ``KEY_PARTS`` ints and short strings, payloads within
``max_payload_bytes``.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from contracts.precedence import DEFAULT, PRECEDENCES, rank
from ordering import KEY_INT_MAX
from rcm import ranges
from rcm.wire import envelope

SUMMARY_RANGES = 512        # most ranges per origin in a SUMMARY (the newest: older gaps are left out)
FETCH_RANGES = 256          # most ranges in one FETCH
FETCH_MESSAGES = 2048       # most messages asked of one peer at a time
KEY_PARTS = 8               # most elements in an order key
KEY_STR = 64                # longest string in an order key


class RepairError(ValueError):
    """A malformed repair frame (the stack turns it into a protocol violation)."""


@dataclass(frozen=True, slots=True)
class Repaired:
    """Deliver a repaired message (late, repaired) at its original order key."""

    origin: str
    seq: int
    key: tuple[Any, ...]
    payload: bytes
    precedence: str = DEFAULT
    expires_at: float | None = None
    expired: bool = False           # a stub: expired before it was served (the payload is empty)
    reach: int | None = None        # confined to these sites (``rcm.wire.envelope``); None: every site


def _site(sites: Sequence[str], i: Any) -> str:
    if type(i) is not int or not 0 <= i < len(sites):
        raise RepairError(f"site index {i!r} is not a site of this mission")
    return sites[i]


def _ranges(value: Any, most: int, ceiling: int) -> list[list[int]]:
    if not isinstance(value, list) or len(value) > most:
        raise RepairError(f"more than {most} ranges, or not a list")
    try:
        return ranges.parse(value, ceiling)
    except ValueError as e:
        raise RepairError(str(e)) from None


def parse_summary(body: Any, sites: Sequence[str], ceiling: int = KEY_INT_MAX
                  ) -> tuple[bool, dict[str, list[list[int]]]]:
    if not isinstance(body, list) or len(body) != 2 or body[0] not in (0, 1) or not isinstance(body[1], list):
        raise RepairError("malformed SUMMARY")
    if len(body[1]) > len(sites):
        raise RepairError("SUMMARY names more origins than the mission has sites")
    held: dict[str, list[list[int]]] = {}
    for item in body[1]:
        if not isinstance(item, list) or len(item) != 2:
            raise RepairError("malformed SUMMARY entry")
        origin = _site(sites, item[0])
        if origin in held:
            raise RepairError(f"SUMMARY names {origin} twice")
        held[origin] = _ranges(item[1], SUMMARY_RANGES, ceiling)
    return body[0] == 1, held


def parse_fetch(body: Any, sites: Sequence[str], ceiling: int = KEY_INT_MAX) -> tuple[str, list[list[int]]]:
    if not isinstance(body, list) or len(body) != 2:
        raise RepairError("malformed FETCH")
    origin, wanted = _site(sites, body[0]), _ranges(body[1], FETCH_RANGES, ceiling)
    n = ranges.count(wanted)
    if n > FETCH_MESSAGES:
        raise RepairError(f"FETCH asks for {n} messages: a requester has at most {FETCH_MESSAGES} "
                          "outstanding with one holder")
    return origin, wanted


def parse_repair(body: Any, sites: Sequence[str], max_payload: int, ceiling: int = KEY_INT_MAX) -> Repaired:
    if not isinstance(body, list) or not 4 <= len(body) <= 8:
        raise RepairError("malformed REPAIR")
    origin = _site(sites, body[0])
    seq, key, payload = body[1], body[2], body[3]
    level = body[4] if len(body) >= 5 else rank(DEFAULT)
    if type(level) is not int or not 0 <= level < len(PRECEDENCES):
        raise RepairError(f"REPAIR precedence rank {level!r:.40} is not in [0, {len(PRECEDENCES) - 1}]")
    if type(seq) is not int or not 1 <= seq <= ceiling:
        raise RepairError(f"REPAIR sequence number {seq!r:.40} is not in [1, {ceiling}]")
    if not isinstance(key, list) or not 1 <= len(key) <= KEY_PARTS:
        raise RepairError("REPAIR order key is not a list of 1 to 8 parts")
    for part in key:
        if type(part) is int:
            if not 0 <= part <= ceiling:
                raise RepairError(f"REPAIR order key part {part} outside [0, {ceiling}]")
        elif not isinstance(part, str) or len(part) > KEY_STR:
            raise RepairError(f"REPAIR order key part {part!r:.40} is not an integer or a short string")
    if not isinstance(payload, bytes) or len(payload) > max_payload:
        raise RepairError("REPAIR payload is not bytes within max_payload_bytes")
    confined = len(body) == 8
    expires_at, expired, reach = None, False, None
    if len(body) >= 6 and not (confined and body[5] is None):
        try:
            expires_at = envelope.check_expires_at(body[5])
        except envelope.EnvelopeError as e:
            raise RepairError(f"REPAIR {e}") from None
    if len(body) >= 7:
        if type(body[6]) is not int or body[6] not in ((0, 1) if confined else (1,)):
            raise RepairError(f"REPAIR stub mark {body[6]!r:.40} is not {'0 or 1' if confined else '1'}")
        expired = body[6] == 1
        if expired and expires_at is None:
            raise RepairError("a REPAIR stub without its expiry")
        if expired and payload:
            raise RepairError(f"a REPAIR stub (an expired message) with a {len(payload)}-byte payload")
    if confined:
        reach = repair_reach(body, len(sites))
        if not envelope.in_reach(reach, sites.index(origin)):
            raise RepairError("a confined REPAIR whose origin is outside its confinement")
    return Repaired(origin, seq, tuple(key), payload, PRECEDENCES[level], expires_at, expired, reach)


def repair_body(index: int, seq: int, key: Sequence[Any], payload: bytes, precedence: str = DEFAULT,
                expires_at: float | None = None, expired: bool = False, reach: int | None = None) -> list[Any]:
    """A REPAIR frame's body (``parse_repair`` reads it): the rank and the expiry only when they say something;
    a confined message's (``reach``) always has eight elements, its mask last."""
    body: list[Any] = [index, seq, list(key), b"" if expired else payload]
    if precedence != DEFAULT or expires_at is not None or reach is not None:
        body.append(rank(precedence))
    if expires_at is not None or reach is not None:
        body.append(None if expires_at is None else int(expires_at) if expires_at == int(expires_at) else expires_at)
        if expired or reach is not None:
            body.append(1 if expired else 0)
    if reach is not None:
        body.append(envelope.reach_wire(reach))
    return body


def repair_reach(body: Any, sites: int = envelope.REACH_BITS) -> int | None:
    """The confinement mask of a REPAIR body (None: not confined), strictly (``RepairError``): a relay never
    carries a confined message as if it were not."""
    if not isinstance(body, list) or len(body) != 8:
        return None
    try:
        return envelope.check_reach(body[7], sites)
    except envelope.EnvelopeError as e:
        raise RepairError(f"REPAIR {e}") from None


def repair_expiry(body: Any) -> float | None:
    """When the message a REPAIR body carries expires, if it does and is not a stub (None otherwise).
    Lenient, as a relay carrying another's frame: a body that does not read is left alone."""
    if not isinstance(body, list) or len(body) not in (6, 8) or type(body[5]) not in (int, float):
        return None
    if len(body) == 8 and body[6] != 0:
        return None
    return float(body[5])


def stub_repair(body: Any, now: float) -> list[Any] | None:
    """The stub of a REPAIR body written at ``now`` when its message expired by then (None: it goes as it is)."""
    t = repair_expiry(body)
    if t is None or not t <= now:
        return None
    return [*body[:3], b"", *body[4:6], 1, *body[7:]]
