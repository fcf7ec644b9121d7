"""RCM wire codec: length-prefixed msgpack frames between RCM servers.

Theory of operation
-------------------
A frame is an unsigned LEB128 varint length followed by that many bytes of
msgpack: an array whose first element is the frame type. The varint keeps the
prefix at one byte for the small frames that dominate the link (clock
announcements, acks, heartbeats); the inter-site links of the paper ran at
56 kbps, so every byte counts.

Reliable frames (DATA, CTRL, MISSED) carry no full sequence number: within one
TCP connection they are numbered implicitly from the ``start`` of the SYNC frame
that opens the sender's stream, and TCP keeps them in order. Each reliable frame
and each heartbeat carries a one-byte check (``link_seq mod 128``; for a
heartbeat, of the next reliable frame) so that an intermediary that loses bytes
inside a connection, which TCP itself never does, is detected and the
connection is closed and resumed from the frontier instead of silently
misnumbering frames. Message sequence
numbers and acknowledgements are delta-encoded against the previous value on
the same connection, so a steady stream costs one byte for each.

Frame layouts (``ack`` is an optional trailing delta-encoded cumulative ack):

    HELLO     [0, version, mission, site, stream, known_peer_stream, frontier, boot, dial, terms]
              terms: [ordering, p2p mode, [site, ...], routing, max_hops], which every site of a
              mission shares
    DATA      [1, check, msg_seq_delta, header, payload, ack?, fwd?]
              msg_seq_delta: non-zero, negative after an urgent message overtook older ones
              header: the ordering protocol's, or a wrapper {p?: precedence rank, x?: expires_at, e?: 1,
              r?: reach, h: it} when not ROUTINE, expiring or confined (rcm.wire.envelope); e: 1 marks a stub
              (the message expired before it was written: the payload is empty); r: the bitmask of the sites
              its content may reach (sent to a subset: its destinations and origin)
              fwd: [site, link_seq, ...] (indexes into the sorted sites): copies of this message
              the receiver relays on (ack is nil when fwd is present without an ack)
    CTRL      [2, check, body, ack?]          reliable control (ordering)
    ANNOUNCE  [3, generation, body, ack?]     best-effort control (clock announcements); generation
                                              (0-127) moves on at each path change: older ones are dropped
    HEARTBEAT [4, check, ack?]
    MISSED    [5, check, [[first, last], ...], ack?]  reliable: these msg_seq ranges (inclusive,
              sorted, disjoint) were addressed to you and never sent; several frames if they do not fit one
    BYE       [6, reason, incompatible?]      the sender is closing the connection (incompatible: 1
                                              when the peer should not dial again until dialed)
    SYNC      [7, start_link_seq, generation] the sender's reliable stream resumes at start (the next
                                              DATA's msg_seq delta counts from 0 again)
    ROUTED    [8, hops, origin, stream_check, [dest, value, ...], kind, body...]
              a frame of origin's channel to each dest, carried by relays (docs/relay.md)
    LINKS     [9, origin, boot, n, [neighbour, ...]]   link-state: origin's connected direct links
    SUMMARY   [11, check, [reply, [[origin, [[first, last], ...]], ...]], ack?]   reliable (repair,
              rcm.repair.frames): the messages the sender holds per origin (site index); reply 1 asks for ours
    FETCH     [12, check, [origin, [[first, last], ...]], ack?]   reliable: send me these messages
    REPAIR    [13, check, [origin, msg_seq, order_key, payload, rank?, expires_at?, 1?], ack?]   reliable: one
              retained message (rank when not routine or an expiry follows; a trailing 1: a stub, no payload)
              or, confined, [origin, msg_seq, order_key, payload, rank, expires_at|nil, 0|1, reach]
    LATEST    [14, origin, hops, key, version, expires_at, payload]   latest wins (rcm.latest): the newest
              report of (origin site index, key) held by the sender; not numbered, not acknowledged,
              no check byte (it is outside the reliable stream); hops: relays crossed on arrival;
              version: int, newer wins; expires_at: float seconds since the epoch; key at most 64
              bytes, payload at most 1024 (rcm.latest.table)
    FRAG      [15, lane, offset, chunk]                  a piece of a large reliable frame on a paced link
    FRAG      [15, lane, offset, chunk, check, ack?]    (rcm.channels.fragments): chunk is bytes ``offset``..
              of the frame's inner encoding ([DATA, msg_seq, header, payload] or [kind, body]); the last
              piece (with the check byte) completes it, and only then does the frame take its place in the
              reliable stream. At most one partial frame per lane; offset 0 starts a new one

``FrameDecoder`` is sans-IO: ``feed(bytes)`` returns the complete frames and
raises ``FrameError`` on an oversized length, a truncated varint, bad msgpack or
a frame that is not a non-empty array with an integer type.
"""
from __future__ import annotations

