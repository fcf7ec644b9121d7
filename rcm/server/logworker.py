"""The RCM server's log worker: the write-ahead log's writes and syncs in one thread, off the event loop.

Theory of operation
-------------------
The asyncio side of group commit (``rcm.server.commits`` decides what waits for
what; this module runs it). The server (``rcm.server.process``) appends a
batch's records to the log (``rcm.durability.wal``) and hands the batch's
effects to ``batch``; they are released through the server's ``release``
callback once the sync covering them completed, in order, at once when
nothing waits.

One job at a time runs in a one-thread executor (``_kick``): the log's whole
buffer (after ``state.json``, when a batch moved the sequence-number
reservation: ``rcm.durability.state``), written and forced when a held batch waits for it (a sync covering
every batch so far), or only written when what is buffered is unforced (a
client's ack, a peer's acknowledgement) and nothing waits. When the log has
grown past ``wal_max_bytes`` (and doubled since the last compaction), the
job after a sync's write rewrites it as a snapshot of the live state, taken in
the loop at that moment (``snapshot``): it covers the held batches too. The
job's completion comes back to the loop (``_committed``): it releases what
the sync covered and starts the next job with whatever queued meanwhile. A
failed job halts the server (``halt``) and nothing held is released; ``fail``
drops what is held when the server halts for another reason. Only one thread
touches the log file at a time: the loop calls the log's blocking methods
(``compact_now``, ``close``) only after ``settled``.

While a batch is held for a heartbeat interval and no sync completed for half
of one (the disk is stalled, not merely busy: under load some batch is
almost always held, and the stack's own heartbeats then go within
milliseconds), liveness-only heartbeats (``rcm.server.commits.Keepalive``) go
ahead of the held frames through the server's ``send`` callback, so the
peers never see a site whose disk is slow as silent; again every heartbeat
interval while that lasts.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Callable, Hashable
from typing import Any

from rcm.durability.records import Record
from rcm.durability.state import DurableState
from rcm.durability.wal import Wal, WalError
from rcm.server.commits import Commits, Keepalive
from rcm.stack import recovery

log = logging.getLogger("rcm")


def _log_job(wal: Wal, data: bytes | bytearray, forced: bool, blob: bytes | None,
             state: DurableState, reservation: bytes | None) -> None:
    """In the worker thread: the moved sequence-number reservation (``reservation``: state.json's content), then
    a group of batches' records, written (and forced); then the compacted log if ``blob``."""
    if reservation is not None:
        try:
            state.write(reservation)
        except OSError as e:
            raise WalError(f"cannot write {state.path}: {e.strerror or e}") from e
    wal.commit(data, forced)
    if blob is not None:
        wal.replace(blob)


class LogWorker:
    """A site's log syncs off the loop and the batches waiting for them (see the module docstring)."""

    def __init__(self, wal: Wal, state: DurableState, site: str, heartbeat_timeout: float,
                 clock: Callable[[], float], *,
                 snapshot: Callable[[], list[Record]], release: Callable[[list[Any]], None],
                 halt: Callable[[str], None], send: Callable[[Hashable, bytes], bool]) -> None:
        """``clock``: the server's (``released`` times are on it); ``snapshot``: the live state as records (a
        compaction); ``release``: a batch's effects, once durable; ``halt``: the log failed; ``send``: a
        heartbeat to a connection (False: it is gone)."""
        self.wal = wal
        self.state = state
        self._reservation: bytes | None = None      # state.json's content, to write before the next sync
        self.site = site
        self.clock = clock
        self._snapshot = snapshot
        self._release = release
        self._halt = halt
        self._send = send
        self.commits: Commits[list[Any]] = Commits()
        self.keepalive = Keepalive(heartbeat_timeout)
        self._timer: asyncio.TimerHandle | None = None
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._job: asyncio.Future[None] | None = None
        self._forced_seen = wal.forced_records      # the log's count at the last batch
        self._compacted_size = 0
        self.compactions = 0
        self.batches_forced = 0          # batches that waited for a sync
        self.keepalives = 0              # liveness-only heartbeats written ahead of held frames
        self._released_at = float("-inf")    # when a sync last released batches

    def batch(self, effects: list[Any], reservation: bytes | None = None) -> None:
        """A batch whose records are appended: its effects now (released) or once its sync completed.
        ``reservation``: it moved the sequence-number reservation (``DurableState.advance``); the batch waits
        for that write too."""
        wal = self.wal
        if reservation is not None:
            self._reservation = reservation
        forced = wal.forced_records > self._forced_seen or reservation is not None
        self._forced_seen = wal.forced_records
        self.batches_forced += forced
        for ready in self.commits.add(effects, forced):
            self._release(ready)
        self._kick()
        if self.commits and self._timer is None:
            # Heartbeats overtake held frames only once the log is slow: held for a whole heartbeat interval.
            self._timer = asyncio.get_running_loop().call_later(self.keepalive.interval, self._on_keepalive)

    def released(self, conn: Hashable, position: int | None, now: float) -> None:
        """Bytes of ``conn`` were released, its stream at ``position`` after them (``Keepalive.released``)."""
        self.keepalive.released(conn, position, now)

    def lost(self, conn: Hashable) -> None:
        self.keepalive.lost(conn)

    def _kick(self) -> None:
        """Start the next job if none runs: the sync the held batches wait for (with a compaction when one is
        due), or the write of unforced records."""
        wal = self.wal
        if self._job is not None or self.commits.failed:
            return
        covering = self.commits.start()
        if not covering and not wal.buffered:
            return
        data, forced = wal.take()
        reservation, self._reservation = self._reservation, None
        blob: bytes | None = None
        if covering and recovery.compaction_due(wal.size + len(data), wal.max_bytes, self._compacted_size):
            # Compact past the limit, and only once the log has doubled since the last compaction, so a large
            # live state is not rewritten every batch. The snapshot covers every batch so far, held ones too.
            blob = wal.encode(self._snapshot())
        if self._executor is None:
            self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=f"rcm-wal-{self.site}")
        before = wal.size
        job = asyncio.get_running_loop().run_in_executor(self._executor, _log_job, wal, data, forced, blob,
                                                         self.state, reservation)
        self._job = job
        job.add_done_callback(lambda f: self._committed(f, covering, before if blob is not None else None))

    def _committed(self, job: asyncio.Future[None], covering: bool, compacted_from: int | None) -> None:
        """The worker finished a job: release what its sync covered, and start the next."""
        self._job = None
        if self.commits.failed:
            return
        exc = job.exception() if not job.cancelled() else WalError("the log job was cancelled")
        if exc is not None:
            self._halt(str(exc) if isinstance(exc, WalError) else f"cannot write the log: {exc!r}")
            return
        if compacted_from is not None:
            self._compacted(compacted_from)
        if covering:
            self._released_at = self.clock()
            for ready in self.commits.done():
                self._release(ready)
        self._kick()

    def _compacted(self, before: int) -> None:
        self._compacted_size = self.wal.size
        self.compactions += 1
        log.info("%s: compacted the log from %d to %d bytes", self.site, before, self.wal.size)

    def _on_keepalive(self) -> None:
        """A batch has been held for a heartbeat interval: liveness-only heartbeats ahead of the held frames,
        on every connection nothing was released to for as long; again as they fall due."""
        self._timer = None
        if not self.commits:
            return
        now = self.clock()
        if now - self._released_at < self.keepalive.interval / 2:
            # Syncs complete (a busy log, not a stalled one): the stack's own heartbeats are not held for long.
            self._timer = asyncio.get_running_loop().call_later(self.keepalive.interval, self._on_keepalive)
            return
        for conn, frame in self.keepalive.due(now):
            if self._send(conn, frame):
                self.keepalives += 1
            else:
                self.keepalive.lost(conn)
        due = self.keepalive.next_due()
        wait = due - now if due is not None else self.keepalive.interval
        self._timer = asyncio.get_running_loop().call_later(max(0.0, wait), self._on_keepalive)

    async def settled(self) -> None:
        """Until no job is in flight (every held batch released, or the log failed)."""
        while self._job is not None:
            await asyncio.wait([self._job])

    def fail(self) -> int:
        """The server halts: nothing held is ever released. Returns how many batches were held."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        return self.commits.fail()

    def compact_now(self) -> None:
        """Rewrite the log as the live state, now, in the loop (only after ``settled``)."""
        assert self._job is None
        before = self.wal.size
        self.wal.rewrite(self._snapshot())
        self._compacted(before)

    def close(self, abandon: bool) -> None:
        """After ``settled``: stop the worker; close the log (``abandon``: without writing what is buffered)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._executor is not None:
            self._executor.shutdown(wait=False)
        if abandon:
            self.wal.abandon()
        else:
            self.wal.close()

    def stats(self) -> dict[str, Any]:
        return {"bytes": self.wal.size, "syncs": self.wal.syncs, "records": self.wal.records_written,
                "compactions": self.compactions, "batches": self.batches_forced, "held": len(self.commits),
                "keepalives": self.keepalives}
