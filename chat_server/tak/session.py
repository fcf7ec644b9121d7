"""TAK front end, sans-IO: one TAK client connection translated to and from chat protocol v1.

Theory of operation
-------------------
Like ``irc.IrcSession`` for IRC, a :class:`TakSession` is one TAK client's
connection without the socket: decoded CoT events and the current time go in
(:meth:`TakSession.on_event`), chat protocol frames from the chat server go
in (:meth:`TakSession.on_frame`), and both return actions: :class:`Emit` (a
CoT event for the client, which the edge encodes in the framing the client
speaks), :class:`Request` (a chat protocol client frame, handled by the
server exactly as a WebSocket client's: rooms, rights, rate limits and the
say pipeline have one home), :class:`Login` (the edge logs the account in),
:class:`UseProto` (write TAK protocol v1 from now on), :class:`Note` (a line
for the log: an event dropped and why) and :class:`Close`.

Log-in: with TLS the account is the client certificate's CN, known when the
session starts; without TLS (labs) it is the callsign the client announces
in its first event that has one (``<contact callsign>``, or a GeoChat's
``senderCallsign``). Either way the session asks the edge to log the account
in (``Login``) and holds the client's events until the ``welcome``. Then it
joins the room of ``All Chat Rooms`` (rooms.py) and asks for ``positions``.

Mapping (docs/tak.md): a GeoChat (``b-t-f``) is a ``say`` in its chatroom's
room (joined first if need be; ``client_id`` is the GeoChat's messageId, so a
resent GeoChat is one message); a leading ``[FLASH]``, ``[IMMEDIATE]`` or
``[PRIORITY]`` in its text sets the precedence. Room messages go to the
client as GeoChat from their author (uid ``RCM.<site>.<user>``, senderCallsign
the user, messageId the ``msg_id``), marked ``[FLASH]`` ... in front and
``(late)`` / ``(repaired)`` behind, and in a labeled mission led by their
security label (``[SECRET//REL TO GBR] [FLASH] text``: GeoChat has no label
field, so the label travels in the text as on IRC, front_end_labels.py). A
GeoChat goes at its room's label (the floor), or at the label its text
starts with, written the same way (``[SECRET] text``; with a precedence mark
in either order); one the user may not send is not sent (a GeoChat from
``RCM-<site>`` says why, and the log has it). The client's own messages are
not echoed (TAK shows them when sent). The first ``receipt`` of one of the client's
messages from another site (from its own site when the mission has one site)
goes to it as a delivered receipt (``b-t-f-d``). A read receipt
(``b-t-f-r``) of a message shown to it becomes ``mark_read`` of its room up
to it, and ``acknowledge`` when it is a FLASH or IMMEDIATE message. A PLI
(an ``a-...`` event with a callsign) becomes ``position {unit: callsign, expires_in}``, living as long
as the client's stale time says (a PLI already stale when sent is dropped with a note);
``position`` frames (and ``positions``' units) become PLIs (uid
``RCM.<site>.<unit>``, stale at ``expires_at``), but for the client's own
units. Pings (``t-x-c-t``) are answered (``t-x-c-t-r``) at any time; a
``t-x-takp-q`` asking for protocol 1 is accepted (``t-x-takp-r``) and the
session switches to protobuf. Errors from the chat server reach the user as
a GeoChat from ``RCM-<site>``. Other event types are dropped with a note, once
per type per connection.
"""
from __future__ import annotations

import hashlib
import itertools
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from contracts.labels import Label, LabelError
from contracts.precedence import URGENT, Precedence

from ..front_end_labels import NO_LABELS, LabelView, label_of, split_label
from ..protocol import MAX_CLIENT_ID, POSITION_LIFE_MAX, USER_NAME
from .cot import UNKNOWN, CotEvent, GeoChat, Point
from .marks import message_text, split_precedence
from .rooms import RoomMap

