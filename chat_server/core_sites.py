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
delivered here; the timers also end other sites'
claims of private rooms whose definition did not come (``expire_claims``).
``ChatCore`` sets the state it declares (``ChatCore.__init__``).
"""
from __future__ import annotations

from collections.abc import Iterable

from contracts.status import LinkStatus

from . import protocol as P
from .actions import Action, Broadcast, JournalRecord, SendPayload, StoreRosterGeneration
from .losses import Losses
from .payload import Receipts, RoomDefinition, Roster
from .rooms import Claim, RoomState

CONNECTED, SUSPECTED, DISCONNECTED = (s.value for s in (LinkStatus.CONNECTED, LinkStatus.SUSPECTED,
                                                        LinkStatus.DISCONNECTED))
RECEIPT_BATCH = 2000                  # msg_ids per receipt payload


class OtherSites:
    """Site statuses, missing notices and publication to other sites (a part of ``core.ChatCore``)."""

    site: str
    peers: list[str]
    rooms: RoomState
    status: dict[str, str]                # as shown to clients
    via: dict[str, str]                   # peer -> next hop, when relayed
    rcm_up: bool
    journaled_status: dict[str, str]      # as last reported by RCM
    roster_gen: int
    roster_force: bool
    published_online: frozenset[str]
    published_rooms: dict[str, frozenset[str]]
    pending_receipts: dict[str, list[str]]
    losses: Losses

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
        """Revised ``missing`` notices for what repair brought back since the last call, and the kept ranges
        to store if they changed (the edge's timer)."""
        return self.losses.revisions()

    # ==============================================================================================
    # publication (the edge's timers)
    # ==============================================================================================
    def publish_roster(self, online: frozenset[str]) -> tuple[list[Action], Roster | None]:
        """Presence changes for local clients (and the new roster's generation to store), and the roster other
        sites need (None: nothing new)."""
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
        out.append(StoreRosterGeneration(self.roster_gen))
        private = {r: self.rooms.private[r].msg_id for r in rooms if r in self.rooms.private}
        # A restarted chat server knows no other site's roster (they are not stored, and RCM replays only
        # what came after our last stored delivery): it names the peers it lacks, and each publishes its own.
        return out, Roster(self.roster_gen, tuple(sorted(online)), {r: tuple(sorted(m)) for r, m in rooms.items()},
                           private, self.rooms.lacking())

    def expire_claims(self, now: float) -> list[tuple[str, Claim]]:
        """Rooms another site claimed private whose definition did not come in time: open again (the edge's
        timer; rooms.py, "claims"). The expired claims, for the log."""
        return self.rooms.expire_claims(now)

    def queue_receipt(self, origin: str, msg_id: str) -> None:
        self.pending_receipts.setdefault(origin, []).append(msg_id)

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
