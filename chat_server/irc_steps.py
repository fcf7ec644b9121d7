"""Steps: the IRC edge's sessions in step with a room's fan-out, shown its lines as one.

Theory of operation
-------------------
A session *in step* (irc.py ``IrcSession.in_step``) shows a fanned-out line
with no lookup of its own state but for a handful of fields. Asked per
recipient, that question still reads each session's objects, cold in the
cache by the time a fan-out of a thousand comes back to them: about 2 us a
recipient on this machine, most of the IRC edge's cost over the WebSocket
path (docs/performance.md, "Sessions in step, as one"). Sessions in step at
the same line of a room, with the same rendering and the same nick list,
would all answer alike, so a :class:`Step` answers once for them: the first
member to get a line *advances* the step to it (the line follows the step's
line, its author is in the nick list, its bytes as a reader in step sees them
exist), and every other member, when the fan-out hands it the same frame, is
written the step's bytes after one identity test. A held turn's run of
chained lines (irc_fanout.py ``FanRun``) advances a step the same way.

Each member keeps its own place (the edge's ``_step_at``: the line it was
shown last), so a step never shows a member what it did not get: a member
that missed a line (a label it may not read) or was handed frames of its own
(``Sessions.fan_held_to``), or that gets any other frame or sends any command,
leaves its step first, its place handed back to its session
(``IrcSession.return_tail``), and the frame takes the session's own path. A
member that wrote the line a step advances to leaves it (its own lines are
not shown as everyone's). A session that ends a line of its own path in step
joins its room's step for its rendering and nick list (``Steps.join``): the
step at that line, or the step one advance behind it (advanced now), or a new
one. Delivery numbers shown in a step reach the session's ``shown`` marks
when it leaves and before the front end saves them (``Steps.mark_shown``).
Nothing here touches a socket; the edge (irc_server.py ``IrcConnection``)
writes what a step says.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from .irc_fanout import FanLine, FanRun, StepKey

if TYPE_CHECKING:
    from .irc import IrcSession


class Member(Protocol):
    """A step's member: the IRC edge's connection, which owns its place (``_step``, ``_step_at``)."""

    irc: IrcSession

    def left_step(self) -> None:
        """Leave its step (its place handed back to its session)."""

    def step_shown(self) -> None:
        """Its place in its step marked shown in its session (``IrcSession.mark_shown``)."""


@dataclass(frozen=True, slots=True)
class Advance:
    """What a frame, or a held turn's run of frames, shows a session in step: the lines from ``first`` to ``last``
    chained in their room, by ``users``, ``frames`` of them; ``key`` is the frame's bytes or the run's list as
    the fan-out hands it to every session; ``bytes_for`` their bytes for a reader in step with a rendering
    (None while no reader in step has made them)."""

    key: object
    first: FanLine
    last: FanLine
    users: frozenset[str]
    frames: int
    bytes_for: Callable[[StepKey], bytes | None]


def line_advance(data: bytes, line: FanLine) -> Advance:
    """A fanned-out frame's advance: its one line."""
    return Advance(data, line, line, frozenset((line.user,)), 1, line.stepped.get)


def run_advance(datas: list[bytes], run: FanRun) -> Advance | None:
    """A held run's advance, if all of it is one chain of lines (FanRun), else None."""
    n = len(run.lines)
    first = run.lines[0] if n else None
    if first is None or run.ends[0] != n:
        return None
    last = run.lines[-1]
    assert last is not None
    return Advance(datas, first, last, run.users(0), n, lambda key: run.joined(0, key))


class Step:
    """Sessions in step at ``line`` of a room with one rendering and nick list. The step's last advance went
    from ``prev`` to ``line`` (``key``: the frame or run that brought it; ``out``: its bytes, ``outs`` as a
    list, ``frames`` lines): a member at ``prev`` is shown ``out`` and is at ``line``."""

    __slots__ = ("room", "render", "nicks", "line", "prev", "key", "out", "outs", "frames", "members", "by_nick")

    def __init__(self, line: FanLine, nicks: Any, render: StepKey) -> None:
        self.room = line.room
        self.render = render
        self.nicks = nicks
        self.line = line
        self.prev: FanLine | None = None
        self.key: object = None
        self.out = b""
        self.outs: list[bytes] = []
        self.frames = 0
        self.members: dict[Member, str] = {}             # member -> its nick
        self.by_nick: dict[str, set[Member]] = {}

    def shows(self, adv: Advance) -> bool:
        """``adv`` is the step's last advance (the same lines, whatever list brought them): its members at
        ``prev`` are shown ``out`` for it. The step then takes ``adv``'s key, the one the next members are
        likely to be handed."""
        if adv.last is self.line and adv.first.prev is self.prev and self.prev is not None:
            self.key = adv.key
            return True
        return False


class Steps:
    """A front end's steps: the one its sessions join per room, rendering and nick list, and every step with
    members (their shown marks)."""

    def __init__(self) -> None:
        self._open: dict[tuple[str, StepKey, int], Step] = {}   # (room, rendering, id(nick list)) -> its step
        self._live: set[Step] = set()

    def __len__(self) -> int:
        return len(self._live)

    def join(self, member: Member, adv: Advance) -> Step | None:
        """After ``member``'s session showed a fan-out's line (or run, ``adv``) on its own: the step it is now in,
        at the session's tail (``IrcSession.lend_tail``), or None if the session is not in step. It joins its
        room's step for its rendering and nick list if that step is at the same line, or one advance behind
        it (``adv`` advances it), else a new step."""
        lent = member.irc.lend_tail()
        if lent is None:
            return None
        line, nicks, render = lent
        key = (line.room, render, id(nicks))
        st = self._open.get(key)
        behind = st is not None and st.line is not line
        if st is None or behind and not (adv.last is line and self.advance(st, adv)):
            st = Step(line, nicks, render)
        st.members[member] = nick = member.irc.nick
        st.by_nick.setdefault(nick, set()).add(member)
        self._open[key] = st
        self._live.add(st)
        return st

    def advance(self, st: Step, adv: Advance) -> bool:
        """Advance ``st`` to ``adv``'s lines if they follow its line, their authors are in its nick list and
        their bytes for its rendering exist; the members who wrote one of them leave it. False: unchanged."""
        if adv.first.prev is not st.line or not adv.users <= st.nicks:
            return False
        out = adv.bytes_for(st.render)
        if out is None:
            return False
        for user in adv.users:
            for m in list(st.by_nick.get(user, ())):
                m.left_step()
        st.prev, st.line, st.key, st.out, st.outs, st.frames = st.line, adv.last, adv.key, out, [out], adv.frames
        return True

    def leave(self, member: Member, st: Step, at: FanLine) -> None:
        """``member`` (at ``at``) leaves ``st``: its session in step at ``at`` again (``IrcSession.return_tail``)."""
        nick = st.members.pop(member, None)
        if nick is not None:
            ms = st.by_nick.get(nick)
            if ms is not None:
                ms.discard(member)
                if not ms:
                    del st.by_nick[nick]
        member.irc.return_tail(at, st.nicks, st.render)
        if not st.members:
            self._live.discard(st)
            key = (st.room, st.render, id(st.nicks))
            if self._open.get(key) is st:
                del self._open[key]

    def members(self) -> list[Any]:
        """Every member of every live step (the front end marks their places before it saves the marks)."""
        return [m for st in self._live for m in st.members]

    def mark_shown(self) -> None:
        """Every member's place marked shown in its session (before the front end saves the marks)."""
        for m in self.members():
            m.step_shown()
