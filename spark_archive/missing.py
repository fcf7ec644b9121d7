"""Missing reports as seq ranges: looked up by message, never turned into numbers.

Theory of operation
-------------------
A ``missing`` record names the messages of an ``origin`` its site will never
get, as ``ranges`` of seqs with their ``count`` (Contract 3, second round; the
first round's records list ``seqs``, and a record with ``ranges`` is read by
them alone). One range may name more messages than any journal holds (a peer's
MISSED frame once named 2^53 of them), so both plans work on the ranges:

* ``build_pieces`` cuts each origin's reported ranges into disjoint pieces, each
  with the sites that reported it and each site's earliest report (two sweeps
  over the ranges' ends: the work follows the ranges, not the numbers);
* a message is looked up in its origin's pieces by its key (``msg_key``): the
  driver plan bisects (``Lookup``), the Spark plan joins on (origin, bucket)
  with the piece's bounds as the condition (``bucket_rows`` cuts each origin's
  pieces into at most ``BUCKETS`` buckets, plus one per piece);
* the messages reported missing that no journal holds (``lost_messages``) are
  the runs between the seen messages of each piece (``lost_table``): the table
  lists the first ``LOST_LISTED`` of them by (origin, seq), the summary counts
  them all.

A message's key is its ``msg_id`` read as ``<origin>:<seq>``, the seq written
as ``str(int)`` writes it (``msg_key``), since the first round's reports named
messages by that ``msg_id``. Pure Python: the reference and the Spark plan's
driver share it.
"""
from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from contracts.journal import LONG_MAX, LONG_MIN, earliest

LOST_LISTED = 10_000
"""Lost messages listed in the ``lost_messages`` table (the first, by origin and seq)."""
BUCKETS = 1024
"""Most buckets an origin's pieces span in the Spark plan's range join."""

Report = tuple[str, str, float, list[tuple[int, int]]]      # origin, site, at, canonical ranges
# origin, bucket, lo, hi, sites, reports ([site, earliest at] each): a row of the Spark plan's range join
BucketRow = tuple[str, int, int, int, list[str], list[list[object]]]


class Piece(NamedTuple):
    """Seqs ``lo..hi`` of ``origin``, reported missing by the same sites: ``reports`` are
    (site, earliest at), by site."""

    origin: str
    lo: int
    hi: int
    reports: tuple[tuple[str, float], ...]

    @property
    def sites(self) -> list[str]:
        return [site for site, _ in self.reports]


def build_pieces(reports: Iterable[Report]) -> list[Piece]:
    """Every origin's reported seqs as disjoint pieces, by (origin, lo)."""
    spans: dict[tuple[str, str], list[tuple[int, int, float]]] = {}
    for origin, site, at, ranges in reports:
        spans.setdefault((origin, site), []).extend((lo, hi, at) for lo, hi in ranges)
    per_origin: dict[str, list[tuple[int, int, str, float]]] = {}
    for (origin, site), ss in spans.items():
        per_origin.setdefault(origin, []).extend((lo, hi, site, at) for lo, hi, at in earliest(ss))
    out: list[Piece] = []
    for origin in sorted(per_origin):
        # Each site's pieces are disjoint: at a bound, its piece that ends there leaves before one begins.
        events = sorted([(hi + 1, 0, site, at) for lo, hi, site, at in per_origin[origin]]
                        + [(lo, 1, site, at) for lo, hi, site, at in per_origin[origin]])
        active: dict[str, float] = {}
        first = len(out)
        for k, (pos, begins, site, at) in enumerate(events):
            if begins:
                active[site] = at
            else:
                del active[site]
            nxt = events[k + 1][0] if k + 1 < len(events) else None
            if nxt is None or nxt == pos or not active:
                continue
            site_reports = tuple(sorted(active.items()))
            prev = out[-1] if len(out) > first else None
            if prev is not None and prev.hi == pos - 1 and prev.reports == site_reports:
                out[-1] = prev._replace(hi=nxt - 1)
            else:
                out.append(Piece(origin, pos, nxt - 1, site_reports))
    return out


def msg_key(msg_id: str) -> tuple[str, int] | None:
    """``msg_id`` as (origin, seq) when it is ``<origin>:<seq>`` with the seq as ``str(int)`` writes a long."""
    origin, colon, tail = msg_id.rpartition(":")
    if not colon:
        return None
    try:
        seq = int(tail)
    except ValueError:
        return None
    return (origin, seq) if str(seq) == tail and LONG_MIN <= seq <= LONG_MAX else None


