"""The IRC listener of a chat server: the I/O edge around ``irc.IrcSession``.

Each accepted connection becomes an :class:`IrcConnection`, a chat session
like a WebSocket one (the server registers it, fans messages out to it,
counts it against ``max_sessions_per_user`` and the rate limits) whose
client speaks IRC: frames the server writes to it go through the session's
translator and leave as IRC lines; IRC lines from the client become chat
protocol frames handled by the server exactly as a WebSocket client's. The
outbound queue limit (``outbound_queue_bytes``), the frame rate limits and
the registration deadline (``hello_timeout``) are the WebSocket ones;
``max_connections`` and ``max_connections_per_address`` are applied to IRC
connections on their own count.

Each connection is served by two of the server's tasks (tasks.py): a reader,
and a worker; its chat requests go to the server one at a time, in order
(front_end.py ``Requests``), from the reader at once while none is being
handled, else from the worker once the one before is done; at most
``IRC_REQUESTS_MAX`` wait, then its lines wait in TCP. Its
requests take the WebSocket path (handlers.py), so their changes to the
database are the core's steps and their says the server's tasks. ``stop``
ends the connections before the server drains its tasks.

What each client was shown (irc_marks.py ``ShownMarks``: per user and
address, per room, the highest delivery number shown) outlives its
connection, so that a client that reconnects, after a network cut or a
restart of this server, is replayed only what it has not shown yet. The
marks are written to ``data_dir/<site>/chat/irc-shown.json`` every
``MARKS_INTERVAL`` seconds when they changed (read a chunk of clients a loop
turn, written by a worker thread), and at ``stop`` (a crash forgets at most
that interval's).
"""
from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .front_end import (
    LISTEN_BACKLOG,
    Admitted,
    Requests,
    Signal,
    handle_now,
    peer_address,
    wait_for_room,
    work_requests,
)
from .front_end_labels import LabelView
from .irc import IrcSession
from .irc_commands import MAX_INPUT_BYTES, MAX_TAG_BYTES
from .irc_fanout import FANNED_KEPT, FanLine, FanRun, fanout_line
from .irc_marks import ShownMarks, marked_in_turns
from .irc_messages import Quotes
from .irc_state import Close, NickLists, Presence, Request, Send
from .irc_steps import Advance, Step, Steps, line_advance, run_advance
from .ircline import format_line

if TYPE_CHECKING:
    from .server import ChatServer

from .sessions import Session

log = logging.getLogger("chat_server.irc")
IRC_REQUESTS_MAX = 64       # chat requests of one IRC connection waiting for the server; then its lines wait in TCP
MARKS_INTERVAL = 2.0        # seconds between writes of the shown marks (when they changed)
# The frames last fanned out, by the identity of their bytes (shared by every session they go to): their bytes,
# parse, the time of their first reading (one clock reading for a whole fan-out) and their shared reading as a
# message line. Kept for the lines ``fanout_line`` keeps: a held turn's run goes to most sessions as one list and
# to some as a list of their own (``Sessions.fan_held_to``, ``_read_by``), and every list must read the same
# frames as the same lines, or the sessions of one would never be in step with the lines of another.
_readings: dict[int, tuple[bytes, Any, float, Any]] = {}
# The run of frames last fanned out in a held turn and its reading (``IrcConnection.write_run``).
_last_run: tuple[list[bytes] | None, list[tuple[bytes | None, Any, float, Any]], FanRun] = (None, [], FanRun([]))


def _read_fanout(data: bytes, clock: Callable[[], float]) -> tuple[bytes | None, Any, float, Any]:
    """A fanned-out frame's bytes read once for every session: (bytes, frame, the time of its first reading,
    its shared reading as a message line or None). The last ``FANNED_KEPT`` are kept (``_readings``)."""
    fan = _readings.get(id(data))
    if fan is None or fan[0] is not data:
        try:
            frame: Any = json.loads(ws_frame_payload(data))
        except ValueError:
            frame = None
        line = None
        if isinstance(frame, dict) and frame.get("type") == "message" and frame.get("id") is None:
            line = fanout_line(frame)
        fan = _readings[id(data)] = (data, frame, clock(), line)      # (a kept reading holds its bytes: no id reuse)
        if len(_readings) > FANNED_KEPT:
            del _readings[next(iter(_readings))]
    return fan


async def skip_line(reader: asyncio.StreamReader, consumed: int) -> None:
    """Drop an over-long line: the ``consumed`` bytes read of it, then the rest up to its LF (or raise
    ``IncompleteReadError`` if the stream ends first)."""
    await reader.readexactly(consumed)
    while True:
        try:
            await reader.readuntil(b"\n")
            return
        except asyncio.LimitOverrunError as again:
            await reader.readexactly(again.consumed)


