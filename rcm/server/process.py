"""The RCM server process: sockets, timers and local clients around a SiteStack.

Theory of operation
-------------------
All protocol logic lives in ``rcm.stack.SiteStack`` (sans-IO). This module is
the edge: it owns the inter-site listener, the dials, one asyncio ``Protocol``
per TCP connection (``rcm.server.peerlink.PeerLink``, which asks what concerns
the site of this server through ``PeerHost``), the timer, and the local
client socket. Every event is
turned into one stack call with the current time, and the returned actions
are executed at once. One timer handle tracks the stack's earliest deadline.
The time is the wall clock's, never set back (``rcm.server.clock.SteadyClock``):
a step back of the host's clock is slewed away rather than stopping every
timer for its length; a step either way is logged once.

Writes. The stack coalesces a batch's bytes into one ``Transmit`` per
connection; the edge corks the plaintext further, per connection per
event-loop turn (``rcm.server.outbox``): every batch, read and TLS flight of
one turn goes out as one compressed chunk, one TLS record and one
``transport.write`` (one packet on a radio) from a ``call_soon`` callback at
the start of the next loop iteration; closing a connection writes what it
corked first. ``RcmServer.meter`` counts the composition of what was written
(the ``wire`` part of the stats). Each write tells the stack how many bytes
crossed the link for how many of its own (``SiteStack.wire_sent``: the
pacer of a paced link counts compressed bytes and TLS records). A write the
stack lets wait on a slow link (``Transmit.hold``) waits until its hold is
up, something urgent comes, or ``LINGER_BYTES`` are corked.

Local clients connect to a Unix socket at ``data_dir/<site>/rcm/rcm.sock``
and speak the local API's frames (``rcm.wire.local``); ``rcm.server.localclients``
keeps them, their backpressure and the replay log they read
(``rcm.durability.replay``); ``rcm.server.localapi`` says what their requests
do and what they are told, a batch of requests at a time.

With durability on, every event batch is handled in two phases: the stack's
``Persist`` records and the delivery records are appended to the write-ahead
log and forced to disk (group commit); only then are bytes sent to peers
(acks included), deliveries and ``accepted`` (every reply) written to
clients. The ``fdatasync`` runs in one worker thread, never in the event
loop (``rcm.server.logworker``): a batch's effects wait (``rcm.server.commits``;
in order, behind every earlier batch) until the sync covering its records
completed, while the loop goes on reading frames and running the stack; the
batches that arrive meanwhile share the next sync. During a long sync only
liveness-only heartbeats overtake the held frames. A failed sync halts the
server with nothing held released. ``state.json``'s
reservation (every ``BLOCK`` sequence numbers) is written by the same worker.
"""
from __future__ import annotations

import asyncio
import itertools
import logging
import os
import signal
import ssl
import time
from collections.abc import Callable, Hashable
from typing import Any, cast

from contracts.mission import Mission
from contracts.text import duration
from rcm import wire
from rcm.actions import Close, Delivery, Dial, Log, Persist, Transmit
from rcm.durability.dirlock import lock_dir, unlock_dir
from rcm.durability.replay import DeliveryLog
from rcm.durability.state import DurableState
from rcm.durability.wal import Wal, WalError, private_dir
from rcm.server.clock import SteadyClock
from rcm.server.commits import Stream
from rcm.server.localapi import TOLD, LocalApi
from rcm.server.localclients import ClientProtocol, LocalClients
from rcm.server.logworker import LogWorker
from rcm.server.outbox import WireMeter
from rcm.server.peerlink import PeerLink, WriteTurns
from rcm.server.tls import tls_contexts
from rcm.server.tlslink import SiteTls
from rcm.stack import SiteStack, recovery
from rcm.wire.local import socket_path

log = logging.getLogger("rcm")
LOG_LEVELS = {"info": logging.INFO, "warning": logging.WARNING, "critical": logging.CRITICAL}


