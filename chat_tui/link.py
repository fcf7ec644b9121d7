"""The client's connection to its chat server: login, requests, events, reconnection with back-off.

Theory of operation
-------------------
``ChatLink.run()`` owns one ``chat_server.client.ChatClient`` at a time (opened
with ``reconnect=False``) and loops: connect, pump events, and when the
connection is lost, wait a growing, jittered delay and connect again, for as
long as the link is not closed. Every change of state is reported through
``on_status`` (so a front end can show "reconnecting in 4 s, attempt 3"), and
every frame, events and replies alike, through ``on_frame``: front ends keep
one code path for what the server says.

Requests are queued (``request``/``say``) and sent in order by one sender task
while connected; a request cut off by a lost connection is sent again after
the reconnection. ``say`` keeps its ``client_id`` so the server acknowledges
and sends it once. After a reconnection the link logs in with its session
token (falling back to the password) and fetches, per joined room, the
messages delivered at the site since the highest delivery number it has seen
(``history {after_n}``), so nothing shown while the link was down is lost.
A ``rooms`` listing comes in pages (``more``): the link asks for the page
after the last room until the last one, and hands the front end one ``rooms``
frame with every room (``more`` still true only when a page failed or
``MAX_LISTED_ROOMS`` was reached; ``incomplete`` then says why). The room
``directory`` is fetched the same way at every (re)connection, after the joins,
and then the units' positions (``positions {}``, which also asks the server
for ``position`` events on this connection).
A request may carry a ``purpose`` (never sent): its reply, or its ``error``,
comes back with the same ``purpose``, so the front end knows what it answers
(a page around a message, the original of a reply, a search).

We own the reconnection rather than using ``ChatClient(reconnect=True)``
because that client offers no hook telling us that the connection dropped or
came back, and an operator must see that state.

``logout()`` ends the session at the server: it stops reconnecting, lets
queued requests go out, sends ``logout {all}``, waits (briefly) for
``logged_out`` or for the server to close the socket, and forgets the session
token and the password whatever the answer, so nothing can resume it from here.
When the server closes the connection with "logged out" unasked (the user
ended all their sessions from elsewhere), the link does the same and stops
with ``logged_out``: logging in again with the remembered password would undo it.
"""
from __future__ import annotations

import asyncio
import os
import random
import secrets
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp

from chat_server.client import ChatClient, ChatClosed, ChatError
from contracts.precedence import DEFAULT

from .positions import positions_request

CONNECTING, CONNECTED, RETRYING, AUTH_FAILED, CLOSED = "connecting", "connected", "retrying", "auth_failed", "closed"
LOGGED_OUT = "logged_out"          # the server ended the session (a logout of all the user's sessions elsewhere)
LOGGED_OUT_REASON = "logged out"   # the close reason the chat server gives it
CATCH_UP_LIMIT = 500
REQUEST_TIMEOUT = 20.0
LOGOUT_TIMEOUT = 3.0               # seconds to wait for queued requests, then again for the server's answer
MAX_LISTED_ROOMS = 10_000          # a rooms listing stops there (the server's max_rooms default)
LOCAL_KEYS = ("catch_up", "listing", "purpose")   # request fields for the link itself, never sent
LISTINGS = ("rooms", "directory")                 # replies that come in pages (``more``, ``after``)


@dataclass(frozen=True, slots=True)
class LinkStatus:
    """What the link is doing, for the operator."""

    state: str                     # connecting | connected | retrying | auth_failed | logged_out | closed
    detail: str = ""               # why (error text), or where we are connected
    attempt: int = 0               # failed attempts since the last successful connection
    retry_in: float | None = None  # seconds until the next attempt (retrying)

    def describe(self) -> str:
        if self.state == CONNECTED:
            return f"connected {self.detail}".rstrip()
        if self.state == RETRYING:
            return f"unreachable ({self.detail}); retry {self.attempt} in {self.retry_in:.1f} s"
        if self.state == CONNECTING:
            return f"connecting {self.detail}".rstrip()
        if self.state == AUTH_FAILED:
            return f"login refused: {self.detail}"
        if self.state == LOGGED_OUT:
            return f"signed out by the server: {self.detail}"
        return "closed"


