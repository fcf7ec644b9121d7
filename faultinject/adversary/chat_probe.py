"""A chat server under attack from one of its users and one peer site, measured input by input.

Site A runs a real ``ChatServer`` (chat_server/server.py) on a virtual clock, over a site database in a
temporary directory (a history of ``history`` messages of the hostile world's rooms, so that searches
and history pages have something to walk), without sockets: its client frames go to the edge's own
request handler (``ClientFrames.handle``) on sessions whose transport is a buffer, and RCM is
``LoopbackRcm``, which takes every send and delivers it back here in order, as RCM does. The hostile
user mallory is signed in and in rooms of its own; the hostile peer B's payloads (``PeerDelivery``) go
to the edge's delivery path (``ChatServer._on_delivery``) and its RCM events (``Missing``,
``StatusChange``) to the core as the edge's RCM loop passes them. The honest user alice is in the
private room ``ops``, which no hostile input names by design (a peer site speaks for its own users,
room definitions included: this probe measures bounds, not that trust).

For every hostile input (``chat_requests``) the probe checks:

* nothing escapes: no exception out of the handler or the delivery path, and none reaching the edge's
  catch-all (an ``internal`` error frame, a quarantined delivery, a failed task: anything the server
  logs at ERROR); a refusal (an ``error`` frame naming the rule, a payload ignored) is fine;
* the work is bounded, linear in the input's size and never driven by a number or a prefix inside it:
  the Python calls made for it (a ``sys.setprofile`` hook on the event loop's thread, and on the search
  thread while it runs the input's search) within ``CALL_BUDGET + CALLS_PER_BYTE * size``; the SQLite
  pages it touches on any of the site's connections (cache hits and misses, from ``sqlite3_db_status``)
  within ``PAGE_BUDGET + PAGES_PER_BYTE * size``, plus a scan window's (``SEARCH_PAGES``) for a search;
  the bytes it makes the site write to its journal within ``JOURNAL_BUDGET + JOURNAL_PER_BYTE * size``;
* a search's own work inside SQLite stays within the budget the site sets for it: its VM steps
  (counted by wrapping the progress handler search.py installs) at most the budget's steps plus one
  check interval, and the CPU time of the thread running it at most ``search_budget`` plus
  ``SEARCH_SLACK``. FTS5 merges a prefix's postings inside one VM step, without a Python call: the
  pages and the thread's time are what see it (security finding 3);
* nothing hangs (a timer interrupts an input running ``WATCHDOG`` seconds) and memory stays bounded
  (the resident set, checked by the same timer while an input runs, and every ``SERVE_EVERY`` inputs,
  within ``RSS_BOUND`` of what it was after warming up);
* every ``SERVE_EVERY`` inputs, alice is still served: her ``say`` is acked and delivered to her own
  session, her ``history`` is answered, and her room holds exactly what she said, in order; nothing
  of another room ever reaches her.

A hostile connection that the server closes (a ``logout``) is opened and signed in again before the
next input, as a real user would.

The IRC and TAK front ends (kinds ``irc/...`` and ``tak/...``: ``irc_lines``, ``tak_events``) run their own
reader and request worker on links the probe feeds (``chat_fronts``): mallory registered on each (a
registration kind on a connection of its own), alice on both as well. Their writes get the same checks; an
IRC line may ask for several history pages (a ``CHATHISTORY`` with a timestamp walks back), each allowed a
page's work. Every ``SERVE_EVERY`` inputs alice's IRC client must also get its ``PONG`` and her say's line
(nothing of another user in her room, no control character in any line) and her TAK client the answer to its
ping, every event it is sent readable by the front end's own decoder. A connection closed (a flood, a
``QUIT``) or a TAK stream left inside an event is opened again before the next input.
"""
from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import random
import shutil
import signal
import sys
import tempfile
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from chat_server.config import parse_chat_settings
from chat_server.irc_commands import MAX_HISTORY_QUERIES
from chat_server.irc_history import TIME_PAGES
from chat_server.search import PROGRESS_EVERY, SCAN_WINDOW, SearchBudget
from chat_server.server import ChatServer
from chat_server.sessions import Session
from contracts.mission import parse_mission
from ordering import honest_ceiling
from rcm.client import Delivery, Missing

