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

``FrontClients`` (a part of ``ChatProbe``) holds the clients on those links: mallory's connection to each
front end, opened again when the server closed it, and alice's two, with what each must have been sent.
"""
from __future__ import annotations

import asyncio
import logging
import random
import re
from collections.abc import Awaitable, Callable
from typing import Any

from chat_server.irc_commands import MAX_INPUT_BYTES, MAX_TAG_BYTES
from chat_server.irc_server import IrcFrontEnd
from chat_server.server import ChatServer
from chat_server.sessions import Session
from chat_server.tak.cot import CotError, CotEvent, Point, decode_proto, decode_xml, encode_xml
from chat_server.tak.server import TakFrontEnd
from chat_server.tak.stream import Frame, StreamReader

from .chat_requests import ROOMS
from .chat_site import HONEST, HONEST_PASSWORD, HONEST_ROOM, HOSTILE, PASSWORD, Transport
from .irc_lines import IrcLine
from .tak_events import TakBytes

IRC_LIMIT = MAX_TAG_BYTES + MAX_INPUT_BYTES + 2     # the IRC listener's StreamReader limit (irc_server.py)
IRC_REFUSAL = re.compile(rb"^(?:@\S+ )?:\S+ (?:[459]\d\d|FAIL) ", re.MULTILINE)
"""An IRC line refusing something: a 4xx, 5xx or 9xx numeric (SASL's failures), or a standard reply's FAIL."""
TAK_REFUSAL = re.compile(rb'senderCallsign="RCM-')
"""A TAK event refusing something: a GeoChat from the site's server (XML, or protobuf's xmlDetail)."""
REOPEN_WAIT = 10.0              # virtual seconds before a new connection: the user's flood limit's burst refills
SERVER_NAME = "A.irc.probe"     # the IRC front end's server name at site A of the probe's mission
CONTROL = re.compile(rb"[\x00-\x1f\x7f]")     # (no line the IRC front end writes holds one but its CR LF)
TAK_ROOM = "all"                # the room a TAK client joins at log-in (All Chat Rooms), alice's too: everyone's


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
                               if getattr(t.get_coro(), "__name__", "") in ("_serve", "work_requests"))

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


class FrontClients:
    """alice's and mallory's clients on the IRC and TAK front ends of the probe's site: opening, feeding and
    ending their links, and what alice's clients must have been sent (``ChatProbe``'s, which owns the site:
    ``server``, ``links``, the virtual clock ``now``, ``rng`` and ``_settle``)."""

    server: ChatServer | None
    links: dict[str, FrontLink]
    now: float
    rng: random.Random
    _settle: Callable[[], Awaitable[None]]

    def _ping_alice_on_fronts(self, k: int) -> None:
        """alice's IRC and TAK clients ask for an answer (read with her say's lines by ``_alice_on_fronts``)."""
        if "alice-irc" in self.links:
            self.links["alice-irc"].feed(f"PING :h{k}\r\n".encode())
        if "alice-tak" in self.links:
            self.links["alice-tak"].feed(tak_event("t-x-c-t", f"ping-h{k}", self.now))

    def _alice_on_fronts(self, k: int, text: str) -> str:
        """What alice's IRC and TAK clients miss, if anything: the PONG and her say's line; the ping's answer."""
        irc, tak = self.links.get("alice-irc"), self.links.get("alice-tak")
        if irc is not None:
            lines = irc.transport.lines()
            if irc.ended or f"PONG {SERVER_NAME} h{k}".encode() not in lines:
                return f"alice's IRC client got no PONG: {lines[-300:]!r}"
            control = CONTROL.search(lines.replace(b"\r\n", b""))
            if control is not None:
                return f"a control character reached alice's IRC client: {lines[control.start() - 100:][:200]!r}"
            if f"PRIVMSG #{HONEST_ROOM} :{text}\r\n".encode() not in lines:
                return f"alice's IRC client was not shown her say: {lines[-300:]!r}"
            stray = [line for line in lines.split(b"\r\n") if f" #{HONEST_ROOM} ".encode() in line
                     and not line.startswith((f":{HONEST}!".encode(), f":{SERVER_NAME} ".encode()))]
            if stray:
                return f"a line of another user reached alice's IRC client in #{HONEST_ROOM}: {stray[0][:200]!r}"
        if tak is not None:
            events = tak.transport.lines()
            if tak.ended or b'type="t-x-c-t-r"' not in events:
                return f"alice's TAK client got no answer to its ping: {events[-300:]!r}"
            for got in StreamReader().feed(events):         # her client reads every event it is sent
                try:
                    if not isinstance(got, Frame):
                        raise CotError(f"{got}")
                    decode_proto(got.data) if got.proto else decode_xml(got.data)
                except CotError as e:
                    return f"alice's TAK client could not read an event ({e}): {getattr(got, 'data', b'')[:300]!r}"
        return ""

    # -- the front ends ---------------------------------------------------------------------------------
    async def _ready_front(self, front: str) -> None:
        """The front ends with alice on them (at the first front-end input on a site), and mallory's connection
        to ``front`` ("irc" or "tak") open, registered, in its rooms, and at an event boundary."""
        srv = self.server
        assert srv is not None
        if srv.irc_front is None:
            srv.irc_front = IrcFrontEnd(srv, "127.0.0.1", 0)
            srv.tak_front = TakFrontEnd(srv, "127.0.0.1", 0)
            await self._open_irc("alice-irc", HONEST, HONEST_PASSWORD, (HONEST_ROOM,), keep=True)
            await self._open_tak("alice-tak", HONEST, keep=True)
        link = self.links.get(front)
        if link is not None and (link.ended or link.conn is None or link.conn.user != HOSTILE
                                 or front == "tak" and not at_boundary(link)):
            await self._end_link(front)
            link = None
        if link is None:
            self.now += REOPEN_WAIT         # (mallory's last connection may have been closed for a flood)
            if front == "irc":
                caps = self.rng.random() < 0.7
                await self._open_irc("irc", HOSTILE, PASSWORD, (*ROOMS[:4], TAK_ROOM), caps=caps)
            else:
                await self._open_tak("tak", HOSTILE)

    async def _open_link(self, name: str, front: Any, address: str, data: bytes, keep: bool = False) -> FrontLink:
        irc = front is not None and self.server is not None and front is self.server.irc_front
        link = FrontLink(front, address, keep=keep, limit=IRC_LIMIT if irc else 2**16,
                         refusal=IRC_REFUSAL if irc else TAK_REFUSAL)
        self.links[name] = link
        await asyncio.sleep(0)              # its reader's task opens the connection and starts its worker
        link.start()
        link.feed(data)
        await self._settle()
        return link

    async def _open_irc(self, name: str, user: str, password: str, rooms: tuple[str, ...], keep: bool = False,
                        caps: bool = False) -> FrontLink:
        assert self.server is not None
        lines = [f"PASS :{password}", f"NICK {user}", f"USER {user} 0 * :{user}",
                 f"JOIN {','.join('#' + r for r in rooms)}"]
        if caps:
            lines[:0] = ["CAP LS 302", "CAP REQ :batch draft/chathistory echo-message message-tags server-time"]
            lines.insert(-1, "CAP END")
        address = "10.0.0.66" if user == HOSTILE else "10.0.0.7"
        link = await self._open_link(name, self.server.irc_front, address,
                                     "".join(line + "\r\n" for line in lines).encode(), keep)
        if link.conn is None or link.conn.user != user:
            raise AssertionError(f"{user} could not register on the IRC front end: {link.transport.lines()[-300:]!r}")
        link.transport.lines()
        return link

    async def _open_tak(self, name: str, user: str, keep: bool = False) -> FrontLink:
        assert self.server is not None
        address = "10.0.0.66" if user == HOSTILE else "10.0.0.7"
        link = await self._open_link(name, self.server.tak_front, address,
                                     tak_event("a-f-G-U-C", f"ANDROID-{user}", self.now, callsign=user), keep)
        if link.conn is None or link.conn.user != user:
            raise AssertionError(f"{user} could not log in on the TAK front end: {link.transport.lines()[-300:]!r}")
        link.transport.lines()
        return link

    async def _end_link(self, name: str) -> None:
        """The client of a front-end connection closes it; the server ends it."""
        link = self.links[name]
        link.end()
        await self._settle()
        del self.links[name]

    async def _apply_front(self, item: IrcLine | TakBytes) -> Session | None:
        """One write of the hostile client on its IRC or TAK connection (a connection of its own for
        ``fresh`` lines, ended after them); the connection it came on."""
        assert self.server is not None
        if isinstance(item, IrcLine) and item.fresh:
            link = await self._open_link("irc-fresh", self.server.irc_front, "10.0.0.66", item.data)
            await self._end_link("irc-fresh")
            return link.conn
        link = self.links["irc" if isinstance(item, IrcLine) else "tak"]
        link.feed(item.data)
        await self._settle()
        return link.conn


def tak_event(kind: str, uid: str, now: float, callsign: str | None = None) -> bytes:
    """A CoT event as a TAK client writes it: a position report with ``callsign``, a ping."""
    detail = CotEvent(kind, uid, now, now, now + 60.0, Point(51.5, -0.1), callsign=callsign)
    return encode_xml(detail)


def at_boundary(link: FrontLink) -> bool:
    """The TAK connection's stream is between events (an input may leave it inside one: the next is read from a new
    connection, as the client would have to)."""
    stream = getattr(link.conn, "stream", None)
    return stream is not None and not (stream._buf or stream._skip_bytes or stream._skip_xml or stream.broken)
