"""The RCM server process: sockets, timers and local clients around a SiteStack.

Theory of operation
-------------------
All protocol logic lives in ``rcm.stack.SiteStack`` (sans-IO). This module is
the edge: it owns the inter-site listener, the dials, one asyncio ``Protocol``
per TCP connection, the timer, and the local client socket. Every event is
turned into one stack call with the current wall-clock time, and the returned
actions are executed at once (writes are coalesced per connection by the
stack). One timer handle tracks the stack's earliest deadline.

Local clients connect to a Unix socket at ``data_dir/<site>/rcm/rcm.sock`` and
speak msgpack frames (same framing as the wire; see docs/rcm.md):

    client -> server: ["hello", name, since_incarnation|nil, since_n|nil]
                      ["send", ref, payload, dests|nil]
                      ["ack", n]        ["stats", ref]
    server -> client: ["welcome", site, sites, incarnation, statuses, ordering, first_n, last_n]
                      ["accepted", ref, msg_id, seq, order|nil, skipped]
                      ["refused", ref, code, message]
                      ["d", n, origin, seq, order, late, payload]
                      ["status", site, status]   ["missing", origin, [[first, last], ...]]
                      ["stats", ref, {...}]      ["error", message]

Every client receives every delivery and status event (the chat server, a
monitor and a bot can share a site). Deliveries are numbered ``n`` from 1 and
kept in a replay log; a client that reconnects with ``since=(log_id, n)`` gets
everything after ``n``. The welcome's third field is that ``log_id``: with
``durable = true`` (the default) the numbering and the replay log survive
restarts, so ``log_id`` changes only if the server's state is lost; with
durability off it is the incarnation. The replay log is trimmed to the
smallest ``ack`` among clients that have acknowledged (by name), and to at
most ``replay_log_bytes`` (payloads plus a fixed overhead per entry) and
``REPLAY_LOG_MAX`` entries.

Slow clients (backpressure). A client is *live* while what is queued for it
(our pending frames plus the transport's buffer) stays under
``LIVE_QUEUE_BYTES``: deliveries are written to it as they happen. Past that,
or while its transport asks us to pause writing, it *catches up*: deliveries
are not copied to it any more; it reads them from the replay log, a chunk at
a time as its transport drains (``resume_writing``), and turns live again once
it has read the last one. A resume with ``since`` starts in that mode, so any
backlog is sent paced by the client's own reading. So a client costs at most
about ``LIVE_QUEUE_BYTES`` plus a chunk; one that stops reading is dropped
(logged with the reason; it resumes with ``since``) when what is queued for it
passes ``client_queue_bytes`` or when the replay log has dropped a delivery it
has not read yet.

With durability on, every event batch is handled in two phases: the stack's
``Persist`` records and the delivery records are appended to the write-ahead
log and forced to disk once (group commit); only then are bytes sent to peers
(acks included), deliveries and ``accepted`` replies written to clients.
"""
from __future__ import annotations

import asyncio
import itertools
import logging
import os
import signal
import ssl
import time
from collections import deque
from pathlib import Path
from typing import Any, Callable

from . import ranges, wire
from .config import Mission
from .stack import (Close, Delivered, Dial, Log, MissingNotice, Persist, SendError, SiteStack,
                    StatusChanged, Transmit)
from .state import DurableState
from .wal import Wal, WalError

log = logging.getLogger("rcm")

REPLAY_LOG_MAX = 200_000
REPLAY_ENTRY_OVERHEAD = 160      # bytes a replay entry costs beyond its payload (counted in replay_log_bytes)
CLIENT_MAX_FRAME = 8 << 20
LIVE_QUEUE_BYTES = 1 << 20       # past this queued for a client, it catches up from the replay log
REPLAY_CHUNK_BYTES = 256 << 10   # replay frames written to a catching-up client at a time


def socket_path(mission: Mission, site: str) -> Path:
    """Where site ``site``'s RCM server listens for local clients."""
    return mission.site_dir(site) / "rcm" / "rcm.sock"


class TlsError(Exception):
    """TLS is on but the site's certificates are missing or unusable."""


def tls_paths(mission: Mission, site: str) -> dict[str, Path]:
    d = mission.site_dir(site) / "tls"
    return {"ca": d / "ca.pem", "cert": d / "cert.pem", "key": d / "key.pem"}


