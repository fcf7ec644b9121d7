"""Load real journals (Contract 3) into checker records.

A chat server appends to ``data_dir/<site>/journal/*.jsonl``; a crash may leave
a torn last line, which every reader tolerates. Files are read in name order
(the chat server names them so that name order is time order); records keep
their file order, which is the site's delivery order.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from chat_server.journal import Unreadable, read_journal
from contracts import journal as J

# The kinds the checkers use; readers ignore the others (Contract 3). ``clearance``: the leak checker's.
KINDS = (J.SEND, J.DELIVER, J.CONTROL, J.STATUS, J.MISSING, J.START, J.CRASH, J.CLEARANCE)


def read_jsonl(path: Path) -> tuple[list[dict[str, Any]], int]:
    """Records of one file the checkers use, and how many lines were unreadable (torn or garbled)."""
    unreadable = Unreadable()
    records = [r for r in read_journal(path, unreadable) if r.get("kind") in KINDS]
    return records, unreadable.lines


def load_journals(data_dir: str | Path) -> tuple[list[dict[str, Any]], list[str], int]:
    """All records under ``data_dir/<site>/journal/``, the sites, and the unreadable line count."""
    root = Path(data_dir)
    records: list[dict[str, Any]] = []
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
