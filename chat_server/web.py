"""The web front end of a chat server: the page, ``/health``, and the WebSocket ``/ws``.

The HTTP server is aiohttp's, behind the admission gate (admission.py). Each
WebSocket becomes a ``Session`` whose frames go to the client-frame handlers
(handlers.py), like an IRC connection's (irc_server.py).
"""
from __future__ import annotations

import asyncio
import importlib.util
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import WSMsgType, web

from contracts.mission import is_loopback

from . import protocol as P
from .admission import SECURITY_HEADERS, origin_allowed
from .core_sites import CONNECTED
from .front_end import LISTEN_BACKLOG
from .protocol import ErrorCode as E
from .sessions import Session

if TYPE_CHECKING:
    from .server import ChatServer

log = logging.getLogger("chat_server")


def _static_dir() -> Path:
    """The browser client (``web_ui/static``, located without importing web_ui), else our placeholder page."""
    spec = importlib.util.find_spec("web_ui")
    for location in (spec.submodule_search_locations or []) if spec is not None else []:
        if (Path(location) / "static" / "index.html").is_file():
            return Path(location) / "static"
    return Path(__file__).parent / "static"


STATIC_DIR = _static_dir()


def memory_sizes(srv: ChatServer) -> dict[str, int]:
    """The size of every in-memory structure that remote input or time grows, each against its bound
    (docs/security.md, "Bounded memory"): what an operator watches on a long mission."""
    core, rooms, logins, irc = srv.core, srv.core.rooms, srv.logins, srv.irc_front
    limiters = (logins.pair_limiter, logins.addr_limiter, logins.user_limiter)
    return {
        "sessions": len(srv.sessions.connections),                          # max_connections (+ IRC's own)
        "connections_per_address": len(srv.admission.per_address),         # <= max_connections
        "user_rate_buckets": len(srv.sessions._user_buckets),               # <= accounts of the site
        "room_rate_buckets": len(core._room_buckets),                       # <= 10,000 (then cleared)
        "rooms": len(rooms.names()),                                        # max_rooms per site that makes them
        "private_rooms": len(rooms.private),
        "pending_private_rooms": len(rooms.pending),
        "known_definitions": len(rooms.known_defs),
        "roster_rooms": sum(len(r.rooms) for r in rooms.rosters.values()),  # <= peers x MAX_LIST
        "pending_receipts": sum(len(v) for v in core.pending_receipts.values()),   # one receipt_interval's
        "definition_requests": len(core._asked),                            # <= 4,096 (then cleared)
        "login_failure_keys": sum(len(x._failures) for x in limiters),      # <= 3 x 10,000
        "login_blocked_keys": sum(len(x._blocked_until) for x in limiters),
        "says_in_flight": len(srv.frames.says),                             # <= 64 per connection
        "irc_requests_queued": sum(c.requests.qsize() for c in irc.connections) if irc is not None else 0,
    }


class ChatWebSocket(web.WebSocketResponse):
    """aiohttp closes an oversized frame with code 1009 and no text; give the reason."""

    too_big_reason = b""

    async def close(self, *, code: int = 1000, message: bytes = b"", drain: bool = True) -> bool:
        if code == 1009 and not message:
            message = self.too_big_reason
        return await super().close(code=code, message=message, drain=drain)


