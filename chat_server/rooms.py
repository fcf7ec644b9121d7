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
members of its current definition; a room another site says is private, whose
definition has not reached this site (``pending``), is open to nobody. Which
definition is current is decided the same way at every site: the earliest in
the global order names the owner, and later definitions by that owner replace
the member list (``decide``).
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ordering.keys import sortable_key

from .protocol import ErrorCode as E
from .protocol import Refusal
from .store import HeldMessage, PrivateRoom


class RoomFacts(Protocol):
    """What ``RoomState.load`` reads from the database (ChatStore provides it)."""

    def all_memberships(self) -> list[tuple[str, str]]: ...
    def private_rooms(self) -> dict[str, PrivateRoom]: ...
    def known_definitions(self) -> dict[str, str]: ...
    def held(self, room: str | None = None) -> list[HeldMessage]: ...
    def room_activity(self) -> dict[str, float]: ...


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
    pending: dict[str, str] = field(default_factory=dict)                # private elsewhere, definition not here
    activity: dict[str, float] = field(default_factory=dict)             # room with messages -> last sent_at
    rosters: dict[str, RemoteRoster] = field(default_factory=dict)       # peer -> its last roster

    @classmethod
    def load(cls, facts: RoomFacts, peers: Iterable[str]) -> RoomState:
        state = cls()
        for user, room in facts.all_memberships():
            state.local_members.setdefault(room, set()).add(user)
            state.user_rooms.setdefault(user, set()).add(room)
        state.private = facts.private_rooms()
        state.known_defs = facts.known_definitions()
        state.pending = {h.room: h.def_id for h in facts.held() if h.room not in state.private}
        state.activity = facts.room_activity()
        state.rosters = {p: RemoteRoster() for p in peers}
        return state

    def reload(self, facts: RoomFacts) -> None:
        """The database's facts again (after a rolled-back transaction); rosters are kept."""
        fresh = RoomState.load(facts, self.rosters)
        fresh.rosters = self.rosters
        for name in ("local_members", "user_rooms", "private", "known_defs", "pending", "activity"):
            setattr(self, name, getattr(fresh, name))

    # --- who may do what ------------------------------------------------------------------------
    def check_access(self, user: str, room: str, what: str) -> None:
        """Refusal ``forbidden`` if ``user`` may not read or write ``room`` (the private-room rule)."""
        pr = self.private.get(room)
        if pr is not None and user not in pr.members:
            raise Refusal(E.FORBIDDEN, f"{what}: room {room!r} is private and you are not a member")
        if pr is None and room in self.pending:
            raise Refusal(E.FORBIDDEN, f"{what}: room {room!r} is private and its member list has not reached "
                                       "this site yet; try again later")

    def visible(self, user: str, room: str) -> bool:
        pr = self.private.get(room)
        return (user in pr.members) if pr is not None else room not in self.pending

    def active(self, room: str, sent_at: float) -> None:
        """A message of ``room`` sent at ``sent_at`` was stored here."""
        self.activity[room] = max(self.activity.get(room, sent_at), sent_at)

    def hidden_from(self, user: str) -> set[str]:
        """Rooms whose messages ``user`` may not read here (search leaves them out)."""
        hidden = {r for r, pr in self.private.items() if user not in pr.members}
        return hidden | {r for r in self.pending if r not in self.private}

    def members_of(self, room: str) -> set[str]:
        """Members of a room at every site known here."""
        members = set(self.local_members.get(room, ()))
        for r in self.rosters.values():
            members |= r.rooms.get(room, frozenset())
        return members

    def known(self, room: str) -> bool:
        return (room in self.local_members or room in self.private or room in self.activity
                or any(room in r.rooms for r in self.rosters.values()))

    def names(self) -> set[str]:
        """Every room name this site knows (its own, its history's, other sites' rosters')."""
        names = set(self.local_members) | set(self.private) | set(self.activity)
        for r in self.rosters.values():
            names |= set(r.rooms)
        return names

    def online_anywhere(self, online_here: Iterable[str]) -> set[str]:
        users = set(online_here)
        for r in self.rosters.values():
            users |= r.online
        return users

    # --- memberships ----------------------------------------------------------------------------
    def add_member(self, user: str, room: str) -> None:
        self.local_members.setdefault(room, set()).add(user)
        self.user_rooms.setdefault(user, set()).add(room)

    def remove_member(self, user: str, room: str) -> None:
        members = self.local_members.get(room)
        if members is not None:
            members.discard(user)
            if not members:
                del self.local_members[room]
        self.user_rooms.get(user, set()).discard(room)

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
