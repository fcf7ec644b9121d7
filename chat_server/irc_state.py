"""The IRC front end's per-connection state: what an IRC session returns, what it keeps, how it replies.

``IrcState`` holds one client connection's state (nick, registration, the
negotiated IRCv3 capabilities, the joined channels and who is in them, open
requests, our own says awaiting their delivery, what was shown of each room,
presence) and the reply helpers both directions build lines with: numerics,
server notices, chat requests and ``NAMES``. The actions a session returns
(:class:`Send`, :class:`Request`, :class:`Close`) are defined here. Log-in is
``irc_login.py``, the client's other commands ``irc_commands.py``; the
session, which also translates the chat server's frames, is ``irc.py`` (its
docstring is the theory of operation). Sans-IO like them: no socket, no clock.
"""
from __future__ import annotations

import itertools
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .irc_history import HistoryQuery
from .irc_messages import Quotes, Style
from .ircline import format_line, room_of
from .limits import TokenBucket

CAPABILITIES = ("batch", "draft/chathistory", "echo-message", "message-tags", "sasl", "server-time")
"""The IRCv3 capabilities offered (``CAP LS``; ``sasl=PLAIN`` to a ``CAP LS 302`` client)."""


class Presence:
    """Who is online at each site, as the chat server told its IRC sessions (the welcome's snapshot, then
    ``presence`` frames). One table for all the sessions of a front end: it is the same for each of them,
    and a copy per session cost ~26 KB per 1,000 users online, per session. A fan-out hands every session
    the same parsed frame, so a frame is applied once, by the first session that reads it."""

    def __init__(self) -> None:
        self.sites: dict[str, set[str]] = {}
        self._last: Mapping[str, Any] | None = None

    def reset(self, snapshot: Mapping[str, Iterable[str]]) -> None:
        """A welcome's snapshot: the table as the server has it now."""
        self.sites = {str(site): set(users) for site, users in snapshot.items()}

    def apply(self, f: Mapping[str, Any]) -> None:
        """A ``presence`` frame: its site's users who came online and went offline."""
        if f is self._last:
            return
        self._last = f
        users = self.sites.setdefault(str(f.get("site", "")), set())
        users.update(u for u in f.get("online") or () if isinstance(u, str))
        users.difference_update(f.get("offline") or ())

    def anywhere(self) -> set[str]:
        """Everyone online at some site."""
        return set().union(*self.sites.values())

    def sites_of(self, user: str) -> list[str]:
        """The sites where ``user`` is online, sorted."""
        return sorted(s for s, users in self.sites.items() if user in users)


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
class Channel:
    """A joined room as the session shows it: private (invite-only) or not, its members (a private room's
    definition), and the nicks the client was told are in it (``NAMES``, then ``JOIN``/``PART`` lines)."""

    private: bool = False
    members: tuple[str, ...] = ()
    nicks: set[str] = field(default_factory=set)


@dataclass
class IrcState:
    """The IRC side of one client connection: its state and reply helpers (``irc.IrcSession`` is the session)."""

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
    _channels: dict[str, Channel] = field(default_factory=dict)                      # joined rooms
    _own: dict[str, None] = field(default_factory=dict)        # msg_ids of our acked says (delivery suppressed)
    _held: list[dict[str, Any]] = field(default_factory=list)  # our deliveries that came before their ack
    _says_in_flight: int = 0
    presence: Presence = field(default_factory=Presence)      # shared by a front end's sessions
    _bucket: TokenBucket | None = None
    _early: list[bytes] = field(default_factory=list)      # lines that came while the password was being checked
    # The site's room members (every site's, as known here): who is in a public channel. The one question the
    # session asks of the site (irc_server.py passes the rooms' state); the rest comes as chat frames.
    members_of: Callable[[str], Collection[str]] = lambda room: ()
    quotes: Quotes = field(default_factory=Quotes)           # shared by a front end's sessions: reply marks
    shown: dict[str, int] = field(default_factory=dict)      # room -> highest delivery number n shown (rejoin)
    caps: set[str] = field(default_factory=set)              # negotiated IRCv3 capabilities
    _cap_open: bool = False                                  # CAP negotiation holds registration until CAP END
    _cap_302: bool = False
    _sasl: str | None = None                                 # an AUTHENTICATE exchange under way: its data so far
    _sasl_done: bool = False
    _held_welcome: dict[str, Any] | None = None              # logged in by SASL: the welcome waits for CAP END
    _urgent: dict[str, str] = field(default_factory=dict)    # msg_id -> room: urgent lines shown, not acked by us
    _above: dict[str, float] = field(default_factory=dict)   # room -> sent_at of the last line shown (ORDER mark)
    _queries: dict[str, HistoryQuery] = field(default_factory=dict)   # request id -> CHATHISTORY under way

    @property
    def style(self) -> Style:
        """How this connection wants messages written (irc_messages.py)."""
        return Style(tags="message-tags" in self.caps, time="server-time" in self.caps)

    # --- reply helpers --------------------------------------------------------------------------
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

    def _new_batch(self) -> str | None:
        """A fresh batch reference when the client negotiated ``batch`` (its lines carry it), else None."""
        return f"b{next(self._ids)}" if "batch" in self.caps else None

    def _batched(self, ref: str | None, kind: str, params: tuple[str, ...], lines: list[bytes]) -> list[Action]:
        """``lines`` between ``BATCH +ref kind params`` and ``BATCH -ref`` (an empty batch too); without a
        batch, the lines alone."""
        if ref is None:
            return [Send(b"".join(lines))] if lines else []
        return [Send(format_line(self.server_name, "BATCH", f"+{ref}", kind, *params) + b"".join(lines)
                     + format_line(self.server_name, "BATCH", f"-{ref}"))]

    def _online_anywhere(self) -> set[str]:
        return self.presence.anywhere()

    def _in_room(self, room: str) -> set[str]:
        """Who is in a room's channel now: its members online at some site this site hears from, and us."""
        ch = self._channels.get(room)
        members = set(ch.members) if ch is not None and ch.private else set(self.members_of(room))
        return (members & self._online_anywhere()) | {self.nick}

    def _names(self, channel: str) -> list[Action]:
        room = room_of(channel)
        ch = self._channels.get(room or "")
        out: list[Action] = []
        if ch is not None and room is not None:
            ch.nicks |= self._in_room(room)            # and those seen speaking, until they go offline
            names = sorted(ch.nicks | {self.nick})
            kind = "@" if ch.private else "="
            for i in range(0, len(names), 30):
                out.append(self._num("353", kind, channel, " ".join(names[i:i + 30])))
        out.append(self._num("366", channel, "End of /NAMES list"))
        return out
