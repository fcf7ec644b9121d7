"""Sortable binary form of a global order key as a Spark column (the pure form: ordering/keys.py).

A journal's ``order`` is a JSON array whose lexicographic order is the global
order: ``[17, "B"]`` for Lamport, other arrays of non-negative integers and
site names for other protocols. Spark arrays are homogeneous, so the archive
reads ``order`` as ``array<string>`` (Spark renders a JSON number as its text,
a JSON ``null`` element as null) and encodes it into one ``binary`` value whose
unsigned byte order is the global order. Spark sorts binary with an 8-byte
prefix, so a Lamport key usually sorts on the prefix alone.

Each element is encoded on its own and the encodings are concatenated:

* an all-digit element (an integer; leading zeros ignored) of at most
  ``MAX_DIGITS`` digits: one byte holding its digit count, then its digits.
  Fewer digits means a smaller number, and equal counts compare digit by digit.
* anything else (a site name, a float's text, ``null``): the byte ``0xFE``,
  its UTF-8 bytes, and a ``0x00`` terminator, so a shorter name that is a
  prefix of a longer one sorts first and names sort by code point.

Integers therefore sort before names at the same position, and a key that is a
prefix of another sorts first, as Python compares tuples.
"""
from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F

# The pure form has one home, the ordering package; this module is its Spark column expression,
# tested byte for byte against it (tests/spark_archive/test_archive_orderkey.py).
from ordering.keys import MAX_DIGITS, STRING_TAG, element_text, encode_element, sortable_key  # noqa: E402

FAST_ELEMENTS = 4  # keys this long or shorter are encoded without a higher-order function
# Byte i is i: the digit-count byte of an integer element, by lookup.
_COUNT_BYTES = bytes(range(MAX_DIGITS + 1))

__all__ = ["MAX_DIGITS", "STRING_TAG", "element_text", "encode_element", "sortable_key", "sortable_key_col"]


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
