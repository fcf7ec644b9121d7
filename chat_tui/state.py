"""What an operator's client knows, built from chat protocol v1 frames (sans-IO).

Theory of operation
-------------------
``ChatState.apply(frame, now)`` takes one server frame (an event or a reply,
as ``chat_server.client`` hands them over) and the current time, updates the
client's picture of the mission, and returns a list of ``Change`` records
saying what to show. Both front ends use it: the Textual app turns changes
into widget updates, the line client into one printed line each. Nothing here
does I/O or reads a clock, so every rule is tested by feeding frames.

Rules that matter to an operator:

* A room's log is kept in global order (the ``order`` key of each message,
  compared as the chat server compares it). A message that arrives after its
  place has passed (``late``) is inserted at its place and a one-line notice
  at the bottom of the log says how late it was and how far up it went.
* Own messages are echoed at once as *pending*; the ``ack`` makes them
  *accepted* (durable at our site); the ``message`` frame replaces the echo
  by the real message, and each ``receipt`` adds a site that delivered it,
  shown as ``delivered/known sites``.
* ``missing`` frames (messages known lost after a disconnection) become a
  notice in every joined room, since the lost messages' rooms are unknown;
  one per origin, which repair's revisions replace (``losses.LossState``).
* A line whose time reads earlier than the line above it carries how much
  earlier (``out_of_time``: lines follow the global order, not the senders'
  clocks; docs/chat-protocol.md "Order against time"); inserting a late line
  checks the line below it again.
* What operators expect (issue 21) and precedence (issue 19) live in two
  mixins: ``operators.OperatorState`` (directory, search, unread and mention
  counts, read markers, replies and their quotes, going to a message, gaps)
  and ``alerts.AlertState`` (FLASH/IMMEDIATE alerts until acknowledged, the
  acknowledgement lists); units' positions in a third,
  ``positions.PositionState`` (the newest report per unit, expiry, ``/pos``);
  messages that expire in a fourth, ``expiry.ExpiryState``.
  What they need from the network comes out as ``Request`` changes, which the
  front ends hand to the link.

A notice's text is display text: whatever the server sent goes in through
``safe_text.printable``, so a ``\n`` in a notice is always one of ours (a
listing), never a line forged by a name or an error message. Messages keep
their fields as sent; the front ends escape them when they draw them.
"""
from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any

from chat_server.protocol import out_of_time
from contracts.labels import Label
from contracts.precedence import DEFAULT
from contracts.text import duration as _fmt_seconds

from .alerts import AlertState
from .expiry import ExpiryState
from .labels import LabelState, label_of
from .losses import LossState
from .model import (
    ACCEPTED,
    CONNECTED,
    DELIVERED,
    DISCONNECTED,
    FAILED,
    MAX_ENTRIES,
    PENDING,
    STATUSES,
    SUSPECTED,
    UNKNOWN,
    Banner,
    Change,
    Entry,
    Expired,
    Gap,
    Inserted,
    JumpTo,
    MessageEntry,
    Notice,
    Notify,
    Output,
    Panel,
    PositionsListed,
    PresenceChanged,
    Receipt,
    Removed,
    Request,
    Room,
    RoomsChanged,
    SendLabel,
    SitesChanged,
    Updated,
    status_name,
)
from .operators import OperatorState
from .positions import PositionState
from .safe_text import printable
from .words import count_of as _count
from .words import error_reason, plural

__all__ = ["ACCEPTED", "CONNECTED", "DELIVERED", "DISCONNECTED", "FAILED", "MAX_ENTRIES", "PENDING", "STATUSES",
           "SUSPECTED", "UNKNOWN", "Banner", "Change", "ChatState", "Entry", "Expired", "Gap", "Inserted", "JumpTo",
           "MessageEntry", "Notice", "Notify", "Output", "Panel", "PositionsListed", "PresenceChanged", "Receipt",
           "Removed", "Request", "Room", "RoomsChanged", "SendLabel", "SitesChanged", "Updated"]


