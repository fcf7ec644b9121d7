"""Rooms in the browser: ``/rooms`` follows the server's pages (docs/chat-protocol.md, ``rooms``), and a labelled
room shows its classification (docs/web-ui.md, "Security labels").

The scripted server (web_harness) lists three rooms a page; the page asks for
the rest with ``after`` until ``more`` is false and shows one listing. A labelled
scripted server: the room's banner top and bottom in its level's colours, a line's
tag when its label is above the floor, the composer's menu of the sendable labels
only, a say with the chosen label, the menu back at the floor in another room, and
a screenshot (test-artifacts/web-ui/labels.png).
"""
from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import Browser, expect
from testkit import wait_until_sync
from web_harness import LoopThread, ScriptedServer, Watched, join, login, new_page, say, shot

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


LABELS = {"levels": ["UNCLASSIFIED", "RESTRICTED", "CONFIDENTIAL", "SECRET"], "caveats": ["AUS", "GBR", "USA"],
          "default": "UNCLASSIFIED"}


@pytest.fixture
def labelled(loop_thread: LoopThread) -> Iterator[ScriptedServer]:
    srv = ScriptedServer(loop_thread)
    srv.welcome_extra = {"labels": LABELS, "clearance": {"level": "SECRET", "caveats": ["GBR", "USA"]}}
    srv.room_labels = {"ops": {"level": "CONFIDENTIAL", "caveats": ["GBR"]}, "logs": {"level": "UNCLASSIFIED",
                                                                                     "caveats": []}}
    now = time.time()
    srv.history["ops"] = [
        {"type": "message", "room": "ops", "msg_id": f"B:{i}", "origin": "B", "user": "bob", "text": text,
         "sent_at": now - 60 + i, "order": [i, "B"], "late": False, "label": label}
        for i, (text, label) in enumerate([("Convoy leaves at 0600.", {"level": "CONFIDENTIAL", "caveats": ["GBR"]}),
                                           ("Route GREEN is closed past the bridge.",
                                            {"level": "SECRET", "caveats": ["GBR", "USA"]})], 1)]
    srv.start()
    yield srv
    srv.stop()


def rgb(hex_colour: str) -> str:
    return f"rgb({int(hex_colour[1:3], 16)}, {int(hex_colour[3:5], 16)}, {int(hex_colour[5:7], 16)})"


def test_a_labelled_room_shows_its_banners_line_tags_and_only_sendable_labels(
        browser: Browser, labelled: ScriptedServer) -> None:
    w: Watched = new_page(browser, width=1100, height=560)
    try:
        login(w, labelled.url, "alice")
        join(w, "ops")
        page = w.page
        for banner in ("#label-top", "#label-bottom"):
            el = page.locator(banner)
            expect(el).to_have_text("CONFIDENTIAL//REL TO GBR")
            expect(el).to_have_css("background-color", rgb("#0033a0"))
            expect(el).to_have_css("color", rgb("#ffffff"))
        up = page.locator("#message-list .msg", has_text="Route GREEN")
        expect(up.locator(".label-tag")).to_have_text("SECRET//REL TO GBR, USA")
        expect(up.locator(".label-tag")).to_have_css("background-color", rgb("#c8102e"))
        expect(page.locator("#message-list .msg", has_text="Convoy").locator(".label-tag")).to_have_count(0)
        menu = page.locator("#send-label")
        offered = menu.locator("option").all_text_contents()
        assert offered == ["CONFIDENTIAL//REL TO GBR", "CONFIDENTIAL//REL TO GBR, USA", "SECRET//REL TO GBR",
                           "SECRET//REL TO GBR, USA"]
        expect(menu).to_have_value("CONFIDENTIAL//REL TO GBR")
        menu.select_option("SECRET//REL TO GBR")
        expect(menu).to_have_css("background-color", rgb("#c8102e"))
        say(w, "Holding at the bridge.")
        wait_until_sync(lambda: bool(labelled.frames("say")), "the say reaches the server", timeout=5)
        said: dict[str, Any] = labelled.frames("say")[-1]
        assert said["label"] == {"level": "SECRET", "caveats": ["GBR"]}
        expect(page.locator("#message-list .msg.pending .label-tag")).to_have_text("SECRET//REL TO GBR")
        path = shot(w, "labels")
        assert path.stat().st_size > 10_000
        join(w, "logs")
        expect(page.locator("#label-top")).to_have_text("UNCLASSIFIED")
        expect(page.locator("#label-top")).to_have_css("background-color", rgb("#007a33"))
        page.locator("#room-list button", has_text="ops").click()
        expect(menu).to_have_value("CONFIDENTIAL//REL TO GBR")          # back at the floor
        w.check()
    finally:
        w.page.context.close()
