"""Pages of a room's history for clients: what ``joined`` and ``history`` carry, sized to the client's queue.

A page holds at most ``page_bytes`` (half the outbound queue) of messages, so a
page of long messages never closes a client as a slow consumer (audit row 6);
``more`` tells the client to ask for the rest with ``before`` or ``after_n``.

A page is read at the time it is built: a message past its ``expires_at``
then is marked ``expired`` (store_messages.py), by ``clock``, the server's
wall clock (a test's virtual one; None: frames carry ``expires_at`` unmarked).

In a labeled mission every page is read for one user: ``may_read`` (the
user's clearance against a message's stored label, rooms.py) leaves out the
messages the user may not read, and the page is filled from further back (at
most ``SCAN_PAGES`` reads a page): a hidden message is answered, by ``around``
and ``before`` too, as one that does not exist.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol

from . import protocol as P
from .protocol import ErrorCode as E
from .protocol import Refusal
from .store import PrivateRoom
from .store_messages import StoredMessage

Readable = Callable[[str], bool]       # may the reader read a message with this stored label (``str(Label)``)?
SCAN_PAGES = 20                        # reads to fill one page around hidden messages; then ``more`` says more


class HistoryView(Protocol):
    """What pages are read from (ChatStore provides it)."""

    def history(self, room: str, limit: int, before: list[Any] | None = None,
                after: list[Any] | None = None) -> tuple[list[StoredMessage], bool]: ...
    def acknowledgements_of(self, msg_ids: list[str]) -> dict[str, list[dict[str, Any]]]: ...
    def since_n(self, rooms: Iterable[str], after_n: int, limit: int) -> tuple[list[StoredMessage], bool]: ...
    def message(self, msg_id: str) -> StoredMessage | None: ...
    def room_of(self, msg_id: str) -> str | None: ...
    def receipts_of(self, msg_ids: list[str]) -> dict[str, list[str]]: ...


class History:
    def __init__(self, view: HistoryView, *, on_join: int, most: int, page_bytes: int,
                 clock: Callable[[], float] | None = None) -> None:
        self.view = view
        self.clock = clock                  # wall clock: when a page is read (expiry)
        self.on_join = on_join              # messages in a ``joined`` frame
        self.most = most                    # the largest ``history`` page
        self.page_bytes = page_bytes

    def joined(self, room: str, private: PrivateRoom | None, may_read: Readable | None = None) -> dict[str, Any]:
        """The ``joined`` frame: the room's last messages in global order (those the reader may read)."""
        msgs, more = self.readable(room, self.on_join, may_read)
        msgs, trimmed = self.fit(msgs, keep_newest=True)
        return P.joined(room=room, private=private is not None, history=self.frames(msgs), more=more or trimmed,
                        members=sorted(private.members) if private is not None else None)

    def readable(self, room: str, limit: int, may_read: Readable | None, before: list[Any] | None = None,
                 after: list[Any] | None = None) -> tuple[list[StoredMessage], bool]:
        """``view.history`` with the messages ``may_read`` refuses left out, the page filled from further on."""
        if may_read is None:
            return self.view.history(room, limit, before, after)
        out: list[StoredMessage] = []
        more = True
        for _ in range(SCAN_PAGES):
            msgs, more = self.view.history(room, limit, before, after)
            kept = [m for m in msgs if may_read(m.label)]
            if after is not None:
                out += kept
                after = msgs[-1].order if msgs else after
            else:
                out = kept + out
                before = msgs[0].order if msgs else before
            if len(out) >= limit or not more:
                break
        if len(out) > limit:
            out, more = (out[:limit] if after is not None else out[-limit:]), True
        return out, more

    def _since(self, room: str, after_n: int, limit: int,
               may_read: Readable | None) -> tuple[list[StoredMessage], bool]:
        """``view.since_n`` of one room with the messages ``may_read`` refuses left out."""
        out: list[StoredMessage] = []
        more = True
        for _ in range(SCAN_PAGES):
            msgs, more = self.view.since_n([room], after_n, limit)
            out += [m for m in msgs if may_read is None or may_read(m.label)]
            after_n = msgs[-1].n if msgs else after_n
            if len(out) >= limit or not more or may_read is None:
                break
        if len(out) > limit:
            out, more = out[:limit], True
        return out, more

    def page(self, room: str, limit: int | None, before: Any = None, after_n: int | None = None,
             around: str | None = None, may_read: Readable | None = None) -> dict[str, Any]:
        """The ``history`` reply: a page before a msg_id or order key, after a delivery number, or around a
        message (half before it, the message, half after: where a search result or a reply's quote leads).

        A msg_id of another room (maybe a private one) is answered as one that does not exist, by the same
        path: one lookup of its room, never the message itself (no timing difference to walk msg_ids by)."""
        limit = min(limit if limit is not None else self.on_join, self.most)
        if around is not None:
            ref = self.view.message(around) if self.view.room_of(around) == room else None
            if ref is None or (may_read is not None and not may_read(ref.label)):
                raise Refusal(E.NOT_FOUND, f"history: no message {around[:80]!r} in room {room!r} at this site")
            older, more_before = self.readable(room, max(0, (limit - 1) // 2), may_read, ref.order)
            newer, more_after = self.readable(room, limit - 1 - len(older), may_read, after=ref.order)
            msgs, trimmed = self.fit(older + [ref] + newer, keep_newest=False)
            frame = P.history(room, self.frames(msgs), more_before or more_after or trimmed)
            frame["more_before"], frame["more_after"] = more_before, more_after or trimmed
            return frame
        if after_n is not None:
            msgs, more = self._since(room, after_n, limit, may_read)
            msgs, trimmed = self.fit(msgs, keep_newest=False)
        else:
            if isinstance(before, str):
                ref = self.view.message(before) if self.view.room_of(before) == room else None
                if ref is None or (may_read is not None and not may_read(ref.label)):
                    raise Refusal(E.BAD_FIELD, f"history: no message {before[:80]!r} in room {room!r}")
                before = ref.order
            msgs, more = self.readable(room, limit, may_read, before)
            msgs, trimmed = self.fit(msgs, keep_newest=True)
        return P.history(room, self.frames(msgs), more or trimmed)

    def fit(self, msgs: list[StoredMessage], keep_newest: bool) -> tuple[list[StoredMessage], bool]:
        """As many messages as fit ``page_bytes`` in one frame (the newest or the oldest), and whether some
        were left out."""
        budget = self.page_bytes
        kept: list[StoredMessage] = []
        for m in (reversed(msgs) if keep_newest else msgs):
            budget -= len(m.text.encode("utf-8")) + 2 * len(m.user) + 320   # the frame's size, estimated
            if budget < 0 and kept:
                break
            kept.append(m)
        if len(kept) == len(msgs):
            return msgs, False
        return (kept[::-1] if keep_newest else kept), True

    def frames(self, msgs: list[StoredMessage]) -> list[dict[str, Any]]:
        """``message`` frames with each message's receipts (the sites that delivered it) and, for flash and
        immediate messages, who acknowledged them; ``expired`` if read past their ``expires_at``."""
        receipts = self.view.receipts_of([m.msg_id for m in msgs])
        acks = self.view.acknowledgements_of([m.msg_id for m in msgs if m.precedence.urgent])
        out = []
        now = self.clock() if self.clock is not None else None
        for m in msgs:
            fr = m.frame(now)
            fr["receipts"] = receipts.get(m.msg_id, [])
            if m.precedence.urgent:
                fr["acknowledgements"] = acks.get(m.msg_id, [])
            out.append(fr)
        return out
