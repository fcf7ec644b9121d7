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
  marked, and revises the ``missing`` notice (losses.py).

Requests (``join``, ``leave``, ``create``, ``rooms``, ``history``) either
raise ``Refusal`` or return the actions and the reply frame. Publication
(``publish_roster``, ``take_receipts``, ``take_recovered``) is called by the
edge's timers.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from ordering.keys import key_problem, sortable_key
from rcm.connman import Status

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
    StoreDefinition,
    StoreMembership,
    StoreMessage,
    StorePrivateRoom,
    StoreReceipt,
    ToRoom,
    ToUser,
)
from .history import History
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
    Roster,
    decode_payload,
)
from .protocol import ErrorCode as E
from .protocol import Refusal
from .rooms import RemoteRoster, RoomFacts, RoomState
from .store import HeldMessage, PrivateRoom
from .store_messages import StoredMessage

CONNECTED, SUSPECTED, DISCONNECTED = (s.value for s in (Status.CONNECTED, Status.SUSPECTED, Status.DISCONNECTED))
RECEIPT_BATCH = 2000                  # msg_ids per receipt payload
DEFINITION_REQUEST_INTERVAL = 30.0    # seconds between requests for the same definition to the same site


class ChatView(RoomFacts, Protocol):
    """What the core reads from the site's database (ChatStore provides it)."""

    def has_message(self, msg_id: str) -> bool: ...
    def sent_msg_id(self, user: str, client_id: str) -> str | None: ...
    def message(self, msg_id: str) -> StoredMessage | None: ...
    def has_receipt(self, msg_id: str, site: str) -> bool: ...


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
    def repaired(self) -> bool: ...


