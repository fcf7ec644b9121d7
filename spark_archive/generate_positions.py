"""Position reports of a synthetic mission (used by ``spark_archive.generate``).

Theory of operation
-------------------
Each site that writes a journal has a few units (``Extensions.positions`` of
them, named ``<site>-<k>`` in lower case) that report their position every 3 to
7 seconds for the whole mission. A unit loiters: it moves at a steady speed
(ground units 5 to 25 m/s without altitude, aircraft 120 to 220 m/s with one)
on a heading that turns at a steady rate, with a little noise, around a point
near its site's, so its track is a loop that wanders, as orbits and patrols
do.

Every report is journaled at its origin as it is accepted (a few milliseconds
after it was made) and at every other site it reaches (Contract 3, second
round), positions being their own traffic class with the newest report of a
unit first (DESIGN.md): while the link from the origin is down, the reports
made in the outage wait and supersede one another, so only the last of them is
sent, when the link comes back; the others are journaled nowhere else (a
superseded report that never arrived is not journaled). Over a link that is up
a report takes the network delay chat messages take. A site that never
connects (isolated) journals only its own units' reports and none of the
others'; an empty site journals nothing.

Every draw comes from the ``numpy`` generator the caller passes, a stream of
its own, so a seed gives the same chat messages, outages and losses with or
without positions. Lines are the journal schema's, filled from %-formats made
from it (``contracts.journal.line_format``), as the generator's other lines.
"""
from __future__ import annotations

import numpy as np

from contracts import journal as J
from spark_archive.generate_files import seconds_texts
from spark_archive.generate_network import MissionPlan, link_pair

# A line is the receiving site and time, then the report's fields, formatted once per report.
_LINE = J.line_format(J.POSITION, "site", "at", ("origin", "unit", "lat", "lon", "alt", "sent_at")) % (
    '"%s"', "%s", "%s")
_REPORT = J.fragment_format(J.POSITION, "origin", "unit", "lat", "lon", "sent_at") % (
    '"%s"', '"%s"', "%s", "%s", "%s")
_REPORT_ALT = J.fragment_format(J.POSITION, "origin", "unit", "lat", "lon", "alt", "sent_at") % (
    '"%s"', '"%s"', "%s", "%s", "%s", "%s")
METRES_PER_DEGREE = 111_320.0
INTERVAL = (3.0, 7.0)          # seconds between two reports of a unit
BASE = (50.0, 10.0)            # (lat, lon) around which the sites lie


def _report_times(prng: np.random.Generator, start: float, end: float) -> np.ndarray:
    """A unit's report times: from a few seconds in, every 3 to 7 seconds, until the end."""
    count = int((end - start) / INTERVAL[0]) + 2
    times = start + prng.uniform(2.0, 12.0) + np.cumsum(prng.uniform(*INTERVAL, count))
    return times[times < end - 2.0]


def _track(prng: np.random.Generator, times: np.ndarray, home: tuple[float, float]
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Latitudes, longitudes and (aircraft only, else None) altitudes of a loitering unit at ``times``."""
    airborne = prng.random() < 0.5
    speed = prng.uniform(120.0, 220.0) if airborne else prng.uniform(5.0, 25.0)
    turn = prng.uniform(0.002, 0.02) * prng.choice([-1.0, 1.0])    # rad/s
    dt = np.diff(times, prepend=times[0])
    heading = prng.uniform(0, 2 * np.pi) + turn * (times - times[0]) + np.cumsum(prng.normal(0, 0.05, len(times)))
    lat0 = home[0] + prng.uniform(-0.3, 0.3)
    lon0 = home[1] + prng.uniform(-0.3, 0.3)
    lat = lat0 + np.cumsum(speed * dt * np.cos(heading)) / METRES_PER_DEGREE
    lon = lon0 + np.cumsum(speed * dt * np.sin(heading)) / (METRES_PER_DEGREE * np.cos(np.radians(lat)))
    alt = prng.uniform(6000.0, 10000.0) + 150.0 * np.sin(times / 300.0) if airborne else None
    return np.round(lat, 6), np.round(lon, 6), None if alt is None else np.round(alt, 1)


def _arrivals(prng: np.random.Generator, mission: MissionPlan, o: int, d: int, times: np.ndarray) -> np.ndarray:
    """When each report of origin ``o`` is journaled at site ``d`` (NaN: superseded, never sent there)."""
    arrive = times + prng.lognormal(np.log(0.12), 0.6, len(times)) + prng.uniform(0.05, 0.25, len(times))
    spans = mission.outages[link_pair(o, d)]
    if not spans:
        return arrive
    starts = np.array([s.start for s in spans])
    ends = np.array([s.end for s in spans])
    span = np.searchsorted(starts, times, side="right") - 1
    inside = (span >= 0) & (times < ends[np.maximum(span, 0)])
    # The last report made in each outage is sent when the link is back; the others were superseded.
    followed = np.append(inside[1:] & (span[1:] == span[:-1]), False)    # the next report is in the same outage
    last = inside & ~followed
    arrive = np.where(inside, np.nan, arrive)
    sent = np.nonzero(last)[0]
    arrive[sent] = ends[span[sent]] + prng.uniform(0.2, 3.0, len(sent))
    return arrive


def position_records(prng: np.random.Generator, mission: MissionPlan, units: int,
                     records: list[list[tuple[float, str]]]) -> dict[str, int]:
    """Append each site's position lines to ``records`` (``(at, line)`` per site); return what was
    written: ``units``, distinct ``position_reports`` and ``position_lines``."""
    names = mission.sites
    count = {"units": 0, "position_reports": 0, "position_lines": 0}
    never = mission.isolated | mission.empty
    for o, origin in enumerate(names):
        if o in mission.empty:
            continue
        home = (BASE[0] + prng.uniform(-2.0, 2.0), BASE[1] + prng.uniform(-3.0, 3.0))
        for k in range(units):
            times = _report_times(prng, mission.start, mission.end)
            lat, lon, alt = _track(prng, times, home)
            text = J.value_text
            sent = seconds_texts(times)
            unit = f"{origin.lower()}-{k + 1}"
            if alt is None:
                reports = [_REPORT % (origin, unit, text(a), text(b), t)
                           for a, b, t in zip(lat.tolist(), lon.tolist(), sent)]
            else:
                reports = [_REPORT_ALT % (origin, unit, text(a), text(b), text(c), t)
                           for a, b, c, t in zip(lat.tolist(), lon.tolist(), alt.tolist(), sent)]
            count["units"] += 1
            count["position_reports"] += len(times)
            for d, site in enumerate(names):
                if d == o:
                    at = times + prng.uniform(0.001, 0.05, len(times))
                elif d in mission.empty or {o, d} & never:
                    continue
                else:
                    at = _arrivals(prng, mission, o, d, times)
                got = np.nonzero(~np.isnan(at))[0]
                ats = at[got].tolist()
                records[d].extend(zip(ats, [_LINE % (site, w, reports[i])
                                            for i, w in zip(got.tolist(), seconds_texts(ats))]))
                count["position_lines"] += len(got)
    return count
