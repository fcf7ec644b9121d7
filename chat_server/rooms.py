"""Rooms of one site, sans-IO: memberships, private rooms and their definitions, other sites' rosters.

Theory of operation
-------------------
``RoomState`` is the in-memory picture of the site's rooms that the chat core
(core.py) reads and changes while it applies deliveries and requests; the
database (store.py) holds the same facts durably, and the core emits a store
action for every change it makes here, so the two never disagree after a
commit. After a rolled-back transaction the core rebuilds this picture from
the database (``RoomState.load``).

The private-room rule lives here, in one place: a private room is open to the
members of its current definition. Which definition is current is decided the
same way at every site: the earliest in the global order names the owner, and
later definitions by that owner replace the member list (``decide``).

Only a definition makes a room private. Another site's word that a room is
private (its roster names the room's definition, or a message of the room is
tagged with a definition this site lacks) is a *claim*: while the definition
is fetched from the claimer the room is ``pending``, open to nobody, but only
for ``CLAIM_TIMEOUT`` seconds and for at most ``CLAIMS_PER_SITE`` rooms per
claimer; once a claimer's claim of a room timed out, its later claims of that
room (under any definition id) close nothing. A roster naming a definition
that never comes (a bug, a forged roster) therefore cannot lock a public room
for ever. Claims live in memory only (a restart opens the rooms). The leak
protection does not rest on ``pending``: a message tagged with a definition
this site lacks stays held, unseen, until the definition itself arrives
(core.py, audit row 1).

Labels (labeled missions, labeling.py): a room has a label, its *floor*. A
private room's is its definition's; a labeled public room's is set by its
creator's ``RoomFloor`` (the earliest in the global order wins, like a private
room's owner); any other room has the mission's default label. A user may
join, read, search or list a room only if its clearance (accounts.py,
``Clearances``, read at each check) dominates the floor: the same
``check_access`` and ``visible`` as the private-room rule. ``reach`` is where
the room's content may go: the sites cleared for a label, and for a private
room only those hosting a member (its definition's ``sites`` and its maker's).

Every change that may alter a room's entry in the directory (its members here
or at another site, its last message, whether it is private or closed) adds
the room to ``changed``; the core pushes the new entries to clients once a
presence interval (core_requests.py, ``take_directory``). ``listed`` remembers
which rooms clients may hold as public entries, so that one that turns
private or closed is withdrawn from them without a private room's name ever
going to a non-member.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from contracts.labels import Label
from ordering.keys import sortable_key

from .labeling import LabelPolicy
from .protocol import ErrorCode as E
from .protocol import Refusal
from .store import HeldMessage, PrivateRoom, RoomFloor


class RoomFacts(Protocol):
    """What ``RoomState.load`` reads from the database (ChatStore provides it)."""

    def all_memberships(self) -> list[tuple[str, str]]: ...
    def private_rooms(self) -> dict[str, PrivateRoom]: ...
    def known_definitions(self) -> dict[str, str]: ...
    def held(self, room: str | None = None) -> list[HeldMessage]: ...
    def room_activity(self) -> dict[str, float]: ...
    def room_floors(self) -> dict[str, RoomFloor]: ...


CLAIM_TIMEOUT = 60.0          # seconds a claimed room stays closed while its definition is fetched
CLAIMS_PER_SITE = 1000        # rooms one site's claims may close at once; its further claims close nothing
UNANSWERED_MAX = 4096         # (room, claimer) pairs whose claim timed out, not taken up again; then forgotten


@dataclass(frozen=True, slots=True)
class Claim:
    """Another site said ``room`` is private under definition ``def_id``, which this site lacks."""

    def_id: str
    site: str                 # the claimer, asked for the definition
    until: float              # the room is closed until then, unless the definition arrives


@dataclass(frozen=True, slots=True)
class RemoteRoster:
    """What another site last told us: its generation, who is online there, who is in which room."""

    generation: int = -1
    online: frozenset[str] = frozenset()
    rooms: dict[str, frozenset[str]] = field(default_factory=dict)


@dataclass(slots=True)
class RoomState:
    local_members: dict[str, set[str]] = field(default_factory=dict)     # room -> local users
    user_rooms: dict[str, set[str]] = field(default_factory=dict)        # local user -> rooms
    private: dict[str, PrivateRoom] = field(default_factory=dict)        # room -> its current definition
    known_defs: dict[str, str] = field(default_factory=dict)             # every definition id seen -> room
    pending: dict[str, Claim] = field(default_factory=dict)              # claimed private, definition being fetched
    activity: dict[str, float] = field(default_factory=dict)             # room with messages -> last sent_at
    rosters: dict[str, RemoteRoster] = field(default_factory=dict)       # peer -> its last roster
    claims_of: dict[str, int] = field(default_factory=dict)              # claimer -> its claims in ``pending``
    unanswered: set[tuple[str, str]] = field(default_factory=set)        # (room, claimer) claims that timed out
    changed: set[str] = field(default_factory=set)                       # directory entries to push again
    listed: set[str] = field(default_factory=set)                        # rooms clients may list as public
    floors: dict[str, RoomFloor] = field(default_factory=dict)           # labeled public room -> its floor
    labels: LabelPolicy = field(default_factory=lambda: LabelPolicy.unlabeled(""))
    clearance_of: Callable[[str], Label] | None = None                   # a local user's clearance, now

    @classmethod
    def load(cls, facts: RoomFacts, peers: Iterable[str], labels: LabelPolicy | None = None,
             clearance_of: Callable[[str], Label] | None = None) -> RoomState:
        state = cls()
        if labels is not None:
            state.labels = labels
        state.clearance_of = clearance_of
        state.floors = facts.room_floors()
        for user, room in facts.all_memberships():
            state.local_members.setdefault(room, set()).add(user)
            state.user_rooms.setdefault(user, set()).add(room)
        state.private = facts.private_rooms()
        state.known_defs = facts.known_definitions()
        state.activity = facts.room_activity()
        state.rosters = {p: RemoteRoster() for p in peers}
        state.listed = {r for r in state.names() if r not in state.private}
        return state

    def reload(self, facts: RoomFacts) -> None:
        """The database's facts again (after a rolled-back transaction); rosters and claims are kept."""
        fresh = RoomState.load(facts, self.rosters)
        for name in ("local_members", "user_rooms", "private", "known_defs", "activity", "floors"):
            setattr(self, name, getattr(fresh, name))
        for room in [r for r in self.pending if r in self.private]:
            self.end_claim(room)

    # --- who may do what ------------------------------------------------------------------------
    def check_access(self, user: str, room: str, what: str) -> None:
        """Refusal ``forbidden`` if ``user`` may not read or write ``room`` (the private-room rule)."""
        pr = self.private.get(room)
        if pr is not None and user not in pr.members:
            raise Refusal(E.FORBIDDEN, f"{what}: room {room!r} is private and you are not a member")
        if pr is None and room in self.pending:
            raise Refusal(E.FORBIDDEN, f"{what}: room {room!r} is private and its member list has not reached "
                                       "this site yet; try again later")
        if not self.cleared(user, room):
            raise Refusal(E.FORBIDDEN, f"{what}: room {room!r} is labeled {self.floor(room)}; your clearance "
                                       f"{self.clearance(user)} does not dominate it")

    def visible(self, user: str, room: str) -> bool:
        pr = self.private.get(room)
        member = (user in pr.members) if pr is not None else room not in self.pending
        return member and self.cleared(user, room)

    # --- labels (see the module docstring) ---------------------------------------------------------
    def clearance(self, user: str) -> Label:
        """A local user's clearance now (the default label when no reader is set: an unlabeled mission)."""
        return self.clearance_of(user) if self.clearance_of is not None else self.labels.default

    def floor(self, room: str) -> Label:
        """The room's label: a private room's definition's, a labeled public room's, else the default."""
        pr = self.private.get(room)
        if pr is not None:
            return self.labels.stored(pr.label)
        f = self.floors.get(room)
        return self.labels.stored(f.label) if f is not None else self.labels.default

    def cleared(self, user: str, room: str) -> bool:
        """Does ``user``'s clearance dominate the room's floor? (Always, in an unlabeled mission.)"""
        return not self.labels.enabled or self.clearance(user).dominates(self.floor(room))

    def may_read(self, user: str, label: Label) -> bool:
        """May ``user`` read content labeled ``label``?"""
        return not self.labels.enabled or self.clearance(user).dominates(label)

    def label_json(self, room: str) -> dict[str, Any] | None:
        """The room's label as ``joined``, ``rooms`` and ``directory`` entries carry it (None: unlabeled)."""
        return self.labels.to_json(self.floor(room))

    def hosts(self, room: str) -> frozenset[str] | None:
        """A private room's hosting sites in a labeled mission (its definition's ``sites`` and its maker's);
        None for a public room, or a definition that names none (every cleared site)."""
        pr = self.private.get(room)
        if pr is None or not pr.sites or not self.labels.enabled:
            return None
        return frozenset(pr.sites) | {pr.msg_id.rsplit(":", 1)[0]}

    def reach(self, room: str, label: Label | None = None) -> tuple[str, ...] | None:
        """Where content of ``room`` labeled ``label`` (default: the floor) may go (labeling.py, ``reach``)."""
        return self.labels.reach(self.floor(room) if label is None else label, self.hosts(room))

    def everywhere(self, room: str) -> bool:
        """May every site hear of the room (its name in rosters)? Not a labeled room some site may not hold."""
        return self.reach(room) is None

    def set_floor(self, f: RoomFloor) -> bool:
        """A labeled public room's definition: does it set the room's floor? The same answer at every site: the
        earliest in the global order, for a room that is not private."""
        cur = self.floors.get(f.room)
        if f.room in self.private or (cur is not None and (cur.msg_id == f.msg_id or cur.order_key <= f.order_key)):
            return False
        self.floors[f.room] = f
        self.changed.add(f.room)
        return True

    def active(self, room: str, sent_at: float) -> None:
        """A message of ``room`` sent at ``sent_at`` was stored here."""
        last = self.activity.get(room)
        if last is None or sent_at > last:
            self.activity[room] = sent_at
            self.changed.add(room)

    def hidden_from(self, user: str) -> set[str]:
        """Rooms whose messages ``user`` may not read here (search leaves them out)."""
        hidden = {r for r, pr in self.private.items() if user not in pr.members}
        hidden |= {r for r in self.pending if r not in self.private}
        if self.labels.enabled:
            c = self.clearance(user)
            labeled = self.names() if not c.dominates(self.labels.default) else {*self.floors, *self.private}
            hidden |= {r for r in labeled if not c.dominates(self.floor(r))}
        return hidden

    def members_of(self, room: str) -> set[str]:
        """Members of a room at every site known here."""
        members = set(self.local_members.get(room, ()))
        for r in self.rosters.values():
            members |= r.rooms.get(room, frozenset())
        return members

    def counted_members(self, room: str) -> set[str]:
        """Whom a room's listing counts (``rooms``, ``directory``): a private room's members are those its
        definition names, joined or not (IRC's ``NAMES`` lists them so); a public room's, who joined it at
        every site known here."""
        pr = self.private.get(room)
        return set(pr.members) if pr is not None else self.members_of(room)

    def known(self, room: str) -> bool:
        return (room in self.local_members or room in self.private or room in self.activity
                or any(room in r.rooms for r in self.rosters.values()))

    def names(self) -> set[str]:
        """Every room name this site knows (its own, its history's, other sites' rosters')."""
        names = set(self.local_members) | set(self.private) | set(self.activity)
        for r in self.rosters.values():
            names |= set(r.rooms)
        return names

    def lacking(self) -> tuple[str, ...]:
        """Peers whose roster has not come since this server started (a restart forgot them): asked for."""
        return tuple(sorted(p for p, r in self.rosters.items() if r.generation < 0))

    def set_roster(self, site: str, roster: RemoteRoster) -> None:
        """``site``'s new roster; the rooms whose members there changed are pushed again."""
        old = self.rosters.get(site, RemoteRoster())
        self.changed.update(r for r in old.rooms.keys() | roster.rooms.keys()
                            if old.rooms.get(r) != roster.rooms.get(r))
        self.rosters[site] = roster

    def set_private(self, pr: PrivateRoom) -> None:
        """``pr`` is the room's current definition now."""
        self.private[pr.room] = pr
        self.changed.add(pr.room)

    def online_anywhere(self, online_here: Iterable[str]) -> set[str]:
        users = set(online_here)
        for r in self.rosters.values():
            users |= r.online
        return users

    # --- memberships ----------------------------------------------------------------------------
    def add_member(self, user: str, room: str) -> None:
        self.local_members.setdefault(room, set()).add(user)
        self.user_rooms.setdefault(user, set()).add(room)
        self.changed.add(room)

    def remove_member(self, user: str, room: str) -> None:
        members = self.local_members.get(room)
        if members is not None:
            members.discard(user)
            if not members:
                del self.local_members[room]
        self.user_rooms.get(user, set()).discard(room)
        self.changed.add(room)

    def rooms_of(self, user: str) -> set[str]:
        return self.user_rooms.get(user, set())

    # --- definitions ----------------------------------------------------------------------------
    def definition_known(self, room: str, def_id: str, def_order: tuple[Any, ...] | list[Any]) -> bool:
        """May a message tagged with this definition be shown under the room's rule here?

        Yes if the definition itself reached us (applied, superseded or a losing one), or if the room's
        definition here is later in the global order (the message is of an earlier era of the room).
        Otherwise its sender knew a member list we don't: the message is held (audit row 1)."""
        if def_id in self.known_defs:
            return True
        pr = self.private.get(room)
        return pr is not None and sortable_key(def_order) <= pr.order_key

    # --- claims (see the module docstring) -------------------------------------------------------
    def claim(self, room: str, def_id: str, site: str, now: float) -> bool:
        """``site`` says ``room`` is private under ``def_id``: close the room while the definition is fetched.
        False when nothing was closed (known, private, already claimed, timed out before, or over the cap)."""
        if (room in self.private or room in self.pending or def_id in self.known_defs
                or (room, site) in self.unanswered or self.claims_of.get(site, 0) >= CLAIMS_PER_SITE):
            return False
        self.pending[room] = Claim(def_id, site, now + CLAIM_TIMEOUT)
        self.claims_of[site] = self.claims_of.get(site, 0) + 1
        self.changed.add(room)
        return True

    def end_claim(self, room: str) -> None:
        """The room's definition arrived (or the claim timed out): it no longer closes the room."""
        c = self.pending.pop(room, None)
        if c is not None:
            self.changed.add(room)
            left = self.claims_of.get(c.site, 1) - 1
            if left > 0:
                self.claims_of[c.site] = left
            else:
                self.claims_of.pop(c.site, None)

    def expire_claims(self, now: float) -> list[tuple[str, Claim]]:
        """Claims whose definition did not come within ``CLAIM_TIMEOUT``: their rooms are open again (the
        held messages of those rooms stay held), and no later claim of the same claimer closes them again."""
        expired = [(r, c) for r, c in self.pending.items() if c.until <= now]
        for room, c in expired:
            self.end_claim(room)
            if len(self.unanswered) >= UNANSWERED_MAX:
                self.unanswered.clear()
            self.unanswered.add((room, c.site))
        return expired

    def decide(self, room: str, owner: str, def_id: str, key: bytes) -> bool:
        """Does a definition replace the room's current one? The same answer at every site."""
        cur = self.private.get(room)
        if cur is None:
            return True
        if cur.msg_id == def_id:
            return False
        if cur.owner == owner:
            return key > cur.order_key         # the owner's later definition updates the member list
        return key < cur.order_key             # another owner's wins only if it came first
