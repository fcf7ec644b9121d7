"""``/rooms`` in the browser follows the server's pages (docs/chat-protocol.md, ``rooms``).

The scripted server (web_harness) lists three rooms a page; the page asks for
the rest with ``after`` until ``more`` is false and shows one listing.
"""
from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, expect
from testkit import wait_until_sync
from web_harness import LoopThread, ScriptedServer, Watched, join, login, new_page, say

ROOMS = [f"room{i:02d}" for i in range(8)]


@pytest.fixture
def scripted(loop_thread: LoopThread) -> Iterator[ScriptedServer]:
    srv = ScriptedServer(loop_thread)
    srv.rooms = [{"room": r, "private": r == "room05", "members": 3, "online": 1, "joined": False} for r in ROOMS]
    srv.rooms_page = 3
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture
def page(browser: Browser, scripted: ScriptedServer) -> Iterator[Watched]:
    w = new_page(browser)
    login(w, scripted.url, "olga")
    yield w
    w.check()
    w.page.context.close()


def test_rooms_listing_fetches_every_page(scripted: ScriptedServer, page: Watched) -> None:
    join(page, "ops")
    say(page, "/rooms")
    listing = page.page.locator("#message-list .notice.listing").last
    expect(listing).to_contain_text("Rooms (8):")
    for room in ROOMS:
        expect(listing).to_contain_text(room)
    expect(listing).to_contain_text("room05 (private): 3 members, 1 online")
    wait_until_sync(lambda: len(scripted.frames("rooms")) == 3, "three rooms requests", timeout=5)
    assert [f.get("after") for f in scripted.frames("rooms")] == [None, "room02", "room05"]
    assert page.page.locator("#message-list .notice.listing").count() == 1      # one listing, not one per page
