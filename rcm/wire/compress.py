"""Streaming compression of one inter-site connection, negotiated in HELLO (sans-IO).

Theory of operation
-------------------
Each direction of each inter-site connection (TCP, or TLS over it) gets one
zstd streaming context for its whole life: every write batch of the stack is
compressed against everything sent before on that connection and flushed at
once (``FLUSH_BLOCK``), so nothing waits for more data and a small chat frame
costs a few bytes when one like it went before. A new connection starts with
empty history (the contexts die with the connection).

Negotiation rides on the HELLO exchange (``rcm.wire.handshake``). The first
frame of each direction is never compressed. A site whose ``[rcm]
compression`` is ``"zstd"`` appends a capability field to its HELLO on the way
out (``handshake.offer``: the stack builds HELLOs without it, so a site with
``"none"`` sends exactly the HELLO of earlier versions); when the peer's first
frame is a HELLO offering it too (``handshake.offered``), everything after the
first frame is compressed, both directions. The dialer speaks first and sends
nothing more until the acceptor's HELLO comes back; the acceptor writes its
HELLO only after reading the dialer's. So each end knows both offers before it
writes its second frame; bytes the stack writes earlier (none, in practice)
are held until the peer's first frame is read. A peer that does not offer
(``compression = "none"``, or a version without it) gets the plain stream.

The dictionary. A site offering zstd also offers ``CAP_DICT``: the
dictionary shipped in ``rcm.wire.chat_dict`` (trained on the suite's own chat
traffic by ``bench/link_dict.py --write``). When both HELLOs carry the bit,
both contexts of the connection start with it as their history, so the first
messages of a connection, and the structure of every small frame, compress as
if the link had carried many; with one side lacking it (an older version),
the connection compresses without. ``bench/link_dict.py`` measured on the HF
profile's links, per 60-character chat message copy, before TLS: 0.85x the
bytes of the per-link context alone on lines of the training's vocabulary
(63 against 75 B) and 0.93x on words it never saw (57 against 62 B; see
docs/rcm.md, "Link compression"). A different dictionary must take a new
capability bit: both ends must hold the same bytes.

Level and memory. ``LEVEL`` 9: level 19 takes a further 5-9% off small chat
frames for about 11 times the CPU per write (23 against 2 microseconds), left
for links where that matters. Hash and chain tables are capped to the 64 KiB
window (``params``): larger ones find nothing more in a window that small, and
level 9's defaults cost about 10 MiB per context (now about 0.6 MiB), with
identical output.

``LinkCodec`` is the whole machine: ``send(bytes) -> bytes`` for the socket,
``receive(bytes) -> (bytes for the stack, bytes for the socket)`` (the second
part: output held until the peer's first frame was read). It counts the bytes
both sides of it (``raw_out``/``wire_out``, ``raw_in``/``wire_in``).

Untrusted input. The decompressor refuses a stream whose frame header asks for
a window past ``WINDOW`` (64 KiB; memory per connection stays small), and one
read may expand to at most ``READ_FLOOR`` plus ``MAX_RATIO`` times its size:
input is fed in slices small enough that the worst expansion of a slice
(about ``WINDOW`` per three input bytes) cannot pass the bound by more than a
slice's worth, and past the bound ``CompressionError`` is raised (a protocol
error: the connection is closed, nothing else moves). The frame decoder's limits
(``rcm.wire.FrameDecoder``) apply to the decompressed stream as to a plain one.
"""
from __future__ import annotations

import zstandard

from rcm.wire import handshake
from rcm.wire.handshake import CAP_DICT, CAP_ZSTD

LEVEL = 9                    # small frames: matching effort pays; a site's CPU is not the bottleneck at HF rates
WINDOW_LOG = 16
WINDOW = 1 << WINDOW_LOG     # history per direction, and the largest window a peer's stream may declare
READ_FLOOR = (1 << 20) + (64 << 10)
"""Any read may expand to this much (a maximal frame of zeros, say), plus ``MAX_RATIO`` times its size."""
MAX_RATIO = 256
MIN_SLICE = 16               # the bound is passed by at most what this many input bytes expand to (~350 KiB)


class CompressionError(Exception):
    """The peer's compressed stream is corrupt or expands past the bounds; the connection must close."""


