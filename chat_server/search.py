"""Full-text search of a site's history: the query language, what one search may cost, where it runs.

Theory of operation
-------------------
The index is SQLite FTS5 over ``messages`` (store_messages.py keeps it up to
date). ``fts_query`` builds the MATCH expression itself from the user's words,
"phrases" and prefixes (``word*``), so no FTS5 syntax reaches it unquoted.

A search's cost is bounded three times (security finding 3, second round):

* At parse time (``query_terms``, ``QueryError``): a prefix has at least
  ``MIN_PREFIX`` characters (the index keeps prefixes of 2 and 3 ready; a
  1-character prefix makes FTS5 merge the postings of every word it begins,
  the whole history, before the first row: 130-260 ms each at 200,000
  messages, and "c* g* t* ..." multiplied it); at most ``MAX_TERMS`` terms and
  ``MAX_WORDS`` words; duplicate terms collapsed.
* While it runs (``budgeted``): a ``SearchBudget`` of SQLite VM steps and
  seconds, checked every ``PROGRESS_EVERY`` steps by the progress handler,
  ends it with ``SearchTooBroad``; never a partial answer. The clock is needed
  besides the steps: FTS5 merges a long prefix's words, or walks a word's
  whole history when the other terms never occur with it, in few VM steps.
* Where it runs (``SearchPool``): in threads of its own (one per core beyond
  the first, at most two) on read-only connections (WAL: readers never block
  the writer), at most ``SEARCHES_PER_USER`` per user and ``SEARCHES_PER_SITE``
  per site running or waiting (beyond: ``try_again``; the waiting ones in
  order), so a slow search never delays the event loop: other users' says,
  ``/health``, deliveries.

Ranking: the best among the newest ``RANK_WINDOW`` readable matches, found
among the newest ``SCAN_WINDOW`` matches of the words (room, user and time
narrow the index itself): FTS5 walks the index newest first and stops, so a
search costs the same at a million messages as at ten thousand.
"""
from __future__ import annotations

import asyncio
import math
import os
import queue
import re
import sqlite3
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from .protocol import ErrorCode as E
from .protocol import Refusal
from .store_messages import MessageTables, StoredMessage

MIN_PREFIX = 2                  # characters before a '*' (store_messages.SEARCH_SCHEMA: prefix='2 3')
MAX_TERMS = 8                   # words, prefixes and phrases of one query, duplicates collapsed ...
MAX_WORDS = 16                  # ... and words in all (each word of a phrase counts)
SEARCH_STEPS = 10_000_000       # SQLite VM steps one search may take (a full scan window: about 750,000)
SEARCH_SECONDS = 2.0            # ... and seconds ([chat] search_budget), whichever runs out first
PROGRESS_EVERY = 1000           # VM steps between two checks of the budget (a few ms at most)
RANK_WINDOW = 2000              # a search ranks the most recent readable matches, at most this many ...
SCAN_WINDOW = 20_000            # ... found among at most this many of the newest index matches
SEARCH_THREADS = max(1, min(2, (os.cpu_count() or 2) - 1))   # searching threads: a core is left to the event
                                # loop and RCM (2 cores, searches busy: a cheap request's p99 22-28 ms with
                                # one thread, 44-53 ms with two; bench/search.py)
SEARCHES_PER_USER = 1           # searches of one user running or waiting; beyond: try_again
SEARCHES_PER_SITE = 8           # ... of everybody at the site
MARK_ON, MARK_OFF = "\x02", "\x03"      # FTS5 highlight markers; never in a message (control characters)
_TERM = re.compile(r'"([^"]*)"|(\S+)')
_WORD = re.compile(r"\w+", re.UNICODE)

Hit = tuple[StoredMessage, list[list[int]]]      # a message and the [start, end) spans that matched


class QueryError(ValueError):
    """A search query breaks a rule that bounds its cost; the message names the rule."""


class SearchStopped(Exception):
    """A search was ended inside SQLite before its answer: the server is stopping."""


class SearchTooBroad(SearchStopped):
    """A search ran past its ``SearchBudget``."""


