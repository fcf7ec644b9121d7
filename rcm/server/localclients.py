"""The RCM server's local clients: one asyncio protocol per client, and what they share.

Theory of operation
-------------------
Every client receives every delivery and status event (the chat server, a
monitor and a bot can share a site). Deliveries are numbered and kept in the
replay log (``rcm.durability.replay.DeliveryLog``); a client that reconnects with
``since=(log_id, n)`` gets everything after ``n``.

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

With durability the replay log may hold deliveries whose records still wait
for the log's sync (``rcm.server.commits``): clients read it only up to
``released_n``, the last delivery handed out, and later ones reach them when
their batch is released.

At most ``MAX_CLIENTS`` connections at once: one more is told so in an
``error`` frame and closed, before it costs anything. A site has one chat
server and a few tools; without a cap, a local program that leaked
connections would take the descriptors the peers' connections need.

Frames are the local API's (``rcm.wire.local``). What a request does is
``rcm.server.localapi``'s business; this module only moves bytes.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rcm import wire
from rcm.durability.replay import DeliveryLog
from rcm.wire import local as cw

if TYPE_CHECKING:
    from rcm.server import RcmServer

log = logging.getLogger("rcm")

LIVE_QUEUE_BYTES = 1 << 20       # past this queued for a client, it catches up from the replay log
REPLAY_CHUNK_BYTES = 256 << 10   # replay frames written to a catching-up client at a time
MAX_CLIENTS = 256                # local connections at once (the module docstring)


class ClientProtocol(asyncio.Protocol):
    """One local client on the Unix socket."""

    def __init__(self, server: RcmServer) -> None:
        self.server = server
        self.hub = server.clients
        self.transport: asyncio.Transport | None = None
        self.decoder = cw.decoder()
        self.name: str | None = None
        self.subscribed = False
        self.pending: list[bytes] = []
        self.pending_bytes = 0
        self.replay_next: int | None = None   # catching up: the next delivery n to read from the replay log
        self.paused = False                   # the transport asked us to stop writing
        self.dropped = False
        self.will: cw.Will | None = None      # sent when the connection ends (rcm.server.localapi.client_gone)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        if len(self.hub.connected) >= MAX_CLIENTS:
            self.hub.refuse(self)
            return
        self.hub.connected.add(self)

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        if self.replay_next is not None:
            self.hub.pump_replay(self)
            self.hub.check_queue(self)

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
                    srv.api.request(self, cw.decode_request(f))
                except (ValueError, TypeError, IndexError) as e:
                    failure = f"bad request {f[0]!r}: {e}"
                    break
        finally:
            # One batch of requests: one log sync, then replies and frames out; a failure's error and
            # close only after them: the ``accepted`` replies of this batch's good requests go out after
            # the log sync they promise, not before it, and not never.
            srv.api.end_batch(self, failure)

    def said_hello(self, name: str) -> None:
        """The client's hello named it (``rcm.server.localapi``): its acks are kept under this name."""
        self.name = name

    def write(self, data: bytes) -> None:
        self.pending.append(data)
        self.pending_bytes += len(data)
        self.hub.dirty.add(self)

    def flush(self) -> None:
        if self.pending and self.transport is not None and not self.transport.is_closing():
            self.transport.write(b"".join(self.pending))
        self.pending.clear()
        self.pending_bytes = 0

    def fail(self, message: str) -> None:
        """Write the error and close (the server calls it once the batch's replies are out)."""
        log.warning("client %s: %s", self.name or "?", message)
        self.write(cw.error(message))
        self.flush()
        if self.transport is not None:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.hub.connected.discard(self)
        self.hub.members.discard(self)
        self.hub.dirty.discard(self)
        if self.will is not None and not self.server.stopping:
            self.server.api.client_gone(self)