def params(level: int = LEVEL) -> zstandard.ZstdCompressionParameters:
    """The link's parameters: the window, tables no larger than it, no magic, checksum or sizes."""
    return zstandard.ZstdCompressionParameters.from_level(
        level, window_log=WINDOW_LOG, hash_log=WINDOW_LOG, chain_log=WINDOW_LOG,
        format=zstandard.FORMAT_ZSTD1_MAGICLESS, write_checksum=0, write_content_size=0, write_dict_id=0)


_dictionary: zstandard.ZstdCompressionDict | None = None


def dictionary() -> zstandard.ZstdCompressionDict:
    """The shipped dictionary (``CAP_DICT``), loaded once."""
    global _dictionary
    if _dictionary is None:
        from rcm.wire import chat_dict
        _dictionary = zstandard.ZstdCompressionDict(chat_dict.DATA)
    return _dictionary


class Compressor:
    """One direction's streaming context: ``compress(batch)`` is flushed at once."""

    __slots__ = ("_obj",)

    def __init__(self, dict_data: zstandard.ZstdCompressionDict | None = None) -> None:
        self._obj = zstandard.ZstdCompressor(compression_params=params(), dict_data=dict_data).compressobj()

    def compress(self, data: bytes) -> bytes:
        return self._obj.compress(data) + self._obj.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK)


