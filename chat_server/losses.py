"""Messages RCM reported lost at this site, and their repair: the ``missing`` notices (sans-IO).

RCM tells the chat server, after a disconnection, which messages of an origin
will not arrive here (``rcm.client.Missing``: seq ranges). ``Losses.reported``
journals them as ranges (``journal.missing_records``: records of at most 1,000
ranges, listing ``seqs`` only when few) and tells clients a count and ranges,
never a list as long as the outage (audit row 5); nothing turns the ranges into
numbers, whatever they name (security finding 2, second round). Repair (issue
18) may bring some back later: each comes as a delivery flagged ``repaired``;
``recovered`` takes it off the
ranges, and ``revisions`` (called on the edge's receipt timer) makes one revised
``missing`` notice per origin saying how many came back and what is still
missing. Repair may also answer with an expired *stub* (RCM's expiry: the
message existed and expired before it reached this site): ``expired`` takes
it off the ranges like ``recovered``, and the revised notice counts it as
``expired``, never as recovered. The ranges kept per origin are capped (``MISSING_RANGES_KEPT``) and
stored when they changed (``StoreLosses``), by ``revisions`` on the receipt
timer: once a tick, so a report or a repaired message costs what its own ranges
cost, never what is kept (a peer's MISSED frame of one range used to re-sort and
rewrite every kept range: 20,000 Python calls and a 260 KB write for 20 bytes,
found by faultinject.adversary's chat probe). A restarted server revises the
notice from what was stored (``restore``): a crash forgets at most the last
tick's changes to the kept ranges (the journal has every report).
"""
from __future__ import annotations

from rcm import ranges as _ranges

from . import protocol as P
from .actions import Action, Broadcast, JournalRecord, StoreLosses
from .journal import missing_records

MISSING_RANGES_SHOWN = 1000           # ranges in a `missing` frame to clients (``more`` says there were others)
MISSING_RANGES_KEPT = 10_000          # ranges remembered per origin to revise the notice when repair brings them


class Losses:
    def __init__(self) -> None:
        self.lost: dict[str, list[list[int]]] = {}      # origin -> RCM seq ranges reported missing, not repaired
        self.recovered_since: dict[str, int] = {}       # origin -> repaired since the last revised notice
        self.expired_since: dict[str, int] = {}         # origin -> answered by an expired stub since then
        self.changed = False                            # the kept ranges changed since they were stored

    def reported(self, origin: str, ranges: tuple[tuple[int, int], ...]) -> list[Action]:
        """RCM says these messages of ``origin`` will not arrive: journal and tell every client.

        Work and memory follow the number of ranges, never the number of messages they name: a
        peer may name 2^53 of them in one range (security finding 2, second round)."""
        out: list[Action] = []
        lost = _ranges.normalize((a, b) for a, b in ranges if a <= b)
        count = _ranges.count(lost)
        for batch, listed in missing_records(lost):
            out.append(JournalRecord("missing", dict(origin=origin, ranges=batch, listed=listed)))
        kept = self.lost.setdefault(origin, [])
        for first, last in lost:
            _ranges.merge(kept, first, last)
        if len(kept) > MISSING_RANGES_KEPT:
            self.lost[origin] = _ranges.cap(kept, MISSING_RANGES_KEPT)
        if not kept:
            del self.lost[origin]
        self.changed = True
        shown = lost[:MISSING_RANGES_SHOWN]
        out.append(Broadcast(P.missing(origin, count, [list(r) for r in shown], len(lost) > len(shown))))
        return out

    def recovered(self, origin: str, seq: int) -> list[Action]:
        """A message RCM had reported missing came back through repair (the kept ranges are stored at the
        next ``revisions``)."""
        kept = self.lost.get(origin)
        if kept is not None and _ranges.discard(kept, seq):
            if not kept:
                del self.lost[origin]
            self.changed = True
        self.recovered_since[origin] = self.recovered_since.get(origin, 0) + 1
        return []

    def expired(self, origin: str, seq: int, repaired: bool) -> list[Action]:
        """A message's expired stub arrived (RCM's expiry): if it had been reported missing here (``repaired``:
        RCM's flag; or still in the kept ranges), it is no longer missing, and the next revised notice counts
        it as expired."""
        kept = self.lost.get(origin)
        listed = kept is not None and _ranges.discard(kept, seq)
        if listed:
            if not kept:
                del self.lost[origin]
            self.changed = True
        if listed or repaired:
            self.expired_since[origin] = self.expired_since.get(origin, 0) + 1
        return []

    def still_missing(self) -> dict[str, int]:
        """Origin -> how many of its messages reported lost here are still missing (``welcome``'s ``missing``):
        a client that was away when a revised notice went out learns what came back."""
        return {o: _ranges.count(rs) for o, rs in sorted(self.lost.items()) if rs}

    def snapshot(self) -> dict[str, list[list[int]]]:
        return {o: [list(r) for r in rs] for o, rs in self.lost.items()}

    def restore(self, lost: object) -> None:
        """What a previous run stored (``StoreLosses``); anything malformed is ignored, as never reported."""
        if not isinstance(lost, dict):
            return
        for origin, rs in lost.items():
            try:
                kept = _ranges.normalize([[int(a), int(b)] for a, b in rs])
            except (TypeError, ValueError):
                continue
            if isinstance(origin, str) and kept:
                self.lost[origin] = _ranges.cap(kept, MISSING_RANGES_KEPT)

    def revisions(self) -> list[Action]:
        """The kept ranges to store if they changed, and the revised ``missing`` notices for origins some of
        whose lost messages came back or expired since the last call (one per origin per call, however many)."""
        out: list[Action] = []
        if self.changed:
            out.append(StoreLosses(self.snapshot()))
            self.changed = False
        for origin in sorted(self.recovered_since.keys() | self.expired_since.keys()):
            left = self.lost.get(origin, [])
            if not left:
                self.lost.pop(origin, None)
            shown = left[:MISSING_RANGES_SHOWN]
            out.append(Broadcast(P.missing(origin, _ranges.count(left), shown, len(left) > len(shown),
                                           recovered=self.recovered_since.get(origin, 0),
                                           expired=self.expired_since.get(origin, 0))))
        self.recovered_since.clear()
        self.expired_since.clear()
        return out
