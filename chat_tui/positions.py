"""Units' positions as the client knows them: the newest report of each unit (sans-IO, a ``ChatState`` mixin).

Theory of operation
-------------------
The chat server sends ``positions {units: [...]}`` in answer to ``positions {}``
(the link asks at every connection) and then a ``position`` frame whenever a
unit's newest report changes (contract 2, second round). Each report is
decoded once (``decode_position``) into a frozen ``Position`` with explicit
bounds: latitude -90..90, longitude -180..180, finite times, names of at most
``MAX_NAME`` characters. A report that fails is not kept, and is counted
(``PositionBook.refused``) so the list can say some were ignored; the others
of the same ``positions`` listing are kept.

``PositionBook`` is the table: one ``Position`` per (site, unit), replaced only
by a report with a newer ``at`` (the same report again, or an older one that
overtook it on the way, changes nothing), gone once ``expires_at`` has passed.
A ``positions`` listing is merged the same way, report by report: the reply to
``positions {}`` and the ``position`` events after it travel different paths
in the link, so either may be handed over first, and the newer report must win
whichever came first. Units a listing does not name are left to expire. The
table holds at most ``MAX_UNITS`` units (the oldest report goes first). The
time is always passed in; the age of a report (``now - at``) is derived when
the list is drawn (``rows``), never stored.

``PositionState`` (the mixin) turns frames into the book and returns
``Panel("positions")`` when the list changed; ``report_position`` builds the
``position`` request of ``/pos``; ``positions_failed`` handles the errors of
both requests (a server without positions answers ``positions {}`` with an
error: the list then says positions are not available, nothing else).
``parse_report`` checks what the operator typed after ``/pos`` (the parser in
commands.py calls it), with the same bounds.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from chat_server.protocol import POSITION_BOUNDS, UNIT_NAME
from contracts.text import duration

from .model import Change, Panel, Request
from .safe_text import printable
from .words import error_reason

MAX_UNITS = 5000               # units kept; past it the oldest report is dropped
MAX_NAME = 128                 # characters of a unit, site or user name in a report
LAT_RANGE = (-POSITION_BOUNDS["lat"], POSITION_BOUNDS["lat"])      # the protocol's bounds: -90..90
LON_RANGE = (-POSITION_BOUNDS["lon"], POSITION_BOUNDS["lon"])      # and -180..180


class BadPosition(ValueError):
    """A position report that cannot be kept (the message names the field)."""


@dataclass(frozen=True, slots=True)
class Position:
    """The newest report of one unit, as the server sent it (decoded, bounded)."""

    site: str
    unit: str
    user: str | None
    lat: float
    lon: float
    at: float                      # Unix seconds: when the unit was there
    expires_at: float              # Unix seconds: the report is gone after this
    alt: float | None = None
    course: float | None = None
    speed: float | None = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.site, self.unit)

    def age(self, now: float) -> float:
        """Seconds since the report (0 when its clock runs ahead of ours)."""
        return max(0.0, now - self.at)


@dataclass(frozen=True, slots=True)
class PositionRow:
    """One line of the positions list, as both clients show it (texts made printable)."""

    unit: str
    site: str
    user: str                      # "" when the report names no user (a TAK unit)
    lat: str
    lon: str
    age: str                       # "12 s", "3 min"
    position: Position


@dataclass(frozen=True, slots=True)
class PositionReport:
    """What ``/pos LAT LON [UNIT]`` reports (``unit`` None: the user)."""

    lat: float
    lon: float
    unit: str | None = None


def _number(f: Mapping[str, Any], name: str, bounds: tuple[float, float] | None = None, *,
            required: bool = True) -> float | None:
    value = f.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        raise BadPosition(f"{name} must be a finite number, got {printable(repr(value)[:40])}")
    if bounds is not None and not bounds[0] <= value <= bounds[1]:
        raise BadPosition(f"{name} {value} is outside {bounds[0]:g}..{bounds[1]:g}")
    return float(value)


def _name(f: Mapping[str, Any], name: str, *, required: bool = True) -> str | None:
    value = f.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value or len(value) > MAX_NAME:
        raise BadPosition(f"{name} must be a name of 1 to {MAX_NAME} characters, got {printable(repr(value)[:40])}")
    return value


def decode_position(f: Mapping[str, Any]) -> Position:
    """A ``position`` frame (or an entry of ``positions {units}``) as a ``Position``; BadPosition says why not."""
    if not isinstance(f, Mapping):
        raise BadPosition("a position must be an object")
    site, unit = _name(f, "site"), _name(f, "unit")
    lat, lon = _number(f, "lat", LAT_RANGE), _number(f, "lon", LON_RANGE)
    at, expires_at = _number(f, "at"), _number(f, "expires_at")
    assert site is not None and unit is not None and lat is not None and lon is not None
    assert at is not None and expires_at is not None
    return Position(site, unit, _name(f, "user", required=False), lat, lon, at, expires_at,
                    _number(f, "alt", required=False), _number(f, "course", required=False),
                    _number(f, "speed", required=False))


def _degrees(word: str, what: str, bounds: tuple[float, float]) -> float:
    try:
        value = float(word)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or not bounds[0] <= value <= bounds[1]:
        raise ValueError(f"bad {what} {printable(word[:40])!r}: a number of degrees from "
                         f"{bounds[0]:g} to {bounds[1]:g}")
    return value


def parse_report(text: str) -> PositionReport:
    """``LAT LON [UNIT]`` as typed after ``/pos`` (decimal degrees; a callsign may hold inner spaces, as the
    server's ``UNIT_NAME`` allows); ValueError names the problem."""
    words = text.split(None, 2)
    if len(words) < 2:
        raise ValueError("/pos takes LAT LON [UNIT] in decimal degrees, e.g. /pos 51.5007 -0.1246 Viper 2")
    lat = _degrees(words[0], "latitude", LAT_RANGE)
    lon = _degrees(words[1], "longitude", LON_RANGE)
    unit = words[2].strip() if len(words) == 3 else None
    if unit is not None and not UNIT_NAME.match(unit):
        raise ValueError(f"bad unit {printable(unit[:40])!r}: a callsign of letters, digits, inner spaces and "
                         "_.#:+- (at most 32)")
    return PositionReport(lat, lon, unit)


def age_text(seconds: float) -> str:
    """How old a report is: ``0 s``, ``12 s``, ``3 min``, ``1.5 h`` (contracts.text.duration, whole seconds
    below 2 min)."""
    return "0 s" if seconds < 1 else duration(seconds)


def coordinate(value: float) -> str:
    """Degrees as shown: five decimals (about a metre)."""
    return f"{value:.5f}"


class PositionBook:
    """The newest report per (site, unit); expiry and ages against the ``now`` passed in."""

    def __init__(self, max_units: int = MAX_UNITS) -> None:
        self.units: dict[tuple[str, str], Position] = {}
        self.max_units = max_units
        self.refused = 0               # reports from the server that did not decode (not kept)

    def arrive(self, p: Position, now: float) -> bool:
        """Keep a report if it is the unit's newest and not expired; whether the table changed."""
        if p.expires_at <= now:
            return False
        old = self.units.get(p.key)
        if old is not None and old.at >= p.at:
            return False
        self.units[p.key] = p
        if len(self.units) > self.max_units:
            oldest = min(self.units.values(), key=lambda x: x.at)
            del self.units[oldest.key]
        return True

    def merge(self, reports: Iterable[Position], now: float) -> bool:
        """A listing: each report as if it arrived alone; whether the table changed."""
        changed = False
        for p in reports:
            changed = self.arrive(p, now) or changed
        return changed

    def expire(self, now: float) -> bool:
        """Drop the reports past their ``expires_at``; whether any went."""
        gone = [k for k, p in self.units.items() if p.expires_at <= now]
        for k in gone:
            del self.units[k]
        return bool(gone)

    def rows(self, now: float) -> list[PositionRow]:
        """The list as shown: by unit (then site), without reports expired by ``now``."""
        live = sorted((p for p in self.units.values() if p.expires_at > now),
                      key=lambda p: (p.unit.casefold(), p.unit, p.site))
        return [PositionRow(printable(p.unit), printable(p.site), printable(p.user or ""), coordinate(p.lat),
                            coordinate(p.lon), age_text(p.age(now)), p) for p in live]


class PositionState:
    """``ChatState``'s part for positions: frames in, ``Panel("positions")`` out."""

    if TYPE_CHECKING:
        def notice(self, text: str, level: str = "info", room: str | None = None,
                   scope: str = "") -> list[Change]: ...

    def __init__(self) -> None:
        self.positions = PositionBook()
        self.positions_unavailable: str | None = None   # why the server refused ``positions {}``

    def _on_position(self, f: dict[str, Any], now: float) -> list[Change]:
        try:
            p = decode_position(f)
        except BadPosition:
            self.positions.refused += 1
            return [Panel("positions")]
        return [Panel("positions")] if self.positions.arrive(p, now) else []

    def _on_positions(self, f: dict[str, Any], now: float) -> list[Change]:
        self.positions_unavailable = None
        units = f.get("units")
        if not isinstance(units, list):
            self.positions.refused += 1
            return [Panel("positions")]
        good: list[Position] = []
        for u in units:
            try:
                good.append(decode_position(u))
            except BadPosition:
                self.positions.refused += 1
        self.positions.merge(good, now)
        return [Panel("positions")]           # (also when nothing changed: the list is known now)

    def expire_positions(self, now: float) -> list[Change]:
        """Drop expired reports (the front ends call it on their timer)."""
        return [Panel("positions")] if self.positions.expire(now) else []

    def report_position(self, report: PositionReport, now: float) -> list[Change]:
        """``/pos``: the ``position`` request, and a line saying what goes out."""
        frame: dict[str, Any] = {"type": "position", "lat": report.lat, "lon": report.lon, "at": now,
                                 "purpose": {"kind": "position"}}
        if report.unit is not None:
            frame["unit"] = report.unit
        who = f" as {printable(report.unit)}" if report.unit is not None else ""
        return [Request(frame), *self.notice(f"reporting position {coordinate(report.lat)} "
                                             f"{coordinate(report.lon)}{who}")]

    def positions_failed(self, purpose: Mapping[str, Any], f: dict[str, Any]) -> list[Change] | None:
        """An error answering ``positions {}`` or ``position``; None: not one of ours."""
        kind = purpose.get("kind")
        if kind == "positions":
            self.positions_unavailable = error_reason(f)
            return [Panel("positions")]
        if kind == "position":
            return self.notice(f"position not reported: {error_reason(f)}", "error")
        return None


def positions_request() -> dict[str, Any]:
    """What the link asks at every connection (the server then sends ``position`` events to this session)."""
    return {"type": "positions", "purpose": {"kind": "positions"}}
