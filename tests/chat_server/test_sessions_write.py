"""The write path of a session (sessions.py): a turn's first frame leaves at once and the turn's other frames in
one write at its end, in order, on both event loops, also when the socket takes less than it is given; a
server that is behind stretches its turns while that gathers lines, and only then, and fans a held turn's
room frames out in one pass per run, every session's order kept; the outbound bound holds for what the
transport queues."""
from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
from collections.abc import AsyncIterator, Coroutine
from typing import Any

import pytest
from testkit import Kept

from chat_server.config import ChatSettings
from chat_server.irc_server import ws_frame_payload
from chat_server.sessions import Session, Sessions
from chat_server.tasks import Tasks
from rcm.cli import run

pytestmark = pytest.mark.timeout(30)


class Recorder(asyncio.Protocol):
    """The server end's protocol: reads nothing the tests look at."""


class Counting:
    """A transport that records what it is given to write (uvloop's cannot be patched)."""

    def __init__(self, transport: Any) -> None:
        self.transport = transport
        self.writes: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))
        self.transport.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.transport, name)


async def _session(settings: ChatSettings | None = None, small: bool = False
                   ) -> tuple[Sessions, Session, socket.socket]:
    """A logged-in session in room ``r`` on a loopback TCP connection accepted into this loop; the client end
    (``small``: both ends' socket buffers a few kB, so that the socket soon takes less than it is given)."""
    loop = asyncio.get_running_loop()
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = socket.socket()
        if small:
            client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        client.connect(listener.getsockname())
        server_end, _ = listener.accept()
    if small:
        server_end.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    tr, _ = await loop.connect_accepted_socket(Recorder, server_end)
    sessions = Sessions(settings or ChatSettings(), time.monotonic, Tasks())
    s = Session(sessions, None, tr, "127.0.0.1")
    s.user = "alice"
    sessions.connections.add(s)
    sessions.register(s, ["r"])
    return sessions, s, client


@contextlib.asynccontextmanager
async def _counted() -> AsyncIterator[tuple[Sessions, Counting, socket.socket]]:
    """``_session`` with its transport counting the writes it is given; closed at the end."""
    sessions, s, client = await _session()
    s.transport = counting = Counting(s.transport)
    try:
        yield sessions, counting, client
    finally:
        counting.abort()
        client.close()


async def _read(client: socket.socket, n: int) -> bytes:
    client.setblocking(False)
    loop = asyncio.get_running_loop()
    got = b""
    while len(got) < n:
        chunk = await asyncio.wait_for(loop.sock_recv(client, 1 << 20), 10)
        assert chunk, "the server end closed"
        got += chunk
    return got


def _on(loop: str, main: Coroutine[Any, Any, None]) -> None:
    run(main, loop)


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_a_turns_first_frame_leaves_at_once_and_the_others_in_one_write_at_its_end_in_order(loop: str) -> None:
    async def main() -> None:
        async with _counted() as (sessions, counting, client):
            for text in ("one", "two", "three"):
                sessions.to_room("r", {"type": "message", "text": text})
            [first] = counting.writes                   # before the turn ends: the first frame only
            assert b"one" in first and b"two" not in first
            await asyncio.sleep(0)                      # the turn's end: the others in one write
            first, rest = counting.writes
            assert b"one" not in rest and rest.index(b"two") < rest.index(b"three")
            assert await _read(client, len(first) + len(rest)) == first + rest
            sessions.to_room("r", {"type": "message", "text": "four"})     # the next turn's first: at once again
            assert len(counting.writes) == 3 and b"four" in counting.writes[2]
            await asyncio.sleep(0)
            assert len(counting.writes) == 3
    _on(loop, main())


def test_a_held_turn_writes_each_session_once_at_its_end_in_order() -> None:
    async def main() -> None:
        async with _counted() as (sessions, counting, client):
            sessions.hold_turn()                        # more deliveries are waiting: nothing at once
            for text in ("one", "two", "three"):
                sessions.to_room("r", {"type": "message", "text": text})
            assert counting.writes == []
            await asyncio.sleep(0)                      # the turn's end: all three in one write
            [batch] = counting.writes
            assert batch.index(b"one") < batch.index(b"two") < batch.index(b"three")
            assert await _read(client, len(batch)) == batch
    _on("asyncio", main())


class Runs(Session):
    """A session that counts the runs it is handed (``Session.write_run``)."""

    runs = 0

    def write_run(self, datas: list[bytes]) -> None:
        self.runs += 1
        super().write_run(datas)