class ChatCore:
    def __init__(self, site: str, peers: Iterable[str], view: ChatView, *, journal_n: int, roster_gen: int,
                 history: History, max_rooms_per_user: int, max_rooms: int, rooms_created_per_hour: float,
                 rooms_created_burst: int, rooms_page: int) -> None:
        self.site = site
        self.peers = list(peers)
        self.view = view
        self.rooms = RoomState.load(view, self.peers)
        self.journal_n = journal_n                      # the last ``n`` journaled at this site
        self.history = history
        self.max_rooms_per_user = max_rooms_per_user
        self.max_rooms = max_rooms
        self.rooms_created = (rooms_created_per_hour / 3600.0, rooms_created_burst)
        self.rooms_page = rooms_page
        self.status: dict[str, str] = {p: SUSPECTED for p in self.peers}   # as shown to clients
        self.via: dict[str, str] = {}                                        # peer -> next hop, when relayed
        self.rcm_up = False
        self.journaled_status: dict[str, str] = {}                          # as last reported by RCM
        self.roster_gen = roster_gen
        self.roster_force = True
        self.published_online: frozenset[str] = frozenset()
        self.published_rooms: dict[str, frozenset[str]] = {}
        self.pending_receipts: dict[str, list[str]] = {}
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
        out: list[Action] = []
        replay = isinstance(p, ChatMessage) and self.view.has_message(d.msg_id)
        if d.repaired and not replay:
            out += self.losses.recovered(d.origin, d.seq)
        if isinstance(p, ChatMessage):
            self._message(d, p, now, send_recorded, out)
        elif isinstance(p, RoomDefinition):
            self._definition(d, p, now, out)
        elif isinstance(p, Roster):
            self._roster(d.origin, p, out)
        elif isinstance(p, Receipts):
            self._receipts(d.origin, p, out)
        elif isinstance(p, Barrier) and d.origin == self.site:
            out.append(BarrierReached(d.msg_id))
        elif isinstance(p, DefinitionRequest) and d.origin != self.site and p.room in self.rooms.private:
            out += self.definitions_for(d.origin, [p.room])
        elif isinstance(p, Acknowledgement):
            self._acknowledgement(d.origin, p, out)
        shown = any(isinstance(a, JournalRecord) and a.kind == "deliver" and a.fields["msg_id"] == d.msg_id
                    for a in out)
        if not shown and not replay:
            # Every RCM delivery takes a place in the global order: journal the ones that show no chat
            # message here too, before anything they cause (issue 20 item 8).
            at = next((i for i, a in enumerate(out) if isinstance(a, JournalRecord) and a.kind != "send"), len(out))
            out.insert(at, JournalRecord("control", dict(msg_id=d.msg_id, origin=d.origin, seq=d.seq,
                                                         order=list(d.order), late=bool(d.late))))
        return out

    def _message(self, d: RcmDelivery, p: ChatMessage, now: float, send_recorded: bool, out: list[Action]) -> None:
        if d.origin == self.site and p.client_id:
            # Our own message: its (user, client_id) is known now even if we crashed before RCM's answer,
            # so a retry of the same say is acked with this msg_id instead of being sent again.
            if not send_recorded and self.view.sent_msg_id(p.user, p.client_id) is None:
                # RCM accepted it but its answer never reached us (the RCM connection broke, or the
                # process was killed): write the send record now, before the deliver record (Contract 3).
                out.append(JournalRecord("send", dict(msg_id=d.msg_id, origin=self.site, seq=d.seq, room=p.room,
                                                      user=p.user, text=p.text, sent_at=p.sent_at,
                                                      order=list(d.order))))
            out.append(RecordSent(p.user, p.client_id, d.msg_id))
        if self.view.has_message(d.msg_id):
            return                                   # replayed by RCM after a restart
        if p.definition and not self.rooms.definition_known(p.room, p.definition, p.definition_order):
            out.append(HoldMessage(HeldMessage(p.definition, p.room, sortable_key(p.definition_order), d.msg_id,
                                               d.origin, d.seq, list(d.order), bytes(d.payload))))
            if p.room not in self.rooms.private:
                self.rooms.pending.setdefault(p.room, p.definition)
            out += self._ask_definition(p.room, d.origin, now)
            return
        self._store(d.msg_id, d.origin, d.seq, list(d.order), bool(d.late), p, now, out,
                    repaired=bool(d.repaired))

    def _store(self, msg_id: str, origin: str, seq: int, order: list[Any], late: bool, p: ChatMessage, now: float,
               out: list[Action], held: bool = False, repaired: bool = False) -> None:
        """Store, journal and show one chat message under the room's current rule."""
        pr = self.rooms.private.get(p.room)
        if pr is not None and p.user not in pr.members:
            return                                  # not a member of the private room: dropped at every site
        self.journal_n += 1
        n = self.journal_n
        m = StoredMessage(msg_id, n, p.room, origin, seq, p.user, p.text, p.sent_at, order, late, p.reply_to,
                          p.precedence, P.mentioned(p.text, self.site), repaired)
        out.append(StoreMessage(m, now, own=origin == self.site))
        record: dict[str, Any] = dict(n=n, msg_id=msg_id, origin=origin, seq=seq, order=order, late=late,
                                      room=p.room, user=p.user, text=p.text, sent_at=p.sent_at,
                                      precedence=p.precedence, reply_to=p.reply_to,
                                      via=[self.via[origin]] if origin in self.via else [])
        if held:
            record["held"] = True
        if repaired:
            record["repaired"] = True
        out.append(JournalRecord("deliver", record))
        self.rooms.active(p.room, p.sent_at)
        out.append(ToRoom(p.room, m.frame()))
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
                self._store(h.msg_id, h.origin, h.seq, h.order, True, p, now, out, held=True)

    def _definition(self, d: RcmDelivery, p: RoomDefinition, now: float, out: list[Action]) -> None:
        # A re-sent definition carries its original identity (msg_id and order key); every site compares those.
        def_id = p.def_id or d.msg_id
        order = tuple(p.def_order) if p.def_id else tuple(d.order)
        def_site = def_id.rsplit(":", 1)[0]
        rooms = self.rooms
        if def_id not in rooms.known_defs:
            rooms.known_defs[def_id] = p.room
            out.append(StoreDefinition(def_id, p.room))
        key = sortable_key(order)
        if not rooms.decide(p.room, p.owner, def_id, key):
            if rooms.private[p.room].msg_id != def_id:     # superseded or losing: its messages may be shown now
                self._release_held(p.room, now, out)
            return
        made_private = p.room not in rooms.private and def_site != self.site and bool(rooms.local_members.get(p.room))
        pr = PrivateRoom(p.room, p.owner, frozenset(p.members), key, def_id, order)
        rooms.private[p.room] = pr
        rooms.pending.pop(p.room, None)
        out.append(StorePrivateRoom(pr))
        # A public room in use here made private elsewhere (in a partition its maker could not know): every
        # site applies the definition alike; the members it removes here are told who did it (audit row 16).
        reason = (f"room {p.room!r} was made private by {p.owner} at {def_site}; you are not a member"
                  if made_private else "not a member of the private room")
        removed = sorted(u for u in rooms.local_members.get(p.room, set()) if u not in pr.members)
        for u in removed:
            rooms.remove_member(u, p.room)
            out.append(StoreMembership(u, p.room, False))
            out.append(ToUser(u, P.left(p.room, reason)))
        owner_here = def_site == self.site and p.room not in rooms.rooms_of(p.owner)
        if owner_here:
            rooms.add_member(p.owner, p.room)
            out.append(StoreMembership(p.owner, p.room, True))
        self.roster_force = self.roster_force or bool(removed) or owner_here
        self._release_held(p.room, now, out)
        if def_site == self.site and not p.def_id:
            out.append(ToUser(p.owner, self.history.joined(p.room, pr)))

    def _roster(self, origin: str, p: Roster, out: list[Action]) -> None:
        cur = self.rooms.rosters.get(origin)
        if origin == self.site or cur is None or p.generation <= cur.generation:
            return
        for room, def_id in p.private.items():
            if room not in self.rooms.private and def_id not in self.rooms.known_defs:
                self.rooms.pending.setdefault(room, def_id)
        online = frozenset(p.online)
        came, went = sorted(online - cur.online), sorted(cur.online - online)
        self.rooms.rosters[origin] = RemoteRoster(p.generation, online, {r: frozenset(m) for r, m in p.rooms.items()})
        if came or went:
            out.append(Broadcast(P.presence(origin, came, went)))

    def _acknowledgement(self, origin: str, p: Acknowledgement, out: list[Action]) -> None:
        """A user of ``origin`` acknowledged a flash or immediate message: kept and shown to its room here;
        journaled at the user's own site (Contract 3's ``acknowledge``)."""
        out.append(StoreAcknowledgement(p.msg_id, p.user, origin, p.at))
        if origin == self.site:
            out.append(JournalRecord("acknowledge", dict(msg_id=p.msg_id, user=p.user)))
        m = self.view.message(p.msg_id)
        if m is not None:           # (not here yet: shown with the message, from the store)
            out.append(ToRoom(m.room, P.acknowledged(p.msg_id, p.user, origin, p.at)))

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
            if m is not None:
                out.append(ToUser(m.user, P.receipt(msg_id, origin)))

    # ==============================================================================================
    # site statuses and missing messages
    # ==============================================================================================
    def site_statuses(self) -> dict[str, str]:
        return {self.site: CONNECTED if self.rcm_up else SUSPECTED, **self.status}

    def reachable_peers(self) -> list[str]:
        """Peers RCM sends to now. Control payloads go only to them, so that RCM's missing notices after a
        disconnection count chat messages; what they need is sent again when the peer comes back."""
        return [p for p in self.peers if self.journaled_status.get(p, DISCONNECTED) != DISCONNECTED]

    def control_dests(self) -> tuple[str, ...]:
        return tuple(self.reachable_peers()) or (self.site,)

    def rcm_connected(self, statuses: dict[str, str], via: dict[str, str | None] | None = None) -> list[Action]:
        """The RCM connection is (re-)established; ``statuses``: RCM's view of every peer now (``via``: the
        next hop of those only relays reach)."""
        self.rcm_up = True
        self.roster_force = True
        out: list[Action] = [Broadcast(P.site_status(self.site, CONNECTED))]
        # The RCM server may have restarted (its peers start suspected): journal what it says now in full,
        # so the journal's statuses are its current view.
        self.journaled_status.clear()
        for peer, status in statuses.items():
            out += self.status_change(peer, status, (via or {}).get(peer))
        return out

    def rcm_lost(self) -> list[Action]:
        """We cannot vouch for any peer while our own RCM server is unreachable."""
        self.rcm_up = False
        out: list[Action] = [Broadcast(P.site_status(self.site, SUSPECTED))]
        for peer in self.peers:
            if self.status.get(peer) == CONNECTED:
                out += self._show(peer, SUSPECTED)
        return out

    def status_change(self, peer: str, status: str, via: str | None = None) -> list[Action]:
        """RCM's view of ``peer`` changed (``via``: the next hop when only relays reach it)."""
        if peer == self.site or peer not in self.status:
            return []
        out: list[Action] = []
        previous = self.journaled_status.get(peer)
        if previous != status:
            self.journaled_status[peer] = status
            out.append(JournalRecord("status", dict(peer=peer, status=status)))
        if status == CONNECTED and self.status.get(peer) != CONNECTED:
            self.roster_force = True         # tell the (re)connected site who is here
        if status == CONNECTED and previous == DISCONNECTED:
            out += self.definitions_for(peer)
        return out + self._show(peer, status, via if status == CONNECTED else None)

    def _show(self, peer: str, status: str, via: str | None = None) -> list[Action]:
        if self.status.get(peer) == status and self.via.get(peer) == via:
            return []
        self.status[peer] = status
        if via is None:
            self.via.pop(peer, None)
        else:
            self.via[peer] = via
        return [Broadcast(P.site_status(peer, status, via))]

    def definitions_for(self, peer: str, rooms: Iterable[str] | None = None) -> list[Action]:
        """Private rooms' definitions known here, with their original identity, for a peer that may have
        missed them (it was disconnected when they were sent, or it asked). Any site that knows a
        definition re-sends it, not only its maker: the maker may be out of reach."""
        out: list[Action] = []
        for room in sorted(self.rooms.private) if rooms is None else rooms:
            pr = self.rooms.private.get(room)
            if pr is not None and pr.order:
                out.append(SendPayload(RoomDefinition(pr.room, pr.owner, tuple(sorted(pr.members)), pr.msg_id,
                                                      pr.order), (peer,)))
        return out

    def missing(self, origin: str, ranges: tuple[tuple[int, int], ...]) -> list[Action]:
        """RCM reported messages of ``origin`` lost here (chat_server/losses.py)."""
        return self.losses.reported(origin, ranges)

    def take_recovered(self) -> list[Action]:
        """Revised ``missing`` notices for what repair brought back since the last call (the edge's timer)."""
        return self.losses.revisions()

    # ==============================================================================================
    # publication (the edge's timers)
    # ==============================================================================================
    def publish_roster(self, online: frozenset[str]) -> tuple[list[Action], Roster | None]:
        """Presence changes for local clients, and the roster other sites need (None: nothing new)."""
        out: list[Action] = []
        rooms = {r: frozenset(m) for r, m in self.rooms.local_members.items() if m}
        if online != self.published_online:
            came, went = sorted(online - self.published_online), sorted(self.published_online - online)
            self.published_online = online
            out.append(Broadcast(P.presence(self.site, came, went)))
            self.roster_force = True
        if rooms != self.published_rooms:
            self.published_rooms = rooms
            self.roster_force = True
        if not self.roster_force or not self.rcm_up or not self.reachable_peers():
            return out, None
        self.roster_gen += 1
        private = {r: self.rooms.private[r].msg_id for r in rooms if r in self.rooms.private}
        return out, Roster(self.roster_gen, tuple(sorted(online)), {r: tuple(sorted(m)) for r, m in rooms.items()},
                           private)

    def queue_receipt(self, origin: str, msg_id: str) -> None:
        self.pending_receipts.setdefault(origin, []).append(msg_id)

    def rollback(self, journal_n: int) -> None:
        """A step's transaction was rolled back: the rooms as the database holds them, the counter as it was."""
        self.journal_n = journal_n
        self.rooms.reload(self.view)

    def take_receipts(self) -> list[SendPayload]:
        """The receipt batches due: the messages delivered here since the last call, to their origins."""
        if not self.pending_receipts:
            return []
        pending, self.pending_receipts = self.pending_receipts, {}
        ids = [i for batch in pending.values() for i in batch]
        reachable = set(self.reachable_peers())
        out = []
        for i in range(0, len(ids), RECEIPT_BATCH):
            chunk = ids[i:i + RECEIPT_BATCH]
            dests = tuple(sorted({m.split(":", 1)[0] for m in chunk} & reachable))
            if dests:
                out.append(SendPayload(Receipts(tuple(chunk)), dests))
        return out

    # ==============================================================================================
    # requests of local users
    # ==============================================================================================
    def join(self, user: str, room: str, now: float) -> tuple[list[Action], dict[str, Any]]:
        """Join (or re-read) a room: the actions, and the ``joined`` frame."""
        self.rooms.check_access(user, room, "join")
        out: list[Action] = []
        mine = self.rooms.rooms_of(user)
        if room not in mine:
            if len(mine) >= self.max_rooms_per_user:
                raise Refusal(E.LIMIT, f"join: at most {self.max_rooms_per_user} rooms per user")
            if not self.rooms.known(room):
                self._check_new_room(user, now)
            self.rooms.add_member(user, room)
            out.append(StoreMembership(user, room, True))
        return out, self.history.joined(room, self.rooms.private.get(room))

    def _check_new_room(self, user: str, now: float, what: str = "join") -> None:
        """A join or create that brings a new room name into being: at most ``max_rooms`` names at the site,
        and a user's new names are rate-limited (a join-say-leave loop grew every site's rooms, audit row 12;
        a create loop too, issue 23)."""
        if len(self.rooms.names()) >= self.max_rooms:
            raise Refusal(E.LIMIT, f"{what}: this site already knows max_rooms = {self.max_rooms} rooms; "
                                   "join an existing one")
        bucket = self._room_buckets.get(user)
        if bucket is None:
            if len(self._room_buckets) >= 10_000:
                self._room_buckets.clear()
            bucket = self._room_buckets[user] = TokenBucket(*self.rooms_created, now)
        if not bucket.take(now):
            raise Refusal(E.LIMIT, f"{what}: you made {self.rooms_created[1]} new rooms lately "
                                   f"(rooms_created_per_hour = {self.rooms_created[0] * 3600:g}); join an existing "
                                   "room or try later")

    def leave(self, user: str, room: str) -> list[Action]:
        if room not in self.rooms.rooms_of(user):
            raise Refusal(E.NOT_JOINED, f"leave: you are not in room {room!r}")
        self.rooms.remove_member(user, room)
        return [StoreMembership(user, room, False)]

    def check_say(self, user: str, room: str) -> PrivateRoom | None:
        """May ``user`` say something in ``room`` now? Its private definition, if any (to tag the message)."""
        self.rooms.check_access(user, room, "say")
        if room not in self.rooms.rooms_of(user):
            raise Refusal(E.NOT_JOINED, f"say: join room {room!r} first")
        return self.rooms.private.get(room)

    def check_create(self, user: str, room: str, members: Iterable[str], max_members: int,
                     now: float) -> RoomDefinition:
        """The definition to send for a ``create``; Refusal if the name is taken, the list too long, or a new
        name over the room caps (``max_rooms_per_user``, ``max_rooms``, ``rooms_created_per_hour``)."""
        listed = tuple(sorted(set(members) | {user}))
        if len(listed) > max_members:
            raise Refusal(E.LIMIT, f"create: at most {max_members} members")
        pr = self.rooms.private.get(room)
        if pr is not None and pr.owner != user:
            raise Refusal(E.ROOM_EXISTS, f"create: room {room!r} exists and belongs to {pr.owner}")
        if pr is None and room in self.rooms.pending:
            raise Refusal(E.ROOM_EXISTS, f"create: room {room!r} is a private room of another site")
        if pr is None and (self.rooms.members_of(room) or room in self.rooms.activity):
            raise Refusal(E.ROOM_EXISTS, f"create: public room {room!r} already exists")
        if pr is None:              # a new name: its owner joins it at every site's delivery of the definition
            if len(self.rooms.rooms_of(user)) >= self.max_rooms_per_user:
                raise Refusal(E.LIMIT, f"create: at most {self.max_rooms_per_user} rooms per user")
            self._check_new_room(user, now, "create")
        return RoomDefinition(room, user, listed)

    def directory(self, user: str, after: str, limit: int) -> dict[str, Any]:
        """The ``directory`` reply: public rooms known here (from every site's traffic) and the private rooms
        the user belongs to, with member counts and last activity, a page at a time."""
        limit = min(limit, self.rooms_page)
        out: list[dict[str, Any]] = []
        more = False
        for room in sorted(n for n in self.rooms.names() if n > after):
            if not self.rooms.visible(user, room):
                continue
            if len(out) == limit:
                more = True
                break
            out.append({"room": room, "private": room in self.rooms.private,
                        "members": len(self.rooms.members_of(room)), "last_at": self.rooms.activity.get(room),
                        "joined": room in self.rooms.rooms_of(user)})
        return P.directory(out, more)

    def room_list(self, user: str, online_here: Iterable[str], after: str, limit: int) -> dict[str, Any]:
        """The ``rooms`` reply: the rooms ``user`` may see, a page at a time (``after`` the previous page)."""
        limit = min(limit, self.rooms_page)
        online = self.rooms.online_anywhere(online_here)
        out: list[dict[str, Any]] = []
        more = False
        for room in sorted(n for n in self.rooms.names() if n > after):
            if not self.rooms.visible(user, room):
                continue
            if len(out) == limit:
                more = True
                break
            members = self.rooms.members_of(room)
            out.append({"room": room, "private": room in self.rooms.private, "members": len(members),
                        "online": len(members & online), "joined": room in self.rooms.rooms_of(user)})
        return P.rooms(out, more)
