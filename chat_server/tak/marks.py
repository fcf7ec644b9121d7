"""A chat message's text as TAK users read it and a GeoChat's text as TAK users write it: the marks in the text.

GeoChat carries text only: no precedence, no label, no late flag. So they
travel as marks in the text (docs/tak.md): ``[FLASH] `` / ``[IMMEDIATE] `` /
``[PRIORITY] `` in front of the text, `` (late)`` and `` (repaired)`` after
it, and in a labeled mission the message's label first
(``[SECRET//REL TO GBR] [FLASH] text``, front_end_labels.py). A TAK user sets
a GeoChat's precedence the same way (``split_precedence``; its label:
``front_end_labels.split_label``). Pure functions, used by session.py.
"""
from __future__ import annotations

from typing import Any

from contracts.precedence import Precedence

from ..front_end_labels import NO_LABELS, LabelView

MARKS = {Precedence.FLASH: "[FLASH] ", Precedence.IMMEDIATE: "[IMMEDIATE] ", Precedence.PRIORITY: "[PRIORITY] "}


def split_precedence(text: str) -> tuple[Precedence, str]:
    """A TAK user's text with a leading ``[FLASH]``, ``[IMMEDIATE]`` or ``[PRIORITY]``: the level, the rest."""
    for level, mark in MARKS.items():
        if text[:len(mark)].upper() == mark:
            return level, text[len(mark):]
    return Precedence.ROUTINE, text


def message_text(m: dict[str, Any], labels: LabelView = NO_LABELS) -> str:
    """A chat message's text as TAK users see it: label and precedence in front, late and repaired behind."""
    try:
        level = Precedence.parse(m.get("precedence", "routine"))
    except ValueError:
        level = Precedence.ROUTINE
    tail = "".join(mark for key, mark in (("late", " (late)"), ("repaired", " (repaired)")) if m.get(key))
    return f"{labels.mark(m.get('label'))}{MARKS.get(level, '')}{m.get('text', '')}{tail}"
