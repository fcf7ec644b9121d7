"""The site's chat database: accounts, sessions, memberships, rooms, history (SQLite, WAL).

This module holds the connection, the accounts, rooms and bookkeeping tables;
store_messages.py the messages and what hangs off them (receipts, mentions,
read markers, acknowledgements, the search index).

One file per site, ``data_dir/<site>/chat/chat.db``. The chat server is its
only writer; ``adduser`` may write concurrently (WAL, busy timeout). Calls are
synchronous and short (indexed); the server calls them from the event loop so
that storing a delivery and fanning it out happen in one step with no other
task in between. Searches, whose cost the user chooses, read on connections of
their own in other threads (``open_reader``, search.py). Messages are kept in the order of an order key encoded by
``ordering.keys.sortable_key`` so that SQLite's byte comparison is the global order.
"""
from __future__ import annotations

import errno
import json
import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contracts.precedence import Precedence
from ordering.keys import sortable_key

from .payload import earlier_precedence
from .store_messages import MessageTables

_DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO})
_DISK_SQLITE = frozenset({sqlite3.SQLITE_FULL, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_READONLY, sqlite3.SQLITE_CANTOPEN})


def storage_trouble(e: BaseException) -> str | None:
    """What is wrong with the site's disk when ``e`` says so (full, read-only, failing), else None.

    Such a failure is the machine's, not the request's or the data's: the request may be tried again once
    the disk has room, and a delivery that failed so must be taken again, never quarantined as bad. The
    journal raises ``OSError``; SQLite its own errors, with the result code of the failed call.
    """
    if isinstance(e, OSError) and e.errno in _DISK_ERRNOS:
        return e.strerror or str(e)
    code = getattr(e, "sqlite_errorcode", None)
    if isinstance(e, sqlite3.Error) and isinstance(code, int) and code & 0xFF in _DISK_SQLITE:
        return str(e)
    return None


SCHEMA = """
CREATE TABLE IF NOT EXISTS users (name TEXT PRIMARY KEY, pw_hash TEXT NOT NULL, created_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS sessions (digest TEXT PRIMARY KEY, user TEXT NOT NULL, expires_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS memberships (user TEXT NOT NULL, room TEXT NOT NULL, PRIMARY KEY (user, room));
CREATE TABLE IF NOT EXISTS private_rooms (room TEXT PRIMARY KEY, owner TEXT NOT NULL, members TEXT NOT NULL,
    order_key BLOB NOT NULL, msg_id TEXT NOT NULL, order_json TEXT NOT NULL DEFAULT '[]');
CREATE TABLE IF NOT EXISTS definitions (def_id TEXT PRIMARY KEY, room TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS room_floors (room TEXT PRIMARY KEY, owner TEXT NOT NULL, label TEXT NOT NULL,
    order_key BLOB NOT NULL, msg_id TEXT NOT NULL, order_json TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS held (def_id TEXT NOT NULL, room TEXT NOT NULL, def_key BLOB NOT NULL,
    msg_id TEXT PRIMARY KEY, origin TEXT NOT NULL, seq INTEGER NOT NULL, order_json TEXT NOT NULL,
    payload BLOB NOT NULL, precedence TEXT NOT NULL DEFAULT 'routine', expires_at REAL);
CREATE TABLE IF NOT EXISTS sent (user TEXT NOT NULL, client_id TEXT NOT NULL, msg_id TEXT NOT NULL,
    PRIMARY KEY (user, client_id));
CREATE TABLE IF NOT EXISTS pending (user TEXT NOT NULL, client_id TEXT NOT NULL, at REAL NOT NULL,
    PRIMARY KEY (user, client_id));
CREATE TABLE IF NOT EXISTS state (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS quarantine (rcm_n INTEGER NOT NULL, msg_id TEXT NOT NULL, origin TEXT NOT NULL,
    order_json TEXT NOT NULL, payload BLOB NOT NULL, reason TEXT NOT NULL, at REAL NOT NULL);
"""
QUARANTINE_MAX = 1000          # deliveries kept aside for an engineer to look at; older ones are dropped


ORDER_KEY_FORMAT = 2           # 2: ordering.keys.sortable_key; 1 (no state): the chat server's own earlier form


