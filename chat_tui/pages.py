"""Where a page of history leaves gaps in a room's log (pure; the same rules as web_ui/static/js/pages.js).

A room's log starts as one stretch (the last messages, from ``joined``) and grows
at the old end. Going to a message that is not loaded (a search result, the line
a reply answers) fetches the page around it, which may sit far from what is
loaded; between two stretches a gap says messages are missing there, and is
filled a page at a time (``history {before: the message after the gap}``). A gap
is named by the message just after it. For a page P (oldest F, newest L):

* a gap before a message inside P (other than F), or before the message P was
  fetched before (``contiguous_with``), is filled;
* before F: a gap if more messages exist before P, F was not loaded, and
  something older is;
* after L: a gap before the next loaded message if more exist after P, L was
  not loaded, and P was not fetched before a loaded message.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence


def gap_changes(loaded: Mapping[str, bytes], page: Sequence[tuple[str, bytes]], gaps: set[str], *,
                more_before: bool, more_after: bool, contiguous_with: str | None = None) -> tuple[set[str], list[str]]:
    """The gaps (named by the msg_id after them) a page fills, and those it opens.

    ``loaded``: msg_id -> sort key of the messages loaded before the page; ``page``: (msg_id, sort key);
    ``gaps``: the gaps there are now."""
    page = sorted(page, key=lambda p: p[1])
    ids = {m for m, _ in page}
    first = page[0][0] if page else None
    filled = {g for g in gaps if g == contiguous_with or (g in ids and g != first)}
    opened: list[str] = []
    if page and more_before and first not in loaded and any(k < page[0][1] for k in loaded.values()):
        opened.append(page[0][0])
    if page and more_after and contiguous_with is None and page[-1][0] not in loaded:
        later = sorted((k, m) for m, k in loaded.items() if k > page[-1][1])
        if later:
            opened.append(later[0][1])
    remaining = gaps - filled
    return filled, [g for g in opened if g not in remaining]
