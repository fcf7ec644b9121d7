"""Write-ahead log records: one small frozen type per kind, with its encoding.

Theory of operation
-------------------
The log (``rcm.durability.wal``) stores msgpack arrays whose first element is a one-letter
tag; this module is the only place that knows the letters and the field
order. ``SiteStack`` and the server build typed records (``LocalSend(...)``),
``Wal.append`` encodes them, and ``Wal.records`` hands back typed records
decoded from the file, so no other module reads a record by position.

Each type says whether it must be on disk before the promise it backs is made
(``forced``): ``FORCED``, the tags that cost an ``fdatasync``, is derived from
the types, never written out by hand.

Kinds (tag, fields):

    S  LocalSend        seq, header, payload, {peer: link_seq}, skipped
    O  Outbound         peer, link_seq, kind, body   (CTRL, MISSED; DATA in snapshots, body
                                                      [msg_seq, header, payload]; MISSED body: ranges)
    R  Received         origin, incarnation, link_seq, msg_seq, header, payload
    C  ReceivedControl  origin, incarnation, link_seq, kind, body   (CTRL, or MISSED with ranges)
    I  PeerStream       peer, incarnation
    A  Acked            peer, upto                          (not forced)
    D  Delivered        n, origin, seq, key, late, payload, precedence?, repaired?, expires_at?, expired?, reach?
                                                    (each trailing field only when it or one after it says
                                                     something: precedence not routine, repaired true, an
                                                     expiry, a stub; rcm.wire.envelope)
    K  ClientAck        name, n                             (not forced)
    Z  Snapshot         ordering_snapshot, msg_seq          (compacted logs)
    F  InboundFrontier  peer, incarnation, frontier         (compacted logs)
    P  Pending          origin, seq, header, payload        (compacted logs)
    M  MissedSends      peer, ranges                        (compacted logs)
    N  DeliveryCounter  n                                   (compacted logs: last n before the replay window)
    T  Kept             origin, seq, key, at, payload, precedence?, expires_at?, expired?, reach?   (compacted logs: a
                                                    message retained for repair; a stub's payload is empty)
    W  Wanted           origin, ranges                      (compacted logs: reported missing, not yet repaired)

Old logs stay readable: logs written before MISSED carried ranges (wire
version 2) hold plain lists of numbers in ``O``/``C`` MISSED bodies and in
``M``; ``decode`` turns them into ranges, so readers only ever see ranges.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, dataclass, fields
from typing import Any, ClassVar

from rcm import ranges
from rcm.wire import MISSED, envelope


class RecordError(ValueError):
    """A log record that no version of this code wrote (unknown tag, wrong field count)."""


def _missed_body(body: Any) -> list[list[int]]:
    """MISSED numbers as ranges: logs before version 3 hold a plain list of numbers."""
    if all(type(x) is int for x in body):
        return ranges.of_seqs(body)
    return [[int(a), int(b)] for a, b in body]


@dataclass(frozen=True, slots=True)
class _Record:
    tag: ClassVar[str]
    forced: ClassVar[bool] = True      # must be on disk before the promise it backs

    def encode(self) -> list[Any]:
        """The msgpack array stored in the log."""
        names: tuple[str, ...] = self.__slots__
        return [self.tag, *[getattr(self, name) for name in names]]

    @classmethod
    def decode(cls, values: list[Any]) -> _Record:
        return cls(*values)


@dataclass(frozen=True, slots=True)
class LocalSend(_Record):
    """A client's message accepted here, and the link sequence number it got in each peer's channel."""

    tag: ClassVar[str] = "S"
    seq: int
    header: Any
    payload: bytes
    links: Mapping[str, int]
    skipped: tuple[str, ...]

    def encode(self) -> list[Any]:
        return ["S", self.seq, self.header, self.payload, dict(self.links), list(self.skipped)]

    @classmethod
    def decode(cls, values: list[Any]) -> LocalSend:
        seq, header, payload, links, skipped = values
        return cls(seq, header, payload, dict(links), tuple(skipped))


@dataclass(frozen=True, slots=True)
class Outbound(_Record):
    """A reliable frame queued for ``peer``: CTRL or MISSED (and DATA in a compacted log)."""

    tag: ClassVar[str] = "O"
    peer: str
    link_seq: int
    kind: int
    body: Any

    def encode(self) -> list[Any]:
        return ["O", self.peer, self.link_seq, self.kind, self.body]

    @classmethod
    def decode(cls, values: list[Any]) -> Outbound:
        peer, link_seq, kind, body = values
        return cls(peer, link_seq, kind, _missed_body(body) if kind == MISSED else body)


@dataclass(frozen=True, slots=True)
class Received(_Record):
    """A DATA frame taken from ``origin``'s stream ``incarnation`` at ``link_seq``."""

    tag: ClassVar[str] = "R"
    origin: str
    incarnation: int
    link_seq: int
    msg_seq: int
    header: Any
    payload: bytes


