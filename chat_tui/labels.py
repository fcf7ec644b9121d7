"""Security labels as the operator sees them: the banner colours, the labels read from frames, the composer's
choice (a ``ChatState`` mixin, sans-IO).

Theory of operation
-------------------
A labelled mission says so in ``welcome``: ``labels {levels (lowest first), caveats, default}`` and the
user's ``clearance``; ``scheme_of`` builds a ``contracts.labels.Scheme`` from them (the one home of labels:
dominance, parsing, ``Scheme.sendable``), or gives None for an unlabeled mission, and then nothing here shows
or sends anything. A room's floor comes with ``joined`` (``Room.label``), a message's label with its frame
(``MessageEntry.label``); a label the scheme does not know is kept as it came with rank -1 (shown in grey,
trusted for nothing).

The composer's choice (``send_label``; None: the floor of the room shown) is one of the labels
``choices(room)`` offers (``Scheme.sendable(clearance, floor)``), set by ``/label LABEL``, F6's picker or
``cycle_label``; it goes back to the floor whenever another room is shown (``ChatState.set_active``). A
``say`` carries ``label_to_send(room)``. A ``Banner`` change (another room shown, or its floor learnt: the
composer is at the floor again) tells the front ends to redraw the banners and the label by the input, a
``SendLabel`` change (a label chosen) the label by the input; the line client prints a line for each.

Colours: the conventional banner colours by level name (UNCLASSIFIED green, CONFIDENTIAL blue, SECRET red,
TOP SECRET orange; CUI and RESTRICTED purple), any other level by its place in the scheme along the same
ladder; the text is black or white, whichever contrasts more (WCAG relative luminance). The browser's copy is
web_ui/static/js/labels.js; tests/web_ui/test_web_labels.py compares them value for value.
"""
from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from contracts.labels import Label, LabelError, Scheme, say_problem

from .model import Banner, Change, MessageEntry, Room, SendLabel
from .safe_text import printable

LEVEL_COLOURS = {
    "UNCLASSIFIED": "#007a33",
    "OFFICIAL": "#007a33",
    "CUI": "#502b85",
    "RESTRICTED": "#502b85",
    "CONFIDENTIAL": "#0033a0",
    "SECRET": "#c8102e",
    "TOP SECRET": "#ff8c00",
}
RANK_COLOURS = ("#007a33", "#502b85", "#0033a0", "#c8102e", "#ff8c00")   # levels the table does not name, by place
UNKNOWN_COLOUR = "#5f6b76"      # a label the scheme does not know


def _luminance(hex_colour: str) -> float:
    def lin(i: int) -> float:
        c = int(hex_colour[i:i + 2], 16) / 255
        return c / 12.92 if c <= 0.03928 else float(((c + 0.055) / 1.055) ** 2.4)
    return 0.2126 * lin(1) + 0.7152 * lin(3) + 0.0722 * lin(5)


def text_colour(bg: str) -> str:
    """``#000000`` or ``#ffffff``: the text colour that contrasts more with the background ``bg`` (``#rrggbb``)."""
    lum = _luminance(bg)
    return "#000000" if (lum + 0.05) / 0.05 >= 1.05 / (lum + 0.05) else "#ffffff"


def level_colours(level: str, rank: int, count: int) -> tuple[str, str]:
    """(background, text) of a level's banner; ``rank`` of ``count`` levels places one the table does not name."""
    bg = LEVEL_COLOURS.get(level)
    if bg is None:
        if rank < 0 or count <= 0:
            bg = UNKNOWN_COLOUR
        else:
            place = min(rank, count - 1) / (count - 1) if count > 1 else 0.0
            bg = RANK_COLOURS[_round_half_up(place * (len(RANK_COLOURS) - 1))]
    return bg, text_colour(bg)


def _round_half_up(x: float) -> int:
    """As JavaScript's ``Math.round`` (Python's ``round`` rounds halves to even)."""
    return int(x + 0.5)


def label_style(scheme: Scheme | None, label: Label | None) -> str:
    """A Rich style painting ``label``'s colours (bold)."""
    if label is None or label.rank < 0:
        bg = UNKNOWN_COLOUR
        return f"bold {text_colour(bg)} on {bg}"
    bg, fg = level_colours(label.level, label.rank, len(scheme.levels) if scheme else 0)
    return f"bold {fg} on {bg}"


def scheme_of(welcome: dict[str, Any]) -> tuple[Scheme, Label] | None:
    """The mission's scheme and the user's clearance from ``welcome``; None: an unlabeled mission (or labels not
    well formed: then no labels are shown rather than wrong ones)."""
    t = welcome.get("labels")
    if not isinstance(t, dict):
        return None
    try:
        scheme = Scheme.build(t.get("levels") or [], t.get("caveats") or [])
        if t.get("default") is not None:           # {level, caveats} (or the people's text)
            scheme = Scheme.build(scheme.levels, scheme.caveats, str(scheme.from_json(t["default"])))
    except (LabelError, TypeError):
        return None
    clearance = label_of(scheme, welcome.get("clearance"))
    return scheme, clearance if clearance is not None and clearance.rank >= 0 else scheme.default


def label_of(scheme: Scheme | None, value: Any) -> Label | None:
    """A label from a frame read against ``scheme`` (None: unlabeled, or absent); one the scheme does not know
    comes back with rank -1, its text cut short."""
    if scheme is None or value is None:
        return None
    try:
        return scheme.from_json(value)
    except LabelError:
        if isinstance(value, dict):
            caveats = value.get("caveats")
            cvs = frozenset(str(c)[:16] for c in caveats[:8]) if isinstance(caveats, list) else frozenset()
            return Label(str(value.get("level"))[:64], -1, cvs)
        return Label(str(value)[:64], -1)


