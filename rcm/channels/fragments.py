"""Fragments: a large reliable frame cut into pieces on a paced link, and put together again (sans-IO).

Theory of operation (docs/rcm.md, Fragmentation)
------------------------------------------------
On a paced link (``[sites.A.rate]``) the pacer writes one frame at a time, so a
FLASH waits behind whatever frame is being written: an 8 KiB chat line holds
it about 1.2 s at 56 kbit/s, a 256 KiB payload 37 s. So a frame taken from a
lane whose encoding is larger than ``fragment_size(rate)`` (about
``FRAGMENT_SECONDS`` of link time, at least ``FRAGMENT_FLOOR`` bytes) is
written as FRAG frames, one piece per pacer turn, and a FLASH (or anything
the lanes' share lets through) is written between two pieces.

**The stream's numbering.** Reliable frames are numbered implicitly by the
order they arrive in (``rcm.channels.p2p``), so a frame must take its link
sequence number when it *completes*, not when its first piece goes: a FLASH
written between its pieces completes first and takes the number before it.
So the pieces carry the frame's *inner* encoding, which does not depend on
the numbering: ``[DATA, msg_seq, header, payload]`` (the message number
whole, not the connection's delta) or ``[kind, body]``; the frame waits at the
head of its lane, unnumbered, while its pieces go, and is numbered (and
logged) when the last piece is written. That piece carries what depends on
the stream: the check byte of the frame's link sequence number and the
piggybacked acknowledgement. The receiver rebuilds the frame as a direct
connection carries it (``whole``: the check, the DATA delta against its base)
and hands it to the ordinary decoder, so every bound and check of a whole
frame applies to a reassembled one, and the one-byte check, the cumulative
acks and resend-after-reconnect work unchanged.

**Pieces.** ``[FRAG, lane, offset, chunk]``, and the last one
``[FRAG, lane, offset, chunk, check, ack?]``. Offset 0 starts a new frame in
that lane (a piece of another one that never completed is dropped: the sender
took that frame another way); any other offset must be exactly what the
receiver holds of that lane's partial frame. A reconnection drops partial
frames at both ends (they are the connection's), and the sender starts the
frame again at offset 0 on the new connection; a frame numbered already (its
last piece written) and not acknowledged is resent whole, first, as any
resend (nothing may pass it anyway: the stream's order).

**Bounds** (docs/security.md): a receiver holds at most one partial frame per
lane (``LANES``) per connection, each at most ``max_frame_bytes``; a piece
must be non-empty bytes at the right offset; a reassembled frame must be a
reliable kind (DATA, CTRL, MISSED, SUMMARY, FETCH, REPAIR), never a FRAG, and
then passes the decoder's checks. Anything else is a protocol violation
(``FragmentError``; the connection closes, nothing else moves).

**Relayed frames.** A relay forwards other sites' ROUTED frames through its
forward queue to a paced neighbour (``rcm.channels.forwarding``); one larger
than a piece is cut there too, into FRAG frames of lane ``RELAYED + lane``
(``relayed_pieces``): a relayed frame is no part of the hop's numbered
stream, so its pieces carry its whole encoding and the last one is marked by
a check of 0 with no acknowledgement. The pieces wait in the forward queue
as frames of their own, in their origin's FIFO stream and their lane, so a
FLASH of another stream or lane is written between two of them, and no two
relayed frames of one lane interleave (the queue takes a lane's frames in
arrival order, and a frame's pieces arrive together). The receiver holds one
partial relayed frame per lane beside the channel's; the whole one must be a
ROUTED frame (``relayed_whole``) and is decoded as if it had come in one
piece. A relayed frame that loses its connection midway is gone with the
queue, as a whole one is: its origin resends it. Not cut: an origin's own
frames on a relay path (written whole to the first hop; docs/rcm.md).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgpack

from ordering import KEY_INT_MAX
from rcm import wire
from rcm.channels.lanes import LANES
from rcm.channels.p2p import OutFrame

FRAGMENT_SECONDS = 0.25
"""About the link time of one piece: a FLASH waits at most this long behind a large frame (plus the burst)."""
FRAGMENT_FLOOR = 256
"""Smallest piece, in bytes: below it the pieces' framing (and a packet's headers each) cost more than the wait."""

RELAYED = LANES
"""FRAG lanes from here up carry relayed (ROUTED) frames: lane ``RELAYED + l`` a frame of lane ``l``."""

_packer = msgpack.Packer(use_bin_type=True)


class FragmentError(ValueError):
    """A piece the receiver must refuse (the connection closes)."""


def fragment_size(rate_bps: int) -> int:
    """The largest piece on a link paced at ``rate_bps``."""
    return max(FRAGMENT_FLOOR, int(rate_bps / 8 * FRAGMENT_SECONDS))


def inner(f: OutFrame) -> bytes:
    """The encoding of a channel frame that its pieces carry (independent of the stream's numbering)."""
    body = [wire.DATA, f.msg_seq, f.header, f.payload] if f.kind == wire.DATA else [f.kind, f.payload]
    data: bytes = _packer.pack(body)
    return data


def relayed_pieces(frame: list[Any], lane: int, size: int) -> list[bytes]:
    """The encoded FRAG frames that carry relayed ``frame`` (a ROUTED frame, as ``rcm.routing.relay.encode``
    makes it) of lane ``lane`` in pieces of at most ``size`` bytes: the last one marked with check 0."""
    body: bytes = _packer.pack(frame)
    n = piece(len(body), size)
    out = []
    for offset in range(0, len(body), n):
        f: list[Any] = [wire.FRAG, RELAYED + lane, offset, body[offset:offset + n]]
        if offset + n >= len(body):
            f.append(0)
        out.append(wire.encode_frame(f))
    return out


def piece(total: int, size: int) -> int:
    """The length of each piece (the last may be shorter) when ``total`` bytes go in pieces of at most
    ``size``: as even as can be, so that no piece is a runt."""
    n = -(-total // size)
    return -(-total // n)


@dataclass(slots=True)
class Outgoing:
    """A frame being written in pieces (kept on its ``OutFrame``): its inner bytes, how much went, and on
    which connection (a new connection starts it again)."""

    conn: Any
    data: bytes
    sent: int = 0


@dataclass(slots=True)
class Reassembly:
    """One connection's partial frames, one per lane, each at most ``limit`` bytes."""

    limit: int
    partial: dict[int, bytearray] = field(default_factory=dict)

    def held(self) -> int:
        return sum(len(b) for b in self.partial.values())

    def take(self, lane: int, offset: int, chunk: bytes, last: bool) -> bytes | None:
        """Add a piece; the frame's inner bytes when it was the last, else None."""
        if offset == 0:
            buf = self.partial[lane] = bytearray()
        else:
            got = self.partial.get(lane)
            if got is None or offset != len(got):
                raise FragmentError(f"FRAG piece at offset {offset} of lane {lane}, which holds "
                                    f"{0 if got is None else len(got)} bytes")
            buf = got
        if len(buf) + len(chunk) > self.limit:
            del self.partial[lane]
            raise FragmentError(f"fragmented frame past the {self.limit}-byte frame limit")
        buf += chunk
        if not last:
            return None
        del self.partial[lane]
        return bytes(buf)


@dataclass(frozen=True, slots=True)
class Piece:
    """A FRAG frame, decoded (``check`` is None but on the last piece)."""

    lane: int
    offset: int
    chunk: bytes
    check: int | None
    ack: Any

    @property
    def relayed(self) -> bool:
        """A piece of a relayed (ROUTED) frame (lanes ``RELAYED`` and up)?"""
        return self.lane >= RELAYED


def parse(f: list[Any], limit: int) -> Piece:
    """A FRAG frame's fields, checked (``FragmentError``)."""
    if not 4 <= len(f) <= 6:
        raise FragmentError(f"malformed FRAG frame: {len(f)} fields")
    lane, offset, chunk = f[1], f[2], f[3]
    if type(lane) is not int or not 0 <= lane < RELAYED + LANES:
        raise FragmentError(f"malformed FRAG frame: lane {lane!r:.40}")
    if type(offset) is not int or not 0 <= offset < limit:
        raise FragmentError(f"malformed FRAG frame: offset {offset!r:.40}")
    if not isinstance(chunk, bytes) or not chunk:
        raise FragmentError("malformed FRAG frame: the piece is not non-empty bytes")
    if len(f) == 4:
        return Piece(lane, offset, chunk, None, None)
    check = f[4]
    if type(check) is not int or not 0 <= check < wire.CHECK_MOD:
        raise FragmentError(f"malformed FRAG frame: stream check {check!r:.40}")
    if lane >= RELAYED and (check != 0 or len(f) > 5):
        raise FragmentError("malformed FRAG frame: a relayed frame's last piece has check 0 and no ack")
    return Piece(lane, offset, chunk, check, f[5] if len(f) > 5 else None)


def whole(data: bytes, check: int, ack: Any, rx_msg_base: int) -> list[Any]:
    """The frame a direct connection would have carried, from a reassembled inner encoding (the decoder
    then checks it as any frame); ``FragmentError`` when it is not one."""
    try:
        f = msgpack.unpackb(data, raw=False, use_list=True, strict_map_key=True)
    except Exception as e:  # msgpack raises several types for bad input
        raise FragmentError(f"undecodable fragmented frame: {type(e).__name__}") from None
    if not isinstance(f, list) or not f or type(f[0]) is not int or f[0] not in wire.RELIABLE:
        raise FragmentError("a fragmented frame must be a reliable frame (DATA, CTRL, MISSED, SUMMARY, "
                            "FETCH, REPAIR)")
    tail = [] if ack is None else [ack]
    if f[0] == wire.DATA:
        if len(f) != 4 or type(f[1]) is not int or not 1 <= f[1] <= KEY_INT_MAX or f[1] == rx_msg_base:
            raise FragmentError("malformed fragmented DATA frame")
        return [wire.DATA, check, f[1] - rx_msg_base, f[2], f[3], *tail]
    if len(f) != 2:
        raise FragmentError(f"malformed fragmented {wire.FRAME_NAMES[f[0]]} frame")
    return [f[0], check, f[1], *tail]


def relayed_whole(data: bytes) -> list[Any]:
    """The relayed frame reassembled from the pieces of a relayed lane (the decoder then checks it as any
    frame); ``FragmentError`` when it is not a ROUTED frame."""
    try:
        f = msgpack.unpackb(data, raw=False, use_list=True, strict_map_key=True)
    except Exception as e:  # msgpack raises several types for bad input
        raise FragmentError(f"undecodable fragmented frame: {type(e).__name__}") from None
    if not isinstance(f, list) or not f or type(f[0]) is not int or f[0] != wire.ROUTED:
        raise FragmentError("a fragmented relayed frame must be a ROUTED frame")
    return f
