"""The small amount of RCM state that must survive a restart.

Without it a restarted server would reuse message sequence numbers, so two
different messages would share a ``msg_id`` ("A:17"). The server keeps, in
``data_dir/<site>/rcm/state.json``: its incarnation (one more at every start)
and a *reserved* message sequence number. Sequence numbers are handed out
below the reservation; when they reach it the reservation moves forward by a
block, written atomically (temp file, fsync, rename) before the number is
used. A crash therefore skips at most one block of numbers and never reuses
one. Buffers, frontiers and deliveries are in the write-ahead log (``rcm.durability.wal``).
With the log on, the server writes the moved reservation in its log worker,
not in its event loop (``advance`` then ``write``, ``rcm.server.logworker``),
and holds the batch that handed out the number until that write completed.

Everything RCM writes under ``data_dir/<site>/rcm`` is private: the directory
is 0700 and its files 0600 whatever the umask (the client socket keeps 0660,
reachable through the directory by its owner only).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from rcm.durability.wal import private_dir, replace_file

BLOCK = 10_000


def _new_log_id() -> int:
    return int.from_bytes(os.urandom(6), "big") or 1


class StateError(Exception):
    pass


@dataclass
class DurableState:
    path: Path
    incarnation: int
    reserved: int          # every msg seq <= reserved may be handed out by this incarnation
    first_seq: int
    log_id: int = 0        # names the delivery numbering; new only when the log is lost

    @classmethod
    def open(cls, directory: Path) -> DurableState:
        private_dir(directory)
        path = directory / "state.json"
        incarnation, reserved, log_id = 0, 0, 0
        if path.exists():
            try:
                raw = json.loads(path.read_text())
                incarnation, reserved = int(raw["incarnation"]), int(raw["reserved"])
                log_id = int(raw.get("log_id", 0))
            except (ValueError, KeyError, TypeError) as e:
                raise StateError(f"{path}: unreadable RCM state ({e}); "
                                 "move it aside to start this site afresh") from None
        if not log_id or not (directory / "wal.log").exists():
            log_id = _new_log_id()
        st = cls(path, incarnation + 1, reserved + BLOCK, reserved + 1, log_id)
        st._write()
        return st

    def new_log(self) -> None:
        """A new ``log_id``, written now: the log was lost (set aside as damaged), so is the stream it named."""
        self.log_id = _new_log_id()
        self._write()

    def reserve_through(self, seq: int) -> None:
        """Make sure ``seq`` is covered by the durable reservation (blocking: ``advance``, then ``write``)."""
        data = self.advance(seq)
        if data is not None:
            self.write(data)

    def advance(self, seq: int) -> bytes | None:
        """Move the reservation past ``seq`` if it is not: the file's new content, for ``write`` before any
        number above the old reservation is used (None: nothing to write)."""
        if seq <= self.reserved:
            return None
        while self.reserved < seq:
            self.reserved += BLOCK
        return self._content()

    def write(self, data: bytes) -> None:
        """Write the state file atomically and durably (blocking; ``OSError`` leaves the old one whole)."""
        replace_file(self.path, data, self.path.with_suffix(".tmp"))

    def _write(self) -> None:
        self.write(self._content())

    def _content(self) -> bytes:
        return json.dumps({"incarnation": self.incarnation, "reserved": self.reserved,
                           "log_id": self.log_id}).encode()

