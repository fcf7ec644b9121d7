"""Input lines of both clients: ``/commands`` and chat text (one parser, one help text)."""
from __future__ import annotations

from dataclasses import dataclass

from chat_server.protocol import ROOM_NAME
from contracts.precedence import DEFAULT, PRECEDENCES

from .expiry import DURATION_HELP, parse_duration
from .positions import PositionReport, parse_report
from .safe_text import printable
from .words import ORDER_HELP

_COMMANDS_HELP = """commands:
  /join ROOM       join a room (created if new) and make it the current room
  /leave [ROOM]    leave a room (the current one by default)
  /rooms           list the rooms you can join, with member counts
  /who             who is online, per site
  /history [N]     load N older messages of the current room (default 50), or what a gap misses
  /switch ROOM     make a joined room the current one (also: click it, or Ctrl+N/Ctrl+P)
  /directory       every room you may join, with members and last activity
  /search WORDS    search the site's history ("a phrase", pre*, in:ROOM, by:USER); /search alone closes
  /reply [TEXT]    answer the chosen line (Alt+Up/Down or a click), else the newest line of someone else
  /goto [MSG_ID]   go to a message (default: the line the chosen reply answers)
  /me TEXT         say TEXT as an action: "* you TEXT" (IRC users see it as their /me)
  /flash TEXT      send at FLASH precedence: everyone is alerted until they acknowledge
  /immediate TEXT  send at IMMEDIATE precedence (acknowledged too); /priority TEXT: PRIORITY
  /expire TIME TEXT  send a line that expires after TIME (90, 90s, 15m, 2h, 1d; at most 7 days)
  /label [LABEL]   send at LABEL in this room until you show another (F6: pick one); alone: what you may send
  /create ROOM [LABEL] [USER...]  create a room at LABEL (its floor): public, or private for you and USERs
  /ack [all|ID]    acknowledge the most urgent FLASH/IMMEDIATE alert (F2), or every one, or that one
  /pos LAT LON [UNIT]  report a position in decimal degrees (as UNIT; default: you)
  /positions       the units' newest positions: unit, site, user, lat, lon, age (F5 in the full-screen client)
  /help            this text
  /logout [all]    end your session at the server and leave ('all': your sessions elsewhere too)
  /quit            leave the client (the session stays valid for a reconnection)
anything else is sent to the current room; start with // to send a line beginning with /
"""

HELP = _COMMANDS_HELP + ORDER_HELP

TEXT_COMMANDS = tuple(p for p in PRECEDENCES if p != DEFAULT)     # /flash... send their text at that precedence
COMMANDS = ("join", "leave", "rooms", "who", "history", "switch", "help", "logout", "quit", "directory", "search",
            "reply", "goto", "me", *TEXT_COMMANDS, "ack", "pos", "positions", "expire", "label", "create")
ALIASES = {"dir": "directory"}
DEFAULT_HISTORY = 50


class CommandError(ValueError):
    """A line that is neither valid chat text nor a valid command."""


@dataclass(frozen=True, slots=True)
class Command:
    name: str                 # one of COMMANDS, or "say"
    arg: str | None = None    # room name, text, count, or "all" (logout)
    report: PositionReport | None = None      # /pos: the position, checked
    expires_in: float | None = None            # /expire: seconds, checked
    text: str = ""                             # /create: what follows the room (label and members, labels.py)


def parse_line(line: str) -> Command | None:
    """Parse one input line; None for a blank line; CommandError names the problem."""
    line = line.rstrip("\r\n")
    if not line.strip():
        return None
    if line.startswith("//"):
        return Command("say", line[1:])
    if not line.startswith("/"):
        return Command("say", line)
    word, _, raw = line[1:].partition(" ")
    name, rest = word.lower(), raw.strip()
    name = ALIASES.get(name, name)
    if name not in COMMANDS:
        raise CommandError(f"unknown command /{printable(word)} (try /help)")
    if name in TEXT_COMMANDS:
        if not rest:
            raise CommandError(f"/{name} needs the text to send")
        return Command(name, raw)
    if name == "me":
        if not rest:
            raise CommandError("usage: /me TEXT")
        return Command(name, raw)
    if name == "expire":
        when, _, text = raw.lstrip(" ").partition(" ")
        seconds = parse_duration(when)
        if seconds is None or not text.strip():
            raise CommandError(f"usage: /expire TIME TEXT ({DURATION_HELP})")
        return Command(name, text, expires_in=seconds)
    if name in ("search", "reply", "goto", "label"):
        return Command(name, rest or None)
    if name == "create":
        room, _, more = rest.partition(" ")
        if not room or not ROOM_NAME.match(room):
            raise CommandError("usage: /create ROOM [LABEL] [USER...] (room: letters, digits and _.#:+-, at most 64)")
        return Command(name, room, text=more.strip())
    if name == "ack":
        return Command(name, rest or None)
    if name == "pos":
        try:
            return Command(name, rest, report=parse_report(rest))
        except ValueError as e:
            raise CommandError(str(e)) from None
    if name in ("join", "switch"):
        if not rest:
            raise CommandError(f"/{name} needs a room name")
        if not ROOM_NAME.match(rest):
            raise CommandError(f"bad room name {rest!r}: letters, digits and _.#:+- (at most 64)")
        return Command(name, rest)
    if name == "leave":
        if rest and not ROOM_NAME.match(rest):
            raise CommandError(f"bad room name {rest!r}")
        return Command(name, rest or None)
    if name == "history":
        if not rest:
            return Command(name, str(DEFAULT_HISTORY))
        if not rest.isdigit() or int(rest) <= 0:
            raise CommandError("/history takes a positive number of messages")
        return Command(name, rest)
    if name == "logout":
        if rest not in ("", "all"):
            raise CommandError("/logout takes nothing or 'all'")
        return Command(name, rest or None)
    if rest:
        raise CommandError(f"/{name} takes no argument")
    return Command(name)