class Backoff:
    """Exponential back-off with jitter: initial, initial*factor, ... up to maximum."""

    def __init__(self, initial: float = 0.5, maximum: float = 15.0, factor: float = 2.0, jitter: float = 0.2,
                 rng: random.Random | None = None) -> None:
        if not 0 < initial <= maximum:
            raise ValueError("back-off needs 0 < initial <= maximum")
        self.initial, self.maximum, self.factor, self.jitter = initial, maximum, factor, jitter
        self._rng = rng or random.Random()
        self._next = initial

    def next(self) -> float:
        d = self._next
        self._next = min(self.maximum, self._next * self.factor)
        return d * (1 + self.jitter * (2 * self._rng.random() - 1))

    def reset(self) -> None:
        self._next = self.initial


def error_message(e: ChatError) -> str:
    return str(e.frame.get("message") or e.code or "error")


def describe_error(e: BaseException) -> str:
    if isinstance(e, asyncio.TimeoutError):
        return "timed out"
    if isinstance(e, aiohttp.WSServerHandshakeError):
        return f"HTTP {e.status} at the WebSocket endpoint"
    if isinstance(e, aiohttp.ClientConnectorError):
        err = e.os_error
        why = os.strerror(err.errno) if err.errno else (err.strerror or str(err))
        return f"cannot connect to {e.host}:{e.port}: {why}"
    return str(e) or type(e).__name__


def health_url(ws_url: str) -> str:
    """The chat server's ``/health`` next to its WebSocket endpoint (``ws://h:p/ws`` -> ``http://h:p/health``)."""
    parts = urlsplit(ws_url)
    scheme = "https" if parts.scheme in ("wss", "https") else "http"
    return urlunsplit((scheme, parts.netloc, "/health", "", ""))


async def site_of(ws_url: str, *, ssl: Any = None, timeout: float = 3.0) -> str | None:
    """The name of the site whose chat server answers at ``ws_url`` (``/health`` says it to anyone), or None:
    the login screen names the site one signs in to."""
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as http:
            async with http.get(health_url(ws_url), ssl=ssl if ssl is not None else True) as r:
                body = await r.json(content_type=None)
    except (OSError, aiohttp.ClientError, TimeoutError, ValueError):
        return None
    site = body.get("site") if isinstance(body, dict) else None
    return site if isinstance(site, str) and site else None


