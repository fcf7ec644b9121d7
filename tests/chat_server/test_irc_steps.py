"""The IRC edge's steps (irc_steps.py): sessions in step at a room's line are shown the next lines as one, and each
is written exactly what its own session would have written, line for line, across everything that takes a
session out of step: its own lines, unlisted speakers, ORDER marks, urgent lines, labeled lines some may not
read, held turns (runs, and a session that takes the held frames ahead of the others), commands, frames sent
to it alone, presence, a closed connection; its delivery marks and line above end the same too."""
from __future__ import annotations

import asyncio
import random
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from testkit import Kept

import chat_server.irc_fanout as irc_fanout
import chat_server.irc_server as irc_server
import chat_server.irc_steps as irc_steps
import chat_server.sessions as sessions_module
from chat_server.config import ChatSettings
from chat_server.irc import IrcSession
from chat_server.irc_marks import ShownMarks
from chat_server.irc_messages import Quotes
from chat_server.irc_server import IrcConnection
from chat_server.irc_state import NickLists, Presence
from chat_server.sessions import Sessions
from chat_server.tasks import Tasks
from contracts.labels import UNLABELED

pytestmark = pytest.mark.timeout(60)

ROOM = "ops"
CLIENTS = [("alice", ""), ("carol", ""), ("carol", ""), ("dave", "message-tags server-time"),
           ("erin", "server-time"), ("gwen", ""), ("hank", "message-tags server-time"), ("ivan", ""),
           ("bob", "")] + [(f"u{i}", "") for i in range(12)]
MEMBERS = {nick for nick, _ in CLIENTS}


class Conn(IrcConnection):
    """An IRC connection whose place in the server's sets is its number (the order a fan-out visits them)."""

    order = 0

    def __hash__(self) -> int:
        return self.order


