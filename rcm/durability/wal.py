"""The RCM server's write-ahead log: what its guarantees depend on, on disk.

Theory of operation
-------------------
The paper's prototype kept its buffers in memory, so a restart lost whatever
was in flight. Here every fact a promise rests on is appended to
``data_dir/<site>/rcm/wal.log`` and forced to disk (``fdatasync``) before the
promise is made:

* a local send, before the client is told ``accepted``;
* a received reliable frame, before the acknowledgement that lets the peer
  forget it is written;
* a delivery (with its number ``n``), before the client sees it.

Appends of one event batch share one ``fdatasync`` (group commit): under load
a batch holds many messages, so the cost per message falls as load rises.
The server runs the sync off its event loop (``rcm.server.commits``): the loop
appends (``append``) and hands what is buffered to one worker thread
(``take``), which writes and forces it (``commit``), or replaces the log with a
compacted one (``replace``); the batches that arrive while a sync is in flight
share the next one. Only one thread touches the file at a time: the loop
calls ``sync``, ``rewrite`` and ``close`` only while no ``commit`` is in
flight. ``sync`` is ``commit(take())`` for a caller that may block.

Records are msgpack arrays framed as ``u32 length | u32 crc32 | body``. A torn
or corrupt tail (a crash in the middle of a write) ends the log: ``open``
truncates it there. A bad record with whole records after it is no torn tail
but damage (a bad disk block, a file restored from an older copy): cutting
there would drop records already promised and sent, and the site's peers,
which hold more of its stream than the cut log remembers, would refuse it
for ever. Such a log is set aside whole (``wal.log.damaged-<time>``, kept for
the operator) and the site starts afresh, as after a lost disk
(``set_aside``; the server then gives its stream a new identity, and its
peers take it as restarted). When the file passes ``max_bytes`` the server rewrites it
as a compact snapshot of live state only (``compact``: temp file, fsync,
rename), so the log stays proportional to what is in flight, not to the
mission's history.

Writing is careful about what a disk can do: ``os.write`` may write less than
asked (a full disk, a signal), so ``sync`` loops until the batch is written;
if a write fails, the file is cut back to its last whole record (a torn record
would hide every later one from the next start) and ``WalError`` says why,
the batch kept for a retry. A new log file and a renamed compacted one are
made durable with an fsync of the directory, not only of the file. Files are
created 0600: the log holds every message in flight.

Records are typed (``rcm.durability.records``: one small frozen type per kind, with its
encoding); ``append`` takes one, ``records`` gives back the file's records
decoded, and ``FORCED`` (the kinds that cost an ``fdatasync``) comes from the
types. A log written by an older version is read the same way.
"""
from __future__ import annotations

import os
import re
import struct
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack

from rcm.durability.records import FORCED, Record, RecordError, decode

_HEAD = struct.Struct("<II")
_NONZERO = re.compile(rb"[^\x00]")


class WalError(Exception):
    """The log could not be written; nothing in the failed batch may be promised."""


