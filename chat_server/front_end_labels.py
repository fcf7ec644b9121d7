"""Security labels as the IRC and TAK front ends show and read them: a mark in front of a line, a prefix a user writes.

Theory of operation
-------------------
IRC and TAK GeoChat carry text only, so a label travels in the text, as
Isode M-Link's IRC gateway does: every line of a labeled mission's message
starts with its label in brackets, ``[SECRET//REL TO GBR, USA] text``
(``str(Label)``, contracts/labels.py, the one home of labels), and a user who
starts a line the same way sends it at that label; a line with no mark goes at
the room's floor (the chat server's default for a ``say`` without ``label``).
An unlabeled mission (``Scheme.enabled`` false) shows and reads no mark: its
lines are byte for byte what they were before labels.

:class:`LabelView` is what one connection's user may read: the mission's
scheme and the user's clearance (the ``welcome``'s ``clearance``, None until
it is known). It writes a frame's mark (``mark``), answers whether the user may
read content of a label (``may_read``: a reply's quote shares a front end's
cache with users of other clearances, so it is shown only to those cleared for
the original), and says why a label may not be sent in a room (``refusal``).
That check is only the front end's courtesy (a clear reason, nothing sent):
the chat server decides (``error {code: "forbidden"}``), and a refusal from it
reaches the user too.

``split_label`` reads a user's leading ``[LABEL]``: in a labeled mission a
line that starts with ``[`` and a closing ``]`` names a label, and one that
names none is refused rather than sent at the floor as text that only looks
marked (``LabelError``; to start a line with a bracket, mark it first:
``[UNCLASSIFIED] [sic] ...``). Pure: no I/O, no state.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from contracts.labels import ABOVE_CLEARANCE, BELOW_FLOOR, UNLABELED, Label, LabelError, Scheme, say_problem

_PREFIX = re.compile(r"\[([^\[\]]{1,200})\][ \t]*")      # a leading [LABEL] and the white space after it


def label_of(value: Any, scheme: Scheme) -> Label | None:
    """A frame's ``label`` (``{level, caveats}`` or text) read against ``scheme``; None when absent or unreadable."""
    if value is None or not scheme.enabled:
        return None
    try:
        return scheme.from_json(value)
    except LabelError:
        return None


def mark(label: Label) -> str:
    """``[SECRET//REL TO GBR, USA]``: a label as it leads a line."""
    return f"[{label}]"


def split_label(text: str, scheme: Scheme) -> tuple[Label | None, str]:
    """A user's line with a leading ``[LABEL]``: the label and the rest (the line itself, None, without one or in an
    unlabeled mission); ``LabelError`` for a leading bracket that names no label of ``scheme``."""
    if not scheme.enabled:
        return None, text
    body = text.lstrip(" ")
    m = _PREFIX.match(body)
    if m is None:
        return None, text
    try:
        return scheme.parse(m.group(1)), body[m.end():]
    except LabelError as e:
        raise LabelError(f"[{m.group(1)[:40]}] is not a label of this mission: {e}; a line that starts with '[' "
                         f"needs its label first, e.g. [{scheme.default}] {text[:20]}") from None


@dataclass(frozen=True, slots=True)
class LabelView:
    """The mission's scheme and one user's clearance (None: not known yet): what that user is shown and may send."""

    scheme: Scheme = UNLABELED
    clearance: Label | None = None

    @property
    def enabled(self) -> bool:
        return self.scheme.enabled

    def welcomed(self, welcome: Mapping[str, Any]) -> LabelView:
        """This view with the ``welcome``'s ``clearance`` (kept as it was when the welcome has none)."""
        clearance = label_of(welcome.get("clearance"), self.scheme)
        return LabelView(self.scheme, clearance) if clearance is not None else self

    def text(self, value: Any) -> str:
        """A frame's ``label`` as people write it (``"SECRET//REL TO GBR"``); ``""`` in an unlabeled mission or
        for a frame without one; ``"?"`` for a label the scheme cannot read."""
        if not self.scheme.enabled or value is None:
            return ""
        label = label_of(value, self.scheme)
        return str(label) if label is not None else "?"

    def mark(self, value: Any) -> str:
        """The mark of a frame's ``label`` and a space (``"[SECRET] "``), or ``""`` (``text``)."""
        text = self.text(value)
        return f"[{text}] " if text else ""

    def may_read(self, value: Any) -> bool:
        """May this user read content labeled ``value`` (a frame's ``label``; None: unlabeled content)?"""
        if not self.scheme.enabled or value is None:
            return True
        label = label_of(value, self.scheme)
        return label is not None and self.clearance is not None and self.clearance.dominates(label)

    def refusal(self, label: Label, floor: Label | None, where: str) -> str | None:
        """Why this user may not send ``label`` in the room ``where`` whose floor is ``floor`` (None: not known),
        or None when the front end sees no reason (the chat server still decides)."""
        problem = say_problem(label, floor, self.clearance)
        if problem == ABOVE_CLEARANCE:
            return f"{mark(label)} is above your clearance {self.clearance}; nothing was sent"
        if problem == BELOW_FLOOR:
            return f"{mark(label)} is below the label of {where}, {floor}: its lines carry at least that; " \
                   "nothing was sent"
        return None


NO_LABELS = LabelView()
"""The view of an unlabeled mission: no marks, everything readable."""

__all__ = ["NO_LABELS", "LabelView", "label_of", "mark", "split_label"]