def _old_key_elements(blob: bytes) -> list[Any]:
    """The order key an earlier release encoded (format 1), back as a list."""
    out: list[Any] = []
    i = 0
    while i < len(blob):
        tag = blob[i]
        if tag == 0x01:
            out.append(int.from_bytes(blob[i + 1:i + 9], "big") - (1 << 63))
            i += 9
        else:                           # 0x02: UTF-8 with NUL escaped as 00 FF, ended by 00 00
            j = i + 1
            raw = bytearray()
            while j < len(blob) and not (blob[j] == 0 and blob[j + 1:j + 2] in (b"\x00", b"")):
                if blob[j] == 0:
                    raw.append(0)
                    j += 2
                else:
                    raw.append(blob[j])
                    j += 1
            out.append(raw.decode("utf-8", "replace"))
            i = j + 2
    return out


@dataclass(frozen=True, slots=True)
class PrivateRoom:
    room: str
    owner: str
    members: frozenset[str]
    order_key: bytes              # the definition's order key, sortable (sortable_key)
    msg_id: str                   # the definition's msg_id: its identity at every site
    order: tuple[Any, ...] = ()             # the definition's order key as RCM gave it (re-sent with the definition)
    label: str = ""               # the room's label (its floor) as ``str(Label)`` writes it; "": the default
    sites: tuple[str, ...] = ()   # the sites hosting a member, where its content goes; (): every cleared site


@dataclass(frozen=True, slots=True)
class RoomFloor:
    """A labeled public room's label (its floor), as the earliest definition in the global order set it."""

    room: str
    owner: str
    label: str                    # as ``str(Label)`` writes it
    order_key: bytes
    msg_id: str
    order: tuple[Any, ...] = ()


@dataclass(frozen=True, slots=True)
class HeldMessage:
    """A private room's message whose definition has not reached this site yet (not shown to anyone)."""

    def_id: str
    room: str
    def_key: bytes
    msg_id: str
    origin: str
    seq: int
    order: list[Any]
    payload: bytes
    precedence: Precedence = Precedence.ROUTINE    # RCM's, from the delivery (the payload has none)
    expires_at: float | None = None                # RCM's too


class StoreError(Exception):
    """The database cannot be opened (damaged, say): the reason, and what the operator can do."""


CHAT_GONE_STATE = "chat_gone"       # the state key of ``ChatStore.chat_gone``


