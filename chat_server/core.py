"""The chat core of one site, sans-IO: deliveries, rooms, rosters, receipts, statuses.

Theory of operation
-------------------
Like ``rcm.stack.SiteStack``, ``ChatCore`` never touches a socket, a file or a
clock: the edge (server.py) calls it with an event and ``now`` and executes
the actions it returns (actions.py). It reads the site's database through a
read-only view (``ChatView``, which ``ChatStore`` provides) and writes it only
by returning store actions, which the edge applies in one transaction per
step; then the journal records, then the commit, then what clients and other
sites are told. Its tests run on a virtual clock with an in-memory database.

Deliveries (``delivery``), in the global order RCM gives them:

* a chat message is checked against the room's rule (rooms.py), stored,
  numbered (``n``, the site's delivery counter) and journaled, then written
  to the room's local members; a private room's message whose definition has
  not reached this site is *held* until it does (audit row 1), and the site
  that sent it is asked for the definition;
* a private room definition may replace the room's current one (the same
  decision at every site), remove local members it no longer lists, and
  release held messages;
* a roster tells who is online at another site and who is in which room;
* a receipt batch tells which of our messages another site has delivered;
* our own barrier payload settles sends of unknown fate (sending.py);
* a delivery flagged ``repaired`` (RCM's repair, issue 18) is shown in place,
  marked, and revises the ``missing`` notice (losses.py);
* a delivery flagged ``expired`` is RCM's *stub* of a message that expired
  before it reached this site (expiry, second round: RCM never drops an
  expired message, it writes the same message with no content). It is
  journaled as ``control`` (its place in the global order, as every delivery
  that shows no chat message) and ``expired``, shown to nobody and counted nowhere as missing (a
  ``missing`` notice it answers is revised as ``expired``, losses.py). A site
  that holds the message already takes the stub as a replay and changes
  nothing: RCM delivers each message once per site, content or stub, so a stub
  of a stored message is only RCM's replay of a delivery this server had not
  acknowledged yet (a restart), whose content expired since.

A chat message's ``expires_at`` is RCM's (one copy, like its precedence: the
chat payload has none); it is stored, journaled and carried by ``message``
frames, and a frame built after it says ``expired`` (store_messages.py).

Requests (``join``, ``leave``, ``mark_read``, ``create``, ``rooms``,
``history``) either raise ``Refusal`` or return the actions and the reply
frame. Publication (``publish_roster``, ``take_receipts``, ``take_recovered``)
is called by the edge's timers. ``recovered`` stores what the journal holds
and the database lacks (a crash between the two, or a database failure).

Modules: this one holds ``ChatCore``, its state and the application of
deliveries; core_sites.py the part facing the other sites (statuses, missing
notices, rosters, receipts); core_requests.py the room requests of local
users; core_definitions.py the rooms' definitions (private rooms, labeled
public rooms). ``ChatCore`` is one object made of the three (its API is the same).
"""
from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from contracts.labels import Label
from contracts.precedence import DEFAULT, Precedence
from ordering.keys import key_problem, sortable_key

from . import protocol as P
from .actions import (
    Action,
    BarrierReached,
    Broadcast,
    HoldMessage,
    JournalRecord,
    QueueReceipt,
    RecordSent,
    ReleaseHeld,
    SendPayload,
    StoreAcknowledgement,
    StoreJournalN,
    StoreMessage,
    StoreReceipt,
    ToRoom,
    ToUser,
)
from .core_definitions import RoomDefinitions
from .core_requests import ReadMarkers, RoomRequests
from .core_sites import SUSPECTED, OtherSites
from .history import History
from .labeling import LabelPolicy
from .limits import TokenBucket
from .losses import Losses
from .payload import (
    MAX_INT,
    Acknowledgement,
    Barrier,
    ChatMessage,
    DefinitionRequest,
    Payload,
    PayloadError,
    Receipts,
    RoomDefinition,
    RoomFloor,
    Roster,
    RosterDelta,
    RosterRequest,
    RosterTip,
    ServerGone,
    decode_payload,
)
from .rooms import RemoteRoster, RoomFacts, RoomState
from .store import HeldMessage
from .store_messages import StoredMessage

log = logging.getLogger("chat_server")

