"""The journal record (Contract 3 of DESIGN.md): one schema and its one writer.

Theory of operation
-------------------
A site's journal is JSON Lines, one record a line. Every record has a ``kind``
and the fields that kind declares, always in the same order: the schema below
is the one home of the kinds, their fields, each field's type and the order in
which they are written. Three producers write records and all go through it:

* the chat server (``chat_server.journal``: a file per run, fsync before an
  event is shown, torn-line tolerance, recovery) builds each record with
  ``record`` and writes it with ``dumps``;
* the network simulator (``faultinject.sim``) builds its records with
  ``record`` and keeps them in memory for the checkers (``dumps`` when a trace
  is saved);
* the synthetic generator (``spark_archive.generate``) writes millions of
  lines through ``line_format`` and ``fragment_format``: %-formats made from
  the schema's names and order, filled with each value's JSON text. A test
  re-writes every generated line with ``dumps`` and compares the bytes.

Readers (the archive, the checkers) take the kinds and the fields' types from
here too (``spark_archive.schema`` maps them to Spark's types), and read a
``missing`` record's messages with ``missing_ranges`` and ``earliest``.

``dumps`` writes what ``json.dumps`` writes with compact separators and UTF-8
text as is: floats as ``repr`` writes them (the shortest text that reads back
to the same number), integers in decimal, no spaces. Keys come in the schema's
order whatever the order of the mapping, so two producers write one record as
one line.

A field is *required* (every producer writes it), *content* (the chat message
of a ``send`` or ``deliver``: every chat server writes it, the simulator, whose
messages are opaque bytes, does not) or *optional* (an extension; absent means
its documented default). ``record`` leaves out an optional field given
``None``; a required one is written whatever its value (a ``send`` accepted
before RCM knew its order has ``"order": null``). Kinds marked *tool* are
written by the test tools only (the simulator and the scenario runner mark a
site's lifetimes with them), never by a chat server; so are the fields ``inc``
and ``dests``. Readers ignore kinds and fields they do not know (Contract 3).
"""
from __future__ import annotations

import enum
import heapq
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import Any


class FieldType(enum.Enum):
    """The JSON shape of a field's value."""

    STR = "string"
    INT = "integer"
    FLOAT = "number"            # an integer is a number too (a peer's sent_at may be one)
    BOOL = "boolean"
    ORDER = "order key"         # an array of integers and strings, compared element by element
    STRS = "array of strings"
    INTS = "array of integers"
    RANGES = "array of [first, last] integer pairs"
    LABEL = "label"             # {"level": string, "caveats": [string, ...]}


@dataclass(frozen=True, slots=True)
class Field:
    """One field: its name, the shape of its value, and what it means."""

    name: str
    type: FieldType
    doc: str


_T = FieldType
FIELDS: dict[str, Field] = {f.name: f for f in (
    Field("kind", _T.STR, "what the record reports (one of KINDS)"),
    Field("site", _T.STR, "the site that journaled it"),
    Field("at", _T.FLOAT, "when, in Unix seconds (the simulator's virtual seconds in its records)"),
    Field("n", _T.INT, "chat deliveries at the site so far, this one included, across restarts"),
    Field("msg_id", _T.STR, '"<origin>:<seq>"'),
    Field("origin", _T.STR, "the site that sent the message"),
    Field("seq", _T.INT, "the message's RCM sequence number at its origin"),
    Field("room", _T.STR, "the chat room"),
    Field("user", _T.STR, "the user who sent the message (acknowledge: who acknowledged it)"),
    Field("text", _T.STR, "the message's text"),
    Field("sent_at", _T.FLOAT, "when the origin accepted the message, Unix seconds"),
    Field("order", _T.ORDER, "the message's global order key (Lamport: [timestamp, origin]); null in a send "
                             "accepted before RCM knew it"),
    Field("late", _T.BOOL, "delivered after its place in the global order had passed"),
    Field("peer", _T.STR, "the remote site whose status changed"),
    Field("status", _T.STR, "connected | suspected | disconnected (contracts.status)"),
    Field("ranges", _T.RANGES, "the lost seqs of origin: canonical [first, last] pairs (second round)"),
    Field("count", _T.INT, "how many seqs the ranges hold (second round)"),
    Field("seqs", _T.INTS, "the lost seqs of origin, listed (first round; with ranges: the same seqs, "
                           "written only when few, see MISSING_SEQS_MAX)"),
    Field("precedence", _T.STR, "flash | immediate | priority | routine (contracts.precedence); absent: routine"),
    Field("reply_to", _T.STR, "the msg_id the message answers"),
    Field("via", _T.STRS, "the relay sites the message came through ([]: direct)"),
    Field("repaired", _T.BOOL, "reported missing here earlier, recovered by repair; absent: false"),
    Field("held", _T.BOOL, "a private room's message held until the room's definition arrived; absent: false"),
    Field("skipped", _T.STRS, "destinations RCM did not send to: disconnected at the time"),
    Field("label", _T.LABEL, "the message's security label (second round)"),
    Field("clearance", _T.LABEL, "what the site may hold: its clearance (second round)"),
    Field("levels", _T.STRS, "the mission's classification levels, lowest first (second round)"),
    Field("caveats", _T.STRS, "the mission's caveats, releasability categories (second round)"),
    Field("expires_at", _T.FLOAT, "when the message expires, Unix seconds (second round)"),
    Field("unit", _T.STR, "the unit a position report is about"),
    Field("lat", _T.FLOAT, "latitude, degrees"),
    Field("lon", _T.FLOAT, "longitude, degrees"),
    Field("alt", _T.FLOAT, "altitude, metres"),
    Field("inc", _T.INT, "tool: the site's incarnation (its stream identity when durable)"),
    Field("dests", _T.STRS, "tool: the sites a message was addressed to, its origin excluded; absent: every other"),
)}


