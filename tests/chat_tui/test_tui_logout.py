"""Audit finding 14, client side: ``/logout`` ends the session at the server, not just here.

The chat server answers ``logout {all}`` with ``logged_out {all}`` and closes
the socket (1000, "logged out"). Here a small aiohttp stub plays the server and
records what the clients send, so the client's side is checked whatever the
server does: answers with or without the request id, stays silent, or is not
there at all. The last test runs against the real chat server (the session
fixture's two-site mission) and shows that the old tokens no longer resume.
"""
from __future__ import annotations

import asyncio
import io
import json
import socket
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import WSMsgType, web
from testkit import wait_until
from textual.widgets import Input
from tui_servers import PASSWORD, TuiSites

from chat_tui.app import ChatApp, LoginScreen
from chat_tui.commands import Command, CommandError, parse_line
from chat_tui.link import CLOSED, CONNECTED, LOGGED_OUT, Backoff, ChatLink, LinkStatus
from chat_tui.plain import PlainClient


class StubServer:
    """Answers hello with a welcome carrying a session token, join with joined, and logout as told; other
    requests (positions) with ``unknown_type``, as a server without them."""

    def __init__(self, logout: str = "reply") -> None:
        self.logout = logout             # reply | reply-without-id | silent
        self.received: list[dict[str, Any]] = []
        self.sockets: set[web.WebSocketResponse] = set()
        self.url = ""
        self._runner: web.AppRunner | None = None

    def frames(self, kind: str) -> list[dict[str, Any]]:
        return [f for f in self.received if f.get("type") == kind]

    async def _ws(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        self.sockets.add(ws)
        try:
            async for msg in ws:
                if msg.type != WSMsgType.TEXT:
                    continue
                frame = json.loads(msg.data)
                self.received.append(frame)
                rid = {"id": frame["id"]} if "id" in frame else {}
                if frame["type"] == "hello":
                    await ws.send_json({"type": "welcome", "protocol": 1, "site": "A", "user": frame["user"],
                                        "sites": {"A": "connected"}, "rooms": [], "presence": {"A": [frame["user"]]},
                                        "session": f"token-{len(self.frames('hello'))}", "n": 0, **rid})
                elif frame["type"] == "join":
                    await ws.send_json({"type": "joined", "room": frame["room"], "history": [], "more": False, **rid})
                elif frame["type"] == "directory":
                    await ws.send_json({"type": "directory", "rooms": [], "more": False, **rid})
                elif frame["type"] == "logout" and self.logout != "silent":
                    reply = {"type": "logged_out", "all": bool(frame.get("all"))}
                    await ws.send_json({**reply, **rid} if self.logout == "reply" else reply)
                    await ws.close(code=1000, message=b"logged out")
                elif frame["type"] != "logout":     # as a server that predates it (positions)
                    await ws.send_json({"type": "error", "code": "unknown_type", "in_reply_to": frame.get("id"),
                                        "message": f"unknown frame type {frame['type']!r}"})
        finally:
            self.sockets.discard(ws)
        return ws

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/ws", self._ws)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"ws://127.0.0.1:{port}/ws"

    async def close_all(self, code: int, reason: str) -> None:
        for ws in list(self.sockets):
            await ws.close(code=code, message=reason.encode())

    async def stop(self) -> None:
        for ws in list(self.sockets):
            await ws.close()
        assert self._runner is not None
        await self._runner.cleanup()


@pytest.fixture(params=["reply"])
async def stub(request: pytest.FixtureRequest) -> AsyncIterator[StubServer]:
    s = StubServer(request.param)
    await s.start()
    yield s
    await s.stop()


def fast() -> Backoff:
    return Backoff(initial=0.05, maximum=0.1, jitter=0.0)


async def connected_link(url: str, user: str = "alice", password: str = "pw"
                         ) -> tuple[ChatLink, asyncio.Future[LinkStatus], list[LinkStatus]]:
    statuses: list[LinkStatus] = []
    link = ChatLink(url, user, password, on_frame=lambda f: None, on_status=statuses.append, backoff=fast())
    task = asyncio.ensure_future(link.run())
    await wait_until(lambda: link.status.state == CONNECTED, "connected")
    return link, task, statuses


def test_logout_command_parses() -> None:
    assert parse_line("/logout") == Command("logout")
    assert parse_line("/logout all") == Command("logout", "all")
    with pytest.raises(CommandError, match="nothing or 'all'"):
        parse_line("/logout everyone")


@pytest.mark.parametrize("stub", ["reply", "reply-without-id"], indirect=True)
async def test_link_logout_sends_logout_waits_for_the_server_and_forgets_the_token(
        stub: StubServer) -> None:
    link, task, statuses = await connected_link(stub.url)
    assert link.session == "token-1"
    outcome = await asyncio.wait_for(link.logout(), 5)
    assert outcome == "the server ended this session"
    assert [{k: v for k, v in f.items() if k != "id"} for f in stub.frames("logout")] == [
        {"type": "logout", "all": False}]
    assert link.session is None
    assert (await asyncio.wait_for(task, 5)).state == CLOSED
    await asyncio.sleep(0.3)                        # longer than the back-off: it must not log in again
    assert len(stub.frames("hello")) == 1 and statuses[-1].state == CLOSED


@pytest.mark.parametrize("stub", ["reply-without-id"], indirect=True)
async def test_link_logout_all_ends_every_session(stub: StubServer) -> None:
    link, task, _ = await connected_link(stub.url)
    assert await link.logout(everywhere=True) == "the server ended every session of yours at this site"
    assert stub.frames("logout")[0]["all"] is True
    await asyncio.wait_for(task, 5)


@pytest.mark.parametrize("stub", ["silent"], indirect=True)
async def test_link_logout_gives_up_on_a_silent_server_and_forgets_the_token(stub: StubServer) -> None:
    link, task, _ = await connected_link(stub.url)
    t0 = time.monotonic()
    outcome = await link.logout(timeout=0.3)
    assert time.monotonic() - t0 < 2
    assert outcome == "no answer within 0.3 s: the session is forgotten here only"
    assert stub.frames("logout") and link.session is None
    assert (await asyncio.wait_for(task, 5)).state == CLOSED


async def test_link_logout_while_the_server_is_unreachable() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    link = ChatLink(f"ws://127.0.0.1:{port}/ws", "alice", "pw", on_frame=lambda f: None,
                    on_status=lambda s: None, backoff=Backoff(5.0, 5.0, jitter=0.0))
    task = asyncio.ensure_future(link.run())
    await wait_until(lambda: link.status.state == "retrying", "retrying")
    assert await link.logout() == "not connected to the chat server: the session is forgotten here only"
    assert (await asyncio.wait_for(task, 5)).state == CLOSED


async def test_plain_logout_from_a_pipe(stub: StubServer) -> None:
    out = io.StringIO()
    client = PlainClient(stub.url, "alice", "pw", out, backoff=fast())
    status = await asyncio.wait_for(client.run_pipe(io.StringIO("/join ops\n/logout\nnot sent\n"), 5), 10)
    assert status == 0
    lines = out.getvalue().splitlines()
    assert "-- logged out: the server ended this session" in lines
    assert [f["type"] for f in stub.received] == ["hello", "directory", "positions", "join", "logout"]


async def test_tui_logout_ends_the_session_and_exits(stub: StubServer) -> None:
    app = ChatApp(stub.url, "alice", "pw", backoff=fast())
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_until(lambda: app.link_status.state == CONNECTED, "connected")
        app.query_one("#input", Input).value = "/logout all"
        await pilot.press("enter")
        await wait_until(lambda: not app.is_running, "the app exits")
    assert app.return_code == 0
    assert [{k: v for k, v in f.items() if k != "id"} for f in stub.frames("logout")] == [
        {"type": "logout", "all": True}]
    assert app.link is not None and app.link.session is None
    await asyncio.sleep(0.3)
    assert len(stub.frames("hello")) == 1


async def test_link_signed_out_by_the_server_does_not_log_in_again(stub: StubServer) -> None:
    # The user ended all their sessions from elsewhere: the server closes this one with "logged out".
    link, task, statuses = await connected_link(stub.url)
    await stub.close_all(1000, "logged out")
    status = await asyncio.wait_for(task, 5)
    assert status.state == LOGGED_OUT
    assert status.describe() == "signed out by the server: all your sessions at this site were ended"
    assert link.session is None
    await asyncio.sleep(0.3)
    assert len(stub.frames("hello")) == 1


async def test_tui_signed_out_by_the_server_asks_to_log_in(stub: StubServer) -> None:
    app = ChatApp(stub.url, "alice", "pw", backoff=fast())
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_until(lambda: app.link_status.state == CONNECTED, "connected")
        await stub.close_all(1000, "logged out")
        await wait_until(lambda: isinstance(app.screen, LoginScreen), "the login screen")
        await pilot.pause()
        error = str(app.screen.query_one("#login-error").render())
        assert error == "signed out: all your sessions at this site were ended"
        assert len(stub.frames("hello")) == 1


# --- against the real chat server ----------------------------------------------------------------------

async def test_logout_all_revokes_every_session_at_the_real_server(mission: TuiSites) -> None:
    from chat_server.client import ChatClient, ChatClosed, ChatError

    other = await ChatClient.connect(mission.url("A"), "carol", PASSWORD)     # carol, signed in elsewhere too
    try:
        link, task, _ = await connected_link(mission.url("A"), "carol", PASSWORD)
        token, other_token = link.session, other.session_token
        assert token and other_token and token != other_token
        assert await link.logout(everywhere=True) == "the server ended every session of yours at this site"
        assert (await asyncio.wait_for(task, 5)).state == CLOSED
        with pytest.raises(ChatClosed):            # the other session was closed by the server...
            while True:
                await other.next_event(timeout=5)
        assert (other.close_code, other.close_reason) == (1000, "logged out")
    finally:
        await other.close()
    for old in (token, other_token):                 # ...and neither token resumes any more
        with pytest.raises(ChatError) as refused:
            await ChatClient.connect(mission.url("A"), "carol", session=old, timeout=10)
        assert refused.value.code == "auth_failed"
