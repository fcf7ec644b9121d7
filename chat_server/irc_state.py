"""The IRC front end's per-connection state: what an IRC session returns, what it keeps, how it replies.

``IrcState`` holds one client connection's state (nick, registration, the
negotiated IRCv3 capabilities, the joined channels and who is in them, open
requests, our own says awaiting their delivery, what was shown of each room,
presence, the mission's labels and the user's clearance) and the reply helpers
both directions build lines with: numerics, server notices, chat requests,
``NAMES`` and the topic. The actions a session returns
(:class:`Send`, :class:`Request`, :class:`Close`) are defined here. Log-in is
``irc_login.py``, the client's other commands ``irc_commands.py``; the
session, which also translates the chat server's frames, is ``irc.py`` (its
docstring is the theory of operation). Sans-IO like them: no socket, no clock.
"""
from __future__ import annotations

import contextlib
import functools
import itertools
import weakref
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from contracts.labels import Label

from .front_end_labels import LabelView
from .irc_history import HistoryQuery
from .irc_messages import PLAIN, Quotes, Style
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
        self._snapshot: dict[str, Iterable[str]] | None = None
        self._anywhere: frozenset[str] | None = None     # computed once per change, not once per session
        # What the last presence frame changes in each room's channel, and its JOIN/PART lines: the same for
        # every session, so worked out once per frame and room (a login storm's frame names hundreds of users,
        # and there are thousands of sessions: per session, it was the members' set and a line per user).
        self._frame: Mapping[str, Any] | None = None
        self._changes: dict[tuple[str, str], tuple[tuple[str, ...], bytes]] = {}

    def reset(self, snapshot: Mapping[str, Iterable[str]]) -> None:
        """A welcome's snapshot: the table as the server has it now. The server makes a site's list once per
        change (``ChatServer.presence_snapshot``): the same lists as the last snapshot's change nothing."""
        last = self._snapshot
        if last is not None and last.keys() == snapshot.keys() and all(snapshot[s] is last[s] for s in last):
            return
        self._snapshot = dict(snapshot)
        self.sites = {str(site): set(users) for site, users in snapshot.items()}
        self._anywhere = None

    def apply(self, f: Mapping[str, Any]) -> None:
        """A ``presence`` frame: its site's users who came online and went offline."""
        if f is self._last:
            return
        self._last = f
        users = self.sites.setdefault(str(f.get("site", "")), set())
        users.update(u for u in f.get("online") or () if isinstance(u, str))
        users.difference_update(f.get("offline") or ())
        self._anywhere = None

    def anywhere(self) -> frozenset[str]:
        """Everyone online at some site."""
        if self._anywhere is None:
            self._anywhere = frozenset().union(*self.sites.values())
        return self._anywhere

    def change(self, f: Mapping[str, Any], room: str, came: bool, members_of: Callable[[str], Collection[str]],
               channel: str) -> tuple[tuple[str, ...], bytes]:
        """Who a presence frame brings into (``came``: members of public ``room`` among its ``online``) or takes
        out of (its ``offline`` online at no site now) a room's channel, and their ``JOIN`` or ``PART`` lines,
        in the frame's order: once per frame, room and direction, for every session of the front end.
        ``members_of``: the site's room members (``IrcState.members_of``), asked only by the first session to
        see the frame's change in a room (and only when ``came``)."""
        if f is not self._frame:
            self._frame, self._changes = f, {}
        key = (room, "+" if came else "-")
        hit = self._changes.get(key)
        if hit is None:
            site = str(f.get("site", ""))
            if came:
                listed = members_of(room)
                users = tuple(u for u in f.get("online") or () if isinstance(u, str) and u in listed)
                lines = b"".join(format_line(f"{u}!{u}@{site}", "JOIN", channel) for u in users)
            else:
                online = self.anywhere()
                users = tuple(u for u in f.get("offline") or () if isinstance(u, str) and u not in online)
                lines = b"".join(format_line(f"{u}!{u}@{site}", "PART", channel, "offline") for u in users)
            hit = self._changes[key] = (users, lines)
        return hit

    def sites_of(self, user: str) -> list[str]:
        """The sites where ``user`` is online, sorted."""
        return sorted(s for s, users in self.sites.items() if user in users)


