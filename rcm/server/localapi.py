"""The local API at the server: what a client's requests do, and what clients are told of the stack's effects.

Theory of operation
-------------------
A client's frames (``rcm.wire.local``) arrive in reads; each read is one
batch (``rcm.server.localclients.ClientProtocol`` decodes it). ``LocalApi``
turns each request into a stack call (``send``, ``publish``) or an answer
(``hello``, ``stats``) and keeps what the batch makes: the stack's actions and
the replies (``Reply``), a hello's subscription (``Subscribe``), a bad
request's error and close (``Fail``), in order. At the end of the batch
(``end_batch``) it hands all of them to the server in one piece
(its ``apply``): one log sync, then every reply, delivery and frame out,
the failure last. So an ``accepted`` goes out only after the sync that makes
it true, and a welcome only after every earlier batch, so the deliveries it
counts (``last_n``) are on disk by the time it is read.

The welcome's third field is the delivery numbering's identity, ``log_id``:
with ``durable = true`` (the default) the numbering and the replay log survive
restarts, so ``log_id`` changes only if the server's state is lost; with
durability off it is the incarnation.

Once a batch is released the server gives back what concerns clients
(``release``): replies written, a subscription started (the replay from
``since``), a failure's error after the good requests' replies, and the
stack's ``StatusChange``, ``Missing`` (in as many frames as the client frame
cap needs) and ``Latest`` broadcast to every client. ``LocalApi`` owns only
the batch it is building; the server's statistics it asks of the server
(its ``stats``).
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rcm import ranges
from rcm.actions import Latest, Missing, SendError, StatusChange
from rcm.durability.replay import DeliveryLog
from rcm.durability.wal import Wal
from rcm.server.localclients import ClientProtocol, LocalClients
from rcm.stack import SiteStack
from rcm.wire import local as cw

log = logging.getLogger("rcm")


@dataclass(frozen=True, slots=True)
class Reply:
    """A reply to one client, held with its batch."""
    client: ClientProtocol
    data: bytes


@dataclass(frozen=True, slots=True)
class Subscribe:
    """A client's hello: it reads deliveries from here on (after its welcome, held with its batch)."""
    client: ClientProtocol
    since_incarnation: Any
    since_n: int | None


@dataclass(frozen=True, slots=True)
class Fail:
    """A client's batch held a bad request: the error and the close, after the batch's replies."""
    client: ClientProtocol
    reason: str


TOLD = frozenset({Reply, Subscribe, Fail, StatusChange, Missing, Latest})
"""The effects ``LocalApi.release`` carries out (the server hands it these once their batch is released)."""