class Translating(Session):
    """A front end's session that translates what it is given (as TAK's does, frame by frame)."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.given: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.given.append(data)


def _texts(data: bytes) -> list[str]:
    """The ``text`` of each WebSocket frame in ``data``, in order."""
    out = []
    while data:
        n = data[1]                                 # (short frames: one length byte)
        out.append(json.loads(data[2:2 + n])["text"])
        data = data[2 + n:]
    return out


def test_a_held_turn_fans_out_each_rooms_run_in_one_pass_and_keeps_every_sessions_order() -> None:
    async def main() -> None:
        sessions = Sessions(ChatSettings(), time.monotonic, Tasks())
        made = {}
        for user, rooms in (("ann", ["r", "q"]), ("bob", ["r"]), ("cat", ["q"]), ("dan", []), ("eve", ["r"])):
            s = made[user] = (Translating if user == "eve" else Runs)(sessions, None, Kept(), "127.0.0.1")
            s.user = user
            sessions.connections.add(s)
            sessions.register(s, rooms)

        def say(room: str, text: str, readable: Any = None) -> None:
            sessions.to_room(room, {"type": "message", "text": text}, readable)
        sessions.hold_turn()                        # behind: room frames wait for the turn's end
        say("r", "r1")
        say("r", "r2")
        made["ann"].send({"type": "ack", "text": "ann's own"})     # ann is written to: her held frames first
        say("q", "q1")
        say("r", "r3")
        say("r", "r4", readable=lambda u: u != "bob")
        sessions.joined("dan", "r")                 # dan joins: what was held goes out before, without him
        say("r", "r5")
        assert all(s.transport.data == b"" for s in made.values())
        await asyncio.sleep(0)                      # the turn's end
        assert _texts(made["ann"].transport.data) == ["r1", "r2", "ann's own", "q1", "r3", "r4", "r5"]
        assert _texts(made["bob"].transport.data) == ["r1", "r2", "r3", "r5"]
        assert _texts(made["cat"].transport.data) == ["q1"]
        assert _texts(made["dan"].transport.data) == ["r5"]
        # One pass per run of a room's frames: bob's r1-r2, r3 (q1 came between), and r5 (after dan joined).
        assert made["bob"].runs == 3 and made["cat"].runs == 1
        # A translating session is handed each frame to translate, never the run's bytes as they are.
        assert [json.loads(ws_frame_payload(d))["text"] for d in made["eve"].given] == ["r1", "r2", "r3", "r4", "r5"]
        assert made["eve"].transport.data == b""
    _on("asyncio", main())


def test_write_all_queues_the_bytes_as_they_are_for_a_session_whose_own_write_translates() -> None:
    """The IRC edge hands ``Session.write_all`` the lines it made (irc_server.py ``write_run``): one or many, held
    or not, they go to the client as they are, never back through the session's own ``write`` (which would
    read them as a frame to translate, and drop them: at 5,000 IRC clients, 2026-11-27, most lines were lost so
    once a session's run came as one stretch of lines)."""
    async def main() -> None:
        sessions = Sessions(ChatSettings(), time.monotonic, Tasks())
        s = Translating(sessions, None, Kept(), "127.0.0.1")
        s.user = "ann"
        sessions.connections.add(s)
        sessions.register(s, ["r"])
        Session.write_all(s, [b"one\r\n"])                 # not held: the turn's first, at once
        assert s.transport.data == b"one\r\n"
        sessions.hold_turn()
        Session.write_all(s, [b"two\r\n"])                 # held, alone
        Session.write_all(s, [b"three\r\n", b"four\r\n"])  # held, a run
        await asyncio.sleep(0)
        assert s.transport.data == b"one\r\ntwo\r\nthree\r\nfour\r\n" and s.given == []
    _on("asyncio", main())


