"""What the page draws for the marks every client shows alike (issue 35), on a scripted server, in Chromium.

The reducer's rules are tested under Node (web_ui/tests/marks.test.mjs); here the drawing: the sign-in form
names the site, a live late line reads "late +22s", a line placed after a later one says "order -62s" with
why in its tooltip, the private room's lock is drawn (no emoji font needed), search results show the date and
a 24-hour time, a recovered notice replaces the lost one, an error banner says its reason once.
"""
from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import Browser, expect
from web_harness import LoopThread, ScriptedServer, Watched, join, login, new_page, shot


def msg(seq: int, sent_at: float, text: str, *, origin: str = "B", user: str = "bob", **kw: Any) -> dict[str, Any]:
    return {"type": "message", "room": "ops", "msg_id": f"{origin}:{seq}", "origin": origin, "user": user,
            "text": text, "sent_at": sent_at, "order": [seq, origin], "late": False, "n": seq, **kw}


@pytest.fixture(scope="module")
def scripted(loop_thread: LoopThread) -> Iterator[ScriptedServer]:
    srv = ScriptedServer(loop_thread, site="ground1",
                         sites={"ground1": "connected", "B": "connected", "C": "connected"})
    now = time.time()
    srv.history["ops"] = [msg(10, now - 300, "Tanker AR-7 on station"),
                          msg(20, now - 120, "Weather at the divert field below minimums", origin="C", user="carol"),
                          msg(30, now - 182, "Viper 2 fuel state bingo", origin="ground1", user="alice")]
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture()
def alice(browser: Browser) -> Iterator[Watched]:
    w = new_page(browser)
    yield w
    w.check()
    w.page.context.close()


def test_the_marks_every_client_shows_alike(scripted: ScriptedServer, alice: Watched) -> None:
    page = alice.page
    page.goto(scripted.url)
    expect(page.locator("#login-site")).to_have_text("Sign in to site ground1.")
    shot(alice, "login-site")
    login(alice, scripted.url, "alice")
    scripted.refused["cell"] = "join: room 'cell' is private and you are not a member"
    page.fill("#join-input", "cell")                              # a private room one is not a member of
    page.press("#join-input", "Enter")
    expect(page.locator("#banner-text")).to_have_text(
        "Cannot join cell: room 'cell' is private and you are not a member")
    join(alice, "ops")

    own = page.locator("li.msg[data-msg-id='ground1:30']")         # alice's line, placed after carol's later one
    expect(own.locator(".order-badge")).to_have_text("order -62s")
    assert "not the senders' clocks" in (own.locator(".order-badge").get_attribute("title") or "")
    scripted.push(msg(25, time.time() - 22, "Copy, moving to the tanker", origin="C", user="dave", late=True))
    late = page.locator("li.msg[data-msg-id='C:25']")
    expect(late.locator(".late-badge")).to_have_text(re.compile(r"^late \+2[2-9]s$"))   # 22 s and the push's time
    scripted.push(msg(31, time.time() - 40, "ABORT, own FLASH", origin="ground1", user="alice", late=True,
                      precedence="flash"))
    expect(page.locator("li.msg[data-msg-id='ground1:31']")).to_have_attribute("data-late", "false")

    scripted.push({"type": "missing", "origin": "C", "count": 1, "ranges": [[24, 24]]})
    expect(page.locator("#message-list li.notice.missing")).to_have_count(1)
    scripted.push(msg(24, time.time() - 90, "Tanker off station at 0300", origin="C", user="carol", late=True,
                      repaired=True))
    scripted.push({"type": "missing", "origin": "C", "count": 0, "ranges": [], "recovered": 1})
    expect(page.locator("#message-list li.notice.missing")).to_have_count(0)
    expect(page.locator("#message-list li.notice.recovered")).to_have_text(
        "Recovered 1 message from site C: shown in place, marked repaired.")

    scripted.push({"type": "joined", "room": "cell", "private": True, "members": ["alice", "bob"], "history": []})
    room = page.locator("#room-list li[data-room='cell'] .room-name")
    expect(room).to_have_text("cell")                             # no emoji: the lock is drawn
    lock = room.locator(".lock")
    expect(lock).to_have_attribute("aria-label", "private")
    assert lock.bounding_box()["width"] > 4                       # type: ignore[index]
    page.locator("#room-list li[data-room='ops'] button").click()

    scripted.search_results = [dict(msg(10, 1_767_225_600.0 + 3 * 3600 + 5 * 60 + 9, "Tanker AR-7 on station"),
                                    highlights=[[0, 6]])]
    page.fill("#search-input", "tanker")
    page.press("#search-input", "Enter")
    when = page.locator("#search-results time").first
    expect(when).to_have_text(page.evaluate(
        "t => { const d = new Date(t * 1000), p = (n) => String(n).padStart(2, '0');"
        " return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} "
        "${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`; }", 1_767_225_600.0 + 3 * 3600 + 5 * 60 + 9))
    expect(page.locator("#search-status")).to_have_text("1 result for tanker")
    shot(alice, "marks")
