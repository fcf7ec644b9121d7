"""One owner for a chat server's background tasks (as aiohttp's cleanup contexts own an app's).

Every task the server starts is spawned here: the timers, the RCM loop, each
``say`` in flight, each IRC connection and its request worker, a search's
answer, a payload to other sites, a connection's close handshake. Nothing in
chat_server calls ``asyncio.ensure_future`` or ``create_task`` itself (the
journal's one fsync at a time is its own, awaited by ``Journal.close``).

``close`` is the drained shutdown, in aiohttp's order: the tasks spawned with
``finish`` (says: RCM may have accepted their message, so they are let reach
the journal) run to their end for at most ``grace`` seconds while the others
go on serving them; then every task still running is cancelled and awaited,
those spawned meanwhile too, until none is left. A task spawned after
``close`` is cancelled at once. A task that fails is logged, never lost
silently.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import Any

log = logging.getLogger("chat_server")


class Tasks:
    """Every background task of one chat server; ``close`` drains and ends them."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()
        self._finishing: set[asyncio.Task[Any]] = set()
        self._closed = False

    def spawn(self, coro: Awaitable[Any], *, finish: bool = False) -> asyncio.Task[Any]:
        """Run ``coro`` as a task of the server (``finish``: ``close`` lets it end before cancelling it)."""
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        if finish:
            self._finishing.add(task)
        task.add_done_callback(self._done)
        if self._closed:
            task.cancel()               # the server has stopped: nothing of it may run on
        return task

    @property
    def finishing(self) -> frozenset[asyncio.Task[Any]]:
        """The tasks spawned with ``finish`` still running."""
        return frozenset(self._finishing)

    def __len__(self) -> int:
        return len(self._tasks)

    def __contains__(self, task: object) -> bool:
        return task in self._tasks

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        self._finishing.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("background task failed", exc_info=task.exception())

    async def close(self, grace: float = 0.0) -> None:
        """Let the ``finish`` tasks end (at most ``grace`` seconds), then cancel every task still running and
        wait for them, and for any they spawn while they end."""
        if self._finishing and grace > 0:
            await asyncio.wait(set(self._finishing), timeout=grace)
        self._closed = True
        while self._tasks:
            tasks = list(self._tasks)
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
