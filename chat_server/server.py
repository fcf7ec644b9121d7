"""The chat server of one site: the edge around the chat core (core.py).

Theory of operation
-------------------
Operators connect to ``/ws`` and speak chat protocol v1 (protocol.py); IRC
clients reach the same server through irc_server.py. This module composes the
parts and owns the I/O:

* admission.py decides which HTTP connections and requests are served;
* sessions.py holds the connections, who is logged in where, and fan-out;
* logins.py checks passwords and session tokens;
* sending.py takes a ``say`` into RCM exactly once, durable before its ``ack``;
* core.py (sans-IO) applies RCM's deliveries, statuses and missing notices,
  and the room requests, and returns actions; this module executes them: one
  database transaction per delivery (store actions, then journal records, the
  journal ``deliver`` last), then the commit, then frames to clients and
  payloads to other sites. A message therefore reaches clients only after it
  is in the journal and the history; every site shows the same messages in the
  same order during stable periods; a delivery RCM replays is dropped by
  ``msg_id``. A delivery that cannot be applied is quarantined and skipped.

Every change to the site's database is a step of actions (actions.py)
executed by ``apply`` (or ``_on_delivery``) in one transaction: the core's,
and the edge's own few (the say pipeline's pending sends, session tokens,
RCM's resume position, a quarantined delivery). The edge reads the database
directly only for plain queries that change nothing and that the reply needs
as it is: a welcome's unread counts and read markers, a resume's pages,
history, search, a message to acknowledge.

The RCM connection is re-established with back-off; the server resumes with
``since=(incarnation, n)`` (the last delivery it has processed and stored) and
acknowledges processed deliveries to RCM periodically. Every asyncio task of
the server (timers, the RCM loop, says, IRC connections, searches, payloads)
is spawned through one ``Tasks`` owner (tasks.py); ``stop`` drains it: says in
flight finish (at most ``close_timeout``), then everything left is cancelled
and awaited.
"""
from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from contracts.labels import Label
from contracts.mission import Mission
from rcm.cli import open_files_limit
from rcm.durability.dirlock import lock_dir, unlock_dir

from . import rcm_port
from .accounts import Clearances
from .actions import (
    JOURNAL_N_STATE,
    LOSSES_STATE,
    RCM_STATE,
    ROSTER_GEN_STATE,
    STORE_ACTIONS,
    Action,
    BarrierReached,
    Broadcast,
    ExpireSessionTokens,
    IndexForSearch,
    QuarantineDelivery,
    QueueReceipt,
    SendPayload,
    StoreMembership,
    StoreRcmPosition,
    ToDirectoryReaders,
    ToRoom,
    ToUser,
)
from .actions import write as actions_write
from .admission import Admission, OpenFiles
from .checkpoints import CHECKPOINT_INTERVAL, Checkpointer
from .config import ChatSettings, chat_settings, resolve_tls, server_ssl_context
from .core import ChatCore, expiry
from .handlers import ClientFrames
from .history import History
from .journal import Journal
from .labeling import LabelPolicy
from .logins import Logins
from .payload import ChatMessage, PayloadError, ServerGone, encode_payload
from .position_service import PositionService
from .protocol import Refusal
from .rcm_port import Delivery, Latest, Missing, RcmConnect, RcmPort, RcmUnavailable, StatusChange
from .search import SearchBudget, SearchPool
from .sending import SayPipeline
from .sessions import Session, Sessions
from .store import ChatStore, storage_trouble
from .tasks import Tasks
from .web import WebFront

SEARCH_INDEX_INTERVAL = 1.0     # seconds between batches of stored messages into the full-text index
log = logging.getLogger("chat_server")