from typing import Any

import msgpack

PROTOCOL_VERSION = 14  # 2: HELLO carries the mission's terms; 3: MISSED carries ranges; 4: relaying;
#                        5: a header may be a precedence map (rcm.channels.lanes), which version 4 would refuse;
#                        6: repair's SUMMARY, FETCH and REPAIR frames (rcm.repair), which version 5 would refuse;
#                        7: a relayed ANNOUNCE names its sender's boot (one from before a restart is stale),
#                           and a REPAIR its precedence rank when not routine (version 6 would refuse both)
#                        8: a relayed ACK may report a GAP (frames a SYNC skipped), which version 7 would refuse
#                        9: LATEST frames (rcm.latest), an unknown frame type to version 8, which closes the link
#                       10: FRAG frames (rcm.channels.fragments), an unknown frame type to version 9
#                       11: a header wrapper may carry an expiry and a stub mark, a REPAIR its expiry and stub
#                           mark (rcm.wire.envelope), which version 10 would refuse
#                       12: confinement: a header wrapper may carry r (the sites a message's content may reach),
#                           a REPAIR the same mask (docs/relay.md, "Confinement"), which version 11 would refuse
#                       13: FRAG lanes 3-5 carry the pieces of relayed frames (rcm.channels.fragments), which
#                           version 12 would refuse
#                       14: a relayed ANNOUNCE carries each destination's generation in its entry ([dest,
#                           after, generation]; rcm.routing.relay), not in its body, and a relayed ACK may name
#                           a stream check in each entry ([dest, frontier, check]), which version 13 would refuse

HELLO, DATA, CTRL, ANNOUNCE, HEARTBEAT, MISSED, BYE, SYNC, ROUTED, LINKS = range(10)
ACK = 10    # only inside ROUTED: an acknowledgement of the destination's channel
SUMMARY, FETCH, REPAIR = 11, 12, 13     # repair (rcm.repair.antientropy): reliable frames of the channel
REPAIR_KINDS = frozenset({SUMMARY, FETCH, REPAIR})
LATEST = 14     # latest wins (rcm.latest): outside the reliable stream
FRAG = 15       # a piece of a large reliable frame on a paced link (rcm.channels.fragments)
FRAME_NAMES = {HELLO: "HELLO", DATA: "DATA", CTRL: "CTRL", ANNOUNCE: "ANNOUNCE",
               HEARTBEAT: "HEARTBEAT", MISSED: "MISSED", BYE: "BYE", SYNC: "SYNC", ROUTED: "ROUTED",
               LINKS: "LINKS", ACK: "ACK", SUMMARY: "SUMMARY", FETCH: "FETCH", REPAIR: "REPAIR",
               LATEST: "LATEST", FRAG: "FRAG"}
RELIABLE = frozenset({DATA, CTRL, MISSED, SUMMARY, FETCH, REPAIR})

