"""The site's messages and what hangs off them: receipts, mentions, read markers, acknowledgements, search.

``MessageTables`` is a part of ``ChatStore`` (it shares its connection). Messages
are kept in the order of their order key's sortable form (``ordering.keys``),
so SQLite's byte comparison is the global order. The full-text index (SQLite
FTS5, external content over ``messages``) takes stored messages in batches
(``index_for_search``: the server calls it every second and before each search);
searching it is search.py's.
"""
from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from contracts.precedence import Precedence
from ordering.keys import sortable_key

from .labeling import json_of_text
from .protocol import message as message_frame

MESSAGE_SCHEMA = """
CREATE TABLE IF NOT EXISTS messages (msg_id TEXT PRIMARY KEY, n INTEGER NOT NULL UNIQUE, room TEXT NOT NULL,
    origin TEXT NOT NULL, seq INTEGER NOT NULL, user TEXT NOT NULL, text TEXT NOT NULL, sent_at REAL NOT NULL,
    order_json TEXT NOT NULL, order_key BLOB NOT NULL, late INTEGER NOT NULL, delivered_at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS messages_room_order ON messages (room, order_key);
CREATE INDEX IF NOT EXISTS messages_room_n ON messages (room, n);
CREATE TABLE IF NOT EXISTS receipts (msg_id TEXT NOT NULL, site TEXT NOT NULL, PRIMARY KEY (msg_id, site));
CREATE TABLE IF NOT EXISTS mentions (msg_id TEXT NOT NULL, user TEXT NOT NULL, PRIMARY KEY (user, msg_id));
CREATE TABLE IF NOT EXISTS read_markers (user TEXT NOT NULL, room TEXT NOT NULL, order_json TEXT NOT NULL,
    order_key BLOB NOT NULL, n INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (user, room));
CREATE TABLE IF NOT EXISTS acknowledgements (msg_id TEXT NOT NULL, user TEXT NOT NULL, site TEXT NOT NULL,
    at REAL NOT NULL, PRIMARY KEY (msg_id, user, site));
CREATE TABLE IF NOT EXISTS room_activity (room TEXT PRIMARY KEY, last_at REAL NOT NULL, count INTEGER NOT NULL);
CREATE TRIGGER IF NOT EXISTS messages_activity AFTER INSERT ON messages BEGIN
    INSERT INTO room_activity (room, last_at, count) VALUES (new.room, new.sent_at, 1)
    ON CONFLICT(room) DO UPDATE SET last_at = max(last_at, excluded.last_at), count = count + 1;
END;
"""
SEARCH_SCHEMA = """
DROP TRIGGER IF EXISTS messages_fts_insert;
DROP TABLE IF EXISTS messages_fts;
CREATE VIRTUAL TABLE messages_fts USING fts5(text, room, user, content='messages', content_rowid='rowid',
    tokenize='unicode61 remove_diacritics 2', prefix='2 3');
CREATE INDEX IF NOT EXISTS messages_sent ON messages (sent_at);
"""
SEARCH_INDEXED_STATE = "search_indexed"
"""The state key of the last ``messages`` rowid in the full-text index (``MessageTables.index_for_search``)."""
UNREAD_COUNT_MAX = 1000                  # unread and mention counts stop here ("999+")