HELD_MAX = 32                 # client events held until the welcome; more are dropped
REMEMBERED = 4096             # msg_ids remembered per session (receipts, read receipts, own messages)
CHAT_STALE = 86400.0          # seconds a GeoChat or receipt event stays current
PROTOCOL_VERSION = 1          # TAK protocol version offered (protobuf streaming)


@dataclass(frozen=True, slots=True)
class Emit:
    """A CoT event for the client."""

    event: CotEvent


@dataclass(frozen=True, slots=True)
class Request:
    """A chat protocol client frame for the chat server."""

    frame: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Login:
    """Log ``account`` in (the edge checks it and sends ``hello`` with the id ``rid``)."""

    account: str
    rid: str


@dataclass(frozen=True, slots=True)
class UseProto:
    """From now on, write TAK protocol v1 (protobuf) to the client."""


@dataclass(frozen=True, slots=True)
class Note:
    """A line for the log."""

    text: str


@dataclass(frozen=True, slots=True)
class Close:
    reason: str


Action = Emit | Request | Login | UseProto | Note | Close


def unit_uid(site: str, name: str) -> str:
    """The CoT uid of a user or unit of a site: ``RCM.<site>.<name>``."""
    return f"RCM.{site}.{name}"


def _remember(d: OrderedDict[str, Any], key: str, value: Any) -> None:
    d[key] = value
    d.move_to_end(key)
    while len(d) > REMEMBERED:
        d.popitem(last=False)


def _client_id(message_id: str) -> str:
    if 0 < len(message_id) <= MAX_CLIENT_ID:
        return message_id
    return "tak-" + hashlib.sha256(message_id.encode()).hexdigest()[:40]


