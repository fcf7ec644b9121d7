"""Helpers shared by the suite's test modules: one home for waiting on a condition.

Tests wait on conditions, never sleep-then-assert: ``wait_until`` polls a predicate
until it returns something true (and returns that), failing with a message naming
what was awaited. ``pause`` replaces the sleep between polls (a Textual pilot's
``pause``, so the app runs meanwhile); ``dead`` is asked before each poll and ends
the wait at once with its answer when the thing being waited on has died (a
process that exited). ``wait_until_sync`` is the same for synchronous tests (the
browser tests drive Playwright's sync API).

Waiting until every site sees every other connected has its own home, beside the
launcher the tools share: ``chat_server.launcher.wait_connected`` (each site's
``/health``; ``wait_clients_connected`` through RCM clients), also as
``faultinject.procs``'s; a test waits on it, or on ``wait_until`` over its
``peers_connected``.

Processes a test started: ``alive`` (a zombie is dead) and ``descendants`` (from
/proc), to check that nothing is left behind.

``Kept``: a transport that keeps in memory what a server's session writes to it
(a chat fan-out's bytes per client, without sockets).

``tests/`` is on ``sys.path`` because of ``tests/conftest.py``, so any test module
imports this one as ``testkit``.
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any


async def wait_until(predicate: Callable[[], Any], what: str = "the condition", *, timeout: float = 15.0,
                     interval: float = 0.05, pause: Callable[[float], Awaitable[Any]] | None = None,
                     dead: Callable[[], str | None] | None = None) -> Any:
    """Poll ``predicate`` until it returns something true; that value, or AssertionError naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        if dead is not None and (why := dead()):
            raise AssertionError(f"{why} while waiting for {what}")
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await (pause(interval) if pause is not None else asyncio.sleep(interval))


async def wait_quiet(count: Callable[[], int], quiet: float = 1.0, *, timeout: float = 30.0) -> None:
    """Wait until ``count`` (of events recorded so far) stays the same for ``quiet`` seconds: what a start-up
    set moving can still be on its way after every state already reads settled."""
    deadline = time.monotonic() + timeout
    seen = count()
    while True:
        await asyncio.sleep(quiet)
        now = count()
        if now == seen:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"events still arriving after {timeout} s ({now})")
        seen = now


def wait_until_sync(predicate: Callable[[], Any], what: str = "the condition", *, timeout: float = 15.0,
                    interval: float = 0.05) -> Any:
    """``wait_until`` for synchronous tests."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def exited(proc: Any) -> Callable[[], str | None]:
    """A ``dead`` for ``wait_until``: says so once the ``subprocess.Popen`` ``proc`` has exited."""
    return lambda: f"{proc.args[:3] if isinstance(proc.args, list) else proc.args} exited ({proc.returncode})" \
        if proc.poll() is not None else None


def calls(fn: Callable[..., Any], *args: Any) -> int:
    """How many Python and C functions ``fn(*args)`` calls (a profile hook): a measure of work that does not
    depend on the machine's speed or load, for bounds on work instead of timed asserts. What ``fn`` raises
    propagates once counting stopped. The cyclic garbage collector is paused meanwhile: a collection runs
    finalizers and callbacks left by whatever ran before in the process, work that is not ``fn``'s."""
    import gc
    import sys

    n = 0

    def hook(frame: Any, event: str, arg: Any) -> None:
        nonlocal n
        if event == "call" or event == "c_call":
            n += 1

    was_enabled = gc.isenabled()
    gc.disable()
    sys.setprofile(hook)
    try:
        fn(*args)
    finally:
        sys.setprofile(None)
        if was_enabled:
            gc.enable()
    return n


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (from /proc)."""
    parent: dict[int, int] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if fields[0] != "Z":
                parent[int(d.name)] = int(fields[1])
    out, frontier = [], [pid]
    while frontier:
        p = frontier.pop()
        kids = [c for c, pp in parent.items() if pp == p]
        out += kids
        frontier += kids
    return out


class Kept(asyncio.Transport):
    """A transport that keeps what it is given: each write in ``writes`` (the caller's list, or its own; ``data``
    joins them) and, if ``events`` is given, ``("write", data)`` there too, beside ``("close", b"")`` when it is
    closed, in order with what else the test notes in it."""

    def __init__(self, writes: list[bytes] | None = None, events: list[tuple[str, bytes]] | None = None) -> None:
        super().__init__()
        self.writes = writes if writes is not None else []
        self.events = events
        self.closing = False

    @property
    def data(self) -> bytes:
        return b"".join(self.writes)

    def write(self, data: Any) -> None:
        self.writes.append(bytes(data))
        if self.events is not None:
            self.events.append(("write", bytes(data)))

    def is_closing(self) -> bool:
        return self.closing

    def get_write_buffer_size(self) -> int:
        return 0

    def close(self) -> None:
        self.closing = True
        if self.events is not None:
            self.events.append(("close", b""))

    def abort(self) -> None:
        self.closing = True
