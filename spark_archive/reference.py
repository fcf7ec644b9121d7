"""The archive in one process, in plain Python: the yardstick of the Spark plan, and the
driver plan for small missions.

It reads the journals with the same rules as ``transforms`` (validity of a
record, keep-first deduplication, content from the send record, order-key
order with ``msg_id`` tie-break, control records numbered with the messages,
each site's earliest line of a position report: ``tracks.py``) and builds the
transcript rows in the shape of the Spark job's ``transcript`` dataset and
every small table in the shape of its rows (``local_tables``, ``local_tracks``), so
tests and the benchmark compare the two row for row. The job uses it for
missions small enough that Spark's fixed costs would dominate (``job.run_archive``,
plan ``driver``). It holds the whole mission in memory.
"""
from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from contracts.journal import FieldType, is_long, missing_ranges
from contracts.precedence import PRECEDENCES, Precedence
from contracts.status import REPORTED
from contracts.text import lone_surrogate

from . import schema, tracks
from .journals import JournalFile
from .missing import Lookup, Piece, Report, build_pieces
from .orderkey import element_text, sortable_key

KINDS = schema.KINDS
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_INTEGER = re.compile(r"^\s*[+-]?[0-9]+\s*$")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")    # a JSON escape of a surrogate (paired or lone)


def _as_spark_reads(value: Any) -> Any:
    """A JSON value as Spark's reader holds it: every lone surrogate (JSON's ``\\ud800`` can carry one, UTF-8
    cannot) as ``?``, since Spark keeps strings as UTF-8 and the JVM encodes an unpaired surrogate as ``?``.
    Python's own "replace" gives the same byte, so both plans read such a line alike, never failing on it."""
    if isinstance(value, str):
        return value.encode("utf-8", "replace").decode("utf-8") if lone_surrogate(value) else value
    if isinstance(value, list):
        return [_as_spark_reads(v) for v in value]
    if isinstance(value, dict):
        return {_as_spark_reads(k): _as_spark_reads(v) for k, v in value.items()}
    return value

# Column order of a transcript row (same as the Spark job's transcript dataset).
TRANSCRIPT_COLUMNS = ("position", "room", "room_position", "msg_id", "origin", "seq", "user",
                      "text", "sent_at", "order", "order_key", "deliveries", "late_sites",
                      "never_arrived", "reported_missing_at", "precedence")


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


# The archive's fields by type (``schema``: the journal schema's types, as Spark reads them).
_DOUBLE_FIELDS = schema.names_of(FieldType.FLOAT)
_LONG_FIELDS = schema.names_of(FieldType.INT)
_STRING_FIELDS = schema.names_of(FieldType.STR)     # any JSON value: Spark reads it as its text
_BOOLEAN_FIELDS = schema.names_of(FieldType.BOOL)
_TEXT_ARRAY_FIELDS = schema.names_of(FieldType.ORDER, FieldType.STRS)    # any elements, read as text
_LONG_ARRAY_FIELDS = schema.names_of(FieldType.INTS)
_RANGE_FIELDS = schema.names_of(FieldType.RANGES)
# Scalar fields of the journal schema, in the order the Spark job hashes them.
_IDENTITY = schema.IDENTITY


def _longs(v: Any) -> bool:
    """A JSON array Spark reads as longs: integers that fit and nulls."""
    return isinstance(v, list) and all(x is None or is_long(x) for x in v)


def _well_typed(raw: dict[str, Any]) -> bool:
    """Every schema field present has a type Spark's reader accepts (else the line is bad)."""
    for name in _DOUBLE_FIELDS:
        v = raw.get(name)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
            return False
    for name in _LONG_FIELDS:
        v = raw.get(name)
        if v is not None and _integer(v) is None:
            return False
    for name in _BOOLEAN_FIELDS:
        v = raw.get(name)
        if v is not None and not isinstance(v, bool):
            return False
    for name in _TEXT_ARRAY_FIELDS:
        v = raw.get(name)
        if v is not None and not isinstance(v, list):
            return False
    for name in _LONG_ARRAY_FIELDS:
        v = raw.get(name)
        if v is not None and not _longs(v):
            return False
    for name in _RANGE_FIELDS:
        v = raw.get(name)
        if v is not None and not (isinstance(v, list) and all(p is None or _longs(p) for p in v)):
            return False
    return True


def record_identity(raw: dict[str, Any]) -> tuple[Any, ...]:
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
    return tuple(norm(name) for name in _IDENTITY)