@dataclass(frozen=True, slots=True)
class SearchBudget:
    """What one search may spend inside SQLite, whichever runs out first."""

    steps: int = SEARCH_STEPS
    seconds: float = SEARCH_SECONDS


# --- the query language ---------------------------------------------------------------------------
def query_terms(query: str) -> list[str]:
    """The user's words as FTS5 terms: "quoted phrases" stay phrases, a word ending in * is a prefix,
    everything else a plain word; duplicates collapsed. ``QueryError`` names a broken rule."""
    terms: list[str] = []
    seen: set[str] = set()
    words = 0
    for phrase, word in _TERM.findall(query):
        found: list[tuple[str, int]] = []          # (term, words in it)
        if phrase:
            ws = _WORD.findall(phrase)
            if ws:
                found.append(('"' + " ".join(ws) + '"', len(ws)))
        else:
            ws = _WORD.findall(word)
            found += [(f'"{w}"', 1) for w in ws]
            if word.endswith("*") and ws:
                if len(ws[-1]) < MIN_PREFIX:
                    raise QueryError(f"the prefix {ws[-1] + '*'!r} is too short: a prefix needs at least "
                                     f"{MIN_PREFIX} characters before the '*'")
                found[-1] = (found[-1][0] + "*", 1)
        for term, n in found:
            if term.casefold() not in seen:        # FTS5 folds case: "Grid grid" is one term
                seen.add(term.casefold())
                terms.append(term)
                words += n
    if len(terms) > MAX_TERMS:
        raise QueryError(f"{len(terms)} terms, at most {MAX_TERMS} (words, prefixes and phrases): narrow it")
    if words > MAX_WORDS:
        raise QueryError(f"{words} words, at most {MAX_WORDS} (each word of a phrase counts): narrow it")
    return terms


def fts_query(query: str, room: str | None = None, user: str | None = None) -> str | None:
    """The user's words (``query_terms``) as a safe FTS5 MATCH expression on the text column; every term
    must match. ``room`` and ``user`` narrow it in the index itself (their words as a phrase; the caller
    checks the exact name). None: nothing to look for. ``QueryError`` names a broken rule."""
    terms = query_terms(query)
    if not terms:
        return None
    match = f"text : ({' '.join(terms)})"
    for column, name in (("room", room), ("user", user)):
        words = _WORD.findall(name or "")
        if words:
            match += f' AND {column} : "{" ".join(words)}"'
    return match


def highlights(text: str, marked: str) -> list[list[int]]:
    """The [start, end) code-point spans of ``text`` that FTS5 marked in ``marked`` (``text`` with the
    markers inserted; a character of the text itself is never taken for a marker)."""
    spans: list[list[int]] = []
    i = start = 0
    for ch in marked:
        if i < len(text) and ch == text[i]:
            i += 1
        elif ch == MARK_ON:
            start = i
        elif ch == MARK_OFF:
            spans.append([start, i])
    return spans


# --- one search, within its budget -------------------------------------------------------------------
@contextmanager
def budgeted(db: sqlite3.Connection, budget: SearchBudget | None, stop: threading.Event | None = None,
             clock: Callable[[], float] = time.monotonic) -> Iterator[None]:
    """Run the block's statements within ``budget`` (none: unbounded) and until ``stop`` is set: SQLite's
    progress handler ends the running one, and ``SearchTooBroad`` or ``SearchStopped`` says why."""
    if budget is None and stop is None:
        yield
        return
    steps = budget.steps if budget is not None else math.inf
    seconds = budget.seconds if budget is not None else math.inf
    deadline = clock() + seconds
    every = int(min(PROGRESS_EVERY, max(1, steps)))      # (a budget below the interval is honoured too)
    spent = [0]
    why: list[str] = []

    def check() -> int:
        spent[0] += every
        if stop is not None and stop.is_set():
            why.append("stopped")
        elif spent[0] > steps:
            why.append(f"more than {steps:,} steps")
        elif clock() > deadline:
            why.append(f"more than {seconds:g} s")
        return 1 if why else 0
    db.set_progress_handler(check, every)
    try:
        yield
    except sqlite3.OperationalError as e:
        if not why or getattr(e, "sqlite_errorcode", sqlite3.SQLITE_INTERRUPT) != sqlite3.SQLITE_INTERRUPT:
            raise
        if why[0] == "stopped":
            raise SearchStopped("the server is stopping") from None
        raise SearchTooBroad(f"it took {why[0]}") from None
    finally:
        db.set_progress_handler(None, 0)


