"""What each IRC client was shown, kept across its reconnections and the server's restarts (``irc-shown.json``).

Theory of operation
-------------------
Per (user, address), per room, the highest delivery number shown to that client (``ShownMarks``): a session
updates its client's dict in place as it shows lines (``IrcSession.shown``; sessions in step have theirs
marked by the edge's steps before a save, irc_steps.py ``Steps.members``), so a client that reconnects is
replayed only what it was not shown. The front end (irc_server.py) writes the marks every ``MARKS_INTERVAL``
when they changed, and at its stop; a crash forgets at most one interval's.

A save must not hold the event loop: at 1,000 IRC clients, marking every member's place, encoding the marks
and writing the file took the loop about 3 ms every interval (issue 37), and a line said or delivered then
waited for it, so the saves were the IRC front end's slowest lines. Now the periodic save reads the marks
``SAVE_CHUNK`` clients a loop turn (``marked_in_turns``, ``text_in_turns``: each client's marks are whole,
and only grow, so a file read across turns is as right as one read at once) and a worker thread writes the
file (``write``). The file keeps the clients in the order they were last used (the oldest are forgotten past
``MARKS_MAX``), and a restart reads that order back.
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

log = logging.getLogger("chat_server.irc")
MARKS_MAX = 10_000          # (user, address) pairs kept; the oldest are forgotten (their next join replays)
SAVE_CHUNK = 200            # clients whose marks a save reads in one turn of the loop


def _body(chunk: dict[str, dict[str, int]]) -> str:
    """A chunk's entries as they appear inside the file's JSON object."""
    return json.dumps(chunk)[1:-1]


def _text(bodies: Iterable[str]) -> str:
    """The file's text: one JSON object of every chunk's entries (``_body``), in order."""
    return "{" + ", ".join(b for b in bodies if b) + "}"


class ShownMarks:
    """Per (user, address): room -> the highest delivery number shown to that client (see the module docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.marks: dict[str, dict[str, int]] = {}
        try:
            loaded = json.loads(path.read_text())
        except (OSError, ValueError):
            loaded = {}
        if isinstance(loaded, dict):
            for key, rooms in loaded.items():
                if isinstance(rooms, dict):
                    self.marks[str(key)] = {str(r): n for r, n in rooms.items() if isinstance(n, int)}
        self._written = _text([_body(self.marks)])

    def of(self, user: str, address: str) -> dict[str, int]:
        """The marks of one client: the dict its session updates in place."""
        key = f"{user}@{address}"
        marks = self.marks.pop(key, None)
        self.marks[key] = marks = marks if marks is not None else {}       # most recently used last
        while len(self.marks) > MARKS_MAX:
            self.marks.pop(next(iter(self.marks)))
        return marks

    def changed(self) -> str | None:
        """The marks as the file's text if they changed since the last write, else None: at once (at stop)."""
        text = _text([_body(self.marks)])
        return None if text == self._written else text

    async def text_in_turns(self) -> str | None:
        """``changed``, reading ``SAVE_CHUNK`` clients' marks a turn of the loop."""
        items = list(self.marks.items())
        bodies: list[str] = []
        for i in range(0, len(items), SAVE_CHUNK):
            if i:
                await asyncio.sleep(0)
            bodies.append(_body(dict(items[i:i + SAVE_CHUNK])))
        text = _text(bodies)
        return None if text == self._written else text

    def write(self, text: str) -> None:
        """Write ``text`` atomically: a crash leaves the old file. Blocking (a file's write and rename): the
        periodic save runs it in a worker thread, one at a time."""
        tmp = self.path.with_suffix(".tmp")
        try:
            tmp.write_text(text)
            os.replace(tmp, self.path)
            self._written = text
        except OSError as e:
            log.warning("could not write %s: %s", self.path, e)

    def save(self) -> None:
        """Write the marks now if they changed (at stop)."""
        text = self.changed()
        if text is not None:
            self.write(text)


async def marked_in_turns(members: list[Any]) -> None:
    """Each member's place in its step marked shown in its session (``step_shown``), ``SAVE_CHUNK`` a turn."""
    for i in range(0, len(members), SAVE_CHUNK):
        if i:
            await asyncio.sleep(0)
        for m in members[i:i + SAVE_CHUNK]:
            m.step_shown()
