"""The browser client against real sites: two RCM servers and two chat servers (processes),
each inter-site link through a link proxy (faultinject), Chromium driven by Playwright.

alice is a user of site A, bob of site B; each has a browser of their own.
"""
from __future__ import annotations

import contextlib
import json
import re
import sqlite3
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest
from playwright.sync_api import Browser, expect
from testkit import wait_until_sync
from web_harness import PASSWORD, LoopThread, RealSites, Watched, join, login, new_page, say, shot


@pytest.fixture(scope="module")
def sites(tmp_path_factory: pytest.TempPathFactory, loop_thread: LoopThread) -> Iterator[RealSites]:
    rs = RealSites(tmp_path_factory.mktemp("webui-sites"), ["A", "B"], {"A": ["alice", "carol"], "B": ["bob"]},
                   loop_thread)
    try:
        rs.start()
        yield rs
    finally:
        rs.stop()


@pytest.fixture(scope="module")
def alice(browser: Browser, sites: RealSites) -> Iterator[Watched]:
    w = new_page(browser)
    login(w, sites.url("A"), "alice")
    join(w, "ops")
    yield w
    w.page.context.close()


@pytest.fixture(scope="module")
def bob(browser: Browser, sites: RealSites) -> Iterator[Watched]:
    w = new_page(browser)
    login(w, sites.url("B"), "bob")
    join(w, "ops")
    yield w
    w.page.context.close()


