"""The say pipeline: a user's message into RCM exactly once, durable before its ``ack``.

Theory of operation
-------------------
``say`` hands the message to RCM, writes the journal's ``send`` record, syncs
the journal (group commit), then returns the ``ack`` frame. The message is not
shown to anyone yet: RCM delivers it back in the global order, like everybody
else's (core.py).

A say may be retried after a reconnect with the same ``client_id``:

* a retry of a say already sent is acked with its first ``msg_id``;
* a retry while the first attempt is still in flight shares its answer;
* an attempt whose RCM answer was lost (the RCM connection broke, or the chat
  server was killed) is *pending* in the database: RCM may or may not have
  accepted it. A *barrier* settles it: a payload sent now to this site only.
  RCM delivers a site's own messages to it in order, so once the barrier is
  delivered every earlier accepted send is known (its delivery recorded its
  ``(user, client_id)``); one still unknown was never accepted and is sent
  anew. One barrier per RCM connection serves every waiter.

A say's ``expires_in`` becomes ``expires_at = sent_at + expires_in`` (absolute
Unix seconds, rounded up to a whole second: RCM writes it in fewer bytes),
handed to RCM with the message and journaled with its ``send``; RCM carries it
and gives it back on every delivery (core.py). An own message of unknown fate
(above) whose delivery comes back as an expired stub cannot be recognised (a
stub has no payload): its say, if retried, is sent anew.

In a labeled mission a draft carries its label and destinations (checked and
computed by the core, core_requests.py ``check_say``): the payload carries the
label, RCM sends it only to those sites (need-to-know routing), and the
``send`` record journals the label.

In the compact payload layout (payload_arrays.py) the chat message carries no
``client_id``: the delivery of an own message finds its say by (user,
``sent_at``) among the pending ones (core.py). ``sent_at`` is therefore rounded
as the layout carries it (a hundredth of a second) and made distinct among the
user's pending says, and the pending row is stored with it, before the send.

Refusals are ``protocol.Refusal`` (the edge turns them into ``error`` frames).
The pipeline reads the database (a say's ``msg_id``, the pending sends) and
changes it only by actions (actions.py: ``StorePending``, ``RecordSent``,
``DropPending``) that the server applies, each in one transaction.
"""
from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from contracts.labels import Label
from contracts.precedence import Precedence

from . import protocol as P
from . import rcm_port
from .actions import Action, DropPending, RecordSent, StorePending
from .journal import Journal
from .payload import Barrier, ChatMessage, encode_payload
from .payload_arrays import compact_time
from .protocol import Refusal, unavailable
from .rcm_port import RcmPort
from .store import ChatStore, PrivateRoom

log = logging.getLogger("chat_server")
JOURNALED_MEMORY = 10_000       # own msg_ids journaled and not yet delivered, remembered at most


class ReceiptsAlong(Protocol):
    """The receipts a chat message takes along (core_sites.OtherSites)."""

    def receipts_along(self) -> tuple[str, ...]: ...
    def requeue_receipts(self, msg_ids: tuple[str, ...]) -> None: ...


@dataclass(frozen=True, slots=True)
class Draft:
    """What a user's ``say`` asks to send."""

    room: str
    text: str
    client_id: str
    reply_to: str = ""
    precedence: Precedence = Precedence.ROUTINE     # checked at the edge (protocol.parse_client_frame)
    expires_in: float | None = None                 # seconds (checked at the edge too); None: never expires
    label: Label | None = None                      # its security label (checked by the core); None: unlabeled
    dests: tuple[str, ...] | None = None            # where it goes (the core's reach); None: every site


