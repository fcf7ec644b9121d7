"""The TAK listener of a chat server: the I/O edge around ``session.TakSession``.

Theory of operation
-------------------
Each accepted connection becomes a :class:`TakConnection`, a chat session
like a WebSocket or IRC one (irc_server.py is the model): the server
registers it, fans room messages and positions out to it, counts it against
``max_sessions_per_user`` and ``outbound_queue_bytes``; frames the server
writes to it go through the session's translator and leave as CoT events,
encoded in the framing the client speaks (XML, or TAK protocol v1 once it
sent protobuf or negotiated it). Its bytes are cut into events by
``stream.StreamReader`` and decoded by cot.py; a bad, oversized or unknown
event is logged and dropped and the connection stays; only a stream that
cannot be resynchronised is closed. Every decoded event is one client frame
for the rate limits (``ClientFrames.admit``: per connection and per user, a
flood closes the connection), and so is every event that fails to decode and
every run of bytes dropped. ``max_connections`` and
``max_connections_per_address`` count TAK connections on their own, as IRC's
do; a connection that has not logged in within ``hello_timeout`` is closed.

Log-in: with ``tls`` on, the listener requires a client certificate signed
by the mission CA (mutual TLS) and the account is its CN; a site's
certificate (OU not ``user``, see deploy/user_certs.py) is refused. Without TLS the
account is the callsign the client announces (labs only: anyone who can
connect can claim any callsign; a plaintext TAK address off loopback is
refused at start unless ``[rcm] insecure_plaintext = true``). Either way the
account must exist at the site; the front end then logs it in with
``ClientFrames.verified_login`` (handlers.py): the session slots, welcome and
registration of every client's ``hello``, with no password and no session
token (none is minted, so none can outlive the connection).

Each connection is served by two of the server's tasks (tasks.py): a reader
and a worker; its chat requests go to the server one at a time, in order,
from the reader at once while none is being handled and from the worker
while one is (front_end.py ``Requests``: at most ``TAK_REQUESTS_MAX`` wait;
then its bytes wait in TCP).
"""
from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import ssl
from typing import TYPE_CHECKING, Any

from contracts.mission import MissionError, is_loopback

from ..config import server_ssl_context
from ..front_end import (
    LISTEN_BACKLOG,
    Admitted,
    Requests,
    Signal,
    handle_now,
    peer_address,
    wait_for_room,
    work_requests,
)
from ..front_end_labels import LabelView
from ..irc_server import ws_frame_payload
from ..sessions import Session
from .cot import CotError, decode_proto, decode_xml, encode_proto, encode_xml
from .rooms import RoomMap
from .session import Close, Emit, Login, Note, Request, TakSession, UseProto
from .stream import Broken, Dropped, Frame, StreamReader

if TYPE_CHECKING:
    from ..server import ChatServer

log = logging.getLogger("chat_server.tak")
TAK_REQUESTS_MAX = 64          # chat requests of one TAK connection waiting for the server; then its bytes wait
USER_OU = "user"               # a user's client certificate says so (deploy/user_certs.py); a site's does not
READ_BYTES = 64 * 1024


def certificate_account(peercert: dict[str, Any] | None, sites: set[str]) -> tuple[str | None, str]:
    """The account a verified client certificate names (its CN), or None and why not."""
    if not peercert:
        return None, "no client certificate"
    subject = {k: v for rdn in peercert.get("subject", ()) for k, v in rdn}
    cn, ou = subject.get("commonName"), subject.get("organizationalUnitName")
    if not cn:
        return None, "the certificate has no CN"
    if ou != USER_OU or cn in sites:
        return None, f"the certificate of {cn!r} is not a user's (OU = {USER_OU}; make one with " \
                     "python -m deploy user-cert)"
    return str(cn), ""


def tak_ssl_context(server: ChatServer) -> ssl.SSLContext:
    """The site certificate, and a client certificate signed by the mission CA required."""
    from rcm.server.tls import tls_paths
    ctx = server_ssl_context(server.mission, server.site)
    ca = tls_paths(server.mission, server.site)["ca"]
    try:
        ctx.load_verify_locations(cafile=str(ca))
    except (OSError, ssl.SSLError) as e:
        raise MissionError(f"[sites.{server.site}] tak: cannot load the mission CA {ca}: {e}") from None
    ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


