"""What operators expect of a chat (issue 21), as part of the client's state (sans-IO, a ``ChatState`` mixin).

Theory of operation
-------------------
* **Directory**: the link fetches ``directory`` at every connection; the rows
  (public rooms known at the site, the user's private ones) are kept here and
  shown in the sidebar; ``/directory`` fetches and lists them. The server
  pushes changes (``directory_update``): new rooms, member counts, last
  messages, rooms gone, so the list is live without asking again.
* **Search**: ``start_search`` turns the operator's words (``in:ROOM`` and
  ``by:USER`` narrow it) into a ``search`` request numbered ``seq``; the
  ``results`` of an older search are dropped. Results are exactly the server's
  (it never returns a private room the user cannot read), drawn as text.
* **Counts and read markers**: ``welcome`` of the first login carries unread
  and mention counts per room; after that a live message of someone else in a
  room not shown counts (and names the user: a ``Notify("mention")``). A room
  shown gets ``dirty`` instead; ``read_now`` (called by the front end when the
  operator is reading it: shown, scrolled to the end) zeroes its counts and
  returns a ``mark_read`` request with its newest order key. ``read`` frames
  (ours, or from the user's other sessions) lower the counts to what is after
  the marker, so reading in the browser clears the badge here too.
* **Replies**: a message's ``reply_to`` is drawn as a quote of the line it
  answers (``quote_for``), found in the same room, else fetched alone
  (``history {around, limit: 1}``), else "not reached this site yet" (the
  original is late); when the original comes, the replies to it are redrawn.
* **Going to a message** (a search result, a quote): ``jump`` shows the room (a
  public room not joined is shown as a preview) and, if the message is not
  loaded, fetches the page around it; pages.py says where the log then has
  ``Gap`` entries, filled a page at a time with ``fill_gap``.

Requests go out as ``Request`` changes with a ``purpose`` (the link hands the
reply back with it), so the state knows what each reply is for.
"""
from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from chat_server.protocol import sortable_key
from contracts.precedence import DEFAULT

from .model import (
    DELIVERED,
    Change,
    Gap,
    Inserted,
    JumpTo,
    MessageEntry,
    Notify,
    Panel,
    Request,
    Room,
    RoomsChanged,
    Updated,
    precedence_name,
)
from .pages import gap_changes
from .safe_text import printable
from .words import count_of, error_reason, plural

PAGE = 50                     # messages per page around a message or into a gap
SEARCH_LIMIT = 50
_ROOM = re.compile(r"^[A-Za-z0-9#][A-Za-z0-9_.#:+-]{0,63}\Z")
_USER = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,31}\Z")


@dataclass(slots=True)
class SearchResults:
    seq: int
    text: str
    status: str = "searching"          # searching | done | error
    results: list[dict[str, Any]] = field(default_factory=list)
    error: str = ""


@dataclass(frozen=True, slots=True)
class Quote:
    """The line a reply answers, as this client can show it."""

    state: str                         # loaded | loading | missing
    msg_id: str
    user: str = ""
    origin: str = ""
    text: str = ""
    late: bool = False
    precedence: str = DEFAULT


def parse_search(text: str) -> dict[str, str] | str:
    """The search box's words: ``{query, room?, user?}``, or a complaint."""
    out: dict[str, str] = {}
    words = []
    for w in text.split():
        key, _, value = w.partition(":")
        if key.lower() == "in" and _ROOM.match(value):
            out["room"] = value
        elif key.lower() == "by" and _USER.match(value):
            out["user"] = value
        else:
            words.append(w)
    if not words:
        return "search for what? (in:ROOM and by:USER narrow it)"
    out["query"] = " ".join(words)
    return out if len(out["query"]) <= 200 else "a search is at most 200 characters"