def parse_record(line: str) -> dict[str, Any] | None:
    """One journal line -> a normalised record, or None when unusable."""
    try:
        raw = json.loads(line)
    except ValueError:
        return None
    if _SURROGATE_ESCAPE.search(line):
        raw = _as_spark_reads(raw)
    if not isinstance(raw, dict) or not _well_typed(raw):
        return None
    kind, site, at = _text(raw.get("kind")), _text(raw.get("site")), _number(raw.get("at"))
    precedence = _text(raw.get("precedence"))
    if kind not in KINDS or site is None or at is None \
            or (precedence is not None and precedence not in PRECEDENCES):
        return None
    rec: dict[str, Any] = {"kind": kind, "site": site, "at": at}
    if kind in ("send", "deliver", "control"):
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
        late, repaired, via = raw.get("late"), raw.get("repaired"), raw.get("via")
        rec.update(msg_id=msg_id, n=n, origin=origin, seq=seq,
                   raw_order=order if isinstance(order, list) else None,
                   late=late is True, repaired=repaired is True,
                   hops=len(via) if isinstance(via, list) else 0,
                   prec=Precedence.ROUTINE.code if precedence is None else Precedence(precedence).code)
        if kind != "control":
            rec.update(identity=record_identity(raw), room=_text(raw.get("room")),
                       user=_text(raw.get("user")), text=_text(raw.get("text")),
                       sent_at=_number(raw.get("sent_at")))
    elif kind == "acknowledge":
        msg_id = _text(raw.get("msg_id"))
        if msg_id is None:
            return None
        rec.update(msg_id=msg_id, user=_text(raw.get("user")))
    elif kind == "position":
        # (origin and unit: str | None; lat, lon, alt and sent_at: float | None)
        fields: dict[str, Any] = {name: _text(raw.get(name)) for name in ("origin", "unit")} | \
            {name: _number(raw.get(name)) for name in ("lat", "lon", "alt", "sent_at")}
        if not tracks.usable(**fields):
            return None
        rec.update(fields)
    elif kind == "status":
        peer, status = _text(raw.get("peer")), _text(raw.get("status"))
        if peer is None or status not in REPORTED:
            return None
        rec.update(peer=peer, status=status)
    elif kind == "clearance":
        pass                    # its labels: the label pass (labels.py)
    else:
        origin, seqs, ranges = _text(raw.get("origin")), raw.get("seqs"), raw.get("ranges")
        if origin is None or (ranges is None and seqs is None):
            return None
        rec.update(origin=origin, ranges=missing_ranges(ranges, seqs))
    return rec


class _PerSite:
    """What one site journaled of one message, once it journaled more than one deliver line
    (until then the site's slot is just that delivery: ``(n, at, late, repaired, hops, line)``)."""

    __slots__ = ("first", "deliver_lines", "deliver_records", "send_lines", "send_records")

    def __init__(self) -> None:
        self.first: tuple[Any, ...] | None = None  # (n, at, late, repaired, hops) of the kept delivery
        self.deliver_lines: set[int] = set()  # hashes of distinct line identities
        self.deliver_records = 0
        self.send_lines: set[int] = set()
        self.send_records = 0

    def deliver(self, first: tuple[Any, ...], line: int) -> None:
        self.deliver_records += 1
        self.deliver_lines.add(line)
        if self.first is None or first < self.first:
            self.first = first


class _Message:
    """Everything journaled about one message: its content, order key and each site's slot."""

    __slots__ = ("best", "key", "sites")

    def __init__(self) -> None:
        self.best: tuple[Any, ...] | None = None   # (prio, site, at, n, origin, seq, room, user, text, sent_at, prec)
        self.key: tuple[bytes, list[str]] | None = None  # (sortable key, order as text): the smallest
        self.sites: dict[str, tuple[Any, ...] | _PerSite] = {}


@dataclass
class Journals:
    """Everything the journals say, read once (``read_journals``)."""

    sites: list[str]
    messages: dict[str, _Message] = field(default_factory=dict)
    control: dict[tuple[str, str], tuple[float, bool]] = field(default_factory=dict)  # (msg, site) -> (at, late)
    control_keys: dict[str, bytes | None] = field(default_factory=dict)
    acks: dict[tuple[str, str, str | None], float] = field(default_factory=dict)  # (msg, site, user) -> at
    status: set[tuple[str, str, float, str]] = field(default_factory=set)
    status_lines: int = 0
    # Position receipts (tracks.py): (site, origin, unit, sent_at) -> (at, lat, lon, alt) of the earliest line.
    positions: dict[tuple[str, str, str, float], tuple[float, float, float, float | None]] = \
        field(default_factory=dict)
    pieces: list[Piece] = field(default_factory=list)  # missing reports, as pieces of seq ranges
    missing: Lookup = field(default_factory=lambda: Lookup([]))  # msg_id -> {site: earliest report}
    files: list[dict[str, Any]] = field(default_factory=list)
    site_counts: dict[str, dict[str, Any]] = field(default_factory=dict)
    start: float | None = None
    end: float | None = None
    lines: int = 0
    bad_lines: int = 0