class TakConnection(Session):
    """A chat session whose client speaks TAK."""

    def __init__(self, server: ChatServer, front: TakFrontEnd, transport: asyncio.Transport, remote: str,
                 account: str | None) -> None:
        super().__init__(server.sessions, None, transport, remote)      # no WebSocket
        self.server = server
        self.front = front
        self.tak = TakSession(site=server.site, rooms=front.rooms, account=account,
                              labels=LabelView(server.mission.labels))
        self.stream = StreamReader()
        self.requests: Requests[Any] = Requests()        # front_end: a list and a future, not a Queue and Event
        self.taken = Signal()

    def send(self, frame: dict[str, Any]) -> None:
        self.sessions.fan_held_to(self)     # the room frames held this turn come first (Sessions.fan_held)
        self.apply(self.tak.on_frame(frame, self.server.clock()))

    def write(self, data: bytes) -> None:
        """A frame the server fanned out (WebSocket bytes): translate it."""
        if self.closed:
            return
        try:
            frame = json.loads(ws_frame_payload(data))
        except ValueError:
            return
        if isinstance(frame, dict):
            self.send(frame)

    def apply(self, actions: list[Any]) -> None:
        for a in actions:
            if isinstance(a, Emit):
                Session.write(self, encode_proto(a.event) if self.tak.proto else encode_xml(a.event))
            elif isinstance(a, (Request, Login)):
                self.requests.put_nowait(a)
            elif isinstance(a, Note):
                log.info("TAK client %s (%s): %s", self.remote, self.user or self.tak.callsign or "-", a.text)
            elif isinstance(a, UseProto):
                log.info("TAK client %s (%s) speaks TAK protocol v1 from now on", self.remote, self.user)
            elif isinstance(a, Close):
                self.close(1000, a.reason)

    def received(self, data: bytes) -> None:
        """Bytes from the client: events decoded, each counted against the rate limits, then translated."""
        srv = self.server
        for item in self.stream.feed(data):
            if self.closed:
                return
            if isinstance(item, Broken):
                log.info("TAK client %s: closing: %s", self.remote, item.reason)
                self.close(1002, item.reason)
            elif not srv.frames.admit(self):
                # Every event and every run of bytes dropped counts, as every IRC line does: one write of
                # "</event>" ten thousand times was ten thousand decodings and log lines, free of the limit.
                return
            elif isinstance(item, Dropped):
                log.info("TAK client %s: dropped %s", self.remote, item.reason)
            elif isinstance(item, Frame):
                try:
                    ev = decode_proto(item.data) if item.proto else decode_xml(item.data)
                except CotError as e:
                    log.info("TAK client %s: dropped an event: %s", self.remote, e)
                    continue
                if item.proto and not self.tak.proto:
                    self.tak.proto = True            # answer in the client's format
                self.sessions.fan_held_to(self)
                self.apply(self.tak.on_event(ev, srv.clock()))

    async def _close(self, code: int, reason: str) -> None:
        tr = self.transport
        if tr is not None and not tr.is_closing():
            tr.close()                              # after what is queued