@dataclass(frozen=True, slots=True)
class ReceivedControl(_Record):
    """A CTRL or MISSED frame taken from ``origin``'s stream (a MISSED body is ranges)."""

    tag: ClassVar[str] = "C"
    origin: str
    incarnation: int
    link_seq: int
    kind: int
    body: Any

    @classmethod
    def decode(cls, values: list[Any]) -> ReceivedControl:
        origin, inc, link_seq, kind, body = values
        return cls(origin, inc, link_seq, kind, _missed_body(body) if kind == MISSED else body)


@dataclass(frozen=True, slots=True)
class PeerStream(_Record):
    """``peer``'s reliable stream is now ``incarnation`` (it restarted without its log)."""

    tag: ClassVar[str] = "I"
    peer: str
    incarnation: int


@dataclass(frozen=True, slots=True)
class Acked(_Record):
    """``peer`` acknowledged our stream up to ``upto``; losing it only costs a resend."""

    tag: ClassVar[str] = "A"
    forced: ClassVar[bool] = False
    peer: str
    upto: int


@dataclass(frozen=True, slots=True)
class Delivered(_Record):
    """Delivery number ``n`` handed to the local clients."""

    tag: ClassVar[str] = "D"
    n: int
    origin: str
    seq: int
    key: Any
    late: bool
    payload: bytes
    precedence: str = "routine"
    repaired: bool = False      # recovered by repair (rcm.repair.antientropy); written only when true
    expires_at: float | None = None     # the message expires then (rcm.wire.envelope)
    expired: bool = False       # delivered as a stub (expired): the payload is empty
    reach: int | None = None    # confined to these sites (rcm.wire.envelope): retention serves it to no other

    def encode(self) -> list[Any]:
        head = ["D", self.n, self.origin, self.seq, self.key, self.late, self.payload]
        if self.reach is not None:
            return [*head, self.precedence, self.repaired, self.expires_at, self.expired,
                    envelope.reach_wire(self.reach)]
        if self.expires_at is not None:
            tail: list[Any] = [self.precedence, self.repaired, self.expires_at]
            return [*head, *tail, True] if self.expired else [*head, *tail]
        if self.repaired:
            return [*head, self.precedence, True]
        return head if self.precedence == "routine" else [*head, self.precedence]

    @classmethod
    def decode(cls, values: list[Any]) -> Delivered:
        if len(values) == 11:
            return cls(*values[:10], reach=envelope.check_reach(values[10]))  # type: ignore[misc]
        return cls(*values)


@dataclass(frozen=True, slots=True)
class ClientAck(_Record):
    """Client ``name`` processed deliveries up to ``n``; losing it only costs a replay."""

    tag: ClassVar[str] = "K"
    forced: ClassVar[bool] = False
    name: str
    n: int


@dataclass(frozen=True, slots=True)
class Snapshot(_Record):
    """Head of a compacted log: the ordering protocol's state and the last message seq."""

    tag: ClassVar[str] = "Z"
    ordering: Any
    msg_seq: int


@dataclass(frozen=True, slots=True)
class InboundFrontier(_Record):
    """Compacted log: the last frame held of ``peer``'s stream ``incarnation``."""

    tag: ClassVar[str] = "F"
    peer: str
    incarnation: int
    frontier: int


@dataclass(frozen=True, slots=True)
class Pending(_Record):
    """Compacted log: a message the ordering protocol still holds."""

    tag: ClassVar[str] = "P"
    origin: str
    seq: int
    header: Any
    payload: bytes


