"""Pure-Python, single-process transcript: the yardstick for the Spark job.

It reads the same journals with the same rules as ``transforms`` (validity of
a record, keep-first deduplication, content from the send record, order-key
order with ``msg_id`` tie-break) and returns the transcript rows in the same
shape as the Spark job's ``transcript`` dataset, so the two can be compared
row for row. It holds the whole mission in memory: fine for a million
records, which is what it is for.
"""
from __future__ import annotations

import json
import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from .journals import JournalFile
from .orderkey import element_text, sortable_key

KINDS = ("send", "deliver", "status", "missing")
STATUSES = ("connected", "suspected", "disconnected")
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_INTEGER = re.compile(r"^\s*[+-]?[0-9]+\s*$")

# Column order of a transcript row (same as the Spark job's transcript dataset).
TRANSCRIPT_COLUMNS = ("position", "room", "room_position", "msg_id", "origin", "seq", "user",
                      "text", "sent_at", "order", "order_key", "deliveries", "late_sites",
                      "never_arrived", "reported_missing_at")


def _text(value: Any) -> str | None:
    """A JSON value read into a string field, as Spark renders it."""
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"))


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _integer(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value


_DOUBLE_FIELDS = ("at", "sent_at")
_LONG_FIELDS = ("n", "seq")
_STRING_FIELDS = ("kind", "site", "msg_id", "origin", "room", "user", "text", "peer", "status")
_FIELDS = ("kind", "site", "at", "n", "msg_id", "origin", "seq", "order", "late", "room", "user",
           "text", "sent_at", "peer", "status", "seqs")


def _well_typed(raw: dict) -> bool:
    """Every schema field present has a type Spark's reader accepts (else the line is bad)."""
    for name in _DOUBLE_FIELDS:
        v = raw.get(name)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
            return False
    for name in _LONG_FIELDS:
        v = raw.get(name)
        if v is not None and _integer(v) is None:
            return False
    late = raw.get("late")
    if late is not None and not isinstance(late, bool):
        return False
    order = raw.get("order")
    if order is not None and not isinstance(order, list):
        return False
    seqs = raw.get("seqs")
    if seqs is not None and (not isinstance(seqs, list)
                             or any(s is not None and _integer(s) is None for s in seqs)):
        return False
    return True


def record_identity(raw: dict) -> tuple:
    """The scalar fields a line parses to: two lines with equal identities are one record replayed.

    Arrays are left out, as in the Spark job (``transforms.IDENTITY_FIELDS``).
    """
    def norm(name: str) -> Any:
        v = raw.get(name)
        if v is None:
            return None
        if name in _DOUBLE_FIELDS:
            return float(v)
        if name in _STRING_FIELDS:
            return _text(v)
        return v
    return tuple(norm(name) for name in _FIELDS if name not in ("order", "seqs"))


def parse_record(line: str) -> dict | None:
    """One journal line -> a normalised record, or None when unusable."""
    try:
        raw = json.loads(line)
    except ValueError:
        return None
    if not isinstance(raw, dict) or not _well_typed(raw):
        return None
    kind, site, at = _text(raw.get("kind")), _text(raw.get("site")), _number(raw.get("at"))
    if kind not in KINDS or site is None or at is None:
        return None
    rec = {"kind": kind, "site": site, "at": at, "identity": record_identity(raw)}
    if kind in ("send", "deliver"):
        msg_id = _text(raw.get("msg_id"))
        n = _integer(raw.get("n"))
        if msg_id is None or (kind == "deliver" and n is None):
            return None
        origin = _text(raw.get("origin"))
        seq = _integer(raw.get("seq"))
        if origin is None:
            origin = msg_id.split(":", 1)[0]
        if seq is None:
            tail = msg_id.rsplit(":", 1)[-1]
            seq = int(tail) if _INTEGER.match(tail) else None
        order = raw.get("order")
        late = raw.get("late")
        rec.update(msg_id=msg_id, n=n, origin=origin, seq=seq,
                   order_key=sortable_key(order) if isinstance(order, list) else None,
                   order=[element_text(e) for e in order] if isinstance(order, list) else None,
                   late=late if isinstance(late, bool) else False,
                   room=_text(raw.get("room")), user=_text(raw.get("user")),
                   text=_text(raw.get("text")), sent_at=_number(raw.get("sent_at")))
    elif kind == "status":
        peer, status = _text(raw.get("peer")), _text(raw.get("status"))
        if peer is None or status not in STATUSES:
            return None
        rec.update(peer=peer, status=status)
    else:
        origin, seqs = _text(raw.get("origin")), raw.get("seqs")
        if origin is None or not isinstance(seqs, list):
            return None
        rec.update(origin=origin, seqs=[s for s in seqs if s is not None])
    return rec


@dataclass
class _PerSite:
    content: tuple | None = None          # (prio, at, n, origin, seq, room, user, text, sent_at)
    first: tuple | None = None            # (n, at, late) of the kept delivery
    deliver_lines: set = field(default_factory=set)
    deliver_records: int = 0
    order_key: tuple | None = None         # (sortable key, order as text) with the smallest key


@dataclass
class ReferenceResult:
    """The reference transcript and the counts it derives on the way."""

    rows: list[tuple]
    sites: list[str]
    lines: int = 0
    bad_lines: int = 0
    duplicate_lines: int = 0
    redeliveries: int = 0


def reference_transcript(files: Sequence[JournalFile]) -> ReferenceResult:
    """Read journal files and build the global transcript in one process."""
    per_message: dict[str, dict[str, _PerSite]] = defaultdict(dict)
    missing: dict[str, set[str]] = defaultdict(set)
    sites: set[str] = {f.path_site for f in files if f.path_site}
    result = ReferenceResult(rows=[], sites=[])
    for jf in files:
        with open(jf.path, encoding="utf-8", errors="replace", newline="") as fh:
            content = fh.read()
        lines = _LINE_BREAK.split(content)
        if lines and lines[-1] == "":
            lines.pop()
        for line in lines:
            if not line.strip():
                continue
            result.lines += 1
            rec = parse_record(line)
            if rec is None:
                result.bad_lines += 1
                continue
            sites.add(rec["site"])
            kind = rec["kind"]
            if kind == "missing":
                for s in rec["seqs"]:
                    missing[f"{rec['origin']}:{s}"].add(rec["site"])
                continue
            if kind == "status":
                continue
            ps = per_message[rec["msg_id"]].setdefault(rec["site"], _PerSite())
            prio = 0 if kind == "send" else 1
            n = rec["n"] if rec["n"] is not None else -1
            cand = (prio, rec["at"], n, rec["origin"], rec["seq"], rec["room"], rec["user"],
                    rec["text"], rec["sent_at"])
            if ps.content is None or cand[:3] < ps.content[:3]:
                ps.content = cand
            if rec["order_key"] is not None:
                key = (rec["order_key"], rec["order"])
                if ps.order_key is None or key < ps.order_key:
                    ps.order_key = key
            if kind == "deliver":
                ps.deliver_records += 1
                ps.deliver_lines.add(rec["identity"])
                first = (rec["n"], rec["at"], rec["late"])
                if ps.first is None or first < ps.first:
                    ps.first = first
    all_sites = sorted(sites)
    rows = []
    for msg_id, by_site in per_message.items():
        best = min(((ps.content[0], site, ps.content[1], ps.content[2]), ps.content)
                   for site, ps in by_site.items() if ps.content is not None)[1]
        keys = [ps.order_key for ps in by_site.values() if ps.order_key is not None]
        key, order = min(keys) if keys else (None, None)
        deliveries = [(site, ps.first[0], ps.first[1], ps.first[2])
                      for site, ps in sorted(by_site.items()) if ps.first is not None]
        for ps in by_site.values():
            result.duplicate_lines += ps.deliver_records - len(ps.deliver_lines)
            result.redeliveries += max(len(ps.deliver_lines) - 1, 0)
        delivered = {d[0] for d in deliveries}
        _, _, _, origin, seq, room, user, text, sent_at = best
        rows.append([None, room, None, msg_id, origin, seq, user, text, sent_at,
                     order, key, deliveries,
                     [d[0] for d in deliveries if d[3]],
                     [s for s in all_sites if s not in delivered],
                     sorted(missing.get(msg_id, ()))])
    rows.sort(key=lambda r: (r[10] is None, r[10] or (), r[3]))
    room_counts: dict[Any, int] = defaultdict(int)
    for position, row in enumerate(rows):
        row[0] = position
        row[2] = room_counts[row[1]]
        room_counts[row[1]] += 1
    result.rows = [tuple(r) for r in rows]
    result.sites = all_sites
    return result


def canonical_rows(rows: Iterable[Sequence[Any]]) -> list[tuple]:
    """Rows with lists turned into tuples, for comparing Spark rows with reference rows."""
    def norm(v: Any) -> Any:
        if isinstance(v, (list, tuple)):
            return tuple(norm(x) for x in v)
        return v
    return [tuple(norm(v) for v in row) for row in rows]
