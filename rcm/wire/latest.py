"""The latest-wins traffic class on the wire: bounds, the entry type and the LATEST frame (``rcm.latest``).

Theory of operation
-------------------
One home for what a latest-wins report may be, checked wherever one enters:
the client library and the local socket (``rcm.wire.local``), the table
(``rcm.latest.table``) and a LATEST frame from a peer (``parse_frame``), which
decodes once into a frozen ``Entry``:

    LATEST [14, origin, hops, key, version, expires_at, payload]

``origin`` is a site index (the sorted sites), ``hops`` the relays crossed on
arrival (fewer than the mission's ``max_hops``), ``version`` a positive int
below 2^63 (newer wins), ``expires_at`` a float (seconds since the epoch),
``key`` 1 to ``MAX_KEY`` bytes and ``payload`` at most ``MAX_PAYLOAD``. A frame
out of these bounds is the sender's fault (``LatestError``); one that is late,
expired or from a clock ahead of ours is not (the table drops or clamps it).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rcm import wire

MAX_KEY = 64
"""Bytes of a key, at most."""
MAX_PAYLOAD = 1024
"""Bytes of a report's payload, at most."""
MAX_TTL = 3600.0
"""Seconds ahead a report may expire, at most (a local publish and a received entry are clamped to it)."""
MAX_PER_ORIGIN = 1000
"""Entries held per origin site; past it, that origin's least recently updated one is evicted."""
MAX_ENTRIES = 10_000
"""Entries held in all; past it, the least recently updated one is evicted."""
VERSION_MAX = 2 ** 63 - 1


class LatestError(ValueError):
    """A report or a LATEST frame out of bounds (for a frame from a peer: a protocol violation)."""


@dataclass(frozen=True, slots=True)
class Entry:
    """The newest report of ``key`` by site ``origin`` held here."""

    origin: str
    key: bytes
    version: int
    expires_at: float
    hops: int            # relays crossed to reach this site (0: own, or from its origin)
    payload: bytes


def check_report(key: Any, payload: Any, expires_at: Any) -> None:
    """``LatestError`` unless ``key``, ``payload`` and ``expires_at`` are within the bounds (one home for
    them: the client library, the local socket and the table all call this)."""
    if not isinstance(key, bytes) or not 1 <= len(key) <= MAX_KEY:
        raise LatestError(f"a latest-wins key must be 1 to {MAX_KEY} bytes")
    if not isinstance(payload, bytes) or len(payload) > MAX_PAYLOAD:
        raise LatestError(f"a latest-wins payload must be bytes, at most {MAX_PAYLOAD}")
    if type(expires_at) not in (float, int) or not math.isfinite(expires_at):
        raise LatestError("expires_at must be a finite number (seconds since the epoch)")


def encode_frame(e: Entry, index: dict[str, int], hops: int) -> list[Any]:
    """The LATEST frame carrying ``e`` with ``hops`` relays crossed when it arrives."""
    return [wire.LATEST, index[e.origin], hops, e.key, e.version, float(e.expires_at), e.payload]


def parse_frame(f: list[Any], site_at: Callable[[Any], str], max_hops: int) -> Entry:
    """A LATEST frame's entry; ``LatestError`` when its bytes are wrong (never for being late or expired)."""
    if len(f) != 7:
        raise LatestError(f"malformed LATEST frame: {len(f)} fields")
    _, origin, hops, key, version, expires_at, payload = f
    if type(hops) is not int or not 0 <= hops < max_hops:
        raise LatestError(f"malformed LATEST frame: hops {hops!r:.40} (at most {max_hops - 1} relays)")
    if type(version) is not int or not 1 <= version <= VERSION_MAX:
        raise LatestError(f"malformed LATEST frame: version {version!r:.40}")
    if type(expires_at) is not float:
        raise LatestError("malformed LATEST frame: expires_at is not a float")
    try:
        check_report(key, payload, expires_at)
        return Entry(site_at(origin), key, version, expires_at, hops, payload)
    except (LatestError, ValueError) as e:
        raise LatestError(f"malformed LATEST frame: {e}") from None
