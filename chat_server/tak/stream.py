"""TAK streaming framing, sans-IO: a TCP byte stream cut into events, XML or TAK protocol v1.

Theory of operation
-------------------
A TAK client on a streaming (TCP or TLS) connection sends either plain CoT
XML events back to back (``<?xml ...?><event ...>...</event>``, whitespace
between them allowed), or TAK protocol v1 frames: ``0xbf``, the payload's
length as a protobuf varint, the ``TakMessage``. Clients start in XML and may
switch to protobuf after the ``t-x-takp`` negotiation (session.py); some
(pytak with ``TAK_PROTO = 1``) send protobuf from the start. So the framing
is detected at every event boundary by its first byte: ``<`` is XML,
``0xbf`` protobuf. :class:`StreamReader` takes bytes as they come
(``feed``, torn reads welcome) and returns what it found, in order:
:class:`Frame` (one event's bytes, for cot.py to decode), :class:`Dropped`
(bytes skipped, with why: an event over ``max_event_bytes``, bytes that
start no event) and :class:`Broken` (the stream cannot be resynchronised: a
length varint longer than ten bytes; the connection should end). An
oversized XML event is skipped up to its ``</event>``, an oversized protobuf
one by its length: the next event is read normally, and nothing is kept
beyond ``max_event_bytes``. After a garbage byte the reader looks for the
next start of the framing the client was last speaking.

An XML event ends at the first ``</event>``: one that appears literally in a
CDATA section or a comment ends it early (the rest fails to decode and is
dropped); TAK clients escape text, so it does not happen in practice.
"""
from __future__ import annotations

from dataclasses import dataclass

from rcm.wire import read_varint

from .cot import MAX_EVENT_BYTES

PROTO_MAGIC = 0xBF
_END = b"</event>"
_SPACE = b" \t\r\n\0"
_VARINT_MAX = 10


@dataclass(frozen=True, slots=True)
class Frame:
    """One event's bytes: CoT XML (an XML declaration may lead) or, ``proto``, a ``TakMessage``."""

    data: bytes
    proto: bool


@dataclass(frozen=True, slots=True)
class Dropped:
    """Bytes skipped; ``reason`` says why (logged by the caller)."""

    reason: str


@dataclass(frozen=True, slots=True)
class Broken:
    """The stream cannot be cut into events any more: close the connection."""

    reason: str


Item = Frame | Dropped | Broken


class StreamReader:
    """Cuts one connection's bytes into events (see the module docstring)."""

    def __init__(self, max_event_bytes: int = MAX_EVENT_BYTES) -> None:
        self.max_event_bytes = max_event_bytes
        self.proto = False                # the framing of the last event (what a garbage byte resyncs to)
        self.broken = False
        self._buf = bytearray()
        self._scanned = 0                 # bytes of an XML event already searched for </event>
        self._skip_bytes = 0              # of an oversized protobuf event, still to skip
        self._skip_xml = False            # skipping an oversized XML event up to its </event>

    def feed(self, data: bytes) -> list[Item]:
        if self.broken:
            return []
        self._buf += data
        out: list[Item] = []
        while True:
            item = self._next()
            if item is None:
                return out
            out.append(item)
            if isinstance(item, Broken):
                self.broken = True
                self._buf.clear()
                return out

    def _next(self) -> Item | None:
        buf = self._buf
        if self._skip_bytes:
            n = min(self._skip_bytes, len(buf))
            del buf[:n]
            self._skip_bytes -= n
            if self._skip_bytes:
                return None
        if self._skip_xml:
            i = buf.find(_END)
            if i < 0:
                del buf[:max(0, len(buf) - len(_END) + 1)]
                return None
            del buf[:i + len(_END)]
            self._skip_xml = False
        start = 0
        while start < len(buf) and buf[start] in _SPACE:
            start += 1
        if start:
            del buf[:start]
            self._scanned = max(0, self._scanned - start)
        if not buf:
            return None
        first = buf[0]
        if first == PROTO_MAGIC:
            return self._proto()
        if first == ord("<"):
            return self._xml()
        return self._garbage()

    def _proto(self) -> Item | None:
        buf = self._buf
        try:
            got = read_varint(buf, 1, _VARINT_MAX)
        except ValueError:
            return Broken("a TAK protocol length longer than ten bytes")
        if got is None:
            return None                          # the length is torn: wait for more
        length, i = got
        self.proto = True
        if length > self.max_event_bytes:
            del buf[:i]
            self._skip_bytes = length
            return Dropped(f"a TAK protocol event of {length} bytes (the limit is {self.max_event_bytes})")
        if len(buf) < i + length:
            return None
        data = bytes(buf[i:i + length])
        del buf[:i + length]
        if not data:
            return Dropped("an empty TAK protocol event")
        return Frame(data, proto=True)

    def _xml(self) -> Item | None:
        buf = self._buf
        i = buf.find(_END, max(0, self._scanned - len(_END) + 1))
        if i < 0:
            self._scanned = len(buf)
            if len(buf) > self.max_event_bytes:
                del buf[:max(0, len(buf) - len(_END) + 1)]
                self._scanned = 0
                self._skip_xml = True
                self.proto = False
                return Dropped(f"an XML event of more than {self.max_event_bytes} bytes")
            return None
        end = i + len(_END)
        self._scanned = 0
        self.proto = False
        data = bytes(buf[:end])
        del buf[:end]
        if len(data) > self.max_event_bytes:
            return Dropped(f"an XML event of {len(data)} bytes (the limit is {self.max_event_bytes})")
        return Frame(data, proto=False)

    def _garbage(self) -> Item:
        buf = self._buf
        target = PROTO_MAGIC if self.proto else ord("<")
        i = buf.find(bytes([target]))
        n = len(buf) if i < 0 else i
        del buf[:n]
        self._scanned = 0
        return Dropped(f"{n} bytes that start no event")