def tls_contexts(mission: Mission, site: str) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """(server, client) contexts for mutual TLS with the mission CA.

    Both sides present their site certificate and require the peer's, signed
    by the mission CA. Host names are not checked by TLS: the peer's site and
    mission are read from its certificate (CN, O) and must match its HELLO.
    """
    paths = tls_paths(mission, site)
    for what, path in paths.items():
        if not path.exists():
            raise TlsError(f"tls = true but {path} is missing (create certificates with "
                           f"`python -m deploy certs --mission {mission.path or 'FILE'}`)")
    try:
        server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(paths["ca"]))
        server.verify_mode = ssl.CERT_REQUIRED
        server.load_cert_chain(str(paths["cert"]), str(paths["key"]))
        client = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(paths["ca"]))
        client.check_hostname = False
        client.verify_mode = ssl.CERT_REQUIRED
        client.load_cert_chain(str(paths["cert"]), str(paths["key"]))
    except (ssl.SSLError, OSError) as e:
        raise TlsError(f"cannot load TLS material from {paths['cert'].parent}: {e}") from None
    for ctx in (server, client):
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    return server, client


def certificate_identity(transport: asyncio.BaseTransport) -> tuple[str, str] | None:
    """(CN, O) of the peer's verified certificate, or None without TLS."""
    cert = transport.get_extra_info("peercert")
    if not cert:
        return None
    fields = {k: v for rdn in cert.get("subject", ()) for k, v in rdn}
    return str(fields.get("commonName", "")), str(fields.get("organizationName", ""))


class _PeerProtocol(asyncio.Protocol):
    """One inter-site TCP connection."""

    def __init__(self, server: "RcmServer", dialed: str | None) -> None:
        self.server = server
        self.dialed = dialed
        self.id: int = next(server._conn_ids)
        self.transport: asyncio.Transport | None = None
        self.closed_by_us = False
        self.ready = False
        self.early: list[bytes] = []   # bytes that arrived before the TLS upgrade returned

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if self.transport is not None:
            return  # start_tls hands the upgraded transport over itself
        self.transport = transport  # type: ignore[assignment]
        srv = self.server
        if srv.tls:
            if self.dialed is None:
                # A TLS handshake in progress counts against max_handshaking
                # like a connection waiting for its HELLO (the stack counts those).
                if srv._upgrading + srv.stack.handshaking() >= srv.stack.max_handshaking:
                    self.closed_by_us = True
                    srv._handshake_refused(transport.get_extra_info("peername"))
                    transport.abort()
                    return
                srv._upgrading += 1
            srv._spawn(self._upgrade(transport))
        else:
            self._established(None)

    async def _upgrade(self, transport: asyncio.BaseTransport) -> None:
        """Mutual TLS on a fresh connection; a refused handshake is logged, nothing else moves."""
        srv = self.server
        peername = transport.get_extra_info("peername")
        ctx = srv._ssl_client if self.dialed else srv._ssl_server
        try:
            try:
                tls = await asyncio.get_running_loop().start_tls(
                    transport, self, ctx, server_side=self.dialed is None,  # type: ignore[arg-type]
                    server_hostname=self.dialed, ssl_handshake_timeout=srv.mission.rcm.handshake_timeout)
            finally:
                if self.dialed is None:
                    srv._upgrading -= 1
        except (ssl.SSLError, OSError, asyncio.TimeoutError, ConnectionError) as e:
            reason = getattr(e, "reason", None) or str(e) or type(e).__name__
            who = f"dialing {self.dialed}" if self.dialed else f"from {peername}"
            log.warning("%s: TLS handshake %s refused: %s", srv.site, who, reason)
            self.closed_by_us = True
            transport.abort()
            if self.dialed and not srv.stopping:
                srv._apply(srv.stack.dial_failed(self.dialed, srv.clock()))
            return
        if tls is None:
            return
        self.transport = tls  # type: ignore[assignment]
        identity = certificate_identity(tls)
        if identity is None:
            log.warning("%s: closing a connection %s without a peer certificate", srv.site, peername)
            self.closed_by_us = True
            tls.close()
            return
        self._established(identity)

    def _established(self, identity: tuple[str, str] | None) -> None:
        self.server._conns[self.id] = self
        self.ready = True
        self.server._apply(self.server.stack.connection_made(self.id, self.server.clock(), self.dialed,
                                                             identity))
        early, self.early = self.early, []
        for data in early:
            self.data_received(data)

    def data_received(self, data: bytes) -> None:
        if not self.ready:
            self.early.append(data)
            return
        self.server._apply(self.server.stack.data_received(self.id, data, self.server.clock()))

    def connection_lost(self, exc: Exception | None) -> None:
        known = self.server._conns.pop(self.id, None) is not None
        if known and not self.closed_by_us and not self.server.stopping:
            self.server._apply(self.server.stack.connection_lost(self.id, self.server.clock()))


