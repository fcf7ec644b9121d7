"""Async client library for chat protocol v1 (used by tests, bots, the TUI and the benchmarks).

    client = await ChatClient.connect("ws://127.0.0.1:8101/ws", "alice", "secret", reconnect=True)
    await client.join("ops")
    ack = await client.say("ops", "hello")          # {"type": "ack", "msg_id": "A:17", ...}
    async for frame in client.events():              # message, receipt, site_status, presence, missing...
        ...

Requests carry an ``id`` that the server echoes in its reply (or in the
``in_reply_to`` of an ``error``, which is raised as ``ChatError``). Every other
frame goes to ``events()``. With ``reconnect=True`` a dropped connection is
re-opened with the session token and the highest site delivery number seen
(``last_n``), so the server replays what was missed; requests still waiting for
a reply are sent again (``say`` with the same ``client_id``, so the server acks
it once and sends it once). A connection the server ends with close 1000
"logged out" (the user's ``logout``, here or in another session with
``all``) is never re-opened: the client forgets its session token and
password and ends as closed (``logged_out`` is true), since logging in again
would undo the logout.
"""
from __future__ import annotations

import asyncio
import itertools
import json
import secrets
import ssl as ssl_module
from collections import deque
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp

REPLY_TYPES = {"hello": "welcome", "join": "joined", "leave": "left", "say": "ack", "rooms": "rooms",
               "history": "history", "create": "created", "logout": "logged_out"}
LOGGED_OUT_CODE, LOGGED_OUT_REASON = 1000, "logged out"   # how the server closes the sessions a logout ends


def client_ssl_context(ca_file: str | Path) -> ssl_module.SSLContext:
    """A context trusting only the mission CA (``<data_dir>/<site>/tls/ca.pem``) for ``wss://`` URLs.

    The site certificate names the chat server's address (IP or DNS SAN), so host names are checked.
    """
    ctx = ssl_module.create_default_context(ssl_module.Purpose.SERVER_AUTH, cafile=str(ca_file))
    ctx.minimum_version = ssl_module.TLSVersion.TLSv1_2
    return ctx


class ChatError(Exception):
    """The server answered a request with an ``error`` frame."""

    def __init__(self, frame: dict[str, Any]) -> None:
        super().__init__(f"{frame.get('code')}: {frame.get('message')}")
        self.code: str = frame.get("code", "")
        self.frame = frame


class ChatClosed(ConnectionError):
    """The connection is closed (and not being re-opened)."""

    def __init__(self, code: int | None, reason: str) -> None:
        super().__init__(f"connection closed ({code}): {reason}")
        self.code = code
        self.reason = reason