class ChatStore(MessageTables):
    """The site's SQLite database (messages and what hangs off them: store_messages.py)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        # Password hashes, sessions, private rooms: owner only (audit row 15). SQLite gives its -wal and
        # -shm files the database file's mode, so the file is made 0600 before SQLite opens it.
        path.parent.chmod(0o700)
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
        path.chmod(0o600)
        self.path = path
        self.db = sqlite3.connect(str(path), timeout=10.0, isolation_level=None, check_same_thread=False)
        try:
            self._open()
        except sqlite3.DatabaseError as e:
            self.db.close()
            advice = "" if storage_trouble(e) else (
                "; if it is damaged, restore it from a copy or move it aside: the chat server then starts with an "
                "empty database and stores again the messages its journal holds (accounts must be made again: "
                "adduser)")
            raise StoreError(f"cannot open the chat database {path}: {e}{advice}") from None

    def _open(self) -> None:
        """Set the database up: WAL, the schema, and what a database of an earlier release lacks."""
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.executescript(SCHEMA)
        self.create_message_tables()
        columns = {row[1] for row in self.db.execute("PRAGMA table_info(private_rooms)")}
        if "order_json" not in columns:       # a database of an earlier release
            self.db.execute("ALTER TABLE private_rooms ADD COLUMN order_json TEXT NOT NULL DEFAULT '[]'")
        if "label" not in columns:
            self.db.execute("ALTER TABLE private_rooms ADD COLUMN label TEXT NOT NULL DEFAULT ''")
            self.db.execute("ALTER TABLE private_rooms ADD COLUMN sites TEXT NOT NULL DEFAULT '[]'")
        held_columns = {row[1] for row in self.db.execute("PRAGMA table_info(held)")}
        if "precedence" not in held_columns:
            self._add_held_precedence()
        if "expires_at" not in held_columns:
            self.db.execute("ALTER TABLE held ADD COLUMN expires_at REAL")     # NULL: never expires
        if self.get_state("order_key_format", 1) != ORDER_KEY_FORMAT:
            self._migrate_order_keys()

    def _add_held_precedence(self) -> None:
        """A database of an earlier release: its held messages' precedence is the copy their payload carried."""
        self.db.execute("ALTER TABLE held ADD COLUMN precedence TEXT NOT NULL DEFAULT 'routine'")
        for msg_id, payload in self.db.execute("SELECT msg_id, payload FROM held").fetchall():
            precedence = earlier_precedence(bytes(payload))
            if precedence is not Precedence.ROUTINE:
                self.db.execute("UPDATE held SET precedence = ? WHERE msg_id = ?", (precedence.value, msg_id))

    def _migrate_order_keys(self) -> None:
        """Re-encode the stored order keys in ``ordering.keys``' sortable form (earlier releases wrote
        their own: 0x01 + 8-byte offset integers, 0x02 + escaped names)."""
        self.begin()
        try:
            for table, key_col, id_col in (("messages", "order_key", "msg_id"), ("private_rooms", "order_key", "room"),
                                           ("held", "def_key", "msg_id")):
                rows = self.db.execute(f"SELECT {id_col}, {key_col} FROM {table}").fetchall()
                for ident, old in rows:
                    new = sortable_key(_old_key_elements(bytes(old)))
                    self.db.execute(f"UPDATE {table} SET {key_col} = ? WHERE {id_col} = ?", (new, ident))
            self.set_state("order_key_format", ORDER_KEY_FORMAT)
            self.commit()
        except BaseException:
            self.rollback()
            raise

    def open_reader(self) -> sqlite3.Connection:
        """A read-only connection to this database, for a thread of its own (search.py): in WAL mode it
        reads a consistent snapshot while the server's connection keeps writing."""
        db = sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=ro", uri=True, timeout=10.0,
                             isolation_level=None, check_same_thread=False)
        db.execute("PRAGMA query_only=1")
        return db

    def close(self) -> None:
        self.db.close()

    # --- transactions -------------------------------------------------------------------------
    def begin(self) -> None:
        self.db.execute("BEGIN IMMEDIATE")

    def commit(self) -> None:
        self.db.execute("COMMIT")

    def rollback(self) -> None:
        if self.db.in_transaction:
            self.db.execute("ROLLBACK")

    def checkpoint_elsewhere(self) -> None:
        """No automatic checkpoint in this connection's commits: the server runs them in a thread
        (checkpoints.py). Tools that open the database alone (adduser) keep SQLite's."""
        self.db.execute("PRAGMA wal_autocheckpoint=0")

    @property
    def changes(self) -> int:
        """Rows written through this connection since it opened (a checkpoint is due when it moved)."""
        return self.db.total_changes

    # --- state --------------------------------------------------------------------------------
    def get_state(self, key: str, default: Any = None) -> Any:
        row = self.db.execute("SELECT value FROM state WHERE key = ?", (key,)).fetchone()
        return json.loads(row[0]) if row else default

    def set_state(self, key: str, value: Any) -> None:
        self.db.execute("INSERT INTO state (key, value) VALUES (?, ?) "
                        "ON CONFLICT(key) DO UPDATE SET value = excluded.value", (key, json.dumps(value)))

    def chat_gone(self) -> dict[str, int]:
        """The peers whose chat server left its will here with no roster since, and the RCM seq of each will
        (``StoreChatGone``)."""
        sites = self.get_state(CHAT_GONE_STATE, {})
        return ({s: n for s, n in sites.items() if isinstance(s, str) and type(n) is int}
                if isinstance(sites, dict) else {})

    # --- accounts -----------------------------------------------------------------------------
    def add_user(self, name: str, pw_hash: str, replace: bool = False) -> bool:
        """Create (or with ``replace``, re-password) a user; False if it exists and not replace."""
        if replace:
            self.db.execute("INSERT INTO users (name, pw_hash, created_at) VALUES (?, ?, ?) "
                            "ON CONFLICT(name) DO UPDATE SET pw_hash = excluded.pw_hash",
                            (name, pw_hash, time.time()))
            self.delete_sessions_of(name)       # a new password ends the sessions the old one opened
            return True
        try:
            self.db.execute("INSERT INTO users (name, pw_hash, created_at) VALUES (?, ?, ?)",
                            (name, pw_hash, time.time()))
        except sqlite3.IntegrityError:
            return False
        return True

    def users(self) -> list[str]:
        """Every account of the site, by name."""
        return [n for (n,) in self.db.execute("SELECT name FROM users ORDER BY name")]

    def password_hash(self, name: str) -> str | None:
        row = self.db.execute("SELECT pw_hash FROM users WHERE name = ?", (name,)).fetchone()
        return row[0] if row else None

    def add_session(self, digest: str, user: str, expires_at: float) -> None:
        self.db.execute("INSERT INTO sessions (digest, user, expires_at) VALUES (?, ?, ?)", (digest, user, expires_at))

    def session_user(self, digest: str, now: float) -> str | None:
        row = self.db.execute("SELECT user, expires_at FROM sessions WHERE digest = ?", (digest,)).fetchone()
        if row is None or row[1] < now:
            return None
        return str(row[0])

    def delete_session(self, digest: str) -> None:
        self.db.execute("DELETE FROM sessions WHERE digest = ?", (digest,))

    def delete_sessions_of(self, user: str) -> int:
        """Revoke every session token of ``user``; how many there were."""
        return self.db.execute("DELETE FROM sessions WHERE user = ?", (user,)).rowcount

    def expire_sessions(self, now: float) -> None:
        self.db.execute("DELETE FROM sessions WHERE expires_at < ?", (now,))

    # --- memberships --------------------------------------------------------------------------
    def all_memberships(self) -> list[tuple[str, str]]:
        return list(self.db.execute("SELECT user, room FROM memberships"))

    def add_membership(self, user: str, room: str) -> None:
        self.db.execute("INSERT OR IGNORE INTO memberships (user, room) VALUES (?, ?)", (user, room))

    def remove_membership(self, user: str, room: str) -> None:
        self.db.execute("DELETE FROM memberships WHERE user = ? AND room = ?", (user, room))

    # --- private rooms ------------------------------------------------------------------------
    def private_rooms(self) -> dict[str, PrivateRoom]:
        out = {}
        for room, owner, members, key, msg_id, order, label, sites in self.db.execute(
                "SELECT room, owner, members, order_key, msg_id, order_json, label, sites FROM private_rooms"):
            out[room] = PrivateRoom(room, owner, frozenset(json.loads(members)), bytes(key), msg_id,
                                    tuple(json.loads(order)), label, tuple(json.loads(sites)))
        return out

    def room_floors(self) -> dict[str, RoomFloor]:
        """The labeled public rooms' labels."""
        return {room: RoomFloor(room, owner, label, bytes(key), msg_id, tuple(json.loads(order)))
                for room, owner, label, key, msg_id, order in self.db.execute(
                    "SELECT room, owner, label, order_key, msg_id, order_json FROM room_floors")}

    def put_room_floor(self, f: RoomFloor) -> None:
        self.db.execute("INSERT OR REPLACE INTO room_floors (room, owner, label, order_key, msg_id, order_json) "
                        "VALUES (?, ?, ?, ?, ?, ?)", (f.room, f.owner, f.label, f.order_key, f.msg_id,
                                                      json.dumps(list(f.order))))

    def put_private_room(self, pr: PrivateRoom) -> None:
        self.db.execute("INSERT INTO private_rooms (room, owner, members, order_key, msg_id, order_json, label, "
                        "sites) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
                        "ON CONFLICT(room) DO UPDATE SET owner = excluded.owner, members = excluded.members, "
                        "order_key = excluded.order_key, msg_id = excluded.msg_id, order_json = excluded.order_json, "
                        "label = excluded.label, sites = excluded.sites",
                        (pr.room, pr.owner, json.dumps(sorted(pr.members)), pr.order_key, pr.msg_id,
                         json.dumps(list(pr.order)), pr.label, json.dumps(list(pr.sites))))

    def known_definitions(self) -> dict[str, str]:
        """Every definition id seen here (applied, superseded or losing) -> its room."""
        return dict(self.db.execute("SELECT def_id, room FROM definitions"))

    def add_definition(self, def_id: str, room: str) -> None:
        self.db.execute("INSERT OR IGNORE INTO definitions (def_id, room) VALUES (?, ?)", (def_id, room))

    # --- messages held for a definition -------------------------------------------------------------
    def hold(self, h: HeldMessage, most: int) -> str | None:
        """Keep a message until its room's definition arrives, at most ``most`` of them: the msg_id of
        the oldest, dropped to make room, if any."""
        self.db.execute(
            "INSERT OR IGNORE INTO held (def_id, room, def_key, msg_id, origin, seq, order_json, payload, precedence, "
            "expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (h.def_id, h.room, h.def_key, h.msg_id, h.origin, h.seq, json.dumps(h.order), h.payload,
             h.precedence.value, h.expires_at))
        if self.held_count() <= most:
            return None
        row = self.db.execute("SELECT msg_id FROM held ORDER BY rowid LIMIT 1").fetchone()
        self.release(row[0])
        return str(row[0])

    def held(self, room: str | None = None) -> list[HeldMessage]:
        """Held messages (of ``room``), in the order they were held."""
        sql = "SELECT def_id, room, def_key, msg_id, origin, seq, order_json, payload, precedence, expires_at FROM held"
        rows = self.db.execute(sql + (" WHERE room = ? ORDER BY rowid" if room else " ORDER BY rowid"),
                               (room,) if room else ()).fetchall()
        return [HeldMessage(d, r, bytes(k), m, o, s, json.loads(oj), bytes(p), Precedence(pr),
                            float(x) if x is not None else None)
                for d, r, k, m, o, s, oj, p, pr, x in rows]

    def release(self, msg_id: str) -> None:
        self.db.execute("DELETE FROM held WHERE msg_id = ?", (msg_id,))

    def held_count(self) -> int:
        return int(self.db.execute("SELECT COUNT(*) FROM held").fetchone()[0])

    # --- idempotent sends ----------------------------------------------------------------------
    def sent_msg_id(self, user: str, client_id: str) -> str | None:
        row = self.db.execute("SELECT msg_id FROM sent WHERE user = ? AND client_id = ?", (user, client_id)).fetchone()
        return row[0] if row else None

    def record_sent(self, user: str, client_id: str, msg_id: str) -> None:
        self.db.execute("INSERT OR IGNORE INTO sent (user, client_id, msg_id) VALUES (?, ?, ?)",
                        (user, client_id, msg_id))

    # --- deliveries that could not be applied --------------------------------------------------------
    def quarantine(self, rcm_n: int, msg_id: str, origin: str, order_json: str, payload: bytes, reason: str,
                   at: float) -> None:
        """Keep a delivery aside (at most ``QUARANTINE_MAX``, the newest)."""
        self.db.execute("INSERT INTO quarantine (rcm_n, msg_id, origin, order_json, payload, reason, at) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?)", (rcm_n, msg_id, origin, order_json, payload, reason, at))
        self.db.execute("DELETE FROM quarantine WHERE rowid <= (SELECT MAX(rowid) FROM quarantine) - ?",
                        (QUARANTINE_MAX,))

    def quarantined(self) -> list[tuple[str, str, str]]:
        """(msg_id, origin, reason) of the deliveries kept aside, oldest first."""
        return list(self.db.execute("SELECT msg_id, origin, reason FROM quarantine ORDER BY rowid"))

    # --- sends whose fate RCM has not told us yet ------------------------------------------------
    def add_pending(self, user: str, client_id: str, at: float) -> None:
        """A ``say`` is about to be handed to RCM (kept until RCM's answer or its delivery is known)."""
        self.db.execute("INSERT OR REPLACE INTO pending (user, client_id, at) VALUES (?, ?, ?)",
                        (user, client_id, at))

    def remove_pending(self, user: str, client_id: str) -> None:
        self.db.execute("DELETE FROM pending WHERE user = ? AND client_id = ?", (user, client_id))

    def is_pending(self, user: str, client_id: str) -> bool:
        return self.db.execute("SELECT 1 FROM pending WHERE user = ? AND client_id = ?",
                               (user, client_id)).fetchone() is not None

    def pending_before(self, at: float) -> list[tuple[str, str]]:
        return [(u, c) for u, c in self.db.execute("SELECT user, client_id FROM pending WHERE at < ?", (at,))]

    def pending_at(self, user: str, at: float) -> list[str]:
        """The client_ids of ``user``'s pending says stored with exactly ``at`` (their sent_at: payload_arrays.py)."""
        return [c for (c,) in self.db.execute("SELECT client_id FROM pending WHERE user = ? AND at = ?", (user, at))]
