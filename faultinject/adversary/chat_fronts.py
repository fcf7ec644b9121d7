"""The chat site's IRC and TAK front ends as ``chat_probe`` drives them: their own reader code, without sockets.

A front end's connection is served by its own tasks (irc_server.py and tak/server.py ``_serve``: the reader
that cuts lines or events, applies the line limits, and closes; and the request worker that hands the
session's chat frames to the server), and those are what a hostile client meets. So the probe runs them as
they are, on a ``FrontLink``: an ``asyncio.StreamReader`` (with the listener's ``limit``) that the probe feeds
a hostile write at a time, and a writer whose transport is a buffer (``LinkTransport``). Nothing is faked
between the bytes and the server but the socket.

``FrontLink.idle`` says when a write has been taken in full: the reader waits for more bytes (or has
ended), no request of the connection waits, and its worker waits for the next. The probe's ``_settle`` runs
the loop until every link is idle (and the server's own tasks done), which is where one input ends.
"""
from __future__ import annotations

import asyncio
import logging
import re
from typing import Any

from chat_server.irc_commands import MAX_INPUT_BYTES, MAX_TAG_BYTES
from chat_server.sessions import Session

from .chat_site import Transport

IRC_LIMIT = MAX_TAG_BYTES + MAX_INPUT_BYTES + 2     # the IRC listener's StreamReader limit (irc_server.py)
IRC_REFUSAL = re.compile(rb"^(?:@\S+ )?:\S+ (?:[459]\d\d|FAIL) ", re.MULTILINE)
"""An IRC line refusing something: a 4xx, 5xx or 9xx numeric (SASL's failures), or a standard reply's FAIL."""
TAK_REFUSAL = re.compile(rb'senderCallsign="RCM-')
"""A TAK event refusing something: a GeoChat from the site's server (XML, or protobuf's xmlDetail)."""


class Refusals(logging.Handler):
    """Counts what a front end logs when it drops a client's bytes or event (at INFO: ``dropped``, ``closing``),
    without letting the records reach any other handler's level."""

    def __init__(self, logger: str) -> None:
        super().__init__(logging.INFO)
        self.count = 0
        self.logger = logging.getLogger(logger)
        self._level = self.logger.level
        self.logger.addHandler(self)
        self.logger.setLevel(logging.INFO)

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        self.count += "dropped" in text or "closing" in text or "not sent" in text

    def remove(self) -> None:
        self.logger.removeHandler(self)
        self.logger.setLevel(self._level)


class LinkTransport(Transport):
    """A front-end connection's transport: what the server writes to the client, kept (``keep``) or counted;
    closing it ends the client's stream, as a socket's close does."""

    def __init__(self, keep: bool, reader: asyncio.StreamReader, refusal: re.Pattern[bytes] = IRC_REFUSAL) -> None:
        super().__init__(keep)
        self.reader = reader
        self.refusal = refusal
        self.closing = False

    def write(self, data: bytes) -> None:
        self.errors += len(self.refusal.findall(data))
        if self.keep:
            self.data.append(data)

    def lines(self) -> bytes:
        """What was written since the last call."""
        data, self.data = b"".join(self.data), []
        return data

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        if not self.closing:
            self.closing = True
            self.reader.feed_eof()

    def abort(self) -> None:
        self.close()


class LinkWriter:
    """The ``asyncio.StreamWriter`` a front end's ``_serve`` is handed: its transport, address and close."""

    def __init__(self, transport: LinkTransport, address: str) -> None:
        self.transport = transport
        self.address = address

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return (self.address, 40000) if name == "peername" else default

    def write(self, data: bytes) -> None:
        self.transport.write(data)

    async def drain(self) -> None:
        return None

    def close(self) -> None:
        self.transport.close()


class FrontLink:
    """One client connection of a front end (``front``: an ``IrcFrontEnd`` or ``TakFrontEnd``) served by its own
    ``_serve`` and request worker (see the module docstring)."""

    def __init__(self, front: Any, address: str, keep: bool = False, limit: int = 2**16,
                 refusal: re.Pattern[bytes] = IRC_REFUSAL) -> None:
        srv = front.server
        self.reader = asyncio.StreamReader(limit=limit)
        self.transport = LinkTransport(keep, self.reader, refusal)
        self._before, self._known = set(srv.tasks._tasks), set(front.connections)
        front._accept(self.reader, LinkWriter(self.transport, address))
        self.front = front
        self.conn: Session | None = None
        self.tasks: frozenset[asyncio.Task[Any]] = frozenset()

    def start(self) -> None:
        """Once the reader ran: its connection, and its reader's and worker's tasks (the probe never waits for
        them: they end with the connection)."""
        srv = self.front.server
        if self.conn is None:
            self.conn = next(iter(set(self.front.connections) - self._known), None)
        self.tasks = frozenset(t for t in set(srv.tasks._tasks) - self._before
                               if getattr(t.get_coro(), "__name__", "") in ("_serve", "_requests"))

    def feed(self, data: bytes) -> None:
        self.reader.feed_data(data)

    def end(self) -> None:
        """The client closes its side."""
        self.transport.close()

    @property
    def ended(self) -> bool:
        return all(t.done() for t in self.tasks)

    def idle(self) -> bool:
        """The write was taken in full: the reader waits for bytes or ended, and the worker waits for a request."""
        if self.ended:
            return True
        waiter = self.reader._waiter                    # type: ignore[attr-defined]
        conn = self.conn
        if waiter is None or waiter.done() or conn is None:
            return False
        requests = conn.requests                        # type: ignore[attr-defined]
        ready = requests._ready._waiter
        return requests.qsize() == 0 and ready is not None and not ready.done()
