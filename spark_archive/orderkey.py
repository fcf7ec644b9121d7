"""Sortable form of a global order key, in pure Python and as a Spark column.

A journal's ``order`` is a JSON array whose lexicographic order is the global
order: ``[17, "B"]`` for Lamport, other arrays of non-negative integers and
site names for other protocols. Spark arrays are homogeneous, so the archive
reads ``order`` as ``array<string>`` (Spark renders a JSON number as its text)
and turns every all-digit element into a zero-padded string of ``KEY_WIDTH``
characters. Site names start with a letter, so an all-digit element was an
integer; digits sort before letters in ASCII, so the padded form keeps integer
order and never interleaves with names. The sortable key is the resulting
array of strings; Spark compares arrays element by element with a shorter
prefix first, exactly as Python compares tuples of strings.
"""
from __future__ import annotations

import json
import re
from typing import Any, Sequence

from pyspark.sql import Column
from pyspark.sql import functions as F

KEY_WIDTH = 20  # 10**20 > 2**64: every non-negative 64-bit integer fits
_DIGITS = re.compile(r"^[0-9]+$")
DIGITS_REGEX = "^[0-9]+$"


def element_text(element: Any) -> str:
    """Text of one order element as Spark's JSON reader renders it into a string."""
    if isinstance(element, str):
        return element
    if isinstance(element, bool):
        return "true" if element else "false"
    if isinstance(element, int):
        return str(element)
    return json.dumps(element, separators=(",", ":"))


def pad_element(text: str) -> str:
    """Zero-pad an all-digit element to KEY_WIDTH (Spark ``lpad`` semantics)."""
    if _DIGITS.match(text):
        return text.rjust(KEY_WIDTH, "0")[:KEY_WIDTH]
    return text


def sortable_key(order: Sequence[Any] | None) -> tuple[str, ...] | None:
    """Pure-Python sortable key of a journal ``order`` array (None stays None)."""
    if order is None:
        return None
    return tuple(pad_element(element_text(e)) for e in order)


def sortable_key_col(order: Column) -> Column:
    """Spark column: the sortable key (array<string>) of an ``order`` array<string> column."""
    return F.transform(
        order,
        lambda e: F.when(e.rlike(DIGITS_REGEX), F.lpad(e, KEY_WIDTH, "0")).otherwise(e),
    )