@dataclass
class TakSession:
    """The TAK side of one client connection (see the module docstring)."""

    site: str
    rooms: RoomMap = field(default_factory=RoomMap)
    account: str | None = None            # the certificate's CN (TLS); None: the first callsign (labs)
    user: str | None = None               # logged in as
    callsign: str | None = None           # the client's, as it announced it
    client_uid: str = ""
    proto: bool = False                   # the client is written TAK protocol v1
    closed: bool = False
    joined: set[str] = field(default_factory=set)
    labels: LabelView = NO_LABELS         # the mission's labels; the user's clearance from the welcome
    _peers: bool = False                  # the mission has other sites (receipts come from them)
    _ids: Any = field(default_factory=lambda: itertools.count(1))
    _pending: dict[str, tuple[str, Any]] = field(default_factory=dict)     # request id -> (kind, what)
    _held: list[CotEvent] = field(default_factory=list)
    _login_sent: bool = False
    _joining: set[str] = field(default_factory=set)
    _says_in_flight: int = 0
    _own: OrderedDict[str, tuple[str, str]] = field(default_factory=OrderedDict)   # our msg_id -> messageId, chatroom
    _echo: OrderedDict[str, None] = field(default_factory=OrderedDict)      # our msg_ids whose delivery is dropped
    _held_msgs: list[dict[str, Any]] = field(default_factory=list)          # deliveries that came before an ack
    _receipted: OrderedDict[str, None] = field(default_factory=OrderedDict)
    _early: OrderedDict[str, list[str]] = field(default_factory=OrderedDict)  # receipts that came before an ack
    _shown: OrderedDict[str, tuple[str, Any, bool]] = field(default_factory=OrderedDict)  # msg_id: room, order, urgent
    _units: OrderedDict[str, None] = field(default_factory=OrderedDict)     # units this client reported
    _noted: set[str] = field(default_factory=set)
    _floors: dict[str, Label] = field(default_factory=dict)                # joined room -> its label

    # --- helpers ----------------------------------------------------------------------------------
    def _request(self, kind: str, what: Any, frame: dict[str, Any]) -> Request:
        rid = f"tak{next(self._ids)}"
        self._pending[rid] = (kind, what)
        return Request({**frame, "id": rid})

    def _note_once(self, key: str, text: str) -> list[Action]:
        if key in self._noted or len(self._noted) >= 256:
            return []
        self._noted.add(key)
        return [Note(text)]

    def notice(self, text: str, now: float) -> Emit:
        """A GeoChat from the site's server to this client (a direct message from ``RCM-<site>``)."""
        sender = unit_uid(self.site, "server")
        me = self.callsign or self.user or "TAK"
        mid = f"{self.site}-notice-{next(self._ids)}"
        return Emit(CotEvent(type="b-t-f", uid=f"GeoChat.{sender}.{me}.{mid}", time=now, start=now,
                             stale=now + CHAT_STALE, point=Point(0.0, 0.0),
                             chat=GeoChat(me, self.client_uid or me, f"RCM-{self.site}", mid, sender),
                             link_uid=sender, remarks=text, remarks_time=now))

    # --- start and log-in -------------------------------------------------------------------------
    def start(self, now: float) -> list[Action]:
        """The connection is open: offer TAK protocol v1; with a certificate's account, log it in."""
        out: list[Action] = [Emit(CotEvent(type="t-x-takp-v", uid="protouid", how="m-g", time=now, start=now,
                                           stale=now + 60.0, point=Point(0.0, 0.0),
                                           tak_support=PROTOCOL_VERSION))]
        if self.account is not None:
            out += self._login(self.account)
        return out

    def _login(self, account: str) -> list[Action]:
        self._login_sent = True
        rid = f"tak{next(self._ids)}"
        self._pending[rid] = ("hello", account)
        return [Login(account, rid)]

    def refused(self, why: str, now: float) -> list[Action]:
        """The edge could not log the account in: tell the user and close."""
        self.closed = True
        return [self.notice(f"not logged in: {why}", now), Close(f"login refused: {why}")]

    # --- events from the client -------------------------------------------------------------------
    def on_event(self, ev: CotEvent, now: float) -> list[Action]:
        if self.closed:
            return []
        kind = ev.type
        if kind == "t-x-c-t":
            return [Emit(CotEvent(type="t-x-c-t-r", uid="takPong", how="m-g", time=now, start=now,
                                  stale=now + 20.0, point=Point(0.0, 0.0)))]
        if kind == "t-x-takp-q":
            ok = ev.tak_request == PROTOCOL_VERSION
            out: list[Action] = [Emit(CotEvent(type="t-x-takp-r", uid="protouid", how="m-g", time=now, start=now,
                                               stale=now + 60.0, point=Point(0.0, 0.0), tak_response=ok))]
            if ok:
                self.proto = True
                out.append(UseProto())
            return out
        if kind.startswith("t-x-"):                       # pytak's hello (t-x-d-d), other control: nothing to do
            return []
        if not self.client_uid and (kind.startswith("a-") or ev.chat is not None):
            self.client_uid = ev.chat.sender_uid if ev.chat is not None and ev.chat.sender_uid else ev.uid
        if self.callsign is None:
            self.callsign = ev.callsign or (ev.chat.sender_callsign if ev.chat is not None else None) or None
        if self.user is None:
            return self._before_welcome(ev, now)
        return self._event(ev, now)

    def _before_welcome(self, ev: CotEvent, now: float) -> list[Action]:
        out: list[Action] = []
        if not self._login_sent:
            if self.callsign is None:
                return self._note_once(f"anon:{ev.type}", f"dropped a {ev.type} event before the client said its "
                                                          "callsign (<contact callsign>)")
            if not USER_NAME.match(self.callsign):
                return self.refused(f"the callsign {self.callsign[:40]!r} is not an account name (letters, digits, "
                                    "'_', '.', '-'; a letter first)", now)
            out += self._login(self.callsign)
        if len(self._held) >= HELD_MAX:
            return out + self._note_once("held", f"dropped events beyond the first {HELD_MAX} before the log-in")
        self._held.append(ev)
        return out

    def _event(self, ev: CotEvent, now: float) -> list[Action]:
        kind = ev.type
        if kind == "b-t-f":
            return self._geochat(ev, now)
        if kind == "b-t-f-r":
            return self._read_receipt(ev)
        if kind == "b-t-f-d":
            return []                                     # the client got one of ours: nothing to tell anyone
        if kind.startswith("a-"):
            return self._pli(ev)
        return self._note_once(f"type:{kind}", f"dropped a {kind} event (not chat, receipt, position or ping)")

    def _geochat(self, ev: CotEvent, now: float) -> list[Action]:
        chat, text = ev.chat, (ev.remarks or "").strip()
        if chat is None or not text:
            return [Note("dropped a GeoChat without <__chat> or text")]
        if chat.chat_id.startswith("RCM.") or chat.chatroom == f"RCM-{self.site}":
            return [self.notice("direct messages are not carried through RCM; write in a room", now)]
        room = self.rooms.room_of(chat.chatroom)
        if room is None:
            return [self.notice(f"the chatroom {chat.chatroom!r} is no room here (room names are letters, digits "
                                "and _.#:+-; the mission may map it in [chat.tak_rooms])", now)]
        out: list[Action] = []
        level, text = split_precedence(text)
        try:
            label, text = split_label(text, self.labels.scheme)
        except LabelError as e:
            return [Note(f"dropped a GeoChat to {room}: {e}"), self.notice(f"your message to {chat.chatroom} was "
                                                                           f"not sent: {e}", now)]
        if level is Precedence.ROUTINE:
            level, text = split_precedence(text)
        if label is not None:
            refusal = self.labels.refusal(label, self._floors.get(room), chat.chatroom)
            if refusal is not None:
                return [Note(f"dropped a GeoChat to {room}: {refusal}"),
                        self.notice(f"your message to {chat.chatroom} was not sent: {refusal}", now)]
        frame: dict[str, Any] = {"type": "say", "room": room, "text": text,
                                 "client_id": _client_id(chat.message_id or ev.uid)}
        if level is not Precedence.ROUTINE:
            frame["precedence"] = level.value
        if label is not None:
            frame["label"] = label.to_json()
        if room not in self.joined and room not in self._joining:
            self._joining.add(room)
            out.append(self._request("join", room, {"type": "join", "room": room}))
        self._says_in_flight += 1
        out.append(self._request("say", (chat.message_id or ev.uid, chat.chatroom), frame))
        return out

    def _read_receipt(self, ev: CotEvent) -> list[Action]:
        msg_id = ev.chat.message_id if ev.chat is not None and ev.chat.message_id else ev.uid
        shown = self._shown.get(msg_id)
        if shown is None:
            return []
        room, order, urgent = shown
        out: list[Action] = [self._request("mark_read", msg_id, {"type": "mark_read", "room": room, "order": order})]
        if urgent:
            out.append(self._request("acknowledge", msg_id, {"type": "acknowledge", "msg_id": msg_id}))
        return out

    def _pli(self, ev: CotEvent) -> list[Action]:
        if not ev.callsign:
            return self._note_once(f"pli:{ev.type}", f"dropped a {ev.type} event without a callsign")
        life = ev.stale - ev.time            # the client's own lifetime for it (both times by its clock)
        if not life >= 1.0:
            return self._note_once(f"stale:{ev.callsign}", f"dropped a PLI of {ev.callsign} stale when sent "
                                                            f"(stale {life:+.1f} s after its time)")
        _remember(self._units, ev.callsign, None)
        frame: dict[str, Any] = {"type": "position", "unit": ev.callsign, "lat": ev.point.lat, "lon": ev.point.lon,
                                 "at": ev.time, "expires_in": min(life, POSITION_LIFE_MAX)}
        if ev.point.hae != UNKNOWN:
            frame["alt"] = ev.point.hae
        if ev.course is not None:
            frame["course"] = ev.course % 360.0
        if ev.speed is not None:
            frame["speed"] = ev.speed
        return [self._request("position", ev.callsign, frame)]

    # --- frames from the chat server ------------------------------------------------------------
    def on_frame(self, f: dict[str, Any], now: float) -> list[Action]:
        if self.closed:
            return []
        kind = f.get("type")
        rid = f.get("id")
        pending = self._pending.pop(rid, None) if isinstance(rid, str) else None
        if kind == "error":
            ref = f.get("in_reply_to")
            if pending is None and isinstance(ref, str):
                pending = self._pending.pop(ref, None)
            return self._error(f, pending, now)
        handler = getattr(self, f"_f_{kind}", None)
        return handler(f, pending, now) if handler is not None else []

    def _f_welcome(self, f: dict[str, Any], pending: Any, now: float) -> list[Action]:
        self.user = str(f.get("user", ""))
        self.labels = self.labels.welcomed(f)
        self.joined = {r for r in f.get("rooms") or () if isinstance(r, str)}
        self._peers = any(s != self.site for s in f.get("sites") or {})
        out: list[Action] = []
        all_room = self.rooms.all_room
        if all_room not in self.joined:
            self._joining.add(all_room)
            out.append(self._request("join", all_room, {"type": "join", "room": all_room}))
        out.append(self._request("positions", None, {"type": "positions"}))
        held, self._held = self._held, []
        for ev in held:
            out += self._event(ev, now)
        return out

    def _f_joined(self, f: dict[str, Any], pending: Any, now: float) -> list[Action]:
        room = str(f.get("room", ""))
        self.joined.add(room)
        self._joining.discard(room)
        floor = label_of(f.get("label"), self.labels.scheme)
        if floor is not None:
            self._floors[room] = floor
        return []

    def _f_left(self, f: dict[str, Any], pending: Any, now: float) -> list[Action]:
        self.joined.discard(str(f.get("room", "")))
        self._floors.pop(str(f.get("room", "")), None)
        return []

    def _f_ack(self, f: dict[str, Any], pending: Any, now: float) -> list[Action]:
        msg_id = f.get("msg_id")
        if pending is None or pending[0] != "say" or not isinstance(msg_id, str):
            return []
        self._says_in_flight = max(0, self._says_in_flight - 1)
        _remember(self._own, msg_id, pending[1])
        _remember(self._echo, msg_id, None)
        out: list[Action] = []
        for site in self._early.pop(msg_id, ()):
            out += self._f_receipt({"msg_id": msg_id, "site": site}, None, now)
        held, self._held_msgs = self._held_msgs, []
        for m in held:
            out += self._f_message(m, None, now)
        return out

    def _is_own(self, m: dict[str, Any]) -> bool:
        return m.get("user") == self.user and m.get("origin") == self.site

    def _f_message(self, m: dict[str, Any], pending: Any, now: float) -> list[Action]:
        msg_id = m.get("msg_id")
        if not isinstance(msg_id, str):
            return []
        if self._is_own(m):
            if msg_id in self._echo:
                self._echo.pop(msg_id, None)
                return []                                  # the client showed it when its user sent it
            if self._says_in_flight:
                self._held_msgs.append(m)                  # may be ours, its ack not here yet
                return []
        room = str(m.get("room", ""))
        urgent = m.get("precedence") in URGENT
        _remember(self._shown, msg_id, (room, m.get("order"), urgent))
        return [Emit(self.geochat_of(m, now))]

    def geochat_of(self, m: dict[str, Any], now: float) -> CotEvent:
        """A room message as the GeoChat its author would have sent."""
        origin, user = str(m.get("origin", "")), str(m.get("user", "?"))
        sender = unit_uid(origin, user)
        chatroom = self.rooms.chatroom_of(str(m.get("room", "")))
        msg_id = str(m.get("msg_id"))
        sent = m.get("sent_at")
        sent_at = float(sent) if isinstance(sent, (int, float)) and not isinstance(sent, bool) else now
        return CotEvent(type="b-t-f", uid=f"GeoChat.{sender}.{chatroom}.{msg_id}", time=now, start=now,
                        stale=now + CHAT_STALE, point=Point(0.0, 0.0),
                        chat=GeoChat(chatroom, chatroom, user, msg_id, sender), link_uid=sender,
                        remarks=message_text(m, self.labels), remarks_time=sent_at)

    def _f_receipt(self, f: dict[str, Any], pending: Any, now: float) -> list[Action]:
        msg_id, site = f.get("msg_id"), f.get("site")
        if not isinstance(msg_id, str) or not isinstance(site, str) or msg_id in self._receipted:
            return []
        if msg_id not in self._own:
            if self._says_in_flight and msg_id.startswith(f"{self.site}:"):      # maybe ours, its ack on its way
                _remember(self._early, msg_id, self._early.get(msg_id, []) + [site])
            return []
        if site == self.site and self._peers:
            return []                                      # delivered here; "delivered" means at another site
        _remember(self._receipted, msg_id, None)
        tak_id, chatroom = self._own[msg_id]
        me = self.client_uid or unit_uid(self.site, self.user or "")
        return [Emit(CotEvent(type="b-t-f-d", uid=tak_id, time=now, start=now, stale=now + CHAT_STALE,
                              point=Point(0.0, 0.0), link_uid=me,
                              chat=GeoChat(chatroom, chatroom, self.callsign or self.user or "", tak_id, me)))]

    def _f_position(self, p: dict[str, Any], pending: Any, now: float) -> list[Action]:
        ev = self.pli_of(p, now)
        return [Emit(ev)] if ev is not None else []

    def _f_positions(self, f: dict[str, Any], pending: Any, now: float) -> list[Action]:
        out: list[Action] = []
        for p in f.get("units") or ():
            ev = self.pli_of(p, now) if isinstance(p, dict) else None
            if ev is not None:
                out.append(Emit(ev))
        return out

    def pli_of(self, p: dict[str, Any], now: float) -> CotEvent | None:
        """A ``position`` frame as a PLI; None for the client's own units, and for expired or malformed ones."""
        site, unit = p.get("site"), p.get("unit")
        if not isinstance(site, str) or not isinstance(unit, str):
            return None
        if site == self.site and unit in self._units:
            return None
        try:
            lat, lon, at = float(p["lat"]), float(p["lon"]), float(p["at"])
            expires = float(p.get("expires_at", at + 300.0))
            alt = float(p["alt"]) if p.get("alt") is not None else UNKNOWN
            course = float(p["course"]) if p.get("course") is not None else None
            speed = float(p["speed"]) if p.get("speed") is not None else None
        except (KeyError, TypeError, ValueError):
            return None
        if expires <= now:
            return None
        user = p.get("user")
        where = f"{user}@{site}" if isinstance(user, str) and user else f"site {site}"
        return CotEvent(type="a-f-G-U-C", uid=unit_uid(site, unit), how="m-g", time=at, start=at, stale=expires,
                        point=Point(lat, lon, alt), callsign=unit, course=course, speed=speed,
                        remarks=f"{unit} ({where}, via RCM)")

    def _error(self, f: dict[str, Any], pending: tuple[str, Any] | None, now: float) -> list[Action]:
        code, message = str(f.get("code", "")), str(f.get("message", ""))
        kind, what = pending if pending is not None else ("", None)
        if kind == "hello":
            return self.refused(f"{what}: {message}", now)
        if kind == "say":
            self._says_in_flight = max(0, self._says_in_flight - 1)
            where = what[1] if isinstance(what, tuple) else "the room"
            out: list[Action] = [Note(f"a GeoChat to {where} was refused: {message}")] if code == "forbidden" else []
            return out + [self.notice(f"your message to {where} was not sent: {message}", now)]
        if kind == "join":
            self._joining.discard(what)
            if code == "forbidden" and self.labels.enabled:
                # Not cleared for the room (or not a member): its says are refused too, and that refusal tells the
                # user; a room the user only reads in is simply not shown.
                return self._note_once(f"join:{what}", f"cannot join {what}: {message}")
            return [self.notice(f"cannot join {what}: {message}", now)]
        if kind == "positions":
            return [Note(f"positions not available: {message}")]
        if kind in ("position", "mark_read", "acknowledge"):
            return self._note_once(f"error:{kind}:{code}", f"{kind} refused: {message}")
        return [self.notice(f"error from the chat server: {message}", now)]

