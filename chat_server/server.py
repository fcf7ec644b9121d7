"""The chat server of one site: WebSocket endpoint, rooms, access control, RCM link.

Theory of operation
-------------------
Operators connect to ``/ws`` and speak chat protocol v1 (protocol.py). A
``say`` is checked (membership, access), sent to every site through the site's
RCM server, journaled (``send`` record, fsync) and acknowledged; it is *not*
shown to anyone yet. RCM delivers every message, our own included, to every
site in the global order; one task (``_rcm_loop``) consumes those deliveries
in order and, for each, in one synchronous step: journals it (``deliver``,
written to the kernel), stores it in SQLite, and writes it to the local
members of the room. So a message reaches clients only after it is in the
journal and the history, every site shows the same messages in the same order
during stable periods, and a delivery replayed by RCM (same ``msg_id``) is
dropped.

Chat servers also exchange, through RCM, private-room definitions (member
lists, enforced at every site), rosters (who is online at a site, who is a
member of which room: presence and member counts) and receipt batches (which
messages a site has delivered; the origin site tells the author). See
payload.py.

Fan-out is the hot path: a message is encoded once into a WebSocket frame
(bytes) and the same bytes are written to the transport of each local member.
The transport's write buffer is the client's bounded outbound queue: a client
whose buffer exceeds ``outbound_queue_bytes`` is disconnected with a reason
and never slows down anyone else. Compression is off so that frames can be
shared.

The RCM connection is re-established with back-off; the server resumes with
``since=(incarnation, n)`` (the last delivery it has processed and stored), and
acknowledges processed deliveries to RCM periodically.
"""
from __future__ import annotations

import asyncio
import importlib.util
import ipaddress
import json
import logging
import struct
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable
from urllib.parse import urlsplit

from aiohttp import WSMsgType, web

from rcm.config import Mission

from . import protocol as P
from .accounts import LoginLimiter, dummy_hash, new_session_token, token_digest, verify_password
from .config import ChatSettings, chat_settings, resolve_tls, server_ssl_context
from .journal import Journal
from .limits import TokenBucket
from .payload import (Barrier, ChatMessage, DefinitionRequest, Payload, PayloadError, Receipts, RoomDefinition,
                      Roster, decode_payload, encode_payload)
from .protocol import MAX_INT, FrameError, order_key_problem, order_sort_key
from .protocol import ErrorCode as E
from .store import ChatStore, HeldMessage, PrivateRoom, StoredMessage

log = logging.getLogger("chat_server")


def _static_dir() -> Path:
    """The browser client (``web_ui/static``, located without importing web_ui), else our placeholder page."""
    spec = importlib.util.find_spec("web_ui")
    for location in (spec.submodule_search_locations or []) if spec is not None else []:
        if (Path(location) / "static" / "index.html").is_file():
            return Path(location) / "static"
    return Path(__file__).parent / "static"


STATIC_DIR = _static_dir()
# Every HTTP response: only this origin's scripts, styles, images and WebSocket; no inline code, no framing.
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "
                               "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; "
                               "frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
}
CONNECTED, SUSPECTED, DISCONNECTED = "connected", "suspected", "disconnected"
RECEIPT_BATCH = 2000          # msg_ids per receipt payload
ADDRESS_FAILURE_FACTOR = 4   # failed logins allowed per address = this x login_max_failures
USER_FAILURE_FACTOR = 10     # ... per user over every address (a distributed guess), = this x login_max_failures
MAX_SAYS_IN_FLIGHT = 64       # per connection; then the server stops reading that client for a while
HELD_MAX = 10_000             # private-room messages held for a definition; beyond it the oldest are dropped
DEFINITION_REQUEST_INTERVAL = 30.0   # seconds between requests for the same definition to the same site
MISSING_PER_RECORD = 10_000   # seqs per journal `missing` record
MISSING_RANGES_SHOWN = 1000   # ranges in a `missing` frame to clients (``more`` says there were others)

RcmConnect = Callable[[Any], Awaitable[Any]]   # since -> an RcmClient (rcm.client API)


def _kind(obj: object) -> set[str]:
    """Class names of an RCM event or exception (and its bases).

    Dispatching on names keeps this module importable and testable without the
    RCM package (tests use an in-process double that mirrors the API).
    """
    return {c.__name__ for c in type(obj).__mro__}


def _host_port(netloc: str, scheme: str) -> tuple[str, int] | None:
    try:
        u = urlsplit(f"//{netloc}")
        port = u.port or {"http": 80, "ws": 80, "https": 443, "wss": 443}.get(scheme, 0)
    except ValueError:
        return None
    return (u.hostname, port) if u.hostname else None


def is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


def host_name(host: str) -> str:
    """The name in a Host header, without port or IPv6 brackets, lower-case."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def origin_allowed(request: web.Request) -> bool:
    """False for a WebSocket opened by a page of another origin (cross-site WebSocket hijacking).

    Browsers always send ``Origin``; other clients (TUI, bots) send none and are allowed.
    """
    origin = request.headers.get("Origin")
    if origin is None:
        return True
    o = urlsplit(origin.strip())
    mine = _host_port(request.host, request.scheme)
    return mine is not None and o.scheme == request.scheme and _host_port(o.netloc, o.scheme) == mine


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


class ChatWebSocket(web.WebSocketResponse):
    """aiohttp closes an oversized frame with code 1009 and no text; give the reason."""

    too_big_reason = b""

    async def close(self, *, code: int = 1000, message: bytes = b"", drain: bool = True) -> bool:
        if code == 1009 and not message:
            message = self.too_big_reason
        return await super().close(code=code, message=message, drain=drain)


class Session:
    """One WebSocket connection."""

    def __init__(self, server: "ChatServer", ws: web.WebSocketResponse, transport: Any, remote: str) -> None:
        self.server = server
        self.ws = ws
        self.transport = transport
        self.remote = remote
        self.user: str | None = None
        self.token_digest: str | None = None    # the session token this connection logged in with
        self.closed = False
        self.close_reason = ""
        s = server.settings
        self.frames = TokenBucket(s.rate_limit_frames, s.rate_limit_burst, server.monotonic())
        self._abort_handle: asyncio.TimerHandle | None = None
        self.close_task: asyncio.Task[Any] | None = None
        self.says: set[asyncio.Task[Any]] = set()
        self._pending: list[bytes] = []
        self._pending_bytes = 0

    def take_token(self) -> bool:
        """One of the client's frames; False when the client floods."""
        return self.frames.take(self.server.monotonic())

    def send(self, frame: dict[str, Any]) -> None:
        self.write(ws_text_frame(P.encode(frame)))

    def write(self, data: bytes) -> None:
        """Queue one encoded frame; disconnect the client if its queue is over the limit.

        Frames queued during one turn of the event loop go out in one write (one system call):
        a backlog of deliveries costs a client one write, not one per message.
        """
        if self.closed:
            return
        tr = self.transport
        if tr is None or tr.is_closing():
            self.closed = True
            self.server._unregister(self)
            return
        self._pending_bytes += len(data)
        limit = self.server.settings.outbound_queue_bytes
        if tr.get_write_buffer_size() + self._pending_bytes > limit:
            self._pending.clear()
            self._pending_bytes = 0
            self.close(1008, f"slow consumer: more than {limit} bytes queued")
            return
        self._pending.append(data)
        if len(self._pending) == 1:
            self.server._flush_soon(self)

    def flush(self) -> None:
        """Hand the queued frames to the transport."""
        pending = self._pending
        if not pending:
            return
        tr = self.transport
        if tr is not None and not tr.is_closing():
            tr.write(pending[0] if len(pending) == 1 else b"".join(pending))
        pending.clear()
        self._pending_bytes = 0

    def close(self, code: int, reason: str) -> None:
        """Close with a reason (after the frames already queued); abort if the client never answers."""
        if self.closed:
            return
        self.flush()
        self.closed = True
        self.close_reason = reason
        self.server._unregister(self)
        log.info("closing connection from %s (%s): %s", self.remote, self.user, reason)
        self.close_task = self.server._spawn(self._close(code, reason))
        loop = asyncio.get_running_loop()
        self._abort_handle = loop.call_later(2 * self.server.settings.close_timeout + 1.0, self._abort)

    async def _close(self, code: int, reason: str) -> None:
        try:
            await self.ws.close(code=code, message=reason.encode("utf-8")[:120])
        except Exception:  # the peer is gone; nothing to tell it
            pass

    def _abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()


@dataclass
class RemoteRoster:
    generation: int = -1
    online: frozenset[str] = frozenset()
    rooms: dict[str, frozenset[str]] = field(default_factory=dict)


