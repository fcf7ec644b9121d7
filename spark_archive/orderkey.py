"""The sortable binary form of a global order key as a Spark column.

The order key and its sortable form have one home, ``ordering.keys`` (what a
valid key is; ``sortable_key``, ``element_text``, ``encode_element``); this
module gives Spark the same bytes as a column expression, tested byte for
byte and in sort order against ``ordering.keys.sortable_key``.

A journal's ``order`` is a JSON array whose lexicographic order is the global
order: ``[17, "B"]`` for Lamport, other arrays of non-negative integers and
site names for other protocols. Spark arrays are homogeneous, so the archive
reads ``order`` as ``array<string>`` (Spark renders a JSON number as its text,
a JSON ``null`` element as null) and encodes it here into one ``binary`` value
whose unsigned byte order is the global order. Spark sorts binary with an
8-byte prefix, so a Lamport key usually sorts on the prefix alone.
"""
from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F

from ordering.keys import MAX_DIGITS, STRING_TAG, element_text, encode_element, sortable_key

__all__ = ["MAX_DIGITS", "STRING_TAG", "element_text", "encode_element", "sortable_key", "sortable_key_col"]

FAST_ELEMENTS = 4  # keys this long or shorter are encoded without a higher-order function
# Byte i is i: the digit-count byte of an integer element, by lookup.
_COUNT_BYTES = bytes(range(MAX_DIGITS + 1))


def _element_col(e: Column) -> Column:
    # No regular expressions: this runs once per message and was a tenth of the
    # aggregation's output stage. ``translate`` deletes the ASCII digits.
    text = F.coalesce(e, F.lit("null"))
    stripped = F.ltrim(text, F.lit("0"))
    digits = F.when(stripped == "", F.lit("0")).otherwise(stripped)
    is_int = (text != "") & (F.translate(text, "0123456789", "") == "") \
        & (F.length(digits) <= MAX_DIGITS)
    return F.when(is_int, F.concat(F.substring(F.lit(_COUNT_BYTES), F.length(digits) + 1, F.lit(1)),
                                   digits.cast("binary"))) \
        .otherwise(F.concat(F.lit(bytes([STRING_TAG])), text.cast("binary"), F.lit(b"\x00")))


def sortable_key_col(order: Column) -> Column:
    """Spark column: the sortable key (binary) of an ``order`` array<string> column."""
    empty = F.unhex(F.lit(""))
    size = F.size(order)
    # Short keys (every protocol's) without a lambda: higher-order functions are interpreted.
    fast = F.concat(*[F.when(size > i, _element_col(order[i])).otherwise(empty)
                      for i in range(FAST_ELEMENTS)])
    slow = F.aggregate(order, empty, lambda acc, e: F.concat(acc, _element_col(e)))
    return F.when(order.isNull(), F.lit(None).cast("binary")) \
        .when(size <= FAST_ELEMENTS, fast).otherwise(slow)
