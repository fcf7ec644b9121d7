"""The site journal (Contract 3 of DESIGN.md): JSON Lines, one event a line.

Theory of operation
-------------------
Records are built and written by the journal's one schema and writer
(``contracts.journal``); this module owns the files. Each chat server
process appends to its own file,
``data_dir/<site>/journal/<site>-<start time ns>.jsonl``, so a file has exactly
one writer and files of successive runs sort by name. ``write`` hands the line
to the kernel at once (an unbuffered ``os.write``): once it returns, the record
survives a crash of the process, and only then does the server show the event
to a client. ``sync`` makes the records written so far durable on disk
(``fsync``) with group commit: concurrent callers share one ``fsync`` running
in a worker thread, so the event loop never blocks on the disk. The server
awaits ``sync`` after a ``send`` record before it acks a message to its user.

``n`` of deliver records counts the chat messages delivered at the site,
across restarts; the server keeps the counter in its database, and
``recover`` reads the newest file of the previous run to find deliveries that
reached the journal but not the database before a crash.

A ``missing`` record names the lost messages as ``ranges`` of seqs with their
``count`` (Contract 3, extension of the second round), and lists them as
``seqs`` too when there are at most ``MISSING_SEQS_MAX`` of them, for readers
that know only ``seqs``, at most ``MISSING_SEQS_MAX`` in all the records of one
report (``missing_records``). A peer may name any number of messages in a few
ranges, so nothing here or in a reader turns ranges into numbers beyond that:
``missing_batches`` splits a report into records by ranges and
``contracts.journal.missing_ranges`` reads either shape back as ranges.
"""
from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from contracts import journal as J
from contracts.journal import MISSING_SEQS_MAX
from contracts.precedence import Precedence
from rcm import ranges as _ranges

MISSING_RANGES_PER_RECORD = 1000    # ranges in one `missing` record


class Unreadable:
    """Counts the lines a reader skipped: torn by a crash, garbled, or not a JSON object."""

    def __init__(self) -> None:
        self.lines = 0


def read_journal(path: Path, unreadable: Unreadable | None = None) -> Iterator[dict[str, Any]]:
    """Records of one journal file, in file order (the one reader of Contract 3's files).

    A torn last line (a crash) ends the file; a garbled line, or one that is not a JSON object, is
    skipped; both are counted in ``unreadable``. Every record is yielded whatever its kind: readers
    ignore kinds they do not know."""
    with open(path, "rb") as f:
        for line in f:
            if not line.strip():
                continue
            if not line.endswith(b"\n"):
                if unreadable is not None:
                    unreadable.lines += 1
                return
            try:
                rec = json.loads(line)
            except ValueError:              # (UnicodeDecodeError is a ValueError)
                rec = None
            if isinstance(rec, dict):
                yield rec
            elif unreadable is not None:
                unreadable.lines += 1


def missing_batches(ranges: list[list[int]]) -> Iterator[list[list[int]]]:
    """A canonical range list cut into the ranges of successive ``missing`` records.

    A record holds at most ``MISSING_RANGES_PER_RECORD`` ranges, and either only ranges of at
    most ``MISSING_SEQS_MAX`` messages in all (it lists them as ``seqs`` too) or only ranges
    longer than that each: every range a reader of ``seqs`` can be given is given to it, and
    no range is ever cut, so the records are as many as the ranges at most."""
    batch: list[list[int]] = []
    listed = 0                      # messages in the batch, while it is one that lists them
    for first, last in ranges:
        n = last - first + 1
        small = n <= MISSING_SEQS_MAX
        if batch and (len(batch) >= MISSING_RANGES_PER_RECORD
                      or small != (listed > 0) or (small and listed + n > MISSING_SEQS_MAX)):
            yield batch
            batch, listed = [], 0
        batch.append([first, last])
        if small:
            listed += n
    if batch:
        yield batch


