"""Load real journals (Contract 3) into checker records.

A chat server appends to ``data_dir/<site>/journal/*.jsonl``; a crash may leave
a torn last line, which every reader tolerates. Files are read in name order
(the chat server names them so that name order is time order); records keep
their file order, which is the site's delivery order.
"""
from __future__ import annotations

import json
from pathlib import Path

KINDS = ("send", "deliver", "status", "missing", "start", "crash")


def read_jsonl(path: Path) -> tuple[list[dict], int]:
    """Records of one file and how many lines were unreadable (torn or foreign)."""
    records: list[dict] = []
    bad = 0
    with open(path, "rb") as f:
        for raw in f:
            line = raw.strip()
            if not line:
                continue
            try:
                r = json.loads(line)
            except (UnicodeDecodeError, json.JSONDecodeError):
                bad += 1
                continue
            if isinstance(r, dict) and r.get("kind") in KINDS:
                records.append(r)
            else:
                bad += 1
    return records, bad


def load_journals(data_dir: str | Path) -> tuple[list[dict], list[str], int]:
    """All records under ``data_dir/<site>/journal/``, the sites, and the unreadable line count."""
    root = Path(data_dir)
    records: list[dict] = []
    sites: list[str] = []
    bad_total = 0
    for site_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        jdir = site_dir / "journal"
        if not jdir.is_dir():
            continue
        sites.append(site_dir.name)
        for f in sorted(jdir.glob("*.jsonl")):
            recs, bad = read_jsonl(f)
            bad_total += bad
            for r in recs:
                r.setdefault("site", site_dir.name)
            records.extend(recs)
    return records, sites, bad_total
