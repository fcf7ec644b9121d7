"""Async client library for a site's RCM server (local Unix socket).

    client = await RcmClient.connect(socket_path(mission, "A"), name="chat")
    acc = await client.send(b"hello")            # every site; Accepted(msg_id, seq, order, skipped)
    async for ev in client.events():             # Delivery | StatusChange | Missing(origin, ranges)
        ...
        await client.ack(ev.n)                   # after durably processing a Delivery

``send`` returns once the server accepted the message: it is buffered for
every destination that is not disconnected and will reach them while the
guarantees hold. Destinations that were disconnected are listed in
``Accepted.skipped``; those sites get a ``Missing`` event when they reconnect.
Every client of a server sees every delivery and status event. ``since=(log_id,
n)`` on connect resumes the delivery stream after delivery ``n``; ``log_id`` is
``client.incarnation`` as the server announced it. With a durable server (the
default) numbering survives server restarts and kill -9, so a client that
stores its last processed ``n`` never misses nor repeats a delivery; if the
server's state was lost (durability off), the identity changes, numbering
starts again at 1 and messages may repeat: consumers deduplicate on ``msg_id``.
"""
from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator, Iterable

from . import ranges as _ranges
from . import wire
from .config import Mission
from .server import CLIENT_MAX_FRAME, socket_path

__all__ = ["RcmClient", "Delivery", "StatusChange", "Missing", "Accepted", "RcmError",
           "RcmBackpressure", "RcmUnavailable", "socket_path"]


class RcmError(Exception):
    """The RCM server refused a request."""


class RcmBackpressure(RcmError):
    """The server's outbound buffer is full; try again later."""


class RcmUnavailable(RcmError):
    """The connection to the RCM server is gone (or could not be made)."""


@dataclass(frozen=True, slots=True)
class Accepted:
    msg_id: str
    seq: int
    order: list | None
    skipped: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Delivery:
    n: int
    origin: str
    seq: int
    msg_id: str
    order: list
    late: bool
    payload: bytes


@dataclass(frozen=True, slots=True)
class StatusChange:
    site: str
    status: str


@dataclass(frozen=True, slots=True)
class Missing:
    """Messages of ``origin`` this site will never get, as inclusive ``(first, last)`` seq ranges.

    Ranges are sorted and disjoint; one disconnection may be reported in
    several ``Missing`` events (each fits a frame). ``count`` is the number of
    messages, ``msg_id``s are ``f"{origin}:{seq}"`` for every seq in the ranges.
    """

    origin: str
    ranges: tuple[tuple[int, int], ...]

    @classmethod
    def from_seqs(cls, origin: str, seqs: Iterable[int]) -> "Missing":
        """The event for a collection of sequence numbers."""
        return cls(origin, tuple((a, b) for a, b in _ranges.of_seqs(seqs)))

    @property
    def count(self) -> int:
        """How many messages are missing."""
        return _ranges.count(self.ranges)


Event = Delivery | StatusChange | Missing
_EOF = object()


