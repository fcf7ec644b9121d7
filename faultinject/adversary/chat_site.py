"""The chat site ``chat_probe`` attacks, and what surrounds it: its RCM, its clients' connections, SQLite's counters.

* ``LoopbackRcm``: the site's RCM as the chat server codes against it (``rcm_port.RcmPort``): every send is
  accepted and delivered back here, in order, numbered by the probe; the probe hands the site a hostile
  peer's deliveries and RCM events itself.
* ``Transport``: a client connection's transport (``sessions.Session`` writes WebSocket frames to it):
  the honest user's frames are kept and read back, a hostile connection's only checked for ``error``
  and ``internal``.
* ``SqliteWork``: the work of the site's SQLite connections, read from SQLite itself: pages touched
  (``sqlite3_db_status``), and for searches, through ``SearchReader``, the VM steps their progress
  handler (search.py's budget) sees.
* ``history_template``: a site database with the two accounts and a history of the hostile world's
  rooms (from site C), built once per process and size and copied for every fresh site.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import json
import multiprocessing.util
import os
import random
import shutil
import sqlite3
import struct
import tempfile
from collections import deque
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from chat_server.accounts import hash_password
from chat_server.store import ChatStore
from chat_server.store_messages import StoredMessage
from contracts.precedence import DEFAULT, Precedence, rank
from contracts.status import LinkStatus
from rcm.client import Accepted, Delivery, Latest

from .chat_requests import ROOMS, WORDS
from .measure import START, Calls

SITE, PEERS = "A", ("B", "C")
HOSTILE, HONEST, HONEST_ROOM = "mallory", "alice", "ops"
PASSWORD = "correct horse"                  # mallory's (the hostile user tries it for every name)
HONEST_PASSWORD = "battery staple"
HISTORY = 2000                  # messages in the site's history before the attack
CHAT = {"kdf_n": 1024, "history_on_join": 20, "history_max": 100, "resume_max": 100, "rooms_page": 50,
        "max_rooms_per_user": 20, "max_rooms": 300, "max_members": 50, "max_sessions_per_user": 16}
"""The site's ``[chat]`` table: small caps, so that a cap's worth of work fits the probe's budgets."""


class LoopbackRcm:
    """The site's RCM as the chat server sees it: every send accepted, delivered back here in order."""

    incarnation = 1

    def __init__(self, site: str, peers: tuple[str, ...], clock: int) -> None:
        self.site = site
        self.statuses = {p: LinkStatus.CONNECTED.value for p in peers}
        self.via: dict[str, str | None] = {p: None for p in peers}
        self.seq = 0
        self.clock = clock                      # the order clock (Lamport timestamps)
        self.pending: deque[Delivery] = deque()     # (numbered by the probe when delivered)
        self.latest: deque[Latest] = deque()        # position reports published, given back by the probe
        self.version = 0
        self.will_left: tuple[bytes, Any] | None = None     # the chat server's will (``will``)

    async def send(self, payload: bytes, dests: Any = None, *, precedence: str = DEFAULT,
                   expires_at: float | None = None, within: bool | tuple[str, ...] = True) -> Accepted:
        rank(precedence)            # as RcmClient.send: a ValueError for anything but the four levels
        self.seq += 1
        self.clock += 1
        order = [self.clock, self.site]
        self.pending.append(Delivery(0, self.site, self.seq, f"{self.site}:{self.seq}", order, False, payload,
                                     precedence))
        return Accepted(f"{self.site}:{self.seq}", self.seq, order, ())

    async def publish(self, key: bytes, payload: bytes, *, expires_at: float) -> None:
        self.version += 1
        self.latest.append(Latest(self.site, bytes(key), self.version, expires_at, bytes(payload), 0))

    async def will(self, payload: bytes | None, dests: Any = None) -> bool:
        """Kept, as RCM keeps it; this RCM never outlives its chat server, so it is never sent."""
        self.will_left = (bytes(payload), dests) if payload is not None else None
        return True

    async def events(self) -> AsyncIterator[Any]:
        """(The probe hands the site its deliveries and events itself.)"""
        return
        yield

    def backlog(self) -> int:
        return 0

    def oldest_request(self) -> int | None:
        return None                 # every send is answered at once

    async def ack(self, n: int) -> None:
        return None

    async def stats(self) -> dict[str, Any]:
        return {"site": self.site, "peers": {p: {"status": s, "last_refusal": ""} for p, s in self.statuses.items()}}

    async def close(self) -> None:
        return None


class Transport:
    """A client connection's transport: what the server writes, kept (``keep``) or only checked."""

    def __init__(self, keep: bool) -> None:
        self.keep = keep
        self.data: list[bytes] = []
        self.errors = 0             # error frames
        self.internal = 0           # ``internal`` error frames: an exception reached the catch-all
        self.token = ""             # the session token of the last ``welcome``

    def write(self, data: bytes) -> None:
        if b'"type":"error"' in data:
            self.errors += data.count(b'"type":"error"')
            self.internal += data.count(b'"code":"internal"')
        if self.keep:
            self.data.append(data)
        elif b'"type":"welcome"' in data:
            self.token = next((f.get("session") or "" for f in ws_frames(data) if f.get("type") == "welcome"), "")

    def is_closing(self) -> bool:
        return False

    def get_write_buffer_size(self) -> int:
        return 0

    def abort(self) -> None:
        return None

    def frames(self) -> list[dict[str, Any]]:
        """The frames written since the last call."""
        data, self.data = b"".join(self.data), []
        return ws_frames(data)