_Ref = weakref.ref[frozenset[str]]


class NickLists:
    """The nick lists of a front end's channels (``Channel.nicks``), shared between its sessions.

    What a session told its client is in a channel is its own (its ``JOIN`` and ``PART`` lines follow it),
    but the sessions in a room almost always hold the same list: a fan-out hands each of them the same
    frames in the same order. So a list is an immutable frozenset, and a change to it is made once: every
    session that held the same list gets the same new one (a copy each cost ~33 KB per 1,000 nicks, per
    session). Equal lists made apart (two sessions listing a room at different times, as in a login storm)
    are one object too: every list some session holds is found by its contents (``one``). Both tables refer
    to the lists weakly, so a list lives exactly as long as a session holds it: they kept the last 64 of each
    alive, which at 5,000 nicks was ~30 MB, and shared no list beyond the 64th of a storm's tick. ``keep``
    bounds the changes remembered; a miss only costs making the change again."""

    def __init__(self, keep: int = 256) -> None:
        self._keep = keep
        self._changes: OrderedDict[tuple[int, str, object], tuple[_Ref, _Ref]] = OrderedDict()
        self._lists: dict[int, list[_Ref]] = {}        # hash -> the lists held with that hash

    def one(self, nicks: frozenset[str]) -> frozenset[str]:
        """The list equal to ``nicks`` that a session holds already, else ``nicks`` (as one to share)."""
        h = hash(nicks)
        refs = self._lists.get(h)
        for ref in refs or ():
            held = ref()
            if held is not None and held == nicks:
                return held
        self._lists.setdefault(h, []).append(weakref.ref(nicks, functools.partial(self._forget, h)))
        return nicks

    def _forget(self, h: int, ref: _Ref) -> None:
        refs = self._lists.get(h)
        if refs is not None:
            with contextlib.suppress(ValueError):
                refs.remove(ref)
            if not refs:
                del self._lists[h]

    def _change(self, old: frozenset[str], op: str, arg: object, make: Callable[[], frozenset[str]]
                ) -> frozenset[str]:
        key = (id(old), op, arg)
        hit = self._changes.get(key)
        if hit is not None and hit[0]() is old:        # (a dead list's id may be reused: its entry says None)
            known = hit[1]()
            if known is not None:
                return known
        made = make()
        new = old if made == old else self.one(made)
        if old:                                        # (not the empty list every channel starts with)
            self._changes[key] = (weakref.ref(old), weakref.ref(new))
            self._changes.move_to_end(key)
            while len(self._changes) > self._keep:
                self._changes.popitem(last=False)
        return new

    def add(self, old: frozenset[str], nick: str) -> frozenset[str]:
        return old if nick in old else self._change(old, "+", nick, lambda: old | {nick})

    def discard(self, old: frozenset[str], nick: str) -> frozenset[str]:
        return old if nick not in old else self._change(old, "-", nick, lambda: old - {nick})

    def union(self, old: frozenset[str], more: Collection[str]) -> frozenset[str]:
        more = frozenset(more)
        return old if more <= old else self._change(old, "|", more, lambda: old | more)

    def difference(self, old: frozenset[str], fewer: Collection[str]) -> frozenset[str]:
        fewer = frozenset(fewer)
        return old if old.isdisjoint(fewer) else self._change(old, "-", fewer, lambda: old - fewer)


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
    definition), the nicks the client was told are in it (``NAMES``, then ``JOIN``/``PART`` lines), and its
    label (the floor of its lines; None in an unlabeled mission)."""

    private: bool = False
    members: tuple[str, ...] = ()
    nicks: frozenset[str] = frozenset()                # changed through NickLists (shared by the sessions)
    label: Label | None = None


@dataclass
class IrcState:
    """The IRC side of one client connection: its state and reply helpers (``irc.IrcSession`` is the session)."""

    server_name: str                   # e.g. "A.irc.<mission>"
    site: str
    network: str                       # the mission's name (ISUPPORT NETWORK)
    rate_frames: float = 50.0          # client lines per second, sustained
    rate_burst: int = 200              # lines in a burst; beyond: Excess Flood
    max_channels: int = 200            # the site's max_rooms_per_user (ISUPPORT CHANLIMIT): a JOIN asks no more
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
    nick_lists: NickLists = field(default_factory=NickLists)  # shared by a front end's sessions
    _bucket: TokenBucket | None = None
    _wall: float | None = None          # the wall clock as the line being handled came (``receive``): TIME
    _site_status: dict[str, tuple[str, str | None]] = field(default_factory=dict)   # site -> (status, via): LINKS
    _chat_down: set[str] = field(default_factory=set)     # sites RCM reaches whose chat server is gone: LINKS
    _early: list[bytes] = field(default_factory=list)      # lines that came while the password was being checked
    _behind: list[bytes] = field(default_factory=list)     # lines that came while a JOIN or PART was answered
    # The site's room members (every site's, as known here): who is in a public channel. The one question the
    # session asks of the site (irc_server.py passes the rooms' state); the rest comes as chat frames.
    members_of: Callable[[str], Collection[str]] = lambda room: ()
    quotes: Quotes = field(default_factory=Quotes)           # shared by a front end's sessions: reply marks
    shown: dict[str, int] = field(default_factory=dict)      # room -> highest delivery number n shown (rejoin)
    caps: set[str] = field(default_factory=set)              # negotiated IRCv3 capabilities (``_negotiated``)
    _cap_open: bool = False                                  # CAP negotiation holds registration until CAP END
    _cap_302: bool = False
    _sasl: str | None = None                                 # an AUTHENTICATE exchange under way: its data so far
    _sasl_done: bool = False
    _held_welcome: dict[str, Any] | None = None              # logged in by SASL: the welcome waits for CAP END
    _urgent: dict[str, str] = field(default_factory=dict)    # msg_id -> room: urgent lines shown, not acked by us
    _above: dict[str, float] = field(default_factory=dict)   # room -> sent_at of the last line shown (ORDER mark)
    _queries: dict[str, HistoryQuery] = field(default_factory=dict)   # request id -> CHATHISTORY under way
    # In step with a fan-out (irc.py ``in_step``): the last line shown, if it was shown as every reader in step
    # shows it and nothing was done since (what showing it notes may wait: ``_settle``), and its channel's nicks.
    _tail: Any = None
    _tail_nicks: Any = None
    _tail_render: Any = None       # (style, clearance): the tail's key in ``FanLine.stepped`` (irc_fanout.py)
    # The mission's labels (front_end_labels.py; irc_server.py passes them) and, from the welcome, the clearance.
    labels: LabelView = field(default_factory=LabelView)

    # How this connection wants messages written (irc_messages.py): ``Style.of(caps)``, kept with ``caps``. An
    # attribute, not a property: a fan-out reads it once per recipient (irc.py ``_show``'s rendering key).
    style: Style = field(init=False, default=PLAIN)

    def __post_init__(self) -> None:
        self.style = Style.of(self.caps)

    def _negotiated(self, asked: Iterable[str]) -> None:
        """``CAP REQ``'s capabilities (``-name`` drops one): ``caps`` and the ``style`` they make change together."""
        for a in asked:
            if a.startswith("-"):
                self.caps.discard(a[1:])
            else:
                self.caps.add(a)
        self.style = Style.of(self.caps)

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

    def _topic(self, channel: str) -> Send:
        """The channel's topic reply: in a labeled mission its label (``332 #ops :[SECRET] ...``), else ``331``."""
        ch = self._channels.get(room_of(channel) or "")
        if ch is None or ch.label is None:
            return self._num("331", channel, "No topic is set")
        return self._num("332", channel, self._topic_text(ch.label))

    @staticmethod
    def _topic_text(label: Label) -> str:
        return f"[{label}] the label of this channel: its lines carry it or a higher one; start a line with " \
               "[LABEL] to send it at another"

    def _online_anywhere(self) -> frozenset[str]:
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
            ch.nicks = self.nick_lists.union(ch.nicks, self._in_room(room))   # and those seen speaking
            names = sorted(ch.nicks | {self.nick})
            kind = "@" if ch.private else "="
            for i in range(0, len(names), 30):
                out.append(self._num("353", kind, channel, " ".join(names[i:i + 30])))
        out.append(self._num("366", channel, "End of /NAMES list"))
        return out
