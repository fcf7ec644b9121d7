"""Async client library for a site's RCM server (local Unix socket).

    client = await RcmClient.connect(socket_path(mission, "A"), name="chat")
    acc = await client.send(b"hello")            # every site; Accepted(msg_id, seq, order, skipped)
    async for ev in client.events():             # Delivery | StatusChange | Missing(origin, ranges) | Latest
        ...
        await client.ack(ev.n)                   # after durably processing a Delivery
    await client.publish(b"unit-7", b"...", expires_at=time.time() + 60)   # latest wins: positions

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

``publish`` is the latest-wins traffic class (``rcm.latest``, docs/rcm.md "Latest wins
(positions)"): only the newest report of each (origin site, key) travels, a report
superseded while it waits for a slow link is never sent, and reports expire. No
reply; every client of every site gets each kept report as a ``Latest`` event (its
own site's too), and a client that connects gets every live one at once. Reports
are not numbered, not acknowledged and not durable.
"""
from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import Any

from contracts.precedence import DEFAULT as DEFAULT_PRECEDENCE
from contracts.precedence import rank
from rcm import wire
from rcm.wire import local as cw
from rcm.wire.local import CLIENT_MAX_FRAME, Accepted, Delivery, Latest, Missing, StatusChange, socket_path

__all__ = ["RcmClient", "Delivery", "StatusChange", "Missing", "Latest", "Accepted", "RcmError",
           "RcmBackpressure", "RcmUnavailable", "socket_path"]


class RcmError(Exception):
    """The RCM server refused a request."""


class RcmBackpressure(RcmError):
    """The server's outbound buffer is full; try again later."""


class RcmUnavailable(RcmError):
    """The connection to the RCM server is gone (or could not be made)."""


Event = Delivery | StatusChange | Missing | Latest
_EOF = object()


