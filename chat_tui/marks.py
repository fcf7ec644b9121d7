"""A message's text cut into runs for drawing: @mentions and search highlights (pure).

``@user`` names that user at any site, ``@user@site`` only at that site (the
chat server's rule; the server lists the users of its own site a message
names in ``message.mentions``, which decides whether a line is *for* the
operator; these spans only say where to draw the marks). Search highlights
are ``[start, end)`` spans in code points, which Python strings index
directly. Front ends pass each run through ``safe_text.printable`` and give it
a style; nothing here is markup.
"""
from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

_MENTION = re.compile(r"(?<![\w@])@([A-Za-z][A-Za-z0-9_.-]{0,31})(?:@([A-Za-z][A-Za-z0-9_.-]{0,31}))?")


@dataclass(frozen=True, slots=True)
class Run:
    text: str
    hit: bool = False               # inside a search highlight
    mention: str | None = None      # "me" | "other" | None


def mention_spans(text: str, user: str | None, site: str | None) -> list[tuple[int, int, bool]]:
    """``(start, end, names_me)`` of each mention in ``text``."""
    out = []
    for m in _MENTION.finditer(text):
        name, at = m.group(1).rstrip(".-"), (m.group(2) or "").rstrip(".-")
        if not name:
            continue
        end = m.start() + 1 + len(name) + (1 + len(at) if at else 0)
        out.append((m.start(), end, user is not None and name == user and (not at or at == site)))
    return out


def runs(text: str, *, user: str | None = None, site: str | None = None,
         highlights: Iterable[object] = ()) -> list[Run]:
    """``text`` as runs of equal marks; bad highlight spans are ignored."""
    n = len(text)
    hit = [False] * n
    mention: list[str | None] = [None] * n
    for span in highlights or ():
        if not isinstance(span, (list, tuple)) or len(span) != 2:
            continue
        a, b = span
        if isinstance(a, int) and isinstance(b, int) and 0 <= a < b <= n:
            hit[a:b] = [True] * (b - a)
    for a, b, me in mention_spans(text, user, site):
        mention[a:b] = ["me" if me else "other"] * (b - a)
    out: list[Run] = []
    start = 0
    for i in range(1, n + 1):
        if i == n or hit[i] != hit[start] or mention[i] != mention[start]:
            out.append(Run(text[start:i], hit[start], mention[start]))
            start = i
    return out