def missing_records(ranges: list[list[int]]) -> Iterator[tuple[list[list[int]], bool]]:
    """The records of one report (``missing_batches``), each with whether it lists its ``seqs``: while the
    report has listed at most ``MISSING_SEQS_MAX`` in all. Each record could list up to that many, and a
    peer's MISSED frame of 4,096 ranges of 10,000 seqs (74 KB) wrote 41 million of them (found by
    faultinject.adversary's chat probe)."""
    listed = 0
    for batch in missing_batches(ranges):
        count = _ranges.count(batch)
        fits = listed + count <= MISSING_SEQS_MAX
        listed += count if fits else 0
        yield batch, fits


def _precedence(p: Precedence) -> str | None:
    """A record's ``precedence``: the level's name; routine is left out, as it always was (Contract 3)."""
    return None if p is Precedence.ROUTINE else p.value


def journal_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.jsonl"))


class Journal:
    """Appends Contract 3 records for one site."""

    def __init__(self, directory: Path, site: str, clock: Callable[[], float] = time.time) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        directory.chmod(0o700)      # the journal holds every message, private rooms' too (audit row 15)
        self.directory = directory
        self.site = site
        self.clock = clock
        self.previous = journal_files(directory)
        self.path = directory / f"{site}-{time.time_ns():020d}.jsonl"
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)        # the new file's name survives a crash too
        finally:
            os.close(dir_fd)
        self._written = 0
        self._synced = 0
        self._syncing: asyncio.Future[None] | None = None

    # --- records (built and written by the one writer of Contract 3, contracts.journal) ---------------------
    def send(self, *, msg_id: str, origin: str, seq: int, room: str, user: str, text: str, sent_at: float,
             order: list[Any] | None, skipped: list[str] | tuple[str, ...] = (),
             precedence: Precedence = Precedence.ROUTINE, expires_at: float | None = None,
             label: dict[str, Any] | None = None) -> dict[str, Any]:
        # ``label`` (second round): the message's label (``Label.to_json``) in a labeled mission. ``skipped``
        # (extension): sites RCM did not send to because they were disconnected. ``expires_at``
        # (second round): when the message expires, absent if never.
        return self._write(J.record(J.SEND, site=self.site, at=self.clock(), msg_id=msg_id, origin=origin, seq=seq,
                                    room=room, user=user, text=text, sent_at=sent_at, order=order,
                                    skipped=sorted(skipped), precedence=_precedence(precedence),
                                    label=label, expires_at=expires_at))

    def deliver(self, *, n: int, msg_id: str, origin: str, seq: int, order: list[Any], late: bool, room: str,
                user: str, text: str, sent_at: float, held: bool = False, precedence: Precedence = Precedence.ROUTINE,
                reply_to: str = "", via: list[str] | None = None, repaired: bool = False,
                expires_at: float | None = None, label: dict[str, Any] | None = None) -> dict[str, Any]:
        # ``via``: relay sites this site reached the origin through ([]: direct). ``repaired``: reported missing
        # here earlier, recovered by RCM's repair. ``held`` (extension): a private room's message held until the
        # room's definition reached this site (docs/chat-protocol.md); shown then, late, so it may follow later
        # messages of its origin.
        return self._write(J.record(J.DELIVER, site=self.site, n=n, at=self.clock(), msg_id=msg_id, origin=origin,
                                    seq=seq, order=order, late=late, room=room, user=user, text=text,
                                    sent_at=sent_at, precedence=_precedence(precedence), reply_to=reply_to or None,
                                    via=via, repaired=True if repaired else None, held=True if held else None,
                                    label=label, expires_at=expires_at))

    def expired(self, *, msg_id: str, origin: str, seq: int) -> dict[str, Any]:
        """A message that expired before it reached this site: RCM delivered its stub (no content). It existed
        and is not lost (second round); nothing of it is shown here."""
        return self._write(J.record(J.EXPIRED, site=self.site, at=self.clock(), msg_id=msg_id, origin=origin,
                                    seq=seq))

    def control(self, *, msg_id: str, origin: str, seq: int, order: list[Any], late: bool) -> dict[str, Any]:
        """An RCM delivery that shows no chat message here (chat control data: rosters, receipts, room
        definitions; or a message held, dropped or refused), so that ordering checks see every delivery."""
        return self._write(J.record(J.CONTROL, site=self.site, at=self.clock(), msg_id=msg_id, origin=origin,
                                    seq=seq, order=order, late=late))

    def clearance(self, *, clearance: dict[str, Any], levels: list[str], caveats: list[str]) -> dict[str, Any]:
        """A labeled mission's chat server started: what this site may hold (its clearance, ``Label.to_json``)
        and the mission's levels (lowest first) and caveats (second round; readers take the latest one)."""
        return self._write(J.record(J.CLEARANCE, site=self.site, at=self.clock(), clearance=clearance,
                                    levels=list(levels), caveats=list(caveats)))

    def acknowledge(self, *, msg_id: str, user: str) -> dict[str, Any]:
        """A user of this site acknowledged a flash or immediate message (Contract 3 extension)."""
        return self._write(J.record(J.ACKNOWLEDGE, site=self.site, at=self.clock(), msg_id=msg_id, user=user))

    def status(self, *, peer: str, status: str) -> dict[str, Any]:
        return self._write(J.record(J.STATUS, site=self.site, at=self.clock(), peer=peer, status=status))

    def missing(self, *, origin: str, ranges: list[list[int]], listed: bool = True) -> dict[str, Any]:
        """Messages of ``origin`` known lost here, as canonical ``ranges`` (one of ``missing_records``):
        listed as ``seqs`` too when ``listed`` and they are few enough (``MISSING_SEQS_MAX``)."""
        return self._write(J.record(J.MISSING, site=self.site, at=self.clock(), origin=origin,
                                    **J.missing_fields(ranges, listed)))

    def position(self, *, origin: str, unit: str, lat: float, lon: float, sent_at: float,
                 alt: float | None = None) -> dict[str, Any]:
        """A position report accepted or received here (second round; positions.py)."""
        return self._write(J.record(J.POSITION, site=self.site, at=self.clock(), origin=origin, unit=unit, lat=lat,
                                    lon=lon, alt=alt, sent_at=sent_at))

    def _write(self, rec: dict[str, Any]) -> dict[str, Any]:
        if self._fd is None:
            raise RuntimeError("journal is closed")
        data = (J.dumps(rec) + "\n").encode("utf-8")
        view = memoryview(data)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]
        self._written += 1
        return rec

    # --- durability ---------------------------------------------------------------------------
    async def sync(self) -> None:
        """Return once every record written before the call is on disk."""
        target = self._written
        while self._synced < target:
            if self._syncing is None:
                self._syncing = asyncio.ensure_future(self._fsync())
            await asyncio.shield(self._syncing)

    async def _fsync(self) -> None:
        upto = self._written
        try:
            if self._fd is not None:
                await asyncio.to_thread(os.fsync, self._fd)
            self._synced = max(self._synced, upto)
        finally:
            self._syncing = None

    async def close(self) -> None:
        if self._fd is None:
            return
        if self._syncing is not None:
            await asyncio.shield(self._syncing)
        fd, self._fd = self._fd, None
        os.fsync(fd)
        os.close(fd)

    # --- recovery -----------------------------------------------------------------------------
    def recover(self, after_n: int, current: bool = False) -> list[dict[str, Any]]:
        """Deliver records with ``n > after_n`` (journaled, not yet stored) in the previous run's file,
        and with ``current`` in this run's file too (after a database failure in this run)."""
        files = self.previous[-1:] + ([self.path] if current else [])
        return [r for path in files for r in read_journal(path)
                if r.get("kind") == "deliver" and isinstance(r.get("n"), int) and r["n"] > after_n]