@dataclass(frozen=True, slots=True)
class Kind:
    """One kind of record: its fields in line order, and which of them every producer writes."""

    name: str
    fields: tuple[str, ...]         # in line order, ``kind`` excluded
    required: frozenset[str]
    content: frozenset[str]         # written by every chat server, not by the simulator
    tool: bool
    doc: str
    position: dict[str, int] = dataclass_field(init=False, repr=False, compare=False)   # field -> place

    def __post_init__(self) -> None:
        object.__setattr__(self, "position", {name: i for i, name in enumerate(self.fields)})

    @property
    def keys(self) -> tuple[str, ...]:
        """Every key a line of this kind may hold, in line order."""
        return ("kind", *self.fields)


def _kind(name: str, spec: str, doc: str, tool: bool = False) -> Kind:
    """A kind from its fields in line order: ``name`` required, ``name*`` content, ``name?`` optional."""
    fields, required, content = [], set(), set()
    for word in spec.split():
        field = word.rstrip("*?")
        if field not in FIELDS:
            raise ValueError(f"kind {name!r} names an undeclared field {field!r}")
        fields.append(field)
        if word.endswith("*"):
            content.add(field)
        elif not word.endswith("?"):
            required.add(field)
    return Kind(name, tuple(fields), frozenset(required), frozenset(content), tool, doc)


SEND, DELIVER, STATUS, MISSING = "send", "deliver", "status", "missing"
ACKNOWLEDGE, CONTROL, EXPIRED, POSITION = "acknowledge", "control", "expired", "position"
START, CRASH = "start", "crash"
CLEARANCE = "clearance"

KINDS: dict[str, Kind] = {k.name: k for k in (
    _kind(SEND, "site at msg_id origin seq room* user* text* sent_at order skipped? precedence? label? "
                "expires_at? dests?",
          "the site accepted a message from its user"),
    _kind(DELIVER, "site n at msg_id origin seq order late room* user* text* sent_at* precedence? reply_to? via? "
                   "repaired? held? label? expires_at? inc?",
          "a chat message delivered at the site"),
    _kind(STATUS, "site at peer status inc?", "RCM reported a change of a peer's logical status"),
    _kind(MISSING, "site at origin ranges? count? seqs?",
          "messages of origin known lost here: ranges and count (with seqs when few), or seqs (first round)"),
    _kind(ACKNOWLEDGE, "site at msg_id user", "a user of the site acknowledged a flash or immediate message"),
    _kind(CONTROL, "site at msg_id origin seq order late",
          "an RCM delivery that shows no chat message (rosters, receipts, room definitions; a message held, "
          "dropped or refused), so that ordering checks see every delivery (no n)"),
    _kind(EXPIRED, "site at msg_id origin seq", "a message expired before it reached the site (not lost)"),
    _kind(POSITION, "site at origin unit lat lon alt? sent_at via?",
          "a position report accepted or received at the site"),
    _kind(CLEARANCE, "site at clearance levels caveats",
          "a chat server of a labeled mission started: what the site may hold, and the mission's labels (readers "
          "take the latest per site)"),
    _kind(START, "site at inc", "a site's stack began, every peer disconnected", tool=True),
    _kind(CRASH, "site at", "a site was lost with all its state", tool=True),
)}