class ChatServer:
    """One site's chat server; ``start``/``stop`` own every background task."""

    def __init__(self, mission: Mission, site: str, settings: ChatSettings | None = None, *,
                 rcm_connect: RcmConnect | None = None, clock: Callable[[], float] = time.time,
                 monotonic: Callable[[], float] = time.monotonic, host: str | None = None,
                 port: int | None = None, irc_port: int | None = None) -> None:
        self.mission = mission
        self.site = site
        self.site_config = mission.site(site)
        self.settings = resolve_tls(settings or chat_settings(mission), mission)
        self.ssl_context = server_ssl_context(mission, site) if self.settings.tls else None
        self.clock = clock
        self.monotonic = monotonic
        self.host = host if host is not None else self.site_config.chat.host
        self.port = port if port is not None else self.site_config.chat.port
        irc = self.site_config.irc              # the IRC front end (irc_server.py), when the mission gives one
        self.irc_address = None if irc is None else (host if host is not None else irc.host,
                                                     irc_port if irc_port is not None else irc.port)
        self.irc_front: Any = None
        self._rcm_connect = rcm_connect or self._default_rcm_connect
        site_dir = mission.site_dir(site)
        site_dir.mkdir(parents=True, exist_ok=True)
        try:
            site_dir.chmod(0o700)           # the site's data: its processes' user only (audit row 15)
        except PermissionError:
            log.warning("%s belongs to another user: its mode is left as it is", site_dir)
        self.store = ChatStore(site_dir / "chat" / "chat.db")
        self.journal = Journal(site_dir / "journal", site, clock)
        s = self.settings
        # Failed password logins slow down a user at one address, an address (many operators share one:
        # a site's LAN, a NAT), and a user over every address (a guess spread over many addresses). The
        # last is ten times wider, so one address cannot make a user wait elsewhere (audit row 9).
        self.pair_limiter = LoginLimiter(s.login_max_failures, s.login_window, s.login_lockout)
        self.addr_limiter = LoginLimiter(ADDRESS_FAILURE_FACTOR * s.login_max_failures, s.login_window,
                                         s.login_lockout)
        self.user_limiter = LoginLimiter(USER_FAILURE_FACTOR * s.login_max_failures, s.login_window,
                                         s.login_lockout)
        self._dummy_hash = dummy_hash(s.kdf_n)
        # scrypt runs in its own threads, at most max_verifying checks at once: a burst of logins
        # never waits in front of the journal's fsyncs in the default executor (audit row 10).
        self._kdf_pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="scrypt")
        self._verifying = 0
        bound = self.host in ("", "0.0.0.0", "::")
        self._any_host = bound and not s.hosts
        self._hosts = s.hosts | {"localhost", "127.0.0.1", "::1"} | (set() if bound else {self.host.lower()})

        self.peers = mission.peers_of(site)
        self.status: dict[str, str] = {p: SUSPECTED for p in self.peers}       # as shown to clients
        self._journaled_status: dict[str, str] = {}                              # as last reported by RCM
        self.rcm: Any = None
        self.incarnation: int | None = None
        resume = self.store.get_state("rcm")
        self._rcm_n: int = resume[1] if resume else 0
        self._rcm_inc: int | None = resume[0] if resume else None
        self._rcm_acked = 0
        self.journal_n: int = self.store.get_state("journal_n", 0)

        self.connections: set[Session] = set()
        self.user_sessions: dict[str, set[Session]] = {}
        self.room_sessions: dict[str, set[Session]] = {}
        self.local_members: dict[str, set[str]] = {}     # room -> local users (persistent memberships)
        self.user_rooms: dict[str, set[str]] = {}
        for user, room in self.store.all_memberships():
            self.local_members.setdefault(room, set()).add(user)
            self.user_rooms.setdefault(user, set()).add(room)
        self.private: dict[str, PrivateRoom] = self.store.private_rooms()
        self.known_defs: dict[str, str] = self.store.known_definitions()     # every definition id seen -> room
        # Rooms another site says are private, whose definition has not reached us: closed to everyone here.
        self.pending_private: dict[str, str] = {h.room: h.def_id for h in self.store.held()
                                                if h.room not in self.private}
        self._definition_asked: dict[tuple[str, str], float] = {}     # (room, site) -> when we last asked
        self.rooms_with_history: set[str] = self.store.rooms_with_history()
        self.rosters: dict[str, RemoteRoster] = {p: RemoteRoster() for p in self.peers}
        self._published_online: frozenset[str] = frozenset()
        self._published_rooms: dict[str, frozenset[str]] = {}
        self._roster_gen = max(time.time_ns(), self.store.get_state("roster_gen", 0) + 1)
        self._roster_force = True
        self.rejected = 0                                          # deliveries whose payload no site could store
        self.quarantined = 0                                       # deliveries that failed to apply (kept aside)
        self._journal_ahead = False                                # the journal holds deliveries the database lacks
        self._pending_receipts: dict[str, list[str]] = {}
        self._sends_in_flight = 0                                  # rcm.send calls awaiting RCM's reply
        self._sends_journaled: OrderedDict[str, None] = OrderedDict()  # own msg_ids journaled, not yet delivered
        self._send_progress = asyncio.Event()
        self._inflight: dict[tuple[str, str], asyncio.Future[dict[str, Any]]] = {}
        self._user_buckets: dict[str, TokenBucket] = {}           # user -> frames over all its connections
        self._room_buckets: dict[str, TokenBucket] = {}           # user -> new room names it may bring in
        self._http_waiting: dict[int, Any] = {}                   # connections without a request yet
        self._per_address: dict[str, int] = {}                    # open connections per client address
        self._conn_address: dict[int, str] = {}                   # id(handler) -> its client address
        self._cap_logged: dict[str, float] = {}                   # address -> when its last refusal was logged
        self._listener: asyncio.AbstractServer | None = None
        # Barrier (see _barrier): settles the fate of sends RCM may or may not have accepted.
        self._barrier_fut: asyncio.Future[None] | None = None
        self._barrier_rcm: Any = None
        self._barrier_msg: str | None = None
        self._barrier_started = 0.0
        self._barriers_seen: OrderedDict[str, None] = OrderedDict()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._says: set[asyncio.Task[Any]] = set()
        self._to_flush: list[Session] = []
        self._stopping = False
        self._runner: web.AppRunner | None = None
        self.started = asyncio.Event()
        self.rcm_connected = asyncio.Event()
        self._recover()

    # --- lifecycle -----------------------------------------------------------------------------
    async def _default_rcm_connect(self, since: Any) -> Any:
        from rcm.client import RcmClient, socket_path
        return await RcmClient.connect(socket_path(self.mission, self.site), name="chat", since=since)

    def _recover(self, current: bool = False) -> None:
        """Store deliveries that reached the journal but not the database: before a crash, or (``current``)
        in this run when the database failed after the journal record was written."""
        records = self.journal.recover(self.store.get_state("journal_n", 0), current)
        if not records:
            return
        stored: list[StoredMessage] = []
        self.store.begin()
        try:
            for r in records:
                if not self.store.has_message(r["msg_id"]):
                    m = StoredMessage(r["msg_id"], r["n"], r["room"], r["origin"], r["seq"], r["user"], r["text"],
                                      r["sent_at"], r["order"], r["late"])
                    self.store.add_message(m, r["at"])
                    stored.append(m)
                self.journal_n = max(self.journal_n, r["n"])
            self.store.set_state("journal_n", self.journal_n)
            self.store.commit()
        except BaseException:
            self.store.rollback()
            raise
        log.warning("recovered %d journaled deliveries missing from the database", len(records))
        for m in stored:        # clients connected now (a failure in this run) have not seen them
            self.rooms_with_history.add(m.room)
            data = ws_text_frame(P.encode(m.frame()))
            for s in list(self.room_sessions.get(m.room, ())):
                s.write(data)

    def build_app(self) -> web.Application:
        app = web.Application(middlewares=[self._request_started])
        app.router.add_get("/ws", self._ws_handler)
        app.router.add_get("/health", self._health)
        app.router.add_get("/", self._index)
        app.router.add_static("/static/", STATIC_DIR)
        app.on_response_prepare.append(self._security_headers)
        app.on_shutdown.append(self._on_shutdown)
        return app

    async def start(self) -> None:
        """Listen for clients and connect to RCM."""
        s = self.settings
        self._runner = web.AppRunner(self.build_app(), handle_signals=False, access_log=None,
                                     keepalive_timeout=s.keepalive_timeout)
        await self._runner.setup()
        http = self._runner.server
        assert http is not None
        loop = asyncio.get_running_loop()

        def connection() -> Any:
            # Every connection must complete its TLS handshake and the headers of its first request
            # within http_request_timeout (slowloris, half-open connections before the upgrade).
            handler = http()
            self._http_waiting[id(handler)] = handler
            loop.call_later(s.http_request_timeout, self._http_deadline, handler)
            return handler

        # The connection caps need the client's address, known only once the transport exists (after
        # the TLS handshake with TLS): aiohttp's server hears of every connection made and lost, so
        # the gate sits on those two calls.
        made, lost = http.connection_made, http.connection_lost

        def connection_made(handler: Any, transport: asyncio.Transport) -> None:
            made(handler, transport)
            self._admit_connection(handler, transport, len(http.connections))

        def connection_lost(handler: Any, exc: BaseException | None = None) -> None:
            self._release_connection(handler)
            lost(handler, exc)

        http.connection_made = connection_made      # type: ignore[method-assign]
        http.connection_lost = connection_lost      # type: ignore[method-assign]

        extra: dict[str, Any] = {}
        if self.ssl_context is not None:
            extra = {"ssl": self.ssl_context, "ssl_handshake_timeout": s.http_request_timeout}
        self._listener = await loop.create_server(connection, self.host, self.port, reuse_address=True, **extra)
        if self.port == 0:
            self.port = self._listener.sockets[0].getsockname()[1]
        if self.irc_address is not None:
            from .irc_server import IrcFrontEnd
            self.irc_front = IrcFrontEnd(self, *self.irc_address)
            await self.irc_front.start()
        for coro in (self._rcm_loop(), self._receipt_flusher(), self._roster_flusher(), self._rcm_acker(),
                     self._session_expirer()):
            self._spawn(coro)
        self.started.set()
        log.info("chat server %s listening on %s://%s:%d", self.site, self.scheme, self.host, self.port)
        if self._any_host:
            log.warning("listening on every address and [chat] allowed_hosts is empty: any Host header is "
                        "accepted; name the hosts clients use to guard against DNS rebinding")

    @property
    def scheme(self) -> str:
        return "https" if self.ssl_context is not None else "http"

    def _http_deadline(self, handler: Any) -> None:
        if self._http_waiting.pop(id(handler), None) is not handler:
            return                              # a request arrived in time
        tr = handler.transport
        if tr is None or tr.is_closing():
            return
        log.info("closing a connection from %s: no complete HTTP request within %g s",
                 tr.get_extra_info("peername"), self.settings.http_request_timeout)
        tr.abort()

    def _admit_connection(self, handler: Any, transport: asyncio.Transport, open_now: int) -> None:
        """Count a new connection against the caps; one beyond them is closed at once, without a word.

        ``max_connections_per_address`` keeps one client address (a runaway script, a flood) from
        taking the whole ``max_connections`` budget and locking everybody else out."""
        s = self.settings
        peer = transport.get_extra_info("peername")
        address = str(peer[0]) if isinstance(peer, tuple) and peer else str(peer)
        self._conn_address[id(handler)] = address
        count = self._per_address.get(address, 0) + 1
        self._per_address[address] = count
        if open_now > s.max_connections:
            why = f"max_connections = {s.max_connections} reached"
        elif count > s.max_connections_per_address and address not in s.proxies:
            why = f"max_connections_per_address = {s.max_connections_per_address} reached for {address}"
        else:
            return
        self._http_waiting.pop(id(handler), None)
        now = time.monotonic()
        if now - self._cap_logged.get(address, -60.0) >= 60.0:     # a flood logs once a minute, not per attempt
            if len(self._cap_logged) >= 1024:
                self._cap_logged = {a: t for a, t in self._cap_logged.items() if now - t < 60.0}
            self._cap_logged[address] = now
            log.warning("refused a connection from %s: %s", address, why)
        transport.abort()

    def _release_connection(self, handler: Any) -> None:
        address = self._conn_address.pop(id(handler), None)
        if address is None:
            return
        left = self._per_address[address] - 1
        if left:
            self._per_address[address] = left
        else:
            del self._per_address[address]

    @web.middleware
    async def _request_started(self, request: web.Request, handler: Any) -> web.StreamResponse:
        self._http_waiting.pop(id(request.protocol), None)
        if not self._any_host and host_name(request.host) not in self._hosts:
            # A page of another site whose name was re-pointed at us (DNS rebinding) names itself here.
            log.warning("refused a request for host %r from %s", request.host[:80], request.remote)
            raise web.HTTPMisdirectedRequest(text=f"this chat server does not answer to {request.host[:80]!r}; "
                                                  "add it to [chat] allowed_hosts\n")
        return await handler(request)

    def client_address(self, request: web.Request) -> str:
        """The client's address: the connection's, or what a trusted proxy says it forwarded."""
        remote = request.remote or "?"
        if remote in self.settings.proxies:
            forwarded = request.headers.get("X-Forwarded-For", "")
            last = forwarded.rsplit(",", 1)[-1].strip()
            if last:
                return last[:64]
        return remote

    async def stop(self) -> None:
        """Close clients and listeners, stop tasks, flush the journal, close the database."""
        if self._stopping:
            return
        self._stopping = True
        if self._listener is not None:
            self._listener.close()
        if self.irc_front is not None:
            await self.irc_front.stop()
        if self._runner is not None:
            await self._runner.cleanup()
        if self._says:      # messages RCM may already have accepted: let them reach the journal
            await asyncio.wait(set(self._says), timeout=self.settings.close_timeout)
        tasks = list(self._tasks) + list(self._says)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self.rcm is not None:
            try:
                await self._ack_rcm(self.rcm)
                await self.rcm.close()
            except Exception:
                pass
            self.rcm = None
        await self.journal.close()
        self.store.close()
        self._kdf_pool.shutdown(wait=False, cancel_futures=True)
        log.info("chat server %s stopped", self.site)

    async def _on_shutdown(self, app: web.Application) -> None:
        for s in list(self.connections):
            s.close(1001, "server shutting down")
        await asyncio.sleep(0)

    def _spawn(self, coro: Awaitable[Any]) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("background task failed", exc_info=task.exception())

    # --- HTTP ------------------------------------------------------------------------------------
    async def _index(self, request: web.Request) -> web.StreamResponse:
        return web.FileResponse(STATIC_DIR / "index.html")

    async def _security_headers(self, request: web.Request, response: web.StreamResponse) -> None:
        for name, value in SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)

    async def _health(self, request: web.Request) -> web.Response:
        """Up or not for anyone; the details (counts, statuses, refusal reasons) only to this host's tools."""
        status = 200 if self.rcm is not None else 503
        body: dict[str, Any] = {"site": self.site, "status": "ok" if self.rcm is not None else "degraded"}
        if not is_loopback(request.remote or ""):
            return web.json_response(body, status=status)
        sites = self.site_statuses()
        body.update({"rcm": self.rcm is not None, "incarnation": self.incarnation, "sites": sites,
                     "clients": len(self.connections), "users_online": len(self.user_sessions), "n": self.journal_n,
                     "rejected": self.rejected, "quarantined": self.quarantined, "held": self.store.held_count(),
                     "refusals": await self._refusals(sites)})
        return web.json_response(body, status=status)

    async def _refusals(self, sites: dict[str, str]) -> dict[str, str]:
        """Why RCM refuses (or is refused by) each peer that is not connected, from RCM's stats.

        A peer whose mission file differs (ordering, channel mode, sites) stays apart for good; the
        reason belongs where operators look (``deploy up``'s health line, ``deploy status``)."""
        rcm = self.rcm
        if rcm is None:
            return {}
        try:
            stats = await asyncio.wait_for(rcm.stats(), 1.0)
        except Exception as e:      # RCM going away or slow: /health still answers, without reasons
            log.debug("no RCM stats for /health: %s", e)
            return {}
        peers = stats.get("peers") if isinstance(stats, dict) else None
        if not isinstance(peers, dict):
            return {}
        return {p: str(v["last_refusal"]) for p, v in sorted(peers.items())
                if isinstance(v, dict) and v.get("last_refusal") and sites.get(p) != "connected"}

    async def _ws_handler(self, request: web.Request) -> web.WebSocketResponse:
        if not origin_allowed(request):
            log.warning("refused a WebSocket from origin %r (host %r)", request.headers.get("Origin"), request.host)
            raise web.HTTPForbidden(text="WebSocket refused: Origin does not match this server\n")
        s = self.settings
        ws = ChatWebSocket(max_msg_size=s.max_frame_bytes, compress=False, timeout=s.close_timeout, autoping=True,
                           heartbeat=s.ws_heartbeat)
        ws.too_big_reason = f"frame too large: the limit is max_frame_bytes = {s.max_frame_bytes}".encode()
        await ws.prepare(request)
        session = Session(self, ws, request.transport, self.client_address(request))
        self.connections.add(session)
        hello_timer = asyncio.get_running_loop().call_later(
            s.hello_timeout, lambda: session.user is None and session.close(1008, "no hello in time"))
        try:
            async for msg in ws:
                if session.closed:
                    break
                if not session.take_token():
                    session.close(1008, f"flood: more than {s.rate_limit_burst} frames in a burst "
                                        f"(limit {s.rate_limit_frames:g}/s)")
                    break
                if session.user is not None and not self._take_user_token(session.user):
                    session.close(1008, f"flood: user {session.user} sent more than {s.user_rate_limit_burst} "
                                        f"frames in a burst over all its connections "
                                        f"(limit {s.user_rate_limit_frames:g}/s)")
                    break
                if msg.type == WSMsgType.TEXT:
                    await self._on_frame(session, msg.data)
                    if len(session.says) >= MAX_SAYS_IN_FLIGHT:
                        await asyncio.wait(set(session.says), return_when=asyncio.FIRST_COMPLETED)
                elif msg.type == WSMsgType.BINARY:
                    session.send(P.error(E.BAD_FRAME, "binary frames are not supported; send JSON text frames"))
                elif msg.type == WSMsgType.ERROR:
                    break
        finally:
            hello_timer.cancel()
            if session.close_task is not None:    # let the close frame with its reason go out first
                await asyncio.gather(asyncio.shield(session.close_task), return_exceptions=True)
            self.connections.discard(session)
            if not session.closed:
                session.closed = True
                self._unregister(session)
            if session._abort_handle is not None and ws.closed:
                session._abort_handle.cancel()
        return ws

    def _take_user_token(self, user: str) -> bool:
        """One frame of a user over every connection; False when the user floods."""
        s, now = self.settings, self.monotonic()
        b = self._user_buckets.get(user)
        if b is None:
            b = self._user_buckets[user] = TokenBucket(s.user_rate_limit_frames, s.user_rate_limit_burst, now)
        return b.take(now)

    # --- client frames ---------------------------------------------------------------------------
    async def _on_frame(self, session: Session, text: str) -> None:
        try:
            req = P.parse_client_frame(text, self.settings.max_text_bytes, self.settings.max_members)
            if req.type != "hello" and session.user is None:
                raise FrameError(E.NOT_AUTHENTICATED, f"{req.type}: send hello first", req.reply_to)
            if req.type == "say":
                self._start_say(session, req)
            else:
                await getattr(self, f"_req_{req.type}")(session, req)
        except FrameError as e:
            session.send(P.error(e.code, e.message, e.in_reply_to))
        except Exception:
            log.exception("internal error on a frame from %s", session.remote)
            session.send(P.error(E.INTERNAL, "internal error; the server log has details"))

    async def _req_hello(self, session: Session, req: Any) -> None:
        f = req.fields
        if session.user is not None:
            raise FrameError(E.ALREADY_AUTHENTICATED, f"already logged in as {session.user}", req.reply_to)
        user = f["user"]
        self._check_session_slot(user, req)
        if "password" in f:
            token: str | None = await self._check_password(session, user, f["password"], req)
            assert token is not None
            digest = token_digest(token)
        else:
            # A session token is 256 random bits: there is no guessing to slow down, and a lockout here
            # would let anyone who knows a user's name keep them from resuming (audit row 9). A wrong
            # token counts against the address only.
            token, digest = None, token_digest(f["session"])
            if self.store.session_user(digest, self.clock()) != user:
                self.addr_limiter.failed(session.remote, self.monotonic())
                raise FrameError(E.AUTH_FAILED, "unknown user, wrong password or expired session", req.reply_to)
        if session.closed:
            return
        self._check_session_slot(user, req)
        session.user, session.token_digest = user, digest
        welcome = {"type": "welcome", "protocol": P.PROTOCOL_VERSION, "site": self.site, "user": user,
                   "sites": self.site_statuses(), "rooms": sorted(self.user_rooms.get(user, ())), "session": token,
                   "n": self.journal_n, "presence": self.presence_snapshot()}
        session.send(P.with_id(welcome, req.id))
        if "last_n" in f:
            await self._replay(session, f["last_n"], req)
        else:
            self._register(session)

    def _check_session_slot(self, user: str, req: Any) -> None:
        if len(self.user_sessions.get(user, ())) >= self.settings.max_sessions_per_user:
            raise FrameError(E.LIMIT, f"{user} already has {self.settings.max_sessions_per_user} sessions open "
                                      "at this site (max_sessions_per_user)", req.reply_to)

    async def _check_password(self, session: Session, user: str, password: str, req: Any) -> str:
        """A new session token if the password is right; FrameError (auth_failed, rate_limited) if not."""
        now = self.monotonic()
        keys = ((self.pair_limiter, f"{user}\0{session.remote}"), (self.addr_limiter, session.remote),
                (self.user_limiter, user))
        wait = max(limiter.retry_after(key, now) for limiter, key in keys)
        if wait > 0:
            raise FrameError(E.RATE_LIMITED, f"too many failed logins; try again in {wait:.0f} s", req.reply_to)
        if self._verifying >= self.settings.max_verifying:
            raise FrameError(E.RATE_LIMITED, "the server is checking many logins at once; try again in a second",
                             req.reply_to)
        for limiter, key in keys:       # counted before the check: a parallel burst counts at once
            limiter.failed(key, now)
        self._verifying += 1
        try:
            stored = self.store.password_hash(user)
            ok = await asyncio.get_running_loop().run_in_executor(
                self._kdf_pool, verify_password, password, stored or self._dummy_hash)
        finally:
            self._verifying -= 1
        if not (ok and stored is not None):
            raise FrameError(E.AUTH_FAILED, "unknown user, wrong password or expired session", req.reply_to)
        self.pair_limiter.succeeded(keys[0][1])
        self.addr_limiter.forgive(session.remote)     # (an address's other failures are not forgiven)
        self.user_limiter.forgive(user)
        token = new_session_token()
        self.store.add_session(token_digest(token), user, self.clock() + self.settings.session_ttl)
        return token

    async def _replay(self, session: Session, after_n: int, req: Any) -> None:
        """What a resumed session missed since ``after_n``, paced by the client's reading, then live.

        Pages go out through the WebSocket writer, which waits while the client is behind, so a long
        backlog never overflows the outbound queue (audit row 6: it used to close the client as a slow
        consumer on every resume). The session is registered for live deliveries in the same step as
        the query that found nothing more, so no delivery falls between the replay and live."""
        page = max(1, min(200, self.settings.outbound_queue_bytes // (4 * (self.settings.max_text_bytes + 1024))))
        sent = 0
        while not session.closed:
            rooms = sorted(self.user_rooms.get(session.user or "", ()))
            msgs, more = self.store.since_n(rooms, after_n, page)
            if not msgs or sent >= self.settings.resume_max:
                if msgs:
                    session.send(P.error(E.LIMIT, f"more than {self.settings.resume_max} messages were missed; "
                                                  "use history to fetch older ones", req.reply_to))
                self._register(session)
                return
            session.flush()
            for m in msgs:
                await session.ws.send_str(P.encode(m.frame()))
                after_n = m.n
            sent += len(msgs)

    async def _req_logout(self, session: Session, req: Any) -> None:
        """Revoke this login's session token (``all``: every one of the user's at this site) and close."""
        user, everywhere = session.user, bool(req.fields.get("all"))
        assert user is not None
        if everywhere:
            self.store.delete_sessions_of(user)
        elif session.token_digest is not None:
            self.store.delete_session(session.token_digest)
        log.info("%s logged out%s from %s", user, " everywhere" if everywhere else "", session.remote)
        frame = {"type": "logged_out", "all": everywhere}
        session.send(P.with_id(dict(frame), req.id))
        session.close(1000, "logged out")
        for other in list(self.user_sessions.get(user, ())):
            if everywhere or other.token_digest == session.token_digest:
                other.send(frame)
                other.close(1000, "logged out")

    async def _req_join(self, session: Session, req: Any) -> None:
        room, user = req.fields["room"], session.user
        assert user is not None
        self._check_access(user, room, req)
        mine = self.user_rooms.setdefault(user, set())
        if room not in mine:
            if len(mine) >= self.settings.max_rooms_per_user:
                raise FrameError(E.LIMIT, f"join: at most {self.settings.max_rooms_per_user} rooms per user",
                                 req.reply_to)
            if not self._room_known(room):
                self._check_new_room(user, req)
            self._add_member(user, room)
        frame = self._joined_frame(room)
        session.send(P.with_id(dict(frame), req.id))
        for other in self.user_sessions.get(user, ()):
            if other is not session:
                other.send(frame)

    async def _req_leave(self, session: Session, req: Any) -> None:
        room, user = req.fields["room"], session.user
        assert user is not None
        if room not in self.user_rooms.get(user, ()):
            raise FrameError(E.NOT_JOINED, f"leave: you are not in room {room!r}", req.reply_to)
        self._remove_member(user, room)
        frame = {"type": "left", "room": room}
        session.send(P.with_id(dict(frame), req.id))
        for other in self.user_sessions.get(user, ()):
            if other is not session:
                other.send(frame)

    def _start_say(self, session: Session, req: Any) -> None:
        """Check a ``say`` now, in arrival order; send it in a task so that a client's says pipeline.

        The tasks run in the order they were created and each hands its message to RCM in its first
        step, so a client's messages enter RCM in the order it sent them, while RCM round trips and
        journal fsyncs overlap (group commit).
        """
        f, user = req.fields, session.user
        assert user is not None
        room, cid = f["room"], f["client_id"]
        self._check_access(user, room, req)
        if room not in self.user_rooms.get(user, ()):
            raise FrameError(E.NOT_JOINED, f"say: join room {room!r} first", req.reply_to)
        known = self.store.sent_msg_id(user, cid)
        if known is not None:                 # a retry after a reconnect: same message, same ack
            session.send(P.with_id({"type": "ack", "client_id": cid, "msg_id": known}, req.id))
            return
        task = asyncio.ensure_future(self._say(session, req))
        self._says.add(task)
        session.says.add(task)
        task.add_done_callback(self._says.discard)
        task.add_done_callback(session.says.discard)

    async def _say(self, session: Session, req: Any) -> None:
        f, user = req.fields, session.user
        assert user is not None
        key = (user, f["client_id"])
        try:
            inflight = self._inflight.get(key)
            if inflight is not None:          # the same say is being sent: answer both with its ack
                ack = await asyncio.shield(inflight)
            else:
                fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
                self._inflight[key] = fut
                try:
                    known = None
                    if self.store.is_pending(user, f["client_id"]):
                        # An earlier attempt reached RCM with no answer (a crash, a lost RCM connection):
                        # RCM may have accepted it. The barrier settles it; then ack the first or send anew.
                        await self._barrier(req)
                        known = self.store.sent_msg_id(user, f["client_id"])
                    if known is not None:
                        ack = {"type": "ack", "client_id": f["client_id"], "msg_id": known}
                    else:
                        ack = await self._send_chat(user, f["room"], f["text"], f["client_id"], req)
                    fut.set_result(ack)
                except BaseException as e:
                    fut.set_exception(e)
                    fut.exception()           # retrieved here; a concurrent retry re-raises it
                    raise
                finally:
                    del self._inflight[key]
            session.send(P.with_id(dict(ack), req.id))
        except FrameError as e:
            session.send(P.error(e.code, e.message, e.in_reply_to))
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("internal error on a say from %s", session.remote)
            session.send(P.error(E.INTERNAL, "internal error; the server log has details", req.reply_to))

    async def _send_chat(self, user: str, room: str, text: str, cid: str, req: Any) -> dict[str, Any]:
        rcm = self.rcm
        if rcm is None:
            raise FrameError(E.UNAVAILABLE, "the site's RCM server is not reachable; try again", req.reply_to)
        sent_at = self.clock()
        pr = self.private.get(room)
        payload = encode_payload(ChatMessage(room, user, text, sent_at, cid, pr.msg_id if pr else "",
                                             pr.order if pr else ()))
        # Sends are not serialised: rcm.send writes its request at once, so messages enter RCM in the
        # order the tasks run (a client's says in the order it sent them), and round trips overlap.
        self._sends_in_flight += 1
        self.store.add_pending(user, cid, self.clock())     # until RCM's answer or the delivery is known
        try:
            try:
                acc = await self._rcm_send(rcm, payload, None, req)
            except FrameError as e:
                if e.code != E.UNAVAILABLE:             # refused: RCM does not have it
                    self.store.remove_pending(user, cid)
                raise
            self.journal.send(msg_id=acc.msg_id, origin=self.site, seq=acc.seq, room=room, user=user, text=text,
                              sent_at=sent_at, order=list(acc.order) if acc.order is not None else None,
                              skipped=acc.skipped)
            self._sends_journaled[acc.msg_id] = None
            while len(self._sends_journaled) > 10_000:
                self._sends_journaled.popitem(last=False)
            self.store.record_sent(user, cid, acc.msg_id)
            self.store.remove_pending(user, cid)
        finally:
            self._sends_in_flight -= 1
            self._send_progress.set()
        await self.journal.sync()
        ack: dict[str, Any] = {"type": "ack", "client_id": cid, "msg_id": acc.msg_id}
        if acc.skipped:
            ack["skipped"] = sorted(acc.skipped)
        return ack

    async def _barrier(self, req: Any) -> None:
        """Return once every message this site handed to RCM before the call has been delivered here.

        A ``say`` whose RCM request got no answer (the chat server was killed, or the RCM connection
        dropped) may or may not be in RCM. RCM delivers a site's own messages to itself in the order
        they were sent (FIFO per origin), so once a barrier payload sent now, to this site only, is
        delivered, every earlier accepted message has been delivered too and its (user, client_id)
        recorded. One barrier per RCM connection serves every waiter.
        """
        while True:
            rcm = self.rcm
            if rcm is None:
                raise FrameError(E.UNAVAILABLE, "the site's RCM server is not reachable; try again", req.reply_to)
            fut = self._barrier_fut
            if fut is None or self._barrier_rcm is not rcm:
                fut = self._barrier_fut = asyncio.get_running_loop().create_future()
                self._barrier_rcm, self._barrier_msg = rcm, None
                started = self._barrier_started = self.clock()
                try:
                    acc = await self._rcm_send(rcm, encode_payload(Barrier(f"{self.site}-{time.time_ns()}")),
                                               [self.site], req)
                except BaseException as e:
                    self._fail_barrier(fut, e)
                    raise
                self._barrier_msg = acc.msg_id
                log.info("barrier %s sent to settle sends of unknown fate (before %.3f)", acc.msg_id, started)
                if acc.msg_id in self._barriers_seen:
                    self._barrier_reached(acc.msg_id)
            try:
                await asyncio.shield(fut)
                return
            except FrameError as e:
                if self.rcm is None or self.rcm is rcm:
                    raise FrameError(e.code, e.message, req.reply_to) from None

    def _fail_barrier(self, fut: asyncio.Future[None], e: BaseException) -> None:
        if self._barrier_fut is fut:
            self._barrier_fut = self._barrier_rcm = self._barrier_msg = None
        if not fut.done():
            fut.set_exception(e if isinstance(e, FrameError) else
                              FrameError(E.UNAVAILABLE, "the site's RCM server is not reachable; try again"))
            fut.exception()

    def _barrier_reached(self, msg_id: str) -> None:
        fut = self._barrier_fut
        if fut is None or msg_id != self._barrier_msg:
            self._barriers_seen[msg_id] = None
            while len(self._barriers_seen) > 64:
                self._barriers_seen.popitem(last=False)
            return
        # Sends attempted before the barrier and not being retried now were never accepted: forget them.
        for user, cid in self.store.pending_before(self._barrier_started):
            if (user, cid) not in self._inflight:
                self.store.remove_pending(user, cid)
        self._barrier_fut = self._barrier_rcm = self._barrier_msg = None
        if not fut.done():
            fut.set_result(None)

    async def _rcm_send(self, rcm: Any, payload: bytes, dests: Any, req: Any = None) -> Any:
        reply_to = req.reply_to if req is not None else None
        try:
            return await rcm.send(payload, dests=dests)
        except Exception as e:
            kinds = _kind(e)
            if "RcmBackpressure" in kinds:
                raise FrameError(E.TRY_AGAIN, "the inter-site buffers are full; try again shortly", reply_to) from e
            if "RcmUnavailable" in kinds:
                raise FrameError(E.UNAVAILABLE, "the site's RCM server is not reachable; try again", reply_to) from e
            if "RcmError" in kinds:
                raise FrameError(E.REJECTED, f"RCM refused the message: {e}", reply_to) from e
            raise

    async def _req_rooms(self, session: Session, req: Any) -> None:
        """The rooms this user may see, a page at a time (``after`` the last room of the previous page)."""
        user = session.user
        assert user is not None
        f = req.fields
        limit = min(f.get("limit", self.settings.rooms_page), self.settings.rooms_page)
        after = f.get("after", "")
        online_all = set(self._online_users())
        for r in self.rosters.values():
            online_all |= r.online
        out: list[dict[str, Any]] = []
        more = False
        for room in sorted(n for n in self._known_rooms() if n > after):
            pr = self.private.get(room)
            if (pr is not None and user not in pr.members) or (pr is None and room in self.pending_private):
                continue
            if len(out) == limit:
                more = True
                break
            members = self.members_of(room)
            out.append({"room": room, "private": pr is not None, "members": len(members),
                        "online": len(members & online_all), "joined": room in self.user_rooms.get(user, ())})
        session.send(P.with_id({"type": "rooms", "rooms": out, "more": more}, req.id))

    async def _req_history(self, session: Session, req: Any) -> None:
        f, user = req.fields, session.user
        assert user is not None
        room = f["room"]
        self._check_access(user, room, req)
        limit = min(f.get("limit", self.settings.history_on_join), self.settings.history_max)
        if "after_n" in f:
            msgs, more = self.store.since_n([room], f["after_n"], limit)
            msgs, trimmed = self._fit(msgs, keep_newest=False)
        else:
            before = f.get("before")
            if isinstance(before, str):
                ref = self.store.message(before)
                if ref is None or ref.room != room:
                    raise FrameError(E.BAD_FIELD, f"history: no message {before[:80]!r} in room {room!r}",
                                     req.reply_to)
                before = ref.order
            msgs, more = self.store.history(room, limit, before)
            msgs, trimmed = self._fit(msgs, keep_newest=True)
        frame = {"type": "history", "room": room, "messages": self._message_frames(msgs), "more": more or trimmed}
        session.send(P.with_id(frame, req.id))

    async def _req_create(self, session: Session, req: Any) -> None:
        f, user = req.fields, session.user
        assert user is not None
        room = f["room"]
        members = tuple(sorted(set(f["members"]) | {user}))
        if len(members) > self.settings.max_members:
            raise FrameError(E.LIMIT, f"create: at most {self.settings.max_members} members", req.reply_to)
        pr = self.private.get(room)
        if pr is not None and pr.owner != user:
            raise FrameError(E.ROOM_EXISTS, f"create: room {room!r} exists and belongs to {pr.owner}", req.reply_to)
        if pr is None and room in self.pending_private:
            raise FrameError(E.ROOM_EXISTS, f"create: room {room!r} is a private room of another site",
                             req.reply_to)
        if pr is None and (self.members_of(room) or room in self.rooms_with_history):
            raise FrameError(E.ROOM_EXISTS, f"create: public room {room!r} already exists", req.reply_to)
        rcm = self.rcm
        if rcm is None:
            raise FrameError(E.UNAVAILABLE, "the site's RCM server is not reachable; try again", req.reply_to)
        acc = await self._rcm_send(rcm, encode_payload(RoomDefinition(room, user, members)),
                                   self._control_dests(), req)
        session.send(P.with_id({"type": "created", "room": room, "members": list(members), "msg_id": acc.msg_id},
                               req.id))

    # --- rooms and access -------------------------------------------------------------------------
    def _room_known(self, room: str) -> bool:
        return (room in self.local_members or room in self.private or room in self.rooms_with_history
                or any(room in r.rooms for r in self.rosters.values()))

    def _known_rooms(self) -> set[str]:
        names = set(self.local_members) | set(self.private) | self.rooms_with_history
        for r in self.rosters.values():
            names |= set(r.rooms)
        return names

    def _check_new_room(self, user: str, req: Any) -> None:
        """A join that brings a new room name into being: at most ``max_rooms`` names at the site, and a
        user's new names are rate-limited (a join-say-leave loop used to grow every site's rooms, audit
        row 12)."""
        s, now = self.settings, self.monotonic()
        if len(self._known_rooms()) >= s.max_rooms:
            raise FrameError(E.LIMIT, f"{req.type}: this site already knows max_rooms = {s.max_rooms} rooms; "
                                      "join an existing one", req.reply_to)
        bucket = self._room_buckets.get(user)
        if bucket is None:
            if len(self._room_buckets) >= 10_000:
                self._room_buckets.clear()
            bucket = self._room_buckets[user] = TokenBucket(s.rooms_created_per_hour / 3600.0,
                                                            s.rooms_created_burst, now)
        if not bucket.take(now):
            raise FrameError(E.LIMIT, f"{req.type}: you made {s.rooms_created_burst} new rooms lately "
                                      f"(rooms_created_per_hour = {s.rooms_created_per_hour:g}); join an existing "
                                      "room or try later", req.reply_to)

    def _check_access(self, user: str, room: str, req: Any) -> None:
        pr = self.private.get(room)
        if pr is not None and user not in pr.members:
            raise FrameError(E.FORBIDDEN, f"{req.type}: room {room!r} is private and you are not a member",
                             req.reply_to)
        if pr is None and room in self.pending_private:
            raise FrameError(E.FORBIDDEN, f"{req.type}: room {room!r} is private and its member list has not "
                                          "reached this site yet; try again later", req.reply_to)

    def members_of(self, room: str) -> set[str]:
        """Members of a room at every site known here."""
        members = set(self.local_members.get(room, ()))
        for r in self.rosters.values():
            members |= r.rooms.get(room, frozenset())
        return members

    def _add_member(self, user: str, room: str) -> None:
        self.store.add_membership(user, room)
        self.local_members.setdefault(room, set()).add(user)
        self.user_rooms.setdefault(user, set()).add(room)
        sessions = self.user_sessions.get(user)
        if sessions:
            self.room_sessions.setdefault(room, set()).update(sessions)

    def _remove_member(self, user: str, room: str) -> None:
        self.store.remove_membership(user, room)
        members = self.local_members.get(room)
        if members is not None:
            members.discard(user)
            if not members:
                del self.local_members[room]
        self.user_rooms.get(user, set()).discard(room)
        rs = self.room_sessions.get(room)
        if rs is not None:
            rs.difference_update(self.user_sessions.get(user, ()))
            if not rs:
                del self.room_sessions[room]

    def _joined_frame(self, room: str) -> dict[str, Any]:
        msgs, more = self.store.history(room, self.settings.history_on_join)
        msgs, trimmed = self._fit(msgs, keep_newest=True)
        pr = self.private.get(room)
        frame: dict[str, Any] = {"type": "joined", "room": room, "private": pr is not None,
                                 "history": self._message_frames(msgs), "more": more or trimmed}
        if pr is not None:
            frame["members"] = sorted(pr.members)
        return frame

    def _fit(self, msgs: list[StoredMessage], keep_newest: bool) -> tuple[list[StoredMessage], bool]:
        """As many messages as fit in half the outbound queue in one frame (the newest or the oldest), and
        whether some were left out: a page of long messages must not close the client as a slow consumer
        (audit row 6); the client asks for the rest with ``before``/``after_n``."""
        budget = self.settings.outbound_queue_bytes // 2
        order = reversed(msgs) if keep_newest else iter(msgs)
        kept: list[StoredMessage] = []
        for m in order:
            budget -= len(m.text.encode("utf-8")) + 2 * len(m.user) + 320   # the frame's size, estimated
            if budget < 0 and kept:
                break
            kept.append(m)
        if len(kept) == len(msgs):
            return msgs, False
        return (kept[::-1] if keep_newest else kept), True

    def _message_frames(self, msgs: list[StoredMessage]) -> list[dict[str, Any]]:
        receipts = self.store.receipts_of([m.msg_id for m in msgs])
        out = []
        for m in msgs:
            fr = m.frame()
            fr["receipts"] = receipts.get(m.msg_id, [])
            out.append(fr)
        return out

    def _register(self, session: Session) -> None:
        user = session.user
        assert user is not None
        self.user_sessions.setdefault(user, set()).add(session)
        for room in self.user_rooms.get(user, ()):
            self.room_sessions.setdefault(room, set()).add(session)

    def _unregister(self, session: Session) -> None:
        user = session.user
        if user is None:
            return
        sessions = self.user_sessions.get(user)
        if sessions is None or session not in sessions:
            return
        sessions.discard(session)
        if not sessions:
            del self.user_sessions[user]
        for room in self.user_rooms.get(user, ()):
            rs = self.room_sessions.get(room)
            if rs is not None:
                rs.discard(session)
                if not rs:
                    del self.room_sessions[room]

    def _flush_soon(self, session: Session) -> None:
        if not self._to_flush:
            asyncio.get_running_loop().call_soon(self._flush_sessions)
        self._to_flush.append(session)

    def _flush_sessions(self) -> None:
        sessions, self._to_flush = self._to_flush, []
        for s in sessions:
            s.flush()

    def _broadcast(self, frame: dict[str, Any]) -> None:
        data = ws_text_frame(P.encode(frame))
        for s in list(self.connections):
            if s.user is not None:
                s.write(data)

    def _to_user(self, user: str, frame: dict[str, Any]) -> None:
        sessions = self.user_sessions.get(user)
        if sessions:
            data = ws_text_frame(P.encode(frame))
            for s in list(sessions):
                s.write(data)

    # --- awareness ------------------------------------------------------------------------------
    def site_statuses(self) -> dict[str, str]:
        out = {self.site: CONNECTED if self.rcm is not None else SUSPECTED}
        out.update(self.status)
        return out

    def _online_users(self) -> frozenset[str]:
        return frozenset(self.user_sessions)

    def presence_snapshot(self) -> dict[str, list[str]]:
        snap = {self.site: sorted(self._published_online)}
        for site, r in self.rosters.items():
            snap[site] = sorted(r.online)
        return snap

    def _show_status(self, peer: str, status: str) -> None:
        if self.status.get(peer) != status:
            self.status[peer] = status
            self._broadcast({"type": "site_status", "site": peer, "status": status})

    def _reachable_peers(self) -> list[str]:
        """Peers RCM will send to now. Control payloads go only to them, so that RCM's missing
        notices after a disconnection count chat messages; what they need is sent again when
        the peer is connected again (rosters, room definitions)."""
        return [p for p in self.peers if self._journaled_status.get(p, DISCONNECTED) != DISCONNECTED]

    def _control_dests(self) -> list[str]:
        return self._reachable_peers() or [self.site]

    def _on_status(self, peer: str, status: str) -> None:
        if peer == self.site or peer not in self.status:
            return
        previous = self._journaled_status.get(peer)
        if previous != status:
            self._journaled_status[peer] = status
            self.journal.status(peer=peer, status=status)
        if status == CONNECTED and self.status.get(peer) != CONNECTED:
            self._roster_force = True    # tell the (re)connected site who is here
        if status == CONNECTED and previous == DISCONNECTED:
            self._spawn(self._resend_definitions(peer))
        self._show_status(peer, status)

    async def _resend_definitions(self, peer: str, rooms: list[str] | None = None) -> None:
        """Private rooms' definitions known here, again, with their original identity, for a peer that may
        have missed them (it was disconnected when they were sent, or it asked). Any site that knows a
        definition re-sends it, not only the site that made it: the maker may be out of reach."""
        for room in (sorted(self.private) if rooms is None else rooms):
            pr = self.private.get(room)
            if pr is None or self.rcm is None or not pr.order:
                continue
            try:
                await self._rcm_send(self.rcm, encode_payload(RoomDefinition(
                    pr.room, pr.owner, tuple(sorted(pr.members)), pr.msg_id, pr.order)), [peer])
            except FrameError as e:
                log.debug("definition of %s not re-sent to %s: %s", pr.room, peer, e)

    def _ask_definition(self, room: str, site: str) -> None:
        """Ask ``site`` (which sent us a message of ``room`` tagged with a definition) for the definition."""
        now = self.monotonic()
        if site == self.site or now - self._definition_asked.get((room, site), -1e9) < DEFINITION_REQUEST_INTERVAL:
            return
        if len(self._definition_asked) >= 4096:
            self._definition_asked.clear()
        self._definition_asked[(room, site)] = now
        rcm = self.rcm
        if rcm is None:
            return

        async def ask() -> None:
            try:
                await self._rcm_send(rcm, encode_payload(DefinitionRequest(room)), [site])
            except FrameError as e:
                log.debug("definition of %s not requested from %s: %s", room, site, e)
        self._spawn(ask())

    def _on_missing(self, origin: str, ranges: tuple[tuple[int, int], ...]) -> None:
        """Messages of ``origin`` that will never arrive: journaled (Contract 3 lists seqs, so in records of at
        most ``MISSING_PER_RECORD``), and told to clients as a count and ranges, never a list as long as the
        outage (audit row 5: 163k seqs in one frame overflowed every client's queue)."""
        count = sum(last - first + 1 for first, last in ranges)
        batch: list[int] = []
        for first, last in ranges:
            seq = first
            while seq <= last:
                take = min(last, seq + MISSING_PER_RECORD - len(batch) - 1)
                batch.extend(range(seq, take + 1))
                seq = take + 1
                if len(batch) >= MISSING_PER_RECORD:
                    self.journal.missing(origin=origin, seqs=batch)
                    batch = []
        if batch:
            self.journal.missing(origin=origin, seqs=batch)
        shown = ranges[:MISSING_RANGES_SHOWN]
        self._broadcast({"type": "missing", "origin": origin, "count": count,
                         "ranges": [[first, last] for first, last in shown], "more": len(ranges) > len(shown)})

    # --- deliveries -----------------------------------------------------------------------------
    def _decode(self, d: Any) -> Payload | None:
        """The chat payload of a delivery, or None (logged) if no site could store or show it."""
        problem = order_key_problem(d.order)
        if problem is None and not (isinstance(d.seq, int) and 0 < d.seq <= MAX_INT):
            problem = f"sequence number {d.seq!r} is outside 63 bits"
        try:
            if problem is not None:
                raise PayloadError(problem)
            return decode_payload(d.payload)
        except PayloadError as e:
            self.rejected += 1
            log.warning("ignoring delivery %s from %s: %s", d.msg_id, d.origin, e)
            return None

    async def _on_delivery(self, d: Any) -> None:
        """Apply one RCM delivery in one database transaction; its effects on clients run after the commit.

        A delivery that cannot be applied (a value the database refuses, a bug) is rolled back,
        kept in the quarantine table and skipped: one bad message must not stop the site (audit
        row 2). Deliveries are journaled as the last step before the commit, so a refused one
        leaves no journal record and numbers no ``n``."""
        p = self._decode(d)
        if isinstance(p, ChatMessage) and d.origin == self.site:
            # Our own message may come back before RCM's reply to the send: its send record first.
            while self._sends_in_flight and d.msg_id not in self._sends_journaled:
                self._send_progress.clear()
                await self._send_progress.wait()
            self._sends_journaled.pop(d.msg_id, None)
        after: list[Callable[[], None]] = []
        journal_n = self.journal_n
        self.store.begin()
        try:
            if isinstance(p, ChatMessage):
                self._deliver_message(d, p, after)
            elif isinstance(p, RoomDefinition):
                self._apply_room_definition(d, p, after)
            elif isinstance(p, Roster):
                self._apply_roster(d.origin, p, after)
            elif isinstance(p, Receipts):
                self._apply_receipts(d.origin, p, after)
            elif isinstance(p, Barrier) and d.origin == self.site:
                after.append(lambda: self._barrier_reached(d.msg_id))
            elif isinstance(p, DefinitionRequest) and d.origin != self.site and p.room in self.private:
                after.append(lambda: self._spawn(self._resend_definitions(d.origin, [p.room])))
            self.store.set_state("rcm", [self.incarnation, d.n])
            self.store.commit()
        except asyncio.CancelledError:
            self.store.rollback()
            raise
        except Exception as e:
            self.store.rollback()
            self._reload_state()
            if self.journal_n != journal_n:
                # The journal already holds the delivery: it is not refused, the database failed.
                # Restore the database from the journal on the next RCM connection, and retry then.
                self._journal_ahead = True
                raise
            self._quarantine(d, e)
            return
        self._rcm_n = d.n
        for action in after:
            action()

    def _quarantine(self, d: Any, e: Exception) -> None:
        """Keep a delivery that could not be applied, and move past it (raises if the database is broken)."""
        log.error("quarantined delivery %s from %s (n %s): %s", d.msg_id, d.origin, d.n, e, exc_info=e)
        self.quarantined += 1
        self.store.begin()
        try:
            self.store.quarantine(d.n, str(d.msg_id), str(d.origin), json.dumps(d.order, default=repr)[:1000],
                                  bytes(d.payload), f"{type(e).__name__}: {e}"[:1000], self.clock())
            self.store.set_state("rcm", [self.incarnation, d.n])
            self.store.commit()
        except BaseException:
            self.store.rollback()
            raise
        self._rcm_n = d.n

    def _reload_state(self) -> None:
        """Memberships and private rooms as the database holds them (after a rolled-back transaction)."""
        self.local_members, self.user_rooms = {}, {}
        for user, room in self.store.all_memberships():
            self.local_members.setdefault(room, set()).add(user)
            self.user_rooms.setdefault(user, set()).add(room)
        self.private = self.store.private_rooms()
        self.known_defs = self.store.known_definitions()
        self.room_sessions = {}
        for user, sessions in self.user_sessions.items():
            for room in self.user_rooms.get(user, ()):
                self.room_sessions.setdefault(room, set()).update(sessions)

    def _deliver_message(self, d: Any, p: ChatMessage, after: list[Callable[[], None]]) -> None:
        if d.origin == self.site and p.client_id:
            # Our own message: its (user, client_id) is now known even if we crashed before RCM's answer,
            # so a retry of the same say is acked with this msg_id instead of being sent again.
            if self.store.sent_msg_id(p.user, p.client_id) is None and d.msg_id not in self._sends_journaled:
                # RCM accepted it but its answer never reached us (the RCM connection broke, or this
                # process was killed): the send record was never written. Write it now, before the
                # deliver record, so every message a user is acked for has one (Contract 3).
                self.journal.send(msg_id=d.msg_id, origin=self.site, seq=d.seq, room=p.room, user=p.user,
                                  text=p.text, sent_at=p.sent_at, order=list(d.order))
            self.store.record_sent(p.user, p.client_id, d.msg_id)
            self.store.remove_pending(p.user, p.client_id)
        if self.store.has_message(d.msg_id):
            return                                   # replayed by RCM after a restart
        if p.definition and not self._definition_known(p.room, p.definition, p.definition_order):
            self._hold(d, p, after)
            return
        self._store_delivery(d.msg_id, d.origin, d.seq, list(d.order), bool(d.late), p, after)

    def _definition_known(self, room: str, def_id: str, def_order: tuple | list) -> bool:
        """May a message tagged with this definition be shown under the room's rule at this site?

        Yes if the definition itself reached us (applied, superseded or a losing one), or if the room's
        definition here is later in the global order (the message is of an earlier era of the room).
        Otherwise the sender knew a member list we don't: hold the message (audit row 1)."""
        if def_id in self.known_defs:
            return True
        pr = self.private.get(room)
        return pr is not None and order_sort_key(def_order) <= pr.order_key

    def _hold(self, d: Any, p: ChatMessage, after: list[Callable[[], None]]) -> None:
        h = HeldMessage(p.definition, p.room, order_sort_key(p.definition_order), d.msg_id, d.origin, d.seq,
                        list(d.order), bytes(d.payload))
        if self.store.hold(h):
            log.info("holding %s of private room %s until its definition %s arrives", d.msg_id, p.room,
                     p.definition)
            if self.store.held_count() > HELD_MAX:
                oldest = self.store.held()[0]
                self.store.release(oldest.msg_id)
                log.warning("dropped held message %s of room %s: more than %d held", oldest.msg_id, oldest.room,
                            HELD_MAX)

        def after_hold() -> None:
            if p.room not in self.private:
                self.pending_private.setdefault(p.room, p.definition)
            self._ask_definition(p.room, d.origin)
        after.append(after_hold)

    def _release_held(self, room: str, after: list[Callable[[], None]]) -> None:
        """Show the held messages of ``room`` whose definition is now known (marked late: their place passed)."""
        for h in self.store.held(room):
            try:
                p = decode_payload(h.payload)
            except PayloadError:          # validated when held; a newer rule may refuse it now
                self.store.release(h.msg_id)
                continue
            if not isinstance(p, ChatMessage) or not self._definition_known(room, p.definition, p.definition_order):
                continue
            self.store.release(h.msg_id)
            if not self.store.has_message(h.msg_id):
                self._store_delivery(h.msg_id, h.origin, h.seq, h.order, True, p, after, held=True)

    def _store_delivery(self, msg_id: str, origin: str, seq: int, order: list, late: bool, p: ChatMessage,
                        after: list[Callable[[], None]], held: bool = False) -> None:
        """Store, journal and (after the commit) show one chat message under the room's current rule."""
        pr = self.private.get(p.room)
        if pr is not None and p.user not in pr.members:
            log.warning("dropping %s: %s is not a member of private room %s", msg_id, p.user, p.room)
            return
        n = self.journal_n + 1
        m = StoredMessage(msg_id, n, p.room, origin, seq, p.user, p.text, p.sent_at, order, late)
        self.store.add_message(m, self.clock())
        self.store.set_state("journal_n", n)
        if origin == self.site:
            self.store.add_receipts([(msg_id, self.site)])
        # The journal record last: once it is written the delivery counts (n is taken), whatever follows.
        self.journal.deliver(n=n, msg_id=msg_id, origin=origin, seq=seq, order=order, late=late,
                             room=p.room, user=p.user, text=p.text, sent_at=p.sent_at, held=held)
        self.journal_n = n

        def fan_out() -> None:
            self.rooms_with_history.add(p.room)
            if origin != self.site:
                self._pending_receipts.setdefault(origin, []).append(msg_id)
            data = ws_text_frame(P.encode(m.frame()))
            for s in list(self.room_sessions.get(p.room, ())):
                s.write(data)
            if origin == self.site:
                self._to_user(p.user, {"type": "receipt", "msg_id": msg_id, "site": self.site})
        after.append(fan_out)

    def _apply_room_definition(self, d: Any, p: RoomDefinition, after: list[Callable[[], None]]) -> None:
        # A re-sent definition carries its original identity (msg_id and order key); every site compares those.
        def_id = p.def_id or d.msg_id
        order = tuple(p.def_order) if p.def_id else tuple(d.order)
        def_site = def_id.rsplit(":", 1)[0]
        key = order_sort_key(order)
        if def_id not in self.known_defs:
            self.known_defs[def_id] = p.room
            self.store.add_definition(def_id, p.room)
        cur = self.private.get(p.room)
        # The earliest definition (global order) decides the owner; later ones by that owner update
        # the member list. Every site applies the same rule to the same definitions.
        if cur is not None:
            if cur.msg_id == def_id:
                return
            if cur.owner == p.owner and key <= cur.order_key:
                self._release_held(p.room, after)
                return
            if cur.owner != p.owner and key >= cur.order_key:
                self._release_held(p.room, after)
                return
        made_private = cur is None and def_site != self.site and bool(self.local_members.get(p.room))
        if made_private:
            # A public room in use here, made private elsewhere (during a partition, its maker could not
            # know): every site applies the definition alike; the members it removes here are told who did.
            log.warning("public room %s made private by %s at %s; its other members here are removed",
                        p.room, p.owner, def_site)
        pr = PrivateRoom(p.room, p.owner, frozenset(p.members), key, def_id, order)
        self.private[p.room] = pr
        self.pending_private.pop(p.room, None)
        self.store.put_private_room(pr)
        removed = [u for u in self.local_members.get(p.room, set()) if u not in pr.members]
        for u in removed:
            self._remove_member(u, p.room)
        owner_here = def_site == self.site and p.room not in self.user_rooms.get(p.owner, ())
        if owner_here:
            self._add_member(p.owner, p.room)
        self._roster_force = self._roster_force or bool(removed) or owner_here
        self._release_held(p.room, after)
        reason = (f"room {p.room!r} was made private by {p.owner} at {def_site}; you are not a member"
                  if made_private else "not a member of the private room")

        def notify() -> None:
            for u in removed:
                self._to_user(u, {"type": "left", "room": p.room, "reason": reason})
            if def_site == self.site and not p.def_id:
                self._to_user(p.owner, self._joined_frame(p.room))
        after.insert(0, notify)

    def _apply_roster(self, origin: str, p: Roster, after: list[Callable[[], None]]) -> None:
        if origin == self.site or origin not in self.rosters:
            return
        cur = self.rosters[origin]
        if p.generation <= cur.generation:
            return
        online = frozenset(p.online)
        came, went = sorted(online - cur.online), sorted(cur.online - online)

        def apply() -> None:
            for room, def_id in p.private.items():
                if room not in self.private and def_id not in self.known_defs:
                    self.pending_private.setdefault(room, def_id)
            self.rosters[origin] = RemoteRoster(p.generation, online, {r: frozenset(m) for r, m in p.rooms.items()})
            if came or went:
                self._broadcast({"type": "presence", "site": origin, "online": came, "offline": went})
        after.append(apply)

    def _apply_receipts(self, origin: str, p: Receipts, after: list[Callable[[], None]]) -> None:
        if origin == self.site:
            return
        frames: list[tuple[str, dict[str, Any]]] = []
        for msg_id in p.msg_ids:
            if not msg_id.startswith(self.site + ":"):
                continue
            if self.store.add_receipt(msg_id, origin):
                m = self.store.message(msg_id)
                if m is not None:
                    frames.append((m.user, {"type": "receipt", "msg_id": msg_id, "site": origin}))
        if frames:
            def push() -> None:
                for user, frame in frames:
                    self._to_user(user, frame)
            after.append(push)

    # --- background tasks -------------------------------------------------------------------------
    async def _rcm_loop(self) -> None:
        backoff = 0.1
        while not self._stopping:
            since = (self._rcm_inc, self._rcm_n) if self._rcm_inc is not None else None
            try:
                try:
                    client = await self._rcm_connect(since)
                except Exception as e:
                    if since is None or "RcmError" not in _kind(e) or "RcmUnavailable" in _kind(e):
                        raise
                    log.warning("RCM refused to resume at %s (%s); connecting from its start", since, e)
                    client = await self._rcm_connect(None)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.warning("cannot reach the RCM server of %s (%s); retrying in %.1f s", self.site, e, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self.settings.rcm_retry_max)
                continue
            backoff = 0.1
            if self._journal_ahead:
                self._recover(current=True)
                self._journal_ahead = False
            if client.incarnation != self._rcm_inc:
                self._rcm_inc, self._rcm_n, self._rcm_acked = client.incarnation, 0, 0
            self.incarnation = client.incarnation
            self.rcm = client
            self.rcm_connected.set()
            self._broadcast({"type": "site_status", "site": self.site, "status": CONNECTED})
            # The RCM server may have restarted (its peers start suspected): journal
            # what it says now in full, so the journal's statuses are its current view.
            self._journaled_status.clear()
            for peer, status in dict(client.statuses).items():
                self._on_status(peer, status)
            self._roster_force = True
            log.info("connected to RCM of %s (incarnation %s, resuming after %s)", self.site,
                     client.incarnation, since)
            try:
                async for ev in client.events():
                    kinds = _kind(ev)
                    if "Delivery" in kinds:
                        await self._on_delivery(ev)
                    elif "StatusChange" in kinds:
                        self._on_status(ev.site, ev.status)
                    elif "Missing" in kinds:
                        self._on_missing(ev.origin, tuple(ev.ranges))
            except asyncio.CancelledError:
                raise
            except Exception as e:
                if "RcmUnavailable" not in _kind(e):
                    log.exception("RCM event stream failed")
                else:
                    log.warning("lost the RCM connection of %s: %s", self.site, e)
            finally:
                self.rcm = None
                self.rcm_connected.clear()
                if self._barrier_fut is not None:
                    self._fail_barrier(self._barrier_fut, FrameError(
                        E.UNAVAILABLE, "the site's RCM server is not reachable; try again"))
                try:
                    await client.close()
                except Exception:
                    pass
            if self._stopping:
                return
            # We cannot vouch for any peer while our own RCM server is unreachable.
            self._broadcast({"type": "site_status", "site": self.site, "status": SUSPECTED})
            for peer in self.peers:
                if self.status.get(peer) == CONNECTED:
                    self._show_status(peer, SUSPECTED)
            await asyncio.sleep(backoff)

    async def _ack_rcm(self, rcm: Any) -> None:
        n = self._rcm_n
        if n > self._rcm_acked:
            await rcm.ack(n)
            self._rcm_acked = n

    async def _rcm_acker(self) -> None:
        while True:
            await asyncio.sleep(self.settings.rcm_ack_interval)
            rcm = self.rcm
            if rcm is not None:
                try:
                    await self._ack_rcm(rcm)
                except Exception as e:
                    log.debug("ack to RCM failed: %s", e)

    async def _receipt_flusher(self) -> None:
        while True:
            await asyncio.sleep(self.settings.receipt_interval)
            await self.flush_receipts()

    async def flush_receipts(self) -> None:
        """Send one receipt batch naming the messages delivered here since the last batch."""
        rcm = self.rcm
        if not self._pending_receipts or rcm is None:
            return
        pending, self._pending_receipts = self._pending_receipts, {}
        ids = [i for batch in pending.values() for i in batch]
        for i in range(0, len(ids), RECEIPT_BATCH):
            chunk = ids[i:i + RECEIPT_BATCH]
            dests = sorted({m.split(":", 1)[0] for m in chunk} & set(self._reachable_peers()))
            if not dests:
                continue
            try:
                await self._rcm_send(rcm, encode_payload(Receipts(tuple(chunk))), dests)
            except (FrameError, AttributeError) as e:   # receipts are best effort
                log.debug("receipt batch not sent: %s", e)

    async def _roster_flusher(self) -> None:
        while True:
            await asyncio.sleep(self.settings.presence_interval)
            await self.flush_roster()

    async def flush_roster(self) -> None:
        """Tell local clients and other sites who is online here and who is in which room."""
        online = self._online_users()
        rooms = {r: frozenset(m) for r, m in self.local_members.items() if m}
        if online != self._published_online:
            came, went = sorted(online - self._published_online), sorted(self._published_online - online)
            self._published_online = online
            self._broadcast({"type": "presence", "site": self.site, "online": came, "offline": went})
            self._roster_force = True
        if rooms != self._published_rooms:
            self._published_rooms = rooms
            self._roster_force = True
        rcm = self.rcm
        if not self._roster_force or rcm is None or not self._reachable_peers():
            return
        self._roster_gen += 1
        self.store.set_state("roster_gen", self._roster_gen)
        roster = Roster(self._roster_gen, tuple(sorted(online)), {r: tuple(sorted(m)) for r, m in rooms.items()},
                        {r: self.private[r].msg_id for r in rooms if r in self.private})
        try:
            await self._rcm_send(rcm, encode_payload(roster), self._reachable_peers())
            self._roster_force = False
        except FrameError as e:
            log.debug("roster not sent: %s", e)

    async def _session_expirer(self) -> None:
        while True:
            self.store.expire_sessions(self.clock())
            await asyncio.sleep(3600)

