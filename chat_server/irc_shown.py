"""What an IRC session was shown: in step with a fan-out, and what showing a message line notes.

The part of ``irc.IrcSession`` that a fan-out's hot path reads. A session *in step* (``in_step``,
``in_step_run``) shows a fanned-out line from the bytes every reader in step shares (irc_fanout.py
``FanLine.stepped``) with no lookup of its own state but its tail, the line it showed last; what showing it
notes waits for the next frame or command (``_settle``). The edge's steps (irc_steps.py) borrow that place
(``lend_tail``, ``return_tail``) to show many sessions a line as one. Showing any line notes it
(``_showing``, ``_noted``): its delivery number (``shown``, which the front end keeps across reconnections),
its time (the next line's ORDER mark), its text (replies' quotes) and, for another user's urgent line, that
it waits for ``!ack``.
"""
from __future__ import annotations

from typing import Any

from .irc_commands import IrcCommands
from .irc_fanout import FanLine, FanRun, StepKey, line_of


class IrcShown(IrcCommands):
    """What a session was shown (see the module docstring); ``irc.IrcSession`` adds the server's frames."""

    # --- in step: a fan-out's line shown with no lookup of the session's own state ---------------------------
    def in_step(self, line: FanLine) -> bytes | None:
        """``line``'s bytes for this session if it is in step with the fan-out, else None (``on_frame``'s
        full path). The edge asks this first for a fanned-out message (``fanout_line``), the whole of a
        fan-out's work per recipient when it answers.

        In step: the last line this session showed is the one fanned out before ``line`` in its room
        (``_tail``), shown from the shared rendering (no nick list change, not its own, not urgent: ``_show``
        keeps it), and the session has done nothing since: every frame and command but a fan-out's line
        settles the tail first (``_settle``). Its state for the room is then what showing the tail left, so
        ``line`` needs no lookup: the channel is still joined, its nick list is the one the tail saw, the line
        above is the tail (the ORDER mark's rendering key), and what showing ``line`` notes is deferred to the
        next settle, but for the delivery number the front end saves (``shown``, kept at once)."""
        if line.prev is not self._tail or line.prev is None or self.closed:
            return None
        user = line.user
        if user not in self._tail_nicks or user == self.nick:
            return None
        data = line.stepped.get(self._tail_render)
        if data is None:
            return None
        self._tail = line
        self._mark(line.room, line.n)
        return data

    def in_step_run(self, run: FanRun, i: int) -> tuple[bytes, int] | None:
        """``in_step`` for every line chained from ``run``'s line ``i`` at once: their bytes, and one past the
        last of them; None if this session is not in step at line ``i`` or would leave step before the chain's
        end (an author its nick list lacks, its own line, a line no reader in step has shown yet). The same
        as asking ``in_step`` line by line: in step at a line, the session is at the next chained one too,
        with the same nick list and rendering (irc_fanout.py ``FanRun``)."""
        line = run.lines[i]
        if line is None or line.prev is not self._tail or line.prev is None or self.closed:
            return None
        users = run.users(i)
        if self.nick in users or not users <= self._tail_nicks:
            return None
        data = run.joined(i, self._tail_render)
        if data is None:
            return None
        end = run.ends[i]
        self._tail = run.lines[end - 1]
        self._mark(line.room, run.top(i))
        return data, end

    def _settle(self) -> None:
        """Note the tail as shown (its time for the next line's ORDER mark): the session leaves step."""
        tail = self._tail
        if tail is not None:
            self._tail = None
            self._noted(tail.room, tail)

    def lend_tail(self) -> tuple[FanLine, Any, StepKey] | None:
        """The place in step handed to the edge's steps (irc_steps.py), which show this session the lines that
        follow as ``in_step`` would: the tail, its nick list and rendering, moved out (the session is out of
        step on its own until ``return_tail``); None if it is not in step."""
        tail = self._tail
        if tail is None or self.closed:
            return None
        self._tail = None
        return tail, self._tail_nicks, self._tail_render

    def return_tail(self, line: FanLine, nicks: Any, render: StepKey) -> None:
        """Back from a step that showed this session the lines up to ``line`` in step since ``lend_tail``: in
        step at it on its own, as if it had shown them itself."""
        self._tail, self._tail_nicks, self._tail_render = line, nicks, render
        self.mark_shown(line)

    def mark_shown(self, line: FanLine) -> None:
        """``line``'s delivery number as shown (``shown``, which the front end saves), if it is higher."""
        self._mark(line.room, line.n)

    def _mark(self, room: str, n: int | None) -> None:
        """Delivery ``n`` of ``room`` as shown, if it is higher (the one place ``shown`` grows)."""
        if n is not None and n > self.shown.get(room, -1):
            self.shown[room] = n

    def _is_own(self, f: dict[str, Any]) -> bool:
        """A line this user sent from this site (never marked late to them)."""
        return f.get("user") == self.nick and f.get("origin") == self.site

    # --- what showing a line notes ---------------------------------------------------------------

    def _was_shown(self, room: str, m: dict[str, Any]) -> bool:
        n = m.get("n")
        return isinstance(n, int) and n <= self.shown.get(room, -1)

    def _showing(self, room: str, m: dict[str, Any]) -> None:
        """Note a message as shown: its delivery number (rejoins), its time (the next line's ORDER mark), its
        text (replies' quotes), and, for an urgent one of another user that we have not acknowledged, that it
        waits for ``!ack``."""
        self._noted(room, line_of(m))

    def _noted(self, room: str, line: FanLine) -> None:
        m = line.frame
        if line.sent is not None:
            self._above[room] = line.sent
        self._mark(room, line.n)
        if line.quotes is not self.quotes:          # once per front end (its sessions share one Quotes)
            self.quotes.add(m)
            line.quotes = self.quotes
        if line.urgent and self.nick not in line.acked_by and not self._is_own(m):
            assert line.msg_id is not None
            self._urgent[line.msg_id] = room
            while len(self._urgent) > 1024:
                self._urgent.pop(next(iter(self._urgent)))