MISSING_SEQS_MAX = 10_000
"""A report's ``missing`` records list their seqs as ``seqs`` too up to this many in all (chat-protocol.md)."""
LONG_MIN, LONG_MAX = -(1 << 63), (1 << 63) - 1
"""Integers a reader takes from a record (a Spark ``LongType``; a seq is far below)."""


def record(kind: str, **fields: Any) -> dict[str, Any]:
    """A record of ``kind`` with ``fields``, keys in the schema's order; an optional field given None is left
    out. A ValueError names an unknown kind, a field the kind does not have, or a required field not given."""
    k = _of(kind)
    position = k.position
    if not position.keys() >= fields.keys():
        raise ValueError(f"a {kind} record has no field {', '.join(n for n in fields if n not in position)}")
    if not k.required <= fields.keys():
        raise ValueError(f"a {kind} record needs {', '.join(n for n in k.fields if n in k.required - fields.keys())}")
    rec: dict[str, Any] = {"kind": kind}
    for name in sorted(fields, key=position.__getitem__):
        value = fields[name]
        if value is not None or name in k.required:
            rec[name] = value
    return rec


def _of(kind: object) -> Kind:
    """The schema's kind named ``kind``; a ValueError for anything else."""
    k = KINDS.get(kind) if isinstance(kind, str) else None
    if k is None:
        raise ValueError(f"unknown journal record kind {kind!r:.40}")
    return k


_encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def dumps(rec: Mapping[str, Any]) -> str:
    """The JSON line of a record (without its line end): keys in the schema's order, compact. A ValueError names
    an unknown kind or a key the kind does not have."""
    k = _of(rec.get("kind"))
    ordered = {name: rec[name] for name in k.keys if name in rec}
    if len(ordered) != len(rec):
        raise ValueError(f"a {k.name} record has no field {', '.join(n for n in rec if n not in k.keys)}")
    return _encode(ordered)


def value_text(value: Any) -> str:
    """The JSON text ``dumps`` writes for one value (what fills a slot of ``line_format``)."""
    return _encode(value)


def _is_int(v: Any) -> bool:
    return type(v) is int


