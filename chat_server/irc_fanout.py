"""A fan-out's shared readings for the IRC front end: each message frame read once for every session.

A fan-out hands every session the same frame object (irc_server.py); the first session to read it makes its
``FanLine`` (``fanout_line``), which the others reuse, with the lines formatted per rendering. ``FanLine.prev``
links each line to the one fanned out before it in its room, so that a session *in step* (irc.py,
``IrcSession.in_step``) takes a line's bytes with no lookup of its own state. A held turn fans out runs of
lines (sessions.Sessions.fan_held): ``FanRun`` reads a run once for all its sessions, and a session in step
at a line of it takes every line chained after it at once (``IrcSession.in_step_run``).
"""
from __future__ import annotations

from typing import Any

from contracts.labels import Label
from contracts.precedence import URGENT

from .irc_messages import Style, sent_at
from .irc_state import Action

# How a line is rendered for a reader: (its style, the sent_at of the line above, clearance).
Rendering = tuple[Style, float | None, Label | None]
# What an in-step reader's bytes of a line depend on: (its style, clearance).
StepKey = tuple[Style, Label | None]


class FanLine:
    """What every session of a fan-out reads from one message frame, read once: a fan-out hands each session
    the same frame object (irc_server.py), so the first session reads it and formats its lines for its
    rendering, and the others reuse both; what stays per session is its own state (``_showing``).

    ``prev`` is the line fanned out in the same room before this one (``fanout_line``): a session whose
    last line shown was that one, and which did nothing since, is *in step* and shows this one with no
    lookup of its own state (``IrcSession.in_step``), from ``stepped``: its bytes as a reader in step sees
    them (the line above it is ``prev``), per (style, clearance)."""

    __slots__ = ("frame", "room", "n", "sent", "author", "user", "origin", "msg_id", "urgent", "acked_by",
                 "quotes", "rendered", "prev", "plain", "stepped")

    def __init__(self, f: dict[str, Any]) -> None:
        self.frame = f
        self.room = str(f.get("room", ""))
        n = f.get("n")
        self.n = n if isinstance(n, int) else None
        self.sent = sent_at(f)
        self.author = f.get("user")                 # as the frame has it
        self.user = str(f.get("user", "?"))
        self.origin = f.get("origin")
        msg_id = f.get("msg_id")
        self.msg_id = msg_id if isinstance(msg_id, str) else None
        self.urgent = f.get("precedence") in URGENT and self.msg_id is not None
        self.acked_by = frozenset(u for a in f.get("acknowledgements") or () if isinstance(a, dict)
                                  and isinstance(u := a.get("user"), str)) if self.urgent else frozenset()
        self.quotes: Any = None                     # the Quotes that remembered it (a front end's, shared)
        self.rendered: dict[Rendering, list[Action]] = {}
        self.prev: FanLine | None = None
        self.stepped: dict[StepKey, bytes] = {}
        # What showing it changes in a session is the same for every reader: its time and number, nothing
        # waiting for ``!ack``. Only such a line can be shown in step, or be the line a session is in step at.
        self.plain = not self.urgent and self.sent is not None and self.n is not None


_fanned: dict[int, FanLine] = {}                   # id(frame) -> its shared reading: the last fan-outs' lines
FANNED_KEPT = 256                               # (a held turn fans out a run of lines: each is looked up again)
_room_last: dict[str, FanLine] = {}                  # room -> the line last fanned out in it (``FanLine.prev``)


def fanout_line(f: dict[str, Any]) -> FanLine:
    """The shared reading of a fanned-out message frame: made by the fan-out's first session, which also links
    it to the room's line before it. (Several servers in one process share the table: a line's ``prev`` may
    then be another server's, and the sessions it does not match only take the full path.)"""
    line = _fanned.get(id(f))
    if line is None or line.frame is not f:
        line = _fanned[id(f)] = FanLine(f)            # (a kept line holds its frame: its id is not reused)
        if len(_fanned) > FANNED_KEPT:
            _fanned.pop(next(iter(_fanned))).prev = None     # the chain ends there: older lines are freed
        line.prev = _room_last.get(line.room)
        _room_last[line.room] = line
    return line


def line_of(f: dict[str, Any]) -> FanLine:
    """A fan-out's shared reading of ``f``, or a reading of its own (history, held lines)."""
    line = _fanned.get(id(f))
    return line if line is not None and line.frame is f else FanLine(f)


class FanRun:
    """A run of fanned-out frames' lines (None where a frame is not a fanned-out message), read once for every
    session: from each position, how far the lines follow one another in their room (each the ``prev`` of the
    next), their authors, their top delivery number, and their in-step bytes joined per ``StepKey``.

    A session in step at position ``i`` is in step at each line chained after it in turn (showing a line in
    step makes it the session's tail, and the next line's ``prev`` is that line), so it may take them all
    at once: ``IrcSession.in_step_run``. Bytes are joined once every line of the chain has its in-step bytes
    for the key (the first reader of a line in step makes them), and kept from then on."""

    __slots__ = ("lines", "ends", "_users", "_top", "_joined")

    def __init__(self, lines: list[FanLine | None]) -> None:
        self.lines = lines
        n = len(lines)
        ends = [0] * n
        # No chains in a run longer than the lines kept: reading its last lines may have cut its first ones'
        # links (``fanout_line``), and a session showing it takes each line in turn.
        chained = n <= FANNED_KEPT
        for i in range(n - 1, -1, -1):
            nxt = lines[i + 1] if i + 1 < n else None
            ends[i] = (ends[i + 1] if chained and nxt is not None and lines[i] is not None and nxt.prev is lines[i]
                       else i + 1)
        self.ends = ends                # one past the last line chained from each position
        self._users: dict[int, frozenset[str]] = {}
        self._top: dict[int, int | None] = {}
        self._joined: dict[tuple[int, StepKey], bytes] = {}

    def users(self, i: int) -> frozenset[str]:
        """The authors of the chain from ``i``."""
        u = self._users.get(i)
        if u is None:
            u = self._users[i] = frozenset(line.user for line in self.lines[i:self.ends[i]] if line is not None)
        return u

    def top(self, i: int) -> int | None:
        """The highest delivery number in the chain from ``i`` (None if it has none)."""
        if i not in self._top:
            ns = [line.n for line in self.lines[i:self.ends[i]] if line is not None and line.n is not None]
            self._top[i] = max(ns) if ns else None
        return self._top[i]

    def joined(self, i: int, key: StepKey) -> bytes | None:
        """The chain from ``i`` as a reader in step with ``key`` sees it, or None while a line of it has no
        in-step bytes for ``key``."""
        data = self._joined.get((i, key))
        if data is None:
            parts = []
            for line in self.lines[i:self.ends[i]]:
                part = line.stepped.get(key) if line is not None else None
                if part is None:
                    return None
                parts.append(part)
            data = self._joined[(i, key)] = b"".join(parts)
        return data
