"""Client connections of a chat server: their bounded outbound queues, and who is logged in where.

Theory of operation
-------------------
A ``Session`` is one client connection (WebSocket, or IRC through
irc_server.py). Frames for it are encoded once (``ws_text_frame``) and
written to its transport; the transport's write buffer is the client's
bounded outbound queue: a client whose queue exceeds ``outbound_queue_bytes``
is disconnected with a reason and never slows down anyone else. A session's
first frame in a turn of the event loop is handed to the transport at once;
any more frames it is given in the same turn are queued and go out together
in one write at the turn's end (``Sessions.flush_soon``), so a session costs
at most two system calls per turn however many lines a turn brings; and one
when the turn is known to bring more than one (``hold_turn``: the chat
server found more RCM deliveries waiting, as it does when it falls behind).
A server that is behind also stretches its next turn: the turn lasts as long
as the last turn's end took to write (at most 0.1 s), so that one write per
session carries every line that arrives meanwhile; it stays stretched while
each stretch gathers one and a half lines or more a session on average,
and goes back to a line at once when it does not. A server that keeps up never
stretches, whatever the room's size (at 5,000 WebSocket clients the lines
reach them as fast as ngircd's reach its own: docs/performance.md,
"Coalescing while behind"). (Until
2026-11-27 every frame waited for the turn's end: a fan-out to 1,000 sessions
first queued 1,000 frames, ~1 ms, before the first byte left; docs/
performance.md, "The write path".) The call is most of a busy server's time;
writing around the transport (one ``os.write`` while its buffer is empty) was
measured and saved nothing beyond the noise, so the transport does it.

``Sessions`` knows every open connection, the logged-in sessions of each user
and of each room, and fans frames out: a frame for a room is encoded once and
the same bytes are written to each member's session.
"""
from __future__ import annotations

import asyncio
import logging
import struct
import time
from collections.abc import Callable, Iterable
from typing import Any

from aiohttp import web

from . import protocol as P
from .config import ChatSettings
from .limits import TokenBucket
from .tasks import Tasks

log = logging.getLogger("chat_server")

STRETCH_MAX = 0.1          # s: the longest a turn is stretched while the server is behind (``Sessions._flush``)
GATHERED = 1.5             # frames per session a stretched turn gathers (on average) for the next to stretch too


def ws_text_frame(text: str) -> bytes:
    """An unmasked, uncompressed WebSocket text frame (server to client)."""
    # ``text`` is JSON from protocol.encode (ensure_ascii=False). A lone surrogate can only sit inside a
    # JSON string (a client's unknown frame type or id echoed in an error, say), and UTF-8 cannot carry
    # it: backslashreplace writes it as the JSON escape \udXXX, which is the same string, in ASCII.
    data = text.encode("utf-8", "backslashreplace")
    n = len(data)
    if n < 126:
        header = struct.pack("!BB", 0x81, n)
    elif n < 65536:
        header = struct.pack("!BBH", 0x81, 126, n)
    else:
        header = struct.pack("!BBQ", 0x81, 127, n)
    return header + data


