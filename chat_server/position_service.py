"""The chat server's edge for position reports: publish to RCM, take RCM's newest, journal, fan out.

Theory of operation (positions.py has the model)
------------------------------------------------
A local report (``publish``) goes to RCM's latest-wins class under its unit's
key; RCM gives it back, like every site's newest report, as a ``Latest``
event (``received``). A report newer than the table's is journaled (one
``position`` record per report accepted or received here, contract 3) and
queued for the clients that asked ``positions {}``; the queue is written
after the journal's next fsync (``_flush``: one sync for a burst of reports),
so no client is shown a report the journal could lose. A report that no site
could have sent is logged and dropped; nothing else is affected.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from . import positions
from .journal import Journal
from .positions import PositionError, PositionTable, Report
from .protocol import ErrorCode as E
from .protocol import Refusal, unavailable
from .sessions import Sessions
from .tasks import Tasks

log = logging.getLogger("chat_server.positions")


class PositionService:
    def __init__(self, site: str, journal: Journal, sessions: Sessions, tasks: Tasks,
                 rcm: Callable[[], Any], clock: Callable[[], float]) -> None:
        self.site = site
        self.journal = journal
        self.sessions = sessions
        self.tasks = tasks
        self.rcm = rcm
        self.clock = clock
        self.table = PositionTable()
        self.rejected = 0                       # reports from other sites that no site could have sent
        self._queued: list[dict[str, Any]] = []

    async def publish(self, report: Report) -> None:
        """Hand a local report to RCM (the table takes it when RCM gives it back, as every site does)."""
        rcm = self.rcm()
        if rcm is None:
            raise unavailable()
        try:
            await rcm.publish(positions.key(report.unit), positions.encode(report), expires_at=report.expires_at)
        except ValueError as e:
            raise Refusal(E.REJECTED, f"RCM refused the position report: {e}") from None
        except Exception as e:
            log.warning("position report not handed to RCM: %s", e)
            raise unavailable() from e

    def received(self, origin: str, key: bytes, payload: bytes, version: int, expires_at: float) -> None:
        """RCM's newest report of a unit (this site's own included)."""
        now = self.clock()
        try:
            report = positions.decode(origin, key, payload, expires_at)
        except PositionError as e:
            self.rejected += 1
            log.warning("dropped a position report of %s: %s", origin, e)
            return
        if not self.table.apply(report, version, now):
            return
        self.journal.position(origin=report.site, unit=report.unit, lat=report.lat, lon=report.lon, alt=report.alt,
                              sent_at=report.at)
        if not self._queued:
            self.tasks.spawn(self._flush())
        self._queued.append(report.frame())

    async def _flush(self) -> None:
        await asyncio.sleep(0)                  # the burst this event began
        await self.journal.sync()
        frames, self._queued = self._queued, []
        for frame in frames:
            self.sessions.to_position_readers(frame)

    def snapshot(self) -> list[dict[str, Any]]:
        """Every live report, as ``position`` frames (the ``positions`` reply)."""
        return [r.frame() for r in self.table.live(self.clock())]
