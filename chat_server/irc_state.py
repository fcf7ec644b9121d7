"""The IRC front end's per-connection state: what an IRC session returns, what it keeps, how it replies.

``IrcState`` holds one client connection's state (nick, registration, the
joined channels, open requests, our own says awaiting their delivery,
presence) and the reply helpers both directions build lines with: numerics,
server notices, chat requests and ``NAMES``. The actions a session returns
(:class:`Send`, :class:`Request`, :class:`Close`) are defined here. The
client commands are ``irc_commands.py``; the session, which also translates
the chat server's frames, is ``irc.py`` (its docstring is the theory of
operation). Sans-IO like them: no socket, no clock.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from .ircline import format_line, room_of
from .limits import TokenBucket


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
    """A joined room as the session shows it: private (invite-only) or not, and its members."""

    private: bool = False
    members: tuple[str, ...] = ()


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
    _online: dict[str, dict[str, int]] = field(default_factory=dict)   # site -> user -> 1 (presence)
    _bucket: TokenBucket | None = None
    _early: list[bytes] = field(default_factory=list)      # lines that came while the password was being checked

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
