"""What the chat server's TCP front ends (IRC, TAK) share: their connections' count, admission and end.

Theory of operation
-------------------
A front end (irc_server.py, tak/server.py) accepts TCP connections that become
chat sessions. ``Admitted`` is the one home of what every such front end keeps
and does around a connection's life: ``max_connections`` and
``max_connections_per_address`` counted on the front end's own connections
(``refusal``), a connection counted in when it is served (``opened``) and
taken out, with its session, its request worker and its registration
deadline, when its reader ends (``ended``). ``Requests`` is a connection's
requests to the server, one at a time in order: its reader handles them at
once while none is being handled (``handle_now``), its worker task those that
come meanwhile (``work_requests``), each through the front end's own handler.
What a front end reads and how it answers stays its own.
"""
from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from .sessions import Session

if TYPE_CHECKING:
    from .server import ChatServer

C = TypeVar("C", bound=Session)
T = TypeVar("T")

# Connections the kernel completes and holds for a listener while the server is busy (``listen``'s backlog;
# the kernel caps it at ``net.core.somaxconn``, 4096 on current Linux). asyncio's default is 100: a site where
# thousands of consoles reconnect at once (a restart, a network coming back) overflowed it while the loop was
# logging the first ones in, and the rest saw resets and timeouts (issue 37). Every listener of the chat server
# takes this one.
LISTEN_BACKLOG = 4096


def peer_address(writer: asyncio.StreamWriter) -> str:
    """The client's address, as the admission rules count it."""
    peer = writer.get_extra_info("peername")
    return str(peer[0]) if isinstance(peer, tuple) and peer else str(peer)


class Signal:
    """``asyncio.Event``'s ``set``/``clear``/``wait`` for one waiter, with no deque until someone waits (an
    Event is ~0.6 KB; a front end keeps one per connection: issue 37)."""

    __slots__ = ("_set", "_waiter")

    def __init__(self) -> None:
        self._set = False
        self._waiter: asyncio.Future[None] | None = None

    def set(self) -> None:
        self._set = True
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    def clear(self) -> None:
        self._set = False

    def is_set(self) -> bool:
        return self._set

    async def wait(self) -> None:
        while not self._set:
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None


class Requests(Generic[T]):
    """A connection's requests, handled one at a time in order: ``asyncio.Queue``'s ``put_nowait``, ``get`` and
    ``qsize`` for one consumer, its worker, and ``take_now`` for the connection's reader, which handles a
    request itself when nothing is being handled (a turn of the loop sooner than waking the worker, and a turn
    of a busy loop writes to every client: docs/performance.md, "The way in"). Whoever takes one (``get``,
    ``take_now``) calls ``done`` when it is handled; until then neither hands out another. A Queue holds four
    deques and an Event (~4 KB a connection, for a queue that is empty nearly always: issue 37); this, a list
    and a future while its worker waits."""

    __slots__ = ("_items", "_ready", "_busy")

    def __init__(self) -> None:
        self._items: list[T] = []
        self._ready = Signal()
        self._busy = False                  # a request taken is being handled

    def qsize(self) -> int:
        return len(self._items)

    def put_nowait(self, item: T) -> None:
        self._items.append(item)
        self._ready.set()

    async def get(self) -> T:
        """The next request, once one waits and none is being handled (the worker's)."""
        while not self._items or self._busy:
            self._ready.clear()
            await self._ready.wait()
        self._busy = True
        return self._items.pop(0)

    def take_now(self) -> T | None:
        """The next request if one waits and none is being handled, else None (the reader's)."""
        if self._busy or not self._items:
            return None
        self._busy = True
        return self._items.pop(0)

    def done(self) -> None:
        """The request taken is handled: the next may be taken (the worker wakes for it)."""
        self._busy = False
        if self._items:
            self._ready.set()


async def handle_now(requests: Requests[T], handle: Callable[[T], Awaitable[bool]]) -> bool:
    """The reader's part of a connection's requests: those that wait while none is being handled, handled here
    at once (``Requests.take_now``). ``handle`` says False once the connection is done; so does this."""
    while (item := requests.take_now()) is not None:
        try:
            if not await handle(item):
                return False
        finally:
            requests.done()
    return True


async def work_requests(conn: Any, handle: Callable[[Any], Awaitable[bool]]) -> None:
    """The worker's part (a task per connection): the requests that come while one is being handled, in order,
    until ``handle`` says the connection is done. ``conn.taken`` is set at each, for ``wait_for_room``."""
    try:
        while True:
            item = await conn.requests.get()
            conn.taken.set()
            try:
                if not await handle(item):
                    return
            finally:
                conn.requests.done()
    finally:
        conn.taken.set()


async def wait_for_room(conn: Any, most: int, worker: asyncio.Task[Any]) -> None:
    """Stop reading a client while ``most`` of its requests wait for the server (TCP pushes back)."""
    while conn.requests.qsize() >= most and not conn.closed and not worker.done():
        conn.taken.clear()
        await conn.taken.wait()


class Admitted(Generic[C]):
    """One front end's open connections (see the module docstring)."""

    def __init__(self, server: ChatServer, what: str) -> None:
        self.server = server
        self.what = what                    # "IRC", "TAK": in the refusals' words
        self.connections: set[C] = set()
        self._open = 0
        self._per_address: dict[str, int] = {}

    def refusal(self, address: str) -> str | None:
        """Why a new connection from ``address`` is refused, or None."""
        s = self.server.settings
        if self._open >= s.max_connections:
            return f"this site accepts at most {s.max_connections} {self.what} connections"
        if self.server.files.full():
            return "this site accepts no more connections now (its open-files limit)"
        if self._per_address.get(address, 0) >= s.max_connections_per_address:
            return (f"this site accepts at most {s.max_connections_per_address} {self.what} connections from "
                    "one address")
        return None

    def opened(self, conn: C, address: str) -> None:
        self._open += 1
        self.server.files.open += 1
        self._per_address[address] = self._per_address.get(address, 0) + 1
        self.server.connections.add(conn)
        self.connections.add(conn)

    async def ended(self, conn: C, address: str, writer: asyncio.StreamWriter, worker: asyncio.Task[Any],
                    deadline: asyncio.TimerHandle) -> None:
        """The connection's reader ended: its worker, session and socket go, and it is counted out."""
        deadline.cancel()
        worker.cancel()
        await asyncio.gather(worker, return_exceptions=True)
        self.server.connections.discard(conn)
        self.connections.discard(conn)
        if not conn.closed:
            conn.closed = True
            self.server.sessions.unregister(conn)
        conn.flush()
        with contextlib.suppress(Exception):
            writer.close()
        self._open -= 1
        self.server.files.open -= 1
        left = self._per_address[address] - 1
        if left:
            self._per_address[address] = left
        else:
            del self._per_address[address]