class RcmClient:
    """A connection to one RCM server."""

    def __init__(self) -> None:
        self.site = ""
        self.sites: list[str] = []
        self.incarnation = 0     # identity of the delivery numbering (the server's log id)
        self.ordering = ""
        self.statuses: dict[str, str] = {}          # site -> connected | suspected | disconnected
        self.via: dict[str, str | None] = {}         # site -> next hop when only relays reach it
        self.caps: frozenset[str] = frozenset()     # what the server takes beyond the first release (cw.CAPS)
        self.first_n = 1
        self.last_n = 0
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._refs = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[Any]] = {}
        self._events: asyncio.Queue[Any] = asyncio.Queue()
        self._task: asyncio.Task[Any] | None = None
        self._closed = False
        self._error: str | None = None

    @classmethod
    async def connect(cls, path: str | Path, *, name: str = "client",
                      since: tuple[int, int] | None = None, timeout: float = 10.0) -> RcmClient:
        """Connect and subscribe; ``since=(incarnation, n)`` resumes after delivery n."""
        self = cls()
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_unix_connection(str(path), limit=CLIENT_MAX_FRAME), timeout)
        except (TimeoutError, OSError) as e:
            raise RcmUnavailable(f"cannot reach the RCM server at {path}: {e}") from None
        self._reader, self._writer = reader, writer
        writer.write(cw.hello(name, since))
        decoder = cw.decoder()
        welcome: cw.Welcome | None = None
        buffered: list[cw.Event] = []
        try:
            while welcome is None:
                data = await asyncio.wait_for(reader.read(1 << 16), timeout)
                if not data:
                    raise RcmUnavailable(f"RCM server at {path} closed the connection")
                for f in decoder.feed(data):
                    ev = cw.decode_event(f)
                    if welcome is None and isinstance(ev, cw.Welcome):
                        welcome = ev
                    elif welcome is None and isinstance(ev, cw.ServerError):
                        raise RcmError(f"RCM server refused: {ev.message}")
                    elif ev is not None:
                        buffered.append(ev)
        except TimeoutError:
            writer.close()
            raise RcmUnavailable(f"RCM server at {path} did not answer") from None
        except (OSError, wire.FrameError) as e:
            writer.close()
            raise RcmUnavailable(f"RCM server at {path}: {e}") from None
        self.site, self.sites, self.incarnation = welcome.site, welcome.sites, welcome.incarnation
        self.ordering, self.first_n, self.last_n = welcome.ordering, welcome.first_n, welcome.last_n
        self.statuses = dict(welcome.statuses)
        self.via = dict(welcome.via)
        self.caps = frozenset(welcome.caps)
        for ev in buffered:
            self._dispatch(ev)
        self._task = asyncio.get_running_loop().create_task(self._read_loop(decoder))
        return self

    # -- requests -------------------------------------------------------------
    async def send(self, payload: bytes, dests: Iterable[str] | None = None, *,
                   precedence: str = DEFAULT_PRECEDENCE, expires_at: float | None = None,
                   within: cw.Confine = True) -> Accepted:
        """Send ``payload`` to ``dests`` (None: every site) at ``precedence``; returns once accepted.

        A send to a subset of the sites is *confined* (docs/relay.md, "Confinement"): its content travels only
        among its destinations and this site, relays and repair included (``within=True``, the default), or
        among those and the sites ``within`` names, or anywhere (``within=False``: data that is no secret of its
        destinations).

        ``expires_at`` (seconds since the epoch): after it the message is no longer sent, relayed or
        repaired anywhere; sites still learn that it existed (a ``Delivery`` with ``expired=True`` and no
        payload). A time already past is refused by the server (``RcmError``); a non-finite one is a
        ``ValueError`` here."""
        rank(precedence)             # a ValueError here, not a refusal from the server
        ref = next(self._refs)
        if within is not True and within is not False:
            within = tuple(within)
        reply = await self._request(ref, cw.send(ref, bytes(payload), list(dests) if dests is not None else None,
                                                 precedence, expires_at, within))
        assert isinstance(reply, Accepted)
        return reply

    async def publish(self, key: bytes, payload: bytes, *, expires_at: float) -> None:
        """Publish the newest report of ``key`` (at most 64 bytes; ``payload`` at most 1024), void after
        ``expires_at`` (seconds since the epoch; at most an hour ahead, later is clamped). Fire and forget:
        ``ValueError`` here for a bad size, no reply from the server."""
        self._write(cw.publish(bytes(key), bytes(payload), expires_at))

    async def will(self, payload: bytes | None, dests: Iterable[str] | None = None) -> bool:
        """Leave ``payload`` for the server to send to ``dests`` (None: every site) as a routine message of this
        site once this client's connection ends, however it ends, while the server runs (MQTT's last will);
        None takes it back, a later will replaces it. A payload over ``max_payload_bytes`` or an unknown site
        is a bad request: the server closes the connection. Fire and forget; False, and nothing said, to a
        server of an earlier release, which keeps no will (its welcome does not list it)."""
        if "will" not in self.caps:
            return False
        self._write(cw.will(bytes(payload) if payload is not None else None,
                            list(dests) if dests is not None else None))
        return True

    async def ack(self, n: int) -> None:
        """Deliveries up to ``n`` are durably processed; the server may forget them."""
        self._write(cw.ack(n))

    async def stats(self) -> dict[str, Any]:
        ref = next(self._refs)
        reply = await self._request(ref, cw.stats_request(ref))
        assert isinstance(reply, dict)
        return reply

    def status(self, site: str) -> StatusChange:
        """``site``'s current status and, when only relays reach it, the next hop."""
        return StatusChange(site, self.statuses[site], self.via.get(site))

    async def events(self) -> AsyncIterator[Event]:
        """Deliveries, status changes, missing notices and latest-wins reports, in server order.

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

    def oldest_request(self) -> int | None:
        """The reference of the request that has waited longest for its answer (None: every one answered);
        the same one for as long as it waits (a caller times it: a server stopped or stuck on its disk keeps
        its connection and never answers)."""
        return min(self._waiting) if self._waiting else None

    def backlog(self) -> int:
        """Events received and not yet taken from ``events()`` (a reader that knows more are waiting can
        batch its work over them)."""
        return self._events.qsize()

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
    def _write(self, data: bytes) -> None:
        if self._writer is None or self._writer.is_closing() or self._error:
            raise RcmUnavailable(self._error or "not connected to the RCM server")
        self._writer.write(data)

    async def _request(self, ref: int, data: bytes) -> Any:
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting[ref] = fut
        try:
            self._write(data)
            return await fut
        finally:
            self._waiting.pop(ref, None)

    def _dispatch(self, ev: cw.Event | None) -> None:
        if isinstance(ev, Delivery):
            self.last_n = ev.n
            self._events.put_nowait(ev)
        elif isinstance(ev, StatusChange):
            self.statuses[ev.site] = ev.status
            self.via[ev.site] = ev.via
            self._events.put_nowait(ev)
        elif isinstance(ev, (Missing, Latest)):
            self._events.put_nowait(ev)
        elif isinstance(ev, cw.Reply):
            fut = self._waiting.get(ev.ref)
            if fut is not None and not fut.done():
                if isinstance(ev.value, cw.Refusal):
                    exc = RcmBackpressure if ev.value.code == "backpressure" else RcmError
                    fut.set_exception(exc(ev.value.message))
                else:
                    fut.set_result(ev.value)
        elif isinstance(ev, cw.ServerError):
            self._error = f"RCM server error: {ev.message}"

    async def _read_loop(self, decoder: wire.FrameDecoder) -> None:
        assert self._reader is not None
        try:
            while True:
                data = await self._reader.read(1 << 18)
                if not data:
                    break
                for f in decoder.feed(data):
                    self._dispatch(cw.decode_event(f))
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