@dataclass(frozen=True, slots=True)
class StoredMessage:
    msg_id: str
    n: int
    room: str
    origin: str
    seq: int
    user: str
    text: str
    sent_at: float
    order: list[Any]
    late: bool
    reply_to: str = ""                   # the msg_id this message answers
    precedence: Precedence = Precedence.ROUTINE
    mentions: tuple[str, ...] = ()       # users named with @user or @user@site (this site's part)
    repaired: bool = False               # reported missing here, then recovered from another site (issue 18)
    expires_at: float | None = None      # when it expires, Unix seconds (RCM's copy, from the delivery)
    label: str = ""                      # its security label as ``str(Label)`` writes it ("": unlabeled mission)

    def expired(self, now: float) -> bool:
        return self.expires_at is not None and now >= self.expires_at

    def frame(self, now: float | None = None) -> dict[str, Any]:
        """The ``message`` frame of chat protocol v1 (with its extensions when they apply); ``now``: the
        time it is read at, to mark it ``expired`` past its ``expires_at`` (None: as delivered, unmarked)."""
        f = message_frame(msg_id=self.msg_id, room=self.room, origin=self.origin, user=self.user, text=self.text,
                          sent_at=self.sent_at, order=self.order, late=self.late, n=self.n)
        if self.reply_to:
            f["reply_to"] = self.reply_to
        f["precedence"] = self.precedence.value         # always, routine included: one spelling to clients
        if self.mentions:
            f["mentions"] = list(self.mentions)
        if self.repaired:
            f["repaired"] = True
        if self.label:
            f["label"] = json_of_text(self.label)
        if self.expires_at is not None:
            f["expires_at"] = self.expires_at
            if now is not None and self.expired(now):
                f["expired"] = True
        return f


