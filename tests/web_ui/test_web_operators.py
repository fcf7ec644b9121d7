"""What operators expect (issue 21) and precedence alerts (issue 19), in Chromium, against real sites:
the room directory, search (with a private room's canary that must not show), mentions and badges at
login, a read marker crossing from the terminal client, replies to late lines, FLASH acknowledgements.

Two sites (RCM + chat server processes, link proxies between them), one set for the module.
alice, carol and eve are users of site A; bob, bill and dan of site B. Notifications are a stub in the
page (``window.__notes`` records them; ``window.__asked`` counts permission requests).
"""
from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import Browser, expect
from testkit import wait_until_sync
from web_harness import PASSWORD, LoopThread, RealSites, Watched, join, login, new_page, say, shot

from chat_server.client import ChatClient

NOTIFICATIONS = """
(() => {
  window.__notes = [];
  window.__asked = 0;
  let permission = %s;
  class FakeNotification {
    constructor(title, options = {}) { window.__notes.push({ title, body: options.body, tag: options.tag }); }
    close() {}
    static get permission() { return permission; }
    static requestPermission() { window.__asked += 1; permission = "granted"; return Promise.resolve(permission); }
  }
  Object.defineProperty(window, "Notification", { value: FakeNotification, configurable: true, writable: true });
})();
"""


@pytest.fixture(scope="module")
def sites(tmp_path_factory: pytest.TempPathFactory, loop_thread: LoopThread) -> Iterator[RealSites]:
    rs = RealSites(tmp_path_factory.mktemp("webui-operators"), ["A", "B"],
                   {"A": ["alice", "carol", "eve"], "B": ["bob", "bill", "dan"]}, loop_thread)
    try:
        rs.start()
        yield rs
    finally:
        rs.stop()


def ws_url(sites: RealSites, site: str) -> str:
    return sites.url(site).replace("http://", "ws://") + "ws"


class Bots:
    """Protocol clients (chat_server.client) for the users the test drives without a browser."""

    def __init__(self, sites: RealSites, loop: LoopThread) -> None:
        self.sites, self.loop, self.clients = sites, loop, {}

    def client(self, site: str, user: str) -> ChatClient:
        if (site, user) not in self.clients:
            self.clients[site, user] = self.loop.run(ChatClient.connect(ws_url(self.sites, site), user, PASSWORD))
        return self.clients[site, user]

    def run(self, coro: Any, timeout: float = 30.0) -> Any:
        return self.loop.run(coro, timeout)

    def close(self) -> None:
        for c in self.clients.values():
            self.loop.run(c.close())
        self.clients.clear()


@pytest.fixture(scope="module")
def bots(sites: RealSites, loop_thread: LoopThread) -> Iterator[Bots]:
    b = Bots(sites, loop_thread)
    yield b
    b.close()


def page_for(browser: Browser, sites: RealSites, site: str, user: str, permission: str = '"granted"') -> Watched:
    w = new_page(browser)
    w.page.context.add_init_script(NOTIFICATIONS % permission)
    login(w, sites.url(site), user)
    return w


@pytest.fixture(scope="module")
def alice(browser: Browser, sites: RealSites) -> Iterator[Watched]:
    w = page_for(browser, sites, "A", "alice")
    yield w
    w.page.context.close()


@pytest.fixture(scope="module")
def bob(browser: Browser, sites: RealSites) -> Iterator[Watched]:
    w = page_for(browser, sites, "B", "bob")
    yield w
    w.page.context.close()


