"""What an input line does, for both front ends: state changes now, requests to the link.

``submit`` returns changes; the ``Request`` changes among them are for the front end to hand to the link,
exactly once (``send_requests``): nothing here sends them itself, so a ``/search`` or an ``/ack`` goes out once.
(Chat lines and the requests that need no reply handling go straight to the link.)"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

from contracts.labels import LabelError
from contracts.precedence import DEFAULT
from contracts.text import action_text

from .commands import HELP, Command, CommandError, parse_line
from .labels import split_create
from .safe_text import printable
from .state import Change, ChatState, PositionsListed, Request


class Requests(Protocol):
    """The part of ``ChatLink`` the controller uses."""

    def request(self, frame: dict[str, Any]) -> None: ...

    def say(self, room: str, text: str, *, precedence: str = DEFAULT, reply_to: str | None = None,
            expires_in: float | None = None, label: dict[str, Any] | None = None) -> str: ...


class Quit(Exception):
    """The operator asked to leave."""


class Logout(Quit):
    """The operator asked to end the session at the server, then leave (the front end awaits ``link.logout``)."""

    def __init__(self, everywhere: bool = False) -> None:
        super().__init__()
        self.everywhere = everywhere


class Controller:
    """Runs input lines against the chat state and the link."""

    def __init__(self, state: ChatState, link: Requests, clock: Callable[[], float] = time.time) -> None:
        self.state = state
        self.link = link
        self.clock = clock

    def submit(self, line: str) -> list[Change]:
        """Run one input line; returns what to show. Raises Quit for /quit, Logout for /logout."""
        try:
            cmd = parse_line(line)
        except CommandError as e:
            return self.state.notice(str(e), "error")
        if cmd is None:
            return []
        changes: list[Change] = getattr(self, f"_do_{cmd.name}")(cmd)
        return changes

    def send_requests(self, changes: list[Change]) -> list[Change]:
        """Hand the ``Request`` changes to the link; return the changes."""
        for c in changes:
            if isinstance(c, Request):
                self.link.request(c.frame)
        return changes

    def _do_say(self, cmd: Command, precedence: str = DEFAULT, reply_to: str | None = None) -> list[Change]:
        """Send a line to the current room (``cmd.expires_in``: it expires after that many seconds)."""
        room = self.state.active
        if room is None:
            return self.state.notice("no current room: /join ROOM first", "error")
        if not self.state.room(room).joined and room not in self.state.joining:   # (joining: goes after the join)
            return self.state.notice(f"join {room} to write here: /join {room}", "error")
        assert cmd.arg is not None
        extra: dict[str, Any] = {"expires_in": cmd.expires_in} if cmd.expires_in is not None else {}
        label = self.state.label_to_send(self.state.rooms.get(room))
        if label is not None:
            if label.rank < 0 or self.state.clearance is None or not self.state.clearance.dominates(label):
                return self.state.notice(f"cannot send in {room} at {label}: your clearance is "
                                         f"{self.state.clearance}", "error")
            extra["label"] = label.to_json()
        cid = self.link.say(room, cmd.arg, precedence=precedence, reply_to=reply_to, **extra)
        self.state.selected = None
        return self.state.echo(room, cmd.arg, cid, self.clock(), precedence=precedence, reply_to=reply_to,
                               label=label)

    def _do_flash(self, cmd: Command) -> list[Change]:
        return self._do_say(cmd, cmd.name)

    _do_immediate = _do_priority = _do_flash

    def _do_expire(self, cmd: Command) -> list[Change]:
        return self._do_say(cmd)

    def _do_me(self, cmd: Command) -> list[Change]:
        """``/me TEXT``: the line said as an IRC user's ``/me`` is, ``* user TEXT`` (IRC clients show an action)."""
        return self._do_say(Command("say", action_text(self.state.user, cmd.arg or "")))

    def _do_reply(self, cmd: Command) -> list[Change]:
        """``/reply [MSG_ID] [TEXT]``: answer a line; without TEXT, choose it (the next line typed answers it)."""
        text = cmd.arg or ""
        first, _, rest = text.partition(" ")
        target = self.state.by_msg_id.get(first)
        if target is not None and target.room == self.state.active:
            text = rest.strip()
        else:
            target = self.state.reply_target()
        if target is None or not target.msg_id:
            return self.state.notice("nothing to reply to in this room yet", "error")
        if not text:
            self.state.selected = target.msg_id
            return self.state.notice(f"replying to {printable(target.user)}@{printable(target.origin)}: "
                                     f"{printable(target.text[:80])} (type /reply TEXT)")
        return self._do_say(Command("say", text), reply_to=target.msg_id)

    def _do_goto(self, cmd: Command) -> list[Change]:
        st = self.state
        if cmd.arg:
            target = st.by_msg_id.get(cmd.arg)
            room = target.room if target is not None else st.active
            if room is None:
                return st.notice("no current room", "error")
            return st.jump(room, cmd.arg)
        chosen = st.by_msg_id.get(st.selected or "")
        if chosen is None or not chosen.reply_to:
            return st.notice("choose a reply first (Alt+Up/Down), or /goto MSG_ID", "error")
        return st.jump(chosen.room, chosen.reply_to)

    def _do_search(self, cmd: Command) -> list[Change]:
        if not cmd.arg:
            return self.state.close_search()
        return self.state.start_search(cmd.arg)

    def _do_directory(self, cmd: Command) -> list[Change]:
        return self.state.request_directory()

    def _do_ack(self, cmd: Command) -> list[Change]:
        if cmd.arg == "all":
            return self.state.acknowledge(everything=True)
        chosen = self.state.by_msg_id.get(self.state.selected or "")
        msg_id = cmd.arg or (chosen.msg_id if chosen is not None and chosen.msg_id in self.state.alerts else None)
        return self.state.acknowledge(msg_id)

    def _do_label(self, cmd: Command) -> list[Change]:
        """``/label LABEL``: send at it in this room; ``/label``: the clearance, the floor, what may be sent."""
        st = self.state
        if cmd.arg:
            changes, why = st.choose_label(cmd.arg)
            return changes if why is None else st.notice(f"/label: {why}", "error")
        if st.scheme is None or st.clearance is None:
            return st.notice("this mission has no security labels")
        lines = [f"your clearance: {st.clearance}"]
        room = st.rooms.get(st.active or "")
        if room is not None and room.label is not None:
            choices = st.choices(room)
            lines.append(f"{room.name}: floor {room.label}; sending at {st.label_to_send(room)}")
            lines.append("you may send: " + " · ".join(str(x) for x in choices) if choices else "you may not send here")
        return st.notice("\n".join(printable(x) for x in lines))

    def _do_create(self, cmd: Command) -> list[Change]:
        """``/create ROOM [LABEL] [USER...]``: public without users, private with them (DESIGN.md)."""
        st = self.state
        assert cmd.arg is not None
        try:
            label, members = split_create(st.scheme, cmd.text)
        except LabelError as e:
            return st.notice(f"cannot create {cmd.arg}: {e}", "error")
        if label is not None and st.clearance is not None and not st.clearance.dominates(label):
            return st.notice(f"cannot create {cmd.arg} at {label}: your clearance is {st.clearance}", "error")
        frame: dict[str, Any] = {"type": "create", "room": cmd.arg}
        if label is not None:
            frame["label"] = label.to_json()
        if members:
            frame["members"] = members
        self.link.request(frame)
        return []

    def _do_join(self, cmd: Command) -> list[Change]:
        assert cmd.arg is not None
        return self.state.start_join(cmd.arg)

    def _do_switch(self, cmd: Command) -> list[Change]:
        if cmd.arg not in self.state.rooms:
            return self.state.notice(f"not in room {cmd.arg}: /join it first", "error")
        return self.state.set_active(cmd.arg)

    def _do_leave(self, cmd: Command) -> list[Change]:
        room = cmd.arg or self.state.active
        if room is None:
            return self.state.notice("no current room to leave", "error")
        self.link.request({"type": "leave", "room": room})
        out: list[Change] = []
        if room == self.state.active:
            others = [r for r in self.state.joined_rooms() if r != room]
            out += self.state.set_active(others[0] if others else None)
        return out

    def _do_rooms(self, cmd: Command) -> list[Change]:
        self.link.request({"type": "rooms"})
        return []

    def _do_who(self, cmd: Command) -> list[Change]:
        st = self.state
        if not st.presence and not st.sites:
            return st.notice("nobody known yet (not connected)")
        lines = ["online:"]
        for site in sorted(set(st.presence) | set(st.sites)):
            users = ", ".join(printable(u) for u in sorted(st.presence.get(site, ()))) or "nobody"
            lines.append(f"  {printable(site)} ({printable(st.site_words(site))}): {users}")
        return st.notice("\n".join(lines))

    def _do_history(self, cmd: Command) -> list[Change]:
        room = self.state.active
        if room is None:
            return self.state.notice("no current room: /join ROOM first", "error")
        if self.state.gaps(room):                   # what is missing in the middle first
            return self.state.fill_gap(room)
        frame: dict[str, Any] = {"type": "history", "room": room, "limit": int(cmd.arg or 50)}
        oldest = self.state.oldest_msg_id(room)
        if oldest is not None:
            frame["before"] = oldest
        frame["purpose"] = {"kind": "older", "room": room, "before": oldest}
        self.link.request(frame)
        return []

    def _do_pos(self, cmd: Command) -> list[Change]:
        assert cmd.report is not None
        return self.state.report_position(cmd.report, self.clock())

    def _do_positions(self, cmd: Command) -> list[Change]:
        return [PositionsListed(self.clock())]

    def _do_help(self, cmd: Command) -> list[Change]:
        return self.state.notice(HELP)

    def _do_logout(self, cmd: Command) -> list[Change]:
        raise Logout(everywhere=cmd.arg == "all")

    def _do_quit(self, cmd: Command) -> list[Change]:
        raise Quit()
