"""The chat core's dealings with the other sites, sans-IO: statuses, missing messages, publication.

``OtherSites`` is the part of ``core.ChatCore`` that faces the other sites
rather than the local users or RCM's deliveries: the site statuses shown to
clients (RCM's view of each peer, journaled when it changes, and whether our
own RCM server is up), which peers control payloads go to, the private-room
definitions re-sent to a peer that comes back or asks, RCM's missing-message
notices and their revisions after repair (losses.py), and what the edge's
timers publish: this site's roster and presence changes (a roster names the
peers whose roster this server lacks, after a restart, and a peer named
publishes its own at once), and the receipt batches for the messages
delivered here; the timers also end other sites' claims of private rooms
whose definition did not come (``expire_claims``).

Receipts (a message's delivery at this site, for its origin) ride along in
this site's next chat message to every site (``receipts_along``); what has
waited ``wait`` seconds without one goes in a batch of its own
(``take_receipts``): with ``compact`` payloads one payload for every origin
named (each reads its own part, as in a chat message), else one per origin.
The edge ticks four times per ``receipt_interval`` and waits three quarters
of it, so a receipt still leaves within ``receipt_interval``, and one that
finds no chat message to ride in costs one RCM message per batch rather than
one per origin per tick (at 2 msg/s per site on three sites, a fixed 0.5 s
tick sent about as many receipt messages as chat messages).

Rosters (docs/chat-protocol.md, "presence"): with ``compact`` payloads a
full roster goes to every reachable peer after a start, an RCM reconnection
or a failed send (``roster_force``), and otherwise only the delta since the
roster last sent (``sent_online``, ``sent_rooms``), each with the next
generation. A peer applies a delta only on the generation before it;
``roster_from`` answers anything further ahead with a roster request, and a
request is answered by a full roster to the asker alone (``roster_owed``). A
peer that comes back from a disconnection (when RCM skipped it) is sent a
*tip*, the current generation, so that it asks if it missed anything; an
idle mission sends nothing. Without ``compact`` every roster is full, as in
earlier releases.
``ChatCore`` sets the state it declares (``ChatCore.__init__``).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping

from contracts.status import LinkStatus

from . import protocol as P
from .actions import Action, Broadcast, JournalRecord, SendPayload, StoreChatGone, StoreRosterGeneration
from .losses import Losses
from .payload import Receipts, RoomDefinition, RoomFloor, Roster, RosterDelta, RosterRequest, RosterTip
from .rooms import Claim, RemoteRoster, RoomState

CONNECTED, SUSPECTED, DISCONNECTED = (s.value for s in (LinkStatus.CONNECTED, LinkStatus.SUSPECTED,
                                                        LinkStatus.DISCONNECTED))
RECEIPT_BATCH = 2000                  # msg_ids per receipt payload
ROSTER_REQUEST_INTERVAL = 30.0        # seconds between requests for the same site's full roster (reset on reconnection)


class OtherSites:
    """Site statuses, missing notices and publication to other sites (a part of ``core.ChatCore``)."""

    site: str
    peers: list[str]
    rooms: RoomState
    status: dict[str, str]                # as shown to clients
    via: dict[str, str]                   # peer -> next hop, when relayed
    chat_gone: dict[str, int]             # peers whose chat server left its will, with no roster since: its seq
    rcm_up: bool
    rcm_stalled: bool                     # our RCM server holds a request unanswered past the limit
    journaled_status: dict[str, str]      # as last reported by RCM
    roster_gen: int
    roster_force: bool                    # the next roster is a full one, to every reachable peer
    published_online: frozenset[str]
    published_rooms: dict[str, frozenset[str]]
    pending_receipts: dict[str, list[str]]
    pending_since: float | None           # when the oldest pending receipt was queued (the edge's clock)
    losses: Losses
    compact: bool                         # roster deltas (and the array layout)
    sent_online: frozenset[str]           # what the peers were last sent (the roster at ``roster_gen``)
    sent_rooms: dict[str, frozenset[str]]
    roster_owed: set[str]                 # peers that asked for a full roster (to them only)
    roster_tips: set[str]                 # peers back from a disconnection: told our generation
    roster_asked: dict[str, float]        # peer -> when we last asked it for a full roster

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
        self.rcm_up, self.rcm_stalled = True, False
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
        self.rcm_up, self.rcm_stalled = False, False
        out: list[Action] = [Broadcast(P.site_status(self.site, SUSPECTED))]
        for peer in self.peers:
            if self.status.get(peer) == CONNECTED:
                out += self._show(peer, SUSPECTED)
        return out

    def rcm_answering(self, waited: float, limit: float, statuses: Mapping[str, str],
                      via: Mapping[str, str | None]) -> list[Action]:
        """The edge's timer: our RCM server has left its oldest request unanswered for ``waited`` seconds (0:
        none outstanding). Past ``limit`` it is stalled (stopped, or its disk hangs) though connected: as with
        a lost connection we vouch for no peer and show our own site suspected, and says wait. When it answers
        again, RCM's current view (``statuses``, ``via``: nothing journaled, RCM never said otherwise) is shown
        again. Called every tick: nothing is copied or built unless the state changes."""
        if self.rcm_up and waited > limit:
            out = self.rcm_lost()
            self.rcm_stalled = True
            return out
        if not self.rcm_stalled or waited > limit:
            return []
        self.rcm_up, self.rcm_stalled = True, False
        out = [Broadcast(P.site_status(self.site, CONNECTED))]
        for peer in self.peers:
            status = statuses.get(peer)
            if status is not None:
                out += self._show(peer, status, via.get(peer) if status == CONNECTED else None)
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
        if status == CONNECTED and self.status.get(peer) != CONNECTED and not self.compact:
            self.roster_force = True         # tell the (re)connected site who is here
        if status == CONNECTED and previous not in (CONNECTED, SUSPECTED):
            # It may have missed roster deltas while cut off (RCM skips a disconnected site): it is told our
            # generation and asks for a full roster if it is behind; we ask it afresh in turn.
            self.roster_tips.add(peer)
            self.roster_asked.pop(peer, None)
        if status == CONNECTED and previous == DISCONNECTED:
            out += self.definitions_for(peer)
        if self.rcm_stalled:                 # shown when RCM answers again (rcm_answering): until then, suspected
            return out
        return out + self._show(peer, status, via if status == CONNECTED else None)

    def _show(self, peer: str, status: str, via: str | None = None) -> list[Action]:
        if self.status.get(peer) == status and self.via.get(peer) == via:
            return []
        self.status[peer] = status
        if via is None:
            self.via.pop(peer, None)
        else:
            self.via[peer] = via
        return [Broadcast(P.site_status(peer, status, via, peer in self.chat_gone))]

    def chat_server_gone(self, peer: str, will: int | None) -> list[Action]:
        """``peer``'s chat server is gone (``will``: the RCM seq of its will) or back (None: a newer roster came):
        shown with the site's status as RCM sees it, which does not change (``site_status``'s ``chat_down``)."""
        if peer == self.site or peer not in self.status or self.chat_gone.get(peer) == will:
            return []
        shown = (peer in self.chat_gone) != (will is not None)
        if will is None:
            del self.chat_gone[peer]
        else:
            self.chat_gone[peer] = max(will, self.chat_gone.get(peer, 0))
        out: list[Action] = [StoreChatGone(tuple(sorted(self.chat_gone.items())))]
        if shown:
            out.append(Broadcast(P.site_status(peer, self.status[peer], self.via.get(peer), will is not None)))
        return out

    def carriers(self, room: str) -> bool | tuple[str, ...]:
        """How far ``room``'s definition may travel (``SendPayload.within``): the sites its content may reach,
        when that is not every site; else anywhere."""
        reach = self.rooms.reach(room)
        return False if reach is None else tuple(reach)

    def definitions_for(self, peer: str, rooms: Iterable[str] | None = None) -> list[Action]:
        """Private rooms' definitions known here, with their original identity, for a peer that may have
        missed them (it was disconnected when they were sent, or it asked). Any site that knows a
        definition re-sends it, not only its maker: the maker may be out of reach."""
        out: list[Action] = []
        for room in sorted(self.rooms.private) if rooms is None else rooms:
            pr = self.rooms.private.get(room)
            if pr is not None and pr.order and self._reaches(room, peer):
                out.append(SendPayload(RoomDefinition(pr.room, pr.owner, tuple(sorted(pr.members)), pr.msg_id,
                                                      pr.order, pr.label, pr.sites), (peer,),
                                       self.carriers(room)))
        for room in sorted(self.rooms.floors) if rooms is None else ():
            f = self.rooms.floors[room]
            if f.order and self._reaches(room, peer):       # (a labeled public room's label, the same way)
                out.append(SendPayload(RoomFloor(f.room, f.owner, f.label, f.msg_id, f.order), (peer,),
                                       self.carriers(room)))
        return out

    def _reaches(self, room: str, peer: str) -> bool:
        """May ``peer`` hold what ``room``'s definition tells (need-to-know routing, labeling.py)?"""
        reach = self.rooms.reach(room)
        return reach is None or peer in reach

    def missing(self, origin: str, ranges: tuple[tuple[int, int], ...]) -> list[Action]:
        """RCM reported messages of ``origin`` lost here (chat_server/losses.py)."""
        return self.losses.reported(origin, ranges)

    def take_recovered(self) -> list[Action]:
        """Revised ``missing`` notices for what repair brought back since the last call, and the kept ranges
        to store if they changed (the edge's timer)."""
        return self.losses.revisions()

    # ==============================================================================================
    # publication (the edge's timers)
    # ==============================================================================================
    def publish_roster(self, online: frozenset[str]) -> tuple[list[Action], SendPayload | None]:
        """Presence changes for local clients, the new roster's generation to store, tips and full rosters
        owed to single peers (``SendPayload``), and the roster for the other reachable peers (None: nothing
        new): a full one after a restart, an RCM reconnection, a failed send or without ``compact``; else
        the delta since the last one sent (the edge sets ``roster_force`` again if it cannot be sent)."""
        out: list[Action] = []
        # A labeled room some site may not hold is left out of the roster, which goes to every site (labeling.py):
        # its name and members stay with the sites it reaches (docs/security.md).
        rooms = {r: frozenset(m) for r, m in self.rooms.local_members.items() if m and self.rooms.everywhere(r)}
        if online != self.published_online:
            came, went = sorted(online - self.published_online), sorted(self.published_online - online)
            self.published_online = online
            out.append(Broadcast(P.presence(self.site, came, went)))
            self.roster_force = self.roster_force or not self.compact
        if rooms != self.published_rooms:
            self.published_rooms = rooms
            self.roster_force = self.roster_force or not self.compact
        reachable = self.reachable_peers()
        if not self.rcm_up or not reachable:
            return out, None
        owed = [p for p in reachable if p in self.roster_owed]
        roster: SendPayload | None = None
        if self.roster_force or online != self.sent_online or rooms != self.sent_rooms:
            self.roster_gen += 1
            out.append(StoreRosterGeneration(self.roster_gen))
            full = self.roster_force
            payload = self._full_roster(online, rooms) if full else self._delta(online, rooms)
            self.sent_online, self.sent_rooms, self.roster_force = online, rooms, False
            dests = tuple(reachable) if full else tuple(p for p in reachable if p not in owed)
            roster = SendPayload(payload, dests) if dests else None
            if full:
                owed = []                                    # (served by the full roster to all)
        if owed:
            out.append(SendPayload(self._full_roster(self.sent_online, self.sent_rooms), tuple(owed)))
        told = set(roster.dests if roster is not None else ()) | set(owed)
        tips = tuple(p for p in reachable if p in self.roster_tips and p not in told)
        if tips:
            out.append(SendPayload(RosterTip(self.roster_gen), tips))
        self.roster_owed -= set(reachable)
        self.roster_tips -= set(reachable)
        return out, roster

    def _full_roster(self, online: frozenset[str], rooms: dict[str, frozenset[str]]) -> Roster:
        private = {r: self.rooms.private[r].msg_id for r in rooms if r in self.rooms.private}
        # A restarted chat server knows no other site's roster (they are not stored, and RCM replays only
        # what came after our last stored delivery): it names the peers it lacks, and each publishes its own.
        return Roster(self.roster_gen, tuple(sorted(online)), {r: tuple(sorted(m)) for r, m in rooms.items()},
                      private, self.rooms.lacking())

    def _delta(self, online: frozenset[str], rooms: dict[str, frozenset[str]]) -> RosterDelta:
        before = self.sent_rooms
        joined = {r: tuple(sorted(m - before.get(r, frozenset()))) for r, m in rooms.items()}
        left = {r: tuple(sorted(m - rooms.get(r, frozenset()))) for r, m in before.items()}
        joined = {r: m for r, m in sorted(joined.items()) if m}
        return RosterDelta(self.roster_gen, tuple(sorted(online - self.sent_online)),
                           tuple(sorted(self.sent_online - online)), joined,
                           {r: m for r, m in sorted(left.items()) if m},
                           {r: self.rooms.private[r].msg_id for r in joined if r in self.rooms.private})

    def roster_from(self, origin: str, p: Roster | RosterDelta | RosterTip, now: float) -> tuple[
            RemoteRoster | None, list[Action]]:
        """``origin``'s roster after ``p`` (None: unchanged), and a request for a full one when ``p`` shows
        that this site missed a delta (a gap in the generations) or lacks the roster (at most once per
        ``ROSTER_REQUEST_INTERVAL`` per peer, and afresh after a reconnection)."""
        cur = self.rooms.rosters[origin]
        if p.generation <= cur.generation:
            return None, []                  # old news (replayed, repaired, or a tip we are level with)
        if isinstance(p, Roster):
            return RemoteRoster(p.generation, frozenset(p.online), {r: frozenset(m) for r, m in p.rooms.items()}), []
        if isinstance(p, RosterDelta) and cur.generation >= 0 and p.generation == cur.generation + 1:
            rooms = {r: set(m) for r, m in cur.rooms.items()}
            for r, m in p.left.items():
                rooms.get(r, set()).difference_update(m)
            for r, m in p.joined.items():
                rooms.setdefault(r, set()).update(m)
            online = (cur.online - set(p.went)) | set(p.came)
            return RemoteRoster(p.generation, online, {r: frozenset(m) for r, m in rooms.items() if m}), []
        if now - self.roster_asked.get(origin, -1e18) < ROSTER_REQUEST_INTERVAL:
            return None, []
        self.roster_asked[origin] = now
        return None, [SendPayload(RosterRequest(), (origin,))]

    def roster_requested(self, origin: str) -> None:
        """``origin`` lacks our roster (it restarted, or missed a delta): a full one to it, next publication."""
        if self.compact:
            self.roster_owed.add(origin)
        else:
            self.roster_force = True

    def expire_claims(self, now: float) -> list[tuple[str, Claim]]:
        """Rooms another site claimed private whose definition did not come in time: open again (the edge's
        timer; rooms.py, "claims"). The expired claims, for the log."""
        return self.rooms.expire_claims(now)

    def queue_receipt(self, origin: str, msg_id: str, now: float = 0.0) -> None:
        if not self.pending_receipts:
            self.pending_since = now
        self.pending_receipts.setdefault(origin, []).append(msg_id)

    def receipts_along(self) -> tuple[str, ...]:
        """The receipts due to reachable origins, taken to ride along in a chat message this site is sending
        now (compact payloads only: every site reads its own part; ``requeue_receipts`` if the send fails).
        At most ``RECEIPT_BATCH`` (the rest wait for the next batch or message)."""
        if not self.compact or not self.pending_receipts:
            return ()
        taken: list[str] = []
        for origin in [o for o in self.reachable_peers() if o in self.pending_receipts]:
            ids = self.pending_receipts[origin]
            room = RECEIPT_BATCH - len(taken)
            taken += ids[:room]
            if len(ids) > room:
                self.pending_receipts[origin] = ids[room:]
                break
            del self.pending_receipts[origin]
        if not self.pending_receipts:
            self.pending_since = None
        return tuple(taken)

    def requeue_receipts(self, msg_ids: tuple[str, ...]) -> None:
        """Receipts taken to ride along in a message RCM refused: due with the next batch."""
        for m in msg_ids:
            self.queue_receipt(m.rsplit(":", 1)[0], m)
        if msg_ids:
            self.pending_since = float("-inf")

    def take_receipts(self, now: float = 0.0, wait: float = 0.0) -> list[SendPayload]:
        """The receipt batches due, once the oldest pending receipt has waited ``wait`` (none to an origin that
        is not reachable): with ``compact`` payloads one payload for every origin named, each reading its own
        part, else one per origin naming only its messages."""
        if not self.pending_receipts or (self.pending_since is not None and now - self.pending_since < wait):
            return []
        pending, self.pending_receipts, self.pending_since = self.pending_receipts, {}, None
        reachable = set(self.reachable_peers())
        due = {origin: ids for origin, ids in sorted(pending.items()) if origin in reachable}
        if not self.compact:
            return [SendPayload(Receipts(tuple(ids[i:i + RECEIPT_BATCH])), (origin,))
                    for origin, ids in due.items() for i in range(0, len(ids), RECEIPT_BATCH)]
        every = [m for ids in due.values() for m in ids]
        chunks = [tuple(every[i:i + RECEIPT_BATCH]) for i in range(0, len(every), RECEIPT_BATCH)]
        return [SendPayload(Receipts(c), tuple(sorted({m.rsplit(":", 1)[0] for m in c}))) for c in chunks]