def _lines(path: str) -> list[str]:
    with open(path, encoding="utf-8", errors="replace", newline="") as fh:
        content = fh.read()
    lines = _LINE_BREAK.split(content)
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def read_journals(files: Sequence[JournalFile]) -> Journals:
    """Read every journal file into a ``Journals``."""
    found: set[str] = {f.path_site for f in files if f.path_site}
    j = Journals(sites=[])
    messages: dict[str, _Message] = {}
    reports: list[Report] = []
    for jf in files:
        stat: dict[str, Any] = {"file": jf.path, "path_site": jf.path_site, "bytes": jf.size, "lines": 0,
                                "records": 0, "bad_lines": 0, "sites": set(), "first_at": None, "last_at": None}
        j.files.append(stat)
        for line in _lines(jf.path):
            if not line.strip():
                continue
            stat["lines"] += 1
            rec = parse_record(line)
            if rec is None:
                stat["bad_lines"] += 1
                continue
            site, kind, at = rec["site"], rec["kind"], rec["at"]
            stat["records"] += 1
            stat["sites"].add(site)
            stat["first_at"] = at if stat["first_at"] is None else min(stat["first_at"], at)
            stat["last_at"] = at if stat["last_at"] is None else max(stat["last_at"], at)
            counts = j.site_counts.get(site)
            if counts is None:
                counts = j.site_counts[site] = {"site": site, "records": 0, **{f"{k}_records": 0 for k in KINDS}}
            counts["records"] += 1
            counts[f"{kind}_records"] += 1
            found.add(site)
            if kind in ("send", "deliver"):
                m = messages.get(rec["msg_id"])
                if m is None:
                    m = messages[rec["msg_id"]] = _Message()
                _message(m, rec)
            elif kind == "control":
                key = (rec["msg_id"], site)
                first = (at, rec["late"])
                if key not in j.control or first < j.control[key]:
                    j.control[key] = first
                old = j.control_keys.get(rec["msg_id"])
                new = sortable_key(rec["raw_order"]) if rec["raw_order"] is not None else None
                j.control_keys[rec["msg_id"]] = new if old is None or (new is not None and new < old) else old
            elif kind == "acknowledge":
                key3 = (rec["msg_id"], site, rec["user"])
                j.acks[key3] = min(j.acks.get(key3, at), at)
            elif kind == "position":
                _position(j.positions, rec)
            elif kind == "status":
                j.status_lines += 1
                j.status.add((site, rec["peer"], at, rec["status"]))
            elif kind == "missing":
                reports.append((rec["origin"], site, at, rec["ranges"]))     # never expanded (missing.py)
        stat["sites"] = sorted(stat["sites"])
        j.lines += stat["lines"]
        j.bad_lines += stat["bad_lines"]
    j.files.sort(key=lambda f: f["file"])
    firsts = [f["first_at"] for f in j.files if f["first_at"] is not None]
    lasts = [f["last_at"] for f in j.files if f["last_at"] is not None]
    j.start, j.end = (min(firsts), max(lasts)) if firsts else (None, None)
    j.messages = messages
    j.sites = sorted(found)
    j.pieces = build_pieces(reports)
    j.missing = Lookup(j.pieces)
    return j


def _position(receipts: dict[tuple[str, str, str, float], tuple[float, float, float, float | None]],
              rec: dict[str, Any]) -> None:
    """Keep a site's earliest line of a position report (``tracks.receipt_order``)."""
    key = (rec["site"], rec["origin"], rec["unit"], rec["sent_at"])
    line = (rec["at"], rec["lat"], rec["lon"], rec["alt"])
    kept = receipts.get(key)
    if kept is None or tracks.receipt_order(*line) < tracks.receipt_order(*kept):
        receipts[key] = line


def _message(m: _Message, rec: dict[str, Any]) -> None:
    kind, site = rec["kind"], rec["site"]
    prio = 0 if kind == "send" else 1
    n = rec["n"] if rec["n"] is not None else -1
    # Content: the send record's, else the delivery at the smallest site name (then the
    # earliest, the smallest n), as the Spark job's min over (prio, site, at, n).
    if m.best is None or (prio, site, rec["at"], n) < m.best[:4]:
        m.best = (prio, site, rec["at"], n, rec["origin"], rec["seq"], rec["room"], rec["user"],
                  rec["text"], rec["sent_at"], rec["prec"])
    raw = rec["raw_order"]
    if raw is not None:
        texts = [element_text(e) for e in raw]
        if m.key is None or texts != m.key[1]:   # encode each distinct order once
            key = (sortable_key(raw), texts)
            if m.key is None or key < m.key:
                m.key = key
    line = hash(rec["identity"])
    slot = m.sites.get(site)
    if kind == "deliver":
        first = (rec["n"], rec["at"], rec["late"], rec["repaired"], rec["hops"])
        if slot is None:
            m.sites[site] = (*first, line)
            return
    if slot is None:
        ps = m.sites[site] = _PerSite()
    elif type(slot) is tuple:
        ps = m.sites[site] = _PerSite()
        ps.deliver(slot[:5], slot[5])
    else:
        ps = slot  # type: ignore[assignment]
    if kind == "deliver":
        ps.deliver(first, line)
    else:
        ps.send_records += 1
        ps.send_lines.add(line)