class _ClientProtocol(asyncio.Protocol):
    """One local client on the Unix socket."""

    def __init__(self, server: "RcmServer") -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.decoder = wire.FrameDecoder(CLIENT_MAX_FRAME, tag=str)
        self.name: str | None = None
        self.subscribed = False
        self.pending: list[bytes] = []
        self.pending_bytes = 0
        self.replay_next: int | None = None   # catching up: the next delivery n to read from the replay log
        self.paused = False                   # the transport asked us to stop writing
        self.dropped = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        if self.replay_next is not None:
            self.server._pump_replay(self)
            self.server._check_queue(self)

    def queued(self) -> int:
        """Bytes written for this client that it has not read: ours, and the transport's buffer."""
        buffered = 0
        if self.transport is not None and not self.transport.is_closing():
            buffered = self.transport.get_write_buffer_size()
        return self.pending_bytes + buffered

    def data_received(self, data: bytes) -> None:
        srv = self.server
        failure: str | None = None
        try:
            frames = self.decoder.feed(data)
        except wire.FrameError as e:
            frames, failure = [], f"bad frame: {e}"
        try:
            for f in frames:
                try:
                    srv._client_request(self, f)
                except (ValueError, TypeError, IndexError) as e:
                    failure = f"bad request {f[0]!r}: {e}"
                    break
        finally:
            # One batch of requests: one log sync, then replies and frames out.
            actions, srv._visible = srv._visible, []
            srv._apply(actions)
        if failure is not None:
            # Only now: the ``accepted`` replies of this batch's good requests
            # went out after the log sync they promise, not before it.
            self._fail(failure)

    def write(self, data: bytes) -> None:
        self.pending.append(data)
        self.pending_bytes += len(data)

    def flush(self) -> None:
        if self.pending and self.transport is not None and not self.transport.is_closing():
            self.transport.write(b"".join(self.pending))
        self.pending.clear()
        self.pending_bytes = 0

    def _fail(self, message: str) -> None:
        log.warning("client %s: %s", self.name or "?", message)
        self.write(wire.encode_frame(["error", message]))
        self.flush()
        if self.transport is not None:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.server._clients.discard(self)
        self.server._dirty_clients.discard(self)


