"""Helpers for the browser tests: real sites (RCM + chat server processes behind link
proxies), a scripted protocol-v1 server for pure UI checks, and the browser.

The browser is driven with Playwright's sync API from the test thread; everything
asyncio (link proxies, the scripted server) runs in one background event-loop thread.
"""
from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from aiohttp import web
from playwright.sync_api import Browser, Page, expect
from testkit import wait_until_sync

from contracts.mission import load_mission
from faultinject.links import LinkSet
from faultinject.missions import free_ports, write_mission
from faultinject.procs import LocalChat, LocalRcm, wait_connected

REPO = Path(__file__).resolve().parents[2]
STATIC = REPO / "web_ui" / "static"
ARTIFACTS = REPO / "test-artifacts" / "web-ui"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
PASSWORD = "s3cret pass"
# Short RCM timeouts so that link changes show within a second or two.
FAST_RCM = {"heartbeat_timeout": 0.2, "liveness_timeout": 1.0, "silence_timeout": 2.0, "suspect_timeout": 30.0,
            "reconnect_period": 0.5, "ack_interval": 0.1}
FAST_CHAT = {"kdf_n": 1024, "receipt_interval": 0.1, "presence_interval": 0.1, "rcm_ack_interval": 0.1}

T = TypeVar("T")