class OperatorState:
    # Provided by ChatState (state.py):
    user: str
    rooms: dict[str, Room]
    active: str | None
    by_msg_id: dict[str, MessageEntry]
    if TYPE_CHECKING:
        def room(self, name: str) -> Room: ...
        def notice(self, text: str, level: str = "info", room: str | None = None, scope: str = "") -> list[Change]: ...
        def set_active(self, room: str | None) -> list[Change]: ...
        def _add_messages(self, frames: Iterable[dict[str, Any]], now: float, live: bool) -> list[Change]: ...
        def _remove(self, entry: Any) -> list[Change]: ...
        def _precedence_fields(self, e: MessageEntry, f: dict[str, Any]) -> None: ...
        def _alert_for(self, room: Room, e: MessageEntry, live: bool) -> list[Change]: ...
        def _acknowledge_failed(self, msg_id: str, why: str) -> list[Change]: ...

    def __init__(self) -> None:
        self.directory: list[dict[str, Any]] | None = None
        self.directory_note = ""
        self.search: SearchResults | None = None
        self.selected: str | None = None                  # the msg_id the operator chose (reply, goto, ack)
        self.originals: dict[tuple[str, str], dict[str, Any] | str] = {}   # (room, msg_id) -> frame | state
        self._jump: tuple[str, str] | None = None
        self._seq = 0

    # --- messages: their marks, and what an arrival changes elsewhere ---------------------------------
    def _decorate(self, e: MessageEntry, f: dict[str, Any]) -> None:
        reply_to = f.get("reply_to")
        e.reply_to = reply_to if isinstance(reply_to, str) and reply_to else None
        mentions = f.get("mentions")
        e.mentions_me = isinstance(mentions, list) and self.user in mentions and not e.own
        e.repaired = bool(f.get("repaired"))
        self._precedence_fields(e, f)

    def _after_insert(self, room: Room, e: MessageEntry, live: bool) -> list[Change]:
        out: list[Change] = [Updated(room.name, x) for x in room.entries
                             if isinstance(x, MessageEntry) and x.reply_to == e.msg_id and x is not e]
        quote = self.quote_for(e)
        asked = (room.name, e.reply_to or "") in self.originals
        if e.reply_to and quote is not None and quote.state == "loading" and not asked:
            self.originals[room.name, e.reply_to] = "loading"
            out.append(Request({"type": "history", "room": room.name, "around": e.reply_to, "limit": 1,
                                "purpose": {"kind": "original", "room": room.name, "msg_id": e.reply_to}}))
        out += self._alert_for(room, e, live)
        if live and room.name == self.active:
            room.dirty = True
        elif live and not e.own:
            room.unread += 1
            room.mentions += e.mentions_me
            out.append(RoomsChanged())
            if e.mentions_me:
                out.append(Notify("mention", e))
        return out

    def quote_for(self, e: MessageEntry) -> Quote | None:
        """The quote a reply shows of the line it answers (None: not a reply)."""
        if not e.reply_to:
            return None
        x = self.by_msg_id.get(e.reply_to)
        if x is not None and x.room == e.room and x.state == DELIVERED:
            return Quote("loaded", x.msg_id or "", x.user, x.origin, x.text, x.late, x.precedence)
        o = self.originals.get((e.room, e.reply_to))
        if isinstance(o, dict):
            return Quote("loaded", e.reply_to, str(o.get("user", "?")), str(o.get("origin", "?")),
                         str(o.get("text", "")), bool(o.get("late")), precedence_name(o.get("precedence")))
        return Quote(o if isinstance(o, str) else "loading", e.reply_to)

    def reply_target(self) -> MessageEntry | None:
        """The line ``/reply`` answers: the one chosen in the room shown, else its newest line of someone else."""
        room = self.rooms.get(self.active or "")
        if room is None:
            return None
        chosen = self.by_msg_id.get(self.selected or "")
        if chosen is not None and chosen.room == room.name and chosen.state == DELIVERED:
            return chosen
        for x in reversed(room.entries):
            if isinstance(x, MessageEntry) and x.state == DELIVERED and not x.own:
                return x
        return None

    # --- counts and read markers ------------------------------------------------------------------------
    def _welcome_counts(self, f: dict[str, Any]) -> None:
        def count(table: Any, room: str) -> int:
            n = table.get(room) if isinstance(table, dict) else None
            return n if isinstance(n, int) and n > 0 else 0
        for name in f.get("rooms") or []:
            r = self.room(name)
            r.unread, r.mentions = count(f.get("unread"), name), count(f.get("mentions"), name)
            r.dirty = r.unread > 0 or r.mentions > 0

    def read_now(self, room_name: str | None) -> list[Change]:
        """The operator is reading this room: zero its counts and tell the server (``mark_read``)."""
        r = self.rooms.get(room_name or "")
        if r is None or not r.joined or not (r.unread or r.mentions or r.dirty):
            return []
        r.unread = r.mentions = 0
        r.dirty = False
        newest = next((x for x in reversed(r.entries) if isinstance(x, MessageEntry) and x.state == DELIVERED
                       and x.order), None)
        out: list[Change] = [RoomsChanged()]
        if newest is not None:
            out.append(Request({"type": "mark_read", "room": r.name, "order": newest.order,
                                "purpose": {"kind": "mark_read"}}))
        return out

    def _on_read(self, f: dict[str, Any], now: float) -> list[Change]:
        r, order = self.rooms.get(f.get("room") or ""), f.get("order")
        if r is None or not isinstance(order, list):
            return []
        if r.read is None or sortable_key(order) > sortable_key(r.read):
            r.read = order
        mark = sortable_key(r.read)
        messages = [x for x in r.entries if isinstance(x, MessageEntry) and x.state == DELIVERED]
        if not r.more or (messages and messages[0].sort_key <= mark):
            after = [x for x in messages if not x.own and x.sort_key > mark]
            r.unread = min(r.unread, len(after))
            r.mentions = min(r.mentions, sum(1 for x in after if x.mentions_me))
        return [RoomsChanged()]

    # --- the directory ------------------------------------------------------------------------------------
    def request_directory(self) -> list[Change]:
        return [Request({"type": "directory", "purpose": {"kind": "directory", "show": True}})]

    def _on_directory(self, f: dict[str, Any], now: float) -> list[Change]:
        self.directory = [r for r in f.get("rooms") or [] if isinstance(r, dict) and isinstance(r.get("room"), str)]
        self.directory_note = str(f.get("incomplete") or "")
        out: list[Change] = [Panel("directory")]
        if (f.get("purpose") or {}).get("show"):
            lines = [f"room directory ({len(self.directory)}):"]
            for r in self.directory:
                last = r.get("last_at")
                ago = f"last message {_ago(now - last)}" if isinstance(last, (int, float)) else "no messages yet"
                private = " (private)" if r.get("private") else ""
                lines.append(f" {'*' if r.get('joined') else ' '} {printable(r['room'])}{private}: "
                             f"{plural(count_of(r.get('members')), 'member')}, {ago}")
            if self.directory_note:
                lines.append(f" (incomplete: {printable(self.directory_note)})")
            out += self.notice("\n".join(lines) if self.directory
                               else "the directory is empty: /join ROOM creates a room")
        return out

    def _on_directory_update(self, f: dict[str, Any], now: float) -> list[Change]:
        """The server's push (the directory is live): changed or new entries in place, removed ones gone."""
        if self.directory is None:
            return []                                   # the fetch at (re)connection brings the whole list
        rows = {r["room"]: r for r in self.directory}
        for r in f.get("rooms") or []:
            if isinstance(r, dict) and isinstance(r.get("room"), str):
                mine = self.rooms.get(r["room"])
                rows[r["room"]] = {**rows.get(r["room"], {}), **r, "joined": mine is not None and mine.joined}
        for name in f.get("removed") or []:
            if isinstance(name, str):
                rows.pop(name, None)
        self.directory = sorted(rows.values(), key=lambda r: r["room"])
        return [Panel("directory")]

    def _directory_joined(self, room: str, joined: bool, private: bool = False) -> list[Change]:
        if self.directory is None:
            return []
        for r in self.directory:
            if r["room"] == room:
                r["joined"] = joined
                return [Panel("directory")]
        if joined:
            self.directory.append({"room": room, "private": private, "members": 1, "last_at": None, "joined": True})
            self.directory.sort(key=lambda r: r["room"])
        return [Panel("directory")]

    # --- search ---------------------------------------------------------------------------------------
    def start_search(self, text: str) -> list[Change]:
        parsed = parse_search(text)
        if isinstance(parsed, str):
            return self.notice(parsed, "error")
        self._seq += 1
        self.search = SearchResults(self._seq, " ".join(text.split()))
        frame: dict[str, Any] = {"type": "search", "query": parsed["query"], "limit": SEARCH_LIMIT,
                                 "purpose": {"kind": "search", "seq": self._seq}}
        for k in ("room", "user"):
            if k in parsed:
                frame[k] = parsed[k]
        return [Panel("search"), Request(frame)]

    def close_search(self) -> list[Change]:
        self.search = None
        return [Panel("search")]

    def _on_results(self, f: dict[str, Any], now: float) -> list[Change]:
        seq = (f.get("purpose") or {}).get("seq")
        if self.search is None or seq != self.search.seq or self.search.status == "done":
            return []                         # an older search's, or the same answer again: shown once
        self.search.results = [m for m in f.get("messages") or [] if isinstance(m, dict)
                               and all(isinstance(m.get(k), str) for k in ("msg_id", "room", "text"))]
        self.search.status = "done"
        return [Panel("search")]

    # --- going to a message, pages and gaps -----------------------------------------------------------------
    def jump(self, room: str, msg_id: str) -> list[Change]:
        """Show ``msg_id`` of ``room`` in context (fetching the page around it when it is not loaded)."""
        out: list[Change] = []
        if room not in self.rooms:
            self.room(room).joined = False          # a public room one has not joined: a preview
        if self.active != room:
            out += self.set_active(room)
        self.selected = msg_id
        x = self.by_msg_id.get(msg_id)
        if x is not None and x.room == room and x.state == DELIVERED:
            self._jump = None
            return out + [JumpTo(room, msg_id)]
        self._jump = (room, msg_id)
        return out + [Request({"type": "history", "room": room, "around": msg_id, "limit": PAGE,
                               "purpose": {"kind": "around", "room": room, "msg_id": msg_id}})]

    def gaps(self, room: str) -> list[Gap]:
        return [g for g in self.rooms[room].entries if isinstance(g, Gap)] if room in self.rooms else []

    def fill_gap(self, room: str, before: str | None = None) -> list[Change]:
        """Fetch the messages missing at a gap (the newest one by default)."""
        gaps = [g for g in self.gaps(room) if before is None or g.before == before]
        if not gaps or gaps[-1].loading:
            return []
        g = gaps[-1]
        g.loading = True
        return [Updated(room, g), Request({"type": "history", "room": room, "before": g.before, "limit": PAGE,
                                           "purpose": {"kind": "gap", "room": room, "before": g.before}})]

    def _history_page(self, f: dict[str, Any], purpose: dict[str, Any], now: float) -> list[Change]:
        kind = purpose["kind"]
        room_name = str(f["room"] if isinstance(f.get("room"), str) else purpose.get("room"))
        msgs = [m for m in f.get("messages") or [] if isinstance(m, dict) and isinstance(m.get("msg_id"), str)]
        if kind == "original":
            key = (room_name, purpose["msg_id"])
            found = next((m for m in msgs if m["msg_id"] == purpose["msg_id"]), None)
            self.originals[key] = dict(found) if found is not None else "missing"
            return self._requote(room_name, purpose["msg_id"])
        room = self.rooms.get(room_name) or self.room(room_name)
        if kind == "around":
            flags: dict[str, Any] = dict(more_before=bool(f.get("more_before")), more_after=bool(f.get("more_after")))
        else:
            flags = dict(more_before=bool(f.get("more")), more_after=False, contiguous_with=purpose.get("before"))
        page_ids = {m["msg_id"] for m in msgs if m.get("room") == room.name}
        was_loaded = purpose.get("msg_id") in self.by_msg_id
        out = self._merge_page(room, msgs, now, **flags)
        for g in self.gaps(room.name):
            if g.loading and kind == "gap" and g.before == purpose.get("before"):
                g.loading = False
                out.append(Updated(room.name, g))
        if kind == "older":
            added = sum(1 for c in out if isinstance(c, Inserted) and isinstance(c.entry, MessageEntry))
            out += self.notice(f"{plural(added, 'older message')} loaded"
                               + ("; more on the server (/history again)" if room.more else ""), room=room.name,
                               scope="room")
        if kind == "around" and self._jump == (room.name, purpose.get("msg_id")):
            self._jump = None
            if was_loaded or purpose["msg_id"] in page_ids:
                out.append(JumpTo(room.name, purpose["msg_id"]))
            else:
                out += self.notice(f"message {printable(purpose['msg_id'])} is not in {printable(room.name)} here",
                                   "error")
        return out

    def _merge_page(self, room: Room, msgs: list[dict[str, Any]], now: float, *, more_before: bool, more_after: bool,
                    contiguous_with: str | None = None) -> list[Change]:
        """Add a page of history (not live) to the room, with the gaps it fills and opens (pages.py)."""
        msgs = [m for m in msgs if m.get("room") == room.name and isinstance(m.get("msg_id"), str)]
        loaded = {x.msg_id: x.sort_key for x in room.entries
                  if isinstance(x, MessageEntry) and x.state == DELIVERED and x.msg_id}
        page = [(m["msg_id"], sortable_key(m.get("order")) or b"\xff") for m in msgs]
        filled, opened = gap_changes(loaded, page, {g.before for g in self.gaps(room.name)}, more_before=more_before,
                                     more_after=more_after, contiguous_with=contiguous_with)
        out = self._add_messages(msgs, now, live=False)
        for g in self.gaps(room.name):
            if g.before in filled:
                out += self._remove(g)
        for before in opened:
            i = next((i for i, x in enumerate(room.entries) if isinstance(x, MessageEntry) and x.msg_id == before),
                     None)
            if i is not None:
                g = Gap(f"gap:{before}", room.name, before)
                room.entries.insert(i, g)
                out.append(Inserted(room.name, i, g))
        first = next((x for x in room.entries if isinstance(x, MessageEntry) and x.state == DELIVERED), None)
        if page and first is not None and first.msg_id == min(page, key=lambda p: p[1])[0]:
            room.more = more_before
        return out

    def _requote(self, room: str, msg_id: str) -> list[Change]:
        r = self.rooms.get(room)
        return [Updated(room, x) for x in (r.entries if r else [])
                if isinstance(x, MessageEntry) and x.reply_to == msg_id]

    def _purpose_failed(self, purpose: dict[str, Any], f: dict[str, Any]) -> list[Change] | None:
        """An error answering a request made for a purpose; None: handle it as any error."""
        kind, why = purpose.get("kind"), error_reason(f)
        if kind == "original":
            self.originals[purpose["room"], purpose["msg_id"]] = "missing"
            return self._requote(purpose["room"], purpose["msg_id"])
        if kind == "around":
            self._jump = None
            return self.notice(f"cannot show that message: {why}", "error")
        if kind == "gap":
            for g in self.gaps(purpose["room"]):
                g.loading = False
            return self.notice(f"cannot load those messages: {why}", "error")
        if kind == "search":
            if self.search is not None and self.search.seq == purpose.get("seq"):
                self.search.status, self.search.error = "error", why
            return [Panel("search")]
        if kind == "directory" and not purpose.get("show"):
            return []                                   # the automatic fetch: an older server has no directory
        if kind == "mark_read":
            return []                                   # best effort: the next read sends it again
        if kind == "acknowledge":
            return self._acknowledge_failed(purpose["msg_id"], why)
        return None


def _ago(seconds: float) -> str:
    if seconds < 90:
        return "just now"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min ago"
    if seconds < 129600:
        return f"{seconds / 3600:.0f} h ago"
    return f"{seconds / 86400:.0f} days ago"