def _first(slot: tuple[Any, ...] | _PerSite) -> tuple[Any, ...] | None:
    return slot[:5] if type(slot) is tuple else slot.first  # type: ignore[union-attr]


@dataclass
class Transcript:
    """Transcript rows (``TRANSCRIPT_COLUMNS``) and, per row, what the tables need."""

    rows: list[tuple[Any, ...]]
    prec: list[int]                 # precedence code of each row
    gidx: dict[tuple[str, bool], int]   # (msg_id, chat) -> index in the global order of chat + control
    line_counts: dict[str, list[int]]   # site -> [duplicate_lines, redeliveries, resends]
    duplicate_lines: int = 0
    redeliveries: int = 0


def build_transcript(j: Journals) -> Transcript:
    """The transcript in global order, with the global index of chat and control messages."""
    rows = []
    line_counts: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    dups_total = redeliveries_total = 0
    for msg_id, m in j.messages.items():
        assert m.best is not None
        key, order = m.key if m.key is not None else (None, None)
        deliveries = []
        for site in sorted(m.sites):
            slot = m.sites[site]
            first = _first(slot)
            if first is not None:
                deliveries.append((site, *first))
            if type(slot) is not tuple:
                ps: _PerSite = slot  # type: ignore[assignment]
                counts = line_counts[site]
                d = ps.deliver_records - len(ps.deliver_lines) + ps.send_records - len(ps.send_lines)
                r = max(len(ps.deliver_lines) - 1, 0)
                counts[0] += d
                counts[1] += r
                counts[2] += max(len(ps.send_lines) - 1, 0)
                dups_total += d
                redeliveries_total += r
        delivered = {d[0] for d in deliveries}
        _, _, _, _, origin, seq, room, user, text, sent_at, prec = m.best
        rows.append([None, room, None, msg_id, origin, seq, user, text, sent_at,
                     order, key, deliveries,
                     [d[0] for d in deliveries if d[3]],
                     [s for s in j.sites if s not in delivered],
                     sorted(j.missing.reports(msg_id)) if j.pieces else [], PRECEDENCES[prec]])
    rows.sort(key=lambda r: (r[10] is None, r[10] or b"", r[3]))
    room_counts: dict[Any, int] = defaultdict(int)
    for position, row in enumerate(rows):
        row[0] = position
        row[2] = room_counts[row[1]]
        room_counts[row[1]] += 1
    ordered = [(r[10] is None, r[10] or b"", r[3], True) for r in rows]
    ordered += [(k is None, k or b"", m, False) for m, k in j.control_keys.items()]
    ordered.sort()
    gidx = {(m, chat): i for i, (_, _, m, chat) in enumerate(ordered)}
    del ordered
    t = Transcript(rows=[tuple(r) for r in rows], prec=[Precedence(r[15]).code for r in rows],
                   gidx=gidx, line_counts=dict(line_counts))
    t.duplicate_lines, t.redeliveries = dups_total, redeliveries_total
    return t


@dataclass
class ReferenceResult:
    """The reference transcript and the counts it derives on the way."""

    rows: list[tuple[Any, ...]]
    sites: list[str]
    lines: int = 0
    bad_lines: int = 0
    duplicate_lines: int = 0
    redeliveries: int = 0


def reference_transcript(files: Sequence[JournalFile]) -> ReferenceResult:
    """Read journal files and build the global transcript in one process."""
    j = read_journals(files)
    t = build_transcript(j)
    return ReferenceResult(t.rows, j.sites, j.lines, j.bad_lines, t.duplicate_lines, t.redeliveries)


def canonical_rows(rows: Iterable[Sequence[Any]]) -> list[tuple[Any, ...]]:
    """Rows with lists turned into tuples, for comparing Spark rows with reference rows."""
    def norm(v: Any) -> Any:
        if isinstance(v, (list, tuple)):
            return tuple(norm(x) for x in v)
        if isinstance(v, bytearray):
            return bytes(v)
        return v
    return [tuple(norm(v) for v in row) for row in rows]