def search_messages(db: sqlite3.Connection, query: str, *, hidden_rooms: Iterable[str], room: str | None = None,
                    user: str | None = None, since: float | None = None, until: float | None = None,
                    limit: int = 20, scan: int = SCAN_WINDOW, rank: int = RANK_WINDOW,
                    budget: SearchBudget | None = None, stop: threading.Event | None = None) -> list[Hit]:
    """Messages matching ``query`` (best first) outside ``hidden_rooms``, with the spans that matched.

    ``QueryError`` when the query breaks a rule; ``SearchTooBroad`` past ``budget``; ``SearchStopped``
    once ``stop`` is set (by another thread)."""
    match = fts_query(query, room, user)
    if match is None:
        return []
    with budgeted(db, budget, stop):
        rows, marked = ranked_matches(db, match, hidden_rooms, room, user, since, until, limit, scan, rank)
    return [(m, highlights(m.text, marked.get(r[0], m.text))) for r in rows for m in (MessageTables.from_row(r[1:]),)]


def ranked_matches(db: sqlite3.Connection, match: str, hidden_rooms: Iterable[str], room: str | None = None,
                   user: str | None = None, since: float | None = None, until: float | None = None, limit: int = 20,
                   scan: int = SCAN_WINDOW, rank: int = RANK_WINDOW) -> tuple[list[tuple[Any, ...]], dict[int, str]]:
    """The rows (rowid first) of the best matches of an FTS5 MATCH expression, and their texts with the
    matches marked; the query's rules and budget are ``search_messages``'."""
    index_where: list[str] = ["messages_fts MATCH ?"]          # what the index answers ...
    index_args: list[Any] = [match]
    row_where: list[str] = []                                 # ... and what each match is checked for
    row_args: list[Any] = []
    if since is not None or until is not None:
        # Messages are indexed in delivery order, which follows sent_at closely: bound the walk to the
        # rowids of the messages sent in the window (the exact times are checked below).
        lo, hi = db.execute("SELECT MIN(rowid), MAX(rowid) FROM messages WHERE sent_at BETWEEN ? AND ?",
                            (since if since is not None else -1e18, until if until is not None else 1e18)).fetchone()
        if lo is None:
            return [], {}
        index_where.append("messages_fts.rowid BETWEEN ? AND ?")
        index_args += [lo, hi]
    hidden = sorted(set(hidden_rooms))
    if hidden:
        row_where.append(f"m.room NOT IN ({','.join('?' * len(hidden))})")
        row_args += hidden
    for cond, value in (("m.room = ?", room), ("m.user = ?", user), ("m.sent_at >= ?", since),
                        ("m.sent_at <= ?", until)):
        if value is not None:
            row_where.append(cond)
            row_args.append(value)
    # The windows (module docstring) bound the walk also when every match is in a room hidden from the user.
    rows = db.execute(
        "WITH scanned AS (SELECT messages_fts.rowid AS rid, bm25(messages_fts) AS score FROM messages_fts "
        f"WHERE {' AND '.join(index_where)} ORDER BY messages_fts.rowid DESC LIMIT ?), "
        "recent AS (SELECT rid, score FROM scanned JOIN messages m ON m.rowid = scanned.rid "
        f"{'WHERE ' + ' AND '.join(row_where) if row_where else ''} ORDER BY rid DESC LIMIT ?) "
        f"SELECT m.rowid, {MessageTables.COLUMNS} FROM recent JOIN messages m ON m.rowid = recent.rid "
        "ORDER BY recent.score LIMIT ?",
        (*index_args, scan, *row_args, rank, limit)).fetchall()
    if not rows:
        return [], {}
    marked = dict(db.execute(
        f"SELECT rowid, highlight(messages_fts, 0, ?, ?) FROM messages_fts WHERE messages_fts MATCH ? "
        f"AND rowid IN ({','.join('?' * len(rows))})", (MARK_ON, MARK_OFF, match, *(r[0] for r in rows))))
    return rows, marked


