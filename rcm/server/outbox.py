"""What one inter-site connection writes in one event-loop turn, as one piece (sans-IO).

Theory of operation
-------------------
On a radio every socket write is a packet (~40 B of IP/TCP headers) and, with
TLS, a record of its own (22 B: header, content type, AEAD tag); on a 2.4 kbit/s
link those dominate a 60-character line. So the edge (``rcm.server.process``)
corks *plaintext*: the stack's bytes for a connection (``send``) wait here
until the end of the event-loop turn, and ``take()`` then turns all of them
into one compressed chunk (``LinkCodec.send``), one ``TlsLink.send`` (one record
for up to 16 KiB) and one piece for ``transport.write``. The edge calls
``take()`` from a callback it schedules with ``call_soon`` when a connection
first gets bytes in a turn: it runs at the start of the next loop iteration,
before that iteration's reads are handled, so nothing waits on a timer and a
FLASH goes out as soon as today (``close`` and shutdown take at once).

Bytes that are already socket bytes (TLS handshake flights and tickets out of
``TlsLink.feed``, the codec's output released when the peer's first frame is
read) are added with ``raw``; they were made before anything still corked was
encrypted, so writing them first keeps the connection's byte order exactly:
the codec and TLS see the plaintext in the order the stack wrote it. After a
``take``, ``taken`` is how many of the stack's bytes it carries: the edge
tells the stack that and the write's size (``SiteStack.wire_sent``), so a
paced link's pacer counts what crossed the link. ``corked`` is how many of
the stack's bytes wait for the next ``take``.

``WireMeter`` counts what a site's connections wrote, cumulatively (the
``wire`` part of the RCM stats; ``bench/hf.py`` reads its composition): the
stack's bytes per frame kind, the codec's output, the TLS records carrying it
(their count and bytes), the other socket bytes (handshakes, tickets) and the
writes. Frame kinds are read off each frame's first bytes (its varint length,
the msgpack array header and the kind's fixint) without decoding the body.
"""
from __future__ import annotations

import ssl
from collections import Counter
from typing import Any, Protocol

from rcm import wire
from rcm.wire.compress import LinkCodec


class RecordLayer(Protocol):
    def send(self, data: bytes) -> bytes: ...


class WireMeter:
    """What a site's inter-site connections wrote (see the module docstring)."""

    __slots__ = ("frames", "frame_bytes", "sends", "plain", "coded", "records", "record_bytes", "raw", "writes")

    def __init__(self) -> None:
        self.frames: Counter[str] = Counter()
        self.frame_bytes: Counter[str] = Counter()
        self.sends = 0            # the stack's writes (Transmits): each was a record and a write before corking
        self.plain = 0            # the stack's bytes
        self.coded = 0            # after the codec (compressed, or as they were)
        self.records = 0          # TLS records carrying them
        self.record_bytes = 0     # the socket bytes carrying them (the coded bytes themselves without TLS)
        self.raw = 0              # other socket bytes: TLS handshakes and tickets
        self.writes = 0           # transport writes

    def count_frames(self, data: bytes) -> None:
        """Frames of ``data`` by kind (whole frames, as the stack writes them; a remainder that is not one
        counts as ``other``)."""
        pos, n = 0, len(data)
        while pos < n:
            try:
                got = wire.read_varint(data, pos, 5)
            except ValueError:
                got = None
            if got is None:
                length, p = 0, n
            else:
                length, p = got
            end = p + length
            if end > n or p >= n:
                self.frames["other"] += 1
                self.frame_bytes["other"] += n - pos
                return
            kind = data[p + 1] if 0x90 <= data[p] <= 0x9F and p + 1 < end else -1
            name = wire.FRAME_NAMES.get(kind, "other")
            self.frames[name] += 1
            self.frame_bytes[name] += end - pos
            pos = end

    def snapshot(self) -> dict[str, Any]:
        return {"kinds": {k: [self.frames[k], self.frame_bytes[k]] for k in sorted(self.frames)},
                "sends": self.sends, "plain": self.plain, "coded": self.coded, "records": self.records,
                "record_bytes": self.record_bytes, "raw": self.raw, "writes": self.writes}


def records(data: bytes) -> int:
    """How many whole TLS records ``data`` holds (each a 5-byte header with its body's length)."""
    n = pos = 0
    while pos + 5 <= len(data):
        pos += 5 + int.from_bytes(data[pos + 3:pos + 5], "big")
        n += 1
    return n


class Outbox:
    """One connection's bytes of this turn (see the module docstring)."""

    __slots__ = ("codec", "tls", "meter", "taken", "corked", "_plain", "_out")

    def __init__(self, codec: LinkCodec, meter: WireMeter) -> None:
        self.codec = codec
        self.tls: RecordLayer | None = None      # set once TLS is up (the edge's TlsLink)
        self.meter = meter
        self.taken = 0          # the stack's bytes in what the last ``take`` returned
        self.corked = 0         # the stack's bytes waiting for ``take``
        self._plain: list[bytes] = []
        self._out: list[bytes] = []

    def __bool__(self) -> bool:
        return bool(self._plain or self._out)

    def send(self, data: bytes) -> None:
        """The stack's bytes, corked until ``take``."""
        if data:
            self.meter.sends += 1
            self.corked += len(data)
            self._plain.append(data)

    def raw(self, data: bytes) -> None:
        """Socket bytes made now (a TLS flight, the codec's released output): written before what is corked."""
        if data:
            self.meter.raw += len(data)
            self._out.append(data)

    def coded(self, data: bytes) -> None:
        """The codec's output made now (released when the peer's first frame was read), through TLS."""
        self._encrypt(data)

    def take(self) -> bytes:
        """Everything of this turn, for one ``transport.write`` (the plaintext: one codec chunk, one record).
        ``ssl.SSLError`` from TLS leaves nothing to write (the connection is closing)."""
        self.taken = self.corked = 0
        if self._plain:
            plain = b"".join(self._plain)
            self._plain = []
            self.meter.plain += len(plain)
            self.taken = len(plain)
            self.meter.count_frames(plain)
            self._encrypt(self.codec.send(plain))
        out, self._out = self._out, []
        if not out:
            self.taken = 0
            return b""
        self.meter.writes += 1
        return out[0] if len(out) == 1 else b"".join(out)

    def drop(self) -> None:
        """The connection is gone: what waits is never written."""
        self._plain = []
        self._out = []
        self.corked = 0

    def _encrypt(self, data: bytes) -> None:
        if not data:
            return
        self.meter.coded += len(data)
        if self.tls is not None:
            try:
                data = self.tls.send(data)
            except ssl.SSLError:
                self.drop()       # TLS is closing; the connection's loss is reported by the transport
                return
            self.meter.records += records(data)
        self.meter.record_bytes += len(data)
        self._out.append(data)