class Session:
    """One client connection."""

    def __init__(self, sessions: Sessions, ws: web.WebSocketResponse | None, transport: Any, remote: str) -> None:
        self.sessions = sessions
        self.ws = ws
        self.transport = transport
        self.remote = remote
        self.user: str | None = None
        self.token_digest: str | None = None    # the session token this connection logged in with
        self.closed = False
        self.close_reason = ""
        s = sessions.settings
        self.frames = TokenBucket(s.rate_limit_frames, s.rate_limit_burst, sessions.monotonic())
        self._abort_handle: asyncio.TimerHandle | None = None
        self.close_task: asyncio.Task[Any] | None = None
        self.says: set[asyncio.Task[Any]] = set()
        self.rooms: set[str] = set()            # the rooms whose messages it receives (once registered)
        self.reads_directory = False            # it asked for the directory: changes are pushed to it
        self.reads_positions = False            # it asked for positions: newer reports are pushed to it
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._pending_frames = 0                # the frames (lines) ``_pending`` holds: a joined chain is many
        self._turn = -1                         # the turn in which it last wrote a frame at once (``Sessions.turn``)
        self._held_upto = (-1, 0)               # (held turn, its entries) written to it ahead (``fan_held_to``)

    def unregistered(self) -> None:
        """It receives nothing more from the server's fan-outs (``Sessions.unregister``): a front end that
        shares state across its sessions lets go of this one (the IRC edge's steps, irc_steps.py)."""

    def take_token(self) -> bool:
        """One of the client's frames; False when the client floods."""
        return self.frames.take(self.sessions.monotonic())

    def send(self, frame: dict[str, Any]) -> None:
        self.write(ws_text_frame(P.encode(frame)))

    def write(self, data: bytes) -> None:
        """Send one encoded frame (the turn's first at once, later ones at the turn's end); disconnect the
        client if its queue is over the limit."""
        tr = self._queueable(len(data))
        if tr is None:
            return
        ss = self.sessions
        if self._turn != ss.turn and not self._pending and not ss.holding:   # the turn's first frame: at once
            self._turn = ss.turn
            tr.write(data)
            ss.turn_end_soon()
            return
        self._pending_bytes += len(data)
        self._pending_frames += 1
        self._pending.append(data)
        if len(self._pending) == 1:
            ss.flush_soon(self)

    def write_run(self, datas: list[bytes]) -> None:
        """Frames of one room fanned out in a held turn, in order (``Sessions.fan_held``). A front end that
        translates them reads the run once for all its sessions (irc_server.py) or each frame as it comes."""
        if type(self).write is Session.write:   # the frames are this client's bytes as they are (WebSocket)
            self.write_all(datas)
        else:
            for data in datas:
                self.write(data)

    def write_all(self, datas: list[bytes], frames: int = 0) -> None:
        """``Session.write`` of each frame in order (this client's bytes as they are, also from a front end
        whose own ``write`` translates: the IRC edge hands it the lines it made), its checks made once for
        all when the turn holds them. ``frames``: how many frames ``datas`` carry, when a front end joined
        several into one bytes (the IRC edge's chains); else one each. The turn's end counts frames, not
        writes, to tell whether the server is still behind (``Sessions._flush``)."""
        if not self.sessions.holding or not datas:
            for data in datas:                  # (a turn that does not hold is not stretched: ``_flush``)
                Session.write(self, data)
            return
        size = sum(map(len, datas))
        if self._queueable(size) is None:
            return
        self._pending_bytes += size
        self._pending_frames += frames or len(datas)
        first = not self._pending
        self._pending.extend(datas)
        if first:
            self.sessions.flush_soon(self)

    def _queueable(self, size: int) -> Any:
        """The transport, if ``size`` more bytes may be queued for it (after the room frames held this turn:
        ``Sessions.fan_held``); else None: the session is closed, or closed now as a slow consumer."""
        if self.closed:
            return None
        ss = self.sessions
        if ss._held and not ss._fanning:        # room frames held this turn go first
            ss.fan_held_to(self)
            if self.closed:                     # (as a slow consumer, by them)
                return None
        tr = self.transport
        if tr is None or tr.is_closing():
            self.closed = True
            ss.unregister(self)
            return None
        limit = ss.settings.outbound_queue_bytes
        if tr.get_write_buffer_size() + self._pending_bytes + size > limit:
            self._pending.clear()
            self._pending_bytes = self._pending_frames = 0
            self.close(1008, f"slow consumer: more than {limit} bytes queued")
            return None
        return tr

    def flush(self) -> int:
        """Hand the queued frames to the transport; how many frames there were (a joined chain counts as
        its lines: ``write_all``)."""
        pending = self._pending
        if not pending:
            return 0
        tr = self.transport
        if tr is not None and not tr.is_closing():
            tr.write(pending[0] if len(pending) == 1 else b"".join(pending))
        pending.clear()
        frames, self._pending_bytes, self._pending_frames = self._pending_frames, 0, 0
        return frames

    async def send_paced(self, frame: dict[str, Any]) -> None:
        """Send one frame, waiting while the client is behind (a resume's backlog)."""
        self.flush()
        if self.ws is not None:
            await self.ws.send_str(P.encode(frame))
        else:
            self.send(frame)

    def close(self, code: int, reason: str) -> None:
        """Close with a reason (after the frames already queued); abort if the client never answers."""
        if self.closed:
            return
        self.sessions.fan_held_to(self)
        self.flush()
        self.closed = True
        self.close_reason = reason
        self.sessions.unregister(self)
        log.info("closing connection from %s (%s): %s", self.remote, self.user, reason)
        self.close_task = self.sessions.tasks.spawn(self._close(code, reason))
        loop = asyncio.get_running_loop()
        self._abort_handle = loop.call_later(2 * self.sessions.settings.close_timeout + 1.0, self.abort)

    async def _close(self, code: int, reason: str) -> None:
        try:
            if self.ws is not None:
                await self.ws.close(code=code, message=reason.encode("utf-8")[:120])
        except Exception:  # the peer is gone; nothing to tell it
            pass

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    def cancel_abort(self) -> None:
        if self._abort_handle is not None:
            self._abort_handle.cancel()


def _read_by(session: Session, held: list[tuple[str, bytes, Callable[[str], bool] | None]]) -> list[bytes]:
    """The frames of held room entries that ``session``'s user may read (``readable``: labels)."""
    user = session.user
    return [data for _, data, readable in held if readable is None or (user is not None and readable(user))]