# --- searches off the event loop -----------------------------------------------------------------------
class SearchPool:
    """The site's searches, in ``threads`` threads on read-only connections; at most ``per_user`` and
    ``per_site`` running or waiting. ``close`` stops them (at their next budget check) and waits."""

    def __init__(self, open_reader: Callable[[], sqlite3.Connection], budget: SearchBudget, *,
                 threads: int = SEARCH_THREADS, per_user: int = SEARCHES_PER_USER,
                 per_site: int = SEARCHES_PER_SITE) -> None:
        self.budget = budget
        self.per_user = per_user
        self.per_site = per_site
        self._open_reader = open_reader
        self._readers: queue.SimpleQueue[sqlite3.Connection] = queue.SimpleQueue()   # idle ones
        self._executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="search")
        self._stop = threading.Event()
        self._of_user: dict[str, int] = {}       # searches running or waiting, per user (event loop only)

    @property
    def in_flight(self) -> int:
        """Searches running or waiting."""
        return sum(self._of_user.values())

    def submit(self, searcher: str, query: str, **kw: Any) -> Awaitable[list[Hit]]:
        """Queue ``search_messages(query, **kw)`` for user ``searcher`` now; await the hits. Refusal now when
        the user or the site has too many searches (``try_again``); later if it is too broad (``limit``)."""
        if self._stop.is_set():
            raise Refusal(E.UNAVAILABLE, "search: the server is stopping")
        if self._of_user.get(searcher, 0) >= self.per_user:
            raise Refusal(E.TRY_AGAIN, f"search: your earlier search is still running (at most {self.per_user} "
                                       "at a time); try again when it has answered")
        if self.in_flight >= self.per_site:
            raise Refusal(E.TRY_AGAIN, f"search: {self.in_flight} searches are running or waiting at this site; "
                                       "try again in a moment")
        loop = asyncio.get_running_loop()
        budget = self.budget
        future = self._executor.submit(self._search, query, budget, kw)
        self._of_user[searcher] = self._of_user.get(searcher, 0) + 1

        def done(_: Future[list[Hit]]) -> None:      # in the worker thread: the slot is free once the thread is
            if not loop.is_closed():
                loop.call_soon_threadsafe(self._release, searcher)
        future.add_done_callback(done)
        return self._answer(asyncio.wrap_future(future))

    def _release(self, user: str) -> None:
        n = self._of_user.pop(user, 1) - 1
        if n > 0:
            self._of_user[user] = n

    @staticmethod
    async def _answer(found: Awaitable[list[Hit]]) -> list[Hit]:
        try:
            return await found
        except SearchTooBroad as e:
            raise Refusal(E.LIMIT, f"search too broad: {e}; narrow it: longer words or prefixes, a phrase, a room, "
                                   "a user or a time") from None
        except SearchStopped as e:
            raise Refusal(E.UNAVAILABLE, f"search: {e}") from None

    def _search(self, query: str, budget: SearchBudget, kw: dict[str, Any]) -> list[Hit]:
        """In a worker thread: one search on an idle read-only connection (opened on first need)."""
        try:
            db = self._readers.get_nowait()
        except queue.Empty:
            db = self._open_reader()
        try:
            return search_messages(db, query, budget=budget, stop=self._stop, **kw)
        finally:
            self._readers.put(db)

    def close(self) -> None:
        """Stop the running searches (within ``PROGRESS_EVERY`` steps) and the waiting ones; close the
        connections."""
        self._stop.set()
        self._executor.shutdown(wait=True, cancel_futures=True)
        while True:
            try:
                self._readers.get_nowait().close()
            except queue.Empty:
                break
