"""The global order key's one home: what a valid key is, and its sortable binary form.

A message's order key is an array whose lexicographic order is its place in
the global order (Lamport: ``[timestamp, origin]``; the other protocols use
other arrays of non-negative integers and site names). Every part of the
suite that stores or sorts keys uses these functions: the chat server's
history (SQLite compares the binary form with memcmp), the Spark archive
(its column expression, spark_archive/orderkey.py, is tested byte for byte
against ``sortable_key``), and the browser's copy (web_ui/static/js/order.js,
tested against the order these bytes give).

The sortable form encodes each element on its own and concatenates them:

* an all-digit element (a non-negative integer, or its text; leading zeros
  ignored) of at most ``MAX_DIGITS`` digits: one byte holding its digit count,
  then its ASCII digits. Fewer digits is a smaller number; equal counts
  compare digit by digit.
* anything else (a site name): the byte ``STRING_TAG`` (0xFE), its UTF-8
  bytes and a 0x00 terminator, so a name that is a prefix of another sorts
  first and names sort by code point.

Integers sort before names at the same position, and a key that is a prefix
of another sorts first, as Python compares tuples.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, overload

from contracts.text import lone_surrogate

from .base import KEY_INT_MAX

MAX_DIGITS = 200                # longer digit strings are encoded as names (no key comes near: 2^53 has 16)
STRING_TAG = 0xFE
MAX_ELEMENTS = 16
MAX_NAME = 64


def key_problem(order: Any) -> str | None:
    """Why ``order`` is not a valid order key (None: it is one).

    A valid key is a non-empty array of at most 16 elements, each an integer in
    ``[0, KEY_INT_MAX]`` (2^53, the bound every ordering protocol keeps) or a
    name of 1 to 64 characters without NUL that UTF-8 can encode (JSON's
    ``"\\ud800"`` is a lone surrogate: ``sortable_key`` and every copy of it
    encode names as UTF-8) and that is not all ASCII digits (the sortable form
    reads ``"007"`` as the number 7, so ``["007"]`` and ``[7]`` would be one key;
    site names start with a letter)."""
    if not isinstance(order, (list, tuple)) or not order:
        return "an order key must be a non-empty array"
    if len(order) > MAX_ELEMENTS:
        return f"an order key has at most {MAX_ELEMENTS} elements"
    for x in order:
        if isinstance(x, bool):
            return "an order key holds integers and names, not booleans"
        if isinstance(x, int):
            if not 0 <= x <= KEY_INT_MAX:
                return f"order key element {x} is outside [0, 2^53]"
        elif isinstance(x, str):
            if not 0 < len(x) <= MAX_NAME or "\x00" in x:
                return f"order key names have 1 to {MAX_NAME} characters and no NUL"
            if lone_surrogate(x):
                return "order key names are valid Unicode (no lone surrogate: UTF-8 cannot hold one)"
            if x.isascii() and x.isdigit():
                return "an order key name is not all digits (it would read as the number it spells)"
        else:
            return f"order key element {x!r} is neither an integer nor a name"
    return None


def element_text(element: Any) -> str:
    """Text of one order element as a JSON reader renders it into a string (Spark's ``array<string>``)."""
    if element is None:
        return "null"
    if isinstance(element, str):
        return element
    if isinstance(element, bool):
        return "true" if element else "false"
    if isinstance(element, int):
        return str(element)
    return json.dumps(element, separators=(",", ":"))


def encode_element(text: str) -> bytes:
    """The sortable bytes of one element's text."""
    if text.isascii() and text.isdigit():
        digits = text.lstrip("0") or "0"
        if len(digits) <= MAX_DIGITS:
            return bytes([len(digits)]) + digits.encode("ascii")
    return bytes([STRING_TAG]) + text.encode("utf-8") + b"\x00"


@overload
def sortable_key(order: None) -> None: ...
@overload
def sortable_key(order: Sequence[Any]) -> bytes: ...


def sortable_key(order: Sequence[Any] | None) -> bytes | None:
    """The sortable binary form of an order key (None stays None): byte order is the global order."""
    if order is None:
        return None
    return b"".join(encode_element(element_text(e)) for e in order)
