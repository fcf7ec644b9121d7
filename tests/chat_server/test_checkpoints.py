"""The chat database's checkpoints run in a worker thread, not in the loop's commits (chat_server/checkpoints.py)."""
from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
from pathlib import Path

import pytest

from chat_server.checkpoints import Checkpointer
from chat_server.store import ChatStore


def _store(tmp_path: Path) -> tuple[ChatStore, Checkpointer]:
    store = ChatStore(tmp_path / "chat.db")
    store.checkpoint_elsewhere()
    return store, Checkpointer(store.path)


@pytest.mark.timeout(30)
async def test_the_servers_connection_leaves_checkpoints_to_a_worker_thread(tmp_path: Path) -> None:
    store, ck = _store(tmp_path)
    threads: list[threading.Thread] = []
    real = ck.checkpoint

    def spy() -> tuple[int, int]:
        threads.append(threading.current_thread())
        return real()

    ck.checkpoint = spy  # type: ignore[method-assign]
    try:
        assert store.db.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
        for i in range(1500):          # past SQLite's 1,000 pages: its own commits would have checkpointed by now
            store.set_state(f"k{i}", "x" * 2000)
        await ck.tick(store.changes)
        assert ck.runs == 1 and ck.frames > 1000          # everything the loop's commits left in the WAL
        assert threads == [threads[0]] and threads[0] is not threading.main_thread()
        await ck.tick(store.changes)                      # nothing written since: nothing to do
        assert ck.runs == 1
        store.set_state("one more", 1)
        await ck.tick(store.changes)
        assert ck.runs == 2
    finally:
        ck.close()
        store.close()


@pytest.mark.timeout(30)
async def test_a_tick_while_a_checkpoint_runs_starts_none(tmp_path: Path) -> None:
    store, ck = _store(tmp_path)
    started, release = threading.Event(), threading.Event()
    real = ck.checkpoint

    def slow() -> tuple[int, int]:
        started.set()
        release.wait(10)
        return real()

    ck.checkpoint = slow  # type: ignore[method-assign]
    try:
        store.set_state("a", 1)
        first = asyncio.ensure_future(ck.tick(store.changes))
        await asyncio.to_thread(started.wait, 10)
        store.set_state("b", 2)
        await ck.tick(store.changes)                      # returns at once: one is running
        assert ck.runs == 0
        release.set()
        await first
        assert ck.runs == 1
        await ck.tick(store.changes)                      # what was written meanwhile: its turn now
        assert ck.runs == 2
    finally:
        release.set()
        ck.close()
        store.close()


@pytest.mark.timeout(30)
async def test_a_failed_checkpoint_is_logged_once_and_tried_again(tmp_path: Path, caplog) -> None:
    store, ck = _store(tmp_path)
    calls = {"n": 0}
    real = ck.checkpoint

    def flaky() -> tuple[int, int]:
        calls["n"] += 1
        if calls["n"] <= 2:
            raise sqlite3.OperationalError("disk I/O error")
        return real()

    ck.checkpoint = flaky  # type: ignore[method-assign]
    try:
        with caplog.at_level(logging.INFO, logger="chat_server"):
            store.set_state("a", 1)
            await ck.tick(store.changes)
            await ck.tick(store.changes)      # nothing written since, but the last one failed: tried again
            await ck.tick(store.changes)
        assert calls["n"] == 3 and ck.runs == 1
        warnings = [r for r in caplog.records if "cannot checkpoint" in r.getMessage()]
        assert len(warnings) == 1 and "disk I/O error" in warnings[0].getMessage()
        assert any("work again" in r.getMessage() for r in caplog.records)
    finally:
        ck.close()
        store.close()


class _Held:
    """A connection whose next statement waits for ``release`` (a checkpoint under way)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db, self.inside, self.release = db, threading.Event(), threading.Event()

    def execute(self, sql: str) -> sqlite3.Cursor:
        self.inside.set()
        self.release.wait(10)
        return self.db.execute(sql)

    def close(self) -> None:
        self.db.close()


@pytest.mark.timeout(30)
def test_close_waits_for_a_checkpoint_running_in_a_thread(tmp_path: Path) -> None:
    store, ck = _store(tmp_path)
    store.set_state("a", 1)
    held = _Held(sqlite3.connect(str(store.path), check_same_thread=False))
    ck._db = held  # type: ignore[assignment]
    running = threading.Thread(target=ck.checkpoint)
    running.start()
    assert held.inside.wait(10)
    closer = threading.Thread(target=ck.close)
    closer.start()
    closer.join(0.2)
    assert closer.is_alive()                  # waiting for the checkpoint
    held.release.set()
    closer.join(10)
    running.join(10)
    assert not closer.is_alive() and ck._db is None and ck.runs == 1
    ck.close()                                # twice: nothing
    store.close()
