"""The IRC front end's client commands: one IRC line from the client in, actions out.

``IrcCommands.receive`` takes one client line and the time, applies the flood
limit, parses it (``ircline.py``) and runs the command's handler (``_c_`` and
the command in lower case): registration (``CAP``, ``AUTHENTICATE``, ``PASS``,
``NICK``, ``USER``: ``irc_login.py``), ``PING``/``QUIT``, channels (``JOIN``,
``PART``, ``PRIVMSG``/``NOTICE`` as ``say``, ``NAMES``, ``WHO``, ``TOPIC``,
``LIST``, ``MODE``; a line's leading ``[LABEL]`` in a labeled mission), ``ACK``
and ``!ack`` (acknowledging FLASH and IMMEDIATE lines), ``CHATHISTORY``
(``irc_history.py``), ``TAGMSG`` (taken, not carried) and ``WHOIS``; what only asks the
server (``MOTD``, ``LINKS``, ``TIME``, ``USERHOST``...) is ``irc_queries.py``.
Malformed, unknown and oversized lines get their numerics; lines before
registration wait (a few) or get ``451``. The state and reply helpers are
``irc_state.py``; the session, which adds the chat server's frames, is
``irc.py``.
"""
from __future__ import annotations

from typing import Any

from contracts.labels import Label, LabelError
from contracts.precedence import DEFAULT, PRECEDENCES
from contracts.text import action_text

from .front_end_labels import split_label
from .irc_history import HistoryRequestError, parse_chathistory
from .irc_queries import IrcQueries
from .irc_state import Action, Close, Send
from .ircline import IrcSyntaxError, channel_of, format_line, parse_line, room_of, strip_formatting
from .limits import TokenBucket

MAX_INPUT_BYTES = 4096            # longer client lines (without their tags) get 417
MAX_TAG_BYTES = 4096              # and longer tags ("@" ... " "), as IRCv3 message-tags says
MAX_EARLY_LINES = 32              # lines kept while a login is checked (more: 451)
MAX_BEHIND_LINES = 64             # lines kept while a JOIN or PART is answered (more: handled at once)
MEMBERSHIP = ("JOIN", "PART")     # requests whose answer the lines after them wait for (``receive``)
ANSWERED_AT_ONCE = (b"PING", b"PONG", b"QUIT")  # never wait behind one
MAX_HISTORY_QUERIES = 4           # CHATHISTORY commands of one connection under way at once (memory: irc_history.py)
MAX_TARGETS = 4                   # channels one PRIVMSG or NOTICE says its text in (ISUPPORT TARGMAX); more: 407
ACK_PREFIX = "!ack"               # a line "!ack [msg_id ...]" acknowledges FLASH and IMMEDIATE lines
PRECEDENCE_PREFIXES = tuple(p for p in PRECEDENCES if p != DEFAULT)
"""A line that starts ``!flash``, ``!immediate`` or ``!priority`` (any case) is said at that precedence."""


def targets_of(param: str) -> list[str]:
    """A command's comma-separated targets, each once (in the order given): a line naming ``#ops`` a thousand
    times is one request for ``#ops``, not a thousand."""
    return list(dict.fromkeys(param.split(",")))


def precedence_of(text: str) -> tuple[str, str]:
    """(text, precedence) of a line: ``!flash MEDEVAC`` is ``("MEDEVAC", "flash")``, ``"routine"`` without a
    prefix (the say's precedence, spelt as any client spells it)."""
    head, _, rest = text.partition(" ")
    level = head[1:].lower() if head.startswith("!") else ""
    return (rest, level) if level in PRECEDENCE_PREFIXES and rest.strip() else (text, DEFAULT)