def ws_frames(data: bytes) -> list[dict[str, Any]]:
    """The frames in ``data`` (WebSocket text frames, as ``sessions.ws_text_frame`` writes them)."""
    out, i = [], 0
    while i < len(data):
        n = data[i + 1] & 0x7F
        i += 2
        if n == 126:
            n, i = struct.unpack("!H", data[i:i + 2])[0], i + 2
        elif n == 127:
            n, i = struct.unpack("!Q", data[i:i + 8])[0], i + 8
        out.append(json.loads(data[i:i + n]))
        i += n
    return out


class SqliteWork:
    """Pages each of the site's SQLite connections touched, read from SQLite itself (``sqlite3_db_status``:
    pager cache hits and misses); and the steps and thread time of searches."""

    _lib: Any = None

    def __init__(self) -> None:
        if SqliteWork._lib is None:
            SqliteWork._lib = ctypes.CDLL(ctypes.util.find_library("sqlite3") or "libsqlite3.so.0")
        self.handles: list[int] = []
        self.searches = 0
        self.search_steps = 0
        self.search_seconds = 0.0
        self.search_calls = Calls()

    def watch(self, db: sqlite3.Connection) -> None:
        """Count ``db``'s pages (its ``sqlite3 *``, after the object header: checked by its file name)."""
        handle = ctypes.c_void_p.from_address(id(db) + object.__basicsize__).value or 0
        lib = self._lib
        lib.sqlite3_db_filename.restype = ctypes.c_char_p
        lib.sqlite3_db_filename.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        name = lib.sqlite3_db_filename(handle, b"main")
        path = db.execute("PRAGMA database_list").fetchone()[2]
        if name is None or os.path.realpath(name.decode()) != os.path.realpath(path):
            raise RuntimeError("cannot read SQLite's counters of this connection (another Python build?)")
        self.pages()
        self.handles.append(handle)

    def pages(self) -> int:
        """Pages touched since the last call, on every connection watched."""
        cur, high = ctypes.c_int(), ctypes.c_int()
        total = 0
        for h in self.handles:
            for op in (7, 8):               # SQLITE_DBSTATUS_CACHE_HIT, _CACHE_MISS (reset on reading)
                self._lib.sqlite3_db_status(ctypes.c_void_p(h), op, ctypes.byref(cur), ctypes.byref(high), 1)
                total += cur.value
        return total

    def take_search(self) -> tuple[int, int, float, int]:
        """Searches run since the last call, their VM steps, their threads' CPU seconds and Python calls."""
        out = (self.searches, self.search_steps, self.search_seconds, self.search_calls.n)
        self.searches, self.search_steps, self.search_seconds, self.search_calls.n = 0, 0, 0.0, 0
        return out


class SearchReader:
    """A search connection whose progress handler (search.py's budget check) also counts the VM steps."""

    def __init__(self, db: sqlite3.Connection, work: SqliteWork) -> None:
        self._db = db
        self._work = work

    def set_progress_handler(self, handler: Any, n: int) -> None:
        if handler is None:
            self._db.set_progress_handler(None, 0)
            return
        work = self._work

        def counted() -> int:
            work.search_steps += n
            return int(handler())
        self._db.set_progress_handler(counted, n)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)


# ==================================================================================================
# the site's history, built once per process and size
# ==================================================================================================
_TEMPLATES: dict[int, Path] = {}


def history_template(history: int) -> Path:
    """A site database with the two accounts and ``history`` messages of the hostile world's rooms (from C)."""
    if history in _TEMPLATES and _TEMPLATES[history].exists():
        return _TEMPLATES[history]
    where = tempfile.mkdtemp(prefix="chatprobe-db-", dir=scratch_dir())
    # removed when the process ends, a bench's worker processes too (they skip atexit, not this)
    multiprocessing.util.Finalize(None, shutil.rmtree, args=(where, True), exitpriority=0)
    path = Path(where) / "chat.db"
    store = ChatStore(path)
    store.add_user(HOSTILE, hash_password(PASSWORD, CHAT["kdf_n"]))
    store.add_user(HONEST, hash_password(HONEST_PASSWORD, CHAT["kdf_n"]))
    rng = random.Random(history)
    store.begin()
    for i in range(1, history + 1):
        text = " ".join(WORDS[min(int(rng.paretovariate(1.2)) - 1, len(WORDS) - 1)] for _ in range(rng.randint(4, 16)))
        urgent = Precedence.FLASH if i % 20 == 0 else Precedence.ROUTINE     # (something to acknowledge)
        store.add_message(StoredMessage(f"C:{i}", i, rng.choice(ROOMS[:6]), "C", i, rng.choice(("bob", "carol")),
                                        text, START - history + i, [i, "C"], False, precedence=urgent),
                          START - history + i)
    store.set_state("journal_n", history)
    store.commit()
    store.close()
    _TEMPLATES[history] = path
    return path


def scratch_dir() -> str | None:
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