@dataclass(frozen=True, slots=True)
class MissedSends(_Record):
    """Compacted log: sends ``peer`` skipped and has not been told of, as ranges."""

    tag: ClassVar[str] = "M"
    peer: str
    ranges: list[list[int]]

    @classmethod
    def decode(cls, values: list[Any]) -> MissedSends:
        peer, body = values
        return cls(peer, _missed_body(body))


@dataclass(frozen=True, slots=True)
class DeliveryCounter(_Record):
    """Compacted log: the last delivery number before the replay window (which may be empty)."""

    tag: ClassVar[str] = "N"
    n: int


@dataclass(frozen=True, slots=True)
class Kept(_Record):
    """Compacted log: a message retained to repair other sites, delivered here at ``at``."""

    tag: ClassVar[str] = "T"
    origin: str
    seq: int
    key: Any
    at: float
    payload: bytes
    precedence: str = "routine"     # absent in logs written before repair kept it
    expires_at: float | None = None     # the message expires then (rcm.wire.envelope)
    expired: bool = False       # kept as a stub: its payload went when it expired
    reach: int | None = None    # confined to these sites (rcm.wire.envelope)

    def encode(self) -> list[Any]:
        head = ["T", self.origin, self.seq, self.key, self.at, self.payload, self.precedence]
        if self.reach is not None:
            return [*head, self.expires_at, self.expired, envelope.reach_wire(self.reach)]
        if self.expires_at is None:
            return head
        return [*head, self.expires_at, True] if self.expired else [*head, self.expires_at]

    @classmethod
    def decode(cls, values: list[Any]) -> Kept:
        if len(values) == 9:
            return cls(*values[:8], reach=envelope.check_reach(values[8]))  # type: ignore[misc]
        return cls(*values)


@dataclass(frozen=True, slots=True)
class KeptMessage:
    """What a log says of a retained message (``rcm.stack.recovery`` folds ``Delivered`` and ``Kept`` into it)."""

    key: tuple[Any, ...]
    at: float | None            # delivered then (None: not in the record; counted from the restart)
    payload: bytes
    repaired: bool
    precedence: str
    expires_at: float | None = None
    expired: bool = False
    reach: int | None = None


@dataclass(frozen=True, slots=True)
class Wanted(_Record):
    """Compacted log: messages of ``origin`` reported missing here and not yet repaired, as ranges."""

    tag: ClassVar[str] = "W"
    origin: str
    ranges: list[list[int]]


Record = (LocalSend | Outbound | Received | ReceivedControl | PeerStream | Acked | Delivered | ClientAck
          | Snapshot | InboundFrontier | Pending | MissedSends | DeliveryCounter | Kept | Wanted)

RECORD_TYPES: tuple[type[_Record], ...] = (
    LocalSend, Outbound, Received, ReceivedControl, PeerStream, Acked, Delivered, ClientAck, Snapshot,
    InboundFrontier, Pending, MissedSends, DeliveryCounter, Kept, Wanted)
BY_TAG: dict[str, type[_Record]] = {t.tag: t for t in RECORD_TYPES}
FORCED = frozenset(t.tag for t in RECORD_TYPES if t.forced)
"""Tags of the records that must reach the disk (``fdatasync``) before their batch's promises."""


def decode(raw: Any) -> Record:
    """The typed record of a log array; ``RecordError`` for one no version wrote."""
    if not isinstance(raw, list) or not raw or not isinstance(raw[0], str):
        raise RecordError(f"log record {raw!r:.80} is not an array starting with a kind")
    cls = BY_TAG.get(raw[0])
    if cls is None:
        raise RecordError(f"log record of unknown kind {raw[0]!r} (written by a newer version?)")
    want = len(fields(cls))
    least = sum(1 for f in fields(cls) if f.default is MISSING)   # trailing optional fields may be absent
    if not least <= len(raw) - 1 <= want:
        raise RecordError(f"log record {raw[0]!r} has {len(raw) - 1} fields, not {want}")
    return cls.decode(raw[1:])  # type: ignore[return-value]


def encode(record: Record) -> list[Any]:
    """The log array of a typed record."""
    return record.encode()
