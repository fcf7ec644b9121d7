"""The "no leak" checker: no site ever holds content its clearance does not dominate (DESIGN.md, Labels).

Theory of operation
-------------------
A labeled message may be held only by its origin and its destinations, the
sites whose clearance dominates its label (the chat server sends it to exactly
those, ``dests``; RCM confines a subset send to ``dests`` and its origin, relays
and repair included). Two checks, one per kind of evidence:

**What the simulator sees** (``LeakWatch``, sans-IO, fed by ``faultinject.sim``):
every payload of a labeled run carries a *marker* (``marker(token)``:
``<<A-12>>``, the origin and its workload number), and the simulator tells the
watch, per message, the sites that may hold it (``expect``). The watch then
scans

* every byte a site writes on a connection (``written``): frames are split
  off by their varint length, as ``rcm.wire`` frames them, per direction of a
  connection, so a frame cut across writes is whole when scanned; a payload
  is verbatim (msgpack ``bin``) inside a DATA, a ROUTED DATA, a REPAIR (or
  anything else), and a FRAG piece's chunk is put together per lane before it
  is scanned, so a marker cut across two pieces is still found. Both ends are
  held to it: the writer held the content and the reader gets it (a write
  that a failing link then drops still counts: the content was on its way);
* every delivery (``delivered``) and every write-ahead log record
  (``stored``: a ``Persist``, a compacted log) at a site.

Anything found at a site outside the message's allowed sites is a
``Violation("leak", site, token, ...)``, reported once per site, message and
kind of evidence (``frame``, ``delivery``, ``log``); ``events`` counts them all.
The simulator does not compress links (``[rcm] compression`` is the server
process's, outside the sans-IO stack), so the bytes are scanned as written.

**What journals say** (``check_journal_labels``, for simulated and real
journals alike): a chat server writes a ``clearance`` record at every start in
a labeled mission (``{"kind": "clearance", "site", "at", "clearance":
{level, caveats}, "levels": [...lowest first], "caveats": [...]}``); at each
site the latest one so far is in force (before the first, the first). Every
``send`` and ``deliver`` at a site with a clearance must carry a ``label``
(kind ``unlabeled`` otherwise) that reads against the site's levels and caveats
and that its clearance dominates (``leak`` otherwise: "a site never journals
content whose label its clearance does not dominate"); a delivery's label
must be its send's (``relabeled``); a site that journals labeled content and no
clearance at all cannot be judged (``no-clearance``).
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import msgpack

from contracts import journal as J
from contracts.labels import Label, LabelError
from rcm import wire
from rcm.wire import read_varint

from .history import Clearance, Violation

MARKER = re.compile(rb"<<([A-Za-z0-9_]{1,16}-[0-9]{1,12})>>")
_MARKER_MAX = 34        # the longest marker, bytes: what a FRAG lane's scan looks back over
_FIXARRAY_FRAG = (0x94, 0x95, 0x96)     # a FRAG frame's msgpack array header: 4 to 6 elements


def marker(token: str) -> bytes:
    """The marker of message ``token`` (``"A-12"``): ``b"<<A-12>>"``, put at the head of its payload."""
    out = b"<<" + token.encode() + b">>"
    if MARKER.fullmatch(out) is None:
        raise ValueError(f"token {token!r} must be a site name, '-' and a number")
    return out


def token_of(payload: bytes) -> str | None:
    """The token of the marker at the head of ``payload`` (None: it has none)."""
    m = MARKER.match(payload)
    return m.group(1).decode() if m else None


@dataclass(frozen=True, slots=True)
class Confined:
    """A labeled message: its origin, the sites that may hold it, and its label as people write it."""

    token: str
    origin: str
    allowed: frozenset[str]
    label: str


class LeakWatch:
    """Finds marked content where it may not be (see the module docstring); ``violations`` is the verdict."""

    def __init__(self) -> None:
        self.messages: dict[str, Confined] = {}
        self.violations: list[Violation] = []
        self.events = 0                  # every leak seen, before de-duplication
        self.scanned = 0                 # frames scanned
        self._seen: set[tuple[str, str, str]] = set()
        self._bufs: dict[tuple[int, str], bytearray] = {}
        self._broken: set[tuple[int, str]] = set()
        self._frags: dict[tuple[int, str, int], bytearray] = {}

    def expect(self, token: str, origin: str, allowed: Iterable[str], label: str) -> None:
        """Message ``token`` (its marker at the head of its payload) may be held only by ``allowed``."""
        self.messages[token] = Confined(token, origin, frozenset(allowed) | {origin}, label)

    # -- evidence ----------------------------------------------------------------------------------------------
    def written(self, src: str, dst: str, conn: int, data: bytes, at: float) -> None:
        """``src`` wrote ``data`` on connection ``conn`` to ``dst`` at ``at``."""
        key = (conn, src)
        if key in self._broken:
            self._scan(data, src, dst, at, "bytes")
            return
        buf = self._bufs.setdefault(key, bytearray())
        buf += data
        pos = 0
        n = len(buf)
        while pos < n:
            try:
                got = read_varint(buf, pos, 5)
            except ValueError:
                got = (0, pos)
            if got is None:
                break
            length, p = got
            if length == 0:     # not a frame stream (cannot happen with rcm.wire): scan what comes as bytes
                self._broken.add(key)
                self._scan(bytes(buf[pos:]), src, dst, at, "bytes")
                pos = n
                break
            if p + length > n:
                break
            self.scanned += 1
            if length > 1 and buf[p] in _FIXARRAY_FRAG and buf[p + 1] == wire.FRAG:
                self._frag(bytes(buf[p:p + length]), conn, src, dst, at)
            elif MARKER.search(buf, p, p + length):
                self._scan(bytes(buf[p:p + length]), src, dst, at, "frame")
            pos = p + length
        del buf[:pos]

    def forget(self, conn: int) -> None:
        """Connection ``conn`` is gone: its buffers may go too."""
        for k in [k for k in self._bufs if k[0] == conn]:
            del self._bufs[k]
        for f in [f for f in self._frags if f[0] == conn]:
            del self._frags[f]

    def delivered(self, site: str, payload: bytes, at: float) -> None:
        """``site`` delivered a message with this payload to its clients."""
        token = token_of(payload)
        if token is not None:
            self._check(token, site, at, "delivery", "a delivery")

    def stored(self, site: str, data: bytes, at: float, what: str = "log record") -> None:
        """``site`` wrote ``data`` (an encoded log record) to its disk."""
        for m in MARKER.finditer(data):
            self._check(m.group(1).decode(), site, at, "log", f"a {what}")

    # -- helpers -----------------------------------------------------------------------------------------------
    def _frag(self, body: bytes, conn: int, src: str, dst: str, at: float) -> None:
        try:
            frame = msgpack.unpackb(body, raw=False, strict_map_key=False)
            lane, offset, chunk = frame[1], frame[2], frame[3]
        except Exception:       # msgpack raises several types; a piece we cannot read is scanned as it is
            self._scan(body, src, dst, at, "frame")
            return
        if not isinstance(chunk, bytes):
            return
        key = (conn, src, lane if isinstance(lane, int) else -1)
        held = self._frags.get(key)
        if offset == 0 or held is None:
            held = self._frags[key] = bytearray()
        start = max(0, len(held) - _MARKER_MAX)
        held += chunk
        if MARKER.search(held, start):
            self._scan(bytes(held[start:]), src, dst, at, "FRAG piece")
        if len(frame) > 4:          # the last piece: the frame is whole
            del self._frags[key]

    def _scan(self, data: bytes, src: str, dst: str, at: float, what: str) -> None:
        for m in MARKER.finditer(data):
            token = m.group(1).decode()
            c = self.messages.get(token)
            if c is None or (dst in c.allowed and src in c.allowed):
                continue
            how = f"a {_frame_name(data) if what == 'frame' else what} from {src} to {dst}"
            self._check(token, dst, at, "frame", how)
            self._check(token, src, at, "frame", how)

    def _check(self, token: str, site: str, at: float, evidence: str, how: str) -> None:
        c = self.messages.get(token)
        if c is None or site in c.allowed:
            return
        self.events += 1
        key = (site, token, evidence)
        if key in self._seen:
            return
        self._seen.add(key)
        self.violations.append(Violation(
            "leak", site, token, f"at {at:.3f} {how} holds {token} ({c.label}), which only "
                                 f"{', '.join(sorted(c.allowed))} may hold"))


def _frame_name(body: bytes) -> str:
    """A frame's type for a report: ``DATA``, ``ROUTED DATA``, ``REPAIR``... (``frame`` if unreadable)."""
    try:
        frame = msgpack.unpackb(body, raw=False, strict_map_key=False)
        t = frame[0]
        name = wire.FRAME_NAMES.get(t, f"type {t}")
        if t == wire.ROUTED and len(frame) > 5:
            name += " " + wire.FRAME_NAMES.get(frame[5], f"type {frame[5]}")
        return f"{name} frame"
    except Exception:       # a report never fails on what it describes
        return "frame"