class SayPipeline:
    def __init__(self, site: str, store: ChatStore, journal: Journal, rcm: Callable[[], RcmPort | None],
                 clock: Callable[[], float], apply: Callable[[Sequence[Action]], None], compact: bool = True,
                 receipts: ReceiptsAlong | None = None) -> None:
        self.site = site
        self.receipts = receipts                         # receipts due, riding along in the message (compact)
        self.compact = compact                           # the array layout (payload_arrays.py): no client_id
        self.store = store                               # read only: changed by ``apply``
        self.apply = apply                               # the server's one step of actions
        self.journal = journal
        self.rcm = rcm                                   # the current RCM connection, or None
        self.clock = clock
        self.in_flight = 0                               # sends awaiting RCM's reply
        self.journaled: OrderedDict[str, None] = OrderedDict()   # own msg_ids with a send record, not delivered
        self._progress = asyncio.Event()
        self._inflight: dict[tuple[str, str], asyncio.Future[dict[str, Any]]] = {}
        self._barrier: asyncio.Future[None] | None = None
        self._barrier_rcm: RcmPort | None = None
        self._barrier_msg: str | None = None
        self._barrier_started = 0.0
        self._barriers_seen: OrderedDict[str, None] = OrderedDict()

    def known(self, user: str, client_id: str) -> str | None:
        """The msg_id of a say already sent (a retry), if any."""
        return self.store.sent_msg_id(user, client_id)

    def busy(self, user: str, client_id: str) -> bool:
        return (user, client_id) in self._inflight

    async def say(self, user: str, draft: Draft, private: PrivateRoom | None) -> dict[str, Any]:
        """Send a say once; the ``ack`` frame. A concurrent retry of the same say shares the answer."""
        client_id = draft.client_id
        key = (user, client_id)
        inflight = self._inflight.get(key)
        if inflight is not None:
            return await asyncio.shield(inflight)
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._inflight[key] = fut
        try:
            known = None
            if self.store.is_pending(user, client_id):
                await self.barrier()                 # an earlier attempt's fate is unknown: settle it first
                known = self.store.sent_msg_id(user, client_id)
            ack = P.ack(client_id, known) if known is not None else await self._send(user, draft, private)
            fut.set_result(ack)
            return ack
        except BaseException as e:
            fut.set_exception(e)
            fut.exception()                          # retrieved here; a concurrent retry re-raises it
            raise
        finally:
            del self._inflight[key]

    def _sent_at(self, user: str) -> float:
        """The say's ``sent_at``. In the array layout it is the say's identity at its own site (the payload
        carries no client_id): rounded as the layout carries it, and distinct among the user's pending says
        (a hundredth later than one already pending at the same time: core.py finds the say by it)."""
        if not self.compact:
            return self.clock()
        sent_at = compact_time(self.clock())
        while self.store.pending_at(user, sent_at):
            sent_at = compact_time(sent_at + 0.01)
        return sent_at

    async def _send(self, user: str, draft: Draft, private: PrivateRoom | None) -> dict[str, Any]:
        room, text, client_id = draft.room, draft.text, draft.client_id
        sent_at = self._sent_at(user)
        # Receipts ride along only with a message to every site: one sent to some (labels) may miss their origins.
        along = self.receipts.receipts_along() if self.receipts is not None and draft.dests is None else ()
        # The precedence and the expiry travel once, as RCM's own fields: the payload carries neither.
        # Whole seconds, rounded up: RCM writes an integral expiry in 5 bytes, not 9 (a link of 2.4 kbit/s).
        expires_at = float(math.ceil(sent_at + draft.expires_in)) if draft.expires_in is not None else None
        payload = encode_payload(ChatMessage(room, user, text, sent_at, "" if self.compact else client_id,
                                             private.msg_id if private else "", private.order if private else (),
                                             draft.reply_to, along, str(draft.label) if draft.label else ""),
                                 self.compact)
        # Sends are not serialised: rcm.send writes its request at once, so messages enter RCM in the
        # order the tasks run (a client's says in the order it sent them), and round trips overlap.
        self.in_flight += 1
        # Pending until RCM's answer or the delivery is known; at ``sent_at``, its identity in the array layout
        # (no await since ``_sent_at``: no other say of the user can take the same time meanwhile).
        self.apply([StorePending(user, client_id, sent_at if self.compact else self.clock())])
        try:
            try:
                acc = await rcm_port.send(self.rcm(), payload, draft.dests, draft.precedence, expires_at)
            except Refusal as e:
                if along and self.receipts is not None:
                    self.receipts.requeue_receipts(along)     # (they go with the next batch or message)
                if e.code != P.ErrorCode.UNAVAILABLE:     # refused: RCM does not have it
                    self.apply([DropPending(user, client_id)])
                raise
            self.journal.send(msg_id=acc.msg_id, origin=self.site, seq=acc.seq, room=room, user=user, text=text,
                              sent_at=sent_at, order=list(acc.order) if acc.order is not None else None,
                              skipped=acc.skipped, precedence=draft.precedence, expires_at=expires_at,
                              label=draft.label.to_json() if draft.label is not None else None)
            self.journaled[acc.msg_id] = None
            while len(self.journaled) > JOURNALED_MEMORY:
                self.journaled.popitem(last=False)
            self.apply([RecordSent(user, client_id, acc.msg_id)])     # (no longer pending)
        finally:
            self.in_flight -= 1
            self._progress.set()
        await self.journal.sync()
        return P.ack(client_id, acc.msg_id, acc.skipped)

    async def send_recorded(self, msg_id: str) -> bool:
        """For an own message delivered back: wait until no send that may be it awaits RCM's reply, then
        whether its ``send`` record was written by this pipeline (it may come back before RCM's reply)."""
        while self.in_flight and msg_id not in self.journaled:
            self._progress.clear()
            await self._progress.wait()
        return self.journaled.pop(msg_id, "absent") is None

    # --- the barrier --------------------------------------------------------------------------------
    async def barrier(self) -> None:
        """Return once every message this site handed to RCM before the call has been delivered here."""
        while True:
            rcm = self.rcm()
            if rcm is None:
                raise unavailable()
            fut = self._barrier
            if fut is None or self._barrier_rcm is not rcm:
                fut = self._barrier = asyncio.get_running_loop().create_future()
                self._barrier_rcm, self._barrier_msg = rcm, None
                started = self._barrier_started = self.clock()
                try:
                    acc = await rcm_port.send(rcm, encode_payload(Barrier(f"{self.site}-{time.time_ns()}")),
                                              [self.site])
                except BaseException as e:
                    self._fail(fut, e)
                    raise
                self._barrier_msg = acc.msg_id
                log.info("barrier %s sent to settle sends of unknown fate (before %.3f)", acc.msg_id, started)
                if acc.msg_id in self._barriers_seen:
                    self.barrier_reached(acc.msg_id)
            try:
                await asyncio.shield(fut)
                return
            except Refusal:
                if self.rcm() is None or self.rcm() is rcm:
                    raise

    def _fail(self, fut: asyncio.Future[None], e: BaseException) -> None:
        if self._barrier is fut:
            self._barrier = self._barrier_rcm = self._barrier_msg = None
        if not fut.done():
            fut.set_exception(e if isinstance(e, Refusal) else unavailable())
            fut.exception()

    def rcm_lost(self) -> None:
        if self._barrier is not None:
            self._fail(self._barrier, unavailable())

    def barrier_reached(self, msg_id: str) -> None:
        fut = self._barrier
        if fut is None or msg_id != self._barrier_msg:
            self._barriers_seen[msg_id] = None
            while len(self._barriers_seen) > 64:
                self._barriers_seen.popitem(last=False)
            return
        # Sends attempted before the barrier and not being retried now were never accepted: forget them.
        never = [DropPending(user, cid) for user, cid in self.store.pending_before(self._barrier_started)
                 if (user, cid) not in self._inflight]
        if never:
            self.apply(never)
        self._barrier = self._barrier_rcm = self._barrier_msg = None
        if not fut.done():
            fut.set_result(None)
