"""Audit finding 14, the browser's side: signing out ends the session at the server.

Before, "Log out" only forgot the session token in the page; the server kept it
valid for days. Now the page sends ``logout {all}``, waits (briefly) for
``logged_out`` or the server's close, and forgets the token whatever the answer.
Closing the tab sends nothing. Here the scripted server (web_harness) plays the
chat server and records what the page sends.
"""
from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, expect
from testkit import wait_until_sync
from web_harness import LoopThread, ScriptedServer, Watched, login, new_page, say


@pytest.fixture(scope="module")
def scripted(loop_thread: LoopThread) -> Iterator[ScriptedServer]:
    srv = ScriptedServer(loop_thread)
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture
def page(browser: Browser, scripted: ScriptedServer) -> Iterator[Watched]:
    scripted.received.clear()
    scripted.logout_reply = True
    w = new_page(browser)
    login(w, scripted.url, "olga")
    yield w
    w.check()
    w.page.context.close()


def logouts(scripted: ScriptedServer) -> list[dict]:
    return [{k: v for k, v in f.items() if k != "id"} for f in scripted.frames("logout")]


def test_sign_out_sends_logout_and_does_not_resume(scripted: ScriptedServer, page: Watched) -> None:
    p = page.page
    p.click("#logout")
    expect(p.locator("#login-view")).to_be_visible()
    expect(p.locator("#chat-view")).to_be_hidden()
    wait_until_sync(lambda: logouts(scripted), "the logout frame", timeout=5)
    assert logouts(scripted) == [{"type": "logout", "all": False}]
    wait_until_sync(lambda: not scripted.sockets, "the socket closed", timeout=5)
    time.sleep(1.0)                            # longer than the first reconnection delay
    assert len(scripted.frames("hello")) == 1 and not scripted.sockets
    expect(p.locator("#conn-state")).to_have_attribute("data-state", "closed")
    expect(p.locator("#login-note")).to_have_text("Signed out.")
    expect(p.locator("#login-submit")).to_be_enabled()
    expect(p.locator("#message-list li")).to_have_count(0)          # nothing of the session is left in the page


def test_logout_all_command(scripted: ScriptedServer, page: Watched) -> None:
    say(page, "/logout all")
    expect(page.page.locator("#login-view")).to_be_visible()
    wait_until_sync(lambda: logouts(scripted), "the logout frame", timeout=5)
    assert logouts(scripted) == [{"type": "logout", "all": True}]
    expect(page.page.locator("#login-note")).to_have_text("Signed out of every session at this site.")


def test_sign_out_gives_up_on_a_silent_server(scripted: ScriptedServer, page: Watched) -> None:
    scripted.logout_reply = False
    t0 = time.monotonic()
    page.page.click("#logout")
    expect(page.page.locator("#login-view")).to_be_visible()
    expect(page.page.locator("#login-note")).to_have_text("Signing out…")
    expect(page.page.locator("#login-submit")).to_be_disabled()
    wait_until_sync(lambda: logouts(scripted), "the logout frame", timeout=5)
    wait_until_sync(lambda: not scripted.sockets, "the page closing the socket itself", timeout=10)
    assert 2.5 < time.monotonic() - t0 < 8            # it waited for the answer (3 s), then gave up
    assert len(scripted.frames("hello")) == 1
    expect(page.page.locator("#login-note")).to_have_text(
        "Signed out of this page; the chat server did not confirm (no answer within 3 s).")
    expect(page.page.locator("#login-submit")).to_be_enabled()


def test_closing_the_tab_sends_no_logout(browser: Browser, scripted: ScriptedServer) -> None:
    scripted.received.clear()
    w = new_page(browser)
    login(w, scripted.url, "olga")
    wait_until_sync(lambda: len(scripted.sockets) == 1, "one socket", timeout=5)
    w.page.close(run_before_unload=True)
    wait_until_sync(lambda: not scripted.sockets, "the socket closed with the tab", timeout=10)
    w.page.context.close()
    assert scripted.frames("logout") == []


def test_signed_out_by_the_server_is_not_resumed(scripted: ScriptedServer, page: Watched) -> None:
    # The user ended all their sessions from another window: the server closes this one too.
    scripted.close_all(1000, "logged out")
    expect(page.page.locator("#login-view")).to_be_visible()
    time.sleep(1.0)
    assert len(scripted.frames("hello")) == 1
    expect(page.page.locator("#login-error")).to_have_text(
        "You were signed out (all your sessions at this site were ended). Please sign in again.")