def fsync_dir(directory: Path) -> None:
    """Make a file's creation or rename in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def private_dir(directory: Path) -> None:
    """Create ``directory`` (and missing parents) and make it 0700: it holds the log and the socket.

    A directory RCM creates is fsynced into its parent, so a crash cannot lose it
    along with the files in it. An existing one is tightened to 0700 (older
    versions left it 0755).
    """
    missing = []
    d = directory
    while not d.exists():
        missing.append(d)
        d = d.parent
    for d in reversed(missing):
        try:
            # Parents (data_dir, the site's directory) are shared with the chat
            # server: their mode is its business and the umask's.
            d.mkdir(mode=0o700 if d == directory else 0o777)
        except FileExistsError:
            continue
        fsync_dir(d.parent)
    os.chmod(directory, 0o700)


def write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    """``os.write`` until all of ``data`` is written (it may write less than asked)."""
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def replace_file(path: Path, data: bytes | bytearray, tmp: Path) -> None:
    """Make ``data`` the content of ``path`` atomically and durably: written to ``tmp`` (0600), synced,
    renamed over ``path``, the rename synced. On an OSError ``tmp`` is removed and ``path`` is whole."""
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.fchmod(fd, 0o600)     # a temp file left by a crash keeps its old mode otherwise
            write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)        # the commit point
        fsync_dir(path.parent)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise


def _framed(data: bytes, pos: int) -> tuple[Any, int] | None:
    """The msgpack value of the record framed at ``pos`` and where the next one starts; None when the record
    is cut short or its CRC or msgpack is wrong (``pos`` must leave room for a header)."""
    length, crc = _HEAD.unpack_from(data, pos)
    end = pos + _HEAD.size + length
    body = memoryview(data)[pos + _HEAD.size: end]
    if end > len(data) or zlib.crc32(body) != crc:
        return None
    try:
        return msgpack.unpackb(body, raw=False, strict_map_key=False), end
    except Exception:       # msgpack raises several types for bad input
        return None


def whole_record_after(data: bytes, start: int) -> int | None:
    """Where the first whole record (framed right, ``_framed``, and a record's decoding) at or after ``start``
    begins, if one does. A torn tail has none: what a crash leaves after the last whole record is part of
    one, or zeros (skipped a run at a time)."""
    pos, end = start, len(data) - _HEAD.size
    while pos <= end:
        if _HEAD.unpack_from(data, pos) == (0, 0):
            nonzero = _NONZERO.search(data, pos)
            if nonzero is None:
                return None
            pos = max(pos + 1, nonzero.start() - _HEAD.size + 1)
            continue
        framed = _framed(data, pos)
        if framed is not None:
            try:
                decode(framed[0])
            except Exception:       # RecordError, or a record type's own decoder on values no version wrote
                pass
            else:
                return pos
        pos += 1
    return None


class Wal:
    """Append-only log with group commit."""

    def __init__(self, directory: Path, max_bytes: int = 64 << 20) -> None:
        self.path = directory / "wal.log"
        self.max_bytes = max_bytes
        self._buf = bytearray()
        self._forced = False
        self.syncs = 0
        self.records_written = 0
        self.forced_records = 0       # appended records of the forced kinds (a batch forced one if this moved)
        self.truncated_bytes = 0
        self.set_aside: str | None = None      # why the log was set aside as damaged (the site starts afresh)
        if not directory.is_dir():
            private_dir(directory)
        try:
            self.records: list[Record] = [decode(raw) for raw in self._read_and_repair()]
        except RecordError as e:
            raise WalError(f"cannot read the log {self.path}: {e}") from None
        created = not self.path.exists()
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        if created:
            fsync_dir(directory)
        else:
            os.fchmod(self._fd, 0o600)   # older versions left a compacted log 0644
        self.size = os.fstat(self._fd).st_size

    def _read_and_repair(self) -> Iterator[Any]:
        if not self.path.exists():
            return
        data = self.path.read_bytes()
        good = 0
        out = []
        while good + _HEAD.size <= len(data):
            framed = _framed(data, good)
            if framed is None:
                break
            rec, good = framed
            out.append(rec)
        if good < len(data):
            after = whole_record_after(data, good + 1)
            if after is not None:
                aside = self.path.with_name(f"{self.path.name}.damaged-{int(time.time())}")
                os.replace(self.path, aside)
                fsync_dir(self.path.parent)
                self.set_aside = (f"{self.path} is damaged at byte {good} of {len(data)}, with whole records "
                                  f"after it from byte {after} (no torn tail of a crash): set aside as {aside.name}")
                return
            self.truncated_bytes = len(data) - good
            with open(self.path, "r+b") as f:
                f.truncate(good)
                f.flush()
                os.fsync(f.fileno())
        yield from out

    def append(self, record: Record) -> None:
        """Buffer ``record``; ``sync`` writes it (and forces it to disk if its kind is forced)."""
        raw = record.encode()
        body = msgpack.packb(raw, use_bin_type=True)
        self._buf += _HEAD.pack(len(body), zlib.crc32(body))
        self._buf += body
        self.records_written += 1
        if raw[0] in FORCED:
            self._forced = True
            self.forced_records += 1

    @property
    def buffered(self) -> int:
        """Bytes appended and not yet taken."""
        return len(self._buf)

    def take(self) -> tuple[bytearray, bool]:
        """What is buffered, for ``commit`` (in the worker): its bytes, and whether it must be forced."""
        data, forced = self._buf, self._forced
        self._buf = bytearray()
        self._forced = False
        return data, forced

    def commit(self, data: bytes | bytearray, forced: bool) -> None:
        """Write ``data`` (whole records, from ``take``); fdatasync if ``forced``. Blocks: the server's
        worker thread calls it. On a failure the file is cut back to its last whole record (``WalError``)."""
        if data:
            try:
                write_all(self._fd, data)
            except OSError as e:
                # Cut the torn record off so the log stays readable.
                try:
                    os.ftruncate(self._fd, self.size)
                except OSError:
                    pass
                raise WalError(f"cannot write the log {self.path}: {e.strerror or e}") from e
            self.size += len(data)
        if forced:
            try:
                os.fdatasync(self._fd)
            except OSError as e:
                raise WalError(f"cannot sync the log {self.path}: {e.strerror or e}") from e
            self.syncs += 1

    def sync(self, force: bool = False) -> None:
        """Write buffered records; fdatasync if any of them must be durable (blocking: ``commit(take())``).
        On a failure the batch is kept, whole, for a retry."""
        self.commit(self._buf, self._forced or force)
        self._buf.clear()
        self._forced = False

    @staticmethod
    def encode(records: list[Record]) -> bytes:
        """``records`` framed as the log stores them (a compacted log's content)."""
        blob = bytearray()
        for rec in records:
            body = msgpack.packb(rec.encode(), use_bin_type=True)
            blob += _HEAD.pack(len(body), zlib.crc32(body))
            blob += body
        return bytes(blob)

    def rewrite(self, records: list[Record]) -> None:
        """Replace the log with ``records`` atomically (compaction), after writing what is buffered."""
        self.sync()
        self.replace(self.encode(records))

    def replace(self, blob: bytes) -> None:
        """Make ``blob`` (from ``encode``) the whole log atomically; blocking (the worker may call it)."""
        tmp = self.path.with_suffix(".compact")
        try:
            replace_file(self.path, blob, tmp)
        except OSError as e:
            # The old log is still whole (the rename is the commit point).
            raise WalError(f"cannot compact the log {self.path}: {e.strerror or e}") from e
        os.close(self._fd)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND, 0o600)
        self.size = len(blob)

    def close(self) -> None:
        self.sync()
        os.close(self._fd)

    def abandon(self) -> None:
        """Close without writing what is buffered (after a failed write: none of it was promised)."""
        self._buf.clear()
        os.close(self._fd)
