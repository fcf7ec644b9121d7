"""One server per site directory: an exclusive lock held for the process's life.

A site's RCM server reads and repairs its write-ahead log at start (a torn tail is cut off, a damaged log set
aside) and bumps ``state.json``; a chat server appends to its journal. A second server started on the same
directory (by hand beside the supervisor's, or from a copy of the mission file with other ports) would do all of
that under the running one's feet: cut a record the running server is writing, set its live log aside, append
to the same files. So each server takes ``<dir>/lock`` first (``flock``, released by the kernel however the
process ends, so a crash never leaves a stale lock) and a second one stops with a line naming the holder.

``flock`` locks belong to an open file, so two locks in one process conflict too. A process holds one lock per
directory: taking it again (a test that starts a site's server anew in-process, abandoning the old object)
hands the lock to the new holder (``_held``).
"""
from __future__ import annotations

import fcntl
import os
from pathlib import Path

LOCK_NAME = "lock"

_held: dict[Path, int] = {}      # directory -> the descriptor holding its lock, in this process


class DirLocked(Exception):
    """Another process holds the directory's lock."""


def lock_dir(directory: Path, server: str) -> Path:
    """Take ``directory``'s lock for this process (the directory must exist); the lock file's path.

    ``server`` names the server in the error (``"site A's RCM server"``). Raises ``DirLocked`` when another
    process holds it, ``OSError`` when the lock file cannot be opened.
    """
    directory = directory.resolve()
    path = directory / LOCK_NAME
    old = _held.pop(directory, None)
    if old is not None:
        os.close(old)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        pid = _pid_in(fd)
        os.close(fd)
        who = f"process {pid}" if pid else "another process"
        raise DirLocked(f"{server} already runs from {directory} ({who} holds {path}); stop it first: "
                        "two servers on one directory would write the same files") from None
    except OSError:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    _held[directory] = fd
    return path


def holder(directory: Path) -> str | None:
    """Who holds ``directory``'s lock: None when no process does (or there is no lock file), else the holder's
    pid as its file has it ("" if unreadable). Takes and releases the lock to find out; for a tool that must not
    touch a running site's files (``deploy lab --fresh``)."""
    path = directory / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return _pid_in(fd)
    finally:
        os.close(fd)            # (releases the lock if it was taken here)
    return None


def _pid_in(fd: int) -> str:
    """The holder's pid as its lock file has it ("" if it is not a number yet: the holder is writing it)."""
    pid = os.pread(fd, 32, 0).decode(errors="replace").strip()
    return pid if pid.isdigit() else ""


def unlock_dir(directory: Path) -> None:
    """Release ``directory``'s lock if this process holds it (a server's stop)."""
    fd = _held.pop(directory.resolve(), None)
    if fd is not None:
        os.close(fd)
