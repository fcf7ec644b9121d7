"""Message precedence, the one home of its levels (military messaging: FLASH > IMMEDIATE > PRIORITY > ROUTINE).

Precedence is carried by every message from the chat user through RCM to every
site. Paced links write the highest level first; FIFO per origin holds within a
level; FLASH and IMMEDIATE are delivered on arrival at their order key and ask
users to acknowledge them (DESIGN.md, "Beyond the paper").
"""
from __future__ import annotations

PRECEDENCES = ("flash", "immediate", "priority", "routine")      # highest first
DEFAULT = "routine"
URGENT = ("flash", "immediate")      # delivered on arrival, never held behind lower levels; acknowledged by users


def rank(precedence: str) -> int:
    """0 for flash ... 3 for routine; a ValueError names the levels for anything else."""
    try:
        return PRECEDENCES.index(precedence)
    except ValueError:
        raise ValueError(f"precedence must be one of {', '.join(PRECEDENCES)}, not {precedence!r}") from None