class ChatServer:
    """One site's chat server; ``start``/``stop`` own every background task."""

    def __init__(self, mission: Mission, site: str, settings: ChatSettings | None = None, *,
                 rcm_connect: RcmConnect | None = None, clock: Callable[[], float] = time.time,
                 monotonic: Callable[[], float] = time.monotonic, host: str | None = None,
                 port: int | None = None, irc_port: int | None = None, tak_port: int | None = None) -> None:
        self.mission = mission
        self.site = site
        self.site_config = mission.site(site)
        s = self.settings = resolve_tls(settings or chat_settings(mission), mission)
        self.ssl_context = server_ssl_context(mission, site) if s.tls else None
        self.clock = clock
        self.monotonic = monotonic
        self.host = host if host is not None else self.site_config.chat.host
        self.port = port if port is not None else self.site_config.chat.port
        irc = self.site_config.irc              # the IRC front end (irc_server.py), when the mission gives one
        self.irc_address = None if irc is None else (host if host is not None else irc.host,
                                                     irc_port if irc_port is not None else irc.port)
        self.irc_front: Any = None
        tak = self.site_config.tak              # the TAK front end (tak/server.py), when the mission gives one
        self.tak_address = None if tak is None else (host if host is not None else tak.host,
                                                     tak_port if tak_port is not None else tak.port)
        self.tak_front: Any = None
        self._rcm_connect = rcm_connect or rcm_port.connect_local(mission, site)
        site_dir = mission.site_dir(site)
        site_dir.mkdir(parents=True, exist_ok=True)
        try:
            site_dir.chmod(0o700)           # the site's data: its processes' user only (audit row 15)
        except PermissionError:
            log.warning("%s belongs to another user: its mode is left as it is", site_dir)
        # One chat server per site directory (rcm.durability.dirlock): its database, journal and RCM client.
        (site_dir / "chat").mkdir(mode=0o700, exist_ok=True)
        self.lock = lock_dir(site_dir / "chat", f"site {site}'s chat server")
        self.store = ChatStore(site_dir / "chat" / "chat.db")
        self.store.checkpoint_elsewhere()       # in a thread, not in the loop's commits (checkpoints.py)
        self.checkpoints = Checkpointer(self.store.path)
        self.searches = SearchPool(self.store.open_reader, SearchBudget(seconds=s.search_budget))
        self.journal = Journal(site_dir / "journal", site, clock)
        self.tasks = Tasks()
        self.sessions = Sessions(s, monotonic, self.tasks)
        # Each front end up to max_connections: the descriptors for them all if the hard limit allows.
        clients = (1 + (self.irc_address is not None) + (self.tak_address is not None)) * s.max_connections
        want = clients + OpenFiles.RESERVE
        self.files = OpenFiles(open_files_limit(want))
        if self.files.room < clients:
            log.warning("open files are limited to %d: %d client connections in all, where max_connections asks "
                        "for up to %d per front end; raise the limit (systemd LimitNOFILE, ulimit -n) to %d",
                        self.files.limit, self.files.room, s.max_connections, want)
        self.admission = Admission(s, self.host, monotonic, self.files)
        self.logins = Logins(s, self.store, clock, monotonic)
        self.peers = mission.peers_of(site)
        self.history = History(self.store, on_join=s.history_on_join, most=s.history_max,
                               page_bytes=s.outbound_queue_bytes // 2, clock=clock)
        self.labels = LabelPolicy.of(mission, site)
        self.clearances = Clearances(self.store.db, self.labels.scheme, self.labels.site_clearance)
        self.core = ChatCore(site, self.peers, self.store, journal_n=self.store.get_state(JOURNAL_N_STATE, 0),
                             roster_gen=max(time.time_ns(), self.store.get_state(ROSTER_GEN_STATE, 0) + 1),
                             history=self.history, max_rooms_per_user=s.max_rooms_per_user, max_rooms=s.max_rooms,
                             rooms_created_per_hour=s.rooms_created_per_hour,
                             rooms_created_burst=s.rooms_created_burst, rooms_page=s.rooms_page,
                             compact=s.compact_payloads, labels=self.labels, clearance_of=self.clearances.of)
        if self.labels.enabled:         # what this site may hold, for the archive's leak check (contracts.journal)
            self.journal.clearance(clearance=self.labels.site_clearance.to_json(),
                                   levels=list(self.labels.scheme.levels), caveats=list(self.labels.scheme.caveats))
        self.core.losses.restore(self.store.get_state(LOSSES_STATE, {}))
        self.rcm: RcmPort | None = None
        self.incarnation: int | None = None
        self.pipeline = SayPipeline(site, self.store, self.journal, lambda: self.rcm, clock, self.apply,
                                    compact=s.compact_payloads, receipts=self.core)
        resume = self.store.get_state(RCM_STATE)
        self._rcm_n: int = resume[1] if resume else 0
        self._rcm_inc: int | None = resume[0] if resume else None
        self._rcm_acked = 0
        # RCM's oldest unanswered request (on which connection, its reference), and since when it is seen waiting
        self._rcm_oldest: tuple[tuple[RcmPort | None, int | None], float] = ((None, None), 0.0)
        self.rejected = 0                   # deliveries whose payload no site could store
        self.quarantined = 0                # deliveries that failed to apply (kept aside)
        self._journal_ahead = False         # the journal holds deliveries the database lacks
        self._written_n: int | None = None  # the last deliver record written in the current step
        self._stopping = False
        self._presence_lists: dict[str, tuple[Any, list[str]]] = {}    # site -> (its online set, sorted)
        self.started = asyncio.Event()
        self.rcm_connected = asyncio.Event()
        self.positions = PositionService(site, self.journal, self.sessions, self.tasks, lambda: self.rcm, clock)
        self.frames = ClientFrames(self)
        self.web = WebFront(self)
        self._recover()

    # --- views other parts and tests read ------------------------------------------------------
    @property
    def connections(self) -> set[Session]:
        return self.sessions.connections

    @property
    def user_sessions(self) -> dict[str, set[Session]]:
        return self.sessions.user_sessions

    @property
    def room_sessions(self) -> dict[str, set[Session]]:
        return self.sessions.room_sessions

    @property
    def private(self) -> dict[str, Any]:
        return self.core.rooms.private

    @property
    def user_rooms(self) -> dict[str, set[str]]:
        return self.core.rooms.user_rooms

    @property
    def journal_n(self) -> int:
        return self.core.journal_n

    @property
    def scheme(self) -> str:
        return "https" if self.ssl_context is not None else "http"

    def site_statuses(self) -> dict[str, str]:
        return self.core.site_statuses()

    def presence_snapshot(self) -> dict[str, list[str]]:
        """Who is online at each site, for a welcome. Each site's sorted list is made once per change of its
        set (a login storm welcomes thousands of clients between two changes); the lists are shared, read-only."""
        sets = {self.site: self.core.published_online}
        sets.update((site, r.online) for site, r in self.core.rooms.rosters.items())
        cache = self._presence_lists
        snap: dict[str, list[str]] = {}
        for site, users in sets.items():
            hit = cache.get(site)
            if hit is None or hit[0] is not users:
                hit = cache[site] = (users, sorted(users))
            snap[site] = hit[1]
        return snap

    # --- lifecycle -----------------------------------------------------------------------------
    def _recover(self, current: bool = False) -> None:
        """Store deliveries that reached the journal but not the database: before a crash, or (``current``)
        in this run when the database failed after the journal record was written."""
        records = self.journal.recover(self.store.get_state(JOURNAL_N_STATE, 0), current)
        if not records:
            return
        self.apply(self.core.recovered(records), journal_n=self.core.journal_n)
        log.warning("recovered %d journaled deliveries missing from the database", len(records))

    async def start(self) -> None:
        """Listen for clients and connect to RCM."""
        s = self.settings
        self.port = await self.web.start(self.host, self.port)
        if self.irc_address is not None:
            from .irc_server import IrcFrontEnd
            self.irc_front = IrcFrontEnd(self, *self.irc_address)
            await self.irc_front.start()
        if self.tak_address is not None:
            from .tak.server import TakFrontEnd
            self.tak_front = TakFrontEnd(self, *self.tak_address)
            await self.tak_front.start()
        for coro in (self._rcm_loop(), self._every(s.receipt_interval / 4, self.flush_receipts),
                     self._every(s.presence_interval, self.flush_roster), self._every(s.rcm_ack_interval, self._ack),
                     self._every(3600.0, self._expire_sessions),
                     self._every(s.rcm_answer_timeout / 4, self._watch_rcm),
                     self._every(CHECKPOINT_INTERVAL, self._checkpoint),
                     self._every(SEARCH_INDEX_INTERVAL, self._index_for_search)):
            self.tasks.spawn(coro)
        self.started.set()
        log.info("chat server %s listening on %s://%s:%d", self.site, self.scheme, self.host, self.port)
        if self.admission.any_host:
            log.warning("listening on every address and [chat] allowed_hosts is empty: any Host header is "
                        "accepted; name the hosts clients use to guard against DNS rebinding")

    async def stop(self) -> None:
        """Close listeners and clients, drain the tasks (says in flight finish first), flush the journal, close
        the database."""
        if self._stopping:
            return
        self._stopping = True
        self.web.stop_listening()
        if self.irc_front is not None:
            await self.irc_front.stop()
        if self.tak_front is not None:
            await self.tak_front.stop()
        await self.web.stop()
        # Says in flight may be in RCM already: they reach the journal first (tasks.py).
        await self.tasks.close(grace=self.settings.close_timeout)
        self.searches.close()
        if self.rcm is not None:
            try:
                await self._ack()
                await self.rcm.close()
            except Exception:
                pass
            self.rcm = None
        await self.journal.close()
        self.checkpoints.close()
        self.store.close()
        self.logins.close()
        unlock_dir(self.lock.parent)
        log.info("chat server %s stopped", self.site)

    async def _every(self, interval: float, job: Callable[[], Awaitable[None]]) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                await job()
            except Exception as e:          # a timer's job never stops the timer
                log.debug("periodic %s failed: %s", getattr(job, "__name__", job), e)

    async def _watch_rcm(self) -> None:
        """Time RCM's oldest unanswered request: a server stopped (SIGSTOP, a paused VM) or stuck on its disk
        keeps its connection and answers nothing, and this site then shows itself suspected until it does
        (``rcm_answer_timeout``; core_sites.py ``rcm_answering``)."""
        rcm, now = self.rcm, self.monotonic()
        ref = rcm.oldest_request() if rcm is not None else None
        if (rcm, ref) != self._rcm_oldest[0]:           # (a new connection numbers its requests from 1 again)
            self._rcm_oldest = ((rcm, ref), now)
        waited = 0.0 if ref is None else now - self._rcm_oldest[1]
        was = self.core.rcm_stalled
        self.apply(self.core.rcm_answering(waited, self.settings.rcm_answer_timeout,
                                           rcm.statuses if rcm is not None else {}, rcm.via if rcm is not None else {}))
        if self.core.rcm_stalled and not was:
            log.warning("the RCM server of %s has not answered for %.0f s (stopped, or stuck on its disk?): "
                        "this site shows itself suspected and says wait until it answers", self.site, waited)
        elif was and not self.core.rcm_stalled and rcm is not None:
            log.info("the RCM server of %s answers again", self.site)

    async def _checkpoint(self) -> None:
        await self.checkpoints.tick(self.store.changes)

    async def _index_for_search(self) -> None:
        self.index_for_search()

    def index_for_search(self) -> None:
        """The messages stored since the last time into the full-text index, in one transaction (every second,
        and before a search, which then sees every message stored before it: store_messages.py)."""
        if self.store.search_index_behind():
            self.apply([IndexForSearch()])

    async def _expire_sessions(self) -> None:
        self.apply([ExpireSessionTokens(self.clock())])

    # --- executing the core's actions ---------------------------------------------------------------
    def apply(self, actions: Sequence[Action], journal_n: int | None = None) -> None:
        """One step of actions (a request, a status event, a timer's): store writes and journal records in one
        transaction, then the rest. If it fails the core is rolled back (``journal_n``: its delivery counter
        before the step, for a step that numbers deliveries)."""
        if any(isinstance(a, STORE_ACTIONS) for a in actions):
            self.store.begin()
            try:
                after = self._write(actions)
                self.store.commit()
            except BaseException:
                self.store.rollback()
                self.core.rollback(self.core.journal_n if journal_n is None else journal_n)
                raise
        else:
            after = self._write(actions)
        self._after(after)

    def _write(self, actions: Sequence[Action]) -> list[Action]:
        after, written_n = actions_write(actions, self.store, self.journal)
        if written_n is not None:
            self._written_n = written_n
        return after

    def _after(self, actions: list[Action]) -> None:
        """What clients and other sites are told, once the step is durable."""
        for a in actions:
            if isinstance(a, ToRoom):
                self.sessions.to_room(a.room, a.frame, None if a.label is None else self._cleared_for(a.label))
            elif isinstance(a, ToUser):
                self.sessions.to_user(a.user, a.frame)
            elif isinstance(a, StoreMembership):       # committed: the user's sessions follow
                (self.sessions.joined if a.member else self.sessions.left)(a.user, a.room)
            elif isinstance(a, Broadcast):
                self.sessions.broadcast(a.frame)
            elif isinstance(a, ToDirectoryReaders):
                self.sessions.to_directory_readers(a.frame, a.users,
                                                   None if a.label is None else self._cleared_for(a.label))
            elif isinstance(a, QueueReceipt):
                self.core.queue_receipt(a.origin, a.msg_id, self.monotonic())
            elif isinstance(a, BarrierReached):
                self.pipeline.barrier_reached(a.msg_id)
            elif isinstance(a, SendPayload):
                self.tasks.spawn(self._send_payload(a))

    def _cleared_for(self, label: Label) -> Callable[[str], bool]:
        """Whose clearance, now, dominates ``label`` (a fan-out's readers)."""
        of = self.clearances.current()
        return lambda user: of(user).dominates(label)

    async def _send_payload(self, a: SendPayload) -> None:
        try:
            await rcm_port.send(self.rcm, encode_payload(a.payload, self.settings.compact_payloads), list(a.dests),
                                within=a.within)
        except Refusal as e:        # control payloads are best effort: what matters is sent again
            log.debug("%s to %s not sent: %s", type(a.payload).__name__, ",".join(a.dests), e.message)

    # --- deliveries -----------------------------------------------------------------------------
    async def _on_delivery(self, d: Delivery) -> None:
        """Apply one RCM delivery in one database transaction; its effects on clients run after the commit.

        A delivery that cannot be applied (a value the database refuses, a bug) is rolled back, kept in
        the quarantine table and skipped: one bad message must not stop the site (audit row 2)."""
        try:
            p = None if expiry(d)[1] else self.core.decode(d)    # an expired stub has no payload (core.py)
        except PayloadError as e:
            self.rejected += 1
            log.warning("ignoring delivery %s from %s: %s", d.msg_id, d.origin, e)
            p = None
        send_recorded = True
        if isinstance(p, ChatMessage) and d.origin == self.site:
            # Our own message may come back before RCM's reply to the send: its send record first.
            send_recorded = await self.pipeline.send_recorded(d.msg_id)
        journal_n = self.core.journal_n
        self._written_n = None
        self.store.begin()
        try:
            after = self._write(self.core.delivery(d, p, self.clock(), send_recorded)
                                + [StoreRcmPosition(self.incarnation, d.n)])
            self.store.commit()
        except asyncio.CancelledError:
            self.store.rollback()
            self.core.rollback(journal_n if self._written_n is None else self._written_n)
            raise
        except Exception as e:
            self.store.rollback()
            if self._written_n is not None:
                # The journal already holds a delivery of this step: it is not refused, the database failed.
                # Restore the database from the journal on the next RCM connection, and retry then.
                self.core.rollback(self._written_n)
                self._journal_ahead = True
                raise
            self.core.rollback(journal_n)
            if storage_trouble(e):      # the disk's fault, not the message's: taken again when it has room
                raise
            self._quarantine(d, e)
            return
        self._rcm_n = d.n
        self._after(after)

    def _quarantine(self, d: Delivery, e: Exception) -> None:
        """Keep a delivery that could not be applied, and move past it (raises if the database is broken)."""
        log.error("quarantined delivery %s from %s (n %s): %s", d.msg_id, d.origin, d.n, e, exc_info=e)
        self.quarantined += 1
        self.apply([QuarantineDelivery(d.n, str(d.msg_id), str(d.origin), json.dumps(d.order, default=repr)[:1000],
                                       bytes(d.payload), f"{type(e).__name__}: {e}"[:1000], self.clock()),
                    StoreRcmPosition(self.incarnation, d.n)])
        self._rcm_n = d.n

    # --- the RCM connection -----------------------------------------------------------------------
    async def _rcm_loop(self) -> None:
        """Connect to RCM and apply its events; again after any failure, for as long as the server runs.

        A disk that cannot take a delivery (full, say) ends a connection, not the loop: the journal's
        deliveries the database lacks are stored first, and the connection resumes where the database
        stands; while the disk keeps failing the waits between tries double (``_stall``).
        """
        backoff = 0.1
        stalled = 0.0           # the wait after the disk failed, doubled while it keeps failing
        while not self._stopping:
            if self._journal_ahead:
                try:
                    self._recover(current=True)
                except Exception as e:
                    stalled = self._stall(stalled)
                    log.error("cannot store the journal's deliveries (%s); tried again in %.1f s",
                              storage_trouble(e) or f"{type(e).__name__}: {e}", stalled)
                    await asyncio.sleep(stalled)
                    continue
                self._journal_ahead = False
            since = (self._rcm_inc, self._rcm_n) if self._rcm_inc is not None else None
            try:
                try:
                    client = await self._rcm_connect(since)
                except RcmUnavailable:
                    raise
                except rcm_port.RcmError as e:
                    if since is None:
                        raise
                    log.warning("RCM refused to resume at %s (%s); connecting from its start", since, e)
                    client = await self._rcm_connect(None)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.warning("cannot reach the RCM server of %s (%s); retrying in %.1f s", self.site, e, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self.settings.rcm_retry_max)
                continue
            if client.incarnation != self._rcm_inc:
                self._rcm_inc, self._rcm_n, self._rcm_acked = client.incarnation, 0, 0
            self.incarnation = client.incarnation
            self.rcm = client
            self.rcm_connected.set()
            try:
                # Our will: should this connection end (a crash, a stop, a drop), RCM tells the other sites that
                # our users are offline; the full roster after our next connection brings them back.
                if not await client.will(encode_payload(ServerGone())):
                    log.warning("the RCM server of %s keeps no will (an earlier release): should this chat server "
                                "stop, the other sites will show its users online until it is back; restart the "
                                "RCM server to upgrade it", self.site)
                self.apply(self.core.rcm_connected(dict(client.statuses), dict(client.via)))
                log.info("connected to RCM of %s (incarnation %s, resuming after %s)", self.site,
                         client.incarnation, since)
                backoff = 0.1
                async for ev in client.events():
                    if isinstance(ev, Delivery):
                        if client.backlog():            # more deliveries wait: one write per client for them all
                            self.sessions.hold_turn()
                        await self._on_delivery(ev)
                    elif isinstance(ev, StatusChange):
                        self.apply(self.core.status_change(ev.site, ev.status, ev.via))
                    elif isinstance(ev, Missing):
                        self.apply(self.core.missing(ev.origin, tuple(ev.ranges)))
                    elif isinstance(ev, Latest):
                        self.positions.received(ev.origin, ev.key, ev.payload, ev.version, ev.expires_at)
                    stalled = 0.0
            except asyncio.CancelledError:
                raise
            except RcmUnavailable as e:
                log.warning("lost the RCM connection of %s: %s", self.site, e)
            except Exception as e:
                trouble = storage_trouble(e)
                if trouble is None:
                    log.exception("RCM event stream failed")
                else:
                    stalled = self._stall(stalled)
                    log.error("cannot store RCM's events (%s); they wait at RCM, taken again in %.1f s", trouble,
                              stalled)
            finally:
                self.rcm = None
                self.rcm_connected.clear()
                self.pipeline.rcm_lost()
                try:
                    await client.close()
                except Exception:
                    pass
            if self._stopping:
                return
            try:
                self.apply(self.core.rcm_lost())
            except Exception as e:
                log.error("cannot record the lost RCM connection (%s)", storage_trouble(e) or repr(e))
            await asyncio.sleep(max(backoff, stalled))

    def _stall(self, stalled: float) -> float:
        """The next wait of the RCM loop while the disk keeps failing: 0.5 s, doubled up to ``rcm_retry_max``."""
        return min(max(stalled * 2, 0.5), self.settings.rcm_retry_max)

    async def _ack(self) -> None:
        """Acknowledge processed deliveries to RCM (it may then forget them)."""
        rcm, n = self.rcm, self._rcm_n
        if rcm is not None and n > self._rcm_acked:
            await rcm.ack(n)
            self._rcm_acked = n

    async def flush_receipts(self, wait: float | None = None) -> None:
        """Send the receipts that waited ``wait`` (three quarters of ``receipt_interval`` unless given) without
        a chat message to ride in (core_sites.py); tell clients which lost messages repair brought back since
        the last tick."""
        self.apply(self.core.take_recovered())        # revised missing notices: local, needs no RCM
        if self.rcm is None:
            return
        wait = 0.75 * self.settings.receipt_interval if wait is None else wait
        for a in self.core.take_receipts(self.monotonic(), wait):
            await self._send_payload(a)

    async def flush_roster(self) -> None:
        """Tell local clients and other sites who is online here and who is in which room; push the directory
        entries that changed."""
        for room, claim in self.core.expire_claims(self.clock()):
            log.warning("room %r: %s said it is private (definition %s), which never came; open again",
                        room, claim.site, claim.def_id)
        actions, roster = self.core.publish_roster(self.sessions.online())
        self.apply(actions)             # (the new roster's generation is stored before it is sent)
        self.apply(self.core.take_directory())
        if roster is None:
            return
        try:
            await rcm_port.send(self.rcm, encode_payload(roster.payload, self.settings.compact_payloads),
                                list(roster.dests), within=roster.within)
        except Refusal as e:
            self.core.roster_force = True       # peers may lack it: a full roster next time
            log.debug("roster not sent: %s", e.message)
