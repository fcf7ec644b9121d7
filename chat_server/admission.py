"""Who may talk to the chat server over HTTP: connection caps, deadlines, Host and Origin checks.

Theory of operation
-------------------
Every accepted connection is wrapped in an ``AdmittedConnection``, a small
asyncio protocol in front of aiohttp's request handler. Once its transport
exists (after the TLS handshake, with TLS) it is counted against
``max_connections`` and ``max_connections_per_address``; one beyond them
never reaches aiohttp. It is told why in words, if it asks within a second:
an HTTP request gets ``503`` with the reason, a WebSocket upgrade is accepted
and closed at once with code 1013 ("try again later") and the reason, which
browsers and the TUI show ("this site accepts at most 256 connections from
your address"). At most ``EXPLAINED_MAX`` such answers are pending at once;
beyond that (a flood) a connection is closed without a word. A connection must send its first
request's headers within ``http_request_timeout`` (slowloris). The request
middleware checks the Host header against the names this server answers to
(DNS rebinding), and a WebSocket upgrade's Origin against the Host
(cross-site WebSocket hijacking). ``client_address`` is the address login
limits count: the peer's, or what a trusted proxy says it forwarded.
"""
from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
import struct
from collections.abc import Awaitable, Callable
from typing import Any, cast
from urllib.parse import urlsplit

from aiohttp import web

from .config import ChatSettings

log = logging.getLogger("chat_server")
WILDCARDS = ("", "0.0.0.0", "::")
EXPLAINED_MAX = 64            # connections over a cap being told why at once; beyond: closed without a word
EXPLAIN_WITHIN = 1.0          # seconds an over-cap connection has to send its request
WS_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
# Every HTTP response: only this origin's scripts, styles, images and WebSocket; no inline code, no framing.
# (web.py adds them to aiohttp's responses; the gate's own 503 below carries them too.)
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "
                               "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; "
                               "frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
}
FORWARDING_HEADERS = ("X-Forwarded-For", "Forwarded", "X-Real-IP")


def refusal_response(head: bytes, reason: str) -> bytes:
    """What an over-cap connection is told, given its request's head: a WebSocket upgrade is accepted
    and closed at once with 1013 and the reason (a browser's onclose shows it); anything else gets 503."""
    headers: dict[bytes, bytes] = {}
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        headers[name.strip().lower()] = value.strip()
    key = headers.get(b"sec-websocket-key")
    text = reason.encode("utf-8")[:120]
    if key is not None and headers.get(b"upgrade", b"").lower() == b"websocket":
        accept = base64.b64encode(hashlib.sha1(key + WS_GUID).digest())
        payload = struct.pack("!H", 1013) + text
        return (b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                b"Sec-WebSocket-Accept: " + accept + b"\r\n\r\n" + bytes([0x88, len(payload)]) + payload)
    body = text + b"\n"
    security = b"".join(f"{k}: {v}\r\n".encode() for k, v in SECURITY_HEADERS.items())
    return (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n" + security +
            b"Connection: close\r\nRetry-After: 10\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n"
            + body)


