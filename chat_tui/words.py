"""Words both terminal clients put around numbers: the one home of plural phrases and lateness figures.

Every count an operator reads ("1 message", "3 members", "1 result") goes
through ``plural``, so no line says "1 messages". ``late_mark`` is the lateness
figure of a late line, the same rule as the web client (``words.js``) and IRC:
seconds from sending to arrival at this site, rounded, known only for a line
that arrived while the client was connected.
"""
from __future__ import annotations

from typing import Any

from .safe_text import printable


def plural(n: object, noun: str, many: str | None = None) -> str:
    """``1 message``, ``2 messages``, ``0 messages`` (``many``: the plural when it is not ``noun`` + s)."""
    return f"{n} {noun if n == 1 else (many or noun + 's')}"


def one_or_many(n: object, one: str, many: str) -> str:
    """The word that agrees with ``n``, without the number: ``was``/``were``, ``it``/``them``."""
    return one if n == 1 else many


def late_mark(late_by: float | None) -> str:
    """``LATE +22s`` when the delay is known, else ``LATE``."""
    return "LATE" if late_by is None else f"LATE +{round(late_by)}s"


def order_mark(seconds: int) -> str:
    """``ORDER -62s``: the line's time reads that much earlier than the line above it, yet it is placed after it
    (chat_server.protocol.out_of_time says how much; docs/chat-protocol.md "Order against time")."""
    return f"ORDER -{seconds}s"


ORDER_HELP = ("[ORDER -62s] on a line: sent 62 s before the line above, yet placed after it: lines follow the "
              "global order every site agrees on, not the senders' clocks")


def count_of(value: object) -> int:
    """A count a frame carries (anything else is 0)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def error_reason(f: dict[str, Any]) -> str:
    """An ``error`` frame's message for the operator, without the request's name the server starts it with
    (``join: room 'x' is private`` after "cannot join x" would name the request twice), made printable."""
    text = str(f.get("message") or f.get("code") or "error")
    req = f.get("request")
    kind = req.get("type") if isinstance(req, dict) else None
    if isinstance(kind, str) and text.startswith(f"{kind}: "):
        text = text[len(kind) + 2:]
    return printable(text)
