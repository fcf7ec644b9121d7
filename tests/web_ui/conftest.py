"""Fixtures for the browser tests: one Chromium per test module, one event-loop thread for the session.

Chromium lives for one module, not the session: while Playwright's sync API is started it leaves an
event loop running in the main thread, and the asyncio tests that a pytest-xdist worker runs after a
browser module would fail on it (``asyncio.run() cannot be called from a running event loop``).

These tests never skip: without Playwright or /usr/bin/chromium they fail with a
message saying how to get them (``make test`` installs both).
"""
from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

try:
    from playwright.sync_api import Browser, expect, sync_playwright
except ImportError as e:  # pragma: no cover - the message is the point
    raise ImportError("the browser tests need Playwright: pip install 'playwright>=1.45,<2' "
                      "(never `playwright install`: they use Debian's /usr/bin/chromium)") from e

from web_harness import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, LoopThread  # noqa: E402

expect.set_options(timeout=10_000)


@pytest.fixture(scope="session")
def loop_thread() -> Iterator[LoopThread]:
    loop = LoopThread()
    yield loop
    loop.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"{CHROMIUM} is missing: run `make test` as root (deploy/sysdeps.sh installs it with apt) "
                    "or `apt-get install chromium`")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    pw = sync_playwright().start()
    try:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()
    finally:
        pw.stop()
