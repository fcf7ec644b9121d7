"""IRC message syntax (RFC 1459 / RFC 2812 framing): parse a client line, format one for it.

Pure functions, no state: one home for the line syntax the IRC front end
(``chat_server/irc.py``, ``irc_commands.py``, ``irc_state.py``) speaks and its
tests build lines with. Also the mapping between chat rooms and channel names (``ops`` is ``#ops``).
"""
from __future__ import annotations

from dataclasses import dataclass

from .protocol import ROOM_NAME

TEXT_CHUNK_BYTES = 380            # a long chat text becomes several PRIVMSGs of at most this many bytes


class IrcSyntaxError(ValueError):
    """A client line that is not an IRC message."""


@dataclass(frozen=True, slots=True)
class Line:
    """One parsed IRC message: optional prefix, command (upper case), parameters."""

    prefix: str
    command: str
    params: tuple[str, ...]


def parse_line(raw: bytes) -> Line:
    """Parse one line (without CR LF); tags (``@...``) are skipped; raise IrcSyntaxError."""
    text = raw.decode("utf-8", "replace").rstrip("\r\n")
    if text.startswith("@"):
        _, _, text = text.partition(" ")
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
    return Line(prefix, command, tuple(params[:15]))


def _clean(s: str) -> str:
    """No CR, LF or NUL inside a parameter (they would end or forge a line)."""
    return s.replace("\r", " ").replace("\n", " ").replace("\x00", "")


def format_line(prefix: str, command: str, *params: str) -> bytes:
    """One IRC line; the last parameter is trailing (``:``) when it needs to be."""
    parts = [f":{prefix}"] if prefix else []
    parts.append(command)
    ps = [_clean(p) for p in params]
    for i, p in enumerate(ps):
        last = i == len(ps) - 1
        if last and (not p or " " in p or p.startswith(":")):
            parts.append(":" + p)
        else:
            parts.append(p.replace(" ", "_") if not last else p)
    return (" ".join(parts)).encode("utf-8") + b"\r\n"


def split_text(text: str, limit: int = TEXT_CHUNK_BYTES) -> list[str]:
    """A chat text as IRC message bodies: one per line, each at most ``limit`` UTF-8 bytes."""
    out: list[str] = []
    for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        line = line.replace("\x00", "")
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


__all__ = ["TEXT_CHUNK_BYTES", "IrcSyntaxError", "Line", "channel_of", "format_line", "parse_line", "room_of",
           "split_text"]
