"""The header a message carries on the wire and in the log: precedence, expiry, the stub mark and confinement.

Theory of operation (docs/rcm.md, "Precedence" and "Expiry")
-----------------------------------------------------------
A message's DATA frame carries the ordering protocol's header. What RCM adds
to a message travels inside it, in a *wrapper* map, so that it goes wherever
the header goes (DATA and ROUTED frames, the ``LocalSend``, ``Received``,
``Pending`` and ``Outbound`` log records) with no field of its own:

* a ROUTINE message without an expiry carries the ordering header as it is
  (no ordering header is a map: old frames and logs read as routine);
* any other carries ``{"p": rank, "x": expires_at, "e": 1, "r": reach, "h": header}``
  with only the keys that say something: ``p`` when not ROUTINE
  (``contracts.precedence``), ``x`` when the message expires, ``e`` on a
  *stub*, ``r`` when the message is *confined*.

**Confinement** (docs/relay.md, "Confinement"). A message sent to a subset
of the sites carries ``r``, a bitmask of the sites allowed to hold its
content: its destinations and its origin (bit ``i`` is the mission's ``i``-th
site in sorted order, as ROUTED frames index them). Its content travels only
among those sites: the channel layer writes it only on paths whose relays
are all in the set, relays forward it only within it, repair serves it only
to a site in it. A message to every site carries no ``r`` (it is not
confined). Because ``r`` is in the wrapper, it goes wherever the header goes:
DATA and ROUTED frames, the write-ahead log, retention, stubs.

**Expiry.** ``expires_at`` is absolute, in seconds since the epoch by the
origin's clock (sites' clocks are assumed roughly synchronised, as
``sent_at`` already assumes: a site whose clock runs ahead treats messages as
expired that early, one behind that late). A message is expired at ``now``
when ``expires_at <= now`` (``due``), ``now`` being the stack's (sans-IO: no
clock is read here). An expired message is never dropped from RCM's
machinery, only its content: wherever it would be written after its expiry
(a paced lane's turn, a resend, a relay's queue, a repair, a local replay)
it goes as a *stub* (``stub``): the same header with ``e: 1`` and an empty
payload. The stream's numbering, acknowledgements, FIFO per origin, the
global order (the ordering header is unchanged) and repair (a want is
satisfied by the stub) all work unchanged, and every site learns that the
message existed. On the wire an integral ``expires_at`` is written as an
int (five bytes for today's dates), any other as a float.

**Bounds.** ``open_`` decodes a wrapper once into an ``Envelope``: exactly
the keys above with ``h``; ``p`` an int rank; ``x`` a finite number in
``[0, EXPIRES_AT_MAX]``; ``e`` only ``1``, and only with ``x``; ``r`` an int in ``[1, 2^sites)``
(as bytes past 64 sites; ``REACH_BITS`` sites at most here; the frame decoder bounds it by the
mission's sites and checks the sender and the receiver are in it). A map that is
not such a wrapper, a stub with a payload (checked where the payload is
known), is the sender's fault: ``EnvelopeError``, which the stack turns
into a protocol violation. A message already expired when it arrives, or one
expiring far ahead (a skewed clock), is not: it is delivered expired, or
when it expires here.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from contracts.precedence import DEFAULT, PRECEDENCES, rank

EXPIRES_AT_MAX = float(2 ** 34)
"""Latest ``expires_at`` a message may carry (seconds since the epoch: about the year 2514)."""
REACH_BITS = 1024
"""Most sites a confinement mask may name (a mission's sites bound it further: ``check_reach``)."""
_KEYS = frozenset({"p", "x", "e", "r", "h"})


class EnvelopeError(ValueError):
    """A header wrapper, an expiry or a stub out of bounds (from a peer: a protocol violation)."""


@dataclass(frozen=True, slots=True)
class Envelope:
    """A wire header opened: the ordering protocol's header, the precedence, the expiry and the stub mark."""

    header: Any
    precedence: str = DEFAULT
    expires_at: float | None = None
    expired: bool = False           # a stub: the message expired before it was written; its payload is empty
    reach: int | None = None        # confined: bitmask of the sites that may hold its content (None: every site)

    def due(self, now: float) -> bool:
        """Is the message expired at ``now`` (a stub always is)?"""
        return self.expired or (self.expires_at is not None and self.expires_at <= now)


def check_expires_at(value: Any) -> float:
    """``value`` as an ``expires_at``: a finite number in ``[0, EXPIRES_AT_MAX]``, else ``EnvelopeError``."""
    if type(value) not in (float, int) or not math.isfinite(value) or not 0 <= value <= EXPIRES_AT_MAX:
        raise EnvelopeError(f"expires_at {value!r:.40} is not a finite number of seconds since the epoch in "
                            f"[0, {EXPIRES_AT_MAX:.0f}]")
    return float(value)


def check_reach(value: Any, sites: int = REACH_BITS) -> int:
    """``value`` (from the wire) as a confinement mask of a mission of ``sites`` sites: an int in ``[1, 2^sites)``
    (msgpack's ints hold 64 bits: a wider mask goes as little-endian bytes without trailing zeros), else
    ``EnvelopeError``."""
    bits = min(sites, REACH_BITS)
    if isinstance(value, bytes) and 8 < len(value) <= (bits + 7) // 8 and value[-1]:
        value = int.from_bytes(value, "little")
    if type(value) is not int or not 0 < value < (1 << bits):
        raise EnvelopeError(f"confinement {value!r:.40} is not a mask of sites in [1, 2^{bits})")
    return value


def reach_wire(mask: int) -> int | bytes:
    """How confinement mask ``mask`` goes on the wire (``check_reach`` reads it back)."""
    return mask if mask < 1 << 64 else mask.to_bytes((mask.bit_length() + 7) // 8, "little")


def reach_mask(names: Iterable[str], index: Mapping[str, int]) -> int:
    """The confinement mask of the sites ``names`` (``index``: the mission's sorted sites' positions)."""
    mask = 0
    for n in names:
        mask |= 1 << index[n]
    return mask


def in_reach(reach: int | None, i: int) -> bool:
    """May the site of index ``i`` hold a message confined to ``reach`` (None: not confined, every site)?"""
    return reach is None or bool(reach >> i & 1)


def reach_of(header: Any) -> int | None:
    """The confinement mask of a wire header (None: not confined), strictly: ``EnvelopeError`` for a bad
    ``r`` (a relay never carries a confined message as if it were not)."""
    if not isinstance(header, dict) or "r" not in header:
        return None
    return check_reach(header["r"])


def _number(t: float) -> int | float:
    """How ``t`` goes on the wire: an int when integral (five bytes), else a float (nine)."""
    return int(t) if t == int(t) else t


def wrap(header: Any, precedence: str = DEFAULT, expires_at: float | None = None, expired: bool = False,
         reach: int | None = None) -> Any:
    """The header a message of ``precedence`` (expiring at ``expires_at``; a stub when ``expired``; confined to
    the sites of mask ``reach``) carries."""
    if precedence == DEFAULT and expires_at is None and reach is None:
        if expired:
            raise EnvelopeError("a stub needs its expiry")
        return header
    out: dict[str, Any] = {}
    if precedence != DEFAULT:
        out["p"] = rank(precedence)
    if expires_at is not None:
        out["x"] = _number(check_expires_at(expires_at))
        if expired:
            out["e"] = 1
    elif expired:
        raise EnvelopeError("a stub needs its expiry")
    if reach is not None:
        out["r"] = reach_wire(check_reach(reach))
    out["h"] = header
    return out


def open_(header: Any, sites: int = REACH_BITS) -> Envelope:
    """A wire header decoded once (``EnvelopeError`` for a bad wrapper; old headers read as routine); ``sites``:
    the mission's number of sites, which bounds a confinement mask."""
    if not isinstance(header, dict):
        return Envelope(header)
    keys = set(header)
    if "h" not in keys or not keys <= _KEYS or len(keys) < 2:
        raise EnvelopeError("a header wrapper is {p?: rank, x?: expires_at, e?: 1, r?: reach, h: header} with p, x "
                            "or r")
    precedence = DEFAULT
    if "p" in header:
        p = header["p"]
        if type(p) is not int or not 0 <= p < len(PRECEDENCES):
            raise EnvelopeError(f"precedence header must be {{p: 0-{len(PRECEDENCES) - 1}, h: header}}")
        precedence = PRECEDENCES[p]
    expires_at = check_expires_at(header["x"]) if "x" in header else None
    expired = "e" in header
    if expired and (header["e"] != 1 or type(header["e"]) is not int or expires_at is None):
        raise EnvelopeError("the stub mark is e: 1, with the expiry x")
    reach = check_reach(header["r"], sites) if "r" in header else None
    return Envelope(header["h"], precedence, expires_at, expired, reach)


def unwrap(header: Any) -> tuple[Any, str]:
    """(ordering header, precedence) of a wire header (``EnvelopeError``, a ``ValueError``, for a bad one)."""
    env = open_(header)
    return env.header, env.precedence


def stub(header: Any) -> Any:
    """The wire header of ``header``'s stub (``EnvelopeError`` for a bad one)."""
    env = open_(header)
    return wrap(env.header, env.precedence, env.expires_at, True, env.reach)


def expiry_of(header: Any) -> float | None:
    """When a message with this wire header expires, if it does and is not a stub yet (None otherwise).
    Lenient: a header that does not decode is carried as it is (its destination refuses it)."""
    if not isinstance(header, dict) or "x" not in header or "e" in header:
        return None
    try:
        return open_(header).expires_at
    except EnvelopeError:
        return None


def expiring(header: Any, now: float) -> bool:
    """Must a message with this wire header go as a stub when written at ``now`` (expired, not one yet)?"""
    t = expiry_of(header)
    return t is not None and t <= now


def check_stub(env: Envelope, payload: bytes) -> None:
    """``EnvelopeError`` for a stub that carries a payload (its content went when it expired)."""
    if env.expired and payload:
        raise EnvelopeError(f"a stub (an expired message) with a {len(payload)}-byte payload")
