"""Hostile IRC input, one generator per kind: what a client of the IRC front end can send in one write.

The IRC front end (chat_server/irc*.py, docs/irc.md) reads a TCP stream cut into lines at LF, at most
``MAX_TAG_BYTES`` of tags and ``MAX_INPUT_BYTES`` of the rest (longer: 417, skipped to its end). Each input
here is the bytes of one write of a hostile client: most often one line, now and then a few (registration
pipelines them), always ending at an LF so that the next input starts a line. Every command the front end
implements and some it does not, each parameter a good value, one at and around its limits (the line's
bytes, the tags', a CHATHISTORY limit, a SASL chunk, the number of comma-separated targets), numbers at
``draws.BOUNDS``, invalid UTF-8, NUL, lone CR, CTCP and formatting codes, and the IRCv3 tags clients send
(``+reply``, ``msgid``, ``time``), escaped well or badly.

Kinds: ``irc/register`` runs on a connection of its own that has not registered (CAP, AUTHENTICATE, PASS,
NICK, USER in any order and shape), ended after the input (as is an ``irc/line`` that the client closes inside
an over-long line); the others on the hostile user's registered connection, in its
channels: ``irc/cap``, ``irc/message`` (PRIVMSG, NOTICE, TAGMSG, ``!ack``, ``!flash``, CTCP ACTION),
``irc/channel`` (JOIN, PART, NAMES, WHO, TOPIC, LIST, MODE), ``irc/chathistory``, ``irc/user`` (WHOIS,
ISON, USERHOST, AWAY, MOTD, PING, PONG, ACK, the registration commands again, QUIT) and ``irc/line``
(the line itself: its length, its bytes, its tags, unknown and numeric commands).
"""
from __future__ import annotations

import base64
import time
from collections.abc import Callable
from dataclasses import dataclass

from chat_server.irc_commands import MAX_INPUT_BYTES, MAX_TAG_BYTES
from chat_server.irc_history import CHATHISTORY_MAX, SUBCOMMANDS
from chat_server.irc_login import SASL_CHUNK, SASL_MAX_BYTES
from chat_server.irc_state import CAPABILITIES

from .chat_requests import ROOMS, USERS, WORDS, ChatHint, ChatInputs
from .draws import BOUNDS

CTCP = ("\x01ACTION waves\x01", "\x01ACTION \x01", "\x01VERSION\x01", "\x01PING 123\x01", "\x01DCC SEND x 0 0 0\x01",
        "\x01ACTION", "\x01", "\x01\x01", "\x01ACTION " + "x" * 500 + "\x01")
FORMATTING = ("\x02", "\x03", "\x0304,12", "\x03999", "\x04ff00ff", "\x04zz", "\x0f", "\x11", "\x16", "\x1d", "\x1e",
              "\x1f", "\x1b[31m", "\x07", "\u202e", "\x00")
COMMANDS = ("PRIVMSG", "NOTICE", "TAGMSG", "JOIN", "PART", "NAMES", "WHO", "TOPIC", "LIST", "MODE", "CHATHISTORY",
            "WHOIS", "ISON", "USERHOST", "AWAY", "MOTD", "PING", "PONG", "ACK", "CAP", "AUTHENTICATE", "PASS",
            "NICK", "USER", "QUIT")
"""Every command the front end implements."""


@dataclass(frozen=True, slots=True)
class IrcLine:
    """One write of the hostile IRC client (one line or a few, ending at an LF); ``fresh``: on a connection of
    its own that has not registered, which the client closes after the write."""

    data: bytes
    fresh: bool = False