class RcmServer:
    """One site's RCM server."""

    def __init__(self, mission: Mission, site: str, wall: Callable[[], float] = time.time) -> None:
        """``wall``: the host's wall clock (seconds since the epoch), read through ``SteadyClock``."""
        self.mission = mission
        self.site = site
        self.cfg = mission.site(site)
        self.steady = SteadyClock(wall)
        self.clock: Callable[[], float] = self.steady
        self.dir = mission.site_dir(site) / "rcm"
        # Before anything here reads or repairs the log: one server per site directory (rcm.durability.dirlock).
        private_dir(self.dir)
        lock_dir(self.dir, f"site {site}'s RCM server")
        try:
            self._open(mission, site, self.clock, wall)
        except BaseException:
            unlock_dir(self.dir)
            raise

    def _open(self, mission: Mission, site: str, clock: Callable[[], float], wall: Callable[[], float]) -> None:
        """The rest of ``__init__``, with the directory's lock held: the state file, the log and the stack.
        ``wall``: the host's clock, for TLS sessions (OpenSSL stamps them with it)."""
        self.state = DurableState.open(self.dir)
        self.durable = mission.rcm.durable
        self.wal: Wal | None = Wal(self.dir, mission.rcm.wal_max_bytes) if self.durable else None
        if self.wal is not None and self.wal.set_aside:
            # Its records cannot be trusted to match what the peers hold: a new stream, as after a lost disk.
            self.state.new_log()
            log.critical("site %s: %s; starting afresh with an empty log (its peers take it as restarted; "
                         "messages only that log held are lost)", site, self.wal.set_aside)
        self.log_id = self.state.log_id if self.durable else self.state.incarnation
        # Peers know this site's reliable stream by this identity: with durability
        # the stream (link sequence numbers, buffers, frontiers) survives restarts,
        # so it keeps its identity and peers resume it exactly; without, every
        # start is a new stream and peers reset their receive state.
        self.stack = SiteStack(site, list(mission.sites), mission.rcm, self.log_id,
                               clock(), mission=mission.name, first_seq=self.state.first_seq,
                               durable=self.durable, boot=self.state.incarnation,
                               rates=mission.sites[site].rate,
                               link_rates={s: sc.rate for s, sc in mission.sites.items()})
        self._conn_ids = itertools.count(1)
        self._upgrading = 0            # accepted connections in their TLS handshake
        self._refused_log_at = float("-inf")
        self._refused_since_log = 0
        self._conns: dict[int, PeerLink] = {}
        self.meter = WireMeter()                         # what the connections wrote (rcm.server.outbox)
        self.turns = WriteTurns()                   # when the connections' corked bytes are written
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = float("inf")
        self._servers: list[asyncio.AbstractServer] = []
        self._tasks: set[asyncio.Task[Any]] = set()
        # With [rcm] tls: the contexts, the newest session made with each peer this site dialed, to resume on
        # the next dial, and the handshake counts (rcm.server.tlslink.SiteTls).
        self.tls = SiteTls(*tls_contexts(mission, site), wall) if mission.rcm.tls else None
        self.compression = mission.rcm.compression == "zstd"       # what PeerLink reads (rcm.server.peerlink)
        self.tls_continue = mission.rcm.tls_continue                # (rcm.server.tlscontinue)
        self.hello_max_frame = self.stack.connections.hello_max_frame
        self.handshake_timeout = mission.rcm.handshake_timeout
        self.deliveries = DeliveryLog(mission.rcm.replay_log_bytes)
        self.stopping = False
        self.failed: str | None = None   # why the server halted (the log could not be written)
        self.halted = asyncio.Event()
        # Group commit off the loop (rcm.server.logworker): batches wait for the sync covering them, run by
        # one worker thread; liveness-only heartbeats go meanwhile.
        self.log_worker: LogWorker | None = None
        if self.wal is not None:
            self.log_worker = LogWorker(self.wal, self.state, site, mission.rcm.heartbeat_timeout, clock,
                                        snapshot=lambda: recovery.compacted(self.stack, self.deliveries),
                                        release=self._release, halt=self._halt, send=self._keepalive)
        self.recovered: list[Any] = []
        if self.wal is not None and self.wal.records:
            self._recover(self.wal.records)
        # After recovery: what the replay log holds then is on disk, so clients may read it.
        self.clients = LocalClients(site, self.deliveries, mission.rcm.client_queue_bytes, clock)
        self.api = LocalApi(site, self.stack, self.log_id, self.deliveries, self.wal, self.clients,
                            apply=self._apply, stats=self.stats, clock=clock)

    def _recover(self, records: list[Any]) -> None:
        """Rebuild the replay log and client acks, then the stack, from the log."""
        self.deliveries.recover(records)
        self.recovered = self.stack.restore(records, self.clock())
        log.info("site %s recovered %d log records: %d deliveries numbered up to %d, %d pending "
                 "messages delivered now%s", self.site, len(records), len(self.deliveries),
                 self.deliveries.last_n, sum(isinstance(a, Delivery) for a in self.recovered),
                 f" (a torn tail of {self.wal.truncated_bytes} bytes was cut)"
                 if self.wal and self.wal.truncated_bytes else "")

    @property
    def tls_sessions(self) -> dict[str, ssl.SSLSession]:
        """The sessions this site keeps to resume, per peer it dialed (``SiteTls.sessions``; none without TLS)."""
        return self.tls.sessions if self.tls is not None else {}

    @property
    def tls_handshakes(self) -> dict[str, int]:
        """Handshakes made, full and resumed (``SiteTls.handshakes``)."""
        return self.tls.handshakes if self.tls is not None else {"full": 0, "resumed": 0, "continued": 0}

    @property
    def upgrading(self) -> int:
        """Accepted connections in their TLS handshake now (counted against ``max_handshaking``)."""
        return self._upgrading

    # -- lifecycle ------------------------------------------------------------
    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        srv = await loop.create_server(lambda: PeerLink(self, None), self.cfg.rcm.host,
                                       self.cfg.rcm.port, reuse_address=True)
        self._servers.append(srv)
        path = socket_path(self.mission, self.site)
        if len(os.fsencode(path)) > 100:
            raise OSError(f"client socket path {path} is too long for a Unix socket; "
                          "use a shorter [mission] data_dir")
        if path.exists() or path.is_symlink():
            path.unlink()
        csrv = await loop.create_unix_server(lambda: ClientProtocol(self), str(path))
        os.chmod(path, 0o660)
        self._servers.append(csrv)
        if not self.tls:
            rc = self.mission.rcm
            if rc.insecure_plaintext:
                log.warning("%s: INSECURE: tls = false with [rcm] insecure_plaintext = true: any host that "
                            "reaches %s can claim to be any site of the mission, forge its messages and make "
                            "this site drop what it buffered. For a closed lab network only.", self.site,
                            self.cfg.rcm)
            else:
                log.info("%s: tls = false: inter-site links are plaintext on loopback addresses only",
                         self.site)
        log.info("site %s up: incarnation %d, peers at %s, clients at %s, ordering %s, p2p %s, %s",
                 self.site, self.state.incarnation, self.cfg.rcm, path, self.mission.rcm.ordering,
                 self.mission.rcm.p2p, "durable" if self.durable else "not durable")
        if self.recovered:
            self._apply(self.recovered)
            self.recovered = []
        self._apply(self.stack.start(self.clock()))

    async def stop(self) -> None:
        """Close listeners and connections; deliveries already handed out stay handed out, and what the
        log's last sync promises goes out first (a stop waits for it)."""
        self.stopping = True
        for s in self._servers:
            s.close()
        # Nothing new comes in (timers stop on ``stopping``), so the log's last sync is the last one.
        for tr in [p.transport for p in self._conns.values()] + [c.transport for c in self.clients.members]:
            if tr is not None and not tr.is_closing():
                tr.pause_reading()
        await self.settled()
        self.clients.close_all()
        for p in list(self._conns.values()):
            p.closed_by_us = True
            if p.transport is not None:
                p.send(wire.encode_frame([wire.BYE, wire.BYE_SHUTDOWN]))
                p.close()
        for t in list(self._tasks):
            t.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        for s in self._servers:
            await s.wait_closed()
        if self._timer is not None:
            self._timer.cancel()
        if self.log_worker is not None:
            self.log_worker.close(abandon=bool(self.failed))
        try:
            socket_path(self.mission, self.site).unlink()
        except FileNotFoundError:
            pass
        unlock_dir(self.dir)

    # -- actions --------------------------------------------------------------
    def _apply(self, actions: list[Any]) -> None:
        """Execute stack actions: their records to the log, then, once the sync covering them completed (at
        once when nothing waits), the world (``_release``)."""
        if self.failed:
            return
        # The sequence numbers just handed out must be durably reserved before any frame carrying them leaves
        # this process: in the log worker, before the sync this batch waits for, when there is one.
        wal, worker = self.wal, self.log_worker
        if wal is None or worker is None:
            try:
                self.state.reserve_through(self.stack.msg_seq + 1)
            except OSError as e:
                self._halt(f"cannot write {self.state.path}: {e.strerror or e}")
                return
            self._release([d if type(d) is not Delivery else self.deliveries.add(d)[0] for d in actions])
            return
        reservation = self.state.advance(self.stack.msg_seq + 1)
        effects: list[Any] = []
        conns: set[Hashable] = set()
        for a in actions:
            t = type(a)
            if t is Persist:
                wal.append(a.record)
            elif t is Delivery:
                frame, record = self.deliveries.add(a)
                wal.append(record)
                effects.append(frame)
            else:
                if t is Transmit:
                    conns.add(a.conn)
                effects.append(a)
        # Where each stream stands after this batch: a liveness heartbeat written while a later batch waits
        # for its sync names this position (rcm.server.commits.Keepalive).
        for conn in conns:
            c = self.stack.conns.get(conn)
            effects.append(Stream(conn, c.tx_next if c is not None and c.open else None))
        worker.batch(effects, reservation)
        self._schedule()

    def _release(self, effects: list[Any]) -> None:
        """A batch's effects, once nothing it promises can be lost: bytes to peers, replies and deliveries to
        clients, status events, closes and dials, in the order the stack made them."""
        now: float | None = None
        for a in effects:
            t = type(a)
            if t is list:
                self.clients.broadcast_delivery(a)
            elif t is Transmit:
                p = self._conns.get(a.conn)
                if p is not None:
                    p.send(a.data, a.hold)
            elif t in TOLD:
                self.api.release(a)
            elif t is Stream:
                if now is None:
                    now = self.clock()
                if self.log_worker is not None:
                    self.log_worker.released(a.conn, a.position, now)
            elif t is Close:
                if self.log_worker is not None:
                    self.log_worker.lost(a.conn)
                p = self._conns.pop(a.conn, None)
                if p is not None:
                    p.close()
            elif t is Dial:
                self._spawn(self._dial(a.peer))
            elif t is Log:
                log.log(LOG_LEVELS.get(a.level, logging.INFO), "%s: %s", self.site, a.message)
        self.clients.trim()
        self.clients.flush()
        self._schedule()

    def _keepalive(self, conn: Hashable, frame: bytes) -> bool:
        """A liveness-only heartbeat ahead of held frames (``rcm.server.logworker``); False: no such connection."""
        p = self._conns.get(cast(int, conn))
        if p is None:
            return False
        p.send(frame)
        return True

    async def settled(self) -> None:
        """Until no log job is in flight (every held batch released, or the server halted)."""
        if self.log_worker is not None:
            await self.log_worker.settled()

    def want_flush(self, p: PeerLink, hold: float = 0.0) -> None:
        self.turns.want_flush(p, hold)

    # -- what a PeerLink asks of its server (rcm.server.peerlink.PeerHost) ------------------------------
    def next_conn_id(self) -> int:
        return next(self._conn_ids)

    def admit_handshake(self, peername: Any) -> bool:
        if self._upgrading + self.stack.handshaking() >= self.stack.max_handshaking:
            self._handshake_refused(peername)
            return False
        self._upgrading += 1
        return True

    def handshake_ended(self) -> None:
        self._upgrading -= 1

    def link_established(self, link: PeerLink, identity: tuple[str, str] | None) -> None:
        self._conns[link.id] = link
        self._apply(self.stack.connection_made(link.id, self.clock(), link.dialed, identity))

    def link_received(self, link: PeerLink, data: bytes) -> None:
        self._apply(self.stack.data_received(link.id, data, self.clock()))

    def link_lost(self, link: PeerLink, tell_stack: bool) -> None:
        known = self._conns.pop(link.id, None) is not None
        if known and tell_stack and not self.stopping:
            self._apply(self.stack.connection_lost(link.id, self.clock()))

    def slow_link(self, peer: str) -> bool:
        return self.stack.slow_link(peer)

    def dial_failed(self, peer: str) -> None:
        if not self.stopping:
            self._apply(self.stack.dial_failed(peer, self.clock()))

    def link_wrote(self, link: PeerLink, sent: int, plain: int) -> None:
        # What the link carried for what the stack charged its pacer.
        if not self.stopping and self.stack.wire_sent(link.id, sent, plain, self.clock()):
            self._schedule()

    def who(self, link: PeerLink) -> str:
        c = self.stack.conns.get(link.id)
        return c.who() if c is not None else "a peer"

    def _handshake_refused(self, peername: Any) -> None:
        """An accepted connection found max_handshaking others in handshake; log once a minute."""
        self.stack.refused_at_edge()
        self._refused_since_log += 1
        now = time.monotonic()
        if now >= self._refused_log_at + 60.0:
            log.warning("%s: refused a connection from %s: %d connections in handshake ([rcm] "
                        "max_handshaking); %d refused since the last such line", self.site, peername,
                        self.stack.max_handshaking, self._refused_since_log)
            self._refused_log_at = now
            self._refused_since_log = 0

    def _halt(self, reason: str) -> None:
        """The log failed: make no promise of this batch, close everything, and stop.

        A server that cannot log cannot keep what it promised; it stops (exit
        status 1) and a restart recovers from the log, which ``Wal.sync`` left
        whole. Nothing of the failed batch (replies, deliveries, frames) is sent.
        """
        self.failed = reason
        self.stopping = True
        dropped = self.log_worker.fail() if self.log_worker is not None else 0
        log.critical("%s: %s: stopping; a restart recovers from the log (%d event batches held for the log "
                     "are never released)", self.site, reason, dropped)
        self.clients.abort_all()
        for p in list(self._conns.values()):
            p.closed_by_us = True
            if p.transport is not None:
                p.transport.abort()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.halted.set()

    def _compact(self) -> None:
        """Rewrite the log as the live state only, now, in the loop (the server compacts in its log worker);
        only after ``settled``."""
        assert self.log_worker is not None
        self.log_worker.compact_now()

    def _schedule(self) -> None:
        deadline = self.stack.next_deadline()
        if deadline is None or deadline >= self._timer_at:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = deadline
        self._timer = asyncio.get_running_loop().call_later(max(0.0, deadline - self.clock()), self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at = float("inf")
        if not self.stopping:
            self._apply(self.stack.timer(self.clock()))
            step = self.steady.take_step()
            if step is not None:
                self._log_step(step)

    def _log_step(self, step: float) -> None:
        if step > 0:
            log.warning("%s: the host's wall clock stepped forward %.1f s; RCM takes it at once (timers due within "
                        "it fire now: a peer may show suspected for a moment)", self.site, step)
            return
        ahead = self.steady.offset()
        log.warning("%s: the host's wall clock stepped back %.1f s; RCM's timers go on, its clock running up to "
                    "%g%% slow until it is back on the host's (%.1f s ahead now, about %s); until then it judges "
                    "expiry by its own time (a restart of the RCM server takes the host's at once)",
                    self.site, -step, self.steady.slew * 100, ahead, duration(ahead / self.steady.slew))

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _dial(self, peer: str) -> None:
        if self.stack.holds_dial(peer, self._upgrading):
            log.debug("%s: dial of %s held: an accepted connection is in its handshake", self.site, peer)
            self._apply(self.stack.dial_failed(peer, self.clock()))
            return
        addr = self.cfg.dial_address(self.mission.site(peer))
        loop = asyncio.get_running_loop()
        try:
            await asyncio.wait_for(
                loop.create_connection(lambda: PeerLink(self, peer), addr.host, addr.port),
                timeout=self.stack.dial_timeout(peer))
        except (TimeoutError, OSError) as e:
            if not self.stopping:
                log.debug("%s: dial %s at %s failed: %s", self.site, peer, addr, e)
                self._apply(self.stack.dial_failed(peer, self.clock()))

    def stats(self) -> dict[str, Any]:
        """The stack's statistics and the edge's: clients, replay log, compression, wire, TLS, the log."""
        stats = self.stack.stats()
        stats["clients"] = sorted(x.name or "?" for x in self.clients.members)
        stats["replay_log"] = len(self.deliveries)
        stats["replay_log_bytes"] = self.deliveries.bytes
        stats["clients_dropped"] = self.clients.dropped
        stats["clients_refused"] = self.clients.refused      # past localclients.MAX_CLIENTS
        stats["compression"] = self.compression_stats()
        stats["wire"] = self.meter.snapshot()
        if self.tls:
            stats["tls_handshakes"] = dict(self.tls_handshakes)
        if self.log_worker is not None:
            stats["wal"] = self.log_worker.stats()
        return stats

    def compression_stats(self) -> dict[str, dict[str, Any]]:
        """Per connected peer: the stack's bytes and the socket's both ways, and whether it compresses."""
        out: dict[str, dict[str, Any]] = {}
        for p in self._conns.values():
            c = self.stack.conns.get(p.id)
            if c is not None and c.peer is not None and c.open:
                k = p.codec
                out[c.peer] = {"compressed": bool(k.compressed), "raw_out": k.raw_out, "wire_out": k.wire_out,
                               "raw_in": k.raw_in, "wire_in": k.wire_in}
        return out

async def serve(mission: Mission, site: str, ready: Callable[[], None] | None = None) -> None:
    """Run a site's server until SIGINT/SIGTERM."""
    server = RcmServer(mission, site)
    # The loop takes the signals over before the server starts: its client socket answers (a supervisor's
    # sign that it is ready) before ``start`` is done, and a stop asked then must still run ``stop`` (and
    # remove the socket), not end the process where it stands (rcm.cli.stop_on_term).
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await server.start()
    if ready:
        ready()
    stopped, halted = loop.create_task(stop.wait()), loop.create_task(server.halted.wait())
    await asyncio.wait([stopped, halted], return_when=asyncio.FIRST_COMPLETED)
    stopped.cancel()
    halted.cancel()
    log.info("site %s stopping", site)
    await server.stop()
    if server.failed:
        raise WalError(server.failed)