# -- journals ----------------------------------------------------------------------------------------------------
def check_journal_labels(records: Iterable[Mapping[str, Any]]) -> list[Violation]:
    """Labels in journals: every labeled site's ``send`` and ``deliver`` carry a label its clearance dominates
    (module docstring). ``records``: every site's, each site's in its own order."""
    recs = list(records)
    out: list[Violation] = []
    first: dict[str, Clearance] = {}
    sent: dict[str, Any] = {}
    for r in recs:
        kind = r.get("kind")
        if kind == J.CLEARANCE and r.get("site") not in first:
            try:
                first[r["site"]] = Clearance.from_record(r)
            except LabelError as e:
                out.append(Violation("leak", str(r.get("site")), "clearance", f"unreadable clearance record: {e}"))
        elif kind == J.SEND and r.get("label") is not None:
            sent[str(r.get("msg_id"))] = r["label"]
    current: dict[str, Clearance] = {}
    seen: dict[tuple[Clearance, Any], Label] = {}       # labels read, per scheme: most records repeat a few
    unjudged: set[str] = set()
    for r in recs:
        kind, site = r.get("kind"), r.get("site")
        if not isinstance(site, str):
            continue
        if kind == J.CLEARANCE:
            try:
                current[site] = Clearance.from_record(r)
            except LabelError:
                pass            # reported above or below: the one in force stays
            continue
        if kind not in (J.SEND, J.DELIVER):
            continue
        ref = str(r.get("msg_id"))
        label = r.get("label")
        cl = current.get(site) or first.get(site)
        if cl is None:
            if label is not None and site not in unjudged:
                unjudged.add(site)
                out.append(Violation("no-clearance", site, ref,
                                     f"{kind} of a labeled message at a site with no clearance record"))
            continue
        if label is None:
            out.append(Violation("unlabeled", site, ref, f"{kind} without a label in a labeled mission"))
            continue
        key = (cl, _norm(label))
        lb = seen.get(key)
        if lb is None:
            try:
                lb = seen[key] = cl.scheme.from_json(label)
            except LabelError as e:
                out.append(Violation("leak", site, ref, f"{kind} with a label the site's scheme cannot read: {e}"))
                continue
        if not cl.label.dominates(lb):
            out.append(Violation("leak", site, ref, f"at {float(r.get('at', 0.0)):.3f} {kind} of a {lb} message "
                                                    f"at a site cleared for {cl.label}"))
        if kind == J.DELIVER and ref in sent and _norm(sent[ref]) != _norm(label):
            out.append(Violation("relabeled", site, ref, f"delivered as {label}, sent as {sent[ref]}"))
    return out


def _norm(label: Any) -> Any:
    """A label's JSON value as a hashable key: level and sorted caveats, upper case (anything else: its repr)."""
    if isinstance(label, dict) and isinstance(label.get("caveats", []), list):
        return (str(label.get("level", "")).upper(), tuple(sorted(str(c).upper() for c in label.get("caveats", []))))
    return label if isinstance(label, str) else repr(label)


__all__ = ["MARKER", "Clearance", "Confined", "LeakWatch", "check_journal_labels", "marker",
           "token_of"]