class ChatClient:
    """One user's connection to a chat server."""

    def __init__(self, url: str, user: str, password: str | None = None, *, session: str | None = None,
                 reconnect: bool = False, reconnect_delay: float = 0.2, max_events: int = 100_000,
                 http: aiohttp.ClientSession | None = None, ssl: ssl_module.SSLContext | None = None,
                 ca_file: str | Path | None = None) -> None:
        """``wss://`` URLs: pass the mission CA as ``ca_file`` or a ready ``ssl`` context
        (without either, the system's trust store is used)."""
        self.url = url
        if ssl is None and ca_file is not None:
            ssl = client_ssl_context(ca_file)
        self._ssl: ssl_module.SSLContext | bool = ssl if ssl is not None else True
        self.user = user
        self._password = password
        self.session_token = session
        self.reconnect = reconnect
        self.reconnect_delay = reconnect_delay
        self.welcome: dict[str, Any] = {}
        self.last_n = 0
        self.close_code: int | None = None
        self.close_reason = ""
        self.reconnects = 0
        self._http: aiohttp.ClientSession | None = http   # shared by many clients (benchmarks) if given
        self._own_http = http is None
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._ids = itertools.count(1)
        self._pending: dict[str, tuple[dict[str, Any], asyncio.Future[dict[str, Any]]]] = {}
        self._events: deque[dict[str, Any]] = deque(maxlen=max_events)
        self._event_ready = asyncio.Event()
        self._reader: asyncio.Task[None] | None = None
        self._reconnector: asyncio.Task[None] | None = None
        self._closing = False
        self._done = False
        self._connected = asyncio.Event()
        self.on_frame: Callable[[dict[str, Any]], None] | None = None

    # --- connection -------------------------------------------------------------------------------
    @classmethod
    async def connect(cls, url: str, user: str, password: str | None = None, *, session: str | None = None,
                      reconnect: bool = False, timeout: float = 30.0, **kw: Any) -> ChatClient:
        """Open a connection and log in; raise ChatError if the login is refused (``kw``: see __init__)."""
        client = cls(url, user, password, session=session, reconnect=reconnect, **kw)
        try:
            await asyncio.wait_for(client._open(resume=False), timeout)
        except BaseException:
            await client.close()
            raise
        return client

    async def _open(self, resume: bool) -> None:
        if self._http is None:
            self._http = aiohttp.ClientSession()
            self._own_http = True
        ws = self._ws = await self._http.ws_connect(self.url, autoping=True, max_msg_size=0, compress=0,
                                                    ssl=self._ssl)
        hello: dict[str, Any] = {"type": "hello", "user": self.user, "id": "hello"}
        if self.session_token and (resume or self._password is None):
            hello["session"] = self.session_token
        else:
            hello["password"] = self._password
        if resume:
            hello["last_n"] = self.last_n         # the server replays what we missed
        try:
            await ws.send_str(json.dumps(hello))
            while True:
                msg = await ws.receive()
                if msg.type != aiohttp.WSMsgType.TEXT:
                    raise ChatClosed(ws.close_code, f"closed during login: {msg.extra or msg.type.name}")
                frame = json.loads(msg.data)
                if frame.get("type") == "welcome":
                    break
                if frame.get("type") == "error":
                    raise ChatError(frame)
        except BaseException:
            await ws.close()
            raise
        self.welcome = frame
        if frame.get("session"):
            self.session_token = frame["session"]
        if not resume:
            self.last_n = max(self.last_n, int(frame.get("n", 0)))
        self._connected.set()
        self._reader = asyncio.ensure_future(self._read(self._ws))
        for frame_out, _ in list(self._pending.values()):
            await self._ws.send_str(json.dumps(frame_out))

    async def _read(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        code: int | None = None
        reason = ""
        try:
            while True:
                msg = await ws.receive()
                if msg.type == aiohttp.WSMsgType.TEXT:
                    self._dispatch(json.loads(msg.data))
                elif msg.type == aiohttp.WSMsgType.CLOSE:
                    code, reason = msg.data, msg.extra or ""
                    break
                elif msg.type in (aiohttp.WSMsgType.CLOSING, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.ERROR):
                    reason = str(ws.exception() or msg.type.name)
                    break
        except (aiohttp.ClientError, ConnectionError) as e:
            reason = str(e)
        if not ws.closed:
            await ws.close()
        self.close_code = code if code is not None else ws.close_code
        self.close_reason = reason
        self._connected.clear()
        if self._closing:
            return
        if self.logged_out:
            # A logout (ours, or another session's `logout {all}`): resuming would be refused, and logging
            # in again with the password would undo it. Forget both and end.
            self.session_token = None
            self._password = None
            self._finish()
            return
        if self.reconnect and self.close_code not in (1008, 1009):
            self._reconnector = asyncio.ensure_future(self._reconnect_loop())
            return
        self._finish()

    async def _reconnect_loop(self) -> None:
        while not self._closing:
            await asyncio.sleep(self.reconnect_delay)
            try:
                await self._open(resume=True)
                self.reconnects += 1
                return
            except ChatError as e:
                if e.code == "auth_failed":
                    if self.session_token and self._password is not None:
                        self.session_token = None      # expired session: log in again, still resuming
                        continue
                    self._finish()
                    return
            except (TimeoutError, aiohttp.ClientError, ConnectionError, OSError):
                pass

    @property
    def logged_out(self) -> bool:
        """True once the server ended this connection because the user logged out (here or elsewhere)."""
        return self.close_code == LOGGED_OUT_CODE and self.close_reason == LOGGED_OUT_REASON

    @property
    def closed(self) -> bool:
        """True once the connection is gone for good (closed, refused on reconnection, or logged out)."""
        return self._done

    def _finish(self) -> None:
        self._done = True
        err = ChatClosed(self.close_code, self.close_reason)
        for _, fut in self._pending.values():
            if not fut.done():
                fut.set_exception(err)
        self._pending.clear()
        self._event_ready.set()

    def _dispatch(self, frame: dict[str, Any]) -> None:
        if self.on_frame is not None:
            self.on_frame(frame)
        if frame.get("type") == "message" and isinstance(frame.get("n"), int):
            self.last_n = max(self.last_n, frame["n"])
        rid = frame.get("id") if frame.get("type") != "error" else frame.get("in_reply_to")
        if isinstance(rid, str) and rid in self._pending:
            _, fut = self._pending.pop(rid)
            if not fut.done():
                if frame.get("type") == "error":
                    fut.set_exception(ChatError(frame))
                else:
                    fut.set_result(frame)
            return
        self._events.append(frame)
        self._event_ready.set()

    async def close(self) -> None:
        """Close the connection (no reconnection)."""
        self._closing = True
        if self._reconnector is not None:
            self._reconnector.cancel()
            await asyncio.gather(self._reconnector, return_exceptions=True)
        if self._ws is not None and not self._ws.closed:
            await self._ws.close()
        if self._reader is not None:
            await asyncio.gather(self._reader, return_exceptions=True)
        if self._http is not None and self._own_http:
            await self._http.close()
        self._http = None
        if not self._done:
            self._finish()

    # --- requests ----------------------------------------------------------------------------------
    async def request(self, frame: dict[str, Any], timeout: float | None = 30.0) -> dict[str, Any]:
        """Send a frame with a fresh ``id`` and return the server's reply (ChatError on error)."""
        if self._done:
            raise ChatClosed(self.close_code, self.close_reason)
        rid = f"r{next(self._ids)}"
        frame = dict(frame, id=rid)
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[rid] = (frame, fut)
        if self._connected.is_set() and self._ws is not None:
            try:
                await self._ws.send_str(json.dumps(frame))
            except (aiohttp.ClientError, ConnectionError):
                if not self.reconnect:
                    raise
        try:
            return await asyncio.wait_for(asyncio.shield(fut), timeout)
        finally:
            self._pending.pop(rid, None)

    async def send_raw(self, text: str) -> None:
        """Send a frame as is (tests of bad input)."""
        assert self._ws is not None
        await self._ws.send_str(text)

    async def join(self, room: str) -> dict[str, Any]:
        return await self.request({"type": "join", "room": room})

    async def leave(self, room: str) -> dict[str, Any]:
        return await self.request({"type": "leave", "room": room})

    async def create(self, room: str, members: list[str] | None, label: Any = None) -> dict[str, Any]:
        """Define a private room (``members``: names, or ``name@SITE``), or with ``members`` None a labeled public
        room (labeled missions; ``label``: JSON or text, its floor); returns the ``created`` reply (``joined``
        follows as an event)."""
        frame: dict[str, Any] = {"type": "create", "room": room}
        if members is not None:
            frame["members"] = list(members)
        if label is not None:
            frame["label"] = label
        return await self.request(frame)

    async def say(self, room: str, text: str, client_id: str | None = None, *,
                  expires_in: float | None = None, label: Any = None) -> dict[str, Any]:
        """Post a message (``expires_in``: seconds until it expires; ``label``: its security label, JSON or text,
        labeled missions); returns the ``ack`` (accepted, durable at this site)."""
        cid = client_id or secrets.token_hex(8)
        frame: dict[str, Any] = {"type": "say", "room": room, "text": text, "client_id": cid}
        if expires_in is not None:
            frame["expires_in"] = expires_in
        if label is not None:
            frame["label"] = label
        return await self.request(frame)

    async def report_position(self, lat: float, lon: float, **extra: Any) -> dict[str, Any]:
        """Report a position (``unit``, ``alt``, ``course``, ``speed``, ``at``, ``expires_in`` in ``extra``);
        returns the report as it travels (a ``position`` frame with the site and expiry)."""
        return await self.request({"type": "position", "lat": lat, "lon": lon, **extra})

    async def positions(self) -> list[dict[str, Any]]:
        """Every unit's newest position; from now on newer ones arrive as ``position`` events."""
        return list((await self.request({"type": "positions"}))["units"])

    async def rooms(self, page_size: int | None = None) -> list[dict[str, Any]]:
        """Every room listed to this user: the ``rooms`` pages one after the other while ``more`` is true."""
        out: list[dict[str, Any]] = []
        frame: dict[str, Any] = {"type": "rooms"}
        if page_size is not None:
            frame["limit"] = page_size
        while True:
            reply = await self.request(frame)
            page = reply.get("rooms") or []
            out += page
            if not reply.get("more") or not page:
                return out
            frame = dict(frame, after=page[-1]["room"])

    async def logout(self, everywhere: bool = False) -> dict[str, Any]:
        """End this login (every login of the user at this site with ``everywhere``); the server then closes
        the connection, and the client does not reconnect."""
        return await self.request({"type": "logout", "all": everywhere})

    async def history(self, room: str, *, before: str | list[Any] | None = None, after_n: int | None = None,
                      limit: int | None = None) -> dict[str, Any]:
        frame: dict[str, Any] = {"type": "history", "room": room}
        if before is not None:
            frame["before"] = before
        if after_n is not None:
            frame["after_n"] = after_n
        if limit is not None:
            frame["limit"] = limit
        return await self.request(frame)

    # --- events --------------------------------------------------------------------------------------
    async def next_event(self, timeout: float | None = None) -> dict[str, Any]:
        """The next frame that is not a reply; ChatClosed once the connection is gone for good."""
        async def wait() -> dict[str, Any]:
            while not self._events:
                if self._done:
                    raise ChatClosed(self.close_code, self.close_reason)
                self._event_ready.clear()
                await self._event_ready.wait()
            return self._events.popleft()
        return await asyncio.wait_for(wait(), timeout)

    async def wait_for(self, predicate: Callable[[dict[str, Any]], bool], timeout: float = 30.0,
                       keep: bool = True) -> dict[str, Any]:
        """The first event matching ``predicate``; the others stay queued (dropped if not ``keep``)."""
        kept: list[dict[str, Any]] = []
        try:
            async with asyncio.timeout(timeout):
                while True:
                    ev = await self.next_event()
                    if predicate(ev):
                        return ev
                    if keep:
                        kept.append(ev)
        finally:
            if kept:
                self._events.extendleft(reversed(kept))

    async def events(self) -> AsyncIterator[dict[str, Any]]:
        while True:
            try:
                yield await self.next_event()
            except ChatClosed:
                return

    def drain_events(self) -> list[dict[str, Any]]:
        """Every event received so far, without waiting."""
        out = list(self._events)
        self._events.clear()
        return out
