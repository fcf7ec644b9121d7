"""The chat database's WAL checkpoints, in a thread of their own rather than on the event loop.

Theory of operation
-------------------
The database is in WAL mode (store.py): a commit appends the pages it changed
to ``chat.db-wal``, and a *checkpoint* copies them back into ``chat.db`` and
forces both files to disk. By default SQLite runs that checkpoint inside the
commit that takes the WAL past 1,000 pages, in the committing thread, which
for the chat server is the event loop: nothing else runs until the disk has
taken both syncs. Under a fan-out load (bench/peer_irc_fanout.py, 1,000
clients, 50 lines a second) the server wrote about 5 MB a second (23 pages a
line: each delivery is a transaction of its own), such a checkpoint came
every two seconds or so, and in some rounds this machine's disk took 100 ms
to over a second per sync (RCM's log syncs too, in its worker thread): the
rounds whose p99 was 100-400 ms instead of about 20 ms.

So the server turns the automatic checkpoint off on its own connection
(``ChatStore.checkpoint_elsewhere``) and ``Checkpointer`` runs one every
second after writes (``CHECKPOINT_INTERVAL``), in a worker thread, on a connection
of its own, in SQLite's PASSIVE mode: it copies what no reader still needs,
never waits for the writer and never makes it wait, so the loop goes on
committing while the disk syncs. A tick with no write since the last
checkpoint does nothing, and one that finds a checkpoint still running waits
for the next. One sync stays with the loop's connection: when it begins to
reuse a WAL that a checkpoint emptied, SQLite syncs the WAL's new header
(``synchronous=NORMAL``); the loop's connection only reuses it once no
reader holds the old frames. Measured with ``strace -f -e fsync,fdatasync``
on the chat server through one round of the benchmark (1,000 lines): the
loop's thread made 81 syncs before (27 checkpoints, three each), 16 after.
Durability is unchanged: commits never sync the database
(``synchronous=NORMAL``), the journal's fsync is what an ``ack`` waits for,
and SQLite keeps a checkpoint crash-safe whichever connection runs it. A
failed checkpoint is logged (once until one succeeds again) and retried on
the next tick; the WAL grows meanwhile, as it would behind a reader.
"""
from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
from pathlib import Path

log = logging.getLogger("chat_server")
CHECKPOINT_INTERVAL = 1.0     # seconds between the server's checkpoint ticks


class Checkpointer:
    """A chat database's checkpoints, PASSIVE, in a worker thread on a connection of their own."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._db: sqlite3.Connection | None = None
        self._lock = threading.Lock()     # one checkpoint at a time; ``close`` waits for the one running
        self._running = False
        self._seen = -1                   # the store's count of rows written at the last checkpoint started
        self._failing = False
        self.runs = 0
        self.frames = 0                   # WAL frames copied into the database, in all

    def checkpoint(self) -> tuple[int, int]:
        """Blocking (a worker thread): one PASSIVE checkpoint; (frames in the WAL, frames copied)."""
        with self._lock:
            if self._db is None:
                self._db = sqlite3.connect(str(self.path), timeout=10.0, isolation_level=None,
                                           check_same_thread=False)
            busy, in_wal, copied = self._db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            self.runs += 1
            return int(in_wal), int(copied)

    async def tick(self, changes: int) -> None:
        """The server's timer: a checkpoint in a thread if the store wrote since the last (``changes``: its count
        of rows written, ``ChatStore.changes``), unless one is still running."""
        if self._running or changes == self._seen:
            return
        self._running, self._seen = True, changes
        try:
            _, copied = await asyncio.to_thread(self.checkpoint)
            self.frames += max(0, copied)
            if self._failing:
                log.info("the chat database's checkpoints work again (%s)", self.path)
            self._failing = False
        except sqlite3.Error as e:
            if not self._failing:
                log.warning("cannot checkpoint the chat database %s: %s (tried again every second; its WAL "
                            "grows meanwhile)", self.path, e)
            self._failing = True
            self._seen = -1
        finally:
            self._running = False

    def close(self) -> None:
        """Close the connection, after the checkpoint running in a thread, if any, is done."""
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None
