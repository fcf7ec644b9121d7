"""IRC front end, sans-IO: one IRC client connection translated to and from chat protocol v1.

Theory of operation
-------------------
Operators who keep their IRC client (irssi, WeeChat, HexChat, mIRC) connect
to a site's chat server on its IRC port. Each connection is an
:class:`IrcSession`: bytes of one IRC line and the current time go in
(:meth:`IrcSession.receive`), chat protocol frames coming back from the chat
server go in (:meth:`IrcSession.on_frame`), and both return actions:
:class:`Send` (IRC lines for the client), :class:`Request` (a chat protocol
client frame for the server, exactly as a WebSocket client would send it, so
authentication, access control, private rooms, rate limits and the say
pipeline have one home) and :class:`Close`. Nothing here touches a socket or
a clock; ``irc_server.py`` is the I/O edge.

Modules: ``irc_state.py`` holds the actions, the per-connection state and the
reply helpers; ``irc_commands.py`` the client's commands (``receive``); this
module the session, which adds the chat server's frames (``on_frame``).

Mapping (docs/irc.md): the account name is the nick (``PASS`` carries the
password, required), a room ``ops`` is the channel ``#ops``, a user shows as
``user!user@site``. ``PRIVMSG``/``NOTICE`` to a channel is a ``say``; the
server does not echo a client's own lines (it has shown them already), so the
session drops the delivery of its own acked says. Late, repaired and FLASH or
IMMEDIATE messages, which IRC cannot insert above or highlight, arrive as a
``NOTICE`` from their author marked ``[LATE +12s]``, ``[REPAIRED +300s]`` or
``[FLASH]``. A chat text never reaches the client as IRC codes: its controls
(CTCP's 0x01, colours, ESC...) are shown as symbols and its line breaks
start new lines of the same author; an IRC user's formatting codes are removed
on the way in (``ircline.py``, docs/irc.md "Control characters"). Site status
changes and missing-message notices are server ``NOTICE`` s. Private rooms
are invite-only channels (``+i``): joining one you are not a member of gets
``473``. Registration is RFC 2812's ``PASS``,
``NICK``, ``USER``; IRCv3 ``CAP LS`` gets an empty list so clients go on.
Malformed, unknown and oversized lines get the standard numerics and the
connection stays open; a client that floods past the site's frame rate is
closed with ``ERROR :Closing Link: Excess Flood`` as ircds do.
"""
from __future__ import annotations

import re
import time
from typing import Any

from contracts.precedence import URGENT
from contracts.status import LinkStatus

from .irc_commands import IrcCommands
from .irc_state import Action, Channel, Close, Send
from .ircline import channel_of, format_line, split_text

HISTORY_LINES = 20                # joined-history lines replayed as NOTICEs
_last_shown: tuple[Any, list[Any]] = (None, [])   # the message frame last formatted, and its lines