def _is_strs(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


def _is_pair(v: Any) -> bool:
    return isinstance(v, list) and len(v) == 2 and _is_int(v[0]) and _is_int(v[1]) and v[0] <= v[1]


def _is_label(v: Any) -> bool:
    return (isinstance(v, dict) and set(v) <= {"level", "caveats"} and isinstance(v.get("level"), str)
            and _is_strs(v.get("caveats", [])))


_CHECKS: dict[FieldType, Callable[[Any], bool]] = {
    _T.STR: lambda v: isinstance(v, str),
    _T.INT: _is_int,
    _T.FLOAT: lambda v: type(v) in (int, float),
    _T.BOOL: lambda v: isinstance(v, bool),
    _T.ORDER: lambda v: isinstance(v, list) and all(type(x) in (int, str) for x in v),
    _T.STRS: _is_strs,
    _T.INTS: lambda v: isinstance(v, list) and all(_is_int(x) for x in v),
    _T.RANGES: lambda v: isinstance(v, list) and all(_is_pair(p) for p in v),
    _T.LABEL: _is_label,
}


def problems(rec: Mapping[str, Any], chat: bool = False) -> list[str]:
    """What keeps ``rec`` from being a record of the schema (empty: none): an unknown kind or field, a required
    field absent (with ``chat``, a content field too: a chat server's record), a value of the wrong type."""
    kind = rec.get("kind")
    try:
        k = _of(kind)
    except ValueError as e:
        return [str(e)]
    out = [f"no field {name} in a {kind} record" for name in rec if name not in k.keys]
    out += [f"{name} absent" for name in k.fields
            if name not in rec and (name in k.required or (chat and name in k.content))]
    for name in k.fields:
        if name in rec and not _CHECKS[FIELDS[name].type](rec[name]) \
                and not (rec[name] is None and name == "order" and kind == SEND):
            out.append(f"{name} is {rec[name]!r:.40}, not {FIELDS[name].type.value}")
    return out


# --- the fast path of bulk producers ---------------------------------------------------------------------
def _check_run(kind: str, names: Sequence[str]) -> Kind:
    """The kind, once ``names`` are found to be its fields in the schema's order."""
    k = _of(kind)
    positions = []
    for name in names:
        if name not in k.position:
            raise ValueError(f"a {kind} record has no field {name}")
        positions.append(k.position[name])
    if positions != sorted(set(positions)):
        raise ValueError(f"fields of a {kind} record out of the schema's order: {', '.join(names)}")
    return k


def fragment_format(kind: str, *names: str) -> str:
    """``,"a":%s,"b":%s`` for fields ``names`` of a ``kind`` line, in the schema's order: the text of a run of
    fields, each ``%s`` filled with its value's JSON text (fields many lines share are formatted once)."""
    _check_run(kind, names)
    return "".join(f",{_encode(name)}:%s" for name in names)


def line_format(kind: str, *slots: str | Sequence[str]) -> str:
    """A %-format of a whole ``kind`` line, one ``%s`` per slot, the slots in the schema's order: a field name
    stands for that field's JSON text, a sequence of names for their fragment (``fragment_format``; empty when
    they are optional and absent). What it writes is what ``dumps`` writes, which a test checks line by line."""
    flat = [n for s in slots for n in ((s,) if isinstance(s, str) else s)]
    _check_run(kind, flat)
    parts = [f",{_encode(s)}:%s" if isinstance(s, str) else "%s" for s in slots]
    return "{" + f'"kind":{_encode(kind)}' + "".join(parts) + "}"


def missing_fields(ranges: Sequence[Sequence[int]], listed: bool = True) -> dict[str, Any]:
    """The fields of a ``missing`` record naming canonical ``ranges``: ``ranges``, ``count``, and ``seqs`` when
    ``listed`` and they name at most ``MISSING_SEQS_MAX`` messages (a range may name 2^53 of them)."""
    count = sum(last - first + 1 for first, last in ranges)
    fields: dict[str, Any] = {"ranges": [[first, last] for first, last in ranges], "count": count}
    if listed and count <= MISSING_SEQS_MAX:
        fields["seqs"] = [s for first, last in ranges for s in range(first, last + 1)]
    return fields


# -- reading missing records: one way for every reader (the checkers, the archive) -----------------------------
def is_long(value: Any) -> bool:
    """An integer (not a bool) in 64 signed bits."""
    return type(value) is int and LONG_MIN <= value <= LONG_MAX


def missing_ranges(ranges: Any, seqs: Any) -> list[tuple[int, int]]:
    """The canonical seq ranges (sorted, disjoint, adjacent ones merged) a ``missing`` record names, from its
    ``ranges`` and ``seqs`` fields: ``ranges`` when it is a list (pairs that are not two integers in order
    are ignored), else ``seqs`` (the first round's records; what is not an integer is ignored)."""
    if isinstance(ranges, list):
        pairs = [(p[0], p[1]) for p in ranges
                 if isinstance(p, list) and len(p) == 2 and is_long(p[0]) and is_long(p[1]) and p[0] <= p[1]]
    elif isinstance(seqs, list):
        pairs = [(q, q) for q in seqs if is_long(q)]
    else:
        return []
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(pairs):
        if out and lo <= out[-1][1] + 1:
            if hi > out[-1][1]:
                out[-1] = (out[-1][0], hi)
        else:
            out.append((lo, hi))
    return out


def missing_of(rec: Mapping[str, Any]) -> list[tuple[int, int]]:
    """``missing_ranges`` of a record read as a mapping."""
    return missing_ranges(rec.get("ranges"), rec.get("seqs"))


def earliest(spans: Sequence[tuple[int, int, float]]) -> list[tuple[int, int, float]]:
    """Disjoint sorted ``(first, last, at)`` covering the ``spans`` (one site's reports of one origin),
    ``at`` the earliest of the spans covering each seq: a sweep over the spans' ends, so the work follows
    the spans, never the numbers they name (one range may name 2^53 messages)."""
    bounds = sorted({lo for lo, _, _ in spans} | {hi + 1 for _, hi, _ in spans})
    by_start = sorted(spans)
    active: list[tuple[float, int]] = []        # (at, last) of the spans begun so far, earliest first
    out: list[tuple[int, int, float]] = []
    i = 0
    for lo, nxt in zip(bounds, bounds[1:]):
        while i < len(by_start) and by_start[i][0] <= lo:
            heapq.heappush(active, (by_start[i][2], by_start[i][1]))
            i += 1
        while active and active[0][1] < lo:     # ended before this piece
            heapq.heappop(active)
        if not active:
            continue
        at = active[0][0]
        if out and out[-1][1] == lo - 1 and out[-1][2] == at:
            out[-1] = (out[-1][0], nxt - 1, at)
        else:
            out.append((lo, nxt - 1, at))
    return out
