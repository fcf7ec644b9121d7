"""The chat core's room definitions, sans-IO: private rooms' member lists and labeled public rooms' floors.

``RoomDefinitions`` is the part of ``core.ChatCore`` that applies a delivered
room definition: a private room's (``RoomDefinition``: which one is current is
rooms.py's ``decide``, the same at every site; local members it no longer
lists, or no longer cleared for its label, leave; held messages are released)
and, in a labeled mission, a labeled public room's (``RoomFloor``: the
earliest in the global order sets the room's floor, rooms.py ``set_floor``).
A definition whose label this site may not hold is ignored (need-to-know
routing never sends one here: an older peer, a forged payload). The owner of
a new room joins it at its own site when the definition comes back.
``ChatCore`` sets the state it declares (``ChatCore.__init__``).
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

from ordering.keys import sortable_key

from . import protocol as P
from .actions import (
    Action,
    StoreDefinition,
    StoreMembership,
    StorePrivateRoom,
    StoreRoomFloor,
    ToDirectoryReaders,
    ToUser,
)
from .labeling import LabelPolicy
from .payload import RoomDefinition, RoomFloor
from .rooms import RoomState
from .store import PrivateRoom
from .store import RoomFloor as StoredFloor

log = logging.getLogger("chat_server")


class Delivered(Protocol):
    """What of an RCM delivery a definition's identity needs (core.RcmDelivery)."""

    @property
    def msg_id(self) -> str: ...
    @property
    def order(self) -> list[Any]: ...
    @property
    def origin(self) -> str: ...


class RoomDefinitions:
    """Room definitions delivered here (a part of ``core.ChatCore``)."""

    site: str
    compact: bool
    labels: LabelPolicy
    rooms: RoomState
    roster_force: bool
    _release_held: Callable[[str, float, list[Action]], None]
    joined_frame: Callable[[str, str], dict[str, Any]]

    def _identity(self, d: Delivered, p: RoomDefinition | RoomFloor) -> tuple[str, tuple[Any, ...]]:
        """A definition's identity: a re-sent one carries its original msg_id and order key (every site compares
        those), a first one is its delivery's."""
        return (p.def_id, tuple(p.def_order)) if p.def_id else (d.msg_id, tuple(d.order))

    def _floor(self, d: Delivered, p: RoomFloor, out: list[Action]) -> None:
        """A labeled public room's definition (labeled missions): the earliest in the global order sets the
        room's floor; its creator joins it at its own site."""
        label = self.labels.stored(p.label)
        if not self.labels.enabled or not self.labels.holdable(label):
            log.warning("ignored room %r's label %.60r from %s: above this site's clearance or not a labeled "
                        "mission", p.room, p.label, d.origin)
            return
        def_id, order = self._identity(d, p)
        f = StoredFloor(p.room, p.owner, str(label), sortable_key(order), def_id, order)
        if not self.rooms.set_floor(f):
            return
        out.append(StoreRoomFloor(f))
        for u in sorted(u for u in self.rooms.local_members.get(p.room, set()) if not self.rooms.cleared(u, p.room)):
            self.rooms.remove_member(u, p.room)         # (joined before the label reached this site)
            out.append(StoreMembership(u, p.room, False))
            out.append(ToUser(u, P.left(p.room, f"room {p.room!r} is labeled {label}, above your clearance")))
        if def_id.rsplit(":", 1)[0] == self.site and not p.def_id and p.room not in self.rooms.rooms_of(p.owner):
            self.rooms.add_member(p.owner, p.room)
            out.append(StoreMembership(p.owner, p.room, True))
            out.append(ToUser(p.owner, self.joined_frame(p.room, p.owner)))

    def _definition(self, d: Delivered, p: RoomDefinition, now: float, out: list[Action]) -> None:
        # A re-sent definition carries its original identity (msg_id and order key); every site compares those.
        label = self.labels.stored(p.label)
        if not self.labels.holdable(label):
            log.warning("ignored private room %r's definition from %s: label %.60r is above this site's clearance",
                        p.room, d.origin, p.label)
            return
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
        pr = PrivateRoom(p.room, p.owner, frozenset(p.members), key, def_id, order, self.labels.text(label),
                         tuple(sorted(p.sites)) if self.labels.enabled else ())
        before = rooms.private.get(p.room)
        for u in sorted(before.members - pr.members) if before is not None else ():
            out.append(ToDirectoryReaders(P.directory_update([], [p.room]), (u,)))    # no longer theirs to list
        rooms.set_private(pr)
        rooms.end_claim(p.room)
        out.append(StorePrivateRoom(pr))
        # A public room in use here made private elsewhere (in a partition its maker could not know): every
        # site applies the definition alike; the members it removes here are told who did it (audit row 16).
        reason = (f"room {p.room!r} was made private by {p.owner} at {def_site}; you are not a member"
                  if made_private else "not a member of the private room")
        removed = sorted(u for u in rooms.local_members.get(p.room, set())
                         if u not in pr.members or not rooms.cleared(u, p.room))
        for u in removed:
            rooms.remove_member(u, p.room)
            out.append(StoreMembership(u, p.room, False))
            out.append(ToUser(u, P.left(p.room, reason)))
        owner_here = def_site == self.site and p.room not in rooms.rooms_of(p.owner)
        if owner_here:
            rooms.add_member(p.owner, p.room)
            out.append(StoreMembership(p.owner, p.room, True))
        self.roster_force = self.roster_force or (not self.compact and (bool(removed) or owner_here))
        self._release_held(p.room, now, out)
        if def_site == self.site and not p.def_id:
            out.append(ToUser(p.owner, self.joined_frame(p.room, p.owner)))

