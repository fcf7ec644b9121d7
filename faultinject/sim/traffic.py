"""What the simulated links carry, by kind of RCM frame (a tap on ``Network.write``).

Theory of operation
-------------------
``Tally`` is called with every write a site makes on a connection (``Network``'s
``tap``), before the network splits or delays it. Each direction of each
connection has its own buffer, so a frame cut across two writes is still
counted once; frames are split off by their varint length (``rcm.wire``) and
classified by their type, and a ``ROUTED`` frame by the kind it carries:

=============  ===============================================================
``heartbeat``  HEARTBEAT
``linkstate``  LINKS (link-state adverts: changes, floods, database exchanges, refreshes)
``data``       DATA, and ROUTED DATA (messages, relayed or not)
``ordering``   ANNOUNCE, CTRL and their ROUTED forms (clock announcements, sequencer assignments)
``ack``        ROUTED ACK (a relayed channel's acknowledgements; direct ones ride on other frames)
``handshake``  HELLO, SYNC, BYE and ROUTED SYNC
``repair``     MISSED, SUMMARY, FETCH, REPAIR and their ROUTED forms
``latest``     LATEST (latest-wins reports)
``other``      any other frame type; ``unparsed``: bytes of a stream that stopped parsing
=============  ===============================================================

Counting happens only while ``active`` (the measured window); parsing always
does, so a window may open in the middle of a stream. ``by_site[s][kind]`` is
the bytes site ``s`` wrote (frames it originated and frames it relayed alike):
a site's cost on its own links.
"""
from __future__ import annotations

from collections import Counter
from typing import Any

import msgpack

from rcm import wire
from rcm.wire import read_varint

KINDS = ("heartbeat", "linkstate", "data", "ordering", "ack", "handshake", "repair", "latest", "other", "unparsed")
CONTROL_KINDS = tuple(k for k in KINDS if k != "data")
"""Every kind but messages: what a site pays whatever its users say (and the ordering's announcements)."""

_BY_TYPE = {wire.HEARTBEAT: "heartbeat", wire.LINKS: "linkstate", wire.DATA: "data", wire.ANNOUNCE: "ordering",
            wire.CTRL: "ordering", wire.ACK: "ack", wire.HELLO: "handshake", wire.SYNC: "handshake",
            wire.BYE: "handshake", wire.MISSED: "repair", wire.SUMMARY: "repair", wire.FETCH: "repair",
            wire.REPAIR: "repair", wire.LATEST: "latest"}
_ROUTED_KIND = 5        # ROUTED [8, hops, origin, stream_check, [dest, value, ...], kind, body...]


def classify(frame: list[Any]) -> str:
    """The kind of one decoded frame (see the module docstring)."""
    t = frame[0]
    if t == wire.ROUTED and len(frame) > _ROUTED_KIND:
        t = frame[_ROUTED_KIND]
    return _BY_TYPE.get(t, "other") if type(t) is int else "other"


class Tally:
    """Bytes written per site and kind of frame (see the module docstring)."""

    def __init__(self) -> None:
        self.active = False
        self.by_site: dict[str, Counter[str]] = {}
        self.frames: Counter[str] = Counter()
        self._bufs: dict[tuple[int, str], bytearray] = {}
        self._broken: set[tuple[int, str]] = set()

    def __call__(self, site: str, conn: int, data: bytes) -> None:
        key = (conn, site)
        counts = self.by_site.setdefault(site, Counter())
        if key in self._broken:
            if self.active:
                counts["unparsed"] += len(data)
            return
        buf = self._bufs.setdefault(key, bytearray())
        buf += data
        pos = 0
        while True:
            size = _frame_size(buf, pos)
            if size is None:
                break
            if size < 0:
                self._broken.add(key)
                if self.active:
                    counts["unparsed"] += len(buf) - pos
                pos = len(buf)
                break
            head = _header_len(buf, pos)
            try:
                frame = msgpack.unpackb(bytes(buf[pos + head:pos + size]), raw=False, strict_map_key=False)
                kind = classify(frame) if isinstance(frame, list) and frame else "other"
            except Exception:     # msgpack raises several types; a tap never stops the run
                kind = "other"
            if self.active:
                counts[kind] += size
                self.frames[kind] += 1
            pos += size
        del buf[:pos]

    def forget(self, conn: int) -> None:
        """A connection is gone: its buffers may go too."""
        for key in [k for k in self._bufs if k[0] == conn]:
            del self._bufs[key]

    def count(self, site: str, kind: str) -> int:
        """Bytes of ``kind`` that ``site`` wrote while active."""
        c = self.by_site.get(site)
        return c[kind] if c is not None else 0

    def site_total(self, site: str, kinds: tuple[str, ...] = KINDS) -> int:
        return sum(self.count(site, k) for k in kinds)


def _header_len(buf: bytearray, pos: int) -> int:
    n = 0
    while buf[pos + n] & 0x80:
        n += 1
    return n + 1


def _frame_size(buf: bytearray, pos: int) -> int | None:
    """Bytes of the frame at ``pos`` with its length prefix; None: incomplete; -1: not a frame stream."""
    try:
        got = read_varint(buf, pos, 5)
    except ValueError:
        return -1
    if got is None:
        return None
    length, p = got
    if length == 0:
        return -1
    if p + length > len(buf):
        return None
    return p + length - pos


__all__ = ["CONTROL_KINDS", "KINDS", "Tally", "classify"]