class IrcCommands(IrcQueries):
    """The client's lines of one IRC connection (see the module docstring)."""

    # --- client lines -------------------------------------------------------------------------
    def _flooding(self, now: float) -> bool:
        if self._bucket is None:
            self._bucket = TokenBucket(self.rate_frames, self.rate_burst, now)
        return not self._bucket.take(now)

    def receive(self, raw: bytes, now: float, wall: float | None = None) -> list[Action]:
        """One line from the client (CR LF stripped or not); ``now`` is a monotonic clock (the flood limit's),
        ``wall`` the wall clock (what TIME answers; None: TIME says it is not known).

        ``on_frame`` takes wall-clock time instead: it says how late a message is against its ``sent_at``."""
        if self.closed:
            return []
        self._wall = wall
        if self._flooding(now):
            self.closed = True
            return [Send(format_line("", "ERROR", "Closing Link: Excess Flood")), Close("excess flood")]
        return self._in_turn(raw, now)

    def _in_turn(self, raw: bytes, now: float) -> list[Action]:
        """A line counted against the flood limit (``receive``, or a line kept while the login was checked):
        handled now, or kept behind a JOIN or PART under way."""
        if (self._behind or self._joining()) and len(self._behind) < MAX_BEHIND_LINES \
                and not raw.lstrip().upper().startswith(ANSWERED_AT_ONCE):
            # A JOIN or PART is being answered: the lines after it wait for it, as an ircd handles a client's
            # lines in order (a client's MODE #ops and WHO #ops right after JOIN #ops, as irssi and WeeChat
            # send them, would find no channel yet). PING, PONG and QUIT never wait.
            self._behind.append(raw)
            return []
        return self._handle(raw, now)

    def _joining(self) -> bool:
        """A JOIN or PART of this client is under way (asked, not answered yet)."""
        return any(command in MEMBERSHIP for command, _ in self._pending.values())

    def _answered(self, origin: Any) -> list[Action]:
        """After the answer to request ``origin`` (its command and arguments): if it was a JOIN or PART, the
        lines that waited behind it."""
        if self._behind and isinstance(origin, tuple) and origin[0] in MEMBERSHIP:
            return self._caught_up()
        return []

    def _caught_up(self) -> list[Action]:
        """The lines that waited behind a JOIN or PART, now that none is under way (up to the next one)."""
        out: list[Action] = []
        line_clock = self._bucket.refilled if self._bucket is not None else 0.0
        while self._behind and not self._joining() and not self.closed:
            out += self._handle(self._behind.pop(0), line_clock)
        return out

    def _handle(self, raw: bytes, now: float) -> list[Action]:
        """One line, in its turn (``receive`` has counted it against the flood limit)."""
        tags_end = raw.find(b" ") + 1 if raw.startswith(b"@") else 0
        if tags_end > MAX_TAG_BYTES or len(raw) - tags_end > MAX_INPUT_BYTES:
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
        if not self.registered and line.command not in ("PASS", "NICK", "USER", "CAP", "AUTHENTICATE", "PING", "PONG",
                                                        "QUIT"):
            if self._hello_sent and len(self._early) < MAX_EARLY_LINES:
                self._early.append(raw)           # a client that pipelines JOIN after USER: run it once registered
                return []
            return [self._num("451", "You have not registered")]
        if line.command in ("PRIVMSG", "NOTICE"):
            return self._c_privmsg(line.params, now, line.command, line.tags.get("+reply") or
                                   line.tags.get("+draft/reply"))
        result: list[Action] = handler(line.params, now)
        return result

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
        room_left = self.max_channels - len(self._channels)    # (the server refuses joins past it: none asked)
        for ch in targets_of(p[0]):
            room = room_of(ch)
            if room is None:
                out.append(self._num("403", ch, "No such channel (rooms are #name, name: letters, digits, _.#:+-)"))
            elif room not in self._channels:
                if room_left <= 0:
                    out.append(self._num("405", ch, f"You have joined too many channels: at most "
                                                    f"{self.max_channels}, the rest were not joined"))
                    break
                room_left -= 1
                out.append(self._request("JOIN", (ch,), {"type": "join", "room": room}))
        return out

    def _c_part(self, p: tuple[str, ...], now: float) -> list[Action]:
        if (missing := self._need("PART", p, 1)) is not None:
            return missing
        out: list[Action] = []
        for ch in targets_of(p[0]):
            room = room_of(ch)
            if room is None or room not in self._channels:
                out.append(self._num("442", ch, "You're not on that channel"))
            else:
                out.append(self._request("PART", (ch,), {"type": "leave", "room": room}))
        return out

    def _c_privmsg(self, p: tuple[str, ...], now: float, command: str = "PRIVMSG",
                   reply_to: str | None = None) -> list[Action]:
        quiet = command == "NOTICE"                # RFC 2812: never an automatic reply to a NOTICE
        if not p:
            return [] if quiet else [self._num("411", f"No recipient given ({command})")]
        if len(p) < 2 or not p[1]:
            return [] if quiet else [self._num("412", "No text to send")]
        out: list[Action] = []
        targets = targets_of(p[0])
        if len(targets) > MAX_TARGETS:          # each target is a message to every site: as ircds, the first few
            if not quiet:
                out.append(self._num("407", targets[MAX_TARGETS], f"Too many recipients: at most {MAX_TARGETS} "
                                     "channels a line, the rest were not sent"))
            targets = targets[:MAX_TARGETS]
        for target in targets:
            room = room_of(target)
            if room is None:
                if not quiet:
                    out.append(self._no_direct_messages(target))
                continue
            if room not in self._channels:
                if not quiet:
                    out.append(self._num("404", target, "Cannot send to channel: join it first"))
                continue
            text = p[1]
            action = text.startswith("\x01ACTION ") and text.endswith("\x01")
            if action:
                text = text[8:-1]
            elif text.startswith("\x01"):
                continue                           # other CTCP (VERSION, PING...) is not chat
            text = strip_formatting(text)          # bold, colours...: the chat's text is plain (docs/irc.md)
            if not (action or text.strip()):
                continue
            head, _, rest = text.strip().partition(" ")
            if not action and head.lower() == ACK_PREFIX:     # "!ack [msg_id ...]": acknowledging, not chat
                out += self._acknowledge(rest.split(), room, target)
                continue
            try:
                if action:                         # "/me [SECRET] waves": a label, never a precedence
                    label, text = split_label(text, self.labels.scheme)
                    text, precedence = action_text(self.nick, text), DEFAULT
                else:
                    label, text, precedence = self._label_and_precedence(text)
            except LabelError as e:
                out.append(self._num("404", target, f"Cannot send to channel: {e}"))
                continue
            if label is not None:
                if not text.strip():
                    out.append(self._num("412", "No text to send"))
                    continue
                refusal = self.labels.refusal(label, self._channels[room].label, target)
                if refusal is not None:
                    out.append(self._num("404", target, f"Cannot send to channel: {refusal}"))
                    continue
            self._says_in_flight += 1
            cid = f"irc-{int(now * 1000)}-{next(self._ids)}"
            # The server checks the precedence and the label as any client's (urgent.py): a refusal comes back
            # as 404.
            say: dict[str, Any] = {"type": "say", "room": room, "text": text, "client_id": cid,
                                   "precedence": precedence}
            if label is not None:
                say["label"] = label.to_json()
            if reply_to:                           # IRCv3 +reply: the server checks it as any client's reply_to
                say["reply_to"] = reply_to
            out.append(self._request(command, (target,), say))
        return out

    def _label_and_precedence(self, text: str) -> tuple[Label | None, str, str]:
        """A line's leading label (``[SECRET]``, in a labeled mission; None: the channel's) and precedence
        (``!flash``), in either order: (label, text, precedence); ``LabelError`` for a bracket naming no label."""
        label, text = split_label(text, self.labels.scheme)
        text, precedence = precedence_of(text)
        if label is None and precedence != DEFAULT:
            label, text = split_label(text, self.labels.scheme)
        return label, text, precedence

    def _no_direct_messages(self, target: str) -> Send:
        """The answer to a line for a nick: there are no direct messages, only rooms (531 for a user this site
        knows of, 401 for a nick it does not)."""
        sites = self.presence.sites_of(target)
        how = (f"this suite has rooms, not private messages: write in a channel you share with {target}, or "
               f"create a private room with {target} in the web UI or the TUI (it shows here as an invite-only "
               "channel)")
        if sites:
            return self._num("531", target, f"Cannot send to user: {target} is online at {', '.join(sites)}, but "
                                            + how)
        if any(target in ch.members or target in ch.nicks for ch in self._channels.values()):
            return self._num("531", target, f"Cannot send to user: {target} is not online, and " + how)
        return self._num("401", target, f"No such nick/channel: {target} is not online at any site this site "
                                        "hears from (and " + how + ")")

    def _acknowledge(self, ids: list[str], room: str | None, target: str) -> list[Action]:
        """``acknowledge`` requests for the msg_ids given, or for every urgent line shown (in ``room`` if given)
        that we have not acknowledged; a NOTICE to ``target`` when there is none."""
        if not ids:
            ids = [m for m, r in self._urgent.items() if room is None or r == room]
        if not ids:
            where = f" in {channel_of(room)}" if room is not None else ""
            return [self._notice(target, f"*** nothing to acknowledge{where}: no FLASH or IMMEDIATE line waits "
                                         "for yours")]
        return [self._request("ACK", (target, m), {"type": "acknowledge", "msg_id": m}) for m in ids[:50]]

    def _c_ack(self, p: tuple[str, ...], now: float) -> list[Action]:
        """``ACK [msg_id ...]`` (``/quote ACK A:90``): acknowledge those lines, or every one waiting."""
        ids = " ".join(p).split()
        target = channel_of(self._urgent[ids[0]]) if ids and ids[0] in self._urgent else self.nick
        return self._acknowledge(ids, None, target)

    def _c_tagmsg(self, p: tuple[str, ...], now: float) -> list[Action]:
        return []                                  # tags alone (typing...) are not carried: nothing to say

    def _c_chathistory(self, p: tuple[str, ...], now: float) -> list[Action]:
        try:
            query = parse_chathistory(p)
        except HistoryRequestError as e:
            return [Send(format_line(self.server_name, "FAIL", "CHATHISTORY", e.code, *e.context, e.message))]
        if isinstance(query, tuple):               # TARGETS, or a nick: nothing to list (no direct messages)
            kind, target = query
            return self._batched(self._new_batch(), "draft/chathistory-targets" if kind == "TARGETS"
                                 else "chathistory", (target,) if target else (), [])
        if len(self._queries) >= MAX_HISTORY_QUERIES:
            return [Send(format_line(self.server_name, "FAIL", "CHATHISTORY", "MESSAGE_ERROR", query.sub,
                                     query.target, f"at most {MAX_HISTORY_QUERIES} CHATHISTORY commands at once: "
                                                   "wait for an answer"))]
        request = self._request("CHATHISTORY", (query.sub, query.target), query.first())
        self._queries[str(request.frame["id"])] = query
        return [request]

    def _c_notice(self, p: tuple[str, ...], now: float) -> list[Action]:
        return self._c_privmsg(p, now, "NOTICE")

    def _c_names(self, p: tuple[str, ...], now: float) -> list[Action]:
        if not p:
            return [a for room in sorted(self._channels) for a in self._names(channel_of(room))]
        return [a for ch in targets_of(p[0]) for a in self._names(ch)]

    def _c_who(self, p: tuple[str, ...], now: float) -> list[Action]:
        mask = p[0] if p else "*"
        out: list[Action] = []
        room = room_of(mask)
        ch = self._channels.get(room or "")
        if ch is not None and room is not None:
            sites_of: dict[str, list[str]] = {}
            for site, users in self.presence.sites.items():
                for u in users:
                    sites_of.setdefault(u, []).append(site)
            ch.nicks = self.nick_lists.union(ch.nicks, self._in_room(room))   # as NAMES
            listed = sorted(ch.nicks | {self.nick})
            for u in listed:
                for site in sites_of.get(u, [self.site] if u == self.nick else ["?"]):
                    server = self._server_of(site) if site != "?" else self.server_name
                    out.append(self._num("352", mask, u, site, server, u, "H", f"0 {u}@{site}"))
        return out + [self._num("315", mask, "End of /WHO list")]

    def _c_topic(self, p: tuple[str, ...], now: float) -> list[Action]:
        if (missing := self._need("TOPIC", p, 1)) is not None:
            return missing
        room = room_of(p[0])
        if room is None or room not in self._channels:
            return [self._num("442", p[0], "You're not on that channel")]
        if len(p) > 1:
            return [self._num("482", p[0], "A channel's topic is its label, set when its room was created"
                              if self.labels.enabled else "Rooms have no topic on this server")]
        return [self._topic(p[0])]

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
        sites = self.presence.sites_of(nick)
        if nick == self.nick:
            sites = sorted(set(sites) | {self.site})
        if not sites:
            return [self._num("401", nick, "No such nick: not online at any site this site can see"),
                    self._num("318", nick, "End of /WHOIS list")]
        # The channels we share with the nick (never one the asker is not in: a private room stays unnamed),
        # and its site's chat server, with how this site reaches it: what irssi and weechat print beneath.
        shared = sorted(channel_of(room) for room, ch in self._channels.items()
                        if nick in ch.nicks or nick in self._in_room(room))
        out: list[Action] = [self._num("311", nick, nick, sites[0], "*", f"{nick} at {', '.join(sites)}")]
        if shared:
            out.append(self._num("319", nick, " ".join(shared)))
        for site in sites:
            out.append(self._num("312", nick, self._server_of(site), self._site_words(site)))
        return out + [self._num("318", nick, "End of /WHOIS list")]