@pytest.fixture(autouse=True)
def no_page_problems(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    for name in ("alice", "bob"):
        if name in request.fixturenames:
            request.getfixturevalue(name).check()


def private_room(bots: Bots, room: str) -> None:
    """carol's private room with bob, known at both sites (bob can join it at B)."""
    carol, bob = bots.client("A", "carol"), bots.client("B", "bob")
    bots.run(carol.create(room, ["bob"]))

    async def known_at_b() -> bool:
        rows = (await bob.request({"type": "directory"}))["rooms"]
        return any(r["room"] == room and r["private"] for r in rows)
    wait_until_sync(lambda: bots.run(known_at_b()), f"the definition of {room} at B", timeout=10)


def message(w: Watched, text: str) -> Any:
    """The line whose own text (not a quote of another line) contains ``text``."""
    return w.page.locator("#message-list li.msg[data-msg-id]").filter(has=w.page.locator(".text", has_text=text))


def notes(w: Watched) -> list[dict[str, Any]]:
    return w.page.evaluate("window.__notes")


def test_directory_is_shown_at_login_and_a_click_joins(sites: RealSites, bots: Bots, browser: Browser) -> None:
    bob, carol = bots.client("B", "bob"), bots.client("A", "carol")
    bots.run(bob.join("ops"))
    bots.run(bob.say("ops", "grid ready at 0300"))
    bots.run(carol.join("logistics"))
    bots.run(carol.say("logistics", "fuel truck at gate 2"))
    private_room(bots, "cell")
    w = page_for(browser, sites, "A", "eve")          # eve has no rooms yet
    try:
        page = w.page
        expect(page.locator("#room-empty")).to_contain_text("pick one in the Directory")
        rows = page.locator("#directory-list li[data-room]")
        expect(rows).to_have_count(2)                 # ops (from site B's traffic), logistics; never carol's cell
        expect(page.locator("#directory-list [data-room='ops']")).to_contain_text("1 member")
        expect(page.locator("#directory-list [data-room='logistics'] .directory-action")).to_have_text("Join")
        shot(w, "directory-at-login")
        page.locator("#directory-list [data-room='ops'] button").click()
        expect(page.locator("#room-title")).to_have_text("ops")
        expect(message(w, "grid ready at 0300")).to_be_visible()
        expect(page.locator("#room-list [data-room='ops']")).to_be_visible()
        expect(page.locator("#directory-list [data-room='ops'] .directory-action")).to_have_text("joined")
        page.fill("#join-input", "log")               # the join box filters the directory
        expect(rows).to_have_count(1)
        page.fill("#join-input", "")
        say(w, "/join logistics")
        expect(page.locator("#room-title")).to_have_text("logistics")
        w.check()
    finally:
        w.page.context.close()


def test_search_highlights_jumps_in_context_and_never_shows_a_private_room(
        sites: RealSites, bots: Bots, browser: Browser) -> None:
    bob, carol = bots.client("B", "bob"), bots.client("A", "carol")
    private_room(bots, "cell")
    bots.run(bob.join("cell"))
    bots.run(bob.say("cell", "CANARY zebra kept in the cell"))
    bots.run(carol.join("archive"))

    async def fill(prefix: str, n: int) -> None:
        for start in range(0, n, 20):
            await asyncio.gather(*(carol.say("archive", f"{prefix} line {i:02d}")
                                   for i in range(start, min(n, start + 20))))
    bots.run(fill("earlier", 30), 60)
    needle = bots.run(carol.say("archive", 'the zebra <b>crossing</b> at grid "0300"'))
    bots.run(fill("filler", 80), 60)                   # pushes the needle far out of the last 50
    w = page_for(browser, sites, "A", "eve")           # eve is not a member of cell
    try:
        page = w.page
        join(w, "archive")
        expect(message(w, "filler line 79")).to_be_visible()
        assert message(w, "zebra").count() == 0
        for query in ("CANARY", "canar*", "cell", "kept"):
            page.fill("#search-input", query)
            page.press("#search-input", "Enter")
            expect(page.locator("#search-status")).to_have_text(f"No results for {query}")
        page.fill("#search-input", "zebra")
        page.press("#search-input", "Enter")
        results = page.locator("#search-results li.result")
        expect(results).to_have_count(1)
        expect(results.locator(".result-room")).to_have_text("archive")
        expect(results.locator("mark.hit")).to_have_text("zebra")
        expect(results.locator(".result-text")).to_have_text('the zebra <b>crossing</b> at grid "0300"')
        assert results.locator(".result-text b").count() == 0          # text, not markup
        assert "CANARY" not in page.evaluate("document.body.innerText")
        shot(w, "search-results")
        results.locator("button").click()
        target = page.locator(f"#message-list li[data-msg-id='{needle['msg_id']}']")
        expect(target).to_have_class(re.compile(r"\bjumped\b"))
        expect(target).to_be_in_viewport()
        expect(page.locator("#message-list li.gap")).to_have_count(1)  # between the page around it and the last 50
        shot(w, "search-jump")
        page.locator("#message-list li.gap button").click()
        expect(page.locator("#message-list li.gap")).to_have_count(0)
        texts = page.eval_on_selector_all("#message-list li.msg .text", "els => els.map(e => e.textContent)")
        after = texts[texts.index('the zebra <b>crossing</b> at grid "0300"') + 1:]
        assert after == [f"filler line {i:02d}" for i in range(80)]
        page.keyboard.press("Escape")
        expect(page.locator("#search-panel")).to_be_hidden()
        w.check()
    finally:
        w.page.context.close()


def test_a_mention_while_offline_is_a_badge_at_login_and_a_live_one_notifies(
        sites: RealSites, bots: Bots, browser: Browser) -> None:
    bill = bots.run(ChatClient.connect(ws_url(sites, "B"), "bill", PASSWORD))
    bots.run(bill.join("alpha"))
    bots.run(bill.join("ops"))
    bots.run(bill.close())
    carol, bob = bots.client("A", "carol"), bots.client("B", "bob")
    bots.run(carol.join("ops"))
    bots.run(bob.join("ops"))
    bots.run(carol.say("ops", "@bill please confirm the grid"))
    bots.run(carol.say("ops", "@bill@A is nobody, and this line is for everyone"))
    last = "@bill@A is nobody, and this line is for everyone"
    bots.run(bob.wait_for(lambda f: f.get("text") == last, 10))      # delivered at B
    w = page_for(browser, sites, "B", "bill", permission='"default"')
    try:
        page = w.page
        assert page.evaluate("window.__asked") == 1    # asked once, at the sign-in click, not at page load
        expect(page.locator("#room-title")).to_have_text("alpha")
        ops = page.locator("#room-list [data-room='ops']")
        expect(ops.locator(".unread")).to_have_text("2")
        expect(ops.locator(".mentions")).to_have_text("@1")
        shot(w, "mention-badge-at-login")
        carol_says = bots.run(carol.say("ops", "@bill and now live"))
        expect(ops.locator(".mentions")).to_have_text("@2")
        wait_until_sync(lambda: any(n["tag"] == carol_says["msg_id"] for n in notes(w)),
                        "a notification for the live mention", timeout=10)
        assert [n["title"] for n in notes(w)] == ["carol@A mentioned you in ops"]
        ops.locator("button").click()
        mention = message(w, "please confirm the grid")
        expect(mention).to_have_class(re.compile(r"\bmentions-me\b"))
        expect(mention.locator(".mention.me")).to_have_text("@bill")
        expect(message(w, "is nobody").locator(".mention.me")).to_have_count(0)
        expect(ops.locator(".unread")).to_have_count(0)
        expect(ops.locator(".mentions")).to_have_count(0)
        shot(w, "mention-highlighted")
        w.check()
        again = Watched(w.page.context.new_page())       # the same browser profile, a second tab
        login(again, sites.url("B"), "bill")
        assert again.page.evaluate("window.__asked") == 0    # never asked twice
        expect(again.page.locator("#room-list [data-room='ops'] .unread")).to_have_count(0)   # read in the first tab
        again.check()
    finally:
        w.page.context.close()


def test_a_read_marker_set_in_the_terminal_client_clears_the_browser_badge(
        sites: RealSites, bots: Bots, browser: Browser, loop_thread: LoopThread) -> None:
    from chat_tui.app import ChatApp
    from chat_tui.link import Backoff

    dan = bots.run(ChatClient.connect(ws_url(sites, "B"), "dan", PASSWORD))
    for room in ("a-first", "watch"):
        bots.run(dan.join(room))
    bots.run(dan.close())
    carol = bots.client("A", "carol")
    bots.run(carol.join("watch"))
    w = page_for(browser, sites, "B", "dan")
    try:
        page = w.page
        expect(page.locator("#room-title")).to_have_text("a-first")
        for i in range(3):
            bots.run(carol.say("watch", f"watch line {i}"))
        badge = page.locator("#room-list [data-room='watch'] .unread")
        expect(badge).to_have_text("3")

        async def read_in_the_terminal() -> float:
            """dan's Textual client (the real app, under a pilot) shows the room; when its mark_read is answered."""
            app = ChatApp(ws_url(sites, "B"), "dan", PASSWORD, backoff=Backoff(0.1, 0.5, jitter=0.0))
            async with app.run_test(size=(100, 30)) as pilot:
                while app.link_status.state != "connected" or "watch" not in app.state.joined_rooms():
                    await pilot.pause(0.05)
                app.query_one("#input").value = "/switch watch"
                await pilot.press("enter")
                while app.state.rooms["watch"].read is None:
                    await pilot.pause(0.02)
                return time.monotonic()

        read_at = loop_thread.run(read_in_the_terminal(), 30)
        expect(badge).to_have_count(0, timeout=1000)           # within a second of the terminal's read marker
        assert time.monotonic() - read_at < 1.5
        shot(w, "read-marker-from-terminal")
        w.check()
    finally:
        w.page.context.close()


def test_a_reply_quotes_a_late_line_even_one_that_arrives_after_the_reply(
        sites: RealSites, bots: Bots, loop_thread: LoopThread, alice: Watched, bob: Watched) -> None:
    join(alice, "ops")
    join(bob, "ops")
    carol = bots.client("A", "carol")
    bots.run(carol.join("ops"))
    loop_thread.run(sites.links.cut("A", "B"))
    expect(alice.page.locator("#site-strip [data-site='B']")).to_have_attribute("data-status", "suspected")
    say(bob, "late line from B, sent during the cut")
    original = message(bob, "late line from B")
    expect(original).to_be_visible()
    original_id = original.get_attribute("data-msg-id")
    original_order = json.loads(original.get_attribute("data-order"))
    # carol at A answers it by its id before it reached A: the quote says it has not arrived yet.
    bots.run(carol.request({"type": "say", "room": "ops", "text": "carol answers the line from B",
                            "client_id": "carol-re-1", "reply_to": original_id}))

    async def past_it() -> None:          # A's order moves past B's line, which will therefore come late
        for i in range(50):
            ack = await carol.say("ops", f"chatter at A during the cut {i}")
            got = await carol.wait_for(lambda f, mid=ack["msg_id"]: f.get("msg_id") == mid, 10)
            if got["order"] > original_order:
                return
    bots.run(past_it())
    answer = message(alice, "carol answers the line from B")
    expect(answer.locator(".quote")).to_contain_text("has not reached this site yet")
    shot(alice, "reply-original-not-here-yet")
    loop_thread.run(sites.links.restore("A", "B"))
    late = message(alice, "late line from B")
    expect(late).to_have_attribute("data-late", "true")
    quote = answer.locator("button.quote")
    expect(quote).to_contain_text("late line from B")
    expect(quote.locator(".quote-late")).to_have_text("late")
    # alice replies to the late line with its Reply button.
    late.hover()
    late.locator(".reply-button").click()
    expect(alice.page.locator("#reply-bar")).to_contain_text("Replying to bob@B: late line from B")
    say(alice, "copy your late line")
    expect(alice.page.locator("#reply-bar")).to_be_hidden()
    mine = message(alice, "copy your late line")
    expect(mine.locator("button.quote")).to_contain_text("bob@B")
    theirs = message(bob, "copy your late line")
    expect(theirs.locator("button.quote")).to_contain_text("late line from B")
    shot(alice, "reply-to-late-line")
    theirs.locator("button.quote").click()
    expect(message(bob, "late line from B, sent during")).to_have_class(re.compile(r"\bjumped\b"))


def test_flash_alerts_until_acknowledged_and_the_sender_sees_who_and_when(alice: Watched, bob: Watched) -> None:
    join(alice, "ops")
    join(bob, "ops")
    bob.page.locator("#room-list [data-room='ops'] button").click()
    alice.page.select_option("#precedence", "flash")
    say(alice, "MEDEVAC at grid 123, two casualties")
    expect(alice.page.locator("#precedence")).to_have_value("routine")     # never two FLASH by accident
    sent = message(alice, "MEDEVAC at grid 123")
    expect(sent.locator(".prec-badge")).to_have_text("FLASH")
    expect(sent.locator(".acks")).to_have_text("Not acknowledged yet")
    bar = bob.page.locator("#alert-bar")
    expect(bar).to_be_visible()
    expect(bar.locator(".alert-item")).to_contain_text("alice@A in ops")
    line = message(bob, "MEDEVAC at grid 123")
    expect(line).to_have_class(re.compile(r"\balert\b"))
    expect(bob.page).to_have_title(re.compile(r"^FLASH · "))
    wait_until_sync(lambda: any(n["title"] == "FLASH from alice@A in ops" for n in notes(bob)),
                    "the FLASH notification", timeout=10)
    assert not [n for n in notes(alice) if n["title"].startswith("FLASH")]        # the sender is not alerted
    shot(bob, "flash-alert")
    bar.locator(".alert-ack").click()
    expect(bar).to_be_hidden()
    expect(line).not_to_have_class(re.compile(r"\balert\b"))
    ack = sent.locator(".acks [data-ack='bob@B']")
    expect(ack).to_be_visible()
    expect(ack.locator("time")).to_have_text(re.compile(r"^\d\d:\d\d:\d\d$"))
    expect(message(bob, "MEDEVAC at grid 123").locator(".acks")).to_contain_text("bob@B")
    shot(alice, "flash-acknowledged")
    # Expiry: the composer's choice goes with the line (and stays set); every site shows when it expires.
    alice.page.select_option("#expires-in", "3600")
    say(alice, "holding at the bridge for an hour")
    expect(alice.page.locator("#expires-in")).to_have_value("3600")
    expect(message(bob, "holding at the bridge").locator(".expiry-badge")).to_contain_text("expires")
    expect(message(bob, "holding at the bridge")).not_to_have_class(re.compile(r"\bexpired\b"))