@pytest.fixture(autouse=True)
def no_page_problems(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    for name in ("alice", "bob"):
        if name in request.fixturenames:
            request.getfixturevalue(name).check()


def message(w: Watched, text: str) -> Any:
    return w.page.locator("#message-list li.msg[data-msg-id]").filter(has_text=text)


def msg_ids(w: Watched) -> list[str]:
    return w.page.eval_on_selector_all("#message-list li.msg[data-msg-id]", "els => els.map(e => e.dataset.msgId)")


def pill(w: Watched, site: str) -> Any:
    return w.page.locator(f"#site-strip [data-site='{site}']")


def test_page_headers_and_websocket_origin(sites: RealSites, loop_thread: LoopThread) -> None:
    base = sites.url("A")

    async def probe() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with aiohttp.ClientSession() as http:
            async with http.get(base) as r:
                out["index"] = (r.status, dict(r.headers), await r.text())
            async with http.get(base + "static/js/app.js") as r:
                out["app"] = (r.status, dict(r.headers))
            ws_url = base.replace("http://", "ws://") + "ws"
            host = base.split("/")[2]
            for key, origin in (("foreign", "http://evil.example"), ("other_port", f"http://{host.split(':')[0]}:1"),
                                ("null", "null"), ("same", f"http://{host}"), ("none", None)):
                headers = {"Origin": origin} if origin else {}
                try:
                    async with http.ws_connect(ws_url, headers=headers, origin=None) as ws:
                        await ws.send_str(json.dumps({"type": "rooms"}))
                        reply = await ws.receive_json(timeout=5)
                        out[key] = reply["code"]          # not_authenticated: the socket was accepted
                except aiohttp.WSServerHandshakeError as e:
                    out[key] = e.status
        return out

    got = loop_thread.run(probe())
    status, headers, body = got["index"]
    assert status == 200 and 'id="login-form"' in body
    csp = headers["Content-Security-Policy"]
    directives = dict(d.strip().split(" ", 1) for d in csp.split(";"))
    assert directives["default-src"] == "'self'" and directives["connect-src"] == "'self'"
    assert directives["script-src"] == "'self'" and "unsafe" not in csp
    assert headers["X-Content-Type-Options"] == "nosniff"
    status, headers = got["app"]
    assert status == 200 and "javascript" in headers["Content-Type"]
    assert headers["Content-Security-Policy"] == csp
    assert got["foreign"] == 403 and got["other_port"] == 403 and got["null"] == 403
    assert got["same"] == "not_authenticated" and got["none"] == "not_authenticated"


def test_login_join_and_exchange_between_sites(alice: Watched, bob: Watched) -> None:
    say(alice, "Tanker on station at FL240")
    m = message(bob, "Tanker on station at FL240")
    expect(m).to_be_visible()
    expect(m.locator(".author")).to_have_text("alice@A")
    say(bob, "Copy, two receivers inbound")
    expect(message(alice, "Copy, two receivers inbound").locator(".author")).to_have_text("bob@B")
    # Receipts: alice's message was delivered at both sites.
    expect(message(alice, "Tanker on station").locator(".receipts")).to_have_attribute("data-receipts", "A,B")
    # Both sites show the same messages in the same order.
    wait_until_sync(lambda: msg_ids(alice) == msg_ids(bob) and len(msg_ids(alice)) == 2, "same order at A and B",
                    timeout=10)
    # Presence: each sees the other, as user@site.
    expect(alice.page.locator("#presence-list [data-user='bob@B']")).to_be_visible()
    expect(bob.page.locator("#presence-list [data-user='alice@A']")).to_be_visible()
    # Neither the page URL nor the WebSocket URL carries credentials.
    for w in (alice, bob):
        assert "?" not in w.page.url and "alice" not in w.page.url and "bob" not in w.page.url
        assert w.websockets and all(re.fullmatch(r"ws://127\.0\.0\.1:\d+/ws", u) for u in w.websockets)
    shot(alice, "exchange-alice-1280x720")
    shot(bob, "exchange-bob-1280x720")


def test_xss_payload_is_shown_as_text_and_runs_nothing(alice: Watched, bob: Watched) -> None:
    payload = '<img src=x onerror="window.__xss=1"><script>window.__xss=2</script><b>bold?</b>'
    say(alice, payload)
    for w in (alice, bob):
        m = message(w, "window.__xss=2")
        expect(m.locator(".text")).to_have_text(payload)
        assert m.locator("img, script, b").count() == 0
        assert w.page.locator("#message-list img, #message-list script").count() == 0
        assert w.page.evaluate("window.__xss") is None
    shot(bob, "xss-as-text")


def test_link_cut_turns_site_suspected_and_back_and_late_message_is_placed(
        sites: RealSites, loop_thread: LoopThread, alice: Watched, bob: Watched) -> None:
    expect(pill(alice, "B")).to_have_attribute("data-status", "connected")
    loop_thread.run(sites.links.cut("A", "B"))
    expect(pill(alice, "B")).to_have_attribute("data-status", "suspected")
    expect(pill(bob, "A")).to_have_attribute("data-status", "suspected")
    expect(pill(alice, "A")).to_have_attribute("data-status", "connected")
    # While cut, each site keeps ordering its own messages: alice sends three, bob one.
    # bob's carries a smaller Lamport timestamp than alice's last two, so when the link
    # comes back it reaches A after its place has passed: late, placed between them.
    for i in (1, 2, 3):
        say(alice, f"cut-a{i}")
        expect(message(alice, f"cut-a{i}")).to_be_visible()
    say(bob, "cut-b1")
    expect(message(bob, "cut-b1")).to_be_visible()
    shot(alice, "link-cut-suspected")
    shot(bob, "link-cut-suspected-bob")
    loop_thread.run(sites.links.restore("A", "B"))
    expect(pill(alice, "B")).to_have_attribute("data-status", "connected")
    expect(pill(bob, "A")).to_have_attribute("data-status", "connected")
    late = message(alice, "cut-b1")
    expect(late).to_have_attribute("data-late", "true")
    expect(late.locator(".late-badge")).to_have_text(re.compile(r"^late \+\d+s$"))     # and how late it came
    # In its place: the list is sorted by order key, and the late message is not last.
    orders = alice.page.eval_on_selector_all("#message-list li.msg[data-msg-id]",
                                             "els => els.map(e => JSON.parse(e.dataset.order))")
    assert orders == sorted(orders, key=lambda o: [(0, x, "") if isinstance(x, int) else (1, 0, x) for x in o])
    texts = alice.page.eval_on_selector_all("#message-list li.msg[data-msg-id] .text",
                                            "els => els.map(e => e.textContent)")
    assert texts.index("cut-b1") < texts.index("cut-a3"), texts
    late.scroll_into_view_if_needed()
    shot(alice, "late-message-placed")


def stored(sites: RealSites, site: str, room: str) -> int:
    """How many messages ``site``'s chat server has stored in ``room`` (its database, read only)."""
    db = sites.mission.site_dir(site) / "chat" / "chat.db"
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)) as conn:
        return conn.execute("SELECT COUNT(*) FROM messages WHERE room = ?", (room,)).fetchone()[0]