class WebFront:
    """Serves the browser client, ``/health`` and ``/ws`` on the site's ``chat`` address."""

    def __init__(self, server: ChatServer) -> None:
        self.server = server
        self._runner: web.AppRunner | None = None
        self._listener: asyncio.AbstractServer | None = None

    def build_app(self) -> web.Application:
        app = web.Application(middlewares=[self.server.admission.middleware])
        app.router.add_get("/ws", self._ws_handler)
        app.router.add_get("/health", self._health)
        app.router.add_get("/", self._index)
        app.router.add_static("/static/", STATIC_DIR)
        app.on_response_prepare.append(self._security_headers)
        app.on_shutdown.append(self._on_shutdown)
        return app

    async def start(self, host: str, port: int) -> int:
        """Listen; the port (the one given, or the one the system chose for 0)."""
        srv, s = self.server, self.server.settings
        # No rounding of the server's timers to the whole second (aiohttp rounds up any timeout longer than
        # ``timeout_ceil_threshold``, 5 s by default): every WebSocket's ping (``ws_heartbeat``) would fall on
        # the same second's edge as those of the clients that logged in within that second, a burst of pings
        # and pongs each second that stalled the fan-out (docs/performance.md, "Pings on the second's edge").
        self._runner = web.AppRunner(self.build_app(), handle_signals=False, access_log=None,
                                     keepalive_timeout=s.keepalive_timeout,
                                     timeout_ceil_threshold=max(s.ws_heartbeat, s.keepalive_timeout) + 1.0)
        await self._runner.setup()
        http = self._runner.server
        assert http is not None
        extra: dict[str, Any] = {}
        if srv.ssl_context is not None:
            extra = {"ssl": srv.ssl_context, "ssl_handshake_timeout": s.http_request_timeout}
        self._listener = await asyncio.get_running_loop().create_server(
            srv.admission.factory(http), host, port, reuse_address=True, backlog=LISTEN_BACKLOG, **extra)
        return port or self._listener.sockets[0].getsockname()[1]

    def stop_listening(self) -> None:
        if self._listener is not None:
            self._listener.close()

    async def stop(self) -> None:
        """Close every client (1001) and the HTTP server."""
        self.stop_listening()
        if self._runner is not None:
            await self._runner.cleanup()

    async def _on_shutdown(self, app: web.Application) -> None:
        self.server.sessions.close_all(1001, "server shutting down")
        await asyncio.sleep(0)

    async def _index(self, request: web.Request) -> web.StreamResponse:
        return web.FileResponse(STATIC_DIR / "index.html")

    async def _security_headers(self, request: web.Request, response: web.StreamResponse) -> None:
        for name, value in SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)

    async def _health(self, request: web.Request) -> web.Response:
        """Up or not for anyone; the details (counts, statuses, refusal reasons) only to this host's tools."""
        srv = self.server
        answering = srv.rcm is not None and not srv.core.rcm_stalled      # (connected, yet silent: server.py)
        status = 200 if answering else 503
        body: dict[str, Any] = {"site": srv.site, "status": "ok" if answering else "degraded"}
        reader = srv.admission.judged_address(request)
        if reader is None or not (is_loopback(reader) or reader in srv.settings.health_readers):
            return web.json_response(body, status=status)
        sites = srv.site_statuses()
        body.update({"rcm": srv.rcm is not None, "rcm_stalled": srv.core.rcm_stalled,
                     "incarnation": srv.incarnation, "sites": sites,
                     "via": dict(srv.core.via),      # peer -> next hop, for peers reached through relays
                     "chat_down": sorted(srv.core.chat_gone),   # peers whose chat server is gone (its will came)
                     "clients": len(srv.connections), "users_online": len(srv.user_sessions), "n": srv.journal_n,
                     "rejected": srv.rejected, "quarantined": srv.quarantined, "held": srv.store.held_count(),
                     "refusals": await self._refusals(sites), "memory": memory_sizes(srv)})
        return web.json_response(body, status=status)

    async def _refusals(self, sites: dict[str, str]) -> dict[str, str]:
        """Why RCM refuses (or is refused by) each peer that is not connected, from RCM's stats.

        A peer whose mission file differs (ordering, channel mode, sites) stays apart for good; the
        reason belongs where operators look (``deploy up``'s health line, ``deploy status``)."""
        rcm = self.server.rcm
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
                if isinstance(v, dict) and v.get("last_refusal") and sites.get(p) != CONNECTED}

    async def _ws_handler(self, request: web.Request) -> web.WebSocketResponse:
        if not origin_allowed(request, self.server.settings.proxies):
            log.warning("refused a WebSocket from origin %r (host %r)", request.headers.get("Origin"), request.host)
            raise web.HTTPForbidden(text="WebSocket refused: Origin does not match this server\n")
        srv, s = self.server, self.server.settings
        ws = ChatWebSocket(max_msg_size=s.max_frame_bytes, compress=False, timeout=s.close_timeout, autoping=True,
                           heartbeat=s.ws_heartbeat)
        ws.too_big_reason = f"frame too large: the limit is max_frame_bytes = {s.max_frame_bytes}".encode()
        try:
            await ws.prepare(request)
        except ConnectionResetError:
            # The client left during its upgrade (a timeout of its own, a refusal elsewhere): nothing to answer
            # and nothing wrong here (aiohttp logged each as an ERROR with a traceback: 62 in one lab run).
            log.debug("a WebSocket client left during its upgrade (%s)", request.remote)
            return ws
        session = Session(srv.sessions, ws, request.transport, srv.admission.client_address(request))
        srv.connections.add(session)
        def no_hello() -> None:
            if session.user is None:
                session.close(1008, "no hello in time")
        hello_timer = asyncio.get_running_loop().call_later(s.hello_timeout, no_hello)
        try:
            async for msg in ws:
                if session.closed:
                    break
                if not srv.frames.admit(session):
                    break
                if msg.type == WSMsgType.TEXT:
                    await srv.frames.handle(session, msg.data)
                    await srv.frames.pace_says(session)
                elif msg.type == WSMsgType.BINARY:
                    session.send(P.error(E.BAD_FRAME, "binary frames are not supported; send JSON text frames"))
                elif msg.type == WSMsgType.ERROR:
                    break
        finally:
            hello_timer.cancel()
            if session.close_task is not None:    # let the close frame with its reason go out first
                await asyncio.gather(asyncio.shield(session.close_task), return_exceptions=True)
            srv.connections.discard(session)
            if not session.closed:
                session.closed = True
                srv.sessions.unregister(session)
            if ws.closed:
                session.cancel_abort()
        return ws