DEFINITION_REQUEST_INTERVAL = 30.0    # seconds between requests for the same definition to the same site


class ChatView(RoomFacts, ReadMarkers, Protocol):
    """What the core reads from the site's database (ChatStore provides it)."""

    def has_message(self, msg_id: str) -> bool: ...
    def sent_msg_id(self, user: str, client_id: str) -> str | None: ...
    def pending_at(self, user: str, at: float) -> list[str]: ...
    def message(self, msg_id: str) -> StoredMessage | None: ...
    def has_receipt(self, msg_id: str, site: str) -> bool: ...
    def acknowledged_at(self, msg_id: str, user: str, site: str) -> float | None: ...
    def chat_gone(self) -> dict[str, int]: ...


class RcmDelivery(Protocol):
    """An RCM delivery as the core needs it (rcm.client.Delivery)."""

    @property
    def n(self) -> int: ...
    @property
    def origin(self) -> str: ...
    @property
    def seq(self) -> int: ...
    @property
    def msg_id(self) -> str: ...
    @property
    def order(self) -> list[Any]: ...
    @property
    def late(self) -> bool: ...
    @property
    def payload(self) -> bytes: ...
    @property
    def precedence(self) -> str: ...      # RCM's, a contracts.precedence name (its client checks it)
    @property
    def repaired(self) -> bool: ...
    @property
    def expires_at(self) -> float | None: ...   # RCM's expiry (its local API checks it: finite, bounded)
    @property
    def expired(self) -> bool: ...              # RCM's stub: the message expired on its way, no payload


def expiry(d: RcmDelivery) -> tuple[float | None, bool]:
    """A delivery's ``(expires_at, expired)``; an ``expires_at`` that is not a finite number of seconds is
    taken as none (RCM's client checks it; this keeps the store and the journal safe from a double)."""
    expires_at = d.expires_at
    if not (isinstance(expires_at, (int, float)) and not isinstance(expires_at, bool)
            and math.isfinite(expires_at)):
        expires_at = None
    return (float(expires_at) if expires_at is not None else None), d.expired is True