async def _run(steps: bool, seed: int, monkeypatch, tmp: Path) -> tuple[list[bytes], list[dict], list[dict], int, int]:
    """A scripted stretch of a busy channel through the edge: what each connection was written, its marks and
    line above at the end, how many lines sessions were asked on their own (``in_step``, ``in_step_run``) in
    the last calm stretch, and the most steps at once."""
    for module, name, value in ((irc_fanout, "_fanned", {}), (irc_fanout, "_room_last", {}),
                                (irc_server, "_readings", {})):
        monkeypatch.setattr(module, name, value)
    monkeypatch.setattr(irc_server, "_last_run", (None, [], irc_fanout.FanRun([])))
    asked: set[tuple[int, Any]] = set()         # (session, line) asked on its own, in step or not
    def asking(real: Any) -> Any:
        def ask(self: IrcSession, *args: Any) -> Any:
            asked.add((id(self), args[0] if len(args) == 1 else args[0].lines[args[1]]))
            return real(self, *args)
        return ask
    for name in ("in_step", "in_step_run"):
        monkeypatch.setattr(IrcSession, name, asking(getattr(IrcSession, name)))
    if not steps:
        monkeypatch.setattr(irc_steps.Steps, "join", lambda self, member, adv: None)
    monkeypatch.setattr(sessions_module.time, "perf_counter", lambda: 0.0)    # turns are never stretched
    now = [2000.0]
    sessions = Sessions(ChatSettings(), lambda: now[0], Tasks())
    server = SimpleNamespace(sessions=sessions, site="A", mission=SimpleNamespace(name="t", labels=UNLABELED),
                             settings=sessions.settings, clock=lambda: now[0], monotonic=lambda: now[0],
                             core=SimpleNamespace(rooms=SimpleNamespace(members_of=lambda room: MEMBERS)))
    front = SimpleNamespace(started_at=0.0, quotes=Quotes(), presence=Presence(), nick_lists=NickLists(),
                            shown=ShownMarks(tmp / "shown.json"), steps=irc_steps.Steps())
    order = list(range(len(CLIENTS)))
    random.Random(seed).shuffle(order)
    conns: list[Conn] = []
    for i, (nick, caps) in enumerate(CLIENTS):
        c = Conn(server, front, Kept(), f"10.0.0.{i}")   # type: ignore[arg-type]
        c.order = order[i]
        if caps:
            c.irc.receive(b"CAP LS 302", 0.0, 0.0)
            c.irc.receive(f"CAP REQ :{caps}".encode(), 0.0, 0.0)
        for line in (b"PASS x", f"NICK {nick}".encode(), f"USER {nick} 0 * :u".encode(), b"CAP END"):
            c.irc.receive(line, 0.0, 0.0)
        c.user = nick
        sessions.connections.add(c)
        c.send({"type": "welcome", "site": "A", "user": nick, "sites": {"A": "connected"}, "rooms": [],
                "presence": {"A": sorted(MEMBERS)}})
        c.send({"type": "joined", "room": ROOM, "history": []})
        sessions.register(c, [ROOM])
        conns.append(c)
    most = [0]

    async def turn() -> None:
        """Until the turn has ended: every frame fanned out and written (``Sessions._flush``)."""
        await asyncio.sleep(0)
        while sessions._turn_end_due or sessions._held:
            await asyncio.sleep(0)
        most[0] = max(most[0], len(front.steps))

    def line(n: int, user: str = "bob", sent: float | None = None, **more: Any) -> dict[str, Any]:
        f = {"type": "message", "room": ROOM, "origin": "B", "user": user, "msg_id": f"B:{n}", "n": n,
             "text": f"line {n}", "precedence": "routine", "sent_at": 1000.0 + n if sent is None else sent, **more}
        if sent == -1:
            del f["sent_at"]
        return f

    async def say(*frames: dict[str, Any] | tuple[dict[str, Any], Any], held: bool = False,
                  readable: Any = None) -> None:
        """Frames fanned out one per turn, or held in one turn; a (frame, readable) pair: a labeled line."""
        if held:
            sessions.hold_turn()
        for f in frames:
            now[0] += 0.25
            if isinstance(f, tuple):
                sessions.to_room(ROOM, *f)
            else:
                sessions.to_room(ROOM, f, readable)
            if not held:
                await turn()
        await turn()

    n = 0

    def nxt(**more: Any) -> dict[str, Any]:
        nonlocal n
        n += 1
        return line(n, **more)
    for _ in range(5):
        await say(nxt())
    await say(nxt(user="zed"))                                  # a speaker no nick list had: JOIN, then the line
    await say(nxt(), nxt(sent=1002.0), nxt())                   # an ORDER mark
    # alice and ivan part and come back: their nick list (the room's members) lacks zed, the others' has him;
    # when zed speaks again, only they are shown his JOIN first.
    for c in (conns[0], conns[7]):
        c.receive(b"PART #ops")
        sessions.left(str(c.user), ROOM)
        c.send({"type": "left", "room": ROOM, "id": c.requests._items.pop()["id"]})
    await say(nxt())
    for c in (conns[0], conns[7]):
        c.receive(b"JOIN #ops")
        sessions.joined(str(c.user), ROOM)
        c.send({"type": "joined", "room": ROOM, "id": c.requests._items.pop()["id"], "history": []})
    await say(nxt(), nxt(), nxt(user="zed"), nxt())
    await say(*[nxt() for _ in range(6)], held=True)            # a held run, one chain
    await say(nxt(user="alice"))                                # alice's own line: out of step, then back
    await say(nxt(), nxt(user="carol"), nxt(), held=True)       # carol's (two sessions) inside a held run
    await say(nxt(), nxt(), readable=lambda u: u not in {"dave", "erin", "u3"})   # a label some may not read
    await say(nxt(), nxt())
    await say(nxt(), nxt(), nxt(), held=True, readable=lambda u: u != "gwen")
    await say(nxt(), nxt())
    await say(nxt(user="u4", late=True, origin="A"), nxt(), nxt(user="u6", late=True, origin="A"))  # own: not late
    await say(nxt(), nxt(user="u5", late=True, origin="A"), nxt(), held=True)
    # A labeled line some may not read, then a line older than it (but not than the line before): an ORDER mark
    # for those who read the labeled line only (a reader that missed a line is never shown as one that did).
    hidden = lambda u: u not in {"carol", "u2", "u7"}     # noqa: E731
    await say((nxt(sent=1900.0), hidden), nxt(sent=1850.0), nxt(sent=1870.0))
    await say((nxt(sent=1950.0), hidden), nxt(sent=1930.0), nxt(sent=1960.0), held=True)
    await say((nxt(sent=1980.0), hidden))
    await say(nxt(sent=1975.0), nxt(sent=1990.0), held=True)
    conns[5].receive(b"NAMES #ops")                             # a command between lines
    await say(nxt(), nxt(precedence="flash"), nxt())            # urgent: noted by each session for !ack
    conns[6].send({"type": "site_status", "site": "B", "status": "connected"})     # a frame to one session
    await say(nxt(), nxt())
    sessions.hold_turn()                                        # lines held, then one session takes them ahead
    for f in (nxt(), nxt()):
        now[0] += 0.25
        sessions.to_room(ROOM, f)
    conns[7].send({"type": "site_status", "site": "B", "status": "suspect"})
    await turn()
    await say(nxt(), nxt(sent=-1), nxt(), nxt())                # a line without a time
    sessions.broadcast({"type": "presence", "site": "B", "online": ["frank"], "offline": []})
    await turn()
    await say(nxt(user="frank"), nxt(reply_to="B:3"), nxt(late=True))
    conns[10].close(1000, "bye")                                # a member that goes away: its marks kept
    gone = dict(conns[10].irc.shown)                            # at once (a client reconnecting reads them)
    await turn()
    asked.clear()                                               # the calm stretch after: who asks on its own
    for k in range(4):
        await say(*[nxt() for _ in range(5)], held=k % 2 == 0)
    front.steps.mark_shown()
    marks = [dict(c.irc.shown) for c in conns] + [gone]
    for c in conns:
        c.left_step()
        c.irc._settle()
    return ([c.transport.data for c in conns], marks, [dict(c.irc._above) for c in conns],  # type: ignore
            len(asked), most[0])


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_sessions_in_a_step_are_written_what_their_own_sessions_would_write(seed, monkeypatch, tmp_path) -> None:
    """The same stretch with steps and without (each session asked ``in_step`` on its own), the connections
    visited in a different order per seed: every connection's bytes, marks and line above are the same, and
    the steps answered for most of the sessions."""
    with monkeypatch.context() as m:
        want, want_marks, want_above, asked_alone, _ = await _run(False, seed, m, tmp_path)
    with monkeypatch.context() as m:
        got, marks, above, asked, most = await _run(True, seed, m, tmp_path)
    assert len(want[0]) > 3000
    for i, (g, w) in enumerate(zip(got, want)):
        assert g == w, (i, CLIENTS[i], g.decode(errors="replace")[-600:], w.decode(errors="replace")[-600:])
    assert marks == want_marks and above == want_above
    assert marks[1][ROOM] == 82 and marks[10][ROOM] < 82          # (the closed one stopped where it went)
    # Three renderings, bob the author of most lines: in the calm stretch (20 lines) the steps answer for
    # every session but bob and one per rendering (the first to get a line makes its bytes).
    assert 1 <= most <= 6 and asked <= 4 * 20 and asked * 2 < asked_alone, (asked, asked_alone, most)