class Lookup:
    """The piece holding a message, by bisection in its origin's pieces."""

    def __init__(self, pieces: Sequence[Piece]) -> None:
        self._pieces: dict[str, list[Piece]] = {}
        for p in pieces:
            self._pieces.setdefault(p.origin, []).append(p)
        self._starts = {o: [p.lo for p in ps] for o, ps in self._pieces.items()}

    def piece(self, msg_id: str) -> Piece | None:
        key = msg_key(msg_id)
        if key is None or key[0] not in self._starts:
            return None
        origin, seq = key
        i = bisect.bisect_right(self._starts[origin], seq) - 1
        p = self._pieces[origin][i] if i >= 0 else None
        return p if p is not None and p.hi >= seq else None

    def reports(self, msg_id: str) -> dict[str, float]:
        """Site -> earliest report of the message (empty: none reported it)."""
        p = self.piece(msg_id)
        return dict(p.reports) if p is not None else {}


def bucket_rows(pieces: Sequence[Piece]) -> tuple[list[BucketRow], dict[str, int]]:
    """(origin, bucket, lo, hi, sites, reports) rows for the Spark plan's range join, and each
    origin's shift: a seq's bucket is ``seq >> shift``, at most ``BUCKETS`` over its origin's pieces."""
    spans: dict[str, tuple[int, int]] = {}
    for p in pieces:
        lo, hi = spans.get(p.origin, (p.lo, p.hi))
        spans[p.origin] = (min(lo, p.lo), max(hi, p.hi))
    shifts = {o: max(0, (hi - lo).bit_length() - BUCKETS.bit_length() + 1) for o, (lo, hi) in spans.items()}
    rows = []
    for p in pieces:
        shift = shifts[p.origin]
        for bucket in range(p.lo >> shift, (p.hi >> shift) + 1):     # at most BUCKETS + 1 over all pieces
            rows.append((p.origin, bucket, p.lo, p.hi, p.sites, [list(r) for r in p.reports]))
    return rows, shifts


def seen_runs(piece: Piece, seen: Sequence[int]) -> list[tuple[int, int]]:
    """The runs of ``piece`` before each seen seq (``seen``: the piece's seen seqs, sorted): what
    the Spark plan's window computes."""
    out = []
    prev = piece.lo - 1
    for s in seen:
        if s > prev + 1:
            out.append((prev + 1, s - 1))
        prev = s
    return out


def lost_table(pieces: Sequence[Piece], seen: dict[tuple[str, int], tuple[int, int]],
               runs: Iterable[tuple[str, int, int, int]],
               listed: int = LOST_LISTED) -> tuple[list[dict[str, Any]], int]:
    """(The ``lost_messages`` rows, how many messages were lost in all).

    ``seen``: (origin, piece lo) -> (messages seen in the piece, the highest seq seen);
    ``runs``: (origin, piece lo, first, last) unseen before a seen seq of the piece, at least
    the first ``listed`` of them by (origin, first). The runs after the last seen seq of a
    piece (or the whole piece) are added here."""
    by_lo = {(p.origin, p.lo): p for p in pieces}
    all_runs = [(o, first, last, lo) for o, lo, first, last in runs]
    total = 0
    for p in pieces:
        count, top = seen.get((p.origin, p.lo), (0, p.lo - 1))
        total += p.hi - p.lo + 1 - count
        if top < p.hi:
            all_runs.append((p.origin, top + 1, p.hi, p.lo))
    rows: list[dict[str, Any]] = []
    for origin, first, last, lo in sorted(all_runs)[:listed]:
        sites = by_lo[(origin, lo)].sites
        for seq in range(first, min(last, first + listed - len(rows) - 1) + 1):
            rows.append({"msg_id": f"{origin}:{seq}", "origin": origin, "seq": seq, "reported_by": sites})
        if len(rows) >= listed:
            break
    return rows, total


def lost_in_memory(pieces: Sequence[Piece], seen_ids: Iterable[str],
                   listed: int = LOST_LISTED) -> tuple[list[dict[str, Any]], int]:
    """``lost_table`` from the msg_ids of every message of the transcript (the driver plan)."""
    lookup = Lookup(pieces)
    per_piece: dict[tuple[str, int], list[int]] = {}
    for msg_id in seen_ids:
        p = lookup.piece(msg_id)
        if p is not None:
            key = msg_key(msg_id)
            assert key is not None
            per_piece.setdefault((p.origin, p.lo), []).append(key[1])
    seen: dict[tuple[str, int], tuple[int, int]] = {}
    runs = []
    for p in pieces:
        seqs = sorted(per_piece.get((p.origin, p.lo), ()))
        if seqs:
            seen[(p.origin, p.lo)] = (len(seqs), seqs[-1])
            runs += [(p.origin, p.lo, a, b) for a, b in seen_runs(p, seqs)]
    return lost_table(pieces, seen, runs, listed)