class RcmServer:
    """One site's RCM server."""

    def __init__(self, mission: Mission, site: str, clock: Callable[[], float] = time.time) -> None:
        self.mission = mission
        self.site = site
        self.cfg = mission.site(site)
        self.clock = clock
        self.dir = mission.site_dir(site) / "rcm"
        self.state = DurableState.open(self.dir)
        self.durable = mission.rcm.durable
        self.log_id = self.state.log_id if self.durable else self.state.incarnation
        # Peers know this site's reliable stream by this identity: with durability
        # the stream (link sequence numbers, buffers, frontiers) survives restarts,
        # so it keeps its identity and peers resume it exactly; without, every
        # start is a new stream and peers reset their receive state.
        self.stack = SiteStack(site, list(mission.sites), mission.rcm, self.log_id,
                               clock(), mission=mission.name, first_seq=self.state.first_seq,
                               durable=self.durable, boot=self.state.incarnation)
        self.wal: Wal | None = Wal(self.dir, mission.rcm.wal_max_bytes) if self.durable else None
        self._conn_ids = itertools.count(1)
        self._upgrading = 0            # accepted connections in their TLS handshake
        self._refused_log_at = float("-inf")
        self._refused_since_log = 0
        self._conns: dict[int, _PeerProtocol] = {}
        self._clients: set[_ClientProtocol] = set()
        self._dirty_clients: set[_ClientProtocol] = set()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = float("inf")
        self._servers: list[asyncio.AbstractServer] = []
        self._tasks: set[asyncio.Task] = set()
        self.tls = mission.rcm.tls
        self._ssl_server, self._ssl_client = tls_contexts(mission, site) if self.tls else (None, None)
        self.replay: deque[list] = deque()   # ["d", n, origin, seq, key, late, payload]
        self.replay_first = 1          # n of replay[0]
        self.replay_bytes = 0          # what replay_log_bytes counts
        self.clients_dropped = 0
        self.delivered_n = 0
        self.acks: dict[str, int] = {}
        self.stopping = False
        self.failed: str | None = None   # why the server halted (the log could not be written)
        self.halted = asyncio.Event()
        self._visible: list = []       # actions held until the log is on disk
        self._compacted_size = 0
        self.compactions = 0
        self.recovered: list = []
        if self.wal is not None and self.wal.records:
            self._recover(self.wal.records)

    def _recover(self, records: list[list]) -> None:
        """Rebuild the replay log and client acks, then the stack, from the log."""
        for r in records:
            if r[0] == "N":
                # Delivery counter at a compaction (the replay window may be empty).
                if r[1] > self.delivered_n:
                    self.delivered_n = r[1]
                    self.replay_first = r[1] + 1
            elif r[0] == "D":
                frame = ["d", *r[1:]]
                if self.replay and r[1] <= self.delivered_n:
                    continue
                if not self.replay:
                    self.replay_first = r[1]
                self._replay_append(frame)
                self.delivered_n = r[1]
            elif r[0] == "K":
                self.acks[r[1]] = max(self.acks.get(r[1], 0), r[2])
        self._trim_replay()
        self.recovered = self.stack.restore(records, self.clock())
        log.info("site %s recovered %d log records: %d deliveries numbered up to %d, %d pending "
                 "messages delivered now%s", self.site, len(records), len(self.replay), self.delivered_n,
                 sum(isinstance(a, Delivered) for a in self.recovered),
                 f" (a torn tail of {self.wal.truncated_bytes} bytes was cut)"  # type: ignore[union-attr]
                 if self.wal and self.wal.truncated_bytes else "")

    # -- lifecycle ------------------------------------------------------------
    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        srv = await loop.create_server(lambda: _PeerProtocol(self, None), self.cfg.rcm.host,
                                       self.cfg.rcm.port, reuse_address=True)
        self._servers.append(srv)
        path = socket_path(self.mission, self.site)
        if len(os.fsencode(path)) > 100:
            raise OSError(f"client socket path {path} is too long for a Unix socket; "
                          "use a shorter [mission] data_dir")
        if path.exists() or path.is_symlink():
            path.unlink()
        csrv = await loop.create_unix_server(lambda: _ClientProtocol(self), str(path))
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
        """Close listeners and connections; deliveries already handed out stay handed out."""
        self.stopping = True
        for s in self._servers:
            s.close()
        for c in list(self._clients):
            c.flush()
            if c.transport is not None:
                c.transport.close()
        for p in list(self._conns.values()):
            p.closed_by_us = True
            if p.transport is not None:
                p.transport.write(wire.encode_frame([wire.BYE, "server shutting down"]))
                p.transport.close()
        for t in list(self._tasks):
            t.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        for s in self._servers:
            await s.wait_closed()
        if self._timer is not None:
            self._timer.cancel()
        if self.wal is not None:
            if self.failed:
                self.wal.abandon()
            else:
                self.wal.close()
        try:
            socket_path(self.mission, self.site).unlink()
        except FileNotFoundError:
            pass

    # -- actions --------------------------------------------------------------
    def _apply(self, actions: list) -> None:
        """Execute stack actions: log first (one fdatasync per batch), then the world."""
        if self.failed:
            return
        # The sequence numbers just handed out must be durably reserved before
        # any frame carrying them leaves this process.
        try:
            self.state.reserve_through(self.stack.msg_seq + 1)
        except OSError as e:
            self._halt(f"cannot write {self.state.path}: {e.strerror or e}")
            return
        wal = self.wal
        visible = []
        for a in actions:
            t = type(a)
            if t is Persist:
                if wal is not None:
                    wal.append(a.record)
            elif t is Delivered:
                self.delivered_n += 1
                frame = ["d", self.delivered_n, a.origin, a.seq, list(a.key), a.late, a.payload]
                if wal is not None:
                    wal.append(["D", *frame[1:]])
                self._replay_append(frame)
                visible.append(frame)
            else:
                visible.append(a)
        if wal is not None:
            try:
                wal.sync()
                # Compact past the limit, and only once the log has doubled since the
                # last compaction, so a large live state is not rewritten every batch.
                if wal.size > max(wal.max_bytes, 2 * self._compacted_size):
                    self._compact()
            except WalError as e:
                self._halt(str(e))
                return
        for a in visible:
            t = type(a)
            if t is list:
                self._broadcast_delivery(a)
            elif t is Transmit:
                p = self._conns.get(a.conn)
                if p is not None and p.transport is not None:
                    p.transport.write(a.data)
            elif t is StatusChanged:
                log.info("%s -> %s: %s", self.site, a.peer, a.status)
                self._broadcast(wire.encode_frame(["status", a.peer, a.status]))
            elif t is MissingNotice:
                log.warning("%s: %d messages from %s will never arrive", self.site, a.count, a.origin)
                # Ranges, in as many frames as the client frame cap needs.
                for chunk in ranges.chunks([list(r) for r in a.ranges], ranges.per_frame(CLIENT_MAX_FRAME)):
                    self._broadcast(wire.encode_frame(["missing", a.origin, chunk]))
            elif t is Close:
                p = self._conns.pop(a.conn, None)
                if p is not None and p.transport is not None:
                    p.closed_by_us = True
                    p.transport.close()
            elif t is Dial:
                self._spawn(self._dial(a.peer))
            elif t is Log:
                (log.warning if a.level == "warning" else log.info)("%s: %s", self.site, a.message)
        self._trim_replay()
        self._flush_clients()
        self._schedule()

    def _handshake_refused(self, peername: Any) -> None:
        """An accepted connection found max_handshaking others in handshake; log once a minute."""
        self.stack.handshakes_refused += 1
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
        log.critical("%s: %s: stopping; a restart recovers from the log", self.site, reason)
        self._dirty_clients.clear()
        for c in list(self._clients):
            c.pending.clear()
            if c.transport is not None:
                c.transport.abort()
        for p in list(self._conns.values()):
            p.closed_by_us = True
            if p.transport is not None:
                p.transport.abort()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.halted.set()

    def _compact(self) -> None:
        """Rewrite the log as the live state only."""
        assert self.wal is not None
        before = self.wal.size
        records = self.stack.snapshot_records()
        # The numbering must survive even when every delivery was acknowledged
        # and the replay window is empty, or a restart would number from 1 again.
        records.append(["N", self.replay_first - 1 if self.replay else self.delivered_n])
        records += [["D", *frame[1:]] for frame in self.replay]
        records += [["K", name, n] for name, n in self.acks.items()]
        self.wal.rewrite(records)
        self._compacted_size = self.wal.size
        self.compactions += 1
        log.info("%s: compacted the log from %d to %d bytes", self.site, before, self.wal.size)

    def _broadcast(self, frame: bytes) -> None:
        for c in self._clients:
            if c.subscribed:
                c.write(frame)
                self._dirty_clients.add(c)

    def _broadcast_delivery(self, frame: list) -> None:
        """A delivery to every live client; catching-up ones read it from the replay log."""
        data: bytes | None = None
        for c in self._clients:
            if not c.subscribed or c.replay_next is not None:
                continue
            if c.paused or c.queued() >= LIVE_QUEUE_BYTES:
                c.replay_next = frame[1]         # from this delivery on, it reads the replay log
            else:
                if data is None:
                    data = wire.encode_frame(frame)
                c.write(data)
            self._dirty_clients.add(c)

    def _flush_clients(self) -> None:
        dirty, self._dirty_clients = self._dirty_clients, set()
        for c in dirty:
            c.flush()
            if c.replay_next is not None:
                self._pump_replay(c)
            self._check_queue(c)

    def _pump_replay(self, c: _ClientProtocol) -> None:
        """Write replay frames to a catching-up client until its transport pushes back or it is live."""
        while c.replay_next is not None and not c.paused and not c.dropped:
            if c.transport is None or c.transport.is_closing():
                return
            i = c.replay_next - self.replay_first     # never negative: _trim_replay drops such a client
            if i >= len(self.replay):
                c.replay_next = None             # caught up: live again
                return
            size = 0
            while i < len(self.replay) and size < REPLAY_CHUNK_BYTES:
                data = wire.encode_frame(self.replay[i])
                c.write(data)
                size += len(data)
                i += 1
            c.replay_next = self.replay_first + i
            c.flush()                            # may pause writing: the loop then stops

    def _check_queue(self, c: _ClientProtocol) -> None:
        if not c.dropped and c.queued() > self.mission.rcm.client_queue_bytes:
            self._drop_client(c, f"{c.queued()} bytes are queued for it, over [rcm] client_queue_bytes = "
                                 f"{self.mission.rcm.client_queue_bytes}")

    def _drop_client(self, c: _ClientProtocol, why: str) -> None:
        """Close a client that does not read: its buffers go at once; it resumes with ``since``."""
        log.warning("%s: dropping client %r: %s; it may reconnect with since=(log_id, last n read)",
                    self.site, c.name or "?", why)
        c.dropped = True
        self.clients_dropped += 1
        self._clients.discard(c)
        self._dirty_clients.discard(c)
        c.pending.clear()
        c.pending_bytes = 0
        c.replay_next = None
        if c.transport is not None:
            c.transport.abort()     # close() would wait, forever, for a client that does not read

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

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _dial(self, peer: str) -> None:
        addr = self.cfg.dial_address(self.mission.site(peer))
        loop = asyncio.get_running_loop()
        try:
            await asyncio.wait_for(
                loop.create_connection(lambda: _PeerProtocol(self, peer), addr.host, addr.port),
                timeout=self.mission.rcm.reconnect_period)
        except (OSError, asyncio.TimeoutError) as e:
            if not self.stopping:
                log.debug("%s: dial %s at %s failed: %s", self.site, peer, addr, e)
                self._apply(self.stack.dial_failed(peer, self.clock()))

    # -- local clients --------------------------------------------------------
    def _client_request(self, c: _ClientProtocol, f: list) -> None:
        op = f[0]
        if op == "send":
            _, ref, payload, dests = f
            if not isinstance(payload, bytes):
                raise TypeError("payload must be bytes")
            try:
                result, actions = self.stack.send(payload, dests, self.clock())
            except SendError as e:
                c.write(wire.encode_frame(["refused", ref, e.code, str(e)]))
                self._dirty_clients.add(c)
                return
            c.write(wire.encode_frame(["accepted", ref, result.msg_id, result.seq, result.order,
                                       list(result.skipped)]))
            self._dirty_clients.add(c)
            self._visible.extend(actions)
        elif op == "ack":
            n = int(f[1])
            if c.name:
                self.acks[c.name] = max(self.acks.get(c.name, 0), n)
                if self.wal is not None:
                    self.wal.append(["K", c.name, n])
                self._trim_replay()
        elif op == "hello":
            _, name, since_inc, since_n = f
            c.name = str(name)[:64]
            self._clients.add(c)
            c.subscribed = True
            st = self.stack
            c.write(wire.encode_frame(["welcome", self.site, st.sites, self.log_id, st.statuses(),
                                       st.ordering.name, self.replay_first, self.delivered_n]))
            for peer, status in st.statuses().items():
                c.write(wire.encode_frame(["status", peer, status]))
            start = 1
            if since_inc == self.log_id and since_n is not None:
                start = int(since_n) + 1
            # The backlog goes out paced by the client's reading (``_pump_replay``).
            c.replay_next = max(start, self.replay_first)
            self._dirty_clients.add(c)
            log.info("%s: client %r connected (replay from %d)", self.site, c.name, start)
        elif op == "stats":
            stats = self.stack.stats()
            stats["clients"] = sorted(x.name or "?" for x in self._clients)
            stats["replay_log"] = len(self.replay)
            stats["replay_log_bytes"] = self.replay_bytes
            stats["clients_dropped"] = self.clients_dropped
            if self.wal is not None:
                stats["wal"] = {"bytes": self.wal.size, "syncs": self.wal.syncs,
                                "records": self.wal.records_written, "compactions": self.compactions}
            c.write(wire.encode_frame(["stats", f[1], stats]))
            self._dirty_clients.add(c)
        else:
            raise ValueError(f"unknown request {op!r}")

    def _replay_append(self, frame: list) -> None:
        self.replay.append(frame)
        self.replay_bytes += len(frame[6]) + REPLAY_ENTRY_OVERHEAD

    def _trim_replay(self) -> None:
        """Forget deliveries every acknowledging client has, and the oldest past the caps."""
        upto = min(self.acks.values()) if self.acks else 0
        cap = self.mission.rcm.replay_log_bytes
        replay = self.replay
        while replay and (self.replay_first <= upto or self.replay_bytes > cap or len(replay) > REPLAY_LOG_MAX):
            frame = replay.popleft()
            self.replay_bytes -= len(frame[6]) + REPLAY_ENTRY_OVERHEAD
            self.replay_first += 1
        for c in list(self._clients):
            if c.replay_next is not None and c.replay_next < self.replay_first:
                self._drop_client(c, f"it had not read delivery {c.replay_next} when the replay log dropped "
                                     f"it ([rcm] replay_log_bytes = {cap})")


async def serve(mission: Mission, site: str, ready: Callable[[], None] | None = None) -> None:
    """Run a site's server until SIGINT/SIGTERM."""
    server = RcmServer(mission, site)
    await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
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
