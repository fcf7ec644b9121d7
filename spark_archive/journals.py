"""Finding journal files and the site each file's path names.

``--journals DIR`` is a mission ``data_dir`` (``DIR/<site>/journal/*.jsonl``) or
any directory tree of ``*.jsonl`` files. A record's site is its ``site`` field;
the path only names the site of a file that holds no usable record, so that a
site whose journal is empty still appears in every output.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

SITE_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,31}\Z")   # \Z: "$" would let a trailing newline in


class JournalInputError(Exception):
    """The journals directory is missing or holds no journal file."""


@dataclass(frozen=True, slots=True)
class JournalFile:
    """One ``*.jsonl`` file and the site its path names (``<site>/journal/x.jsonl``), if any."""

    path: str
    path_site: str | None
    size: int


def path_site(path: Path) -> str | None:
    """Site named by a ``<site>/journal/<file>.jsonl`` path, or None."""
    parent = path.parent
    if parent.name == "journal" and SITE_NAME.match(parent.parent.name or ""):
        return parent.parent.name
    return None


def list_journal_files(root: str | os.PathLike[str]) -> list[JournalFile]:
    """Every ``*.jsonl`` file under ``root``, sorted by path."""
    base = Path(root)
    if not base.exists():
        raise JournalInputError(f"--journals {root}: no such directory")
    if not base.is_dir():
        raise JournalInputError(f"--journals {root}: not a directory")
    found = []
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames.sort()
        for name in sorted(filenames):
            if name.endswith(".jsonl"):
                p = Path(dirpath, name).resolve()
                if p.is_file():
                    found.append(JournalFile(str(p), path_site(p), p.stat().st_size))
    if not found:
        raise JournalInputError(f"--journals {root}: no *.jsonl journal files found")
    return found
