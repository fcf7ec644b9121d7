"""Link-emulating TCP proxy: one directed inter-site link (site A dials B through it).

Theory of operation
-------------------
Kernel netem is not available to us, so an inter-site link is a user-space
proxy. A :class:`LinkProxy` listens on the address site A dials for B
(``[sites.A.dial] B``) and forwards every accepted connection to B's real RCM
address. "Forward" is the direction of the dialler's bytes (A to B),
"reverse" the answers (B to A); each direction has its own :class:`Shape`
(delay, jitter, bandwidth cap, queue limit) and its own shared
:class:`Shaper`, because the bandwidth of a link is shared by all its
connections.

Each connection runs four tasks: per direction, a reader (socket, then the
shaper, then a queue) and a writer (waits for the release time, then the
socket). All timing comes from the sans-IO shaper in ``faultinject/shaping.py``;
this module only moves bytes and sleeps.

Link modes (:class:`LinkMode`):

- ``up``: forward with the link's shape.
- ``reset``: every live connection is reset (SO_LINGER 0, then abort: the ends
  get an RST), and every new connection is accepted and reset at once.
- ``blackhole``: connections stay open and nothing flows either way. With
  ``BlackholePolicy.DISCARD`` bytes read while blackholed (or due for release
  while blackholed) are dropped, as a fade loses them; with ``BUFFER`` they are
  held (bounded by the queue limit, then back-pressure) and delivered when the
  link comes back. A connection accepted while blackholed is held open and
  only dialled through once the link is up again. An EOF is held, not lost.

A reset or error on one end of a connection resets the other end too, as a
real path would carry the RST.
"""
from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
import socket
import struct
import time
from dataclasses import dataclass
from typing import Any

from faultinject.shaping import (
    BlackholePolicy,
    ConnectionCounters,
    DirectionCounters,
    LinkEvent,
    LinkMode,
    Shape,
    Shaper,
    segments,
)

FORWARD = "forward"
REVERSE = "reverse"
DIRECTIONS = (FORWARD, REVERSE)
READ_SIZE = 64 * 1024
RESET_WAIT = 5.0  # seconds set_mode(RESET) waits for connection tasks to wind down
CLOSE_WAIT = 1.0  # seconds a closing connection may take to flush before it is aborted

HostPort = tuple[str, int]


class LinkError(RuntimeError):
    """A link cannot be started or controlled as asked; the message says why."""


def _host_port(addr: Any) -> HostPort:
    """(host, port) from an ``contracts.mission.Address`` or a tuple."""
    if isinstance(addr, tuple):
        return (str(addr[0]), int(addr[1]))
    return (str(addr.host), int(addr.port))


def _rst(writer: asyncio.StreamWriter | None) -> None:
    """Close ``writer``'s socket with an RST (SO_LINGER 0, then abort)."""
    if writer is None:
        return
    transport = writer.transport
    if transport.is_closing():
        transport.abort()
        return
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


@dataclass(frozen=True, slots=True)
class LinkStats:
    """A snapshot of a proxy's counters."""

    name: str
    mode: LinkMode
    forward: DirectionCounters
    reverse: DirectionCounters
    connections: ConnectionCounters

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "mode": self.mode.value, "forward": self.forward.as_dict(),
                "reverse": self.reverse.as_dict(), "connections": self.connections.as_dict()}


