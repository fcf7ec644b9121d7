"""The Spark plan's per-file table, per-site record counts and mission bounds, summed from the one pass's scan rows.

Theory of operation
-------------------
The one pass (``onepass.py``) gathers, per (file, validity, site, kind), a
line count and the ``at`` bounds (``onepass._scan_rows`` names each file by its
path). ``scan_tables`` sums them on the driver into the ``files`` table (every
listed journal file, empty ones included), each site's record counts per kind
(``<kind>_records``, the kinds of ``schema.KINDS``) and the mission's first and
last ``at``. Pure Python: no Spark here.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from . import schema
from .journals import JournalFile

_Rows = list[dict[str, Any]]


def scan_tables(files: Sequence[JournalFile], scan: _Rows) -> tuple[_Rows, _Rows, tuple[float | None, float | None]]:
    """Per-file table, per-site record counts and mission bounds from the scan aggregate."""
    stats: dict[str, dict[str, Any]] = {f.path: {"file": f.path, "path_site": f.path_site, "bytes": f.size,
                                                 "lines": 0, "records": 0, "bad_lines": 0, "sites": set(),
                                                 "first_at": None, "last_at": None} for f in files}
    per_site: dict[str, dict[str, Any]] = {}
    first = last = None
    for r in scan:
        path = r["file"]
        entry = stats.get(path) or stats.setdefault(path, {
            "file": path, "path_site": None, "bytes": None, "lines": 0, "records": 0, "bad_lines": 0, "sites": set(),
            "first_at": None, "last_at": None})
        entry["lines"] += r["count"]
        if not r["valid"]:
            entry["bad_lines"] += r["count"]
            continue
        entry["records"] += r["count"]
        entry["sites"].add(r["site"])
        for key, pick in (("first_at", min), ("last_at", max)):
            entry[key] = r[key] if entry[key] is None else pick(entry[key], r[key])
        counts = per_site.setdefault(r["site"], {"site": r["site"], "records": 0,
                                                 **{f"{k}_records": 0 for k in schema.KINDS}})
        counts["records"] += r["count"]
        counts[f"{r['kind']}_records"] += r["count"]
        first = r["first_at"] if first is None else min(first, r["first_at"])
        last = r["last_at"] if last is None else max(last, r["last_at"])
    table = []
    for path in sorted(stats):
        entry = stats[path]
        entry["sites"] = sorted(entry["sites"])
        table.append(entry)
    return table, sorted(per_site.values(), key=lambda r: r["site"]), (first, last)
