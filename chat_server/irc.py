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

Mapping (docs/irc.md): the account name is the nick (``PASS`` carries the
password, required), a room ``ops`` is the channel ``#ops``, a user shows as
``user!user@site``. ``PRIVMSG``/``NOTICE`` to a channel is a ``say``; the
server does not echo a client's own lines (it has shown them already), so the
session drops the delivery of its own acked says. Late, repaired and FLASH or
IMMEDIATE messages, which IRC cannot insert above or highlight, arrive as a
``NOTICE`` from their author marked ``[LATE +12s]``, ``[REPAIRED +300s]`` or
``[FLASH]``. Site status changes and missing-message notices are server
``NOTICE`` s. Private rooms are invite-only channels (``+i``): joining one
you are not a member of gets ``473``. Registration is RFC 2812's ``PASS``,
``NICK``, ``USER``; IRCv3 ``CAP LS`` gets an empty list so clients go on.
Malformed, unknown and oversized lines get the standard numerics and the
connection stays open; a client that floods past the site's frame rate is
closed with ``ERROR :Closing Link: Excess Flood`` as ircds do.
"""
from __future__ import annotations

import itertools
import re
import time
from dataclasses import dataclass, field
from typing import Any

from .ircline import IrcSyntaxError, channel_of, format_line, parse_line, room_of, split_text
from .limits import TokenBucket
from .protocol import USER_NAME

MAX_LINE_BYTES = 512              # RFC 2812, CR LF included
MAX_INPUT_BYTES = 4096            # longer client lines get 417 (IRCv3 message tags allow up to 4096 + 512)
HISTORY_LINES = 20                # joined-history lines replayed as NOTICEs
MAX_EARLY_LINES = 32              # lines kept while a login is checked (more: 451)
_NICK_PARAM = re.compile(r"^[^\s,*?!@]+$")


_last_shown: tuple[Any, list[Any]] = (None, [])   # the message frame last formatted, and its lines


@dataclass(frozen=True, slots=True)
class Send:
    """IRC lines (CR LF terminated) for the client."""

    data: bytes


@dataclass(frozen=True, slots=True)
class Request:
    """A chat protocol client frame for the chat server."""

    frame: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Close:
    """Close the connection after sending what is queued."""

    reason: str


Action = Send | Request | Close


@dataclass
class _Channel:
    private: bool = False
    members: tuple[str, ...] = ()


@dataclass
class IrcSession:
    """The IRC side of one client connection (see the module docstring)."""

    server_name: str                   # e.g. "A.irc.<mission>"
    site: str
    network: str                       # the mission's name (ISUPPORT NETWORK)
    rate_frames: float = 50.0          # client lines per second, sustained
    rate_burst: int = 200              # lines in a burst; beyond: Excess Flood
    created: str = ""                  # RPL_CREATED text
    nick: str = ""
    registered: bool = False
    closed: bool = False
    _password: str | None = None
    _user_given: bool = False
    _hello_sent: bool = False
    _ids: Any = field(default_factory=lambda: itertools.count(1))
    _pending: dict[str, tuple[str, tuple[str, ...]]] = field(default_factory=dict)   # request id -> (command, args)
    _channels: dict[str, _Channel] = field(default_factory=dict)                      # joined rooms
    _own: dict[str, None] = field(default_factory=dict)        # msg_ids of our acked says (delivery suppressed)
    _held: list[dict[str, Any]] = field(default_factory=list)  # our deliveries that came before their ack
    _says_in_flight: int = 0
    _online: dict[str, dict[str, int]] = field(default_factory=dict)   # site -> user -> 1 (presence)
    _bucket: TokenBucket | None = None
    _early: list[bytes] = field(default_factory=list)      # lines that came while the password was being checked

    # --- helpers ------------------------------------------------------------------------------
    @property
    def me(self) -> str:
        return f"{self.nick}!{self.nick}@{self.site}"

    def _num(self, code: str, *params: str) -> Send:
        return Send(format_line(self.server_name, code, self.nick or "*", *params))

    def _notice(self, target: str, text: str) -> Send:
        return Send(format_line(self.server_name, "NOTICE", target, text))

    def _request(self, command: str, args: tuple[str, ...], frame: dict[str, Any]) -> Request:
        rid = f"irc{next(self._ids)}"
        self._pending[rid] = (command, args)
        return Request({**frame, "id": rid})

    def _flooding(self, now: float) -> bool:
        if self._bucket is None:
            self._bucket = TokenBucket(self.rate_frames, self.rate_burst, now)
        return not self._bucket.take(now)

    # --- client lines -------------------------------------------------------------------------
    def receive(self, raw: bytes, now: float) -> list[Action]:
        """One line from the client (CR LF stripped or not); ``now`` is a monotonic clock (the flood limit's).

        ``on_frame`` takes wall-clock time instead: it says how late a message is against its ``sent_at``."""
        if self.closed:
            return []
        if self._flooding(now):
            self.closed = True
            return [Send(format_line("", "ERROR", "Closing Link: Excess Flood")), Close("excess flood")]
        if len(raw) > MAX_INPUT_BYTES:
            return [self._num("417", "Input line was too long")]
        if not raw.strip():
            return []
        try:
            line = parse_line(raw)
        except IrcSyntaxError:
            return [self._num("421", raw[:20].decode("utf-8", "replace").split(" ")[0] or "?", "Unknown command")]
        handler = getattr(self, f"_c_{line.command.lower()}", None)
        if handler is None:
            return [self._num("421", line.command, "Unknown command")]
        if not self.registered and line.command not in ("PASS", "NICK", "USER", "CAP", "PING", "PONG", "QUIT"):
            if self._hello_sent and len(self._early) < MAX_EARLY_LINES:
                self._early.append(raw)           # a client that pipelines JOIN after USER: run it once registered
                return []
            return [self._num("451", "You have not registered")]
        result: list[Action] = handler(line.params, now)
        return result

    def _need(self, command: str, params: tuple[str, ...], n: int) -> list[Action] | None:
        if len(params) < n:
            return [self._num("461", command, "Not enough parameters")]
        return None

    # registration
    def _c_cap(self, p: tuple[str, ...], now: float) -> list[Action]:
        sub = p[0].upper() if p else ""
        if sub == "LS":
            return [Send(format_line(self.server_name, "CAP", self.nick or "*", "LS", ""))]
        if sub == "REQ":
            return [Send(format_line(self.server_name, "CAP", self.nick or "*", "NAK", p[1] if len(p) > 1 else ""))]
        if sub == "LIST":
            return [Send(format_line(self.server_name, "CAP", self.nick or "*", "LIST", ""))]
        return []                                   # CAP END and others: nothing to say

    def _c_pass(self, p: tuple[str, ...], now: float) -> list[Action]:
        if self.registered or self._hello_sent:
            return [self._num("462", "You may not reregister")]
        # Clients send a password with spaces without the trailing colon (irssi: PASS correct horse).
        return self._need("PASS", p, 1) or self._set_password(" ".join(p))

    def _set_password(self, password: str) -> list[Action]:
        self._password = password
        return []

    def _c_nick(self, p: tuple[str, ...], now: float) -> list[Action]:
        if not p:
            return [self._num("431", "No nickname given")]
        if self.registered or self._hello_sent:
            if p[0] == self.nick:
                return []
            return [self._num("432", p[0], "Nick changes are not supported: your nick is your account name")]
        if not USER_NAME.match(p[0]):
            return [self._num("432", p[0], "Erroneous nickname: use your account name")]
        self.nick = p[0]
        return self._maybe_hello()

    def _c_user(self, p: tuple[str, ...], now: float) -> list[Action]:
        if self.registered or self._hello_sent:
            return [self._num("462", "You may not reregister")]
        if (missing := self._need("USER", p, 4)) is not None:
            return missing
        self._user_given = True
        return self._maybe_hello()

    def _maybe_hello(self) -> list[Action]:
        if not (self.nick and self._user_given) or self._hello_sent:
            return []
        if self._password is None:
            self.closed = True
            return [self._num("464", "Password required: set your account password as the server password (PASS)"),
                    Send(format_line("", "ERROR", "Closing Link: password required")), Close("no password")]
        self._hello_sent = True
        password, self._password = self._password, None
        return [self._request("HELLO", (), {"type": "hello", "user": self.nick, "password": password})]

    # always allowed
    def _c_ping(self, p: tuple[str, ...], now: float) -> list[Action]:
        if not p:
            return [self._num("409", "No origin specified")]
        return [Send(format_line(self.server_name, "PONG", self.server_name, p[0]))]

    def _c_pong(self, p: tuple[str, ...], now: float) -> list[Action]:
        return []

    def _c_quit(self, p: tuple[str, ...], now: float) -> list[Action]:
        self.closed = True
        reason = p[0] if p else "Client quit"
        return [Send(format_line("", "ERROR", f"Closing Link: {self.nick or '*'} ({reason})")), Close("quit")]

    # channels
    def _c_join(self, p: tuple[str, ...], now: float) -> list[Action]:
        if (missing := self._need("JOIN", p, 1)) is not None:
            return missing
        if p[0] == "0":
            return [a for ch in list(self._channels) for a in self._c_part((channel_of(ch),), now)]
        out: list[Action] = []
        for ch in p[0].split(","):
            room = room_of(ch)
            if room is None:
                out.append(self._num("403", ch, "No such channel (rooms are #name, name: letters, digits, _.#:+-)"))
            elif room not in self._channels:
                out.append(self._request("JOIN", (ch,), {"type": "join", "room": room}))
        return out

    def _c_part(self, p: tuple[str, ...], now: float) -> list[Action]:
        if (missing := self._need("PART", p, 1)) is not None:
            return missing
        out: list[Action] = []
        for ch in p[0].split(","):
            room = room_of(ch)
            if room is None or room not in self._channels:
                out.append(self._num("442", ch, "You're not on that channel"))
            else:
                out.append(self._request("PART", (ch,), {"type": "leave", "room": room}))
        return out

    def _c_privmsg(self, p: tuple[str, ...], now: float, command: str = "PRIVMSG") -> list[Action]:
        quiet = command == "NOTICE"                # RFC 2812: never an automatic reply to a NOTICE
        if not p:
            return [] if quiet else [self._num("411", f"No recipient given ({command})")]
        if len(p) < 2 or not p[1]:
            return [] if quiet else [self._num("412", "No text to send")]
        out: list[Action] = []
        for target in p[0].split(","):
            room = room_of(target)
            if room is None:
                if not quiet:
                    out.append(self._num("401", target, "No such nick/channel: direct messages are not supported, "
                                                        "create a private room"))
                continue
            if room not in self._channels:
                if not quiet:
                    out.append(self._num("404", target, "Cannot send to channel: join it first"))
                continue
            text = p[1]
            if text.startswith("\x01ACTION ") and text.endswith("\x01"):
                text = f"* {self.nick} {text[8:-1]}"
            elif text.startswith("\x01"):
                continue                           # other CTCP (VERSION, PING...) is not chat
            self._says_in_flight += 1
            cid = f"irc-{int(now * 1000)}-{next(self._ids)}"
            out.append(self._request(command, (target,), {"type": "say", "room": room, "text": text,
                                                          "client_id": cid}))
        return out

    def _c_notice(self, p: tuple[str, ...], now: float) -> list[Action]:
        return self._c_privmsg(p, now, "NOTICE")

    def _names(self, channel: str) -> list[Action]:
        room = room_of(channel)
        ch = self._channels.get(room or "")
        nicks: set[str] = {self.nick}
        if ch is not None and ch.private:
            nicks |= set(ch.members)
        elif ch is not None:
            nicks |= {u for users in self._online.values() for u in users}
        out: list[Action] = []
        if ch is not None:
            names = sorted(nicks)
            kind = "@" if ch.private else "="
            for i in range(0, len(names), 30):
                out.append(self._num("353", kind, channel, " ".join(names[i:i + 30])))
        out.append(self._num("366", channel, "End of /NAMES list"))
        return out

    def _c_names(self, p: tuple[str, ...], now: float) -> list[Action]:
        if not p:
            return [a for room in sorted(self._channels) for a in self._names(channel_of(room))]
        return [a for ch in p[0].split(",") for a in self._names(ch)]

    def _c_who(self, p: tuple[str, ...], now: float) -> list[Action]:
        mask = p[0] if p else "*"
        out: list[Action] = []
        room = room_of(mask)
        ch = self._channels.get(room or "")
        if ch is not None:
            sites_of: dict[str, list[str]] = {}
            for site, users in self._online.items():
                for u in users:
                    sites_of.setdefault(u, []).append(site)
            listed = sorted(set(ch.members) | {self.nick}) if ch.private else sorted(set(sites_of) | {self.nick})
            for u in listed:
                for site in sites_of.get(u, [self.site] if u == self.nick else ["?"]):
                    out.append(self._num("352", mask, u, site, self.server_name, u, "H", f"0 {u}@{site}"))
        return out + [self._num("315", mask, "End of /WHO list")]

    def _c_topic(self, p: tuple[str, ...], now: float) -> list[Action]:
        if (missing := self._need("TOPIC", p, 1)) is not None:
            return missing
        room = room_of(p[0])
        if room is None or room not in self._channels:
            return [self._num("442", p[0], "You're not on that channel")]
        if len(p) > 1:
            return [self._num("482", p[0], "Rooms have no topic on this server")]
        return [self._num("331", p[0], "No topic is set")]

    def _c_list(self, p: tuple[str, ...], now: float) -> list[Action]:
        return [self._request("LIST", tuple(p[:1]), {"type": "rooms"})]

    def _c_mode(self, p: tuple[str, ...], now: float) -> list[Action]:
        if (missing := self._need("MODE", p, 1)) is not None:
            return missing
        target = p[0]
        if target == self.nick:
            return [self._num("221", "+")] if len(p) == 1 else []     # user modes: none kept, none refused loudly
        room = room_of(target)
        if room is None or room not in self._channels:
            return [self._num("403", target, "No such channel")]
        if len(p) == 1:
            return [self._num("324", target, "+nti" if self._channels[room].private else "+nt")]
        if p[1].lstrip("+") in ("b", "e", "I"):
            end = {"b": ("368", "End of channel ban list"), "e": ("349", "End of channel exception list"),
                   "I": ("347", "End of channel invite list")}[p[1].lstrip("+")]
            return [self._num(end[0], target, end[1])]
        return [self._num("482", target, "Channel modes are set by the room's definition, not by MODE")]

    def _c_whois(self, p: tuple[str, ...], now: float) -> list[Action]:
        if (missing := self._need("WHOIS", p, 1)) is not None:
            return missing
        nick = p[-1]
        sites = sorted(s for s, users in self._online.items() if nick in users)
        if nick == self.nick:
            sites = sorted(set(sites) | {self.site})
        if not sites:
            return [self._num("401", nick, "No such nick: not online at any site this site can see"),
                    self._num("318", nick, "End of /WHOIS list")]
        return [self._num("311", nick, nick, sites[0], "*", f"{nick} at {', '.join(sites)}"),
                self._num("318", nick, "End of /WHOIS list")]

    def _c_ison(self, p: tuple[str, ...], now: float) -> list[Action]:
        online = {u for users in self._online.values() for u in users} | {self.nick}
        return [self._num("303", " ".join(n for n in " ".join(p).split() if n in online))]

    def _c_userhost(self, p: tuple[str, ...], now: float) -> list[Action]:
        return [self._num("302", " ".join(f"{n}=+{n}@{self.site}" for n in p[:5] if n == self.nick))]

    def _c_away(self, p: tuple[str, ...], now: float) -> list[Action]:
        return [self._num("306", "You have been marked as being away") if p and p[0]
                else self._num("305", "You are no longer marked as being away")]

    def _c_motd(self, p: tuple[str, ...], now: float) -> list[Action]:
        return [self._num("422", "MOTD File is missing")]

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
                             + ", ".join(f"{s} {st}" for s, st in sorted(sites.items()))),
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
        self._channels[room] = _Channel(bool(f.get("private")), tuple(f.get("members") or ()))
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
        if precedence in ("flash", "immediate"):
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
        return self._tell(f"*** site {f.get('site')} is {f.get('status')}{via}")

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
