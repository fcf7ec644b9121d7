"""The header a message carries on the wire and in the log: its precedence, its expiry and the stub mark.

Theory of operation (docs/rcm.md, "Precedence" and "Expiry")
-----------------------------------------------------------
A message's DATA frame carries the ordering protocol's header. What RCM adds
to a message travels inside it, in a *wrapper* map, so that it goes wherever
the header goes (DATA and ROUTED frames, the ``LocalSend``, ``Received``,
``Pending`` and ``Outbound`` log records) with no field of its own:

* a ROUTINE message without an expiry carries the ordering header as it is
  (no ordering header is a map: old frames and logs read as routine);
* any other carries ``{"p": rank, "x": expires_at, "e": 1, "h": header}``
  with only the keys that say something: ``p`` when not ROUTINE
  (``contracts.precedence``), ``x`` when the message expires, ``e`` on a
  *stub*.

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
``[0, EXPIRES_AT_MAX]``; ``e`` only ``1``, and only with ``x``. A map that is
not such a wrapper, a stub with a payload (checked where the payload is
known), is the sender's fault: ``EnvelopeError``, which the stack turns
into a protocol violation. A message already expired when it arrives, or one
expiring far ahead (a skewed clock), is not: it is delivered expired, or
when it expires here.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from contracts.precedence import DEFAULT, PRECEDENCES, rank

EXPIRES_AT_MAX = float(2 ** 34)
"""Latest ``expires_at`` a message may carry (seconds since the epoch: about the year 2514)."""
_KEYS = frozenset({"p", "x", "e", "h"})


class EnvelopeError(ValueError):
    """A header wrapper, an expiry or a stub out of bounds (from a peer: a protocol violation)."""


@dataclass(frozen=True, slots=True)
class Envelope:
    """A wire header opened: the ordering protocol's header, the precedence, the expiry and the stub mark."""

    header: Any
    precedence: str = DEFAULT
    expires_at: float | None = None
    expired: bool = False           # a stub: the message expired before it was written; its payload is empty

    def due(self, now: float) -> bool:
        """Is the message expired at ``now`` (a stub always is)?"""
        return self.expired or (self.expires_at is not None and self.expires_at <= now)


def check_expires_at(value: Any) -> float:
    """``value`` as an ``expires_at``: a finite number in ``[0, EXPIRES_AT_MAX]``, else ``EnvelopeError``."""
    if type(value) not in (float, int) or not math.isfinite(value) or not 0 <= value <= EXPIRES_AT_MAX:
        raise EnvelopeError(f"expires_at {value!r:.40} is not a finite number of seconds since the epoch in "
                            f"[0, {EXPIRES_AT_MAX:.0f}]")
    return float(value)


def _number(t: float) -> int | float:
    """How ``t`` goes on the wire: an int when integral (five bytes), else a float (nine)."""
    return int(t) if t == int(t) else t


def wrap(header: Any, precedence: str = DEFAULT, expires_at: float | None = None, expired: bool = False) -> Any:
    """The header a message of ``precedence`` (expiring at ``expires_at``; a stub when ``expired``) carries."""
    if precedence == DEFAULT and expires_at is None:
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
    out["h"] = header
    return out


def open_(header: Any) -> Envelope:
    """A wire header decoded once (``EnvelopeError`` for a bad wrapper; old headers read as routine)."""
    if not isinstance(header, dict):
        return Envelope(header)
    keys = set(header)
    if "h" not in keys or not keys <= _KEYS or len(keys) < 2:
        raise EnvelopeError("a header wrapper is {p?: rank, x?: expires_at, e?: 1, h: header} with p or x")
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
    return Envelope(header["h"], precedence, expires_at, expired)


def unwrap(header: Any) -> tuple[Any, str]:
    """(ordering header, precedence) of a wire header (``EnvelopeError``, a ``ValueError``, for a bad one)."""
    env = open_(header)
    return env.header, env.precedence


def stub(header: Any) -> Any:
    """The wire header of ``header``'s stub (``EnvelopeError`` for a bad one)."""
    env = open_(header)
    return wrap(env.header, env.precedence, env.expires_at, True)


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