class LocalClients:
    """Every subscribed client, the replay log they read, and who is behind."""

    def __init__(self, site: str, deliveries: DeliveryLog, queue_cap: int,
                 clock: Callable[[], float] = time.time) -> None:
        self.site = site
        self.clock = clock                  # a replayed delivery whose message expired goes as a stub
        self.deliveries = deliveries
        self.queue_cap = queue_cap          # [rcm] client_queue_bytes
        self.members: set[ClientProtocol] = set()
        self.connected: set[ClientProtocol] = set()     # every connection, subscribed or not (``MAX_CLIENTS``)
        self.refused = 0
        self._refused_logged_at = float("-inf")
        # The last delivery handed out (``broadcast_delivery``): the replay log may hold later ones whose
        # records wait for the log's sync (``rcm.server.commits``); no client reads past this.
        self.released_n = deliveries.last_n
        self.dirty: set[ClientProtocol] = set()
        self.dropped = 0

    def refuse(self, c: ClientProtocol) -> None:
        """One connection past ``MAX_CLIENTS``: told why and closed; logged at most once a minute."""
        self.refused += 1
        now = time.monotonic()
        if now >= self._refused_logged_at + 60.0:
            self._refused_logged_at = now
            log.warning("%s: %d local clients connected, the most one RCM server takes: refusing more (%d "
                        "refused so far); is a local program leaking connections?", self.site, MAX_CLIENTS,
                        self.refused)
        if c.transport is not None:
            c.transport.write(cw.error(f"too many local clients ({MAX_CLIENTS} connected): try again later"))
            c.transport.close()

    def subscribe(self, c: ClientProtocol, since_incarnation: Any, since_n: int | None, log_id: int) -> int:
        """``c`` said hello; it reads the backlog from the replay log, paced by its reading. Returns the start."""
        self.members.add(c)
        c.subscribed = True
        start = since_n + 1 if since_incarnation == log_id and since_n is not None else 1
        c.replay_next = max(start, self.deliveries.first)
        self.dirty.add(c)
        return start

    def broadcast(self, frame: bytes) -> None:
        for c in self.members:
            if c.subscribed:
                c.write(frame)

    def broadcast_delivery(self, frame: list[Any]) -> None:
        """A delivery to every live client; catching-up ones read it from the replay log."""
        self.released_n = frame[1]
        data: bytes | None = None
        for c in self.members:
            if not c.subscribed or c.replay_next is not None:
                continue
            if c.paused or c.queued() >= LIVE_QUEUE_BYTES:
                c.replay_next = frame[1]         # from this delivery on, it reads the replay log
                self.dirty.add(c)
            else:
                if data is None:
                    data = wire.encode_frame(frame)
                c.write(data)

    def flush(self) -> None:
        dirty, self.dirty = self.dirty, set()
        for c in dirty:
            c.flush()
            if c.replay_next is not None:
                self.pump_replay(c)
            self.check_queue(c)

    def pump_replay(self, c: ClientProtocol) -> None:
        """Write replay frames to a catching-up client until its transport pushes back or it is live."""
        log_ = self.deliveries
        while c.replay_next is not None and not c.paused and not c.dropped:
            if c.transport is None or c.transport.is_closing():
                return
            if c.replay_next > self.released_n:
                c.replay_next = None             # caught up: live again (later deliveries are broadcast)
                return
            size = 0
            n = c.replay_next                     # never below first: trim drops such a client
            for frame in log_.window(n, self.clock()):
                if n > self.released_n:
                    break
                data = wire.encode_frame(frame)
                c.write(data)
                size += len(data)
                n += 1
                if size >= REPLAY_CHUNK_BYTES:
                    break
            c.replay_next = n
            self.dirty.discard(c)
            c.flush()                            # may pause writing: the loop then stops

    def check_queue(self, c: ClientProtocol) -> None:
        if not c.dropped and c.queued() > self.queue_cap:
            self.drop(c, f"{c.queued()} bytes are queued for it, over [rcm] client_queue_bytes = "
                         f"{self.queue_cap}")

    def drop(self, c: ClientProtocol, why: str) -> None:
        """Close a client that does not read: its buffers go at once; it resumes with ``since``."""
        log.warning("%s: dropping client %r: %s; it may reconnect with since=(log_id, last n read)",
                    self.site, c.name or "?", why)
        c.dropped = True
        self.dropped += 1
        self.members.discard(c)
        self.dirty.discard(c)
        c.pending.clear()
        c.pending_bytes = 0
        c.replay_next = None
        if c.transport is not None:
            c.transport.abort()     # close() would wait, forever, for a client that does not read

    def trim(self) -> None:
        """Trim the replay log; drop the clients that had not read what it dropped."""
        self.deliveries.trim()
        first = self.deliveries.first
        for c in list(self.members):
            if c.replay_next is not None and c.replay_next < first:
                self.drop(c, f"it had not read delivery {c.replay_next} when the replay log dropped "
                             f"it ([rcm] replay_log_bytes = {self.deliveries.cap_bytes})")

    def close_all(self) -> None:
        for c in list(self.members):
            c.flush()
            if c.transport is not None:
                c.transport.close()

    def abort_all(self) -> None:
        self.dirty.clear()
        for c in list(self.members):
            c.pending.clear()
            if c.transport is not None:
                c.transport.abort()
