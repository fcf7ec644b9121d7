"""Sets of message sequence numbers as sorted, disjoint, inclusive ``[first, last]`` ranges.

Theory of operation
-------------------
A site tells a peer which of its messages the peer will never get (MISSED
frames, ``MissingNotice``, the client's ``Missing`` event). After a long
disconnection that is every message sent meanwhile: hundreds of thousands of
numbers, but almost always a few contiguous runs. Ranges keep the memory and
the frames proportional to the runs, not to the messages; a list of integers
once outgrew the frame cap and killed the link for good.

A range list is a list of ``(first, last)`` pairs with ``first <= last``, sorted,
disjoint and not adjacent (``first`` of one is at least ``last + 2`` of the one
before), so one set has exactly one representation. ``add`` appends one number
in increasing order (the way a stack skips its own sends) and, past ``cap``
ranges, widens the last range over the gap instead of opening a new one: the
memory stays bounded, at the price of naming a few numbers that were not
addressed to the peer (which it never gets either). ``chunks`` splits a list
into pieces that each fit a frame.
"""
from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator
from typing import Any

Range = tuple[int, int]

RANGE_WIRE_BYTES = 20
"""Most bytes one ``[first, last]`` pair takes in msgpack (array header + two uint64)."""


def add(ranges: list[list[int]], seq: int, cap: int) -> None:
    """Add ``seq``, above every number already in ``ranges`` (mutable pairs), keeping at most ``cap`` ranges."""
    if ranges:
        last = ranges[-1]
        if seq <= last[1]:
            raise ValueError(f"sequence number {seq} is not above {last[1]}")
        if seq == last[1] + 1 or len(ranges) >= cap:
            last[1] = seq
            return
    ranges.append([seq, seq])


def normalize(pairs: Iterable[Iterable[int]]) -> list[list[int]]:
    """Any pairs (unsorted, overlapping, adjacent) as one canonical range list."""
    out: list[list[int]] = []
    for first, last in sorted((int(a), int(b)) for a, b in pairs):
        if out and first <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], last)
        else:
            out.append([first, last])
    return out


def of_seqs(seqs: Iterable[int]) -> list[list[int]]:
    """The range list of a collection of sequence numbers."""
    return normalize((s, s) for s in seqs)


def subtract(a: list[list[int]], b: list[list[int]]) -> list[list[int]]:
    """The numbers of range list ``a`` that are not in range list ``b`` (both canonical)."""
    out: list[list[int]] = []
    j = 0
    for first, last in a:
        lo = first
        while j < len(b) and b[j][1] < lo:
            j += 1
        k = j
        while k < len(b) and b[k][0] <= last:
            if b[k][0] > lo:
                out.append([lo, b[k][0] - 1])
            lo = max(lo, b[k][1] + 1)
            k += 1
        if lo <= last:
            out.append([lo, last])
    return out


def intersect(a: list[list[int]], b: list[list[int]]) -> list[list[int]]:
    """The numbers in both canonical range lists."""
    out: list[list[int]] = []
    i = j = 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if lo <= hi:
            out.append([lo, hi])
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def contains(ranges: list[list[int]], seq: int) -> bool:
    """Is ``seq`` in the canonical range list?"""
    i = bisect.bisect_right(ranges, seq, key=lambda r: r[0]) - 1
    return i >= 0 and ranges[i][1] >= seq


def insert(ranges: list[list[int]], seq: int) -> bool:
    """Add ``seq`` anywhere in a canonical range list (mutable pairs); False if it was there."""
    i = bisect.bisect_right(ranges, seq, key=lambda r: r[0]) - 1
    if i >= 0 and ranges[i][1] >= seq:
        return False
    joins_left = i >= 0 and ranges[i][1] == seq - 1
    joins_right = i + 1 < len(ranges) and ranges[i + 1][0] == seq + 1
    if joins_left and joins_right:
        ranges[i][1] = ranges[i + 1][1]
        del ranges[i + 1]
    elif joins_left:
        ranges[i][1] = seq
    elif joins_right:
        ranges[i + 1][0] = seq
    else:
        ranges.insert(i + 1, [seq, seq])
    return True


def merge(ranges: list[list[int]], first: int, last: int) -> None:
    """Add the numbers ``first..last`` to a canonical range list (mutable pairs), in place: a few bisection
    steps and one splice, whatever the list's length."""
    i = bisect.bisect_left(ranges, first - 1, key=lambda r: r[1])      # the first range reaching first - 1
    j = bisect.bisect_right(ranges, last + 1, key=lambda r: r[0])      # past the last one starting by last + 1
    if i < j:
        first, last = min(first, ranges[i][0]), max(last, ranges[j - 1][1])
    ranges[i:j] = [[first, last]]


def discard(ranges: list[list[int]], seq: int) -> bool:
    """Remove ``seq`` from a canonical range list (mutable pairs); False if it was not there."""
    i = bisect.bisect_right(ranges, seq, key=lambda r: r[0]) - 1
    if i < 0 or ranges[i][1] < seq:
        return False
    first, last = ranges[i]
    if first == last:
        del ranges[i]
    elif seq == first:
        ranges[i][0] = seq + 1
    elif seq == last:
        ranges[i][1] = seq - 1
    else:
        ranges[i][1] = seq - 1
        ranges.insert(i + 1, [seq + 1, last])
    return True


def cap(ranges: list[list[int]], most: int) -> list[list[int]]:
    """At most ``most`` ranges: the tail is widened into one, as ``add`` would have done."""
    if len(ranges) <= most:
        return ranges
    head = ranges[:most - 1]
    return [*head, [ranges[most - 1][0], ranges[-1][1]]]


def count(ranges: Iterable[Iterable[int]]) -> int:
    """How many numbers the ranges hold."""
    return sum(last - first + 1 for first, last in ranges)


def expand(ranges: Iterable[Iterable[int]]) -> list[int]:
    """Every number, in order (only for small sets: it is as long as ``count``)."""
    return [s for first, last in ranges for s in range(first, last + 1)]


def chunks(ranges: list[list[int]], per_chunk: int) -> Iterator[list[list[int]]]:
    """Consecutive slices of at most ``per_chunk`` ranges (one frame each)."""
    for i in range(0, len(ranges), max(1, per_chunk)):
        yield ranges[i:i + per_chunk]


def per_frame(frame_bytes: int, overhead: int = 64) -> int:
    """How many ranges a frame of at most ``frame_bytes`` bytes carries, after ``overhead``."""
    return max(1, (frame_bytes - overhead) // RANGE_WIRE_BYTES)


def parse(value: Any, upper: int) -> list[list[int]]:
    """A range list received from a peer, checked: ValueError unless canonical, non-empty, in ``[1, upper]``."""
    if not isinstance(value, list) or not value:
        raise ValueError("missed ranges must be a non-empty list of [first, last] pairs")
    prev = 0
    for r in value:
        if (not isinstance(r, list) or len(r) != 2 or type(r[0]) is not int or type(r[1]) is not int):
            raise ValueError(f"missed range {r!r} is not a [first, last] pair of integers")
        first, last = r
        if not prev + 1 <= first <= last <= upper:
            raise ValueError(f"missed range {r!r} is out of order or outside [1, {upper}]")
        prev = last + 1     # disjoint and not adjacent
    return value
