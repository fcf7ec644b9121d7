"""What a channel's acknowledged frames carried, so a gap found later can still be named (sans-IO).

Theory of operation
-------------------
A sender drops a frame from its buffer once the peer acknowledges it. On a
relay path that acknowledgement crosses other sites, and a compromised relay
can forge one: the origin then forgets frames the destination never got, and
the next SYNC carries the destination past them. The destination notices the
jump (its frontier was below the SYNC's start) and reports it (a relayed
ACK with the GAP flag, ``rcm.routing.relay``); the origin must then say which
messages were lost, as a MISSED notice, so they are reported and repaired,
never silently skipped.

So each channel remembers, for its last acknowledged frames, which message
sequence numbers they carried: DATA frames by their ``msg_seq``, MISSED frames
by the ranges they named (a lost notice of losses is a loss too). Runs of
DATA frames whose link and message numbers both rise by one are one entry, so
a steady stream costs one entry however long. At most ``RUNS`` entries are
kept (about the last ``max_buffered_messages`` frames in practice); a gap
reaching further back than that is named only as far as remembered, and the
rest is counted (``forgotten``) for the log.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from rcm import ranges

RUNS = 4096
"""Most entries kept per channel."""


@dataclass(slots=True)
class _Entry:
    first: int                  # link seqs first..last
    last: int
    msgs: list[list[int]]       # message sequence numbers they carried (canonical ranges)
    linear: bool                # a DATA run: link first + i carried msgs[0][0] + i


class Released:
    """The message numbers carried by a channel's acknowledged frames, newest ``RUNS`` entries."""

    __slots__ = ("entries", "floor")

    def __init__(self, floor: int = 0) -> None:
        self.entries: deque[_Entry] = deque()
        self.floor = floor          # frames up to here were acknowledged and are forgotten (or before a restart)

    def data(self, link_seq: int, msg_seq: int) -> None:
        """An acknowledged DATA frame (in link order)."""
        e = self.entries[-1] if self.entries else None
        if e is not None and e.linear and e.last + 1 == link_seq and e.msgs[0][1] + 1 == msg_seq:
            e.last = link_seq
            e.msgs[0][1] = msg_seq
            return
        self._add(_Entry(link_seq, link_seq, [[msg_seq, msg_seq]], True))

    def missed(self, link_seq: int, named: list[list[int]]) -> None:
        """An acknowledged MISSED frame naming ``named``."""
        self._add(_Entry(link_seq, link_seq, ranges.normalize(named), False))

    def between(self, after: int, upto: int) -> tuple[list[list[int]], int]:
        """The message numbers carried by frames ``after + 1 .. upto``, and how many of those frames are
        older than anything remembered (their messages cannot be named)."""
        out: list[list[int]] = []
        for e in self.entries:
            if e.last <= after or e.first > upto:
                continue
            if e.linear:
                lo, hi = max(e.first, after + 1), min(e.last, upto)
                base = e.msgs[0][0] - e.first
                out.append([lo + base, hi + base])
            else:
                out.extend(e.msgs)
        forgotten = max(0, min(upto, self.floor) - after)
        return ranges.normalize(out), forgotten

    def _add(self, e: _Entry) -> None:
        self.entries.append(e)
        if len(self.entries) > RUNS:
            self.floor = max(self.floor, self.entries.popleft().last)