from . import irc_lines, tak_events
from .chat_fronts import TAK_ROOM, FrontClients, FrontLink, LinkTransport, Refusals
from .chat_requests import KINDS as CHAT_KINDS
from .chat_requests import ROOMS, WORDS, ChatHint, PeerDelivery
from .chat_site import (
    CHAT,
    HISTORY,
    HONEST,
    HONEST_PASSWORD,
    HONEST_ROOM,
    HOSTILE,
    PASSWORD,
    PEERS,
    SITE,
    LoopbackRcm,
    SearchReader,
    SqliteWork,
    Transport,
    history_template,
    scratch_dir,
)
from .irc_lines import IrcInputs, IrcLine
from .measure import RSS_BOUND, START, WATCHDOG, Calls, Hang, MemoryRunaway, Report, rss, short
from .tak_events import TakBytes, TakInputs

TICK = 0.02                     # virtual seconds between two hostile inputs
FRONT_TICK = 1.0                # ... on the IRC and TAK front ends (a write of many lines or events is one input: the
                                # front ends' flood limits, 50 frames a second, would close nearly every connection)
SERVE_EVERY = 50
TIMER_EVERY = 25                # the edge's receipt and roster timers run every this many inputs
CALL_BUDGET = 20_000            # a cap's worth of work: a history page, a resumed session's replay, a search's
CALLS_PER_BYTE = 8              # results (twice the most an honest one makes), and a linear share of the input (a
                                # receipt batch: some 30 calls and 8 pages a msg_id of 7 bytes)
PAGE_BUDGET = 5_000             # SQLite pages (an honest request: a few hundred) ...
PAGES_PER_BYTE = 2
SEARCH_PAGES = 8 * SCAN_WINDOW  # ... and for an input that ran a search, its scan window's (four to six pages a
                                # match: 85,000 for 20,000 at 20,000 messages, 113,000 at 200,000)
JOURNAL_BUDGET = 250_000        # journal bytes: a report's listed seqs (10,000 numbers of up to 20 digits) ...
JOURNAL_PER_BYTE = 16           # ... and a text twice (send and deliver records), each byte escaped as \u0000
JOURNAL_KEPT = 64 << 20         # the probe empties its site's journal past this (between inputs)
HISTORY_PAGE_CALLS = 6_000      # an IRC CHATHISTORY with a timestamp walks back TIME_PAGES pages of history, each a
HISTORY_PAGE_PAGES = 500        # request of its own (irc_history.py), and its answer is written as IRC lines: for
HISTORY_WALKED = MAX_HISTORY_QUERIES * TIME_PAGES    # each page an honest page's work (5,000 calls and 330 SQLite
                                # pages at 20,000 messages; 100 messages as tagged lines, 21,500 calls in all), for at
                                # most the pages of the CHATHISTORY commands one connection may have under way at once
SEARCH_SLACK = 0.5              # seconds past search_budget a search's thread may run (its budget is checked every
                                # PROGRESS_EVERY VM steps; FTS5 merges a prefix's postings inside one step)



class HostileInputs(IrcInputs, TakInputs):
    """Every hostile input kind's generator: the chat protocol's, the IRC front end's and the TAK front end's."""


KINDS: dict[str, Any] = {**CHAT_KINDS, **irc_lines.KINDS, **tak_events.KINDS}
"""Every kind the probe takes, by name: ``chat_requests``'s, then ``irc/...`` and ``tak/...``."""
FRONT_KINDS = ("irc/", "tak/")


# ==================================================================================================
# the probe
# ==================================================================================================
@dataclass
class ChatReport(Report):
    """What one kind of hostile input did to the site."""

    inputs: int = 0
    refused: int = 0                # inputs answered with an error frame, or payloads ignored
    max_calls: int = 0
    max_calls_bytes: int = 0        # the size of the input that made the most calls
    max_pages: int = 0
    max_journal: int = 0            # journal bytes one input made the site write
    max_search_steps: int = 0
    max_search_ms: float = 0.0
    served: int = 0                 # checks that alice was still served
    peak_rss: int = 0

    def summary(self) -> dict[str, Any]:
        return {"kind": self.kind, "inputs": self.inputs, "refused": self.refused, "violations": self.violation_count,
                "max_calls": self.max_calls, "max_calls_bytes": self.max_calls_bytes, "max_pages": self.max_pages,
                "max_journal": self.max_journal,
                "max_search_steps": self.max_search_steps, "max_search_ms": round(self.max_search_ms, 1),
                "served": self.served, "peak_rss_mib": round(self.peak_rss / 2**20, 1), **self.latencies(),
                "first_violations": self.violations}


