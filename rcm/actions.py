"""What a ``SiteStack`` hands its edge: actions, events going up, and its errors.

Naming: an event that goes up to the clients keeps one name per layer, the
client API's (``rcm.wire.local``): ``Delivery``, ``StatusChange``, ``Missing``, ``Latest``.
The edge's commands are verbs: ``Transmit``, ``Close``, ``Dial``, ``Persist``,
``Log``. (Inside, the connection manager's effect is ``connman.StatusChange``
and the ordering protocol's output ``ordering.Deliver``: the stack turns them
into the events below.)
"""
from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

from rcm import ranges
from rcm.durability.records import Record


@dataclass(frozen=True, slots=True)
class Transmit:
    """Write ``data`` on connection ``conn``; the edge may hold it up to ``hold`` seconds so that later writes
    to that connection join it (one TLS record, one packet: ``rcm.channels.connections``, "Lingering")."""

    conn: Hashable
    data: bytes
    hold: float = 0.0


@dataclass(frozen=True, slots=True)
class Close:
    """Close connection ``conn`` (its last bytes went out in a ``Transmit`` before)."""

    conn: Hashable
    reason: str


@dataclass(frozen=True, slots=True)
class Dial:
    """Open a connection to ``peer``; answer with ``connection_made`` or ``dial_failed``."""

    peer: str


@dataclass(frozen=True, slots=True)
class Delivery:
    """Hand a message to the local clients, at its place ``key`` in the global order."""

    origin: str
    seq: int
    key: tuple[Any, ...]
    late: bool
    payload: bytes
    precedence: str = "routine"     # contracts.precedence.PRECEDENCES
    repaired: bool = False          # recovered by repair (rcm.repair.antientropy): late too, the exception to FIFO
    expires_at: float | None = None  # the message expires then (seconds since the epoch, rcm.wire.envelope)
    expired: bool = False           # expired before it reached this site (or before its turn): a stub, no payload
    reach: int | None = None        # confined: bitmask of the sites that may hold it (rcm.wire.envelope)


@dataclass(frozen=True, slots=True)
class StatusChange:
    """``peer``'s logical status is now ``status``; ``via``: the next hop when only relays reach it."""

    peer: str
    status: str
    via: str | None = None


@dataclass(frozen=True, slots=True)
class Missing:
    """Messages of ``origin`` this site will never get: inclusive ``(first, last)`` sequence ranges."""

    origin: str
    ranges: tuple[tuple[int, int], ...]

    @property
    def count(self) -> int:
        """How many messages the ranges name."""
        return ranges.count(self.ranges)


@dataclass(frozen=True, slots=True)
class Latest:
    """Hand the newest report of ``(origin, key)`` to the local clients (latest wins, ``rcm.latest``).

    ``hops``: the relays it crossed (0: this site's own, or from its origin directly)."""

    origin: str
    key: bytes
    version: int
    expires_at: float
    payload: bytes
    hops: int


@dataclass(frozen=True, slots=True)
class Persist:
    """Append ``record`` to the write-ahead log before executing the other actions."""

    record: Record


@dataclass(frozen=True, slots=True)
class Log:
    """A line for the operator's log."""

    level: str   # "info" | "warning" | "critical" (the operator must act: docs name what to do)
    message: str


Action = Transmit | Close | Dial | Delivery | StatusChange | Missing | Latest | Persist | Log


@dataclass(frozen=True, slots=True)
class SendResult:
    """A client send accepted: its id, sequence number, order key if known, and skipped destinations."""

    msg_id: str
    seq: int
    order: list[Any] | None
    skipped: tuple[str, ...]


class SendError(Exception):
    """A client send was not accepted."""

    code = "refused"


class SendRefused(SendError):
    code = "refused"


class Backpressure(SendError):
    code = "backpressure"


class ProtocolViolation(Exception):
    """A peer sent something the protocol does not allow; close its connection."""
