"""IRCv3 ``CHATHISTORY`` (draft/chathistory) on the chat protocol's ``history`` pages, sans-IO.

A :class:`HistoryQuery` is one ``CHATHISTORY`` command: it says which
``history`` request to send first (:meth:`first`), takes each reply
(:meth:`take`, which returns the next request or None when it has enough) and
then gives the messages to send, oldest first in the global order
(:meth:`result`). The session (``irc.py``) sends them in a ``chathistory``
batch.

Selectors. ``msgid=`` maps straight onto the chat server's pages: ``LATEST *``
is the latest page, ``BEFORE`` a page ``before`` the message, ``AROUND`` the
page ``around`` it, ``AFTER`` the newer half of a page around it (and the next
if it was cut short), ``LATEST msgid=`` the latest page after it. The global
order is the order (docs/ordering.md), as the specification asks of msgids.
``timestamp=`` selects on the messages' ``sent_at`` within that order: the
latest pages are walked back until the time is passed (at most
``TIME_PAGES`` pages of ``PAGE`` messages: the newest 2,000 messages);
``BEFORE`` gives the last ``limit`` messages sent before the time, ``AFTER``
the first sent after it, ``LATEST`` the last sent after it, ``AROUND`` half
and half. ``BETWEEN`` is refused (``INVALID_PARAMS``), ``TARGETS`` lists no
targets (there are no direct messages, and a client's channels are joined at
log-in).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .ircline import parse_irc_time, room_of

CHATHISTORY_MAX = 100           # ISUPPORT CHATHISTORY: most messages one command returns
PAGE = 100                      # messages per page walked back for a timestamp selector
TIME_PAGES = 20                 # pages walked back at most (the newest 2,000 messages)
SUBCOMMANDS = ("LATEST", "BEFORE", "AFTER", "AROUND")


class HistoryRequestError(ValueError):
    """A CHATHISTORY command that cannot be answered: the FAIL line's code and context."""

    def __init__(self, code: str, context: tuple[str, ...], message: str) -> None:
        super().__init__(message)
        self.code, self.context, self.message = code, context, message