class Decompressor:
    """The other direction's context, bounded (see the module docstring)."""

    __slots__ = ("_obj", "floor", "ratio")

    def __init__(self, floor: int = READ_FLOOR, ratio: int = MAX_RATIO,
                 dict_data: zstandard.ZstdCompressionDict | None = None) -> None:
        self._obj = zstandard.ZstdDecompressor(max_window_size=WINDOW, dict_data=dict_data,
                                               format=zstandard.FORMAT_ZSTD1_MAGICLESS).decompressobj()
        self.floor = floor
        self.ratio = ratio

    def decompress(self, data: bytes) -> bytes:
        """The bytes ``data`` expands to; ``CompressionError`` if corrupt or past the read's bound."""
        limit = self.floor + self.ratio * len(data)
        out: list[bytes] = []
        got = 0
        pos = 0
        view = memoryview(data)
        while pos < len(data):
            # A slice of n bytes expands to at most about n * WINDOW / 3 bytes (a block of at most
            # WINDOW bytes takes 4 input bytes or more): keep that within what the bound still allows,
            # so the bound is never passed by more than one small slice's worth.
            n = max(MIN_SLICE, 3 * (limit - got) // WINDOW)
            try:
                chunk = self._obj.decompress(view[pos:pos + n])
            except zstandard.ZstdError as e:
                raise CompressionError(f"undecodable compressed stream: {e}") from None
            pos += n
            got += len(chunk)
            if got > limit:
                raise CompressionError(f"a read of {len(data)} compressed bytes expands past {limit} bytes "
                                       f"(at most {self.floor} + {self.ratio} x its size)")
            out.append(chunk)
        return b"".join(out)


def _first_frame_end(buf: bytes | bytearray) -> int | None:
    """Where the first frame of ``buf`` ends (its varint length and body), None if not all here, -1 if
    the prefix is not a varint of at most 5 bytes."""
    length = shift = 0
    for i in range(min(len(buf), 5)):
        b = buf[i]
        length |= (b & 0x7F) << shift
        if not b & 0x80:
            end = i + 1 + length
            return end if end <= len(buf) else None
        shift += 7
    return None if len(buf) < 5 else -1


class LinkCodec:
    """One connection's compression, both directions (see the module docstring)."""

    __slots__ = ("offer", "offer_dict", "extra_caps", "hello_limit", "peer_offered", "peer_caps", "_out_first",
                 "_in_first", "_held", "_compressor", "_decompressor", "raw_out", "wire_out", "raw_in", "wire_in")

    def __init__(self, offer: bool, hello_limit: int = 1 << 20, offer_dict: bool = True, extra_caps: int = 0) -> None:
        """``offer``: this site offers compression (``[rcm] compression = "zstd"``); ``hello_limit``: the
        stack's limit on a first frame (a longer one is left to the stack to refuse); ``offer_dict``: with
        it, the dictionary (off: as a version without it); ``extra_caps``: more capability bits our HELLO
        carries, of options the codec does not apply (``handshake.CAP_TLS_CONTINUE``)."""
        self.offer = offer
        self.offer_dict = offer_dict
        self.extra_caps = extra_caps
        self.hello_limit = hello_limit
        self.peer_offered: bool | None = None     # None until the peer's first frame is read
        self.peer_caps = 0                        # the capability bits of the peer's HELLO
        self._out_first: bytearray | None = bytearray()   # our first frame, until it is whole
        self._in_first: bytearray | None = bytearray()    # the peer's first frame, until it is whole
        self._held: list[bytes] = []
        self._compressor: Compressor | None = None
        self._decompressor: Decompressor | None = None
        self.raw_out = self.wire_out = self.raw_in = self.wire_in = 0

    @property
    def compressed(self) -> bool | None:
        """Is the stream past the first frames compressed (None: not known yet)?"""
        if not self.offer:
            return False
        return self.peer_offered

    @property
    def dictionary(self) -> bool:
        """Do both contexts start with the shipped dictionary (both offered ``CAP_DICT``)?"""
        return bool(self.compressed) and self.offer_dict and bool(self.peer_caps & CAP_DICT)

    def _dict(self) -> zstandard.ZstdCompressionDict | None:
        return dictionary() if self.dictionary else None

    # -- out ---------------------------------------------------------------------------------------
    def send(self, data: bytes) -> bytes:
        """What the socket carries for the stack's ``data``."""
        self.raw_out += len(data)
        out = b""
        if self._out_first is not None:
            self._out_first += data
            end = _first_frame_end(self._out_first)
            if end is None:
                return b""
            first, rest = bytes(self._out_first[:end]), bytes(self._out_first[end:])
            if end < 0:     # not a frame of ours: never happens; send it as it is, uncompressed
                first, rest = bytes(self._out_first), b""
                self.offer = False
            self._out_first = None
            caps = (CAP_ZSTD | (CAP_DICT if self.offer_dict else 0) if self.offer else 0) | self.extra_caps
            out = handshake.offer(first, caps) if caps else first
            data = rest
        if data:
            out += self._after_first(data)
        self.wire_out += len(out)
        return out

    def _after_first(self, data: bytes) -> bytes:
        compressed = self.compressed
        if compressed is None:
            self._held.append(data)
            return b""
        if not compressed:
            return data
        if self._compressor is None:
            self._compressor = Compressor(self._dict())
        return self._compressor.compress(data)

    # -- in ----------------------------------------------------------------------------------------
    def receive(self, data: bytes) -> tuple[bytes, bytes]:
        """(bytes for the stack, bytes for the socket) for ``data`` read from the socket.

        ``CompressionError``: the compressed stream is corrupt or too expansive (close the connection).
        """
        self.wire_in += len(data)
        released = b""
        if self._in_first is not None:
            self._in_first += data
            end = _first_frame_end(self._in_first)
            if end is None and len(self._in_first) <= self.hello_limit + 5:
                return b"", b""
            if end is None or end < 0 or end > self.hello_limit + 5:
                # Not a frame the stack will take: hand it everything as it came, to refuse.
                buf, self._in_first = bytes(self._in_first), None
                self.peer_offered = False
                self.raw_in += len(buf)
                return buf, self._release()
            first, data = bytes(self._in_first[:end]), bytes(self._in_first[end:])
            self._in_first = None
            self.peer_caps = handshake.offered(first)
            self.peer_offered = self.peer_caps & CAP_ZSTD != 0
            released = self._release()
            plain = first + (self._decompress(data) if data else b"")
        else:
            plain = self._decompress(data)
        self.raw_in += len(plain)
        return plain, released

    def _decompress(self, data: bytes) -> bytes:
        if not self.compressed:
            return data
        if self._decompressor is None:
            self._decompressor = Decompressor(dict_data=self._dict())
        return self._decompressor.decompress(data)

    def _release(self) -> bytes:
        held, self._held = self._held, []
        if not held:
            return b""
        out = self._after_first(b"".join(held))
        self.wire_out += len(out)
        return out