class ChatLink:
    """One user's link to a chat server, kept up until ``close()``."""

    def __init__(self, url: str, user: str, password: str, *, on_frame: Callable[[dict[str, Any]], None],
                 on_status: Callable[[LinkStatus], None], backoff: Backoff | None = None,
                 connect_timeout: float = 10.0, ssl: Any = None) -> None:
        self.url = url
        self.ssl = ssl                   # an ssl.SSLContext for wss:// (the mission CA), or None
        self.user = user
        self._password = password
        self.on_frame = on_frame
        self.on_status = on_status
        self.backoff = backoff or Backoff()
        self.connect_timeout = connect_timeout
        self.status = LinkStatus(CONNECTING, url)
        self.client: ChatClient | None = None
        self.session: str | None = None
        self.last_n = 0
        self.connections = 0
        self._outbox: deque[dict[str, Any]] = deque()
        self._outbox_ready = asyncio.Event()
        self._wake = asyncio.Event()
        self._closing = False
        self._idle = asyncio.Event()     # set when the outbox is empty and nothing is in flight
        self._idle.set()

    # --- front-end API ------------------------------------------------------------------------------
    def request(self, frame: dict[str, Any]) -> None:
        """Queue a request; its reply (or ``error``) will come through ``on_frame``."""
        self._outbox.append(frame)
        self._idle.clear()
        self._outbox_ready.set()

    def say(self, room: str, text: str, *, precedence: str = DEFAULT, reply_to: str | None = None,
            expires_in: float | None = None, label: dict[str, Any] | None = None) -> str:
        """Queue a chat message (at ``precedence``, a contracts.precedence name; answering ``reply_to``;
        expiring after ``expires_in`` seconds; carrying the security ``label`` ``{level, caveats}``); returns its
        ``client_id`` (the ``ack`` carries it)."""
        cid = secrets.token_hex(8)
        frame: dict[str, Any] = {"type": "say", "room": room, "text": text, "client_id": cid}
        if precedence != DEFAULT:            # routine: left out (the protocol's default)
            frame["precedence"] = precedence
        if reply_to:
            frame["reply_to"] = reply_to
        if expires_in is not None:
            frame["expires_in"] = expires_in
        if label is not None:
            frame["label"] = label
        self.request(frame)
        return cid

    def retry_now(self) -> None:
        """Skip the rest of the back-off wait."""
        self._wake.set()

    async def drained(self, timeout: float) -> bool:
        """Wait until every queued request got its reply; False on timeout."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
            return True
        except TimeoutError:
            return False

    async def logout(self, everywhere: bool = False, timeout: float = LOGOUT_TIMEOUT) -> str:
        """End this session at the server (with ``everywhere``: every session of the user at this site),
        forget the token and close; returns what happened, for the operator. Never reconnects."""
        self._closing = True              # from here on, a lost connection is not re-opened
        self._wake.set()
        client = self.client
        try:
            if client is None or self.status.state != CONNECTED:
                return "not connected to the chat server: the session is forgotten here only"
            await self.drained(timeout)   # what was typed before /logout still goes out
            try:
                reply = await client.request({"type": "logout", "all": everywhere}, timeout=timeout)
            except ChatClosed as e:       # the server closed first (or without a reply): did it say why?
                if e.code == 1000 and "logged out" in (e.reason or ""):
                    return self._logged_out(everywhere)
                return f"the connection closed ({e.reason or e.code}): the session is forgotten here only"
            except ChatError as e:
                return f"the server refused ({error_message(e)}): the session is forgotten here only"
            except TimeoutError:
                return f"no answer within {timeout:g} s: the session is forgotten here only"
            return self._logged_out(bool(reply.get("all", everywhere)))
        finally:
            self.session = None
            self._password = ""
            await self.close()

    @staticmethod
    def _logged_out(everywhere: bool) -> str:
        return ("the server ended every session of yours at this site" if everywhere
                else "the server ended this session")

    async def close(self) -> None:
        self._closing = True
        self._wake.set()
        self._outbox_ready.set()
        if self.client is not None:
            await self.client.close()

    # --- the loop -----------------------------------------------------------------------------------
    def _set_status(self, status: LinkStatus) -> None:
        self.status = status
        self.on_status(status)

    async def run(self) -> LinkStatus:
        """Keep the link up until closed, the login is refused or the server signs us out; the final status."""
        attempt = 0
        while not self._closing:
            self._set_status(LinkStatus(CONNECTING, self.url, attempt))
            try:
                client = await self._login()
            except ChatError as e:
                if e.code in ("auth_failed", "bad_field", "missing_field"):
                    self._set_status(LinkStatus(AUTH_FAILED, str(e.frame.get("message") or e)))
                    return self.status
                error: BaseException = e
            except (TimeoutError, OSError, aiohttp.ClientError, ChatClosed, ValueError) as e:
                error = e
            else:
                attempt = 0
                self.backoff.reset()
                await self._serve(client)
                if self._closing:
                    break
                if client.close_code == 1000 and client.close_reason == LOGGED_OUT_REASON:
                    self.session = None
                    self._password = ""
                    self.on_frame({"type": "client_lost", "reason": LOGGED_OUT_REASON})
                    self._set_status(LinkStatus(LOGGED_OUT, "all your sessions at this site were ended"))
                    return self.status
                self.on_frame({"type": "client_lost", "reason": client.close_reason or "connection closed"})
                error = ConnectionError(f"lost: {client.close_reason or 'connection closed'}")
            if self._closing:
                break
            attempt += 1
            delay = self.backoff.next()
            self._set_status(LinkStatus(RETRYING, describe_error(error), attempt, delay))
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), delay)
            except TimeoutError:
                pass
        self._set_status(LinkStatus(CLOSED))
        return self.status

    async def _login(self) -> ChatClient:
        if self.session is not None:
            try:
                return await ChatClient.connect(self.url, self.user, session=self.session,
                                                timeout=self.connect_timeout, ssl=self.ssl)
            except ChatError as e:
                if e.code != "auth_failed":
                    raise
                self.session = None       # expired or forgotten by the server: log in again
        return await ChatClient.connect(self.url, self.user, self._password, timeout=self.connect_timeout,
                                        ssl=self.ssl)

    async def _serve(self, client: ChatClient) -> None:
        self.client = client
        resumed = self.connections > 0
        self.connections += 1
        welcome = dict(client.welcome)
        self.session = welcome.get("session") or self.session
        since = self.last_n
        self.last_n = max(self.last_n, int(welcome.get("n") or 0)) if not resumed else self.last_n
        self.on_frame(welcome)
        self._set_status(LinkStatus(CONNECTED, f"to {welcome.get('site', '?')} as {self.user}"))
        sender = asyncio.ensure_future(self._send_loop(client))
        try:
            # Rooms we are a member of: their recent history on first contact, what we missed after a gap.
            self._outbox.appendleft(positions_request())
            self._outbox.appendleft({"type": "directory", "purpose": {"kind": "directory", "show": False}})
            for room in reversed(welcome.get("rooms") or []):
                if resumed:
                    self._outbox.appendleft({"type": "history", "room": room, "after_n": since,
                                             "limit": CATCH_UP_LIMIT, "catch_up": True})
                else:
                    self._outbox.appendleft({"type": "join", "room": room})
            self._idle.clear()
            self._outbox_ready.set()
            async for frame in client.events():
                if frame.get("type") == "message" and isinstance(frame.get("n"), int):
                    self.last_n = max(self.last_n, frame["n"])
                self.on_frame(frame)
        finally:
            sender.cancel()
            await asyncio.gather(sender, return_exceptions=True)
            await client.close()
            self.client = None

    def _listing_cut(self, frame: dict[str, Any], why: str) -> None:
        """A later page of a listing failed: show the rooms that came, marked incomplete."""
        if frame.get("type") in LISTINGS and frame.get("listing"):
            out = {"type": frame["type"], "rooms": list(frame["listing"]), "more": True,
                   "incomplete": f"the next page failed: {why}"}
            if "purpose" in frame:
                out["purpose"] = frame["purpose"]
            self.on_frame(out)

    async def _send_loop(self, client: ChatClient) -> None:
        while True:
            if not self._outbox:
                self._idle.set()
                self._outbox_ready.clear()
                await self._outbox_ready.wait()
                if self._closing:
                    return
                continue
            frame = self._outbox[0]
            wire = {k: v for k, v in frame.items() if k not in LOCAL_KEYS}
            try:
                reply = await client.request(wire, timeout=REQUEST_TIMEOUT)
            except ChatClosed:
                return                    # stays queued: sent again after the reconnection
            except ChatError as e:
                self._outbox.popleft()
                self._listing_cut(frame, error_message(e))
                self.on_frame(self._with_purpose(dict(e.frame, request=wire), frame))
                continue
            except TimeoutError:
                self._outbox.popleft()
                self._listing_cut(frame, f"no reply in {REQUEST_TIMEOUT:.0f} s")
                self.on_frame(self._with_purpose({"type": "error", "code": "timeout", "request": wire,
                                                  "message": f"{wire['type']}: no reply in {REQUEST_TIMEOUT:.0f} s"},
                                                 frame))
                continue
            self._outbox.popleft()
            if frame.get("catch_up"):
                for m in reply.get("messages") or []:
                    if isinstance(m.get("n"), int):
                        self.last_n = max(self.last_n, m["n"])
                    self.on_frame(dict(m, type="message"))
                if reply.get("more"):
                    self.on_frame({"type": "client_notice", "level": "warning", "room": frame["room"],
                                   "text": f"more than {CATCH_UP_LIMIT} messages were missed; use /history"})
                continue
            if wire["type"] in LISTINGS:
                page = [r for r in reply.get("rooms") or [] if isinstance(r, dict) and isinstance(r.get("room"), str)]
                listing = list(frame.get("listing") or []) + page
                if reply.get("more") and page and len(listing) < MAX_LISTED_ROOMS:
                    # The next page before anything queued after the first, so the listing comes out whole.
                    nxt = {"type": wire["type"], "after": page[-1]["room"], "listing": listing}
                    if "purpose" in frame:
                        nxt["purpose"] = frame["purpose"]
                    self._outbox.appendleft(nxt)
                    continue
                reply = dict(reply, rooms=listing)
                if reply.get("more"):
                    reply["incomplete"] = f"stopped at {MAX_LISTED_ROOMS} rooms"
            self.on_frame(self._with_purpose(reply, frame))

    @staticmethod
    def _with_purpose(reply: dict[str, Any], request: dict[str, Any]) -> dict[str, Any]:
        """The reply (or error) to a request that said what it is for, saying it too."""
        return dict(reply, purpose=request["purpose"]) if "purpose" in request else reply