def test_history_scroll_back_and_commands(sites: RealSites, loop_thread: LoopThread, alice: Watched,
                                          bob: Watched) -> None:
    from chat_server.client import ChatClient

    async def fill() -> None:
        c = await ChatClient.connect(sites.url("A").replace("http://", "ws://") + "ws", "carol", PASSWORD)
        try:
            await c.join("log")
            for i in range(60):
                await c.say("log", f"log line {i:02d}")
        finally:
            await c.close()

    loop_thread.run(fill(), timeout=60)
    # B stores all 60 before bob joins: a join that found only some of them (their delivery from A still on its
    # way, seen in a loaded CI run) showed the last 50 of those and then the rest live, line 09 among them.
    wait_until_sync(lambda: stored(sites, "B", "log") == 60, "B's chat server storing the 60 log lines", timeout=30)
    page = bob.page
    join(bob, "log")
    wait_until_sync(lambda: bool(message(bob, "log line 59").count()), "the last log line at B", timeout=15)
    expect(page.locator("#load-older")).to_be_visible()       # joined brings the last 50
    assert message(bob, "log line 09").count() == 0          # (a render's scroll fetches nothing)
    page.hover("#messages")
    page.mouse.wheel(0, -100_000)                            # the user scrolls to the top: older ones come
    expect(message(bob, "log line 00")).to_be_visible()
    expect(page.locator("#load-older")).to_be_hidden()
    texts = page.eval_on_selector_all("#message-list li.msg .text", "els => els.map(e => e.textContent)")
    assert texts == [f"log line {i:02d}" for i in range(60)]
    # A message in a room not shown counts as unread there.
    say(alice, "unread for bob")
    expect(page.locator("#room-list [data-room='ops'] .unread")).to_have_text("1")
    expect(page).to_have_title(re.compile(r"^\(1\) RCM chat"))
    # Keyboard: Alt+Up goes to the previous room, which clears its unread count.
    page.locator("#composer-input").focus()
    page.keyboard.press("Alt+ArrowUp")
    expect(page.locator("#room-title")).to_have_text("ops")
    expect(page.locator("#room-list [data-room='ops'] .unread")).to_have_count(0)
    expect(message(bob, "unread for bob")).to_be_visible()
    say(bob, "/who")
    expect(page.locator("#message-list .notice.listing").last).to_contain_text("alice")
    say(bob, "/switch log")
    expect(page.locator("#room-title")).to_have_text("log")
    say(bob, "/switch ops")
    expect(page.locator("#room-title")).to_have_text("ops")
    say(bob, "/nonsense")
    expect(page.locator("#message-list .notice.error").last).to_contain_text("unknown command")
    # The "Load older messages" button, clicked, brings the page a scroll to the top does.
    join(alice, "log")
    wait_until_sync(lambda: bool(message(alice, "log line 59").count()), "the last log line at A", timeout=15)
    # Scrolled to the top by the page, not by the user: nothing is fetched (two frames
    # later the scroll event has run), and only the button's own handler can fetch.
    alice.page.evaluate("""() => new Promise(done => {
        document.getElementById("messages").scrollTop = 0;
        requestAnimationFrame(() => requestAnimationFrame(done));
    })""")
    assert message(alice, "log line 09").count() == 0
    alice.page.locator("#load-older").click()
    expect(message(alice, "log line 00")).to_be_visible()
    expect(alice.page.locator("#load-older")).to_be_hidden()
    say(alice, "/switch ops")                               # (where the next tests expect her)
    expect(alice.page.locator("#room-title")).to_have_text("ops")


