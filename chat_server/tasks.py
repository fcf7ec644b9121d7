"""One owner for a chat server's background tasks (as aiohttp's cleanup contexts own an app's).

Every task the server starts (timers, the RCM loop, a say, a close handshake)
is spawned here; ``close`` cancels the ones still running and waits for them,
so nothing outlives ``ChatServer.stop``. A task that fails is logged, never
lost silently.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import Any

log = logging.getLogger("chat_server")


class Tasks:
    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, coro: Awaitable[Any]) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("background task failed", exc_info=task.exception())

    async def close(self) -> None:
        """Cancel every task still running and wait for them."""
        tasks = list(self._tasks)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
