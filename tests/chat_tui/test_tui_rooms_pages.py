"""``/rooms`` in both terminal clients follows the server's pages (docs/chat-protocol.md, ``rooms``).

The chat server lists at most ``rooms_page`` rooms per reply, in name order,
with ``more: true`` when there are others; the client asks again with
``after`` = the last room of the page. A small aiohttp stub plays the server
with a page of three rooms, so the link's paging is checked on its own
(tests/chat_server/test_chat_client_logout.py checks the real server's pages
through chat_server.client).
"""
from __future__ import annotations

import asyncio
import io
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import WSMsgType, web
from testkit import wait_until
from textual.widgets import Input

from chat_tui.app import ChatApp
from chat_tui.controller import Controller
from chat_tui.link import CONNECTED, Backoff, ChatLink
from chat_tui.plain import PlainClient
from chat_tui.state import ChatState, Inserted, Notice

ROOMS = [f"room{i:02d}" for i in range(7)]
PAGE = 3

pytestmark = pytest.mark.timeout(30)


class PagingServer:
    """Answers hello, join, and rooms in pages of PAGE; ``fail_after`` makes the page after that room an error;
    anything else (positions) ``unknown_type``, as a server without it."""

    def __init__(self, fail_after: str | None = None) -> None:
        self.fail_after = fail_after
        self.received: list[dict[str, Any]] = []
        self.url = ""
        self._runner: web.AppRunner | None = None

    def frames(self, kind: str) -> list[dict[str, Any]]:
        return [f for f in self.received if f.get("type") == kind]

    async def _ws(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        async for msg in ws:
            if msg.type != WSMsgType.TEXT:
                continue
            frame = json.loads(msg.data)
            self.received.append(frame)
            rid = {"id": frame["id"]} if "id" in frame else {}
            if frame["type"] == "hello":
                await ws.send_json({"type": "welcome", "protocol": 1, "site": "A", "user": frame["user"],
                                    "sites": {"A": "connected"}, "rooms": [], "presence": {"A": [frame["user"]]},
                                    "session": "token", "n": 0, **rid})
            elif frame["type"] == "join":
                await ws.send_json({"type": "joined", "room": frame["room"], "history": [], "more": False, **rid})
            elif frame["type"] == "directory":
                await ws.send_json({"type": "directory", "rooms": [], "more": False, **rid})
            elif frame["type"] == "rooms":
                after = frame.get("after")
                if after is not None and after == self.fail_after:
                    await ws.send_json({"type": "error", "code": "rate_limited", "message": "slow down",
                                        "in_reply_to": frame.get("id")})
                    continue
                rest = [r for r in ROOMS if after is None or r > after]
                page = [{"room": r, "private": r == "room04", "members": 2, "online": 1, "joined": r == "room00"}
                        for r in rest[:PAGE]]
                await ws.send_json({"type": "rooms", "rooms": page, "more": len(rest) > PAGE, **rid})
            else:                                   # as a server that predates it (positions)
                await ws.send_json({"type": "error", "code": "unknown_type", "in_reply_to": frame.get("id"),
                                    "message": f"unknown frame type {frame['type']!r}"})
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

    async def stop(self) -> None:
        assert self._runner is not None
        await self._runner.cleanup()


@pytest.fixture
async def server(request: pytest.FixtureRequest) -> AsyncIterator[PagingServer]:
    s = PagingServer(getattr(request, "param", None))
    await s.start()
    yield s
    await s.stop()


def fast() -> Backoff:
    return Backoff(initial=0.05, maximum=0.1, jitter=0.0)


def listing_notices(changes: list[Any]) -> list[str]:
    return [c.entry.text for c in changes if isinstance(c, Inserted) and isinstance(c.entry, Notice)
            and c.entry.text.startswith("rooms (")]


async def test_the_link_asks_for_every_page_and_hands_over_one_listing(server: PagingServer) -> None:
    frames: list[dict[str, Any]] = []
    link = ChatLink(server.url, "alice", "pw", on_frame=frames.append, on_status=lambda s: None, backoff=fast())
    task = asyncio.ensure_future(link.run())
    try:
        await wait_until(lambda: link.status.state == CONNECTED, "connected")
        state = ChatState("alice")
        Controller(state, link).submit("/rooms")
        link.request({"type": "join", "room": "after-the-listing"})     # queued behind /rooms
        await wait_until(lambda: any(f.get("type") == "joined" for f in frames), "the join after /rooms")
        assert [f.get("after") for f in server.frames("rooms")] == [None, "room02", "room05"]
        assert all("listing" not in f for f in server.received)         # the link's own field never goes out
        [listing] = [f for f in frames if f.get("type") == "rooms"]
        assert [r["room"] for r in listing["rooms"]] == ROOMS
        assert not listing.get("more") and "incomplete" not in listing
        # The join queued after /rooms went out after the last page, not between pages.
        kinds = [f["type"] for f in server.received if f["type"] in ("rooms", "join")]
        assert kinds == ["rooms", "rooms", "rooms", "join"]
        state.apply({"type": "welcome", "site": "A", "sites": {"A": "connected"}, "rooms": ["room00"]}, 0)
        state.set_active("room00")
        [text] = listing_notices(state.apply(listing, 0))
        assert text.splitlines()[0] == "rooms (* = joined): 7"
        assert text.splitlines()[1:] == [
            " * room00: 2 members, 1 online", "   room01: 2 members, 1 online", "   room02: 2 members, 1 online",
            "   room03: 2 members, 1 online", "   room04 (private): 2 members, 1 online",
            "   room05: 2 members, 1 online", "   room06: 2 members, 1 online"]
    finally:
        await link.close()
        await asyncio.wait_for(task, 5)


@pytest.mark.parametrize("server", ["room02"], indirect=True)
async def test_a_failed_page_shows_the_rooms_that_came_marked_incomplete(server: PagingServer) -> None:
    frames: list[dict[str, Any]] = []
    link = ChatLink(server.url, "alice", "pw", on_frame=frames.append, on_status=lambda s: None, backoff=fast())
    task = asyncio.ensure_future(link.run())
    try:
        await wait_until(lambda: link.status.state == CONNECTED, "connected")
        link.request({"type": "rooms"})
        await wait_until(lambda: any(f.get("type") == "error" and f.get("code") == "rate_limited" for f in frames),
                         "the error")
        [listing] = [f for f in frames if f.get("type") == "rooms"]
        assert [r["room"] for r in listing["rooms"]] == ROOMS[:3]
        assert listing["incomplete"] == "the next page failed: slow down"
        state = ChatState("alice")
        state.apply({"type": "welcome", "site": "A", "sites": {"A": "connected"}, "rooms": ["room00"]}, 0)
        state.set_active("room00")
        [text] = listing_notices(state.apply(listing, 0))
        assert text.splitlines()[0] == "rooms (* = joined): 3"
        assert text.splitlines()[-1] == " (incomplete: the next page failed: slow down)"
    finally:
        await link.close()
        await asyncio.wait_for(task, 5)


async def test_the_line_client_prints_every_page(server: PagingServer) -> None:
    out = io.StringIO()
    client = PlainClient(server.url, "alice", "pw", out, backoff=fast())
    assert await asyncio.wait_for(client.run_pipe(io.StringIO("/join ops\n/rooms\n"), 5), 10) == 0
    text = out.getvalue()
    for room in ROOMS:
        assert f"{room}" in text, text
    assert "rooms (* = joined): 7" in text
    assert len(server.frames("rooms")) == 3


async def test_the_textual_app_shows_every_page(server: PagingServer) -> None:
    app = ChatApp(server.url, "alice", "pw", backoff=fast())
    async with app.run_test(size=(100, 40)) as pilot:
        await wait_until(lambda: app.link_status.state == CONNECTED, "connected")
        app.query_one("#input", Input).value = "/join ops"
        await pilot.press("enter")
        await wait_until(lambda: app.state.active == "ops", "in ops")
        app.query_one("#input", Input).value = "/rooms"
        await pilot.press("enter")

        def shown() -> str:
            return "\n".join(str(w.render()) for w in app.query("#log > *"))
        await wait_until(lambda: "room06" in shown(), "the last page on screen")
        text = shown()
        assert "rooms (* = joined): 7" in text
        assert all(room in text for room in ROOMS)
        assert len(server.frames("rooms")) == 3