def test_reconnects_with_back_off_and_catches_up(sites: RealSites, alice: Watched, bob: Watched) -> None:
    page = bob.page
    sites.stop_chat("B")
    expect(page.locator("#conn-state")).to_have_attribute("data-state", re.compile("reconnecting|connecting"))
    expect(page.locator("#banner")).to_contain_text("Reconnecting in")
    expect(page.locator("#site-strip")).to_have_attribute("data-stale", "true")
    say(alice, "sent while B's chat server was down")
    say(bob, "typed while offline")
    expect(page.locator("li.pending").filter(has_text="typed while offline")).to_be_visible()
    shot(bob, "reconnecting")
    sites.start_chat("B")
    expect(page.locator("#conn-state")).to_have_attribute("data-state", "online", timeout=30_000)
    expect(message(bob, "sent while B's chat server was down")).to_be_visible()
    expect(message(bob, "typed while offline")).to_be_visible()
    expect(message(alice, "typed while offline")).to_be_visible()
    expect(page.locator("li.pending")).to_have_count(0)
    expect(page.locator("#banner")).to_be_hidden()


def test_narrow_screen_and_dark_theme(browser: Browser, sites: RealSites) -> None:
    w = new_page(browser, 390, 780, color_scheme="dark")
    try:
        login(w, sites.url("B"), "bob")
        page = w.page
        expect(page.locator("#room-title")).to_have_text(re.compile("log|ops"))
        bg = page.evaluate("getComputedStyle(document.body).backgroundColor")
        assert bg == "rgb(15, 20, 26)", bg                              # the dark theme, from the system setting
        assert page.evaluate("document.documentElement.scrollWidth") <= 390   # nothing wider than the screen
        expect(page.locator("#sidebar")).not_to_be_in_viewport()
        shot(w, "narrow-dark")
        page.click("#nav-toggle")
        expect(page.locator("#sidebar")).to_be_in_viewport(ratio=0.99)     # slid fully in
        expect(page.locator("#room-list button").first).to_be_focused()
        shot(w, "narrow-dark-drawer")
        page.keyboard.press("Escape")
        expect(page.locator("#composer-input")).to_be_focused()
        page.click("#theme-toggle")
        expect(page.locator("html")).to_have_attribute("data-theme", "light")
        assert page.evaluate("getComputedStyle(document.body).backgroundColor") == "rgb(246, 247, 249)"
        shot(w, "narrow-light")
        w.check()
    finally:
        w.page.context.close()


def test_signing_out_revokes_the_session_token_at_the_server(
        browser: Browser, sites: RealSites, loop_thread: LoopThread) -> None:
    from chat_server.client import ChatClient, ChatError

    ws_url = sites.url("A").replace("http://", "ws://") + "ws"
    w = new_page(browser)
    tokens: list[str] = []

    def frames(ws: Any) -> None:
        def received(payload: Any) -> None:
            frame = json.loads(payload)
            if frame.get("type") == "welcome":
                tokens.append(frame["session"])
        ws.on("framereceived", received)
    w.page.on("websocket", frames)

    async def resume(token: str) -> str:
        try:
            c = await ChatClient.connect(ws_url, "carol", session=token, timeout=10)
        except ChatError as e:
            return e.code
        await c.close()
        return "resumed"

    try:
        login(w, sites.url("A"), "carol")
        wait_until_sync(lambda: tokens, "the welcome's session token", timeout=5)
        assert loop_thread.run(resume(tokens[0])) == "resumed"       # the token the page holds works...
        w.page.click("#logout")
        expect(w.page.locator("#login-note")).to_have_text("Signed out.")
        assert loop_thread.run(resume(tokens[0])) == "auth_failed"   # ...and no longer once signed out
        w.check()
    finally:
        w.page.context.close()