# BYE reasons of routine closes, which the receiving site logs at INFO (any other reason at WARNING): the peer
# stopping gracefully, and the peer keeping one of two connections made at once (the tie-break of dials
# crossing, rcm.wire.handshake.keeps_new: the new one refused, or the old one replaced).
BYE_SHUTDOWN = "server shutting down"
BYE_DUPLICATE = "duplicate connection: keeping the other one"
BYE_REPLACED = "replaced by a newer connection"
ROUTINE_BYES = frozenset({BYE_SHUTDOWN, BYE_DUPLICATE, BYE_REPLACED})
CHECK_MOD = 128   # stream check byte: link_seq % 128 (a one-byte msgpack fixint)


class FrameError(Exception):
    """The byte stream is not a valid frame sequence; the connection must close."""


_packer = msgpack.Packer(use_bin_type=True)


def read_varint(buf: bytes | bytearray, pos: int, most: int) -> tuple[int, int] | None:
    """The unsigned LEB128 varint at ``buf[pos]``: (value, position after it); None while it is torn.
    ``ValueError`` if it runs past ``most`` bytes. (``FrameDecoder.feed`` reads its prefixes inline: its
    hot path.)"""
    value = shift = 0
    p = pos
    while True:
        if p >= len(buf):
            if p - pos >= most:
                raise ValueError(f"a varint longer than {most} bytes")
            return None
        b = buf[p]
        p += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, p
        shift += 7
        if p - pos >= most:
            raise ValueError(f"a varint longer than {most} bytes")


def encode_varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def encode_frame(frame: list[Any] | tuple[Any, ...]) -> bytes:
    """One frame: varint length + msgpack body."""
    body: bytes = _packer.pack(frame)
    n = len(body)
    if n < 0x80:
        return bytes((n,)) + body
    return encode_varint(n) + body


class FrameDecoder:
    """Incremental frame decoder with a size limit."""

    __slots__ = ("max_frame", "tag", "_buf")

    def __init__(self, max_frame: int = 1 << 20, tag: type = int) -> None:
        """``tag``: the type of a frame's first element (int between servers,
        str on the local client socket)."""
        self.max_frame = max_frame
        self.tag = tag
        self._buf = bytearray()

    def feed(self, data: bytes, most: int | None = None) -> list[list[Any]]:
        """Buffer ``data`` and return the complete frames (at most ``most``; the rest stay buffered).

        ``most=1`` lets the caller raise ``max_frame`` after a handshake frame
        before the frames behind it, in the same read, are measured against it.
        """
        buf = self._buf
        buf += data
        frames: list[list[Any]] = []
        pos = 0
        end = len(buf)
        max_frame = self.max_frame
        unpackb = msgpack.unpackb
        tag = self.tag
        while pos < end:
            # varint length
            length = 0
            shift = 0
            p = pos
            while True:
                if p >= end:
                    if p - pos >= 5:
                        raise FrameError("frame length prefix longer than 5 bytes")
                    del buf[:pos]
                    return frames
                b = buf[p]
                p += 1
                length |= (b & 0x7F) << shift
                if not b & 0x80:
                    break
                shift += 7
                if shift >= 35:
                    raise FrameError("frame length prefix longer than 5 bytes")
            if length > max_frame:
                raise FrameError(f"frame of {length} bytes exceeds the {max_frame}-byte limit")
            if length == 0:
                raise FrameError("empty frame")
            if p + length > end:
                break
            try:
                frame = unpackb(bytes(buf[p:p + length]), raw=False, use_list=True,
                                strict_map_key=True)
            except Exception as e:  # msgpack raises several types for bad input
                raise FrameError(f"undecodable frame: {type(e).__name__}: {e}") from None
            if not isinstance(frame, list) or not frame or type(frame[0]) is not tag:
                raise FrameError("frame is not an array starting with a frame type")
            frames.append(frame)
            pos = p + length
            if most is not None and len(frames) >= most:
                break
        del buf[:pos]
        return frames

    @property
    def buffered(self) -> int:
        return len(self._buf)