class IrcInputs(ChatInputs):
    """Draws hostile IRC lines of one kind at a time (see the module docstring)."""

    # -- values ---------------------------------------------------------------------------------
    def irc_num(self) -> str:
        """A number as a parameter: small, at a bound, huge, signed, not quite a number."""
        r = self.rng.random()
        if r < 0.6:
            return str(self.rng.choice(BOUNDS + (CHATHISTORY_MAX, CHATHISTORY_MAX + 1, 50, 51, 302, 301)))
        return self.rng.choice(("", "-0", "+5", "0x10", "1e3", "٣", " 7", "7 ", "9" * 5000, "1" * 4300, "NaN",
                                "inf", "1_000", "\x00"))

    def channel(self, h: ChatHint) -> str:
        """A channel: one of the hostile user's, another room's, a bad name, or something that is not one."""
        rng = self.rng
        r = rng.random()
        if r < 0.5 and h.rooms:
            return "#" + rng.choice(h.rooms)
        if r < 0.7:
            return "#" + rng.choice(ROOMS + ("ops",))
        return rng.choice(("#", "##", "#" + "a" * 64, "#" + "a" * 65, "&r0", "r0", "#r0,", "#\u00e9", "#r0\x00",
                           "#r\x01", "0", "*", "#*", ",", "#" + "x" * 3000, h.user, "alice", "nobody", "-"))

    def targets(self, h: ChatHint, one: Callable[[ChatHint], str]) -> str:
        """One target, a few, or as many comma-separated ones as fit in a line."""
        rng = self.rng
        r = rng.random()
        if r < 0.6:
            return one(h)
        if r < 0.8:
            return ",".join(one(h) for _ in range(rng.randrange(2, 8)))
        if r < 0.88:                    # as many different channels as fit, new rooms or the user's
            return ",".join(f"#{rng.choice(('d', 'r'))}{i}" for i in range(MAX_INPUT_BYTES // 6))[:MAX_INPUT_BYTES - 40]
        single = rng.choice(("#r0", "#a", "#" + rng.choice(h.rooms or ROOMS), "x", ""))
        return ",".join([single] * rng.choice((50, 500, MAX_INPUT_BYTES // (len(single) + 1))))

    def nick(self, h: ChatHint) -> str:
        return self.rng.choice((h.user, h.user, "alice", "bob", "*", "", "a" * 32, "a" * 33, "9lives", "-x",
                                "u\u00e9", "x\x00y", "#r0", "a b", ":x", "A:1") + USERS)

    def words(self, limit: int = 400) -> str:
        """A text: words, or at and past what one line holds, or full of codes and odd characters."""
        rng = self.rng
        r = rng.random()
        if r < 0.45:
            return self.sentence()
        if r < 0.55:
            return "x" * rng.choice((limit, MAX_INPUT_BYTES - 30, MAX_INPUT_BYTES))
        if r < 0.7:
            return "".join(rng.choice(FORMATTING) + rng.choice(WORDS) for _ in range(rng.randrange(1, 60)))
        if r < 0.8:
            return rng.choice(CTCP)
        if r < 0.9:
            return "".join(chr(rng.choice((0x202E, 0x1F4A3, 0x0301, 0x4E2D, 0x7, 0x1B, 0xFEFF, 0x10FFFF, 0x85)))
                           for _ in range(rng.choice((1, 50, 1000))))
        return rng.choice(("", " ", ":", "::", "\t", "!ack", "!ack " + " ".join(["A:1"] * 300), "!flash", "!flash x",
                           "!immediate   ", "[SECRET] x", "[", "]", "[] x", "!PRIORITY [x] y"))

    def tags(self, h: ChatHint) -> str:
        """IRCv3 message tags (``@...``, with its space) or none; at and past ``MAX_TAG_BYTES`` now and then."""
        rng = self.rng
        r = rng.random()
        if r < 0.6:
            return ""
        if r < 0.8:
            items = [rng.choice(("+reply=" + rng.choice(h.msg_ids or ("C:1",)), "+draft/reply=C:1", "msgid=A:1",
                                 "time=2026-11-18T00:00:00.000Z", "+typing=active", "label=x", "batch=1", "+",
                                 "=x", ";", "+reply=\\", "+reply=a\\sb\\:c\\\\", "+reply=" + "9" * 400,
                                 "+reply", "a/b/c=d", "+x=\ud7ff", "\x00=1"))
                     for _ in range(rng.randrange(1, 6))]
            return "@" + ";".join(items) + " "
        size = rng.choice((MAX_TAG_BYTES - 2, MAX_TAG_BYTES - 1, MAX_TAG_BYTES, MAX_TAG_BYTES + 1))
        if rng.random() < 0.5:
            return "@+reply=" + "x" * (size - 9) + " "
        return "@" + ";".join(f"+k{i}=v" for i in range(size // 7))[:size - 2] + " "

    def line(self, h: ChatHint, command: str, *params: str, trailing: str | None = None) -> bytes:
        """One line: tags now and then, the command in any case, the parameters, the trailing one, an ending."""
        rng = self.rng
        cmd = command if rng.random() < 0.8 else rng.choice((command.lower(), command.title(), " " + command))
        parts = [cmd, *params]
        if trailing is not None:
            parts.append(":" + trailing if rng.random() < 0.85 else trailing)
        if rng.random() < 0.05:
            parts.insert(0, rng.choice((":mallory!mallory@A", ":alice", ":", ":x" * 100)))
        text = self.tags(h) + " ".join(parts)
        ending = rng.choice(("\r\n",) * 8 + ("\n", "\r\r\n", " \r\n", "\r\x00\n"))
        return text.encode("utf-8", "surrogatepass") + ending.encode()

    # -- kinds ----------------------------------------------------------------------------------
    def register(self, h: ChatHint) -> IrcLine:
        """A registration on a connection of its own: CAP, SASL, PASS, NICK and USER, shuffled and bent."""
        rng = self.rng
        nick = self.nick(h) if rng.random() < 0.4 else h.user
        password = rng.choice((h.password, h.password, "wrong", "", " ", "x" * 600, "a:b", "\x00"))
        lines: list[bytes] = []
        if rng.random() < 0.5:
            lines.append(self.line(h, "CAP", "LS", rng.choice(("302", "301", "", "9" * 40, "x"))))
            lines.append(self.line(h, "CAP", "REQ", trailing=self.cap_list()))
        if rng.random() < 0.3:
            lines += self.sasl(h, nick, password)
        if rng.random() < 0.8:
            lines.append(self.line(h, "PASS", trailing=password) if rng.random() < 0.8 else self.line(h, "PASS"))
        lines.append(self.line(h, "NICK", nick))
        lines.append(self.line(h, "USER", *rng.choice(((nick, "0", "*"), (nick,), (), ("a" * 500, "0", "*"))),
                               trailing=rng.choice(("real name", "", "x" * 300))))
        if rng.random() < 0.5:
            lines.append(self.line(h, "CAP", "END"))
        if rng.random() < 0.2:
            rng.shuffle(lines)
        if rng.random() < 0.3:          # pipelined past registration (kept until the log-in is checked)
            lines += [self.line(h, "JOIN", self.channel(h)) for _ in range(rng.choice((1, 5, 40)))]
        return IrcLine(b"".join(lines), fresh=True)

    def cap_list(self) -> str:
        rng = self.rng
        r = rng.random()
        if r < 0.5:
            return " ".join(rng.sample(CAPABILITIES, rng.randrange(1, len(CAPABILITIES) + 1)))
        if r < 0.7:
            return " ".join(("-" if rng.random() < 0.3 else "") + rng.choice(CAPABILITIES) for _ in range(20))
        if r < 0.85:
            return " ".join(rng.choice(CAPABILITIES) for _ in range(MAX_INPUT_BYTES // 8))
        return rng.choice(("", " ", "unknown", "sasl=PLAIN", "-", "--sasl", "batch\x00", "a" * 4000,
                           "echo-message " * 300))

    def sasl(self, h: ChatHint, nick: str, password: str) -> list[bytes]:
        rng = self.rng
        plain = base64.b64encode(f"{rng.choice(('', nick, 'alice'))}\0{nick}\0{password}".encode()).decode()
        out = [self.line(h, "AUTHENTICATE", rng.choice(("PLAIN", "plain", "EXTERNAL", "*", "+")))]
        r = rng.random()
        if r < 0.5:
            out.append(self.line(h, "AUTHENTICATE", plain))
        elif r < 0.7:           # in chunks of SASL_CHUNK, up to past SASL_MAX_BYTES
            chunk = "A" * SASL_CHUNK
            out += [self.line(h, "AUTHENTICATE", chunk) for _ in range(SASL_MAX_BYTES // SASL_CHUNK + 2)]
        else:
            out.append(self.line(h, "AUTHENTICATE", rng.choice(("====", "AAAA" * 300, "+", "*", "\x00", "A" * 401,
                                                                base64.b64encode(b"\0\0\0\0").decode(),
                                                                base64.b64encode(b"\xff\xfe").decode()))))
        return out

    def cap(self, h: ChatHint) -> IrcLine:
        rng = self.rng
        sub = rng.choice(("LS", "REQ", "LIST", "END", "ls", "req", "NAK", "ACK", "NEW", "DEL", "", "x" * 100))
        if sub.upper() == "REQ":
            return IrcLine(self.line(h, "CAP", sub, trailing=self.cap_list()))
        return IrcLine(self.line(h, "CAP", sub, *((self.irc_num(),) if rng.random() < 0.5 else ())))

    def message(self, h: ChatHint) -> IrcLine:
        rng = self.rng
        command = rng.choice(("PRIVMSG", "PRIVMSG", "NOTICE", "TAGMSG"))
        r = rng.random()
        if r < 0.1:
            return IrcLine(self.line(h, command))
        target = self.targets(h, self.channel if rng.random() < 0.85 else self.nick)
        if command == "TAGMSG" or r < 0.15:
            return IrcLine(self.line(h, command, target))
        return IrcLine(self.line(h, command, target, trailing=self.words()))

    def channels(self, h: ChatHint) -> IrcLine:
        rng = self.rng
        command = rng.choice(("JOIN", "JOIN", "PART", "NAMES", "WHO", "TOPIC", "LIST", "MODE"))
        if rng.random() < 0.08:
            return IrcLine(self.line(h, command))
        params: list[str] = [self.targets(h, self.channel) if command != "JOIN" or rng.random() < 0.9 else "0"]
        if command == "JOIN" and rng.random() < 0.2:
            params.append(",".join("key" for _ in range(rng.choice((1, 5, 500)))))
        if command == "MODE" and rng.random() < 0.7:
            params += rng.sample(("+b", "b", "+e", "-I", "+i", "+o mallory", "+k x", "+l " + self.irc_num(), "+",
                                  "-" * 50), rng.randrange(1, 4))
        if command == "WHO" and rng.random() < 0.3:
            params = [rng.choice(("*", "0", "o", "#*", "*!*@*", "#" + (rng.choice(h.rooms or ROOMS))))]
        trailing = self.words() if command in ("TOPIC", "PART") and rng.random() < 0.5 else None
        return IrcLine(self.line(h, command, *params, trailing=trailing))

    def chathistory(self, h: ChatHint) -> IrcLine:
        rng = self.rng
        sub = rng.choice(SUBCOMMANDS + SUBCOMMANDS + ("TARGETS", "BETWEEN", "latest", "x", ""))
        target = self.channel(h) if rng.random() < 0.9 else self.nick(h)
        r = rng.random()
        if r < 0.3:
            selector = "msgid=" + (rng.choice(h.msg_ids) if h.msg_ids and rng.random() < 0.6 else
                                   rng.choice(("A:1", "C:0", "C:-1", "C:" + "9" * 30, "x", "", ":", "C:1:2",
                                               "C:" + str(2**63), "\x00")))
        elif r < 0.65:
            selector = "timestamp=" + self.irc_time(h)
        elif r < 0.8:
            selector = "*"
        else:
            selector = rng.choice(("", "msgid", "timestamp", "msgid=", "timestamp=", "x=y", "=", "**"))
        limit = str(rng.choice((1, 10, CHATHISTORY_MAX, CHATHISTORY_MAX // 2))) if rng.random() < 0.6 \
            else self.irc_num()
        params = [sub, target, selector, limit][:rng.choice((4, 4, 4, 1, 2, 3, 5))]
        if len(params) == 5:
            params.append("extra")
        return IrcLine(self.line(h, "CHATHISTORY", *params))

    def irc_time(self, h: ChatHint) -> str:
        """A server-time timestamp: near now, far, at the format's edges, or not one."""
        rng = self.rng
        r = rng.random()
        if r < 0.5:
            t = h.now + rng.uniform(-3600 * 24 * 30, 3600)
            return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{rng.randrange(1000):03d}Z"
        return rng.choice(("0000-01-01T00:00:00Z", "0001-01-01T00:00:00.000Z", "9999-12-31T23:59:59.999999Z",
                           "1970-01-01T00:00:00Z", "2026-02-30T00:00:00Z", "2026-13-01T00:00:00Z",
                           "2026-11-18T24:00:00Z", "2026-11-18T23:59:60Z", "2026-11-18T00:00:00", "2026-11-18",
                           "2026-11-18T00:00:00.0000000Z", "2026-11-18T00:00:00+01:00", "now", "", "1e18",
                           "2026-11-18T00:00:00.Z", "\u0662026-11-18T00:00:00Z"))

    def user(self, h: ChatHint) -> IrcLine:
        rng = self.rng
        command = rng.choice(("WHOIS", "ISON", "USERHOST", "AWAY", "MOTD", "PING", "PONG", "ACK", "PASS", "NICK",
                              "USER", "AUTHENTICATE", "CAP", "QUIT"))
        if command == "QUIT" and rng.random() < 0.7:
            command = "PING"                    # (a QUIT ends the connection: the probe opens a new one)
        many = rng.choice((1, 3, 30, 1000))
        params: tuple[str, ...] = ()
        if command in ("WHOIS", "ISON", "USERHOST"):
            params = tuple(self.nick(h) for _ in range(many))
        elif command == "ACK":
            params = tuple(rng.choice(h.msg_ids or ("C:1",)) if rng.random() < 0.5 else
                           rng.choice(("A:1", "x", "C:" + "9" * 30, "")) for _ in range(many))
        elif command in ("PING", "PONG", "PASS", "NICK", "AUTHENTICATE", "AWAY"):
            params = tuple(self.words(60).split(" ")[:3]) if rng.random() < 0.7 else ()
        elif command == "USER":
            params = (h.user, "0", "*", "x")
        elif command == "CAP":
            params = ("END",)
        line = self.line(h, command, *params)
        if len(line) > MAX_INPUT_BYTES and rng.random() < 0.5:
            line = line[:MAX_INPUT_BYTES - 2] + b"\r\n"
        return IrcLine(line)

    def raw(self, h: ChatHint) -> IrcLine:
        """The line itself: lengths at and past the limits, bytes that are not UTF-8, NUL, lone CR, odd commands."""
        rng = self.rng
        r = rng.random()
        body = f"PRIVMSG #{rng.choice(h.rooms or ROOMS)} :"
        if r < 0.25:
            n = rng.choice((510, 512, 513, MAX_INPUT_BYTES - 1, MAX_INPUT_BYTES, MAX_INPUT_BYTES + 1, 8191, 8192,
                            MAX_INPUT_BYTES + MAX_TAG_BYTES + 1, MAX_INPUT_BYTES + MAX_TAG_BYTES + 3, 65536, 200_000))
            tags = self.tags(h)
            data = (tags + body).encode() + b"y" * max(0, n - len(body) - len(tags))
            if rng.random() < 0.2:          # on a connection of its own, closed before the line ends
                return IrcLine(data, fresh=True)
            return IrcLine(data + b"\r\n")
        if r < 0.4:
            junk = rng.choice((b"\xff\xfe", b"\xc3", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xc0\xaf", b"\x80" * 50,
                               b"\x00", b"\x00" * 500))
            return IrcLine(body.encode() + junk + b" " + rng.choice(WORDS).encode() + b"\r\n")
        if r < 0.5:
            return IrcLine(body.encode() + rng.choice((b"a\rb", b"\r", b"\r" * 300, b"a\r\rb", b"\x00\r")) + b"\r\n")
        if r < 0.7:
            cmd = rng.choice(("FOO", "privmsg", "001", "999", "1", "0000", "PRIVMSG\x00", "\x01", "É", "X" * 5000,
                              "OPER", "KILL", "SQUIT", "CONNECT", "KICK", "INVITE", "KNOCK", "SETNAME", "MONITOR",
                              "BATCH", "REDACT", "MARKREAD", "WEBIRC", "STARTTLS", "DIE", "__init__", "_c_ping",
                              "RECEIVE"))
            return IrcLine(self.line(h, cmd, *(self.channel(h) for _ in range(rng.randrange(0, 20))),
                                     trailing=self.words() if rng.random() < 0.5 else None))
        if r < 0.8:
            return IrcLine(rng.choice((b"\r\n", b"\n", b" \r\n", b":\r\n", b"@\r\n", b"@ \r\n", b"@a=b\r\n",
                                       b":prefix\r\n", b": \r\n", b"   PING x\r\n", b"@;;; PING x\r\n",
                                       b"PING " + b" ".join([b"a"] * 2000) + b"\r\n", b"PING :\r\n")))
        if r < 0.9:
            params = [rng.choice(("a", ":b", "", "#r0")) for _ in range(rng.choice((15, 16, 100, 1000)))]
            return IrcLine(self.line(h, rng.choice(COMMANDS), *params))
        return IrcLine(b"".join(self.line(h, "PING", str(i)) for i in range(rng.choice((2, 10, 60)))))


KINDS: dict[str, Callable[[IrcInputs, ChatHint], IrcLine]] = {
    "irc/register": IrcInputs.register, "irc/cap": IrcInputs.cap, "irc/message": IrcInputs.message,
    "irc/channel": IrcInputs.channels, "irc/chathistory": IrcInputs.chathistory, "irc/user": IrcInputs.user,
    "irc/line": IrcInputs.raw,
}
"""The IRC front end's hostile inputs, by kind."""
