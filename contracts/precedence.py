"""Message precedence, the one home of its levels (military messaging: FLASH > IMMEDIATE > PRIORITY > ROUTINE).

Precedence is carried by every message from the chat user through RCM to every
site. Paced links write the highest level first; FIFO per origin holds within a
level; FLASH and IMMEDIATE are delivered on arrival at their order key and ask
users to acknowledge them (DESIGN.md, "Beyond the paper").

One spelling per level: the lower-case name (``"flash"`` ... ``"routine"``), in
the chat protocol, the journal, the logs and the archive. One integer code:
``Precedence.code``, 0 for FLASH to 3 for ROUTINE (the rank RCM's wire header,
its log records and repair frames carry; the archive and the web UI use the
same numbers). ROUTINE is the default, and where a field is optional its
absence means ROUTINE.
"""
from __future__ import annotations

import enum


class Precedence(enum.Enum):
    """A message's precedence; ``value`` is its one spelling, ``code`` its one integer code."""

    FLASH = "flash"
    IMMEDIATE = "immediate"
    PRIORITY = "priority"
    ROUTINE = "routine"

    @property
    def code(self) -> int:
        """0 (FLASH) to 3 (ROUTINE): the order in which paced links write them."""
        return _CODES[self]

    @property
    def urgent(self) -> bool:
        """FLASH and IMMEDIATE: delivered on arrival, acknowledged by users."""
        return self in (Precedence.FLASH, Precedence.IMMEDIATE)

    @classmethod
    def parse(cls, value: object) -> Precedence:
        """The level a spelling names; a ValueError names the levels for anything else."""
        try:
            return cls(value)
        except ValueError:
            raise ValueError(f"precedence must be one of {', '.join(PRECEDENCES)}, not {value!r:.40}") from None

    @classmethod
    def of_code(cls, code: object) -> Precedence:
        """The level of an integer code; a ValueError for anything else."""
        if type(code) is not int or not 0 <= code < len(_ORDER):
            raise ValueError(f"precedence code must be 0 (flash) to {len(_ORDER) - 1} (routine), not {code!r:.40}")
        return _ORDER[code]


_ORDER = (Precedence.FLASH, Precedence.IMMEDIATE, Precedence.PRIORITY, Precedence.ROUTINE)
_CODES = {p: i for i, p in enumerate(_ORDER)}

PRECEDENCES: tuple[str, ...] = tuple(p.value for p in _ORDER)
"""The spellings, highest first (index = code)."""
DEFAULT = Precedence.ROUTINE.value
URGENT: tuple[str, ...] = tuple(p.value for p in _ORDER if p.urgent)


_RANKS = {p.value: i for i, p in enumerate(_ORDER)}


def rank(precedence: str) -> int:
    """The code of a spelling: 0 for flash ... 3 for routine; a ValueError names the levels for anything else."""
    code = _RANKS.get(precedence) if isinstance(precedence, str) else None
    return Precedence.parse(precedence).code if code is None else code
