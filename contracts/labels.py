"""Security labels and clearances, the one home of the concept (DESIGN.md, "Labels"; docs/labels.md).

Theory of operation
-------------------
A mission with a ``[labels]`` table declares ordered classification *levels*
(lowest first), *caveats* (releasability categories) and a *default* label.
A ``Label`` is a level plus a set of caveats. A clearance is a label too (what
a site or an account may hold): clearance ``c`` *dominates* label ``l`` when
``c``'s level is at least ``l``'s and ``c`` holds every caveat of ``l``.
Dominance is a partial order; ``join`` is the least label that dominates
several (the highest level, every caveat), ``meet`` the greatest one that
several dominate (the lowest level, the common caveats).

Two spellings, one of each per use:

* for people (the command line, IRC, banners): ``"SECRET"`` or
  ``"SECRET//REL TO GBR, USA"`` (``str(label)``, ``Scheme.parse``);
* in JSON (the chat protocol, the journal): ``{"level": "SECRET",
  "caveats": ["GBR", "USA"]}`` (``Label.to_json``, ``Scheme.from_json``,
  which also takes the people's spelling, so a client may send either).

Caveats are always sorted, levels and caveats always upper case. A mission
without ``[labels]`` is *unlabeled*: ``UNLABELED`` has one level and no
caveats, every site and account holds its only label, and nothing carries a
label on the wire (``Scheme.enabled`` is false).

Everything here is pure and small: a ``Scheme`` is built once from the mission
file (``Scheme.from_table``, ``clearance_from_table``), and every check is a
comparison of an int and a frozenset.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

LEVEL_NAME = re.compile(r"[A-Z][A-Z0-9_ -]{0,31}\Z")
CAVEAT_NAME = re.compile(r"[A-Z0-9][A-Z0-9_-]{0,15}\Z")
MAX_LEVELS = 16
MAX_CAVEATS = 64
REL_TO = "REL TO"


class LabelError(ValueError):
    """A label, clearance or ``[labels]`` table that is not well formed or names what the scheme lacks."""


@dataclass(frozen=True, slots=True)
class Label:
    """A level (its name and its rank in the scheme, 0 the lowest) and a set of caveats."""

    level: str
    rank: int
    caveats: frozenset[str] = frozenset()

    def dominates(self, other: Label) -> bool:
        """Does this clearance dominate ``other`` (level at least ``other``'s, every caveat of it held)?"""
        return self.rank >= other.rank and self.caveats >= other.caveats

    def to_json(self) -> dict[str, Any]:
        """``{"level": L, "caveats": [sorted]}``: the label in the chat protocol and the journal."""
        return {"level": self.level, "caveats": sorted(self.caveats)}

    def __str__(self) -> str:
        if not self.caveats:
            return self.level
        return f"{self.level}//{REL_TO} {', '.join(sorted(self.caveats))}"


ABOVE_CLEARANCE = "above clearance"
BELOW_FLOOR = "below floor"


def say_problem(label: Label, floor: Label | None, clearance: Label | None) -> str | None:
    """The rule of a message's label (DESIGN.md "Labels"): it is dominated by the sender's ``clearance`` and
    dominates the room's ``floor``. ``ABOVE_CLEARANCE`` or ``BELOW_FLOOR`` for the first that fails (in that
    order), None when both hold; a ``floor`` or ``clearance`` of None (not known to the caller) is not checked.
    Every front end and the chat server ask this; each words its own refusal."""
    if clearance is not None and not clearance.dominates(label):
        return ABOVE_CLEARANCE
    if floor is not None and not label.dominates(floor):
        return BELOW_FLOOR
    return None


def join(labels: Iterable[Label]) -> Label:
    """The least label that dominates every one of ``labels`` (at least one)."""
    ls = list(labels)
    if not ls:
        raise ValueError("join of no labels")
    top = max(ls, key=lambda lb: lb.rank)
    return Label(top.level, top.rank, frozenset().union(*(lb.caveats for lb in ls)))


def meet(labels: Iterable[Label]) -> Label:
    """The greatest label that every one of ``labels`` (at least one) dominates."""
    ls = list(labels)
    if not ls:
        raise ValueError("meet of no labels")
    low = min(ls, key=lambda lb: lb.rank)
    return Label(low.level, low.rank, frozenset.intersection(*(lb.caveats for lb in ls)))


@dataclass(frozen=True, slots=True)
class Scheme:
    """A mission's levels (lowest first), caveats and default label; ``enabled``: the mission has ``[labels]``."""

    levels: tuple[str, ...]
    caveats: tuple[str, ...]
    default: Label
    enabled: bool = True
    _ranks: Mapping[str, int] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def build(cls, levels: Sequence[str], caveats: Sequence[str] = (), default: str | None = None,
              *, enabled: bool = True) -> Scheme:
        """A scheme from its parts (``LabelError`` naming what is wrong); ``default``: the lowest level."""
        levels = tuple(levels)
        caveats = tuple(caveats)
        if not levels:
            raise LabelError("levels must list at least one classification level, lowest first")
        if len(levels) > MAX_LEVELS:
            raise LabelError(f"levels lists {len(levels)} levels; at most {MAX_LEVELS}")
        if len(caveats) > MAX_CAVEATS:
            raise LabelError(f"caveats lists {len(caveats)} caveats; at most {MAX_CAVEATS}")
        for lv in levels:
            if not isinstance(lv, str) or not LEVEL_NAME.match(lv):
                raise LabelError(f"level {lv!r} must be 1-32 upper-case letters, digits, spaces, '_' or '-'"
                                 " starting with a letter")
        for cv in caveats:
            if not isinstance(cv, str) or not CAVEAT_NAME.match(cv):
                raise LabelError(f"caveat {cv!r} must be 1-16 upper-case letters, digits, '_' or '-'")
        for what, names in (("level", levels), ("caveat", caveats)):
            dup = {n for n in names if names.count(n) > 1}
            if dup:
                raise LabelError(f"{what} {sorted(dup)[0]!r} is listed twice")
        ranks = {lv: i for i, lv in enumerate(levels)}
        draft = cls(levels, caveats, Label(levels[0], 0), enabled, ranks)
        if default is None:
            return draft
        return cls(levels, caveats, draft.parse(default), enabled, ranks)

    @classmethod
    def from_table(cls, table: Any) -> Scheme:
        """The mission's ``[labels]`` table (``LabelError`` naming the key)."""
        if not isinstance(table, dict):
            raise LabelError("[labels] must be a table")
        unknown = sorted(set(table) - {"levels", "caveats", "default"})
        if unknown:
            raise LabelError(f"[labels]: unknown key {unknown[0]!r} (known: levels, caveats, default)")
        levels = table.get("levels")
        caveats = table.get("caveats", [])
        if not isinstance(levels, list):
            raise LabelError("[labels] levels must be a list of level names, lowest first")
        if not isinstance(caveats, list):
            raise LabelError("[labels] caveats must be a list of caveat names")
        default = table.get("default")
        if default is not None and not isinstance(default, str):
            raise LabelError(f"[labels] default = {default!r} must be a label such as \"UNCLASSIFIED\"")
        try:
            return cls.build(levels, caveats, default)
        except LabelError as e:
            raise LabelError(f"[labels]: {e}") from None

    # -- reading labels -----------------------------------------------------------------------------------------
    def label(self, level: str, caveats: Iterable[str] = ()) -> Label:
        """The label of ``level`` with ``caveats`` (``LabelError`` for a name the scheme lacks)."""
        if not isinstance(level, str):
            raise LabelError(f"level {level!r} must be a string")
        lv = level.strip().upper()
        if lv not in self._ranks:
            raise LabelError(f"unknown level {level!r:.40} (levels: {', '.join(self.levels)})")
        cvs = set()
        for c in caveats:
            if not isinstance(c, str):
                raise LabelError(f"caveat {c!r:.40} must be a string")
            cu = c.strip().upper()
            if cu not in self.caveats:
                known = ", ".join(self.caveats) or "none"
                raise LabelError(f"unknown caveat {c!r:.40} (caveats: {known})")
            cvs.add(cu)
        return Label(lv, self._ranks[lv], frozenset(cvs))

    def parse(self, text: str) -> Label:
        """A label as people write it: ``"SECRET"``, ``"SECRET//REL TO GBR, USA"`` (also ``"SECRET//GBR/USA"``)."""
        if not isinstance(text, str) or len(text) > 512:
            raise LabelError(f"label {text!r:.40} must be text such as \"SECRET//REL TO GBR, USA\"")
        level, sep, rest = text.partition("//")
        caveats: list[str] = []
        if sep:
            rest = rest.strip()
            if rest.upper().startswith(REL_TO):
                rest = rest[len(REL_TO):]
            caveats = [c for c in re.split(r"[,/\s]+", rest) if c]
            if not caveats:
                raise LabelError(f"label {text!r:.40}: no caveat after '//'")
        return self.label(level, caveats)

    def from_json(self, value: Any) -> Label:
        """A label from the chat protocol or the journal: ``{"level", "caveats"?}``, or the people's text."""
        if isinstance(value, str):
            return self.parse(value)
        if not isinstance(value, dict):
            raise LabelError(f"label {value!r:.40} must be {{\"level\": L, \"caveats\": [...]}} or text")
        unknown = sorted(set(value) - {"level", "caveats"})
        if unknown:
            raise LabelError(f"label: unknown key {unknown[0]!r:.20} (known: level, caveats)")
        caveats = value.get("caveats", [])
        if not isinstance(caveats, list) or len(caveats) > MAX_CAVEATS:
            raise LabelError("label caveats must be a list of caveat names")
        return self.label(value.get("level"), caveats)     # type: ignore[arg-type]

    # -- whole-mission questions --------------------------------------------------------------------------------
    def cleared(self, label: Label, clearances: Mapping[str, Label]) -> frozenset[str]:
        """The names in ``clearances`` (sites or accounts) whose clearance dominates ``label``."""
        return frozenset(name for name, c in clearances.items() if c.dominates(label))

    def sendable(self, clearance: Label, floor: Label) -> list[Label]:
        """Every label a holder of ``clearance`` may put on a message in a room whose floor is ``floor``:
        dominated by the clearance, dominating the floor (lowest level first, fewer caveats first)."""
        if not clearance.dominates(floor):
            return []
        extra = sorted(clearance.caveats - floor.caveats)
        if len(extra) <= 6:
            subsets = [frozenset(c for i, c in enumerate(extra) if mask >> i & 1) for mask in range(1 << len(extra))]
        else:       # many caveats: none of them, each alone, or all of them
            subsets = [frozenset(), *(frozenset([c]) for c in extra), frozenset(extra)]
        out = [Label(self.levels[r], r, floor.caveats | sub)
               for r in range(floor.rank, clearance.rank + 1) for sub in subsets]
        return sorted(out, key=lambda lb: (lb.rank, len(lb.caveats), sorted(lb.caveats)))

    def top(self) -> Label:
        """The highest level with every caveat: dominates every label of the scheme."""
        return Label(self.levels[-1], len(self.levels) - 1, frozenset(self.caveats))


UNLABELED = Scheme.build(["UNCLASSIFIED"], [], enabled=False)
"""The scheme of a mission without ``[labels]``: one level, no caveats, nothing carries a label."""


def clearance_from_table(scheme: Scheme, where: str, table: Any) -> Label:
    """A ``[sites.X.clearance]`` table (``{level, caveats?}``) read against ``scheme`` (``LabelError``: ``where``)."""
    if not isinstance(table, dict) or "level" not in table:
        raise LabelError(f"{where} must be a table with a level (and caveats)")
    try:
        return scheme.from_json(table)
    except LabelError as e:
        raise LabelError(f"{where}: {e}") from None
