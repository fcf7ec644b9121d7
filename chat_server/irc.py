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
reply helpers; ``irc_login.py`` registration (CAP, SASL, PASS/NICK/USER);
``irc_commands.py`` the client's other commands (``receive``);
``irc_messages.py`` how a chat message is written as IRC lines (marks and
IRCv3 tags); ``irc_history.py`` ``CHATHISTORY``; ``irc_fanout.py`` a
fan-out's lines read once for every session; ``irc_shown.py`` what a session
was shown (in step with a fan-out, and what showing a line notes); this module
the session, which adds the chat server's frames (``on_frame``).

Mapping (docs/irc.md): the account name is the nick (``PASS`` or SASL PLAIN
carries the password, required), a room ``ops`` is the channel ``#ops``, a
user shows as ``user!user@site``. ``PRIVMSG``/``NOTICE`` to a channel is a
``say``. Without ``echo-message`` the server does not echo a client's own
lines (it has shown them already), so the session drops the delivery of its
own acked says; with it, they come back in the global order. Late, repaired
and FLASH or IMMEDIATE messages, which IRC cannot insert above or highlight,
arrive as a ``NOTICE`` from their author marked ``[LATE +12s]``,
``[REPAIRED +300s]`` or ``[FLASH A:90]`` (``!ack`` acknowledges); a sender's
own line is never marked late. History replayed on join keeps those marks and,
with ``server-time`` and ``batch``, comes as its authors' lines at their
original times in a ``chathistory`` batch; a rejoin replays only what the
client was not shown (``shown``: per room, the highest delivery number shown,
kept by the front end across reconnections). A chat text never reaches the
client as IRC codes: its controls (CTCP's 0x01, colours, ESC...) are shown as
symbols and its line breaks start new lines of the same author; an IRC user's
formatting codes are removed on the way in (``ircline.py``, docs/irc.md
"Control characters"). Site status changes, missing-message notices and
acknowledgements are server ``NOTICE`` s. Private rooms are invite-only
channels (``+i``): joining one you are not a member of gets ``473``.
In a labeled mission every message line starts with its label
(``[SECRET//REL TO GBR] text``, as M-Link's IRC gateway writes it), a
channel's label is its topic (``332``), and a user's line that starts with a
label is said at it (``404`` when the user may not send it: front_end_labels.py).
Malformed, unknown and oversized lines get the standard numerics and the
connection stays open; a client that floods past the site's frame rate is
closed with ``ERROR :Closing Link: Excess Flood`` as ircds do.
"""
from __future__ import annotations

import re
from typing import Any

from contracts.status import LinkStatus

from .front_end_labels import label_of
from .irc_commands import MAX_TARGETS
from .irc_fanout import fanout_line, line_of
from .irc_history import CHATHISTORY_MAX
from .irc_messages import message_lines, sent_at
from .irc_shown import IrcShown
from .irc_state import Action, Channel, Close, Send
from .ircline import channel_of, format_line

HISTORY_LINES = 20                # joined-history lines replayed

def plural(n: Any, word: str) -> str:
    """``1 message``, ``2 messages``."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


class IrcSession(IrcShown):
    """The IRC side of one client connection (see the module docstring)."""

    # --- chat protocol frames from the server -------------------------------------------------
    def on_frame(self, f: dict[str, Any], now: float) -> list[Action]:
        """A chat protocol server frame for this connection."""
        if self.closed:
            return []
        kind = f.get("type")
        rid = f.get("id")
        if kind == "message" and rid is None:        # a fan-out's line: the hot path, no reply to match
            line = fanout_line(f)
            if self._tail is not None:
                data = self.in_step(line)
                if data is not None:
                    return [Send(data)]
                self._settle()
            return self._f_message(f, None, now)     # (``_show`` makes it the tail if it was shown in step)
        self._settle()
        try:
            origin = self._pending.pop(rid, None) if isinstance(rid, str) else None
            if kind == "error":
                ref = f.get("in_reply_to")
                if origin is None and isinstance(ref, str):
                    origin, rid = self._pending.pop(ref, None), ref
                return self._on_error(f, origin, rid if isinstance(rid, str) else None, now) + self._answered(origin)
            handler = getattr(self, f"_f_{kind}", None)
            return (handler(f, origin, now) if handler is not None else []) + self._answered(origin)
        finally:
            self._tail = None           # a line this frame showed (held ones) may not be the last it noted

    def receive(self, raw: bytes, now: float, wall: float | None = None) -> list[Action]:
        self._settle()                  # a command reads the rooms' state (joins, parts, history, capabilities)
        return super().receive(raw, now, wall)

    def _f_welcome(self, f: dict[str, Any], origin: Any, now: float) -> list[Action]:
        if isinstance(origin, tuple) and origin[0] == "SASL":
            return self._sasl_logged_in(f, origin[1][0], now)
        return self._welcomed(f, now)

    def _welcomed(self, f: dict[str, Any], now: float) -> list[Action]:
        self.registered = True
        self.labels = self.labels.welcomed(f)
        self.presence.reset(f.get("presence") or {})
        self._site_status = {str(s): (LinkStatus.parse(st).value, None) for s, st in (f.get("sites") or {}).items()}
        self._chat_down = {str(s) for s in f.get("chat_down") or ()}
        out: list[Action] = [
            self._num("001", f"Welcome to the {self.network} RCM chat, {self.me}"),
            self._num("002", f"Your host is {self.server_name}, the chat server of site {self.site}"),
            self._num("003", f"This server was created {self.created or 'at start-up'}"),
            self._num("004", self.server_name, "rcm-chat-1", "i", "int"),
            self._num("005", "CHANTYPES=#", "CHANMODES=,,,int", "PREFIX=()", f"NICKLEN={32}", "CHANNELLEN=65",
                      f"NETWORK={re.sub(r'[^A-Za-z0-9_.-]', '_', self.network) or 'rcm'}", "CASEMAPPING=ascii",
                      f"CHATHISTORY={CHATHISTORY_MAX}", "MSGREFTYPES=msgid,timestamp",
                      f"CHANLIMIT=#:{self.max_channels}", f"TARGMAX=PRIVMSG:{MAX_TARGETS},NOTICE:{MAX_TARGETS}",
                      "are supported by this server"),
        ]
        out += self._c_motd((), now)
        missing = f.get("missing")
        for origin, count in sorted(missing.items() if isinstance(missing, dict) else ()):
            out.append(self._notice(self.nick, f"*** up to {plural(count, 'message')} from site {origin} "
                                               f"{'was' if count == 1 else 'were'} lost in a disconnection and "
                                               f"{'is' if count == 1 else 'are'} still missing"))
        for room in f.get("rooms") or []:
            if isinstance(room, str) and room not in self._channels:
                out.append(self._request("JOIN", (channel_of(room),), {"type": "join", "room": room}))
        early, self._early = self._early, []
        line_clock = self._bucket.refilled if self._bucket is not None else 0.0
        for raw in early:                         # on the line clock (``receive``'s), not this frame's wall clock
            out += self._in_turn(raw, line_clock)     # (counted against the flood limit when it came)
        return out

    def _lines(self, m: dict[str, Any], room: str, now: float | None, batch: str | None = None,
               above: float | None = None, own: bool | None = None) -> list[bytes]:
        """``m``'s lines for this client (``own``: ``_is_own(m)``, when the caller knows it already)."""
        return message_lines(m, room, self.style, own=self._is_own(m) if own is None else own, now=now,
                             quotes=self.quotes, batch=batch, server_name=self.server_name, above=above,
                             labels=self.labels)

    def _run_lines(self, msgs: list[dict[str, Any]], room: str, batch: str | None,
                   above: float | None = None) -> list[bytes]:
        """Replayed messages' lines, each marked against the one above it (the first against ``above``)."""
        out: list[bytes] = []
        for m in msgs:
            out += self._lines(m, room, None, batch, above)
            above = sent_at(m)
        return out

    def _f_joined(self, f: dict[str, Any], origin: Any, now: float) -> list[Action]:
        room = str(f.get("room", ""))
        ch = channel_of(room)
        new = room not in self._channels
        members = tuple(f.get("members") or ())
        label = label_of(f.get("label"), self.labels.scheme)
        if not new:
            known = self._channels[room]
            was = known.label
            known.private, known.members, known.label = bool(f.get("private")), members, label
            if label is None or was is None or label == was:
                return []
            # A room's label is settled by its earliest definition in the global order: one that came later
            # may change what the channel showed. IRC's topic change says so.
            return [Send(format_line(self.server_name, "TOPIC", ch, self._topic_text(label)))]
        self._channels[room] = Channel(bool(f.get("private")), members, label=label)
        out: list[Action] = [Send(format_line(self.me, "JOIN", ch)), self._topic(ch)]
        out += self._names(ch)
        if "draft/chathistory" in self.caps:
            return out                            # the client asks for history itself (CHATHISTORY)
        history = [m for m in f.get("history") or [] if isinstance(m, dict)]
        fresh = [m for m in history if not self._was_shown(room, m)]
        older = len(fresh) > HISTORY_LINES or (bool(f.get("more")) and len(fresh) == len(history))
        fresh = fresh[-HISTORY_LINES:]
        for m in history:
            self.quotes.add(m)
        ref = self._new_batch()
        lines = self._run_lines(fresh, room, ref, self._above.get(room))     # below what a rejoin left shown
        for m in fresh:
            self._showing(room, m)
        out += self._batched(ref, "chathistory", (ch,), lines)
        if older and fresh:
            out.append(self._notice(ch, f"*** older lines: /quote CHATHISTORY BEFORE {ch} "
                                        f"msgid={fresh[0].get('msg_id')} 50"))
        return out

    def _f_left(self, f: dict[str, Any], origin: Any, now: float) -> list[Action]:
        room = str(f.get("room", ""))
        if self._channels.pop(room, None) is None:
            return []
        return [Send(format_line(self.me, "PART", channel_of(room), str(f.get("reason") or "left")))]

    def _f_ack(self, f: dict[str, Any], origin: Any, now: float) -> list[Action]:
        self._says_in_flight = max(0, self._says_in_flight - 1)
        msg_id = f.get("msg_id")
        if isinstance(msg_id, str) and "echo-message" not in self.caps:
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
                self._showing(str(m.get("room", "")), m)
            elif self._says_in_flight:
                keep.append(m)
            else:
                out += self._show(m, now, self._is_own(m))
        self._held = keep
        return out

    def _f_message(self, f: dict[str, Any], origin: Any, now: float) -> list[Action]:
        own = self._is_own(f)
        if own and "echo-message" not in self.caps:
            msg_id = f.get("msg_id")
            if msg_id in self._own:                 # our own line: the client showed it when we typed it
                self._own.pop(msg_id, None)
                self._showing(str(f.get("room", "")), f)
                return []
            if self._says_in_flight:                # may be ours, its ack not here yet
                self._held.append(f)
                return []
        return self._show(f, now, own)

    def _show(self, f: dict[str, Any], now: float, own: bool) -> list[Action]:
        """A message's lines for this client (``own``: ``_is_own(f)``): formatted once per rendering for a whole
        fan-out (``FanLine``). The list returned may be the fan-out's shared one: read it, never change it."""
        line = line_of(f)
        room = line.room
        ch = self._channels.get(room)
        if ch is None:
            return []
        above = self._above.get(room)
        self._showing(room, f)
        out: list[Action] = []
        user = line.user
        if user != self.nick and user not in ch.nicks:      # a speaker the channel did not list: it is in it
            ch.nicks = self.nick_lists.add(ch.nicks, user)
            out.append(Send(format_line(f"{user}!{user}@{line.origin}", "JOIN", channel_of(room))))
        if own:                                     # never cached: only this user's sessions show it so
            return out + [Send(b"".join(self._lines(f, room, now, above=above, own=True)))]
        key = (self.style, above, self.labels.clearance)     # quotes: clearance
        lines = line.rendered.get(key)
        if lines is None:
            lines = line.rendered[key] = [Send(b"".join(self._lines(f, room, now, above=above, own=False)))]
        if out:
            return out + lines
        if line.plain and line.prev is not None and line.prev.sent == above:     # as a reader in step sees it
            render = (self.style, self.labels.clearance)
            line.stepped[render] = lines[0].data    # type: ignore[union-attr]
            self._tail, self._tail_nicks, self._tail_render = line, ch.nicks, render     # the next may be in step
        return lines

    def _tell(self, text: str) -> list[Action]:
        """A server NOTICE where the user looks: every joined channel, or the user when none is joined."""
        targets = [channel_of(r) for r in sorted(self._channels)] or [self.nick]
        return [self._notice(t, text) for t in targets]

    def _f_site_status(self, f: dict[str, Any], origin: Any, now: float) -> list[Action]:
        site, status = str(f.get("site")), LinkStatus.parse(f.get("status")).value
        self._site_status[site] = (status, str(f["via"]) if f.get("via") else None)
        via = f" via {f['via']}" if f.get("via") else ""
        chat = ""
        if f.get("chat_down") is True and site not in self._chat_down:
            self._chat_down.add(site)
            chat = "; its chat server is down (its users are offline; what is said reaches them when it is back)"
        elif f.get("chat_down") is not True and site in self._chat_down:
            self._chat_down.discard(site)
            chat = "; its chat server is back"
        return self._tell(f"*** site {site} is {status}{via}{chat}")

    def _f_presence(self, f: dict[str, Any], origin: Any, now: float) -> list[Action]:
        """Users who came online or went offline at a site: ``JOIN`` for the channels' members who came, ``PART``
        for the listed who are online at no site now. What a frame changes in a room is worked out once for
        every session (``Presence.change``); a session adds only what it had not listed, with one set union."""
        site = str(f.get("site", ""))
        self.presence.apply(f)
        joins: list[bytes] = []
        parts: list[bytes] = []
        me = self.nick
        for room, ch in sorted(self._channels.items()):
            channel = channel_of(room)
            if ch.private:       # (a private room's members are the session's own: its definition)
                users = tuple(u for u in f.get("online") or () if isinstance(u, str) and u in ch.members)
                lines = None
            else:
                users, lines = self.presence.change(f, room, True, self.members_of, channel)
            new = [u for u in users if u != me and u not in ch.nicks]
            if new:
                ch.nicks = self.nick_lists.union(ch.nicks, new)
                joins.append(lines if lines is not None and len(new) == len(users)
                             else b"".join(format_line(f"{u}!{u}@{site}", "JOIN", channel) for u in new))
        if f.get("offline"):
            for room, ch in sorted(self._channels.items()):
                channel = channel_of(room)
                users, lines = self.presence.change(f, room, False, self.members_of, channel)
                gone = [u for u in users if u != me and u in ch.nicks]
                if gone:
                    ch.nicks = self.nick_lists.difference(ch.nicks, gone)
                    parts.append(lines if len(gone) == len(users)
                                 else b"".join(format_line(f"{u}!{u}@{site}", "PART", channel, "offline")
                                               for u in gone))
        data = b"".join(joins + parts)
        return [Send(data)] if data else []

    def _f_missing(self, f: dict[str, Any], origin: Any, now: float) -> list[Action]:
        if f.get("recovered"):
            left = f" (up to {f.get('count')} still missing)" if f.get("count") else ": none is missing now"
            return self._tell(f"*** recovered {plural(f.get('recovered'), 'message')} from site {f.get('origin')}"
                              f"{left}; shown above as [REPAIRED] NOTICEs")
        count = f.get("count")
        return self._tell(f"*** up to {plural(count, 'message')} from site {f.get('origin')} "
                          f"{'was' if count == 1 else 'were'} lost in a disconnection; repair brings them back if "
                          "another site holds them")

    def _f_acknowledging(self, f: dict[str, Any], origin: Any, now: float) -> list[Action]:
        self._urgent.pop(str(f.get("msg_id")), None)       # the room's ``acknowledged`` shows it to everyone
        return []

    def _f_acknowledged(self, f: dict[str, Any], origin: Any, now: float) -> list[Action]:
        msg_id, user, site = str(f.get("msg_id")), str(f.get("user")), str(f.get("site"))
        if user == self.nick:
            self._urgent.pop(msg_id, None)
        seen = self.quotes.room_of(msg_id)
        room = f.get("room") if isinstance(f.get("room"), str) else seen
        text = f"*** {user}@{site} acknowledged {msg_id}"
        if room is not None and seen == room:              # the line it acknowledges, as a reply quotes it
            text += " " + self.quotes.mark(msg_id, room, self.labels.may_read)
        if room in self._channels:
            return [self._notice(channel_of(room), text)]
        return self._tell(text)

    def _f_history(self, f: dict[str, Any], origin: Any, now: float) -> list[Action]:
        """A page for a ``CHATHISTORY`` (irc_history.py): the next page asked for, or the batch."""
        rid = f.get("id")
        query = self._queries.pop(rid, None) if isinstance(rid, str) else None
        if query is None:
            return []
        nxt = query.take(f)
        if nxt is not None:
            request = self._request("CHATHISTORY", (query.sub, query.target), nxt)
            self._queries[str(request.frame["id"])] = query
            return [request]
        for m in query.collected:
            self.quotes.add(m)
        ref = self._new_batch()
        lines = self._run_lines(query.result(), query.room, ref)
        return self._batched(ref, "chathistory", (query.target,), lines)

    def _f_rooms(self, f: dict[str, Any], origin: Any, now: float) -> list[Action]:
        """One page of rooms: RPL_LIST lines; while the server says ``more``, the next page is asked for
        (``after`` the last room) before RPL_LISTEND, so the client sees one list. The count is the users in
        the channel as NAMES lists them (members online at some site); the topic says both counts."""
        first = not (isinstance(origin, tuple) and origin[0] == "LIST+")
        out: list[Action] = [self._num("321", "Channel", "Users  Name")] if first else []
        rooms = [r for r in f.get("rooms") or [] if isinstance(r, dict)]
        for r in rooms:
            members, online = r.get("members", 0), r.get("online", r.get("members", 0))
            topic = (self.labels.mark(r.get("label")) + f"{plural(members, 'member')}, {online} online"
                     + (", private room (+i)" if r.get("private") else "") + (", joined" if r.get("joined") else ""))
            out.append(self._num("322", channel_of(str(r.get("room"))), str(online), topic))
        if f.get("more") and rooms:
            return out + [self._request("LIST+", (), {"type": "rooms", "after": str(rooms[-1].get("room"))})]
        return out + [self._num("323", "End of /LIST")]

    def _f_created(self, f: dict[str, Any], origin: Any, now: float) -> list[Action]:
        return [self._notice(self.nick, f"*** private room {channel_of(str(f.get('room')))} created for "
                                        + ", ".join(map(str, f.get("members") or [])))]

    def _on_error(self, f: dict[str, Any], origin: tuple[str, tuple[str, ...]] | None, rid: str | None,
                  now: float) -> list[Action]:
        code, message = str(f.get("code", "")), str(f.get("message", ""))
        command, args = origin if origin is not None else ("", ())
        target = args[0] if args else ""
        if command == "SASL":
            return self._sasl_refused(code, message, now)
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
        if command == "ACK":
            return [self._notice(target, f"*** cannot acknowledge {args[1]}: {message}")]
        if command == "CHATHISTORY":
            self._queries.pop(rid or "", None)
            fail = "INVALID_TARGET" if code in ("forbidden", "not_authenticated") else "MESSAGE_ERROR"
            return [Send(format_line(self.server_name, "FAIL", "CHATHISTORY", fail, *args, message))]
        if command == "JOIN":
            if code == "forbidden" and self.labels.enabled:     # private, or not cleared: the server's reason
                # Clients print their own text for 473 (irssi: "You must be invited"): the NOTICE says why.
                return [self._num("473", target, f"Cannot join channel: {message}"),
                        self._notice(self.nick or "*", f"*** cannot join {target}: {message}")]
            if code == "forbidden":
                return [self._num("473", target, "Cannot join channel (+i): a private room you are not a member of")]
            if code == "limit":
                return [self._num("405", target, f"You have joined too many channels: {message}")]
            return [self._num("403", target, f"Cannot join: {message}")]
        if command == "PART":
            return [self._num("442", target, f"Cannot leave: {message}")]
        return [self._notice(self.nick or "*", f"*** error from the chat server: {message}")]
