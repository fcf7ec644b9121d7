"""Position lines of three sites with known tracks and ages: the Spark tests add them to the journals they
archive already (test_archive_extensions.py), the fast tests read them with the reference (test_archive_tracks.py).

Unit a1 (A's, with an altitude) reports at 100 and 105, unit b1 (B's, without) at 101 and 103. A journals its own
reports, one of them twice (a replay after a restart), and b1's first; B journals b1's and a1's first; C journals
a1's two (the second 3 s old, just after an outage). A line out of bounds and a line without its unit are bad.
"""
from __future__ import annotations

import json
from typing import Any


def position(site: str, at: float, origin: str, unit: str | None, lat: float, lon: float, sent_at: float,
             alt: float | None = None) -> str:
    fields: dict[str, Any] = {"kind": "position", "site": site, "at": at, "origin": origin}
    if unit is not None:
        fields["unit"] = unit
    fields.update(lat=lat, lon=lon)
    if alt is not None:
        fields["alt"] = alt
    fields["sent_at"] = sent_at
    return json.dumps(fields, separators=(",", ":"))


POSITION_LINES = {
    "A": [
        position("A", 100.01, "A", "a1", 10.0, 20.0, 100.0, alt=500.0),
        position("A", 101.5, "B", "b1", -5.0, 30.0, 101.0),
        position("A", 105.01, "A", "a1", 10.1, 20.1, 105.0, alt=510.0),
        position("A", 105.01, "A", "a1", 10.1, 20.1, 105.0, alt=510.0),        # replayed after a restart
        position("A", 106.0, "B", "b1", 95.0, 30.0, 106.0),                    # latitude out of bounds: bad
    ],
    "B": [
        position("B", 100.3, "A", "a1", 10.0, 20.0, 100.0, alt=500.0),
        position("B", 101.01, "B", "b1", -5.0, 30.0, 101.0),
        position("B", 103.0, "B", "b1", -5.1, 30.2, 103.0),
        position("B", 104.0, "B", None, -5.1, 30.2, 104.0),                    # no unit: bad
    ],
    "C": [
        position("C", 100.2, "A", "a1", 10.0, 20.0, 100.0, alt=500.0),
        position("C", 108.0, "A", "a1", 10.1, 20.1, 105.0, alt=510.0),
    ],
}
BAD_POSITION_LINES = 2

# unit, point, sent_at, origin, lat, lon, alt, first_site, first_at, sites
TRACKS = [
    ("a1", 0, 100.0, "A", 10.0, 20.0, 500.0, "A", 100.01, 3),
    ("a1", 1, 105.0, "A", 10.1, 20.1, 510.0, "A", 105.01, 2),
    ("b1", 0, 101.0, "B", -5.0, 30.0, None, "B", 101.01, 2),     # B journaled it before A did
    ("b1", 1, 103.0, "B", -5.1, 30.2, None, "B", 103.0, 1),
]

# site: lines, reports, remote, units, units_unseen, units_behind, behind_max, age p50, p95, max, mean
POSITION_AGE = {
    "A": (4, 3, 1, 2, 0, 1, 2.0, 0.5, 0.5, 0.5, 0.5),            # b1's newest here is 101, 103 at B
    "B": (3, 3, 1, 2, 0, 1, 5.0, 0.3, 0.3, 0.3, 0.3),            # a1's newest here is 100, 105 at A
    "C": (2, 2, 2, 1, 1, 0, 0.0, 0.2, 3.0, 3.0, 1.6),            # never got b1
}