class RcmClient:
    """A connection to one RCM server."""

    def __init__(self) -> None:
        self.site = ""
        self.sites: list[str] = []
        self.incarnation = 0     # identity of the delivery numbering (the server's log id)
        self.ordering = ""
        self.statuses: dict[str, str] = {}
        self.first_n = 1
        self.last_n = 0
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._refs = itertools.count(1)
        self._waiting: dict[int, asyncio.Future] = {}
        self._events: asyncio.Queue = asyncio.Queue()
        self._task: asyncio.Task | None = None
        self._closed = False
        self._error: str | None = None

    @classmethod
    async def connect(cls, path: str | Path, *, name: str = "client",
                      since: tuple[int, int] | None = None, timeout: float = 10.0) -> "RcmClient":
        """Connect and subscribe; ``since=(incarnation, n)`` resumes after delivery n."""
        self = cls()
        try:
            self._reader, self._writer = await asyncio.wait_for(
                asyncio.open_unix_connection(str(path), limit=CLIENT_MAX_FRAME), timeout)
        except (OSError, asyncio.TimeoutError) as e:
            raise RcmUnavailable(f"cannot reach the RCM server at {path}: {e}") from None
        inc, n = since if since is not None else (None, None)
        self._writer.write(wire.encode_frame(["hello", name, inc, n]))
        decoder = wire.FrameDecoder(CLIENT_MAX_FRAME, tag=str)
        welcome = None
        buffered: list[list] = []
        try:
            while welcome is None:
                data = await asyncio.wait_for(self._reader.read(1 << 16), timeout)
                if not data:
                    raise RcmUnavailable(f"RCM server at {path} closed the connection")
                for f in decoder.feed(data):
                    if welcome is None and f[0] == "welcome":
                        welcome = f
                    elif welcome is None and f[0] == "error":
                        raise RcmError(f"RCM server refused: {f[1]}")
                    else:
                        buffered.append(f)
        except asyncio.TimeoutError:
            self._writer.close()
            raise RcmUnavailable(f"RCM server at {path} did not answer") from None
        except (OSError, wire.FrameError) as e:
            self._writer.close()
            raise RcmUnavailable(f"RCM server at {path}: {e}") from None
        _, self.site, self.sites, self.incarnation, statuses, self.ordering, self.first_n, self.last_n = welcome
        self.statuses = dict(statuses)
        for f in buffered:
            self._dispatch(f)
        self._task = asyncio.get_running_loop().create_task(self._read_loop(decoder))
        return self

    # -- requests -------------------------------------------------------------
    async def send(self, payload: bytes, dests: Iterable[str] | None = None) -> Accepted:
        """Send ``payload`` to ``dests`` (None: every site); returns once accepted."""
        reply = await self._request("send", bytes(payload), list(dests) if dests is not None else None)
        _, _, msg_id, seq, order, skipped = reply
        return Accepted(msg_id, seq, order, tuple(skipped))

    async def ack(self, n: int) -> None:
        """Deliveries up to ``n`` are durably processed; the server may forget them."""
        self._write(["ack", int(n)])

    async def stats(self) -> dict[str, Any]:
        reply = await self._request("stats")
        return reply[2]

    async def events(self) -> AsyncIterator[Event]:
        """Deliveries, status changes and missing notices, in server order.

        Raises ``RcmUnavailable`` when the server connection drops; ends when
        ``close()`` is called.
        """
        while True:
            ev = await self._events.get()
            if ev is _EOF:
                self._events.put_nowait(_EOF)
                if self._closed:
                    return
                raise RcmUnavailable(self._error or "RCM server connection lost")
            yield ev

    async def close(self) -> None:
        self._closed = True
        if self._writer is not None:
            self._writer.close()
            try:
                await self._writer.wait_closed()
            except OSError:
                pass
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        self._events.put_nowait(_EOF)

    # -- internals ------------------------------------------------------------
    def _write(self, frame: list) -> None:
        if self._writer is None or self._writer.is_closing() or self._error:
            raise RcmUnavailable(self._error or "not connected to the RCM server")
        self._writer.write(wire.encode_frame(frame))

    async def _request(self, op: str, *args: Any) -> list:
        ref = next(self._refs)
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        self._waiting[ref] = fut
        try:
            self._write([op, ref, *args])
            return await fut
        finally:
            self._waiting.pop(ref, None)

    def _dispatch(self, f: list) -> None:
        kind = f[0]
        if kind == "d":
            _, n, origin, seq, order, late, payload = f
            self.last_n = n
            self._events.put_nowait(Delivery(n, origin, seq, f"{origin}:{seq}", order, late, payload))
        elif kind == "status":
            self.statuses[f[1]] = f[2]
            self._events.put_nowait(StatusChange(f[1], f[2]))
        elif kind == "missing":
            self._events.put_nowait(Missing(f[1], tuple((int(a), int(b)) for a, b in f[2])))
        elif kind in ("accepted", "stats"):
            fut = self._waiting.get(f[1])
            if fut is not None and not fut.done():
                fut.set_result(f)
        elif kind == "refused":
            fut = self._waiting.get(f[1])
            if fut is not None and not fut.done():
                exc = RcmBackpressure if f[2] == "backpressure" else RcmError
                fut.set_exception(exc(f[3]))
        elif kind == "error":
            self._error = f"RCM server error: {f[1]}"

    async def _read_loop(self, decoder: wire.FrameDecoder) -> None:
        assert self._reader is not None
        try:
            while True:
                data = await self._reader.read(1 << 18)
                if not data:
                    break
                for f in decoder.feed(data):
                    self._dispatch(f)
        except (OSError, wire.FrameError) as e:
            self._error = f"RCM connection failed: {e}"
        finally:
            if self._writer is not None:
                self._writer.close()
            if not self._closed and self._error is None:
                self._error = "RCM server connection lost"
            for fut in self._waiting.values():
                if not fut.done():
                    fut.set_exception(RcmUnavailable(self._error or "RCM connection closed"))
            self._events.put_nowait(_EOF)


def client_for(mission: Mission, site: str, **kw: Any) -> "asyncio.Future[RcmClient]":
    """Shorthand: connect to ``site``'s server of ``mission``."""
    return RcmClient.connect(socket_path(mission, site), **kw)  # type: ignore[return-value]
