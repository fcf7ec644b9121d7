"""Text every format of the suite can hold, and how the suite writes a duration for people.

JSON's ``\\ud800`` escape decodes to a lone surrogate, a code point UTF-8 cannot
encode: the chat protocol, the journal, SQLite, msgpack and every copy of the
order key's sortable form encode text as UTF-8, so such text is refused where
it comes in (``chat_server.protocol``, ``ordering.keys.key_problem``).
"""
from __future__ import annotations


def lone_surrogate(text: str) -> bool:
    """Does ``text`` hold a code point UTF-8 cannot encode (a lone surrogate)?"""
    if text.isascii():
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def action_text(user: str, text: str) -> str:
    """An action (IRC's ``/me waves``, the web UI's and TUI's ``/me``) as every client reads it: ``* user waves``."""
    return f"* {user} {text}"


def action_of(user: str, text: str) -> str | None:
    """What ``user`` did, if ``text`` is one line said as an action of theirs (``action_text``); else None."""
    mark = f"* {user} "
    if len(text) > len(mark) and text.startswith(mark) and "\n" not in text:
        return text[len(mark):]
    return None


def duration(s: float) -> str:
    """``250 ms``, ``95 s``, ``12 min``, ``3.5 h``, ``4.2 days``: the TUI's ages and waits, the servers' logs."""
    if s < 1:
        return f"{s * 1000:.0f} ms"
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.0f} min"
    if s < 172800:
        return f"{s / 3600:.1f} h"
    return f"{s / 86400:.1f} days"