class MessageTables:
    db: sqlite3.Connection
    stored_labels: set[str]     # the distinct labels of the stored messages: read once at start, kept by add_message
    get_state: Callable[..., Any]           # (ChatStore's: the state table's one reader and writer)
    set_state: Callable[[str, Any], None]

    def create_message_tables(self) -> None:
        """Make the message tables; a database of an earlier release gains the new columns and an index."""
        self.db.executescript(MESSAGE_SCHEMA)
        columns = {row[1] for row in self.db.execute("PRAGMA table_info(messages)")}
        for name in ("reply_to", "precedence"):
            if name not in columns:
                self.db.execute(f"ALTER TABLE messages ADD COLUMN {name} TEXT NOT NULL DEFAULT ''")
        if "repaired" not in columns:
            self.db.execute("ALTER TABLE messages ADD COLUMN repaired INTEGER NOT NULL DEFAULT 0")
        if "expires_at" not in columns:
            self.db.execute("ALTER TABLE messages ADD COLUMN expires_at REAL")     # NULL: never expires
        if "label" not in columns:
            self.db.execute("ALTER TABLE messages ADD COLUMN label TEXT NOT NULL DEFAULT ''")   # '': unlabeled
        self.stored_labels = {label for (label,) in self.db.execute("SELECT DISTINCT label FROM messages")}
        indexed = {row[1] for row in self.db.execute("PRAGMA table_info(messages_fts)")}
        if "user" not in indexed:                   # no index yet, or one of an earlier form
            self.db.executescript(SEARCH_SCHEMA)
            self.db.execute("INSERT INTO messages_fts (messages_fts) VALUES ('rebuild')")
            self.db.execute("INSERT OR REPLACE INTO room_activity (room, last_at, count) "
                            "SELECT room, MAX(sent_at), COUNT(*) FROM messages GROUP BY room")
            self.set_state(SEARCH_INDEXED_STATE, self._last_rowid())
        elif self.db.execute("SELECT 1 FROM sqlite_master WHERE type = 'trigger' "
                             "AND name = 'messages_fts_insert'").fetchone():
            # An earlier release indexed each message as it was stored (a trigger): all of them are indexed.
            self.db.execute("DROP TRIGGER messages_fts_insert")
            self.set_state(SEARCH_INDEXED_STATE, self._last_rowid())

    def index_for_search(self) -> int:
        """Add the messages stored since the last call to the full-text index, in one go; how many.

        Messages are indexed in batches rather than each as it is stored: FTS5 writes a new segment of its
        three indexes at every commit that touches it, about half of a stored message's pages when each
        delivery is a transaction of its own (docs/performance.md, "The disk under the fan-out"). The server
        calls it every second and before every search, so a search still sees every message stored before it.
        """
        last, top = int(self.get_state(SEARCH_INDEXED_STATE, 0)), self._last_rowid()
        if top <= last:
            return 0
        n = self.db.execute("INSERT INTO messages_fts (rowid, text, room, user) SELECT rowid, text, room, user "
                            "FROM messages WHERE rowid > ? AND rowid <= ? ORDER BY rowid", (last, top)).rowcount
        self.set_state(SEARCH_INDEXED_STATE, top)
        return n

    def search_index_behind(self) -> bool:
        """Are messages stored that the full-text index lacks (``index_for_search``)?"""
        return self._last_rowid() > int(self.get_state(SEARCH_INDEXED_STATE, 0))

    def _last_rowid(self) -> int:
        return int(self.db.execute("SELECT COALESCE(MAX(rowid), 0) FROM messages").fetchone()[0])

    # --- messages -----------------------------------------------------------------------------
    def has_message(self, msg_id: str) -> bool:
        return self.db.execute("SELECT 1 FROM messages WHERE msg_id = ?", (msg_id,)).fetchone() is not None

    def room_of(self, msg_id: str) -> str | None:
        """The room of message ``msg_id`` (None: not here): the access check's lookup, before the message.

        It reads the first message at or after ``msg_id`` in msg_id order, so a message and its absence take
        the same steps (an index seek, then one row of the table; ``bench/msg_id_timing.py``)."""
        row = self.db.execute("SELECT msg_id, room FROM messages WHERE msg_id >= ? ORDER BY msg_id LIMIT 1",
                              (msg_id,)).fetchone()
        return row[1] if row is not None and row[0] == msg_id else None

    def add_message(self, m: StoredMessage, delivered_at: float) -> None:
        self.db.execute(
            "INSERT INTO messages (msg_id, n, room, origin, seq, user, text, sent_at, order_json, order_key, late, "
            "delivered_at, reply_to, precedence, repaired, expires_at, label) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (m.msg_id, m.n, m.room, m.origin, m.seq, m.user, m.text, m.sent_at, json.dumps(m.order),
             sortable_key(m.order), int(m.late), delivered_at, m.reply_to, m.precedence.value, int(m.repaired),
             m.expires_at, m.label))
        self.stored_labels.add(m.label)     # (one of a rolled-back insert only widens an IN list: harmless)
        if m.mentions:
            self.db.executemany("INSERT OR IGNORE INTO mentions (msg_id, user) VALUES (?, ?)",
                                [(m.msg_id, u) for u in m.mentions])

    COLUMNS = "m.msg_id, m.n, m.room, m.origin, m.seq, m.user, m.text, m.sent_at, m.order_json, m.late, " \
            "m.reply_to, m.precedence, (SELECT group_concat(user, ' ') FROM mentions x WHERE x.msg_id = m.msg_id), " \
            "m.repaired, m.expires_at, m.label"

    @staticmethod
    def from_row(row: tuple[Any, ...]) -> StoredMessage:
        msg_id, n, room, origin, seq, user, text, sent_at, order_json, late, reply_to, precedence, mentioned, \
            repaired, expires_at, label = row
        # Earlier releases stored routine as '' (the column's default for their rows too).
        return StoredMessage(msg_id, n, room, origin, seq, user, text, sent_at, json.loads(order_json), bool(late),
                             reply_to, Precedence(precedence) if precedence else Precedence.ROUTINE,
                             tuple(sorted(mentioned.split())) if mentioned else (), bool(repaired),
                             float(expires_at) if expires_at is not None else None, label or "")

    def message(self, msg_id: str) -> StoredMessage | None:
        row = self.db.execute(f"SELECT {self.COLUMNS} FROM messages m WHERE m.msg_id = ?", (msg_id,)).fetchone()
        return self.from_row(row) if row else None

    def history(self, room: str, limit: int, before: list[Any] | None = None,
                after: list[Any] | None = None) -> tuple[list[StoredMessage], bool]:
        """The last ``limit`` messages of ``room`` in global order before an order key (or the first after
        one, ``after``); and whether there are more that way."""
        if after is not None:
            rows = self.db.execute(f"SELECT {self.COLUMNS} FROM messages m WHERE m.room = ? AND m.order_key > ? "
                                   "ORDER BY m.order_key, m.msg_id LIMIT ?",
                                   (room, sortable_key(after), limit + 1)).fetchall()
            return [self.from_row(r) for r in rows[:limit]], len(rows) > limit
        if before is None:
            rows = self.db.execute(f"SELECT {self.COLUMNS} FROM messages m WHERE m.room = ? "
                                   "ORDER BY m.order_key DESC, m.msg_id DESC LIMIT ?", (room, limit + 1)).fetchall()
        else:
            rows = self.db.execute(f"SELECT {self.COLUMNS} FROM messages m WHERE m.room = ? AND m.order_key < ? "
                                   "ORDER BY m.order_key DESC, m.msg_id DESC LIMIT ?",
                                   (room, sortable_key(before), limit + 1)).fetchall()
        more = len(rows) > limit
        return [self.from_row(r) for r in reversed(rows[:limit])], more

    def since_n(self, rooms: Iterable[str], after_n: int, limit: int) -> tuple[list[StoredMessage], bool]:
        """Messages of ``rooms`` delivered here after local delivery number ``after_n``, in delivery order."""
        rooms = list(rooms)
        if not rooms:
            return [], False
        marks = ",".join("?" * len(rooms))
        rows = self.db.execute(f"SELECT {self.COLUMNS} FROM messages m WHERE m.n > ? AND m.room IN ({marks}) "
                               "ORDER BY m.n LIMIT ?", (after_n, *rooms, limit + 1)).fetchall()
        return [self.from_row(r) for r in rows[:limit]], len(rows) > limit

    def room_activity(self) -> dict[str, float]:
        """Each room with messages here -> the latest ``sent_at`` among them."""
        return {r: t for r, t in self.db.execute("SELECT room, last_at FROM room_activity")}

    # --- receipts ----------------------------------------------------------------------------------
    def add_receipt(self, msg_id: str, site: str) -> bool:
        """Record that ``site`` delivered ``msg_id``; False if it was known."""
        return self.db.execute("INSERT OR IGNORE INTO receipts (msg_id, site) VALUES (?, ?)",
                               (msg_id, site)).rowcount > 0

    def has_receipt(self, msg_id: str, site: str) -> bool:
        return self.db.execute("SELECT 1 FROM receipts WHERE msg_id = ? AND site = ?",
                               (msg_id, site)).fetchone() is not None

    def add_receipts(self, pairs: Iterable[tuple[str, str]]) -> None:
        self.db.executemany("INSERT OR IGNORE INTO receipts (msg_id, site) VALUES (?, ?)", pairs)

    def receipts_of(self, msg_ids: list[str]) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for i in range(0, len(msg_ids), 500):
            chunk = msg_ids[i:i + 500]
            marks = ",".join("?" * len(chunk))
            for msg_id, site in self.db.execute(
                    f"SELECT msg_id, site FROM receipts WHERE msg_id IN ({marks}) ORDER BY site", chunk):
                out.setdefault(msg_id, []).append(site)
        return out

    # --- read markers and unread counts --------------------------------------------------------------
    def read_marker(self, user: str, room: str) -> list[Any] | None:
        row = self.db.execute("SELECT order_json FROM read_markers WHERE user = ? AND room = ?",
                              (user, room)).fetchone()
        return json.loads(row[0]) if row else None

    def mark_read(self, user: str, room: str, order: list[Any], n: int) -> list[Any]:
        """Move the user's marker in ``room`` forward to ``order`` (never back), having seen what was
        delivered here up to ``n``; the marker now."""
        key = sortable_key(order)
        self.db.execute("INSERT INTO read_markers (user, room, order_json, order_key, n) VALUES (?, ?, ?, ?, ?) "
                        "ON CONFLICT(user, room) DO UPDATE SET n = max(read_markers.n, excluded.n), "
                        "order_json = CASE WHEN excluded.order_key > read_markers.order_key "
                        "THEN excluded.order_json ELSE read_markers.order_json END, "
                        "order_key = max(read_markers.order_key, excluded.order_key)",
                        (user, room, json.dumps(order), key, n))
        return self.read_marker(user, room) or order

    def last_order(self, room: str) -> list[Any] | None:
        row = self.db.execute("SELECT order_json FROM messages WHERE room = ? ORDER BY order_key DESC LIMIT 1",
                              (room,)).fetchone()
        return json.loads(row[0]) if row else None

    def labels(self) -> list[str]:
        """The distinct labels of the stored messages (as ``str(Label)`` writes them; "" unlabeled): kept in
        memory, so that a login's unread counts scan no table for them."""
        return sorted(self.stored_labels)

    def unread(self, user: str, rooms: Iterable[str],
               readable: Callable[[str], bool] | None = None) -> tuple[dict[str, int], dict[str, int]]:
        """Messages of others after the user's read marker, and those of them mentioning the user, per room
        (rooms without either left out; counts stop at ``UNREAD_COUNT_MAX``). A late message placed
        before the marker but delivered after it was set counts too: the user has not seen it. ``readable``
        (labeled missions): the stored labels the user may read; the others are not counted."""
        unread: dict[str, int] = {}
        mentions: dict[str, int] = {}
        allowed: list[str] = []
        label_rule = ""
        if readable is not None:
            allowed = [label for label in self.labels() if readable(label)]
            label_rule = f" AND m.label IN ({','.join('?' * len(allowed))})"
        for room in rooms:
            row = self.db.execute("SELECT order_key, n FROM read_markers WHERE user = ? AND room = ?",
                                  (user, room)).fetchone()
            after, seen_n = (bytes(row[0]), int(row[1])) if row else (b"", 0)
            new = "m.room = ? AND m.user != ? AND (m.order_key > ? OR (m.late AND m.n > ?))" + label_rule
            n = self.db.execute(f"SELECT COUNT(*) FROM (SELECT 1 FROM messages m WHERE {new} LIMIT ?)",
                                (room, user, after, seen_n, *allowed, UNREAD_COUNT_MAX)).fetchone()[0]
            if n:
                unread[room] = n
                k = self.db.execute(f"SELECT COUNT(*) FROM (SELECT 1 FROM mentions x JOIN messages m ON "
                                    f"m.msg_id = x.msg_id WHERE x.user = ? AND {new} LIMIT ?)",
                                    (user, room, user, after, seen_n, *allowed, UNREAD_COUNT_MAX)).fetchone()[0]
                if k:
                    mentions[room] = k
        return unread, mentions

    # --- acknowledgements (precedence) ---------------------------------------------------------------
    def add_acknowledgement(self, msg_id: str, user: str, site: str, at: float) -> bool:
        return self.db.execute("INSERT OR IGNORE INTO acknowledgements (msg_id, user, site, at) VALUES (?, ?, ?, ?)",
                               (msg_id, user, site, at)).rowcount > 0

    def acknowledged_at(self, msg_id: str, user: str, site: str) -> float | None:
        """When ``user`` of ``site`` acknowledged ``msg_id`` (None: not known here)."""
        row = self.db.execute("SELECT at FROM acknowledgements WHERE msg_id = ? AND user = ? AND site = ?",
                              (msg_id, user, site)).fetchone()
        return float(row[0]) if row else None

    def acknowledgements_of(self, msg_ids: list[str]) -> dict[str, list[dict[str, Any]]]:
        out: dict[str, list[dict[str, Any]]] = {}
        for i in range(0, len(msg_ids), 500):
            chunk = msg_ids[i:i + 500]
            marks = ",".join("?" * len(chunk))
            for msg_id, user, site, at in self.db.execute(
                    f"SELECT msg_id, user, site, at FROM acknowledgements WHERE msg_id IN ({marks}) ORDER BY at",
                    chunk):
                out.setdefault(msg_id, []).append({"user": user, "site": site, "at": at})
        return out