def ws_frame_payload(data: bytes) -> bytes:
    """The payload of one unmasked server WebSocket frame (``sessions.ws_text_frame``)."""
    n = data[1] & 0x7F
    start = 2 if n < 126 else 4 if n == 126 else 10
    return data[start:]


class IrcConnection(Session):
    """A chat session whose client speaks IRC."""

    def __init__(self, server: ChatServer, front: IrcFrontEnd, transport: asyncio.Transport,
                 remote: str) -> None:
        super().__init__(server.sessions, None, transport, remote)      # no WebSocket
        self.server = server
        self.front = front
        mission = server.mission
        self.irc = IrcSession(server_name=f"{server.site}.irc.{mission.name}", site=server.site,
                              network=mission.name, rate_frames=server.settings.rate_limit_frames,
                              rate_burst=server.settings.rate_limit_burst,
                              max_channels=server.settings.max_rooms_per_user,
                              created=time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(front.started_at)),
                              members_of=server.core.rooms.members_of, quotes=front.quotes,
                              presence=front.presence, nick_lists=front.nick_lists,
                              labels=LabelView(mission.labels))
        self.requests: Requests[dict[str, Any]] = Requests()
        self.taken = Signal()              # the request worker took one (or stopped): the reader may go on
        # Its place in a step (irc_steps.py): the sessions in step at a room's line, shown the next as one.
        self._step: Step | None = None
        self._step_at: FanLine | None = None    # the line it was shown last there

    def send(self, frame: dict[str, Any]) -> None:
        self._translate(frame, self.server.clock())

    def _translate(self, frame: dict[str, Any], now: float) -> None:
        """A chat frame for this client, sent to it alone (``send``) or fanned out (``write``): IRC's actions."""
        self.sessions.fan_held_to(self)     # the room lines held this turn come first (sessions.Sessions.fan_held)
        self.left_step()
        if frame.get("type") == "welcome" and self.user is not None:
            self.irc.shown = self.front.shown.of(self.user, self.remote)     # what this client was shown before
        self.apply(self.irc.on_frame(frame, now))

    def receive(self, raw: bytes) -> None:
        """One line from the client (after the room lines held this turn: its replies come after them)."""
        self.sessions.fan_held_to(self)
        self.left_step()
        self.apply(self.irc.receive(raw, self.server.monotonic(), self.server.clock()))

    def write(self, data: bytes) -> None:
        """A frame the server fanned out (WebSocket bytes, shared by every session): translate it.

        A fan-out hands the same bytes object to every session in turn, so it is parsed once (the last
        ``FANNED_KEPT`` are kept, ``_read_fanout``, each with the time it was first read and, for a message,
        its shared reading) and the parsed frame, shared too, lets the translator format its lines once per
        rendering (irc_fanout.py ``FanLine``).
        A session in a step (irc_steps.py: sessions in step at the room's line, as one) is written the
        step's bytes when the step already took this frame: one identity test and the write are all a line
        costs per recipient then. Else the frame advances its step, or it leaves the step and its session
        shows the frame (in step on its own, ``IrcSession.in_step``, or translated), then joins a step if it
        is in step after it."""
        st = self._step
        if st is not None and data is st.key and self._step_at is st.prev:
            self._step_at = st.line
            Session.write(self, st.out)
            return
        if self.closed:
            return
        fan = _read_fanout(data, self.server.clock)
        adv = line_advance(data, fan[3]) if fan[3] is not None else None
        if st is not None and self._stepped(st, adv):
            Session.write(self, st.out)
            return
        self._show(fan)
        self._join(adv)

    def _stepped(self, st: Step, adv: Advance | None) -> bool:
        """Frames that are not ``st``'s last advance by identity: True if they are by their lines, or if they
        advance ``st`` from this session's place (it is then at the step's line, to be written ``st.out``);
        else it leaves ``st`` (False) and its session shows them."""
        at = self._step_at
        if adv is not None and (at is st.prev and st.shows(adv) or
                                at is st.line and self.front.steps.advance(st, adv) and self._step is st):
            self._step_at = st.line
            return True
        self.left_step()
        return False

    def left_step(self) -> None:
        """Out of its step, if in one: its session in step on its own at its place (irc_steps.py)."""
        st, at = self._step, self._step_at
        if st is not None and at is not None:
            self._step = self._step_at = None
            self.front.steps.leave(self, st, at)

    def step_shown(self) -> None:
        if self._step_at is not None:
            self.irc.mark_shown(self._step_at)

    def unregistered(self) -> None:
        self.left_step()

    def write_run(self, datas: list[bytes]) -> None:
        """A run of one room's frames fanned out in a held turn (sessions.Sessions.fan_held): read once for
        every session (the run's list is shared), shown in order; a session in step takes each stretch of
        lines chained in the room at once (irc_fanout.py ``FanRun``, ``IrcSession.in_step_run``)."""
        global _last_run
        st = self._step
        if st is not None and datas is st.key and self._step_at is st.prev:
            self._step_at = st.line
            Session.write_all(self, st.outs, st.frames)
            return
        if _last_run[0] is datas:
            run, chains = _last_run[1], _last_run[2]
        else:
            run = [_read_fanout(data, self.server.clock) for data in datas]
            chains = FanRun([fan[3] for fan in run])
            _last_run = (datas, run, chains)
        adv = run_advance(datas, chains)
        if st is not None:
            if self._stepped(st, adv):
                Session.write_all(self, st.outs, st.frames)
                return
        shown: list[bytes] = []             # in-step lines, written together (Session.write_all)
        frames = 0                          # the frames they show (a chain's lines are one bytes)
        irc = self.irc
        i, n = 0, len(run)
        while i < n:
            if self.closed:
                return
            fan = run[i]
            if fan[3] is not None:
                if chains.ends[i] > i + 1:      # lines chained from here: in step at this one, at them all
                    got = irc.in_step_run(chains, i)
                    if got is not None:
                        shown.append(got[0])
                        frames += got[1] - i
                        i = got[1]
                        continue
                lines = irc.in_step(fan[3])
                if lines is not None:
                    shown.append(lines)
                    frames += 1
                    i += 1
                    continue
            if shown:
                Session.write_all(self, shown, frames)
                shown, frames = [], 0
            self._translate_fanned(fan)
            i += 1
        if shown:
            Session.write_all(self, shown, frames)
        self._join(adv)

    def _join(self, adv: Advance | None) -> None:
        """After its session showed a fan-out's line or run on its own: into a step if it is in step now."""
        if adv is not None and self._step is None and not self.closed:
            st = self._step = self.front.steps.join(self, adv)
            if st is not None:
                self._step_at = st.line

    def _show(self, fan: tuple[bytes | None, Any, float, Any]) -> None:
        """A fanned-out frame: its bytes at once if the session is in step with it, else translated."""
        if fan[3] is not None:
            lines = self.irc.in_step(fan[3])
            if lines is not None:
                Session.write(self, lines)
                return
        self._translate_fanned(fan)

    def _translate_fanned(self, fan: tuple[bytes | None, Any, float, Any]) -> None:
        if isinstance(fan[1], dict):
            self.apply(self.irc.on_frame(fan[1], fan[2]))   # (never a welcome: that is sent, not fanned out)

    def apply(self, actions: list[Any]) -> None:
        for a in actions:
            if type(a) is Send:                     # nearly every action (a fan-out's line): one type test
                Session.write(self, a.data)
            elif isinstance(a, Request):
                self.requests.put_nowait(a.frame)
            elif isinstance(a, Close):
                self.close(1000, a.reason)

    async def _close(self, code: int, reason: str) -> None:
        tr = self.transport
        if tr is not None and not tr.is_closing():
            tr.close()                              # after the queued lines (ERROR :Closing Link ...)