class LabelState:
    """``ChatState``'s part for labels."""

    # Provided by ChatState (state.py):
    rooms: dict[str, Room]
    active: str | None
    if TYPE_CHECKING:
        def notice(self, text: str, level: str = "info", room: str | None = None, scope: str = "") -> list[Change]: ...

    def __init__(self) -> None:
        self.scheme: Scheme | None = None
        self.clearance: Label | None = None
        self.send_label: Label | None = None        # the composer's choice; None: the floor of the room shown

    # --- frames -----------------------------------------------------------------------------------------------
    def _labels_welcome(self, f: dict[str, Any]) -> list[Change]:
        got = scheme_of(f)
        self.scheme, self.clearance = got if got is not None else (None, None)
        room = self.rooms.get(self.active or "")
        if self.send_label is not None and not self.may_send(room, self.send_label):
            self.send_label = None
        return self._banner_changes()

    def _label_joined(self, room: Room, f: dict[str, Any]) -> list[Change]:
        if self.scheme is None or "label" not in f:
            return []
        label = label_of(self.scheme, f.get("label"))
        if label == room.label:
            return []
        room.label = label
        return self._banner_changes() if room.name == self.active else []

    def _on_created(self, f: dict[str, Any], now: float) -> list[Change]:
        """The ``create`` reply: a private room for its members, or a public one at its label."""
        label = label_of(self.scheme, f.get("label"))
        at = f" at {label}" if label is not None else ""
        members = [m for m in f.get("members") or () if isinstance(m, str)]
        what = f"private room {f.get('room')}{at} created for {', '.join(members)}" if members else \
            f"room {f.get('room')}{at} created"
        return self.notice(printable(what), "success")

    def _label_message(self, e: MessageEntry, f: dict[str, Any]) -> None:
        e.label = label_of(self.scheme, f.get("label"))

    def _banner_changes(self) -> list[Change]:
        """After another room is shown (or the room shown learnt its floor): the composer is at the floor again."""
        room = self.rooms.get(self.active or "")
        if self.scheme is None or room is None or room.label is None:
            return []
        return [Banner(room.name, room.label)]

    # --- the composer -----------------------------------------------------------------------------------------
    def choices(self, room: Room | None) -> list[Label]:
        """The labels the user may send in ``room`` (none when unlabeled or its floor is not known)."""
        if self.scheme is None or self.clearance is None or room is None or room.label is None or room.label.rank < 0:
            return []
        return self.scheme.sendable(self.clearance, room.label)

    def may_send(self, room: Room | None, label: Label) -> bool:
        """May the user send ``label`` in ``room``: between its floor and the clearance (``choices`` lists the
        common ones only when a clearance has many caveats, so it is no test of this)."""
        if self.scheme is None or self.clearance is None or room is None or room.label is None or room.label.rank < 0:
            return False
        return say_problem(label, room.label, self.clearance) is None

    def label_to_send(self, room: Room | None) -> Label | None:
        """The label a line sent in ``room`` carries: the composer's choice, else the floor (None: unlabeled)."""
        if self.scheme is None or room is None:
            return None
        return self.send_label or room.label

    def choose_label(self, text: str) -> tuple[list[Change], str | None]:
        """``/label TEXT``: (changes, None), or ([], why not)."""
        room = self.rooms.get(self.active or "")
        if self.scheme is None or self.clearance is None:
            return [], "this mission has no security labels"
        if room is None or room.label is None:
            return [], "no room with a known label is shown"
        try:
            label = self.scheme.parse(text)
        except LabelError as e:
            return [], str(e)
        if not self.may_send(room, label):
            why = (f"your clearance is {self.clearance}" if not self.clearance.dominates(label)
                   else f"the room's floor is {room.label}")
            return [], f"you may not send {label} here: {why}"
        return self._set_send_label(room, label), None

    def cycle_label(self, step: int = 1) -> list[Change]:
        """F6 without the picker: the next sendable label (wrapping)."""
        room = self.rooms.get(self.active or "")
        labels = self.choices(room)
        if room is None or len(labels) < 2:
            return []
        now = self.label_to_send(room)
        i = labels.index(now) if now in labels else 0
        return self._set_send_label(room, labels[(i + step) % len(labels)])

    def _set_send_label(self, room: Room, label: Label) -> list[Change]:
        self.send_label = None if label == room.label else label
        return [SendLabel(room.name, label)]

    def _reset_send_label(self, changing_room: bool) -> list[Change]:
        if changing_room:
            self.send_label = None
        return self._banner_changes() if changing_room else []


_CAVEAT_RUN = re.compile(r"//\s*(REL TO\s+)?[A-Za-z0-9_-]+(\s*[,/]\s*[A-Za-z0-9_-]+)*", re.IGNORECASE)


def split_create(scheme: Scheme | None, text: str) -> tuple[Label | None, list[str]]:
    """``/create ROOM [LABEL] [USER...]``'s words after the room: (the label, the members). The label is read off
    the front (a level of the scheme, then after ``//`` caveats joined by ``,`` or ``/``, ``REL TO`` allowed);
    ``LabelError`` names a label that is not one of the scheme's."""
    text = text.strip()
    if scheme is None or not text:
        return None, text.split()
    upper = text.upper()
    level = next((lv for lv in sorted(scheme.levels, key=len, reverse=True)
                  if upper.startswith(lv) and (len(text) == len(lv) or text[len(lv)].isspace()
                                               or text.startswith("//", len(lv)))), None)
    if level is None:
        return None, text.split()
    end = len(level)
    if text.startswith("//", end):
        m = _CAVEAT_RUN.match(text, end)
        if m is None:
            raise LabelError(f"no caveat after '//' in {text[:60]!r}")
        end = m.end()
    return scheme.parse(text[:end]), text[end:].split()