class ChatCore(OtherSites, RoomRequests, RoomDefinitions):
    view: ChatView

    def __init__(self, site: str, peers: Iterable[str], view: ChatView, *, journal_n: int, roster_gen: int,
                 history: History, max_rooms_per_user: int, max_rooms: int, rooms_created_per_hour: float,
                 rooms_created_burst: int, rooms_page: int, compact: bool = True, labels: LabelPolicy | None = None,
                 clearance_of: Callable[[str], Label] | None = None) -> None:
        self.site = site
        self.compact = compact                          # the array layout (payload_arrays.py), roster deltas
        self.peers = list(peers)
        self.view = view
        self.labels = labels if labels is not None else LabelPolicy.unlabeled(site, self.peers)
        self.rooms = RoomState.load(view, self.peers, self.labels, clearance_of)
        self.journal_n = journal_n                      # the last ``n`` journaled at this site
        self.history = history
        self.max_rooms_per_user = max_rooms_per_user
        self.max_rooms = max_rooms
        self.rooms_created = (rooms_created_per_hour / 3600.0, rooms_created_burst)
        self.rooms_page = rooms_page
        self.status: dict[str, str] = {p: SUSPECTED for p in self.peers}   # as shown to clients
        self.via: dict[str, str] = {}                                        # peer -> next hop, when relayed
        self.chat_gone: dict[str, int] = self._stored_chat_gone()         # kept across our restart
        self.rcm_up = False
        self.rcm_stalled = False
        self.journaled_status: dict[str, str] = {}                          # as last reported by RCM
        self.roster_gen = roster_gen
        self.roster_force = True
        self.published_online: frozenset[str] = frozenset()
        self.published_rooms: dict[str, frozenset[str]] = {}
        self.pending_receipts: dict[str, list[str]] = {}
        self.pending_since: float | None = None
        self.sent_online: frozenset[str] = frozenset()                      # the roster last sent to peers
        self.sent_rooms: dict[str, frozenset[str]] = {}
        self.roster_owed: set[str] = set()                                  # peers owed a full roster
        self.roster_tips: set[str] = set()                                  # peers told our generation
        self.roster_asked: dict[str, float] = {}                            # peer -> our last roster request
        self._asked: dict[tuple[str, str], float] = {}                     # (room, site) -> last definition request
        self._room_buckets: dict[str, TokenBucket] = {}                    # user -> new room names
        self.losses = Losses()                          # what RCM reported lost here, and its repair

    # ==============================================================================================
    # deliveries
    # ==============================================================================================
    @staticmethod
    def decode(d: RcmDelivery) -> Payload:
        """The chat payload of a delivery; PayloadError if no site could store or show it (audit row 2)."""
        problem = key_problem(d.order)
        if problem is None and not (isinstance(d.seq, int) and 0 < d.seq <= MAX_INT):
            problem = f"sequence number {d.seq!r} is outside 63 bits"
        if problem is not None:
            raise PayloadError(problem)
        return decode_payload(d.payload)

    def delivery(self, d: RcmDelivery, p: Payload | None, now: float, send_recorded: bool = True) -> list[Action]:
        """Apply one delivery (``p``: its decoded payload, None if refused). ``send_recorded``: for our
        own chat message, whether the say pipeline journaled its ``send`` record already."""
        if expiry(d)[1]:
            return self._expired(d)
        out: list[Action] = []
        replay = isinstance(p, ChatMessage) and self.view.has_message(d.msg_id)
        if d.repaired and not replay:
            out += self.losses.recovered(d.origin, d.seq)
        if isinstance(p, ChatMessage):
            if p.receipts:
                self._receipts(d.origin, Receipts(p.receipts), out)     # (riding along: ours among them)
            self._message(d, p, now, send_recorded, out)
        elif isinstance(p, RoomDefinition):
            self._definition(d, p, now, out)
        elif isinstance(p, RoomFloor):
            self._floor(d, p, out)
        elif isinstance(p, (Roster, RosterDelta, RosterTip)):
            self._roster(d.origin, d.seq, p, now, out)
        elif isinstance(p, RosterRequest) and d.origin != self.site:
            self.roster_requested(d.origin)
        elif isinstance(p, Receipts):
            self._receipts(d.origin, p, out)
        elif isinstance(p, Barrier) and d.origin == self.site:
            out.append(BarrierReached(d.msg_id))
        elif isinstance(p, DefinitionRequest) and d.origin != self.site and p.room in self.rooms.private:
            out += self.definitions_for(d.origin, [p.room])
        elif isinstance(p, Acknowledgement):
            self._acknowledgement(d.origin, p, out)
        elif isinstance(p, ServerGone):
            self._gone(d.origin, d.seq, out)
        shown = any(isinstance(a, JournalRecord) and a.kind == "deliver" and a.fields["msg_id"] == d.msg_id
                    for a in out)
        if not shown and not replay:
            # Every RCM delivery takes a place in the global order: journal the ones that show no chat
            # message here too, before anything they cause (issue 20 item 8).
            at = next((i for i, a in enumerate(out) if isinstance(a, JournalRecord) and a.kind != "send"), len(out))
            out.insert(at, JournalRecord("control", dict(msg_id=d.msg_id, origin=d.origin, seq=d.seq,
                                                         order=list(d.order), late=bool(d.late))))
        return out

    def _expired(self, d: RcmDelivery) -> list[Action]:
        """RCM's stub of a message that expired before it reached this site: journaled, never shown, not lost.
        A stub of a message stored here is a replay (the module's docstring): nothing changes."""
        if self.view.has_message(d.msg_id):
            return []
        out = self.losses.expired(d.origin, d.seq, bool(d.repaired))
        # Its place in the global order, like any delivery that shows no chat message (``control``), then what
        # it was: a message that expired on its way, not lost (Contract 3, second round).
        out.append(JournalRecord("control", dict(msg_id=d.msg_id, origin=d.origin, seq=d.seq, order=list(d.order),
                                                 late=bool(d.late))))
        out.append(JournalRecord("expired", dict(msg_id=d.msg_id, origin=d.origin, seq=d.seq)))
        return out

    def _own_client_id(self, d: RcmDelivery, p: ChatMessage, send_recorded: bool) -> str:
        """The client_id of our own message: the map layout's field; in the array layout, the pending say of
        the user at the message's ``sent_at`` (sending.py keeps those distinct), needed only when the say
        pipeline did not record the send ("": nothing to record)."""
        if p.client_id or send_recorded or self.view.has_message(d.msg_id):
            return p.client_id          # (a replay was recorded when first delivered)
        found = self.view.pending_at(p.user, p.sent_at)
        return found[0] if len(found) == 1 else ""

    def _message(self, d: RcmDelivery, p: ChatMessage, now: float, send_recorded: bool, out: list[Action]) -> None:
        client_id = self._own_client_id(d, p, send_recorded) if d.origin == self.site else ""
        if client_id:
            # Our own message: its (user, client_id) is known now even if we crashed before RCM's answer,
            # so a retry of the same say is acked with this msg_id instead of being sent again.
            if not send_recorded and self.view.sent_msg_id(p.user, client_id) is None:
                # RCM accepted it but its answer never reached us (the RCM connection broke, or the
                # process was killed): write the send record now, before the deliver record (Contract 3).
                sent: dict[str, Any] = dict(msg_id=d.msg_id, origin=self.site, seq=d.seq, room=p.room, user=p.user,
                                            text=p.text, sent_at=p.sent_at, order=list(d.order),
                                            precedence=Precedence(d.precedence))
                if expiry(d)[0] is not None:
                    sent["expires_at"] = expiry(d)[0]
                if self.labels.enabled:
                    sent["label"] = self.labels.stored(p.label).to_json()
                out.append(JournalRecord("send", sent))
            out.append(RecordSent(p.user, client_id, d.msg_id))
        if self.view.has_message(d.msg_id):
            return                                   # replayed by RCM after a restart
        if not self.labels.holdable(self.labels.stored(p.label)):
            # Need-to-know routing never sends it here (an older peer, a forged frame): never held, stored,
            # shown or journaled; its place in the order is journaled as ``control`` (``delivery``).
            log.warning("dropped %s from %s: label %.60r is above this site's clearance %s", d.msg_id, d.origin,
                        p.label, self.labels.site_clearance)
            return
        if p.definition and not self.rooms.definition_known(p.room, p.definition, p.definition_order):
            out.append(HoldMessage(HeldMessage(p.definition, p.room, sortable_key(p.definition_order), d.msg_id,
                                               d.origin, d.seq, list(d.order), bytes(d.payload),
                                               Precedence(d.precedence), expiry(d)[0])))
            self.rooms.claim(p.room, p.definition, d.origin, now)     # closed while it is fetched (rooms.py)
            out += self._ask_definition(p.room, d.origin, now)
            return
        self._store(d.msg_id, d.origin, d.seq, list(d.order), bool(d.late), p, Precedence(d.precedence), now, out,
                    repaired=bool(d.repaired), expires_at=expiry(d)[0])

    def _store(self, msg_id: str, origin: str, seq: int, order: list[Any], late: bool, p: ChatMessage,
               precedence: Precedence, now: float, out: list[Action], held: bool = False,
               repaired: bool = False, expires_at: float | None = None) -> None:
        """Store, journal and show one chat message under the room's current rule (``precedence`` and
        ``expires_at``: RCM's)."""
        pr = self.rooms.private.get(p.room)
        if pr is not None and p.user not in pr.members:
            return                                  # not a member of the private room: dropped at every site
        label = self.labels.stored(p.label)
        if self.labels.enabled and not label.dominates(self.rooms.floor(p.room)):
            log.warning("dropped %s from %s: label %s is below room %r's floor %s", msg_id, origin, label, p.room,
                        self.rooms.floor(p.room))
            return                                  # below the room's floor: dropped at every site alike
        self.journal_n += 1
        n = self.journal_n
        # Late warns a reader that the message's place had passed before it came. A message of this site's
        # own users entered the order here, at once: nobody here read past its place, so it is never shown
        # late here (the journal keeps RCM's flag; docs/chat-protocol.md, "message").
        mentions = tuple(u for u in P.mentioned(p.text, self.site) if self.rooms.may_read(u, label))
        m = StoredMessage(msg_id, n, p.room, origin, seq, p.user, p.text, p.sent_at, order,
                          late and origin != self.site, p.reply_to, precedence, mentions,
                          repaired, expires_at, self.labels.text(label))
        out.append(StoreMessage(m, now, own=origin == self.site))
        record: dict[str, Any] = dict(n=n, msg_id=msg_id, origin=origin, seq=seq, order=order, late=late,
                                      room=p.room, user=p.user, text=p.text, sent_at=p.sent_at,
                                      precedence=precedence, reply_to=p.reply_to,
                                      via=[self.via[origin]] if origin in self.via else [])
        if held:
            record["held"] = True
        if repaired:
            record["repaired"] = True
        if expires_at is not None:
            record["expires_at"] = expires_at
        if self.labels.enabled:
            record["label"] = label.to_json()
        out.append(JournalRecord("deliver", record))
        self.rooms.active(p.room, p.sent_at)
        out.append(ToRoom(p.room, m.frame(now), label if self.labels.enabled else None))
        if origin == self.site:
            out.append(ToUser(p.user, P.receipt(msg_id, self.site)))
        else:
            out.append(QueueReceipt(origin, msg_id))

    def _ask_definition(self, room: str, site: str, now: float) -> list[Action]:
        """Ask ``site`` (it sent us a message of ``room`` tagged with a definition) for the definition."""
        if site == self.site or now - self._asked.get((room, site), -1e18) < DEFINITION_REQUEST_INTERVAL:
            return []
        if len(self._asked) >= 4096:
            self._asked.clear()
        self._asked[(room, site)] = now
        return [SendPayload(DefinitionRequest(room), (site,))]

    def _release_held(self, room: str, now: float, out: list[Action]) -> None:
        """Show the held messages of ``room`` whose definition is known now (late: their place has passed)."""
        for h in self.view.held(room):
            try:
                p = decode_payload(h.payload)
            except PayloadError:          # validated when held; a newer rule may refuse it now
                out.append(ReleaseHeld(h.msg_id))
                continue
            if not isinstance(p, ChatMessage) or not self.rooms.definition_known(room, p.definition,
                                                                                 p.definition_order):
                continue
            out.append(ReleaseHeld(h.msg_id))
            if not self.view.has_message(h.msg_id):
                self._store(h.msg_id, h.origin, h.seq, h.order, True, p, h.precedence, now, out, held=True,
                            expires_at=h.expires_at)

    def _roster(self, origin: str, seq: int, p: Roster | RosterDelta | RosterTip, now: float,
                out: list[Action]) -> None:
        if origin == self.site or origin not in self.rooms.rosters:
            return
        cur = self.rooms.rosters[origin]
        new, asks = self.roster_from(origin, p, now)
        out += asks
        if new is None:
            return
        before_will = seq < self.chat_gone.get(origin, 0)
        if before_will:
            # Sent before the will of the chat server that sent it, and repaired since: newer than any roster here,
            # it still speaks for a server that is gone. Its rooms and generation count; nobody in it is online.
            new = RemoteRoster(new.generation, frozenset(), new.rooms)
        if isinstance(p, Roster) and self.site in p.want:
            self.roster_requested(origin)    # it restarted and lacks ours (core_sites.py, publish_roster)
        for room, def_id in (p.private.items() if isinstance(p, (Roster, RosterDelta)) else ()):
            # A roster's word alone never makes a room private: the room is closed only while the
            # claimer is asked for the definition, for a bounded time (rooms.py, "claims").
            if self.rooms.claim(room, def_id, origin, now):
                out += self._ask_definition(room, origin, now)
        came, went = sorted(new.online - cur.online), sorted(cur.online - new.online)
        self.rooms.set_roster(origin, new)
        if not before_will:
            out += self.chat_server_gone(origin, None)       # a newer roster: its chat server is back
        if came or went:
            out.append(Broadcast(P.presence(origin, came, went)))

    def _gone(self, origin: str, seq: int, out: list[Action]) -> None:
        """``origin``'s chat server is gone (its will, sent by its RCM server): its users are offline here, and
        clients are told (``site_status``'s ``chat_down``). The roster keeps its generation and rooms: older
        rosters are still old news, and the server's next one (full, after its start or its reconnection to RCM)
        is newer and brings them back."""
        if origin == self.site or origin not in self.rooms.rosters:
            return
        out += self.chat_server_gone(origin, seq)
        cur = self.rooms.rosters[origin]
        if cur.online:
            self.rooms.set_roster(origin, RemoteRoster(cur.generation, frozenset(), cur.rooms))
            out.append(Broadcast(P.presence(origin, [], sorted(cur.online))))

    def _acknowledgement(self, origin: str, p: Acknowledgement, out: list[Action]) -> None:
        """A user of ``origin`` acknowledged a flash or immediate message: kept and shown to its room here;
        journaled at the user's own site (Contract 3's ``acknowledge``)."""
        if self.view.acknowledged_at(p.msg_id, p.user, origin) is not None:
            return                  # once per (user, message): a repeat is neither journaled nor shown again
        out.append(StoreAcknowledgement(p.msg_id, p.user, origin, p.at))
        if origin == self.site:
            out.append(JournalRecord("acknowledge", dict(msg_id=p.msg_id, user=p.user)))
        m = self.view.message(p.msg_id)
        if m is not None:           # (not here yet: shown with the message, from the store)
            out.append(ToRoom(m.room, P.acknowledged(p.msg_id, p.user, origin, p.at),
                              self.labels.stored(m.label) if self.labels.enabled else None))

    def _receipts(self, origin: str, p: Receipts, out: list[Action]) -> None:
        if origin == self.site:
            return
        seen: set[str] = set()
        for msg_id in p.msg_ids:
            if not msg_id.startswith(self.site + ":") or msg_id in seen or self.view.has_receipt(msg_id, origin):
                continue
            seen.add(msg_id)
            out.append(StoreReceipt(msg_id, origin))
            m = self.view.message(msg_id)
            if m is not None and self.rooms.may_read(m.user, self.labels.stored(m.label)):
                out.append(ToUser(m.user, P.receipt(msg_id, origin)))

    def recovered(self, records: list[dict[str, Any]]) -> list[Action]:
        """Store the journal's ``deliver`` records the database lacks, as journaled (``Journal.recover``), and
        show them to their rooms' clients: those connected now (a failure in this run) have not seen them.
        Unlike ``delivery``, it writes no receipt of this site's own (recovery never has)."""
        out: list[Action] = []
        stored: set[str] = set()
        for r in records:
            if r["msg_id"] not in stored and not self.view.has_message(r["msg_id"]):
                stored.add(r["msg_id"])
                m = StoredMessage(r["msg_id"], r["n"], r["room"], r["origin"], r["seq"], r["user"], r["text"],
                                  r["sent_at"], r["order"], r["late"] and r["origin"] != self.site,
                                  r.get("reply_to", ""),
                                  Precedence.parse(r.get("precedence", DEFAULT)), P.mentioned(r["text"], self.site),
                                  bool(r.get("repaired", False)), _journaled_expiry(r.get("expires_at")),
                                  self._journaled_label(r.get("label")))
                out.append(StoreMessage(m, r["at"], own=False))
                self.rooms.active(m.room, m.sent_at)
                out.append(ToRoom(m.room, m.frame(), self.labels.stored(m.label) if self.labels.enabled else None))
            self.journal_n = max(self.journal_n, r["n"])
        if records:
            out.append(StoreJournalN(self.journal_n))
        return out

    def _journaled_label(self, value: Any) -> str:
        """A journal record's ``label`` as the database keeps it (our own records; unreadable: ``UNREADABLE``'s
        spelling, which nobody may read)."""
        if not self.labels.enabled:
            return ""
        if value is None:
            return str(self.labels.default)
        try:
            return str(self.labels.scheme.from_json(value))
        except ValueError:
            return "UNREADABLE"

    def rollback(self, journal_n: int) -> None:
        """A step's transaction was rolled back: the rooms as the database holds them, the counter as it was."""
        self.journal_n = journal_n
        self.rooms.reload(self.view)
        self.chat_gone = self._stored_chat_gone()

    def _stored_chat_gone(self) -> dict[str, int]:
        return {p: n for p, n in self.view.chat_gone().items() if p in self.peers}


def _journaled_expiry(value: Any) -> float | None:
    """A journal record's ``expires_at`` (our own records: a number, or absent)."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