class ChatState(OperatorState, AlertState, LossState, PositionState, ExpiryState, LabelState):
    """The client's picture: site statuses, presence, rooms and their logs, own messages."""

    def __init__(self, user: str) -> None:
        self.user = user
        self.site: str | None = None
        self.sites: dict[str, str] = {}
        self.via: dict[str, str] = {}        # site -> next hop, for a site reached only through relays
        self.chat_down: set[str] = set()     # sites RCM reaches whose chat server is gone (nobody there online)
        self.presence: dict[str, set[str]] = {}
        self.rooms: dict[str, Room] = {}
        self.active: str | None = None
        self.pending: dict[str, MessageEntry] = {}      # client_id -> local echo
        self.by_msg_id: dict[str, MessageEntry] = {}
        self._notices = itertools.count(1)
        self._welcomed = False
        self.joining: dict[str, str | None] = {}         # room -> the room shown before ``/join`` (until joined)
        OperatorState.__init__(self)
        AlertState.__init__(self)
        LossState.__init__(self)
        PositionState.__init__(self)
        ExpiryState.__init__(self)
        LabelState.__init__(self)

    # --- queries ------------------------------------------------------------------------------------
    def room(self, name: str) -> Room:
        r = self.rooms.get(name)
        if r is None:
            r = self.rooms[name] = Room(name)
        return r

    def joined_rooms(self) -> list[str]:
        return sorted(r.name for r in self.rooms.values() if r.joined)

    def site_count(self) -> int:
        return max(1, len(self.sites))

    def oldest_msg_id(self, room: str) -> str | None:
        for e in self.room(room).entries:
            if isinstance(e, MessageEntry) and e.msg_id and e.state == DELIVERED:
                return e.msg_id
        return None

    def set_active(self, room: str | None) -> list[Change]:
        """Show a room: its unread lines are read now (``read_now`` tells the server); the composer's label goes
        back to the room's floor."""
        changing = room != self.active
        self.active = room
        if room is not None and room in self.rooms:
            r = self.rooms[room]
            r.dirty = r.dirty or r.unread > 0 or r.mentions > 0
            r.unread = r.mentions = 0
        return [RoomsChanged(), *self._reset_send_label(changing)]

    # --- local actions --------------------------------------------------------------------------------
    def echo(self, room: str, text: str, client_id: str, now: float, *, precedence: str = DEFAULT,
             reply_to: str | None = None, label: Label | None = None) -> list[Change]:
        """Show our own message as pending until the server acknowledges it."""
        e = MessageEntry(f"pending:{client_id}", room, self.user, self.site or "?", text, now, None, own=True,
                         state=PENDING, precedence=precedence, reply_to=reply_to, label=label)
        self.pending[client_id] = e
        return [self._append(room, e)]

    def send_failed(self, client_id: str, reason: str) -> list[Change]:
        e = self.pending.pop(client_id, None)
        if e is None:
            return []
        e.state = FAILED
        out: list[Change] = [Updated(e.room, e)]
        out.append(self._append(e.room, Notice(self._notice_key(), e.room, f"not sent: {reason}", "error")))
        return out

    def notice(self, text: str, level: str = "info", room: str | None = None, scope: str = "") -> list[Change]:
        """A system line in a room (the active one by default), or plain output if no room is open.

        ``scope``: "" for command output, "room" for news about that room, "all" for news shown in every room."""
        room = room or self.active
        if room is None or room not in self.rooms:
            return [Output(text, level)]
        return [self._append(room, Notice(self._notice_key(), room, text, level, scope))]

    # --- joining -----------------------------------------------------------------------------------
    def start_join(self, room: str) -> list[Change]:
        """``/join ROOM``: ask the server, and show the room at once (lines typed next go there, in order);
        a refusal takes it away again (``_join_refused``)."""
        r = self.rooms.get(room)
        if r is not None and r.joined:
            return self.set_active(room)
        self.joining.setdefault(room, self.active)
        if r is None:
            self.room(room).joined = False                 # not a member until the server says ``joined``
        return [Request({"type": "join", "room": room, "purpose": {"kind": "join", "room": room}}),
                *self.set_active(room)]

    def _join_refused(self, room: str, why: str) -> list[Change]:
        """The server refused a ``/join``: the room goes (unless it is shown as a preview), the room shown before
        comes back, and the operator reads why."""
        before = self.joining.pop(room, None)
        r = self.rooms.get(room)
        if r is not None and not r.joined and not any(isinstance(x, MessageEntry) for x in r.entries):
            del self.rooms[room]
        out: list[Change] = [RoomsChanged()]
        if self.active == room and room not in self.rooms:
            back = before if before in self.rooms else next(iter(self.joined_rooms()), None)
            out += self.set_active(back)
        return out + self.notice(f"cannot join {printable(room)}: {why}", "error")

    def connection_lost(self) -> list[Change]:
        """While we are cut off from our chat server we cannot vouch for any site."""
        for s in self.sites:
            self.sites[s] = UNKNOWN
        return [SitesChanged(None, None)]

    # --- frames ---------------------------------------------------------------------------------------
    def apply(self, frame: dict[str, Any], now: float) -> list[Change]:
        """Update from one server frame; return what changed."""
        handler = getattr(self, f"_on_{frame.get('type')}", None)
        if handler is None:
            return []
        changes: list[Change] = handler(frame, now)
        return changes

    def _on_welcome(self, f: dict[str, Any], now: float) -> list[Change]:
        self.site = f.get("site")
        self.sites = {s: status_name(st) for s, st in (f.get("sites") or {}).items()}
        self.via = {s: hop for s, hop in (f.get("via") or {}).items() if isinstance(hop, str)}
        self.chat_down = {s for s in f.get("chat_down") or () if isinstance(s, str)}
        self.presence = {s: set(users) for s, users in (f.get("presence") or {}).items()}
        for name in f.get("rooms") or []:
            self.room(name).joined = True
        out: list[Change] = [SitesChanged(None, None), RoomsChanged()]
        if not self._welcomed:              # a resume counts what it catches up on itself
            self._welcomed = True
            self._welcome_counts(f)
        else:                               # and learns what repair brought back while it was away
            out += self._reconcile_losses(f.get("missing"))
        for s, users in self.presence.items():
            out.append(PresenceChanged(s, tuple(sorted(users)), ()))
        return out + self._labels_welcome(f)

    def _on_site_status(self, f: dict[str, Any], now: float) -> list[Change]:
        site, status = f.get("site"), f.get("status")
        if not isinstance(site, str) or not isinstance(status, str):
            return []
        self.sites[site] = status = status_name(status)
        if isinstance(f.get("via"), str):
            self.via[site] = f["via"]
        else:
            self.via.pop(site, None)
        if f.get("chat_down") is True:
            self.chat_down.add(site)
        else:
            self.chat_down.discard(site)
        return [SitesChanged(site, status)]

    def site_words(self, site: str) -> str:
        """``connected``, ``connected via B`` (reached only through relays), ``suspected``..., and ``, chat server
        down`` when RCM reaches the site but its chat server is gone."""
        status = self.sites.get(site, UNKNOWN)
        via = self.via.get(site) if status == CONNECTED else None
        words = f"{status} via {via}" if via else status
        return words + (", chat server down" if site in self.chat_down else "")

    def _on_presence(self, f: dict[str, Any], now: float) -> list[Change]:
        site = f.get("site")
        if not isinstance(site, str):
            return []
        users = self.presence.setdefault(site, set())
        online, offline = tuple(f.get("online") or ()), tuple(f.get("offline") or ())
        users.update(online)
        users.difference_update(offline)
        return [PresenceChanged(site, online, offline)]

    def _on_joined(self, f: dict[str, Any], now: float) -> list[Change]:
        room = self.room(f["room"])
        room.joined = True
        self.joining.pop(room.name, None)
        if not any(isinstance(x, MessageEntry) for x in room.entries):
            room.more = bool(f.get("more"))
        if isinstance(f.get("read"), list) and room.read is None:
            room.read = f["read"]
        if self.active is None:
            self.active = room.name
            self.send_label = None
        out: list[Change] = [RoomsChanged(), *self._label_joined(room, f)]
        out += self._merge_page(room, list(f.get("history") or []), now, more_before=bool(f.get("more")),
                                more_after=False)
        out += self._directory_joined(room.name, True, bool(f.get("private")))
        return out

    def _on_left(self, f: dict[str, Any], now: float) -> list[Change]:
        name = f.get("room")
        if name in self.rooms:
            self.rooms[name].joined = False
            del self.rooms[name]
        out: list[Change] = [RoomsChanged()]
        if isinstance(name, str):
            out += self._directory_joined(name, False)
            out += self._forget_alerts(name)
        if f.get("reason"):
            out.append(Output(f"left {printable(name)}: {printable(f['reason'])}", "warning"))
        return out

    def _on_history(self, f: dict[str, Any], now: float) -> list[Change]:
        purpose = f.get("purpose") or {}
        if purpose.get("kind") in ("around", "original", "gap", "older"):
            return self._history_page(f, purpose, now)
        room = self.room(f["room"])
        room.more = bool(f.get("more"))
        msgs = f.get("messages") or []
        out = self._add_messages(msgs, now, live=False)
        added = sum(1 for c in out if isinstance(c, Inserted))
        out += self.notice(f"{plural(added, 'older message')} loaded"
                           + ("; more on the server (/history again)" if room.more else ""), room=room.name,
                           scope="room")
        return out

    def _on_message(self, f: dict[str, Any], now: float) -> list[Change]:
        return self._add_messages([f], now, live=True)

    def _on_ack(self, f: dict[str, Any], now: float) -> list[Change]:
        e = self.pending.get(f.get("client_id", ""))
        msg_id = f.get("msg_id")
        if e is None or not isinstance(msg_id, str):
            return []
        del self.pending[f["client_id"]]
        # Sites that were disconnected: shown on the line ("not sent to C") until they deliver it (repair).
        skipped = tuple(s for s in f.get("skipped") or () if isinstance(s, str))
        delivered = self.by_msg_id.get(msg_id)
        if delivered is not None:                # the message itself came first: the echo is done
            delivered.skipped = skipped
            return self._remove(e) + ([Updated(delivered.room, delivered)] if skipped else [])
        e.msg_id = msg_id
        e.state = ACCEPTED
        e.skipped = skipped
        self.by_msg_id[msg_id] = e
        return [Updated(e.room, e)]

    def _on_receipt(self, f: dict[str, Any], now: float) -> list[Change]:
        e = self.by_msg_id.get(f.get("msg_id", ""))
        site = f.get("site")
        if e is None or not isinstance(site, str) or site in e.receipts:
            return []
        e.receipts.add(site)
        return [Updated(e.room, e), Receipt(e, site)]

    def _on_rooms(self, f: dict[str, Any], now: float) -> list[Change]:
        """The room listing (every page of it: the link follows ``more``)."""
        rows = [r for r in f.get("rooms") or [] if isinstance(r, dict)]
        incomplete = f.get("incomplete") or ("more rooms not listed" if f.get("more") else "")
        if not rows and not incomplete:
            return self.notice("no rooms yet; /join NAME creates one")
        lines = [f"rooms (* = joined): {len(rows)}"]
        for r in rows:
            mark = "*" if r.get("joined") else " "
            label = label_of(self.scheme, r.get("label"))
            lines.append(f" {mark} {printable(r.get('room'))}{' (private)' if r.get('private') else ''}"
                         f"{f' [{printable(str(label))}]' if label is not None else ''}: "
                         f"{plural(_count(r.get('members')), 'member')}, {_count(r.get('online'))} online")
        if incomplete:
            lines.append(f" (incomplete: {printable(incomplete)})")
        return self.notice("\n".join(lines))

    def _on_error(self, f: dict[str, Any], now: float) -> list[Change]:
        purpose = f.get("purpose") or {}
        if purpose.get("kind") == "join" and isinstance(purpose.get("room"), str):
            return self._join_refused(purpose["room"], error_reason(f))
        if purpose:
            handled = self._purpose_failed(purpose, f)
            if handled is None:
                handled = self.positions_failed(purpose, f)
            if handled is not None:
                return handled
        req = f.get("request") or {}
        text = f"error {printable(f.get('code'))}: {error_reason(f)}"
        if req.get("type") == "say" and req.get("client_id") in self.pending:
            return self.send_failed(req["client_id"], text)
        return self.notice(text, "error")

    # Frames the link makes up (not from the server): the connection dropped; a note for a room.
    def _on_client_lost(self, f: dict[str, Any], now: float) -> list[Change]:
        return self.connection_lost()

    def _on_client_notice(self, f: dict[str, Any], now: float) -> list[Change]:
        return self.notice(printable(f.get("text", "")), str(f.get("level", "info")), f.get("room"))

    # --- the log ----------------------------------------------------------------------------------------
    def _notice_key(self) -> str:
        return f"notice:{next(self._notices)}"

    def _append(self, room_name: str, entry: Entry) -> Inserted:
        room = self.room(room_name)
        room.entries.append(entry)
        return Inserted(room_name, len(room.entries) - 1, entry)

    def _remove(self, entry: Entry) -> list[Change]:
        room = self.rooms.get(entry.room)
        if room is None:
            return []
        try:
            room.entries.remove(entry)
        except ValueError:
            return []
        return [Removed(entry.room, entry)]

    def _add_messages(self, frames: Iterable[dict[str, Any]], now: float, live: bool) -> list[Change]:
        out: list[Change] = []
        for f in frames:
            out += self._add_message(f, now, live)
        return out

    def _add_message(self, f: dict[str, Any], now: float, live: bool) -> list[Change]:
        msg_id = f.get("msg_id")
        room_name = f.get("room")
        if not isinstance(msg_id, str) or not isinstance(room_name, str):
            return []
        known = self.by_msg_id.get(msg_id)
        out: list[Change] = []
        own = f.get("user") == self.user and f.get("origin") == self.site
        receipts = set(f.get("receipts") or ())
        if known is not None:
            if known.state == DELIVERED:
                return []                         # a replay after a reconnection
            receipts |= known.receipts            # our echo, accepted: the real message replaces it
            out += self._remove(known)
        # A sender never sees their own line marked late (docs/ordering.md: a site's own urgent message is
        # never late there), whatever a frame says.
        e = MessageEntry(msg_id, room_name, str(f.get("user", "?")), str(f.get("origin", "?")),
                         str(f.get("text", "")), float(f.get("sent_at") or 0.0), list(f.get("order") or []) or None,
                         late=bool(f.get("late")) and not own, own=own, msg_id=msg_id, receipts=receipts,
                         skipped=known.skipped if known is not None else ())
        self._decorate(e, f)
        self._expiry_fields(e, f, now)
        self._label_message(e, f)
        self.by_msg_id[msg_id] = e
        room = self.room(room_name)
        index = self._position(room, e)
        room.entries.insert(index, e)
        e.moved_up = sum(1 for x in room.entries[index + 1:] if isinstance(x, MessageEntry))
        out.append(Inserted(room_name, index, e))
        out += self._time_marks(room, index)
        if live and e.late:
            e.late_by = max(0.0, now - e.sent_at)
            where = f"placed {plural(e.moved_up, 'message')} up" if e.moved_up else "placed at the end"
            who = f"{printable(e.user)}@{printable(e.origin)}"
            what = "repaired message" if e.repaired else "late message"
            out += self.notice(f"{what} {printable(msg_id)} from {who}: arrived "
                               f"{_fmt_seconds(e.late_by)} after it was sent, {where}", "warning", room_name, "room")
        out += self._after_insert(room, e, live)
        out += self._trim(room)
        return out

    @staticmethod
    def _time_marks(room: Room, index: int) -> list[Change]:
        """The line just put at ``index`` is out of time order or not; so is the line below it, again."""
        def shown(x: Entry) -> bool:
            return isinstance(x, MessageEntry) and x.state == DELIVERED
        entries = room.entries
        e = entries[index]
        assert isinstance(e, MessageEntry)
        above = next((x for x in reversed(entries[:index]) if shown(x)), None)
        e.out_of_time = out_of_time(e.sent_at, above.sent_at if isinstance(above, MessageEntry) else None)
        below = next((x for x in entries[index + 1:] if shown(x)), None)
        if not isinstance(below, MessageEntry):
            return []
        was, below.out_of_time = below.out_of_time, out_of_time(below.sent_at, e.sent_at)
        return [Updated(room.name, below)] if below.out_of_time != was else []

    @staticmethod
    def _position(room: Room, e: MessageEntry) -> int:
        """After the last delivered message that sorts before ``e`` and the notices that follow it.

        Notices stay where they were put; our own pending echoes stay below newer messages.
        """
        key = e.sort_key
        entries = room.entries
        index = 0
        for i in range(len(entries) - 1, -1, -1):
            x = entries[i]
            if isinstance(x, MessageEntry) and x.state == DELIVERED and x.sort_key <= key:
                index = i + 1
                break
        while index < len(entries) and isinstance(entries[index], Notice):
            index += 1
        return index

    def _trim(self, room: Room) -> list[Change]:
        out: list[Change] = []
        while len(room.entries) > MAX_ENTRIES:
            e = room.entries.pop(0)
            if isinstance(e, MessageEntry) and e.msg_id and self.by_msg_id.get(e.msg_id) is e:
                del self.by_msg_id[e.msg_id]
            room.more = True
            out.append(Removed(room.name, e))
        return out
