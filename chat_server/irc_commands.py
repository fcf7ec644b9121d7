"""The IRC front end's client commands: one IRC line from the client in, actions out.

``IrcCommands.receive`` takes one client line and the time, applies the flood
limit, parses it (``ircline.py``) and runs the command's handler (``_c_`` and
the command in lower case): registration (``CAP``, ``PASS``, ``NICK``,
``USER``, then a ``hello`` request), ``PING``/``QUIT``, channels (``JOIN``,
``PART``, ``PRIVMSG``/``NOTICE`` as ``say``, ``NAMES``, ``WHO``, ``TOPIC``,
``LIST``, ``MODE``) and users (``WHOIS``, ``ISON``, ``USERHOST``, ``AWAY``,
``MOTD``). Malformed, unknown and oversized lines get their numerics; lines
before registration wait (a few) or get ``451``. The state and reply helpers
are ``irc_state.py``; the session, which adds the chat server's frames, is
``irc.py``.
"""
from __future__ import annotations

from contracts.precedence import DEFAULT, PRECEDENCES

from .irc_state import Action, Close, IrcState, Send
from .ircline import IrcSyntaxError, channel_of, format_line, parse_line, room_of, strip_formatting
from .limits import TokenBucket
from .protocol import USER_NAME

MAX_INPUT_BYTES = 4096            # longer client lines get 417 (IRCv3 message tags allow up to 4096 + 512)
MAX_EARLY_LINES = 32              # lines kept while a login is checked (more: 451)
PRECEDENCE_PREFIXES = tuple(p for p in PRECEDENCES if p != DEFAULT)
"""A line that starts ``!flash``, ``!immediate`` or ``!priority`` (any case) is said at that precedence."""


def precedence_of(text: str) -> tuple[str, str]:
    """(text, precedence) of a line: ``!flash MEDEVAC`` is ``("MEDEVAC", "flash")``, ``"routine"`` without a
    prefix (the say's precedence, spelt as any client spells it)."""
    head, _, rest = text.partition(" ")
    level = head[1:].lower() if head.startswith("!") else ""
    return (rest, level) if level in PRECEDENCE_PREFIXES and rest.strip() else (text, DEFAULT)


class IrcCommands(IrcState):
    """The client's lines of one IRC connection (see the module docstring)."""

    # --- client lines -------------------------------------------------------------------------
    def _flooding(self, now: float) -> bool:
        if self._bucket is None:
            self._bucket = TokenBucket(self.rate_frames, self.rate_burst, now)
        return not self._bucket.take(now)

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
            text = strip_formatting(text)          # bold, colours...: the chat's text is plain (docs/irc.md)
            if not text.strip():
                continue
            self._says_in_flight += 1
            cid = f"irc-{int(now * 1000)}-{next(self._ids)}"
            text, precedence = precedence_of(text)
            # The server checks the precedence as any client's (urgent.py): a refusal comes back as 404.
            say = {"type": "say", "room": room, "text": text, "client_id": cid, "precedence": precedence}
            out.append(self._request(command, (target,), say))
        return out

    def _c_notice(self, p: tuple[str, ...], now: float) -> list[Action]:
        return self._c_privmsg(p, now, "NOTICE")

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