class LoopThread:
    """An asyncio event loop in a daemon thread; ``run`` a coroutine there and wait for its result."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="web-test-loop", daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        async def _drain() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        self.run(_drain())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


def http_json(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")
    except (OSError, ValueError):
        return 0, None


class RealSites:
    """Every site of a mission on this machine: link proxies, RCM servers, chat servers.

    Each pair of sites dials through a link proxy in both directions, so
    ``links.cut(a, b)`` really separates them.
    """

    def __init__(self, root: Path, sites: list[str], users: dict[str, list[str]], loop: LoopThread) -> None:
        self.root = root
        self.sites = sites
        self.users = users
        self.loop = loop
        pairs = [(a, b) for a in sites for b in sites if a != b]
        while True:   # proxy ports and site ports come from two draws: redraw on a clash
            proxy_ports = free_ports(len(pairs))
            dial: dict[str, dict[str, str]] = {a: {} for a in sites}
            for (a, b), port in zip(pairs, proxy_ports):
                dial[a][b] = f"127.0.0.1:{port}"
            path = write_mission(root / "mission.toml", "webui", sites, rcm=FAST_RCM, chat=FAST_CHAT, dial=dial)
            mission = load_mission(path)
            used = {s.rcm.port for s in mission.sites.values()} | {s.chat.port for s in mission.sites.values()}
            if not used & set(proxy_ports):
                break
        self.mission_path = path
        self.mission = load_mission(path)
        self.links = LinkSet(self.mission)
        self.rcm = LocalRcm(path, log_level="info")
        self.chat = LocalChat(path)

    def url(self, site: str) -> str:
        c = self.mission.sites[site].chat
        return f"http://{c.host}:{c.port}/"

    def health(self, site: str) -> tuple[int, Any]:
        return http_json(self.url(site) + "health")

    def start(self) -> None:
        self.loop.run(self.links.start())
        self.rcm.start_all()
        self.chat.add_users(self.users, PASSWORD, roles=("flash",))      # they send FLASH: [chat] flash_role
        for site in self.sites:
            self.start_chat(site)
        self.wait_all_connected()

    def start_chat(self, site: str) -> None:
        self.chat.start(site)
        wait_until_sync(lambda: self._chat_up(site), f"chat server {site} answering /health", timeout=20)

    def _chat_up(self, site: str) -> bool:
        p = self.chat.procs[site]
        if p.poll() is not None:
            raise AssertionError(f"chat server {site} exited with {p.returncode}: {self.log_tail(site)}")
        return self.health(site)[0] == 200

    def stop_chat(self, site: str) -> None:
        self.chat.stop(site)

    def wait_all_connected(self, timeout: float = 20.0) -> None:
        self.loop.run(wait_connected(self.mission, self.sites, timeout), timeout + 10)

    def log_tail(self, site: str, lines: int = 30) -> str:
        return self.chat.log_tail(site, lines)

    def stop(self) -> None:
        self.chat.stop_all()
        self.rcm.stop_all()
        self.loop.run(self.links.close())


class ScriptedServer:
    """A protocol-v1 server whose frames the test writes by hand (for pure client-side checks).

    Serves the real web UI files, with the chat server's security headers, and
    ``/ws``: answers ``hello`` with ``welcome`` and ``join`` with ``joined``, and
    ``logout`` as the chat server does (``logged_out``, then close 1000 "logged out")
    unless ``logout_reply`` is False (a server that never answers); every client
    frame is recorded in ``received``; ``push(frame)`` sends to every client,
    ``close_all(code, reason)`` closes every client's socket. ``rooms`` requests are
    answered from ``rooms`` (room dicts of the ``rooms`` reply) in pages of
    ``rooms_page``, in name order, with ``more`` and ``after`` as the chat server does.
    ``search`` is answered with ``results`` holding ``search_results``; ``/health`` names ``site``; a ``join`` of
    a room in ``refused`` gets ``error {code: forbidden, message: refused[room]}``. ``positions {}`` is answered
    with ``positions {units: positions}``; a ``position`` report is answered as the chat server does, with the
    report as it travels (``position {site, unit, user, ..., at, expires_at}``, living ``position_life`` s).
    A labelled mission: ``welcome_extra`` goes into every ``welcome`` (``labels``, ``clearance``) and a room in
    ``room_labels`` is ``joined`` with that ``label``.
    """

    def __init__(self, loop: LoopThread, site: str = "A", sites: dict[str, str] | None = None) -> None:
        self.loop = loop
        self.site = site
        self.sites = sites or {"A": "connected", "B": "connected", "C": "connected"}
        self.sockets: list[web.WebSocketResponse] = []
        self.received: list[dict[str, Any]] = []
        self.history: dict[str, list[dict[str, Any]]] = {}
        self.logout_reply = True
        self.rooms: list[dict[str, Any]] = []
        self.rooms_page = 500
        self.search_results: list[dict[str, Any]] = []
        self.refused: dict[str, str] = {}
        self.positions: list[dict[str, Any]] = []
        self.position_life = 600.0
        self.welcome_extra: dict[str, Any] = {}
        self.room_labels: dict[str, dict[str, Any]] = {}
        self.port = 0
        self._users: dict[int, str] = {}
        self._runner: web.AppRunner | None = None

    async def _headers(self, request: web.Request, response: web.StreamResponse) -> None:
        from chat_server.web import SECURITY_HEADERS
        for k, v in SECURITY_HEADERS.items():
            response.headers.setdefault(k, v)

    async def _index(self, request: web.Request) -> web.FileResponse:
        return web.FileResponse(STATIC / "index.html")

    async def _ws(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        self.sockets.append(ws)
        async for msg in ws:
            frame = json.loads(msg.data)
            self.received.append(frame)
            rid = frame.get("id")
            if frame["type"] == "hello":
                self._users[id(ws)] = frame["user"]
                await ws.send_json({"type": "welcome", "protocol": 1, "site": self.site, "user": frame["user"],
                                    "sites": self.sites, "rooms": [], "session": "tok", "n": 0,
                                    "presence": {self.site: [frame["user"]]}, **self.welcome_extra, "id": rid})
            elif frame["type"] == "join" and frame["room"] in self.refused:
                await ws.send_json({"type": "error", "code": "forbidden", "message": self.refused[frame["room"]],
                                    "in_reply_to": rid})
            elif frame["type"] == "join":
                room = frame["room"]
                label = {"label": self.room_labels[room]} if room in self.room_labels else {}
                await ws.send_json({"type": "joined", "room": room, "private": False,
                                    "history": self.history.get(room, []), "more": False, **label, "id": rid})
            elif frame["type"] == "rooms":
                after = frame.get("after")
                rest = sorted((r for r in self.rooms if after is None or r["room"] > after), key=lambda r: r["room"])
                await ws.send_json({"type": "rooms", "rooms": rest[:self.rooms_page],
                                    "more": len(rest) > self.rooms_page, "id": rid})
            elif frame["type"] == "search":
                await ws.send_json({"type": "results", "query": frame.get("query"), "messages": self.search_results,
                                    "id": rid})
            elif frame["type"] == "positions":
                await ws.send_json({"type": "positions", "units": self.positions, "id": rid})
            elif frame["type"] == "position":
                report = {k: frame[k] for k in ("lat", "lon", "alt", "course", "speed") if k in frame}
                at = frame.get("at", time.time())
                await ws.send_json({"type": "position", "site": self.site, "unit": frame.get("unit", self.user_of(ws)),
                                    "user": self.user_of(ws), **report, "at": at,
                                    "expires_at": at + self.position_life, "id": rid})
            elif frame["type"] == "logout" and self.logout_reply:
                await ws.send_json({"type": "logged_out", "all": bool(frame.get("all")), "id": rid})
                await ws.close(code=1000, message=b"logged out")
        self.sockets.remove(ws)
        return ws

    def user_of(self, ws: web.WebSocketResponse) -> str:
        """The user a socket signed in as (its hello)."""
        return str(self._users.get(id(ws), ""))

    async def _health(self, request: web.Request) -> web.Response:
        return web.json_response({"site": self.site, "status": "ok"})

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_get("/", self._index)
        app.router.add_get("/health", self._health)
        app.router.add_get("/ws", self._ws)
        app.router.add_static("/static/", STATIC)
        app.on_response_prepare.append(self._headers)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def _push(self, frame: dict[str, Any]) -> None:
        for ws in list(self.sockets):
            await ws.send_json(frame)

    async def _close_all(self, code: int, reason: str) -> None:
        for ws in list(self.sockets):
            await ws.close(code=code, message=reason.encode())

    async def _stop(self) -> None:
        for ws in list(self.sockets):
            await ws.close()
        if self._runner is not None:
            await self._runner.cleanup()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def start(self) -> None:
        self.loop.run(self._start())

    def push(self, frame: dict[str, Any]) -> None:
        self.loop.run(self._push(frame))

    def close_all(self, code: int, reason: str) -> None:
        self.loop.run(self._close_all(code, reason))

    def frames(self, kind: str) -> list[dict[str, Any]]:
        return [f for f in self.received if f.get("type") == kind]

    def stop(self) -> None:
        self.loop.run(self._stop())


# --- browser pages ---------------------------------------------------------------------------

class Watched:
    """A page plus what went wrong in it: uncaught exceptions and Content-Security-Policy refusals."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.problems: list[str] = []
        self.websockets: list[str] = []
        page.on("pageerror", lambda e: self.problems.append(f"uncaught: {e}"))
        page.on("console", self._console)
        page.on("websocket", lambda ws: self.websockets.append(ws.url))

    def _console(self, msg: Any) -> None:
        if "Content Security Policy" in msg.text or "Content-Security-Policy" in msg.text:
            self.problems.append(f"CSP: {msg.text}")

    def check(self) -> None:
        assert not self.problems, self.problems


def new_page(browser: Browser, width: int = 1280, height: int = 720, **kw: Any) -> Watched:
    ctx = browser.new_context(viewport={"width": width, "height": height}, **kw)
    return Watched(ctx.new_page())


def login(w: Watched, url: str, user: str, password: str = PASSWORD) -> None:
    page = w.page
    page.goto(url)
    page.fill("#login-user", user)
    page.fill("#login-password", password)
    page.press("#login-password", "Enter")
    expect(page.locator("#chat-view")).to_be_visible()
    expect(page.locator("#whoami")).to_contain_text(f"{user}@")
    expect(page.locator("#conn-state")).to_have_attribute("data-state", "online")


def join(w: Watched, room: str) -> None:
    page = w.page
    page.fill("#join-input", room)
    page.press("#join-input", "Enter")
    expect(page.locator("#room-title")).to_have_text(room)


def say(w: Watched, text: str) -> None:
    w.page.fill("#composer-input", text)
    w.page.press("#composer-input", "Enter")


def shot(w: Watched, name: str, full_page: bool = False) -> Path:
    path = ARTIFACTS / f"{name}.png"
    w.page.screenshot(path=str(path), full_page=full_page)
    return path