class Sessions:
    """Every open connection of the server, the logged-in ones by user and by room, and fan-out."""

    def __init__(self, settings: ChatSettings, monotonic: Callable[[], float], tasks: Tasks) -> None:
        self.settings = settings
        self.monotonic = monotonic
        self.tasks = tasks
        self.connections: set[Session] = set()
        self.user_sessions: dict[str, set[Session]] = {}
        self.room_sessions: dict[str, set[Session]] = {}
        self._to_flush: list[Session] = []      # sessions with frames queued for the turn's end
        self.turn = 0                           # turns that wrote: a session's first frame of a turn goes at once
        self.holding = False                    # this turn brings more frames: every write waits for its end
        self._turn_end_due = False
        self._behind = False                    # this turn found deliveries waiting (hold_turn)
        self._stretch = 0.0                     # s the turn lasts past its first write while behind, or 0
        self._user_buckets: dict[str, TokenBucket] = {}       # user -> frames over all its connections
        # A held turn's room frames, in order, fanned out at its end (``fan_held``): (room, frame, readable).
        self._held: list[tuple[str, bytes, Callable[[str], bool] | None]] = []
        self._held_turn = 0                     # numbers the held lists (``Session._held_upto``)
        self._fanning = False

    def online(self) -> frozenset[str]:
        return frozenset(self.user_sessions)

    def take_user_token(self, user: str) -> bool:
        """One frame of a user over every connection; False when the user floods."""
        s, now = self.settings, self.monotonic()
        b = self._user_buckets.get(user)
        if b is None:
            b = self._user_buckets[user] = TokenBucket(s.user_rate_limit_frames, s.user_rate_limit_burst, now)
        return b.take(now)

    # --- logged-in sessions --------------------------------------------------------------------
    def register(self, session: Session, rooms: Iterable[str]) -> None:
        """``session`` (logged in) receives its user's frames and its rooms' messages from now on."""
        self.fan_held()                         # (frames held before: to the rooms' sessions before)
        user = session.user
        assert user is not None
        self.user_sessions.setdefault(user, set()).add(session)
        for room in rooms:
            self.room_sessions.setdefault(room, set()).add(session)
            session.rooms.add(room)

    def unregister(self, session: Session) -> None:
        self.fan_held()
        session.unregistered()
        user = session.user
        if user is None:
            return
        sessions = self.user_sessions.get(user)
        if sessions is None or session not in sessions:
            return
        sessions.discard(session)
        if not sessions:
            del self.user_sessions[user]
        for room in session.rooms:
            rs = self.room_sessions.get(room)
            if rs is not None:
                rs.discard(session)
                if not rs:
                    del self.room_sessions[room]
        session.rooms.clear()

    def joined(self, user: str, room: str) -> None:
        """The user's sessions receive ``room`` from now on."""
        self.fan_held()
        sessions = self.user_sessions.get(user)
        if sessions:
            self.room_sessions.setdefault(room, set()).update(sessions)
            for s in sessions:
                s.rooms.add(room)

    def left(self, user: str, room: str) -> None:
        self.fan_held()
        sessions = self.user_sessions.get(user, ())
        for s in sessions:
            s.rooms.discard(room)
        rs = self.room_sessions.get(room)
        if rs is not None:
            rs.difference_update(sessions)
            if not rs:
                del self.room_sessions[room]

    def count(self, user: str) -> int:
        return len(self.user_sessions.get(user, ()))

    def of_user(self, user: str) -> list[Session]:
        return list(self.user_sessions.get(user, ()))

    # --- fan-out -------------------------------------------------------------------------------
    def to_room(self, room: str, frame: dict[str, Any], readable: Callable[[str], bool] | None = None) -> None:
        """A frame for the room's sessions (``readable``: of the users it says may read it; labels)."""
        sessions = self.room_sessions.get(room)
        if sessions:
            data = ws_text_frame(P.encode(frame))
            if self.holding:                    # the server is behind: one pass over the room at the turn's end
                self._held.append((room, data, readable))
                self.turn_end_soon()
                return
            for s in list(sessions):
                if readable is None or (s.user is not None and readable(s.user)):
                    s.write(data)

    def fan_held(self) -> None:
        """Fan out the room frames held this turn: each run of one room's frames in one pass over its sessions
        (``Session.write_run``), so a session's state is read once per run rather than once per frame; when
        a room holds thousands of sessions, walking them is the fan-out's cost. The server is behind when
        a turn holds (``hold_turn``): its frames all wait for the turn's end anyway, and the next deliveries
        are already there, so nothing leaves later for it. A session's order is kept: frames of another
        room are other runs, in order; a frame written to a session meanwhile (a reply, an acknowledgement)
        first takes the held frames that session reads (``fan_held_to``), and a change of the rooms'
        sessions fans out what was held before it."""
        held = self._held
        if not held or self._fanning:
            return
        turn, self._held_turn, self._held = self._held_turn, self._held_turn + 1, []
        self._fanning = True
        try:
            i = 0
            while i < len(held):
                room = held[i][0]
                j = i + 1
                while j < len(held) and held[j][0] == room:
                    j += 1
                sessions = self.room_sessions.get(room)
                if sessions:
                    run = held[i:j]
                    datas = [data for _, data, _ in run]
                    shared = all(readable is None for _, _, readable in run)
                    for s in list(sessions):
                        upto = s._held_upto[1] if s._held_upto[0] == turn else 0
                        if upto >= j:
                            continue
                        if shared and upto <= i:
                            s.write_run(datas)
                        elif mine := _read_by(s, run[max(0, upto - i):]):
                            s.write_run(mine)
                i = j
        finally:
            self._fanning = False

    def fan_held_to(self, session: Session) -> None:
        """The held room frames ``session`` reads and was not written yet, ahead of the others (a frame of its
        own comes after them)."""
        held = self._held
        if not held or self._fanning:
            return
        turn = self._held_turn
        upto = session._held_upto[1] if session._held_upto[0] == turn else 0
        if upto >= len(held):
            return
        session._held_upto = (turn, len(held))
        mine = _read_by(session, [h for h in held[upto:] if h[0] in session.rooms])
        if mine:
            self._fanning = True
            try:
                session.write_run(mine)
            finally:
                self._fanning = False

    def to_user(self, user: str, frame: dict[str, Any]) -> None:
        sessions = self.user_sessions.get(user)
        if sessions:
            data = ws_text_frame(P.encode(frame))
            for s in list(sessions):
                s.write(data)

    def broadcast(self, frame: dict[str, Any]) -> None:
        data = ws_text_frame(P.encode(frame))
        for s in list(self.connections):
            if s.user is not None:
                s.write(data)

    def to_directory_readers(self, frame: dict[str, Any], users: tuple[str, ...] | None,
                             readable: Callable[[str], bool] | None = None) -> None:
        """A frame for the sessions that asked for the directory (of ``users`` only, unless None; ``readable``:
        of the users it says may read it, labels)."""
        if users is None:
            sessions: Iterable[Session] = self.connections
        else:
            sessions = [s for u in users for s in self.user_sessions.get(u, ())]
        data: bytes | None = None
        for s in list(sessions):
            if s.reads_directory and s.user is not None and (readable is None or readable(s.user)):
                data = data or ws_text_frame(P.encode(frame))
                s.write(data)

    def to_position_readers(self, frame: dict[str, Any]) -> None:
        """A ``position`` frame for the sessions that asked ``positions {}``."""
        data: bytes | None = None
        for s in list(self.connections):
            if s.reads_positions and s.user is not None:
                data = data or ws_text_frame(P.encode(frame))
                s.write(data)

    def flush_soon(self, session: Session) -> None:
        """``session`` has frames queued: they go out in one write at the turn's end."""
        self._to_flush.append(session)
        self.turn_end_soon()

    def turn_end_soon(self) -> None:
        """A session wrote this turn: at its end the turn moves on (``_flush``), so every session's next frame
        goes at once again (one counter, not a reset of each session that wrote)."""
        if not self._turn_end_due:
            self._turn_end_due = True
            if self._stretch:
                asyncio.get_running_loop().call_later(self._stretch, self._flush)
            else:
                asyncio.get_running_loop().call_soon(self._flush)

    def hold_turn(self) -> None:
        """More frames are coming in this turn (deliveries already waiting): every session's frames wait for
        the turn's end and go in one write, rather than the first at once and the rest in a second write.
        The server is behind, so the next turn is stretched too (``_flush``)."""
        self.holding = True
        self._behind = True
        self.turn_end_soon()

    def _flush(self) -> None:
        """The turn's end: write what each session queued. The next frame of each is written at once again,
        unless the server is behind: this turn found deliveries waiting (``hold_turn``), or it was stretched
        and gathered ``GATHERED`` frames or more per session on average. Then the next turn holds every frame and
        lasts as long as this turn's writes took (at most 0.1 s): writing is then at most about half the
        loop's time, and the lines that arrive meanwhile share each session's one write."""
        self.fan_held()                         # (before the turn ends: what it writes waits for this flush)
        self._turn_end_due = False
        self.turn += 1
        sessions, self._to_flush = self._to_flush, []
        frames = 0
        start = time.perf_counter()
        for s in sessions:
            frames += s.flush()
        cost = time.perf_counter() - start
        behind = self._behind or (self._stretch > 0 and frames >= GATHERED * len(sessions) > 0)
        self._behind = False
        self.holding = behind
        self._stretch = min(cost, STRETCH_MAX) if behind else 0.0

    def close_all(self, code: int, reason: str) -> None:
        for s in list(self.connections):
            s.close(code, reason)