def host_name(host: str) -> str:
    """The name in a Host header, without port or IPv6 brackets, lower-case."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def _host_port(netloc: str, scheme: str) -> tuple[str, int] | None:
    try:
        u = urlsplit(f"//{netloc}")
        port = u.port or {"http": 80, "ws": 80, "https": 443, "wss": 443}.get(scheme, 0)
    except ValueError:
        return None
    return (u.hostname, port) if u.hostname else None


def _last(value: str) -> str:
    """The value the nearest proxy added to a comma-separated forwarding header."""
    return value.rsplit(",", 1)[-1].strip()


def origin_allowed(request: web.Request, proxies: frozenset[str] = frozenset()) -> bool:
    """False for a WebSocket opened by a page of another origin (cross-site WebSocket hijacking).

    Browsers always send ``Origin``; other clients (TUI, bots) send none and are allowed. Behind a
    declared reverse proxy (``proxies``, e.g. one terminating TLS) the page's origin is the one the
    proxy says the browser used (``X-Forwarded-Proto``, ``X-Forwarded-Host``); anyone else's
    forwarding headers are ignored.
    """
    origin = request.headers.get("Origin")
    if origin is None:
        return True
    scheme, host = request.scheme, request.host
    if (request.remote or "") in proxies:
        scheme = _last(request.headers.get("X-Forwarded-Proto", "")).lower() or scheme
        host = _last(request.headers.get("X-Forwarded-Host", "")) or host
    o = urlsplit(origin.strip())
    mine = _host_port(host, scheme)
    return mine is not None and o.scheme == scheme and _host_port(o.netloc, o.scheme) == mine


class AdmittedConnection(asyncio.Protocol):
    """aiohttp's handler for one connection, behind the gate (the caps need the transport's address)."""

    def __init__(self, gate: Admission, handler: asyncio.Protocol) -> None:
        self.gate = gate
        self.handler = handler
        self.address: str | None = None       # set once counted
        self.refused = False
        self.reason = ""                      # why it was refused, to tell it
        self.transport: asyncio.BaseTransport | None = None
        self._head = b""
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        reason = self.gate.admit(self, transport)
        if reason is None:
            self.handler.connection_made(transport)
            return
        self.refused, self.reason = True, reason
        transport = cast(asyncio.Transport, transport)   # (a stream server's transports can abort; uvloop's
                                                          # implement asyncio.Transport without subclassing it)
        if self.gate.explaining >= EXPLAINED_MAX:
            transport.abort()
            return
        self.gate.explaining += 1
        self._timer = asyncio.get_running_loop().call_later(EXPLAIN_WITHIN, transport.abort)

    def data_received(self, data: bytes) -> None:
        if not self.refused:
            self.handler.data_received(data)
            return
        self._head += data
        end = self._head.find(b"\r\n\r\n")
        if end < 0:
            if len(self._head) > 8192:
                self._finish(b"")
            return
        self._finish(refusal_response(self._head[:end], self.reason))

    def _finish(self, answer: bytes) -> None:
        tr = cast(asyncio.Transport | None, self.transport)
        if tr is not None and not tr.is_closing():
            if answer:
                tr.write(answer)
            tr.close()

    def eof_received(self) -> bool | None:
        return None if self.refused else self.handler.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self.gate.release(self)
        if not self.refused:
            self.handler.connection_lost(exc)
        elif self._timer is not None:
            self._timer.cancel()
            self._timer = None
            self.gate.explaining -= 1

    def pause_writing(self) -> None:
        if not self.refused:
            self.handler.pause_writing()

    def resume_writing(self) -> None:
        if not self.refused:
            self.handler.resume_writing()


class OpenFiles:
    """Client connections the process's open-files limit leaves room for, over every front end (WebSocket,
    IRC, TAK), each also under its own ``max_connections``.

    One more is refused as one past ``max_connections`` is: accepted, told, closed. So no ``accept`` fails
    for want of a descriptor, which on Python 3.11 is worse than a refusal: its accept loop goes on after
    the error and schedules a retry per attempt (CPython gh-151615), thousands of logged tracebacks a second
    that starve the site (measured: a signed-in user's say took 18 s with 104 clients under a limit of 120).
    ``RESERVE`` descriptors (a quarter of a lower limit) stay for the server's own files: its database and
    journal, RCM's socket, the listeners, the search readers' connections (about 15 to 40).
    """

    RESERVE = 128

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.room = limit - min(self.RESERVE, limit // 4)
        self.open = 0

    def full(self) -> bool:
        return self.open >= self.room


class Admission:
    def __init__(self, settings: ChatSettings, host: str, monotonic: Callable[[], float], files: OpenFiles) -> None:
        self.settings = settings
        self.monotonic = monotonic
        self.files = files                                    # the room over every front end (the server's)
        self.open = 0
        self.explaining = 0                                   # over-cap connections being told why
        self.per_address: dict[str, int] = {}                 # open connections per client address
        self._waiting: dict[int, Any] = {}                    # id(handler) -> aiohttp handler, no request yet
        self._logged: dict[str, float] = {}                   # address -> when its last refusal was logged
        wildcard = host in WILDCARDS
        self.any_host = wildcard and not settings.hosts
        self.hosts = settings.hosts | {"localhost", "127.0.0.1", "::1"} | (set() if wildcard else {host.lower()})

    # --- connections ---------------------------------------------------------------------------------
    def factory(self, make_handler: Callable[[], asyncio.Protocol]) -> Callable[[], asyncio.Protocol]:
        """The protocol factory for ``loop.create_server``: aiohttp's handlers behind the gate."""
        loop = asyncio.get_running_loop()

        def connection() -> asyncio.Protocol:
            handler = make_handler()
            self._waiting[id(handler)] = handler
            loop.call_later(self.settings.http_request_timeout, self._deadline, handler)
            return AdmittedConnection(self, handler)
        return connection

    def admit(self, conn: AdmittedConnection, transport: asyncio.BaseTransport) -> str | None:
        """Count a new connection against the caps; beyond them, the reason to tell it (never served).

        ``max_connections_per_address`` keeps one client address (a runaway script, a flood) from
        taking the whole ``max_connections`` budget and locking everybody else out; a trusted reverse
        proxy, which carries everybody, is exempt."""
        s = self.settings
        peer = transport.get_extra_info("peername")
        address = str(peer[0]) if isinstance(peer, tuple) and peer else str(peer)
        count = self.per_address.get(address, 0)
        if self.open >= s.max_connections:
            why = f"max_connections = {s.max_connections} reached"
            tell = f"this site accepts at most {s.max_connections} connections; try again later"
        elif self.files.full():
            why = f"the open-files limit leaves room for {self.files.room} client connections in all"
            tell = "this site accepts no more connections now; try again later"
        elif count >= s.max_connections_per_address and address not in s.proxies:
            why = f"max_connections_per_address = {s.max_connections_per_address} reached for {address}"
            tell = (f"this site accepts at most {s.max_connections_per_address} connections from your address; "
                    "close some tabs or clients, or try again later")
        else:
            conn.address = address
            self.open += 1
            self.files.open += 1
            self.per_address[address] = count + 1
            return None
        self._waiting.pop(id(conn.handler), None)
        now = self.monotonic()
        if now - self._logged.get(address, -1e18) >= 60.0:     # a flood logs once a minute, not per attempt
            if len(self._logged) >= 1024:
                self._logged = {a: t for a, t in self._logged.items() if now - t < 60.0}
            self._logged[address] = now
            log.warning("refused a connection from %s: %s", address, why)
        return tell

    def release(self, conn: AdmittedConnection) -> None:
        self._waiting.pop(id(conn.handler), None)
        address, conn.address = conn.address, None
        if address is None:
            return
        self.open -= 1
        self.files.open -= 1
        left = self.per_address[address] - 1
        if left:
            self.per_address[address] = left
        else:
            del self.per_address[address]

    def _deadline(self, handler: Any) -> None:  # (aiohttp's RequestHandler: it has the transport)
        if self._waiting.pop(id(handler), None) is not handler:
            return                              # a request arrived in time
        tr = handler.transport
        if tr is None or tr.is_closing():
            return
        log.info("closing a connection from %s: no complete HTTP request within %g s",
                 tr.get_extra_info("peername"), self.settings.http_request_timeout)
        tr.abort()

    # --- requests -------------------------------------------------------------------------------------
    @web.middleware
    async def middleware(self, request: web.Request,
                         handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
        self._waiting.pop(id(request.protocol), None)
        if not self.any_host and host_name(request.host) not in self.hosts:
            # A page of another site whose name was re-pointed at us (DNS rebinding) names itself here.
            log.warning("refused a request for host %r from %s", request.host[:80], request.remote)
            raise web.HTTPMisdirectedRequest(text=f"this chat server does not answer to {request.host[:80]!r}; "
                                                  "add it to [chat] allowed_hosts\n")
        return await handler(request)

    def client_address(self, request: web.Request) -> str:
        """The client's address: the connection's, or what a trusted proxy says it forwarded."""
        remote = request.remote or "?"
        if remote in self.settings.proxies:
            last = _last(request.headers.get("X-Forwarded-For", ""))
            if last:
                return last[:64]
        return remote

    def judged_address(self, request: web.Request) -> str | None:
        """The address that decides what a request may see (``/health``'s details): the client's.

        A request a declared proxy forwarded is judged by the client it was forwarded for; one that
        an undeclared proxy forwarded is not judged at all (None): a reverse proxy on this host would
        otherwise make every client look like this host's own tools."""
        remote = request.remote or ""
        if remote not in self.settings.proxies and any(h in request.headers for h in FORWARDING_HEADERS):
            return None
        return self.client_address(request)
