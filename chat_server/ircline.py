r"""IRC message syntax (RFC 1459 / RFC 2812 framing): parse a client line, format one for it.

Pure functions, no state: one home for the line syntax the IRC front end
(``chat_server/irc.py``, ``irc_commands.py``, ``irc_state.py``) speaks and its
tests build lines with. Also the mapping between chat rooms and channel names (``ops`` is ``#ops``).

Chat texts are plain text (docs/irc.md, "Control characters"). IRC clients obey
characters inside a line: ``\x01`` starts a CTCP request (DCC, VERSION...),
``\x02 \x03 \x0f \x16 \x1d \x1f \x1e ...`` format, ESC and the C1 codes reach
a terminal client's terminal, CR and LF end the line. So nothing of a chat text
reaches an IRC client as a control: ``split_text`` breaks it into lines at its
line breaks and ``visible`` shows every other control as a symbol, and
``format_line`` applies ``visible`` to every parameter again (a line the server
writes never carries a control). The other way, ``strip_formatting`` drops the
formatting codes of an IRC user's line before it becomes a chat text: the other
clients have no formatting to show them as.

IRCv3 message tags (``@time=...;msgid=A:17 :bob!bob@B PRIVMSG ...``) are parsed
into ``Line.tags`` and written by ``format_line(..., tags=...)``, their values
escaped as the message-tags specification says; ``irc_time`` and
``parse_irc_time`` are server-time's timestamps.
"""
from __future__ import annotations

import calendar
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from .protocol import ROOM_NAME

TEXT_CHUNK_BYTES = 380            # a long chat text becomes several PRIVMSGs of at most this many bytes

# C0 controls (CR and LF included, for parameters that are not split into lines), DEL, C1 controls; the
# line and paragraph separators; the bidi marks, embeddings, overrides and isolates (they reorder a line as
# it is drawn), as chat_tui/safe_text.py escapes them for terminals.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
# IRC's formatting codes as clients send them: bold, colour (with its digits), hex colour, reset,
# monospace, reverse, italics, strike-through, underline.
_FORMATTING = re.compile("\x03(?:[0-9]{1,2}(?:,[0-9]{1,2})?)?|\x04(?:[0-9A-Fa-f]{6}(?:,[0-9A-Fa-f]{6})?)?"
                         "|[\x02\x0f\x11\x16\x1d\x1e\x1f]")


def _symbol(m: re.Match[str]) -> str:
    code = ord(m.group())
    if code == 0x09:
        return " "                    # a tab is white space, not a code
    if code < 0x20:
        return chr(0x2400 + code)     # the Unicode control pictures: \x01 is U+2401, ESC is U+241B
    if code == 0x7F:
        return "\u2421"               # DEL's picture
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"   # no pictures: an escape, as in the TUI


def visible(text: str) -> str:
    """``text`` with every control character shown as a symbol an IRC client prints and never obeys."""
    return _CONTROL.sub(_symbol, text)


def strip_formatting(text: str) -> str:
    """An IRC user's line without IRC's formatting codes (bold, colours...): the chat's text is plain."""
    return _FORMATTING.sub("", text)


class IrcSyntaxError(ValueError):
    """A client line that is not an IRC message."""


@dataclass(frozen=True, slots=True)
class Line:
    """One parsed IRC message: optional prefix, command (upper case), parameters, IRCv3 tags."""

    prefix: str
    command: str
    params: tuple[str, ...]
    tags: Mapping[str, str] = field(default_factory=dict)


_ESCAPES = {";": "\\:", " ": "\\s", "\\": "\\\\", "\r": "\\r", "\n": "\\n"}
_UNESCAPES = {":": ";", "s": " ", "\\": "\\", "r": "\r", "n": "\n"}
_TAG_KEY = re.compile(r"\+?(?:[A-Za-z0-9.-]+/)?[A-Za-z0-9-]+")


def escape_tag_value(value: str) -> str:
    """A tag value as the message-tags specification writes it (``;`` as ``\\:``, space as ``\\s``...)."""
    return "".join(_ESCAPES.get(c, c) for c in value)


def unescape_tag_value(value: str) -> str:
    """The value a tag carries: escapes undone, an unknown escape's backslash and a lone final one dropped."""
    out, i = [], 0
    while i < len(value):
        c = value[i]
        if c == "\\":
            if i + 1 < len(value):
                nxt = value[i + 1]
                out.append(_UNESCAPES.get(nxt, nxt))
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def parse_tags(text: str) -> dict[str, str]:
    """The tags of a line's ``@...`` part (without the ``@``): key -> value (``""`` when it has none); the last
    occurrence of a key wins."""
    tags: dict[str, str] = {}
    for item in text.split(";"):
        key, _, value = item.partition("=")
        if key:
            tags[key] = unescape_tag_value(value)
    return tags