@dataclass
class HistoryQuery:
    """One CHATHISTORY command over a room's history pages (see the module docstring)."""

    sub: str                                   # LATEST | BEFORE | AFTER | AROUND
    target: str                                # the channel as the client named it
    room: str
    msgid: str | None = None                   # msgid= selector
    at: float | None = None                    # timestamp= selector (Unix time)
    limit: int = CHATHISTORY_MAX
    collected: list[dict[str, Any]] = field(default_factory=list)   # ascending global order
    pages: int = 0
    older_seen: int = 0                        # timestamp=: messages sent before the time, walked past
    done: bool = False

    def first(self) -> dict[str, Any]:
        """The first ``history`` request."""
        frame: dict[str, Any] = {"type": "history", "room": self.room}
        if self.at is not None:
            return {**frame, "limit": PAGE}
        if self.msgid is None or self.sub == "LATEST":
            return {**frame, "limit": self.limit}
        if self.sub == "BEFORE":
            return {**frame, "before": self.msgid, "limit": self.limit}
        if self.sub == "AROUND":
            return {**frame, "around": self.msgid, "limit": self.limit}
        return {**frame, "around": self.msgid, "limit": 2 * self.limit + 1}          # AFTER

    def take(self, reply: dict[str, Any]) -> dict[str, Any] | None:
        """A ``history`` reply in; the next request, or None when the query has what it needs."""
        page = [m for m in reply.get("messages") or [] if isinstance(m, dict)]
        self.pages += 1
        if self.at is not None:
            self.older_seen += sum(1 for m in page if self._sent(m) < self.at)
            self.collected = self._keep(page + self.collected)
            if page and reply.get("more") and self.pages < TIME_PAGES and not self._time_passed():
                return {"type": "history", "room": self.room, "before": page[0].get("msg_id"), "limit": PAGE}
            self.done = True
            return None
        if self.sub == "AFTER":
            # Each page is centred on the newest message taken so far (the selector's, first): take what follows.
            anchor = self.collected[-1].get("msg_id") if self.collected else self.msgid
            ids = [m.get("msg_id") for m in page]
            newer = page[ids.index(anchor) + 1:] if anchor in ids else []
            self.collected += newer
            want = self.limit - len(self.collected)
            if want > 0 and newer and reply.get("more_after") and self.pages < TIME_PAGES:
                return {"type": "history", "room": self.room, "around": self.collected[-1].get("msg_id"),
                        "limit": 2 * want + 1}
            self.collected = self.collected[:self.limit]
            self.done = True
            return None
        self.collected = page
        if self.sub == "LATEST" and self.msgid is not None:
            ids = [m.get("msg_id") for m in page]
            if self.msgid in ids:
                self.collected = page[ids.index(self.msgid) + 1:]
        self.done = True
        return None

    def _sent(self, m: dict[str, Any]) -> float:
        try:
            return float(m.get("sent_at") or 0)
        except (TypeError, ValueError):
            return 0.0

    def _keep(self, msgs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Of the messages walked back so far (in order), only those that may still be in the result: a
        timestamp query holds about ``limit`` messages, however far it walks."""
        assert self.at is not None
        at, n = self.at, self.limit
        older = [m for m in msgs if self._sent(m) < at]
        if self.sub == "BEFORE":
            return older[-n:]
        if self.sub == "LATEST":
            return [m for m in msgs if self._sent(m) > at][-n:]
        if self.sub == "AFTER":
            return [m for m in msgs if self._sent(m) > at][:n]
        half = older[-(n // 2):] if n // 2 else []
        rest = [m for m in msgs if self._sent(m) >= at][:n]
        kept = {id(m) for m in half + rest}
        return [m for m in msgs if id(m) in kept]

    def _time_passed(self) -> bool:
        """Whether the pages walked back reach far enough before the time for this subcommand."""
        assert self.at is not None
        if self.sub == "BEFORE":
            return self.older_seen >= self.limit
        if self.sub == "AROUND":
            return self.older_seen >= self.limit // 2
        if self.sub == "LATEST" and len(self.collected) >= self.limit:
            return True
        return self.older_seen > 0

    def result(self) -> list[dict[str, Any]]:
        """The messages to send, oldest first in the global order."""
        if self.at is None:
            return self.collected[-self.limit:] if self.sub != "AFTER" else self.collected[:self.limit]
        at = self.at
        before = [m for m in self.collected if self._sent(m) < at]
        after = [m for m in self.collected if self._sent(m) > at]
        if self.sub == "BEFORE":
            return before[-self.limit:]
        if self.sub == "AFTER":
            return after[:self.limit]
        if self.sub == "LATEST":
            return after[-self.limit:]
        older = before[-(self.limit // 2):] if self.limit // 2 else []
        rest = [m for m in self.collected if self._sent(m) >= at][:self.limit - len(older)]
        return older + rest


def parse_chathistory(params: tuple[str, ...]) -> HistoryQuery | tuple[str, str]:
    """A CHATHISTORY command's parameters as a query; ``("TARGETS", "")`` or ``("NICK", target)`` for the
    subcommands that list nothing here (no targets, no direct messages); raise HistoryRequestError."""
    if not params:
        raise HistoryRequestError("INVALID_PARAMS", ("*",), "Insufficient parameters")
    sub = params[0].upper()
    if sub == "TARGETS":
        return ("TARGETS", "")
    if sub == "BETWEEN":
        raise HistoryRequestError("INVALID_PARAMS", (sub,), "BETWEEN is not supported here: use BEFORE, AFTER, "
                                                           "AROUND or LATEST")
    if sub not in SUBCOMMANDS:
        raise HistoryRequestError("INVALID_PARAMS", (params[0][:20],), "Unknown command")
    if len(params) < 4:
        raise HistoryRequestError("INVALID_PARAMS", (sub,), "Insufficient parameters")
    if len(params) > 4:
        raise HistoryRequestError("INVALID_PARAMS", (sub,), "Too many parameters")
    target, selector, limit_text = params[1], params[2], params[3]
    try:
        limit = int(limit_text)
    except ValueError:
        raise HistoryRequestError("INVALID_PARAMS", (sub, limit_text[:20]), "Invalid limit") from None
    if not 1 <= limit <= CHATHISTORY_MAX:
        raise HistoryRequestError("INVALID_PARAMS", (sub, limit_text[:20]),
                                  f"Invalid limit: from 1 to {CHATHISTORY_MAX}")
    room = room_of(target)
    if room is None:
        if target.startswith("#"):
            raise HistoryRequestError("INVALID_TARGET", (sub, target[:70]), "Messages could not be retrieved")
        return ("NICK", target)
    query = HistoryQuery(sub, target, room, limit=limit)
    kind, _, value = selector.partition("=")
    if selector == "*" and sub == "LATEST":
        return query
    if kind == "msgid" and value:
        query.msgid = value
        return query
    if kind == "timestamp":
        at = parse_irc_time(value)
        if at is None:
            raise HistoryRequestError("INVALID_PARAMS", (sub, selector[:40]), "Invalid timestamp")
        query.at = at
        return query
    raise HistoryRequestError("INVALID_PARAMS", (sub, selector[:40]), "Invalid message reference: msgid=, "
                                                                       "timestamp= (or * for LATEST)")


__all__ = ["CHATHISTORY_MAX", "PAGE", "SUBCOMMANDS", "TIME_PAGES", "HistoryQuery", "HistoryRequestError",
           "parse_chathistory"]