class TakFrontEnd:
    """Listens on the site's ``tak`` address and serves TAK clients on the chat server's core."""

    def __init__(self, server: ChatServer, host: str, port: int) -> None:
        self.server = server
        self.host, self.port = host, port
        self.rooms = RoomMap(server.settings.tak_rooms)
        self.tls = bool(server.settings.tls)
        if not self.tls and not is_loopback(host) and not server.mission.rcm.insecure_plaintext:
            raise MissionError(f"[sites.{server.site}] tak = {host}:{port} is not a loopback address and tls is "
                               "off: without TLS a TAK client is whoever its callsign says. Set [rcm] tls = true "
                               "(client certificates from the mission CA), or, on a closed lab network only, "
                               "[rcm] insecure_plaintext = true")
        self._listener: asyncio.Server | None = None
        self._serving: set[asyncio.Task[Any]] = set()
        self.admitted: Admitted[TakConnection] = Admitted(server, "TAK")

    @property
    def connections(self) -> set[TakConnection]:
        return self.admitted.connections

    async def start(self) -> None:
        srv = self.server
        extra: dict[str, Any] = {}
        if self.tls:
            extra = {"ssl": tak_ssl_context(srv), "ssl_handshake_timeout": srv.settings.http_request_timeout}
        self._listener = await asyncio.start_server(self._accept, self.host, self.port, reuse_address=True,
                                                    backlog=LISTEN_BACKLOG, **extra)
        if self.port == 0:
            self.port = self._listener.sockets[0].getsockname()[1]
        log.info("TAK front end of %s listening on %s:%d (%s)", srv.site, self.host, self.port,
                 "mutual TLS: client certificates from the mission CA" if self.tls
                 else "plain TCP: callsigns are not authenticated, labs only")

    async def stop(self) -> None:
        """Stop listening; close every TAK client."""
        if self._listener is not None:
            self._listener.close()
        for c in list(self.admitted.connections):
            c.close(1001, "server shutting down")
        await asyncio.sleep(0)
        serving = list(self._serving)
        for t in serving:
            t.cancel()
        await asyncio.gather(*serving, return_exceptions=True)
        if self._listener is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._listener.wait_closed(), 2)

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = self.server.tasks.spawn(self._serve(reader, writer))
        self._serving.add(task)
        task.add_done_callback(self._serving.discard)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        address = peer_address(writer)
        refusal = self.admitted.refusal(address)
        account: str | None = None
        if refusal is None and self.tls:
            account, refusal = certificate_account(writer.get_extra_info("peercert"), set(self.server.mission.sites))
            refusal = refusal or None
        if refusal is not None:
            log.info("TAK client %s refused: %s", address, refusal)
            writer.close()
            return
        srv = self.server
        conn = TakConnection(srv, self, writer.transport, address, account)   # type: ignore[arg-type]
        self.admitted.opened(conn, address)

        def not_logged_in() -> None:
            if conn.user is None:
                conn.apply(conn.tak.refused("no log-in in time (send a PLI with your callsign)", srv.clock()))
        deadline = asyncio.get_running_loop().call_later(srv.settings.hello_timeout, not_logged_in)
        handle = functools.partial(self._request, conn)
        worker = srv.tasks.spawn(work_requests(conn, handle))
        conn.apply(conn.tak.start(srv.clock()))
        try:
            while not conn.closed:
                try:
                    data = await reader.read(READ_BYTES)
                except (ConnectionError, ssl.SSLError):
                    break
                if not data:
                    break
                conn.received(data)
                # Its requests, while none is being handled, here at once (front_end.handle_now), not a turn of
                # the loop later by the worker, which takes those that come while one is.
                if not await handle_now(conn.requests, handle):
                    break
                await wait_for_room(conn, TAK_REQUESTS_MAX, worker)
        finally:
            await self.admitted.ended(conn, address, writer, worker, deadline)

    async def _request(self, conn: TakConnection, item: Request | Login) -> bool:
        """One of the session's chat requests (or its log-in) to the server; False once the connection is
        closed. One at a time, in order (as a WebSocket's are): the reader's, or the worker's meanwhile."""
        srv = self.server
        if conn.closed:
            return False
        if isinstance(item, Login):
            await self._login(conn, item)
        else:
            await srv.frames.handle(conn, json.dumps(item.frame))
            await srv.frames.pace_says(conn)
        return True

    async def _login(self, conn: TakConnection, login: Login) -> None:
        """Log ``login.account`` in: the slots, welcome and registration every client's log-in takes."""
        srv = self.server
        if srv.store.password_hash(login.account) is None:
            conn.apply(conn.tak.refused(f"{login.account} is no account at site {srv.site} (python -m chat_server "
                                        "adduser)", srv.clock()))
            return
        await srv.frames.verified_login(conn, login.account, login.rid)
        if conn.user is not None:
            log.info("TAK client %s logged in as %s (%s)", conn.remote, conn.user,
                     "client certificate" if self.tls else f"callsign {conn.tak.callsign}, unauthenticated")
