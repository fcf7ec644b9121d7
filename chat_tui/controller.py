"""What an input line does, for both front ends: state changes now, requests to the link."""
from __future__ import annotations

import time
from typing import Callable, Protocol

from .commands import HELP, Command, CommandError, parse_line
from .safe_text import printable
from .state import ChatState, Change


class Requests(Protocol):
    """The part of ``ChatLink`` the controller uses."""

    def request(self, frame: dict) -> None: ...

    def say(self, room: str, text: str) -> str: ...


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
        return getattr(self, f"_do_{cmd.name}")(cmd)

    def _do_say(self, cmd: Command) -> list[Change]:
        room = self.state.active
        if room is None:
            return self.state.notice("no current room: /join ROOM first", "error")
        assert cmd.arg is not None
        cid = self.link.say(room, cmd.arg)
        return self.state.echo(room, cmd.arg, cid, self.clock())

    def _do_join(self, cmd: Command) -> list[Change]:
        assert cmd.arg is not None
        self.link.request({"type": "join", "room": cmd.arg})
        self.state.room(cmd.arg)
        return self.state.set_active(cmd.arg)

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
            lines.append(f"  {printable(site)} ({printable(st.sites.get(site, 'unknown'))}): {users}")
        return st.notice("\n".join(lines))

    def _do_history(self, cmd: Command) -> list[Change]:
        room = self.state.active
        if room is None:
            return self.state.notice("no current room: /join ROOM first", "error")
        frame: dict = {"type": "history", "room": room, "limit": int(cmd.arg or 50)}
        oldest = self.state.oldest_msg_id(room)
        if oldest is not None:
            frame["before"] = oldest
        self.link.request(frame)
        return []

    def _do_help(self, cmd: Command) -> list[Change]:
        return self.state.notice(HELP)

    def _do_logout(self, cmd: Command) -> list[Change]:
        raise Logout(everywhere=cmd.arg == "all")

    def _do_quit(self, cmd: Command) -> list[Change]:
        raise Quit()