class _Errors(logging.Handler):
    """What the server logs at ERROR (an exception at the catch-all, a quarantined delivery, a failed task)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.seen: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        exc = record.exc_info[1] if record.exc_info else None
        self.seen.append(record.getMessage()[:200] + (f" ({type(exc).__name__}: {str(exc)[:200]})" if exc else ""))


def _size(item: Any) -> int:
    """An input's size in bytes, as it reaches the site (a frame's text, a payload, an RCM event's ranges)."""
    if isinstance(item, str):
        return len(item.encode("utf-8", "surrogatepass"))
    if isinstance(item, (IrcLine, TakBytes)):
        return len(item.data)
    if isinstance(item, PeerDelivery):
        return len(item.payload) + len(repr(item.order)) + 32
    if isinstance(item, Missing):
        return 18 * len(item.ranges) + 16
    return 16 + len(repr(item))


class ChatProbe(FrontClients):
    """Site A with its hostile user and peer and its honest user (see the module docstring)."""

    def __init__(self, seed: int, history: int = HISTORY, watchdog: float = WATCHDOG) -> None:
        self.rng = random.Random(seed)
        self.inputs = HostileInputs(self.rng)
        self.history = history
        self.watchdog = watchdog
        self.now = START
        self.baseline = 0
        self.n = 0                      # RCM's delivery counter at the site
        self.history_pages = 0          # history requests answered during an input
        self.peer_seq = 1               # B's next sequence number
        self.msg_ids: deque[str] = deque([f"C:{i}" for i in (1, 20, 40, 1000, history)], maxlen=64)
        self.said: list[str] = []       # alice's texts, in order
        self.errors = _Errors()
        self._log = logging.getLogger("chat_server")
        self._log_state = (self._log.level, self._log.propagate)
        self._log.addHandler(self.errors)
        self._log.setLevel(logging.ERROR)
        self._log.propagate = False
        self.server: ChatServer | None = None
        self.links: dict[str, FrontLink] = {}      # the front ends' connections: hostile and honest, IRC and TAK
        self.tak_refusals = Refusals("chat_server.tak")
        self.stopped = ""               # why this process should take no more inputs (memory it cannot return)
        self._fresh()

    # -- a site -------------------------------------------------------------------------------------
    def _fresh(self) -> None:
        """A new site A (at start, and after an input left the old one in an unknown state)."""
        if self.server is not None:
            self._dispose()
        self.loop = asyncio.new_event_loop()
        self.dir = Path(tempfile.mkdtemp(prefix="chatprobe-", dir=scratch_dir()))
        raw = {"mission": {"name": "probe", "data_dir": "var"}, "rcm": {},
               "sites": {s: {"rcm": f"127.0.0.1:{20000 + i}", "chat": f"127.0.0.1:{21000 + i}"}
                         for i, s in enumerate((SITE, *PEERS))}, "chat": dict(CHAT)}
        mission = parse_mission(raw, self.dir)
        db = mission.site_dir(SITE) / "chat" / "chat.db"
        db.parent.mkdir(parents=True, mode=0o700)
        shutil.copyfile(history_template(self.history), db)
        self.rcm = LoopbackRcm(SITE, PEERS, self.history)
        self.server = ChatServer(mission, SITE, parse_chat_settings(mission.chat), rcm_connect=self._no_connect,
                                 clock=lambda: self.now, monotonic=lambda: self.now, host="127.0.0.1", port=0)
        self.sql = SqliteWork()
        self.sql.watch(self.server.store.db)
        self._instrument_search()
        self._count_history_pages()
        self.loop.run_until_complete(self._setup())

    @staticmethod
    async def _no_connect(since: Any) -> Any:
        raise RuntimeError("the probe connects RCM itself")

    def _count_history_pages(self) -> None:
        """Count the ``history`` requests the server answers (an IRC ``CHATHISTORY`` walks back several)."""
        assert self.server is not None
        handlers = self.server.frames._handlers
        page = handlers["history"]

        async def counted(session: Session, req: Any) -> None:
            self.history_pages += 1
            await page(session, req)
        handlers["history"] = counted

    def _instrument_search(self) -> None:
        """Count the search pool's work: its connections' pages, its progress handler's steps, its thread's
        Python calls and CPU time."""
        assert self.server is not None
        pool, sql = self.server.searches, self.sql
        opener, run = pool._open_reader, pool._search
        self.search_budget: SearchBudget = pool.budget

        def open_reader() -> Any:
            db = opener()
            sql.watch(db)
            return SearchReader(db, sql)

        def search(query: str, budget: Any, kw: dict[str, Any]) -> Any:
            sql.searches += 1
            t0 = time.thread_time()
            sys.setprofile(sql.search_calls)
            try:
                return run(query, budget, kw)
            finally:
                sys.setprofile(None)
                sql.search_seconds += time.thread_time() - t0
        pool._open_reader = open_reader
        pool._search = search                   # type: ignore[method-assign]

    async def _setup(self) -> None:
        srv = self.server
        assert srv is not None
        srv.rcm, srv.incarnation = self.rcm, self.rcm.incarnation
        srv.rcm_connected.set()
        srv.apply(srv.core.rcm_connected(dict(self.rcm.statuses), dict(self.rcm.via)))
        self.alice = await self._sign_in(HONEST, keep=True)
        await self._request(self.alice, {"type": "create", "room": HONEST_ROOM, "members": []})
        self.mallory = await self._sign_in(HOSTILE)
        for room in ROOMS[:4]:
            await self._request(self.mallory, {"type": "join", "room": room})
        self.alice_transport.frames()
        self.said = []

    async def _sign_in(self, user: str, keep: bool = False) -> Session:
        assert self.server is not None
        transport = Transport(keep)
        session = Session(self.server.sessions, None, transport, "10.0.0.66" if user == HOSTILE else "10.0.0.7")
        self.server.sessions.connections.add(session)
        await self._request(session, {"type": "hello", "user": user,
                                      "password": HONEST_PASSWORD if user == HONEST else PASSWORD})
        if session.user != user:
            raise AssertionError(f"{user} could not sign in")
        if keep:
            self.alice_transport = transport
        return session

    async def _request(self, session: Session, frame: dict[str, Any] | str) -> None:
        assert self.server is not None
        text = frame if isinstance(frame, str) else json.dumps(frame)
        await self.server.frames.handle(session, text)
        await self._settle()

    async def _settle(self) -> None:
        """Run what an input started to its end: says, searches, payloads to send, RCM's deliveries back."""
        srv = self.server
        assert srv is not None
        resident = {t for link in self.links.values() for t in link.tasks}     # (they end with their connection)
        spins = 0
        while True:
            tasks = (set(srv.frames.says) | set(srv.tasks._tasks)) - resident
            if tasks:
                await asyncio.wait(tasks)
                continue
            if self.rcm.pending:
                d = self.rcm.pending.popleft()
                self.n += 1
                await srv._on_delivery(Delivery(self.n, d.origin, d.seq, d.msg_id, d.order, d.late, d.payload,
                                                d.precedence))
                continue
            if self.rcm.latest:
                e = self.rcm.latest.popleft()
                srv.positions.received(e.origin, e.key, e.payload, e.version, e.expires_at)
                continue
            await asyncio.sleep(0)          # the sessions' flush callbacks
            if not ((set(srv.frames.says) | set(srv.tasks._tasks)) - resident or self.rcm.pending or self.rcm.latest):
                if all(link.idle() for link in self.links.values()):
                    return
                spins += 1
                if spins > 50:              # a front end's worker waits for a thread (a log-in's key derivation)
                    await asyncio.sleep(0.001)

    def _dispose(self) -> None:
        srv, self.server = self.server, None
        assert srv is not None
        links, self.links = list(self.links.values()), {}
        tasks = [t for link in links for t in link.tasks if not t.done()]
        for t in tasks:
            t.cancel()
        if tasks and not self.loop.is_running():
            self.loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        srv.searches.close()
        srv.logins.close()
        if srv.journal._fd is not None:
            os.close(srv.journal._fd)
            srv.journal._fd = None
        srv.store.close()
        self.loop.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def close(self) -> None:
        """Remove the site and its files; the chat_server logger as it was."""
        if self.server is not None:
            self._dispose()
        self._log.removeHandler(self.errors)
        self.tak_refusals.remove()
        self._log.setLevel(self._log_state[0])
        self._log.propagate = self._log_state[1]

    # -- one hostile input ----------------------------------------------------------------------------
    def hint(self) -> ChatHint:
        assert self.server is not None
        core = self.server.core
        token = self.mallory.transport.token if isinstance(self.mallory.transport, Transport) else ""
        return ChatHint(site=SITE, user=HOSTILE, password=PASSWORD, session=token,
                        rooms=tuple(sorted(core.rooms.rooms_of(HOSTILE))), msg_ids=tuple(self.msg_ids),
                        n=core.journal_n, peer_seq=self.peer_seq, clock=self.rcm.clock,
                        ceiling=honest_ceiling(self.now), now=self.now)

    async def _apply(self, kind: str, item: Any) -> Session | None:
        """Hand one input to the site the way its edge does; the connection it came on, if any."""
        srv = self.server
        assert srv is not None
        if isinstance(item, (IrcLine, TakBytes)):
            return await self._apply_front(item)
        if isinstance(item, str):
            session = self.mallory
            if kind == "hello":             # on a connection of its own, not signed in yet
                session = Session(srv.sessions, None, Transport(False), "10.0.0.66")
                srv.sessions.connections.add(session)
            await srv.frames.handle(session, item)
            await self._settle()
            return session
        if isinstance(item, PeerDelivery):
            self.n += 1
            await srv._on_delivery(Delivery(self.n, item.origin, item.seq, f"{item.origin}:{item.seq}", item.order,
                                            item.late, item.payload, item.precedence, item.repaired))
        elif isinstance(item, Missing):
            srv.apply(srv.core.missing(item.origin, tuple(item.ranges)))
        else:
            srv.apply(srv.core.status_change(item.site, item.status, item.via))
        await self._settle()
        return None

    def feed(self, kind: str, report: ChatReport) -> None:
        """One hostile input of ``kind``: applied, measured and checked (the module docstring)."""
        if self.mallory.closed:
            self.mallory = self.loop.run_until_complete(self._sign_in(HOSTILE))
        front = kind.startswith(FRONT_KINDS)
        if front:
            self.loop.run_until_complete(self._ready_front(kind[:3]))
        item = KINDS[kind](self.inputs, self.hint())
        size = _size(item)
        self.now += FRONT_TICK if front else TICK
        tak_refused = self.tak_refusals.count
        counter = Calls()
        assert self.server is not None
        errors_before, quarantined, rejected = len(self.errors.seen), self.server.quarantined, self.server.rejected
        self.sql.pages()
        self.sql.take_search()
        journal = self._journal_bytes()
        start = time.perf_counter()
        limit = self.baseline + RSS_BOUND if self.baseline else 1 << 62

        def watchdog(signum: int, frame: FrameType | None) -> None:
            if time.perf_counter() - start > self.watchdog:
                raise Hang(f"an input ran for {self.watchdog:g} s")
            if rss() > limit:
                raise MemoryRunaway(f"resident set {(rss() - self.baseline) >> 20} MiB above the warmed-up one")
        old = signal.signal(signal.SIGALRM, watchdog)
        signal.setitimer(signal.ITIMER_REAL, 0.1, 0.1)
        session: Session | None = None
        escaped = ""
        gc.disable()                    # a collection frees (and calls the finalizers of) earlier inputs' garbage:
        sys.setprofile(counter)         # it runs between inputs, not in one input's count
        try:
            session = self.loop.run_until_complete(self._apply(kind, item))
        except Exception as e:          # noqa: BLE001 - anything escaping is what this probe looks for
            escaped = f"{type(e).__name__}: {str(e)[:200]} <- {short(item)}"
        finally:
            sys.setprofile(None)
            gc.enable()
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
        if escaped:
            report.violation(escaped)
            self._fresh()               # (the site's state is unknown now)
            gc.collect()
            if self.baseline and rss() > limit:
                self.stopped = f"the resident set stays {(rss() - self.baseline) >> 20} MiB up: no more inputs"
            return
        report.micros.append((time.perf_counter() - start) * 1e6)
        report.inputs += 1
        self._check_work(report, item, size, counter.n, self._journal_bytes() - journal)
        srv = self.server
        assert srv is not None
        for logged in self.errors.seen[errors_before:]:
            report.violation(f"logged at ERROR: {logged} <- {short(item)}")
        del self.errors.seen[:]
        if srv.quarantined > quarantined:
            report.violation(f"a delivery could not be applied (quarantined) <- {short(item)}")
        transport = session.transport if session is not None else None
        if isinstance(transport, Transport):
            report.refused += transport.errors > 0 or self.tak_refusals.count > tak_refused
            if transport.internal:
                report.violation(f"an internal error answered {short(item)}")
            transport.errors = transport.internal = 0
        if session is not None and session is not self.mallory and not isinstance(transport, LinkTransport):
            srv.sessions.unregister(session)        # a hello's own connection ends here
            srv.sessions.connections.discard(session)
        report.refused += srv.rejected > rejected
        self._track(item)
        if report.inputs % TIMER_EVERY == 0:
            self.loop.run_until_complete(self._timers())
            fd = srv.journal._fd
            if fd is not None and os.fstat(fd).st_size > JOURNAL_KEPT:     # (a million inputs would fill the disk)
                os.ftruncate(fd, 0)
        if report.inputs % SERVE_EVERY == 0:
            self._serve_alice(report, item)

    def _journal_bytes(self) -> int:
        assert self.server is not None
        fd = self.server.journal._fd
        return os.fstat(fd).st_size if fd is not None else 0

    def _check_work(self, report: ChatReport, item: Any, size: int, calls: int, journal: int) -> None:
        searches, steps, seconds, search_calls = self.sql.take_search()
        calls += search_calls
        pages = self.sql.pages()
        # the history pages past the first a client frame asks for; every page an IRC line asks for (it is
        # written to the client as lines too)
        walked = self.history_pages if isinstance(item, IrcLine) else max(0, self.history_pages - 1)
        self.history_pages = 0
        if walked > HISTORY_WALKED:
            report.violation(f"{walked} history pages for one input (at most {HISTORY_WALKED}): {short(item)}")
        if calls > report.max_calls:
            report.max_calls, report.max_calls_bytes = calls, size
        report.max_pages = max(report.max_pages, pages)
        report.max_journal = max(report.max_journal, journal)
        report.max_search_steps = max(report.max_search_steps, steps)
        report.max_search_ms = max(report.max_search_ms, seconds * 1000)
        budget = CALL_BUDGET + CALLS_PER_BYTE * size + HISTORY_PAGE_CALLS * min(walked, HISTORY_WALKED)
        if calls > budget:
            report.violation(f"{calls} calls for an input of {size} bytes (budget {budget}): {short(item)}")
        page_budget = (PAGE_BUDGET + PAGES_PER_BYTE * size + SEARCH_PAGES * searches
                       + HISTORY_PAGE_PAGES * min(walked, HISTORY_WALKED))
        if pages > page_budget:
            report.violation(f"{pages} SQLite pages for an input of {size} bytes (budget {page_budget}): "
                             f"{short(item)}")
        journal_budget = JOURNAL_BUDGET + JOURNAL_PER_BYTE * size
        if journal > journal_budget:
            report.violation(f"{journal} journal bytes for an input of {size} bytes (budget {journal_budget}): "
                             f"{short(item)}")
        budget_s = self.search_budget
        if steps > budget_s.steps + PROGRESS_EVERY or seconds > budget_s.seconds + SEARCH_SLACK:
            report.violation(f"a search took {steps:,} VM steps and {seconds:.2f} s of its thread (budget "
                             f"{budget_s.steps:,} steps, {budget_s.seconds:g} s): {short(item)}")

    def _track(self, item: Any) -> None:
        """What the next inputs may name: msg_ids stored here, the peer's next sequence number."""
        if isinstance(item, PeerDelivery):
            if item.origin == "B" and item.seq == self.peer_seq:
                self.peer_seq += 1
            assert self.server is not None
            msg_id = f"{item.origin}:{item.seq}"
            if self.server.store.room_of(msg_id) is not None and msg_id not in self.msg_ids:
                self.msg_ids.append(msg_id)

    async def _timers(self) -> None:
        """The edge's receipt and roster timers (their work is bounded by what one interval gathers)."""
        assert self.server is not None
        await self.server.flush_receipts(wait=0.0)
        await self.server.flush_roster()
        await self._settle()

    # -- the honest user --------------------------------------------------------------------------------
    def _serve_alice(self, report: ChatReport, last: Any) -> None:
        """Is alice still served? Her say acked and delivered to her, her history answered, her room intact."""
        k = len(self.said)
        text = f"honest {k} {self.rng.choice(WORDS)}"
        self._ping_alice_on_fronts(k)
        try:
            self.loop.run_until_complete(self._request(self.alice, {"type": "say", "room": HONEST_ROOM, "text": text,
                                                                    "client_id": f"h{k}"}))
            self.said.append(text)
            self.loop.run_until_complete(self._request(self.alice, {"type": "history", "room": HONEST_ROOM,
                                                                    "limit": 10, "id": f"h{k}"}))
        except Exception as e:          # noqa: BLE001
            report.violation(f"alice's requests failed after {short(last)}: {type(e).__name__}: {e}")
            self._fresh()
            return
        frames = self.alice_transport.frames()
        kinds = {(f.get("type"), f.get("client_id", f.get("id"))) for f in frames}
        delivered = [f for f in frames if f.get("type") == "message"
                     and not ("alice-tak" in self.links and f.get("room") == TAK_ROOM)]
        answer = next((f for f in frames if f.get("type") == "history" and f.get("id") == f"h{k}"), None)
        if ("ack", f"h{k}") not in kinds or not any(f["text"] == text for f in delivered):
            report.violation(f"alice's say was not acked and delivered after {short(last)}: {frames[:4]}")
        elif answer is None or [m["text"] for m in answer["messages"]] != self.said[-10:]:
            report.violation(f"alice's history is not what she said after {short(last)}: {answer}")
        elif any(f["room"] != HONEST_ROOM or f["user"] != HONEST for f in delivered):
            report.violation(f"a message of another room or user reached alice after {short(last)}")
        elif problem := self._alice_on_fronts(k, text):
            report.violation(f"{problem} after {short(last)}")
        else:
            report.served += 1
        above = rss() - self.baseline
        report.peak_rss = max(report.peak_rss, above)
        if self.baseline and above > RSS_BOUND:
            report.violation(f"resident set {above >> 20} MiB above the warmed-up one")

    def warm(self, rounds: int = 20) -> None:
        """Honest traffic until caches and structures reach their size, then the memory baseline."""
        r = ChatReport("warm")
        for _ in range(rounds):
            self.now += TICK * SERVE_EVERY
            self._serve_alice(r, "(warming up)")
        if r.violation_count:
            raise AssertionError(f"the honest user is not served before any attack: {r.violations}")
        self.baseline = rss()


def run_kind(kind: str, inputs: int, seed: int, history: int = HISTORY, watchdog: float = WATCHDOG) -> ChatReport:
    """``inputs`` hostile inputs of ``kind`` against a fresh site; the report."""
    probe = ChatProbe(seed, history, watchdog)
    try:
        probe.warm()
        report = ChatReport(kind)
        for _ in range(inputs):
            probe.feed(kind, report)
            if probe.stopped:
                report.violation(probe.stopped)
                break
        return report
    finally:
        probe.close()


def honest_say_calls(samples: int = 200, history: int = HISTORY) -> float:
    """Python calls for one honest ``say`` (handled, sent, delivered back and shown), the bench's yardstick."""
    probe = ChatProbe(1, history)
    try:
        probe.warm(5)
        counter = Calls()
        for i in range(samples):
            probe.now += TICK
            frame = {"type": "say", "room": HONEST_ROOM, "text": f"yardstick {i} grid tanker", "client_id": f"y{i}"}
            sys.setprofile(counter)
            try:
                probe.loop.run_until_complete(probe._request(probe.alice, frame))
            finally:
                sys.setprofile(None)
        return counter.n / samples
    finally:
        probe.close()