class LocalApi:
    """The local clients' requests and what they are told (see the module docstring)."""

    def __init__(self, site: str, stack: SiteStack, log_id: int, deliveries: DeliveryLog, wal: Wal | None,
                 clients: LocalClients, apply: Callable[[list[Any]], None], stats: Callable[[], dict[str, Any]],
                 clock: Callable[[], float] = time.time) -> None:
        """``apply``: the server takes a batch's actions and replies (to the log, then, once synced, out:
        ``release`` for the clients' part); ``stats``: the server's statistics, for a ``stats`` request."""
        self.site = site
        self.stack = stack
        self.log_id = log_id
        self.deliveries = deliveries
        self.wal = wal
        self.clients = clients
        self.apply = apply
        self.stats = stats
        self.clock = clock
        self._visible: list[Any] = []       # a client batch's actions and replies, until end_batch

    def request(self, c: ClientProtocol, req: cw.Request) -> None:
        """One request of a client's batch; its actions wait for ``end_batch``."""
        if isinstance(req, cw.Send):
            try:
                result, actions = self.stack.send(req.payload, req.dests, self.clock(), req.precedence,
                                                  req.expires_at, within=req.within)
            except SendError as e:
                self._visible.append(Reply(c, cw.refused(req.ref, e.code, str(e))))
                return
            self._visible.append(Reply(c, cw.accepted(req.ref, result.msg_id, result.seq, result.order,
                                                      result.skipped)))
            self._visible.extend(actions)
        elif isinstance(req, cw.Publish):
            self._visible.extend(self.stack.publish(req.key, req.payload, req.expires_at, self.clock()))
        elif isinstance(req, cw.Will):
            if req.payload is not None:
                try:
                    self.stack.check_send(req.payload, req.dests)
                except SendError as e:
                    raise ValueError(str(e)) from None      # a bad request: the client is told, and closed
            c.will = req if req.payload is not None else None
        elif isinstance(req, cw.Ack):
            if c.name:
                record = self.deliveries.ack(c.name, req.n)
                if self.wal is not None:
                    self.wal.append(record)
                self.clients.trim()
        elif isinstance(req, cw.Hello):
            c.said_hello(req.name)
            st = self.stack
            # Held with the batch like every reply: released after every earlier batch, so the deliveries
            # the welcome counts (last_n) are on disk by the time it is read.
            out = self._visible
            out.append(Reply(c, cw.welcome(self.site, st.sites, self.log_id, st.statuses(), st.ordering.name,
                                           self.deliveries.first, self.deliveries.last_n, st.vias(), cw.CAPS)))
            for peer, status in st.statuses().items():
                out.append(Reply(c, cw.status(peer, status, st.vias().get(peer))))
            for rep in st.latest_entries(self.clock()):        # latest wins: every live report at once
                out.append(Reply(c, cw.latest(rep.origin, rep.key, rep.version, rep.expires_at, rep.payload,
                                              rep.hops)))
            out.append(Subscribe(c, req.since_incarnation, req.since_n))
        elif isinstance(req, cw.Stats):
            self._visible.append(Reply(c, cw.stats_reply(req.ref, self.stats())))

    def client_gone(self, c: ClientProtocol) -> None:
        """``c``'s connection ended while the server runs: its will, if it left one, is sent as this site's
        message (rcm.wire.local, ``will``), logged like any send."""
        will, c.will = c.will, None
        if will is None or will.payload is None:
            return
        try:
            result, actions = self.stack.send(will.payload, will.dests, self.clock())
        except SendError as e:
            log.warning("%s: client %r is gone; its will (%d bytes) was not sent: %s", self.site, c.name or "?",
                        len(will.payload), e)
            return
        log.info("%s: client %r is gone; its will (%d bytes) sent as %s", self.site, c.name or "?",
                 len(will.payload), result.msg_id)
        self._visible.extend(actions)
        self.end_batch()

    def end_batch(self, c: ClientProtocol | None = None, failure: str | None = None) -> None:
        """A batch of client requests is in: one log sync, then replies and frames out (then ``failure``'s
        error to ``c``, and its close, when a request of the batch was bad)."""
        actions, self._visible = self._visible, []
        if failure is not None and c is not None:
            actions.append(Fail(c, failure))
        self.apply(actions)

    def release(self, a: Any) -> None:
        """One released effect of ``TOLD``: written to its client, or told to every client."""
        t = type(a)
        if t is Reply:
            a.client.write(a.data)
        elif t is Subscribe:
            c = a.client
            start = self.clients.subscribe(c, a.since_incarnation, a.since_n, self.log_id)
            log.info("%s: client %r connected (replay from %d)", self.site, c.name, start)
        elif t is Fail:
            self.clients.flush()          # the good requests' replies first
            a.client.fail(a.reason)
        elif t is StatusChange:
            log.info("%s -> %s: %s%s", self.site, a.peer, a.status, f" via {a.via}" if a.via else "")
            self.clients.broadcast(cw.status(a.peer, a.status, a.via))
        elif t is Missing:
            if self.stack.settings.repair:
                # Given up on the link (the paper's rule); repair fetches them from any site that holds them, and
                # most come back (Delivery.repaired): not a loss yet.
                log.warning("%s: %d messages from %s missed while it was disconnected; repair will fetch them "
                            "from any site that holds them", self.site, a.count, a.origin)
            else:
                log.warning("%s: %d messages from %s will never arrive (repair = false)", self.site, a.count,
                            a.origin)
            # Ranges, in as many frames as the client frame cap needs.
            for chunk in ranges.chunks([list(r) for r in a.ranges], ranges.per_frame(cw.CLIENT_MAX_FRAME)):
                self.clients.broadcast(cw.missing(a.origin, chunk))
        elif t is Latest:
            self.clients.broadcast(cw.latest(a.origin, a.key, a.version, a.expires_at, a.payload, a.hops))
