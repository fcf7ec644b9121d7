"""Text from the server made safe to show on a terminal: one pure function both clients use.

Anything a user or a server controls (texts, user, room and site names, error
messages, close reasons) may hold characters that a terminal obeys instead of
showing: a newline starts what looks like a message of its own
(``commander@A: ABORT``), ESC and C1 codes start escape sequences (move the
cursor, clear the screen, retitle the window), and the bidi overrides and
isolates reorder a line as it is drawn. ``printable`` replaces each of them by a
visible escape (``\\n``, ``\\x1b``, ``\\u202e``), so every character that reaches
the terminal stands for itself.

Backslashes are left alone, so ``printable`` is idempotent: a line may pass it
twice (once where a notice is composed, once where it is printed) and read the
same. It is for display only, not a reversible encoding.

The Textual client also treats these strings as text, never as markup
(``rich.text.Text`` or ``markup=False``): ``[@click=...]`` in a message or a
server's error stays what it says.
"""
from __future__ import annotations

import re

# C0 controls (newline, tab and ESC included), DEL, C1 controls; the line and paragraph
# separators (line breaks to some renderers and to str.splitlines); the bidi marks,
# embeddings, overrides and isolates (U+061C, U+200E-U+200F, U+202A-U+202E, U+2066-U+2069);
# lone surrogates, which a JSON frame can carry and which cannot be encoded for output.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(m: re.Match[str]) -> str:
    c = m.group()
    named = _NAMED.get(c)
    if named is not None:
        return named
    code = ord(c)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: object) -> str:
    """``text`` as one line with every control, line break and bidi control shown as an escape."""
    return _UNSAFE.sub(_escape, str(text))


def printable_lines(text: str) -> list[str]:
    """The lines of a multi-line notice (split at ``\\n`` only), each made ``printable``."""
    return [printable(line) for line in text.split("\n")]
