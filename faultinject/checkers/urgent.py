"""Urgent messages (FLASH, IMMEDIATE; issue 19): delivered on arrival, with one key everywhere.

The other checkers treat them as their rules say (``properties``): FIFO per
origin holds per lane (``Delivery.lane``), an urgent delivery flagged late is
below the in-order keys delivered so far (its place had passed), one not
flagged is above them (in place, or early: docs/ordering.md), and a stable
period wants them delivered within ``settle`` but leaves them out of the agreed
in-order sequence. What is left is checked here: the key.
"""
from __future__ import annotations

from typing import Any

from contracts.precedence import URGENT

from .history import History, Violation, _key


def check_urgent_keys(h: History) -> list[Violation]:
    """An urgent message has one key everywhere: the one its sender gave it (when the send recorded it)."""
    out: list[Violation] = []
    keys: dict[str, tuple[Any, ...]] = {}
    for r in h.sends.values():
        if r.get("precedence") in URGENT and r.get("order") is not None:
            keys[r["msg_id"]] = _key(r["order"])
    for site, ds in h.ordered.items():
        for d in ds:
            if not d.urgent:
                continue
            want = keys.setdefault(d.msg_id, d.key)
            if d.key != want:
                out.append(Violation("igo-key", site, d.msg_id,
                                     f"urgent message delivered at key {list(d.key)}, elsewhere {list(want)}"))
    return out