class IrcFrontEnd:
    """Listens on the site's ``irc`` address and serves IRC clients on the chat server's core."""

    def __init__(self, server: ChatServer, host: str, port: int) -> None:
        self.server = server
        self.host, self.port = host, port
        self.started_at = time.time()
        self.quotes = Quotes()
        self.presence = Presence()           # who is online where, one table for every session
        self.nick_lists = NickLists()        # channels' nick lists, shared by the sessions that hold the same
        self.steps = Steps()                 # sessions in step at a room's line, shown the next as one
        self.shown = ShownMarks(server.mission.site_dir(server.site) / "chat" / "irc-shown.json")
        self._saver: asyncio.Task[Any] | None = None
        self._writing: asyncio.Future[None] | None = None     # the marks' write in flight (``_save_marks``)
        self._listener: asyncio.Server | None = None
        self._serving: set[asyncio.Task[Any]] = set()      # the server's tasks reading a connection
        self.admitted: Admitted[IrcConnection] = Admitted(server, "IRC")

    @property
    def connections(self) -> set[IrcConnection]:
        return self.admitted.connections

    async def start(self) -> None:
        srv = self.server
        extra: dict[str, Any] = {}
        if srv.ssl_context is not None:
            extra = {"ssl": srv.ssl_context, "ssl_handshake_timeout": srv.settings.http_request_timeout}
        self._listener = await asyncio.start_server(self._accept, self.host, self.port, reuse_address=True,
                                                    limit=MAX_TAG_BYTES + MAX_INPUT_BYTES + 2,
                                                    backlog=LISTEN_BACKLOG, **extra)
        self._saver = srv.tasks.spawn(self._save_marks())
        if self.port == 0:
            self.port = self._listener.sockets[0].getsockname()[1]
        log.info("IRC front end of %s listening on %s:%d%s", srv.site, self.host, self.port,
                 " (TLS)" if extra else "")

    async def stop(self) -> None:
        """Stop listening; tell every IRC client the server is going down and close it."""
        if self._listener is not None:
            self._listener.close()
        for c in list(self.admitted.connections):
            c.apply([Send(format_line("", "ERROR", "Closing Link: server shutting down")),
                     Close("server shutting down")])
        await asyncio.sleep(0)                      # the queued lines go out before the tasks end
        serving = list(self._serving)
        for t in serving:
            t.cancel()
        await asyncio.gather(*serving, return_exceptions=True)
        if self._saver is not None:
            self._saver.cancel()
            await asyncio.gather(self._saver, return_exceptions=True)
        if self._writing is not None:
            await asyncio.gather(self._writing, return_exceptions=True)
        self.steps.mark_shown()
        self.shown.save()
        if self._listener is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._listener.wait_closed(), 2)

    async def _save_marks(self) -> None:
        """Every ``MARKS_INTERVAL``, the marks that changed: read a chunk of clients a loop turn, written by a
        worker thread (irc_marks.py: at 1,000 IRC clients a save held the loop ~3 ms at once)."""
        while True:
            await asyncio.sleep(MARKS_INTERVAL)
            await marked_in_turns(self.steps.members())
            text = await self.shown.text_in_turns()
            if text is not None:
                # Shielded: a stop that cancels this waits for the write in flight (``stop``), then writes last.
                self._writing = self.server.tasks.spawn(asyncio.to_thread(self.shown.write, text))
                await asyncio.shield(self._writing)

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = self.server.tasks.spawn(self._serve(reader, writer))
        self._serving.add(task)
        task.add_done_callback(self._serving.discard)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        address = peer_address(writer)
        refusal = self.admitted.refusal(address)
        if refusal is not None:
            writer.write(format_line("", "ERROR", f"Closing Link: {refusal}"))
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.drain(), 2)
            writer.close()
            return
        srv = self.server
        conn = IrcConnection(srv, self, writer.transport, address)   # type: ignore[arg-type]
        self.admitted.opened(conn, address)
        def not_registered() -> None:
            if conn.user is None:
                conn.apply([Send(format_line("", "ERROR", "Closing Link: registration timed out")),
                            Close("no registration in time")])
        deadline = asyncio.get_running_loop().call_later(srv.settings.hello_timeout, not_registered)
        handle = functools.partial(self._request, conn)
        worker = srv.tasks.spawn(work_requests(conn, handle))
        try:
            while not conn.closed:
                try:
                    raw = await reader.readuntil(b"\n")
                except asyncio.LimitOverrunError as e:
                    # Too long: drop it up to its end and say so (417), as ircds do.
                    try:
                        await skip_line(reader, e.consumed)
                    except (asyncio.IncompleteReadError, ConnectionError):
                        break                       # the client closed inside the line: nothing to answer
                    conn.receive(b"x" * (MAX_TAG_BYTES + MAX_INPUT_BYTES + 1))
                    continue
                except (asyncio.IncompleteReadError, ConnectionError):
                    break
                conn.receive(raw.rstrip(b"\r\n"))
                # Its requests, while none is being handled, are handled here at once (as a WebSocket reader
                # does), not a turn of the loop later by the worker, which takes them while one is.
                if not await handle_now(conn.requests, handle):
                    break
                # Like a WebSocket client's, an IRC client's lines are not read while its requests wait (its
                # says on RCM, say): TCP pushes back instead of a queue growing without bound.
                await wait_for_room(conn, IRC_REQUESTS_MAX, worker)
        finally:
            await self.admitted.ended(conn, address, writer, worker, deadline)

    async def _request(self, conn: IrcConnection, frame: dict[str, Any]) -> bool:
        """One of the session's chat frames to the server; False when the connection is closed (by it, too)."""
        srv = self.server
        if conn.closed:
            return False
        if conn.user is not None and not srv.sessions.take_user_token(conn.user):
            conn.apply([Send(format_line("", "ERROR", "Closing Link: Excess Flood")),
                        Close(f"flood: user {conn.user} over {srv.settings.user_rate_limit_frames:g} frames/s")])
            return False
        await srv.frames.handle(conn, json.dumps(frame))
        await srv.frames.pace_says(conn)
        return True
