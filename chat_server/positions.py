"""Position reports: what the chat server knows of units' positions, and how they travel (sans-IO).

Theory of operation
-------------------
A unit (a person, a vehicle, a TAK device: named by its callsign, ``UNIT_NAME``)
reports where it is: a client's ``position`` frame (WebSocket, IRC has none, the
TAK front end's PLI events become them). Only the newest report of a unit
matters, so reports do not travel as chat messages (numbered, ordered, resent,
repaired): they ride RCM's *latest wins* class (docs/rcm.md, "Latest wins"),
keyed by the unit's name. RCM keeps, per (origin site, key), the newest value
and writes only that one to a link when the link can take it: a report
superseded while it waited for a slow or broken link is never sent, and a site
that comes back is brought up to date with the newest report of each unit only.
Reports expire (``expires_at``, ``[chat] position_max_age`` after they were
accepted) and are then forgotten everywhere.

On the RCM payload a report is small (msgpack array, no names: the key is the
unit, the origin is RCM's, the expiry is RCM's): ``[user, lat, lon, at, alt,
course, speed]``, latitude and longitude in 1e-7 degrees (centimetres), altitude
in decimetres, course in tenths of a degree, speed in cm/s, absent ones nil.
About 35 bytes.

``PositionTable`` holds the newest report of each (site, unit) this chat server
has been given, with RCM's version so that a replay (RCM sends every live
entry again when the chat server reconnects) is recognised and neither shown
nor journaled twice in one run. Clients that asked ``positions {}`` get the
table, then every newer report (``Sessions.to_position_readers``).
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgpack

from contracts.mission import SITE_NAME

from .protocol import POSITION_BOUNDS, UNIT_NAME, USER_NAME

MAX_ENTRIES = 10_000            # (site, unit) pairs kept; RCM keeps no more than this either
_E7 = 10_000_000


class PositionError(ValueError):
    """A report payload from another site that no site could show (logged and dropped)."""


@dataclass(frozen=True, slots=True)
class Report:
    """One unit's position as reported at ``site`` by ``user`` (None: not said)."""

    site: str
    unit: str
    user: str | None
    lat: float
    lon: float
    at: float
    expires_at: float
    alt: float | None = None
    course: float | None = None
    speed: float | None = None

    def frame(self) -> dict[str, Any]:
        """The chat protocol's ``position`` frame (contract 2) for this report."""
        f: dict[str, Any] = {"type": "position", "site": self.site, "unit": self.unit}
        if self.user is not None:
            f["user"] = self.user
        f["lat"], f["lon"] = self.lat, self.lon
        for name in ("alt", "course", "speed"):
            v = getattr(self, name)
            if v is not None:
                f[name] = v
        f["at"], f["expires_at"] = self.at, self.expires_at
        return f


def from_request(site: str, user: str, fields: Mapping[str, Any], now: float, max_age: float) -> Report:
    """A local user's report from a parsed ``position`` frame (protocol.py checked its values): it lives the
    frame's ``expires_in`` (a TAK client's stale time) but never longer than ``max_age``."""
    life = min(max_age, float(fields.get("expires_in", max_age)))
    return Report(site=site, unit=fields.get("unit", user), user=user, lat=float(fields["lat"]),
                  lon=float(fields["lon"]), at=float(fields.get("at", now)), expires_at=now + life,
                  alt=_opt(fields.get("alt")), course=_opt(fields.get("course")), speed=_opt(fields.get("speed")))


def _opt(v: Any) -> float | None:
    return None if v is None else float(v)


def key(unit: str) -> bytes:
    """The RCM latest-wins key of a unit's reports."""
    return unit.encode("utf-8")


def encode(r: Report) -> bytes:
    """The RCM payload of a report (the unit is the key, the site and expiry are RCM's)."""
    return bytes(msgpack.packb([r.user, round(r.lat * _E7), round(r.lon * _E7), r.at,
                          None if r.alt is None else round(r.alt * 10),
                          None if r.course is None else round(r.course * 10),
                          None if r.speed is None else round(r.speed * 100)]))


def decode(origin: str, key_bytes: bytes, payload: bytes, expires_at: float) -> Report:
    """A report from RCM's latest-wins entry; ``PositionError`` for one no site could have sent."""
    try:
        unit = bytes(key_bytes).decode("utf-8")
        v = msgpack.unpackb(payload, raw=False, strict_map_key=True)
    except (ValueError, TypeError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as e:
        raise PositionError(f"undecodable position report: {e}") from None
    if not SITE_NAME.match(origin) or not UNIT_NAME.match(unit):
        raise PositionError(f"bad site or unit name in a position report: {origin[:40]!r} {unit[:40]!r}")
    if not isinstance(v, list) or len(v) != 7:
        raise PositionError("a position report must be a list of 7 values")
    user, lat, lon, at, alt, course, speed = v
    if user is not None and not (isinstance(user, str) and USER_NAME.match(user)):
        raise PositionError("bad user in a position report")
    for name, x, limit in (("lat", lat, 90 * _E7), ("lon", lon, 180 * _E7)):
        if not _int(x) or abs(x) > limit:
            raise PositionError(f"bad {name} in a position report")
    if not isinstance(at, (int, float)) or isinstance(at, bool) or not math.isfinite(at) or not 0 < at < 1e11:
        raise PositionError("bad time in a position report")
    for name, x, bound in (("alt", alt, 10 * POSITION_BOUNDS["alt"]), ("course", course, 3600),
                             ("speed", speed, 100 * POSITION_BOUNDS["speed"])):
        if x is not None and (not _int(x) or abs(x) > bound):
            raise PositionError(f"bad {name} in a position report")
    if not (isinstance(expires_at, (int, float)) and math.isfinite(expires_at)):
        raise PositionError("bad expiry of a position report")
    return Report(site=origin, unit=unit, user=user, lat=lat / _E7, lon=lon / _E7, at=float(at),
                  expires_at=float(expires_at), alt=None if alt is None else alt / 10,
                  course=None if course is None else course / 10, speed=None if speed is None else speed / 100)


def _int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


class PositionTable:
    """The newest report of each (site, unit) with its RCM version (see the module docstring)."""

    def __init__(self, most: int = MAX_ENTRIES) -> None:
        self.most = most
        self._entries: dict[tuple[str, str], tuple[int, Report]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def apply(self, report: Report, version: int, now: float) -> bool:
        """Keep ``report`` if it is newer than what is held for its unit and alive; True when kept."""
        k = (report.site, report.unit)
        held = self._entries.get(k)
        if report.expires_at <= now or (held is not None and held[0] >= version):
            return False
        if held is None and len(self._entries) >= self.most:
            self.expire(now)
            if len(self._entries) >= self.most:     # the oldest report goes (RCM evicts the same way)
                oldest = min(self._entries, key=lambda e: self._entries[e][0])
                del self._entries[oldest]
        self._entries[k] = (version, report)
        return True

    def expire(self, now: float) -> list[Report]:
        """Forget the reports that expired by ``now``; return them."""
        gone = [r for _, r in self._entries.values() if r.expires_at <= now]
        for r in gone:
            del self._entries[(r.site, r.unit)]
        return gone

    def live(self, now: float) -> list[Report]:
        """Every report alive at ``now``, by site and unit."""
        self.expire(now)
        return [r for _, (_, r) in sorted(self._entries.items())]