class _Flow:
    """Chunks of one direction of one connection, between its reader and its writer."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[tuple[float, bytes | None]] = asyncio.Queue()
        self.pending = 0  # bytes queued and not yet written
        self.room = asyncio.Event()

    def put(self, release: float, data: bytes | None) -> None:
        if data:
            self.pending += len(data)
        self.queue.put_nowait((release, data))

    def done(self, nbytes: int) -> None:
        self.pending -= nbytes
        self.room.set()


class _Connection:
    """One client connection through a proxy, and its dialled target connection."""

    def __init__(self, proxy: LinkProxy, cid: int, client_reader: asyncio.StreamReader,
                 client_writer: asyncio.StreamWriter) -> None:
        self.proxy = proxy
        self.cid = cid
        self.client_reader = client_reader
        self.client_writer = client_writer
        self.target_writer: asyncio.StreamWriter | None = None
        self.tasks: list[asyncio.Task[None]] = []
        self.flows: dict[str, _Flow] = {}
        self.was_reset = False
        self.counted_active = False

    def reset(self) -> None:
        """Reset both ends now (the link went down by reset, or one end failed)."""
        self.was_reset = True
        _rst(self.client_writer)
        _rst(self.target_writer)
        for t in self.tasks:
            t.cancel()

    async def run(self) -> None:
        p = self.proxy
        try:
            await self._run()
        except (ConnectionError, OSError):
            self.reset()
        finally:
            for t in self.tasks:
                t.cancel()
            if self.tasks:
                await asyncio.gather(*self.tasks, return_exceptions=True)
            await self._close_quietly()
            for d, flow in self.flows.items():
                p._counters[d].bytes_lost += max(0, flow.pending)      # read, never written: gone with it
            if self.counted_active:
                p._conn_counts.active -= 1
            for d in DIRECTIONS:
                p._shapers[d].forget(self.cid)

    async def _close_quietly(self) -> None:
        """Close both ends (FIN after flushing); an end that will not take its data is aborted."""
        for w in (self.client_writer, self.target_writer):
            if w is not None and not w.transport.is_closing():
                w.close()
        for w in (self.client_writer, self.target_writer):
            if w is None:
                continue
            try:
                await asyncio.wait_for(w.wait_closed(), CLOSE_WAIT)
            except TimeoutError:
                w.transport.abort()  # a receiver that does not read must not hold up a stop
            except (ConnectionError, OSError):
                pass

    def _refuse(self) -> None:
        """Reset a connection the link cannot carry (down by reset), unless already reset."""
        if not self.was_reset:
            self.proxy._conn_counts.refused += 1
        self.reset()

    def _cut(self) -> bool:
        """This connection was reset, or its link is down by reset now (the mode may change at any await)."""
        return self.was_reset or self.proxy.mode is LinkMode.RESET

    async def _run(self) -> None:
        p = self.proxy
        self.counted_active = True
        p._conn_counts.active += 1
        if p.mode is LinkMode.RESET:
            self._refuse()
            return
        early = bytearray()
        while p.mode is LinkMode.BLACKHOLE and not self.was_reset:
            # The SYN cannot cross a fade: dial when it ends. Meanwhile watch the
            # client: one that gives up (EOF) before the fade ends never had a
            # connection on a real path, so nothing of it may reach the target.
            reading = asyncio.ensure_future(self.client_reader.read(READ_SIZE))
            clearing = asyncio.ensure_future(p._clear.wait())
            done, _ = await asyncio.wait({reading, clearing}, return_when=asyncio.FIRST_COMPLETED)
            clearing.cancel()
            if reading in done:
                data = reading.result()
                if not data:
                    p._conn_counts.abandoned += 1
                    return
                early += data
            else:
                reading.cancel()
                await asyncio.gather(reading, return_exceptions=True)
        if self._cut():
            self._refuse()
            return
        try:
            target_reader, target_writer = await asyncio.open_connection(*p.target)
        except OSError:
            p._conn_counts.connect_failures += 1
            self.reset()
            return
        self.target_writer = target_writer
        if self._cut():  # went down while we dialled
            self._refuse()
            return
        fwd, rev = _Flow(), _Flow()
        self.flows = {FORWARD: fwd, REVERSE: rev}
        if early:
            counters, shaper = p._counters[FORWARD], p._shapers[FORWARD]
            counters.bytes_in += len(early)
            counters.chunks_in += 1
            now = asyncio.get_running_loop().time()
            for seg in segments(bytes(early), shaper.shape):
                fwd.put(shaper.submit(now, len(seg), self.cid), seg)
        self.tasks = [
            asyncio.create_task(self._read_side(self.client_reader, fwd, FORWARD)),
            asyncio.create_task(self._write_side(fwd, target_writer, FORWARD)),
            asyncio.create_task(self._read_side(target_reader, rev, REVERSE)),
            asyncio.create_task(self._write_side(rev, self.client_writer, REVERSE)),
        ]
        done, _ = await asyncio.wait(self.tasks, return_when=asyncio.FIRST_EXCEPTION)
        if self.was_reset:
            return
        failed = [t for t in done if not t.cancelled() and t.exception() is not None]
        if failed:
            self.reset()  # one end failed: carry the reset to the other end
        p._conn_counts.closed += 1

    async def _wait_for_room(self, flow: _Flow, shaper: Shaper) -> None:
        loop = asyncio.get_running_loop()
        while True:
            now = loop.time()
            at = shaper.room_at(now)
            if at > now:
                await asyncio.sleep(at - now)
                continue
            if flow.pending < shaper.shape.queue_bytes:
                return
            flow.room.clear()
            await flow.room.wait()

    async def _read_side(self, reader: asyncio.StreamReader, flow: _Flow, d: str) -> None:
        p = self.proxy
        loop = asyncio.get_running_loop()
        counters = p._counters[d]
        shaper = p._shapers[d]
        while True:
            await self._wait_for_room(flow, shaper)
            # Never read more than the queue may hold, so the limit is a real bound.
            data = await reader.read(min(READ_SIZE, shaper.shape.queue_bytes))
            if not data:
                flow.put(loop.time(), None)
                return
            counters.bytes_in += len(data)
            counters.chunks_in += 1
            if p.mode is LinkMode.BLACKHOLE and p.policy is BlackholePolicy.DISCARD:
                counters.bytes_dropped += len(data)
                counters.chunks_dropped += 1
                continue
            now = loop.time()
            for seg in segments(data, shaper.shape):
                flow.put(shaper.submit(now, len(seg), self.cid), seg)

    async def _write_side(self, flow: _Flow, writer: asyncio.StreamWriter, d: str) -> None:
        p = self.proxy
        loop = asyncio.get_running_loop()
        counters = p._counters[d]
        while True:
            release, data = await flow.queue.get()
            wait = release - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            if data is None:
                while p.mode is LinkMode.BLACKHOLE:  # a FIN is retransmitted, not lost
                    await p._clear.wait()
                if writer.can_write_eof():
                    writer.write_eof()
                return
            if p.mode is LinkMode.BLACKHOLE:
                if p.policy is BlackholePolicy.DISCARD:
                    counters.bytes_dropped += len(data)
                    counters.chunks_dropped += 1
                    flow.done(len(data))
                    continue
                while p.mode is LinkMode.BLACKHOLE:
                    await p._clear.wait()
            writer.write(data)
            await writer.drain()
            counters.bytes_out += len(data)
            counters.chunks_out += 1
            flow.done(len(data))


class LinkProxy:
    """One directed link: listens on ``listen``, forwards each connection to ``target``.

    Use as ``async with LinkProxy(...) as proxy:`` or ``await start()`` /
    ``await close()``. ``listen`` may use port 0; :attr:`address` is the bound one.
    All randomness (jitter) comes from ``seed``.
    """

    def __init__(self, listen: Any, target: Any, *, name: str | None = None,
                 forward: Shape | None = None, reverse: Shape | None = None,
                 policy: BlackholePolicy = BlackholePolicy.DISCARD, seed: int | str = 0,
                 mode: LinkMode = LinkMode.UP) -> None:
        self.listen = _host_port(listen)
        self.target = _host_port(target)
        self.name = name or f"{self.listen[0]}:{self.listen[1]}->{self.target[0]}:{self.target[1]}"
        rng = random.Random(seed)
        self._shapers = {FORWARD: Shaper(forward or Shape(), random.Random(rng.getrandbits(64))),
                         REVERSE: Shaper(reverse or Shape(), random.Random(rng.getrandbits(64)))}
        self._counters = {FORWARD: DirectionCounters(), REVERSE: DirectionCounters()}
        self._conn_counts = ConnectionCounters()
        self.policy = BlackholePolicy(policy)
        self._mode = LinkMode(mode)
        self._clear = asyncio.Event()
        if self._mode is not LinkMode.BLACKHOLE:
            self._clear.set()
        self._server: asyncio.Server | None = None
        self._connections: dict[int, _Connection] = {}
        self._conn_tasks: set[asyncio.Task[None]] = set()
        self._ids = itertools.count(1)
        self._address: HostPort | None = None
        self.history: list[LinkEvent] = []

    # -- lifecycle ----------------------------------------------------------------
    async def start(self) -> None:
        """Bind and start accepting; raises ``LinkError`` naming the address on failure."""
        if self._server is not None:
            raise LinkError(f"link {self.name} already started")
        try:
            self._server = await asyncio.start_server(self._accept, self.listen[0], self.listen[1])
        except OSError as e:
            raise LinkError(f"link {self.name}: cannot listen on {self.listen[0]}:{self.listen[1]}: "
                            f"{e.strerror or e}") from None
        sockname = self._server.sockets[0].getsockname()
        self._address = (sockname[0], sockname[1])
        self._record("start", self._mode.value)

    async def close(self) -> None:
        """Stop listening and close every connection (FIN, not RST)."""
        if self._server is None:
            return
        server, self._server = self._server, None
        server.close()
        for task in list(self._conn_tasks):
            task.cancel()
        if self._conn_tasks:
            await asyncio.gather(*self._conn_tasks, return_exceptions=True)
        await server.wait_closed()
        self._record("stop", self._mode.value)

    async def __aenter__(self) -> LinkProxy:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def address(self) -> HostPort:
        """The bound listening address."""
        if self._address is None:
            raise LinkError(f"link {self.name} is not started")
        return self._address

    @property
    def running(self) -> bool:
        return self._server is not None

    # -- control ------------------------------------------------------------------
    @property
    def mode(self) -> LinkMode:
        return self._mode

    async def set_mode(self, mode: LinkMode | str, *, policy: BlackholePolicy | str | None = None) -> None:
        """Switch the link to ``mode``; for ``reset``, returns once live connections are gone."""
        mode = LinkMode(mode)
        if policy is not None:
            self.policy = BlackholePolicy(policy)
        if mode is self._mode:
            return
        self._mode = mode
        self._record("mode", mode.value)
        if mode is LinkMode.BLACKHOLE:
            self._clear.clear()
        else:
            self._clear.set()
        if mode is LinkMode.RESET:
            live = list(self._connections.values())
            for conn in live:
                if not conn.was_reset:  # a connection accepted before the link went down
                    self._conn_counts.reset_by_link += 1
                conn.reset()
            tasks = [t for t in self._conn_tasks if not t.done()]
            if tasks:
                await asyncio.wait(tasks, timeout=RESET_WAIT)

    async def up(self) -> None:
        await self.set_mode(LinkMode.UP)

    async def reset(self) -> None:
        await self.set_mode(LinkMode.RESET)

    async def blackhole(self, policy: BlackholePolicy | str | None = None) -> None:
        await self.set_mode(LinkMode.BLACKHOLE, policy=policy)

    def shape(self, direction: str) -> Shape:
        return self._shapers[self._direction(direction)].shape

    def set_shape(self, direction: str, shape: Shape) -> None:
        """Reshape one direction (``"forward"`` or ``"reverse"``); applies to new chunks."""
        d = self._direction(direction)
        self._shapers[d].shape = shape
        self._record("shape", {"direction": d, "shape": shape.as_dict()})

    @staticmethod
    def _direction(direction: str) -> str:
        if direction not in DIRECTIONS:
            raise ValueError(f"direction {direction!r} must be 'forward' or 'reverse'")
        return direction

    # -- observation ----------------------------------------------------------------
    def stats(self) -> LinkStats:
        """A copy of the counters now."""
        return LinkStats(
            name=self.name, mode=self._mode,
            forward=DirectionCounters(**self._counters[FORWARD].as_dict()),
            reverse=DirectionCounters(**self._counters[REVERSE].as_dict()),
            connections=ConnectionCounters(**self._conn_counts.as_dict()),
        )

    def describe(self) -> dict[str, Any]:
        """JSON-ready state: addresses, mode, policy, shapes, counters."""
        return {
            "name": self.name,
            "listen": f"{self.address[0]}:{self.address[1]}" if self._address else None,
            "target": f"{self.target[0]}:{self.target[1]}",
            "mode": self._mode.value,
            "policy": self.policy.value,
            "shape": {d: self._shapers[d].shape.as_dict() for d in DIRECTIONS},
            "stats": self.stats().as_dict(),
        }

    def _record(self, kind: str, value: Any) -> None:
        try:
            t = asyncio.get_running_loop().time()
        except RuntimeError:
            t = time.monotonic()
        self.history.append(LinkEvent(time.time(), t, self.name, kind, value))

    # -- connections --------------------------------------------------------------
    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # A plain callback (not a coroutine): we own the connection task, so
        # cancelling it on close() is not reported as an error by asyncio.
        self._conn_counts.accepted += 1
        cid = next(self._ids)
        conn = _Connection(self, cid, reader, writer)
        self._connections[cid] = conn
        task = asyncio.get_running_loop().create_task(conn.run(), name=f"{self.name}#{cid}")
        self._conn_tasks.add(task)

        def _done(t: asyncio.Task[None]) -> None:
            self._conn_tasks.discard(t)
            self._connections.pop(cid, None)

        task.add_done_callback(_done)


if __name__ == "__main__":
    from faultinject.proxy_cli import main

    raise SystemExit(main())
