"""Message expiry as the operator sees it (a ``ChatState`` mixin, sans-IO).

Theory of operation
-------------------
A ``say`` may carry ``expires_in`` (seconds, the server's bounds:
``chat_server.protocol.EXPIRES_IN_MIN``/``EXPIRES_IN_MAX``); ``/expire TIME
TEXT`` sends one line with it (TIME: ``90``, ``90s``, ``15m``, ``2h``, ``1d``;
``parse_duration``). The server hands the message to RCM with ``expires_at``
(Unix seconds) and every ``message`` frame carries it; a frame the server
built after it (history, search, a resume) says ``expired: true`` too.

A message entry holds ``expires_at`` (None: never) and ``expired``: set when
its frame says so or when it arrives past ``expires_at``, else by
``expire_messages(now)``, which the front ends call on their once-a-second
timer and which returns an ``Expired`` change (an ``Updated``: the full-screen
client redraws the line; the line client prints that it expired) for each
line whose time has come. ``expiring`` lists the lines still to mark, so a
tick costs nothing until the first is due.

What an expired line shows (docs/tui.md): dimmed, marked ``[EXPIRED]``; its
text stays readable for those who already had it (the server keeps serving it,
marked, in history and search). A message that expired before it reached this
site never comes here: the server shows nothing of it, and a ``missing``
notice it answers counts it as expired (losses.py).
"""
from __future__ import annotations

import math
import re
from typing import Any

from chat_server.protocol import EXPIRES_IN_MAX, EXPIRES_IN_MIN

from .model import Change, Expired, MessageEntry

_DURATION = re.compile(r"^([1-9][0-9]{0,6})([smhd]?)\Z")
_UNIT = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
DURATION_HELP = "TIME: 90, 90s, 15m, 2h or 1d; at most 7 days"


def parse_duration(word: str) -> float | None:
    """``/expire``'s TIME in seconds, or None when it is not a duration the server takes."""
    m = _DURATION.match(word.strip())
    if m is None:
        return None
    seconds = float(int(m.group(1)) * _UNIT[m.group(2)])
    return seconds if EXPIRES_IN_MIN <= seconds <= EXPIRES_IN_MAX else None


def expires_at_of(f: dict[str, Any]) -> float | None:
    """A frame's ``expires_at``: a finite number of Unix seconds, else None."""
    v = f.get("expires_at")
    if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
        return float(v)
    return None


class ExpiryState:
    """``ChatState``'s part for expiry."""

    # Provided by ChatState (state.py):
    by_msg_id: dict[str, MessageEntry]

    def __init__(self) -> None:
        self.expiring: dict[str, float] = {}          # msg_id -> expires_at of lines not marked expired yet

    def _expiry_fields(self, e: MessageEntry, f: dict[str, Any], now: float) -> None:
        """A message entry's expiry from its frame, seen at ``now``."""
        e.expires_at = expires_at_of(f)
        e.expired = f.get("expired") is True or (e.expires_at is not None and now >= e.expires_at)
        if e.expires_at is not None and not e.expired and e.msg_id:
            self.expiring[e.msg_id] = e.expires_at

    def expire_messages(self, now: float) -> list[Change]:
        """Mark the lines whose ``expires_at`` ``now`` passed (the front ends call it on their timer)."""
        due = [m for m, at in self.expiring.items() if now >= at]
        out: list[Change] = []
        for msg_id in due:
            del self.expiring[msg_id]
            e = self.by_msg_id.get(msg_id)
            if e is not None and not e.expired:
                e.expired = True
                out.append(Expired(e.room, e))
        return out