def irc_time(t: float) -> str:
    """A Unix time as server-time writes it: ``2025-01-04T14:33:26.123Z`` (UTC, milliseconds)."""
    ms = int(round(t * 1000))
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms // 1000)) + f".{ms % 1000:03d}Z"


_IRC_TIME = re.compile(r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,6}))?Z")


def parse_irc_time(text: str) -> float | None:
    """A server-time timestamp as a Unix time, or None if it is not one."""
    m = _IRC_TIME.fullmatch(text)
    if m is None:
        return None
    try:
        whole = calendar.timegm(time.strptime(text[:19], "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None
    return whole + (int(m.group(7)) / 10 ** len(m.group(7)) if m.group(7) else 0.0)


def parse_line(raw: bytes) -> Line:
    """Parse one line (without CR LF), its IRCv3 tags (``@...``) into ``tags``; raise IrcSyntaxError."""
    text = raw.decode("utf-8", "replace").rstrip("\r\n")
    tags: dict[str, str] = {}
    if text.startswith("@"):
        head, _, text = text.partition(" ")
        tags = parse_tags(head[1:])
    text = text.lstrip(" ")
    prefix = ""
    if text.startswith(":"):
        prefix, _, text = text[1:].partition(" ")
        text = text.lstrip(" ")
    if not text:
        raise IrcSyntaxError("empty line")
    trailing: str | None = None
    if " :" in text:
        text, _, trailing = text.partition(" :")
    words = text.split()
    command, params = words[0].upper(), words[1:]
    if trailing is not None:
        params.append(trailing)
    if not (command.isalpha() or (command.isdigit() and len(command) == 3)):
        raise IrcSyntaxError(f"bad command {command[:20]!r}")
    return Line(prefix, command, tuple(params[:15]), tags)


def _clean(s: str) -> str:
    """No control inside a parameter: CR and LF (they would end or forge a line) become spaces, the rest
    symbols (``visible``)."""
    return visible(s.replace("\r", " ").replace("\n", " "))


def format_tags(tags: Mapping[str, str | None]) -> str:
    """``@key=value;key`` for a line (empty without tags): values escaped, keys that are not tag keys left out,
    no control in a value (``visible``)."""
    items = [k if not v else f"{k}={escape_tag_value(visible(v))}" for k, v in tags.items() if _TAG_KEY.fullmatch(k)]
    return "@" + ";".join(items) + " " if items else ""


def format_line(prefix: str, command: str, *params: str, tags: Mapping[str, str | None] | None = None) -> bytes:
    """One IRC line; the last parameter is trailing (``:``) when it needs to be; ``tags`` lead it (IRCv3)."""
    parts = [f":{prefix}"] if prefix else []
    parts.append(command)
    ps = [_clean(p) for p in params]
    for i, p in enumerate(ps):
        last = i == len(ps) - 1
        if last and (not p or " " in p or p.startswith(":")):
            parts.append(":" + p)
        else:
            parts.append(p.replace(" ", "_") if not last else p)
    head = format_tags(tags) if tags else ""
    return (head + " ".join(parts)).encode("utf-8") + b"\r\n"


def format_action(prefix: str, target: str, text: str, tags: Mapping[str, str | None] | None = None) -> bytes:
    """A CTCP ``ACTION`` line (what ``/me waves`` sends): ``PRIVMSG target :\x01ACTION text\x01``. The text goes
    through ``_clean`` as every parameter does; only the two delimiters this function adds are controls."""
    head = format_tags(tags) if tags else ""
    return f"{head}:{prefix} PRIVMSG {_clean(target)} :\x01ACTION {_clean(text)}\x01".encode() + b"\r\n"


def split_text(text: str, limit: int = TEXT_CHUNK_BYTES) -> list[str]:
    """A chat text as IRC message bodies: one per line, each at most ``limit`` UTF-8 bytes, every other
    control shown as a symbol (``visible``)."""
    out: list[str] = []
    for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        line = visible(line)
        if not line:
            continue
        data = line.encode("utf-8")
        while len(data) > limit:
            cut = limit
            while cut > 0 and (data[cut] & 0xC0) == 0x80:     # never inside a UTF-8 sequence
                cut -= 1
            out.append(data[:cut].decode("utf-8"))
            data = data[cut:]
        out.append(data.decode("utf-8"))
    return out or [""]


def channel_of(room: str) -> str:
    return "#" + room


def room_of(channel: str) -> str | None:
    """The room a channel names, or None if it is not a channel name we serve."""
    if not channel.startswith("#"):
        return None
    room = channel[1:]
    return room if ROOM_NAME.match(room) else None


__all__ = ["TEXT_CHUNK_BYTES", "IrcSyntaxError", "Line", "channel_of", "escape_tag_value", "format_action",
           "format_line", "format_tags", "irc_time", "parse_irc_time", "parse_line", "parse_tags", "room_of",
           "split_text", "strip_formatting", "unescape_tag_value", "visible"]