async def _writes(counting: Counting, n: int) -> None:
    """Until ``counting`` was given ``n`` writes (a stretched turn ends on the loop's timer)."""
    while len(counting.writes) < n:
        await asyncio.sleep(0.001)
    assert len(counting.writes) == n


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_a_server_that_is_behind_stretches_its_turns_until_a_stretch_gathers_one_frame_a_session(loop: str) -> None:
    async def main() -> None:
        async with _counted() as (sessions, counting, client):
            sessions.hold_turn()                        # deliveries were waiting: the server is behind
            sessions.to_room("r", {"type": "message", "text": "one"})
            await _writes(counting, 1)
            sessions.to_room("r", {"type": "message", "text": "two"})      # the next turn is stretched:
            sessions.to_room("r", {"type": "message", "text": "three"})    # nothing at once
            assert len(counting.writes) == 1
            await _writes(counting, 2)                  # its end: both in one write
            assert counting.writes[1].index(b"two") < counting.writes[1].index(b"three")
            sessions.to_room("r", {"type": "message", "text": "four"})     # it gathered two frames for the one
            assert len(counting.writes) == 2            # session: still behind, this turn is stretched too
            await _writes(counting, 3)                  # it gathers one: the server keeps up again
            assert b"four" in counting.writes[2]
            sessions.to_room("r", {"type": "message", "text": "five"})     # at once
            assert len(counting.writes) == 4 and b"five" in counting.writes[3]
            got = await _read(client, sum(map(len, counting.writes)))
            assert got == b"".join(counting.writes)
    _on(loop, main())


def test_a_stretched_turn_counts_the_lines_a_front_end_joined_into_one_write() -> None:
    """The IRC edge joins a chain of lines into one bytes (irc_server.py ``write_run``): a stretch that gathered
    two lines so is still behind, as one that gathered two frames is (at 1,000 IRC clients the turn's end
    counted one, stopped stretching, and wrote a third more often than for WebSocket clients, 2026-11-27)."""
    async def main() -> None:
        async with _counted() as (sessions, counting, client):
            s = next(iter(sessions.connections))
            sessions.hold_turn()                        # behind
            Session.write_all(s, [b"one\r\n"])
            await _writes(counting, 1)
            Session.write_all(s, [b"two\r\nthree\r\n"], 2)      # the stretched turn: a chain of two lines
            await _writes(counting, 2)
            Session.write_all(s, [b"four\r\n"])         # two lines gathered: still behind, stretched again
            assert len(counting.writes) == 2
            await _writes(counting, 3)                  # it gathered one: the server keeps up again
            Session.write_all(s, [b"five\r\n"])         # at once
            assert counting.writes[2:] == [b"four\r\n", b"five\r\n"]
            assert await _read(client, 27) == b"one\r\ntwo\r\nthree\r\nfour\r\nfive\r\n"
    _on("asyncio", main())


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_a_server_that_keeps_up_never_stretches_a_turn(loop: str) -> None:
    async def main() -> None:
        async with _counted() as (sessions, counting, client):
            for i in range(5):       # each turn brings three lines (two at its end) but found no delivery waiting:
                for j in range(3):   # the next turn's first line still leaves at once
                    sessions.to_room("r", {"type": "message", "text": f"line {i}.{j}"})
                    assert len(counting.writes) == 2 * i + 1
                await asyncio.sleep(0)
                assert len(counting.writes) == 2 * i + 2
            got = await _read(client, sum(map(len, counting.writes)))
            assert got == b"".join(counting.writes)
    _on(loop, main())


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_what_the_socket_does_not_take_waits_in_the_transport_and_arrives_in_order(loop: str) -> None:
    async def main() -> None:
        sessions, s, client = await _session(ChatSettings(outbound_queue_bytes=4 << 20), small=True)
        try:
            big = "x" * 60_000
            frames = [{"type": "message", "text": f"{i} {big}"} for i in range(12)]     # ~720 kB: past the sockets'
            queued = []
            for f in frames:
                sessions.to_room("r", f)
                await asyncio.sleep(0)
                queued.append(s.transport.get_write_buffer_size())
            assert max(queued) > 0                      # a remainder waited in the transport's buffer
            assert not s.closed
            got = await _read(client, sum(len(f["text"]) for f in frames))
            texts = [f["text"].split()[0].encode() for f in frames]
            positions = [got.index(b'"' + t + b" ") for t in texts]
            assert positions == sorted(positions)
        finally:
            s.abort()
            client.close()
    _on(loop, main())


def test_the_outbound_bound_counts_what_the_transport_holds() -> None:
    async def main() -> None:
        settings = ChatSettings(max_frame_bytes=16384, outbound_queue_bytes=65536)
        sessions, s, client = await _session(settings, small=True)
        sent = 0
        while not s.closed and sent < 2000:             # the client never reads
            sessions.to_room("r", {"type": "message", "text": "y" * 8000})
            sent += 1
            await asyncio.sleep(0)
        assert s.closed and "slow consumer" in s.close_reason
        client.close()
        await asyncio.gather(*(t for t in [s.close_task] if t is not None), return_exceptions=True)
        s.abort()
        s.cancel_abort()
    asyncio.run(main())