class IrcSession(IrcCommands):
    """The IRC side of one client connection (see the module docstring)."""

    # --- chat protocol frames from the server -------------------------------------------------
    def on_frame(self, f: dict[str, Any], now: float) -> list[Action]:
        """A chat protocol server frame for this connection."""
        if self.closed:
            return []
        kind = f.get("type")
        rid = f.get("id")
        origin = self._pending.pop(rid, None) if isinstance(rid, str) else None
        if kind == "error":
            ref = f.get("in_reply_to")
            origin = origin or (self._pending.pop(ref, None) if isinstance(ref, str) else None)
            return self._on_error(f, origin)
        handler = getattr(self, f"_f_{kind}", None)
        return handler(f, origin, now) if handler is not None else []

    def _f_welcome(self, f: dict[str, Any], origin: Any, now: float) -> list[Action]:
        self.registered = True
        self._online = {s: dict.fromkeys(us, 1) for s, us in (f.get("presence") or {}).items()}
        sites = f.get("sites") or {}
        out: list[Action] = [
            self._num("001", f"Welcome to the {self.network} RCM chat, {self.me}"),
            self._num("002", f"Your host is {self.server_name}, the chat server of site {self.site}"),
            self._num("003", f"This server was created {self.created or 'at start-up'}"),
            self._num("004", self.server_name, "rcm-chat-1", "i", "int"),
            self._num("005", "CHANTYPES=#", "CHANMODES=,,,int", "PREFIX=()", f"NICKLEN={32}", "CHANNELLEN=65",
                      f"NETWORK={re.sub(r'[^A-Za-z0-9_.-]', '_', self.network) or 'rcm'}", "CASEMAPPING=ascii",
                      "are supported by this server"),
            self._num("375", f"- {self.server_name} message of the day"),
            self._num("372", f"- You are {self.nick} at site {self.site}. Sites: "
                             + ", ".join(f"{s} {LinkStatus.parse(st).value}" for s, st in sorted(sites.items()))),
            self._num("372", "- Late and repaired lines arrive as NOTICEs marked [LATE +Ns] / [REPAIRED +Ns]."),
            self._num("376", "End of /MOTD command"),
        ]
        for room in f.get("rooms") or []:
            if isinstance(room, str) and room not in self._channels:
                out.append(self._request("JOIN", (channel_of(room),), {"type": "join", "room": room}))
        early, self._early = self._early, []
        line_clock = self._bucket.refilled if self._bucket is not None else 0.0
        for raw in early:                         # on the line clock (``receive``'s), not this frame's wall clock
            out += self.receive(raw, line_clock)
        return out

    def _f_joined(self, f: dict[str, Any], origin: Any, now: float) -> list[Action]:
        room = str(f.get("room", ""))
        ch = channel_of(room)
        new = room not in self._channels
        self._channels[room] = Channel(bool(f.get("private")), tuple(f.get("members") or ()))
        if not new:
            return []
        out: list[Action] = [Send(format_line(self.me, "JOIN", ch)), self._num("331", ch, "No topic is set")]
        out += self._names(ch)
        history = [m for m in f.get("history") or [] if isinstance(m, dict)][-HISTORY_LINES:]
        for m in history:
            stamp = time.strftime("%H:%M:%S", time.gmtime(float(m.get("sent_at") or 0)))
            for body in split_text(str(m.get("text", ""))):
                out.append(Send(format_line(self.server_name, "NOTICE", ch,
                                            f"[history {stamp}Z] <{m.get('user')}@{m.get('origin')}> {body}")))
        return out

    def _f_left(self, f: dict[str, Any], origin: Any, now: float) -> list[Action]:
        room = str(f.get("room", ""))
        if self._channels.pop(room, None) is None:
            return []
        return [Send(format_line(self.me, "PART", channel_of(room), str(f.get("reason") or "left")))]

    def _f_ack(self, f: dict[str, Any], origin: Any, now: float) -> list[Action]:
        self._says_in_flight = max(0, self._says_in_flight - 1)
        msg_id = f.get("msg_id")
        if isinstance(msg_id, str):
            self._own[msg_id] = None
            while len(self._own) > 4096:
                self._own.pop(next(iter(self._own)))
        return self._release_held(now)

    def _release_held(self, now: float) -> list[Action]:
        """Our deliveries that arrived before their ack: drop the acked ones; show the rest once no say is open."""
        keep, out = [], []
        for m in self._held:
            if m.get("msg_id") in self._own:
                self._own.pop(m["msg_id"], None)
            elif self._says_in_flight:
                keep.append(m)
            else:
                out += self._show(m, now)
        self._held = keep
        return out

    def _f_message(self, f: dict[str, Any], origin: Any, now: float) -> list[Action]:
        if f.get("user") == self.nick and f.get("origin") == self.site:
            msg_id = f.get("msg_id")
            if msg_id in self._own:                 # our own line: the client showed it when we typed it
                self._own.pop(msg_id, None)
                return []
            if self._says_in_flight:                # may be ours, its ack not here yet
                self._held.append(f)
                return []
        return self._show(f, now)

    def _show(self, f: dict[str, Any], now: float) -> list[Action]:
        room = str(f.get("room", ""))
        if room not in self._channels:
            return []
        global _last_shown
        if _last_shown[0] is f:                    # a fan-out: the same frame object for every session
            return _last_shown[1]
        out = self._format_message(f, room, now)
        _last_shown = (f, out)
        return out

    @staticmethod
    def _format_message(f: dict[str, Any], room: str, now: float) -> list[Action]:
        user, site = str(f.get("user", "?")), str(f.get("origin", "?"))
        prefix = f"{user}!{user}@{site}"
        marks = []
        precedence = f.get("precedence")
        if precedence in URGENT:
            marks.append(f"[{precedence.upper()}]")
        try:
            delay = max(0, round(now - float(f.get("sent_at") or now)))
        except (TypeError, ValueError):
            delay = 0
        if f.get("repaired"):
            marks.append(f"[REPAIRED +{delay}s]")
        elif f.get("late"):
            marks.append(f"[LATE +{delay}s]")
        command = "NOTICE" if marks else "PRIVMSG"
        lead = " ".join(marks) + " " if marks else ""
        return [Send(format_line(prefix, command, channel_of(room), lead + body))
                for body in split_text(str(f.get("text", "")))]

    def _tell(self, text: str) -> list[Action]:
        """A server NOTICE where the user looks: every joined channel, or the user when none is joined."""
        targets = [channel_of(r) for r in sorted(self._channels)] or [self.nick]
        return [self._notice(t, text) for t in targets]

    def _f_site_status(self, f: dict[str, Any], origin: Any, now: float) -> list[Action]:
        via = f" via {f['via']}" if f.get("via") else ""
        return self._tell(f"*** site {f.get('site')} is {LinkStatus.parse(f.get('status')).value}{via}")

    def _f_presence(self, f: dict[str, Any], origin: Any, now: float) -> list[Action]:
        site = str(f.get("site", ""))
        users = self._online.setdefault(site, {})
        out: list[Action] = []
        public = [channel_of(r) for r, ch in sorted(self._channels.items()) if not ch.private]
        for u in f.get("online") or []:
            first = not any(u in us for us in self._online.values())
            users[u] = 1
            if first and u != self.nick:
                out += [Send(format_line(f"{u}!{u}@{site}", "JOIN", ch)) for ch in public]
        for u in f.get("offline") or []:
            users.pop(u, None)
            if u != self.nick and not any(u in us for us in self._online.values()):
                out += [Send(format_line(f"{u}!{u}@{site}", "PART", ch, "offline")) for ch in public]
        return out

    def _f_missing(self, f: dict[str, Any], origin: Any, now: float) -> list[Action]:
        if f.get("recovered"):
            left = f" (up to {f.get('count')} still missing)" if f.get("count") else ""
            return self._tell(f"*** recovered {f.get('recovered')} messages from site {f.get('origin')}{left}: "
                              "shown above as [REPAIRED] NOTICEs")
        return self._tell(f"*** up to {f.get('count')} messages from site {f.get('origin')} were lost in a "
                          "disconnection; repair brings them back if another site holds them")

    def _f_rooms(self, f: dict[str, Any], origin: Any, now: float) -> list[Action]:
        """One page of rooms: RPL_LIST lines; while the server says ``more``, the next page is asked for
        (``after`` the last room) before RPL_LISTEND, so the client sees one list."""
        first = not (isinstance(origin, tuple) and origin[0] == "LIST+")
        out: list[Action] = [self._num("321", "Channel", "Users  Name")] if first else []
        rooms = [r for r in f.get("rooms") or [] if isinstance(r, dict)]
        for r in rooms:
            topic = ("private room (+i)" if r.get("private") else "") + (" joined" if r.get("joined") else "")
            out.append(self._num("322", channel_of(str(r.get("room"))), str(r.get("members", 0)), topic.strip()))
        if f.get("more") and rooms:
            return out + [self._request("LIST+", (), {"type": "rooms", "after": str(rooms[-1].get("room"))})]
        return out + [self._num("323", "End of /LIST")]

    def _f_created(self, f: dict[str, Any], origin: Any, now: float) -> list[Action]:
        return [self._notice(self.nick, f"*** private room {channel_of(str(f.get('room')))} created for "
                                        + ", ".join(map(str, f.get("members") or [])))]

    def _on_error(self, f: dict[str, Any], origin: tuple[str, tuple[str, ...]] | None) -> list[Action]:
        code, message = str(f.get("code", "")), str(f.get("message", ""))
        command, args = origin if origin is not None else ("", ())
        target = args[0] if args else ""
        if command == "HELLO":
            self.closed = True
            if code == "rate_limited":
                # Not a wrong password: say so as ircds do when they throttle (464 makes clients ask
                # the user for another password instead of reconnecting a little later).
                return [Send(format_line("", "ERROR", f"Closing Link: Throttled: {message}")),
                        Close("login throttled")]
            return [self._num("464", f"Password incorrect ({message})" if code != "auth_failed"
                              else "Password incorrect"),
                    Send(format_line("", "ERROR", "Closing Link: authentication failed")), Close("auth failed")]
        if command in ("PRIVMSG", "NOTICE"):
            self._says_in_flight = max(0, self._says_in_flight - 1)
            return [self._num("404", target, f"Cannot send to channel: {message}")]
        if command == "JOIN":
            if code == "forbidden":
                return [self._num("473", target, "Cannot join channel (+i): a private room you are not a member of")]
            if code == "limit":
                return [self._num("405", target, f"You have joined too many channels: {message}")]
            return [self._num("403", target, f"Cannot join: {message}")]
        if command == "PART":
            return [self._num("442", target, f"Cannot leave: {message}")]
        return [self._notice(self.nick or "*", f"*** error from the chat server: {message}")]
