"""The chat core's requests of local users, sans-IO: joining, leaving, saying, creating, listing rooms.

``RoomRequests`` is the part of ``core.ChatCore`` that answers a local user's
room requests: ``join`` and ``leave`` (memberships), ``mark_read`` (read
markers), ``check_say`` and ``check_create`` (may this say or this private
room go out), and the ``directory`` and ``rooms`` listings, a page at a time;
``take_directory`` pushes the directory entries that changed (rooms.py,
``changed``).
Each either raises ``Refusal`` or returns the store actions and the reply: a
join's membership and its read marker are one step, one transaction at the
edge. The room caps live here: ``max_rooms_per_user``, ``max_rooms`` at the
site and the rate of new room names per user (``rooms_created_per_hour``).
The private-room rule itself is ``rooms.py``'s. ``ChatCore`` sets the state
it declares (``ChatCore.__init__``).

Labels (labeled missions, labeling.py): ``check_message`` also checks the
message's label and answers where it goes (``Say.dests``); ``check_create``
makes a labeled public room (``RoomFloor``, no members) or a private room
whose definition records the sites hosting its members (``resolve_members``:
``name@SITE``, or a bare name at the sites where it is known: this site's
accounts, other sites' rosters; a name known nowhere means every cleared
site). ``joined``, ``rooms`` and ``directory`` entries carry the room's label.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from contracts.labels import Label
from ordering.keys import sortable_key

from . import protocol as P
from .actions import Action, StoreMembership, StoreReadMarker, ToDirectoryReaders
from .history import History
from .labeling import LabelPolicy
from .limits import TokenBucket
from .payload import RoomDefinition, RoomFloor
from .protocol import ErrorCode as E
from .protocol import Refusal
from .rooms import RoomState
from .store import PrivateRoom


class ReadMarkers(Protocol):
    """What the room requests read of the site's database besides the rooms (ChatStore provides it)."""

    def last_order(self, room: str) -> list[Any] | None: ...
    def read_marker(self, user: str, room: str) -> list[Any] | None: ...


@dataclass(frozen=True, slots=True)
class Say:
    """What ``check_say`` found: the room's private definition (to tag the message), the message's label
    (None: an unlabeled mission) and its destinations (None: every site; labeling.py, ``reach``)."""

    private: PrivateRoom | None
    label: Label | None
    dests: tuple[str, ...] | None


class RoomRequests:
    """The room requests of local users (a part of ``core.ChatCore``)."""

    site: str
    labels: LabelPolicy
    view: ReadMarkers
    journal_n: int
    rooms: RoomState
    history: History
    max_rooms_per_user: int
    max_rooms: int
    rooms_created: tuple[float, int]         # (new room names per second, burst) per user
    rooms_page: int
    _room_buckets: dict[str, TokenBucket]    # user -> new room names

    # ==============================================================================================
    # requests of local users
    # ==============================================================================================
    def join(self, user: str, room: str, now: float) -> tuple[list[Action], dict[str, Any]]:
        """Join (or re-read) a room: the actions, and the ``joined`` frame."""
        self.rooms.check_access(user, room, "join")
        out: list[Action] = []
        mine = self.rooms.rooms_of(user)
        if room in mine:
            return out, self.joined_frame(room, user)
        if len(mine) >= self.max_rooms_per_user:
            raise Refusal(E.LIMIT, f"join: at most {self.max_rooms_per_user} rooms per user")
        if not self.rooms.known(room):
            self._check_new_room(user, now)
        self.rooms.add_member(user, room)
        out.append(StoreMembership(user, room, True))
        frame = self.joined_frame(room, user)
        last = self.view.last_order(room)
        if last is not None:            # a new member has read nothing, but owes nothing either: unread starts now
            marker, frame["read"] = self._read_marker(user, room, last)
            out.append(marker)
        return out, frame

    def mark_read(self, user: str, room: str, order: list[Any]) -> tuple[list[Action], dict[str, Any]]:
        """Move the user's read marker in a room forward: the actions, and the ``read`` frame."""
        self.rooms.check_access(user, room, "mark_read")
        if room not in self.rooms.rooms_of(user):
            raise Refusal(E.NOT_JOINED, f"mark_read: join room {room!r} first")
        marker, now = self._read_marker(user, room, order)
        return [marker], P.read(room, now)

    def _read_marker(self, user: str, room: str, order: list[Any]) -> tuple[StoreReadMarker, list[Any]]:
        """The action that moves ``user``'s marker in ``room`` to ``order`` (never back, as the store does)
        having seen what was delivered here so far, and the marker once it is applied."""
        was = self.view.read_marker(user, room)
        now = order if was is None or sortable_key(order) > sortable_key(was) else was
        return StoreReadMarker(user, room, order, self.journal_n), now

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

    def joined_frame(self, room: str, user: str) -> dict[str, Any]:
        """The ``joined`` frame of ``room`` for ``user``: the messages it may read, the room's label."""
        frame = self.history.joined(room, self.rooms.private.get(room), self.reader(user))
        label = self.rooms.label_json(room)
        if label is not None:
            frame["label"] = label
        return frame

    def reader(self, user: str) -> Callable[[str], bool] | None:
        """What ``user`` may read of stored messages (by their stored labels), for history.py; None: everything
        (an unlabeled mission)."""
        if not self.labels.enabled:
            return None
        c = self.rooms.clearance(user)
        labels = self.labels
        return lambda text: c.dominates(labels.stored(text))

    def check_say(self, user: str, room: str) -> PrivateRoom | None:
        """May ``user`` say something in ``room`` now (at the room's floor)? Its private definition, if any."""
        return self.check_message(user, room).private

    def check_message(self, user: str, room: str, label: Any = None) -> Say:
        """May ``user`` say something in ``room`` now, with ``label`` (a client's JSON or text; None: the room's
        floor)? Its private definition (to tag the message), its label and destinations; Refusal ``forbidden``
        naming why not (the message is not sent)."""
        self.rooms.check_access(user, room, "say")
        if room not in self.rooms.rooms_of(user):
            raise Refusal(E.NOT_JOINED, f"say: join room {room!r} first")
        private = self.rooms.private.get(room)
        if not self.labels.enabled:
            if label is not None:
                raise Refusal(E.BAD_FIELD, "say: this mission has no labels; leave 'label' out")
            return Say(private, None, None)
        floor = self.rooms.floor(room)
        chosen = floor if label is None else self.labels.from_request(label, "say: label")
        self.labels.check_say(chosen, floor, self.rooms.clearance(user), room)
        return Say(private, chosen, self.rooms.reach(room, chosen))

    def definition_dests(self, label: Label, hosts: Iterable[str] | None,
                         reachable: tuple[str, ...]) -> tuple[str, ...]:
        """Where a new room definition goes: the reachable peers (``control_dests``) it may reach."""
        reach = self.labels.reach(label, hosts)
        dests = tuple(p for p in reachable if reach is None or p in reach)
        return dests or (self.site,)

    def resolve_members(self, members: Iterable[str], label: Label,
                        is_account: Callable[[str], bool]) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """A private room's member names and the sites hosting them, from ``name`` or ``name@SITE``: a bare
        name is hosted where it is known (``is_account`` here, other sites' rosters), or, known nowhere, at
        every site cleared for ``label``; only cleared sites are kept (Refusal ``forbidden`` when a member
        would be left with none). Sites are () in an unlabeled mission (every site, as before labels)."""
        cleared = self.labels.cleared_sites(label)
        names: set[str] = set()
        sites: set[str] = {self.site}
        for spec in members:
            name, _, site = spec.partition("@")
            names.add(name)
            if site:
                if site not in self.labels.clearances:
                    raise Refusal(E.BAD_FIELD, f"create: {spec!r} names no site of the mission")
                if site not in cleared:
                    raise Refusal(E.FORBIDDEN, f"create: site {site} is not cleared for {label}")
                sites.add(site)
                continue
            known = {self.site} if is_account(name) else set()
            known |= {s for s, r in self.rooms.rosters.items()
                      if name in r.online or any(name in m for m in r.rooms.values())}
            hosting = (known or set(cleared)) & cleared
            if not hosting:
                raise Refusal(E.FORBIDDEN, f"create: {name} is known only at sites not cleared for {label} "
                                           f"({', '.join(sorted(known))}); write {name}@SITE")
            sites |= hosting
        return tuple(sorted(names)), (tuple(sorted(sites)) if self.labels.enabled else ())

    def check_create(self, user: str, room: str, members: Iterable[str] | None, max_members: int,
                     now: float, label: Any = None,
                     is_account: Callable[[str], bool] = lambda name: False) -> RoomDefinition | RoomFloor:
        """The definition to send for a ``create``: a private room's (``members``), or a labeled public room's
        (``members`` None, labeled missions); Refusal if the name is taken, the list too long, the label above
        the user's clearance, or a new name over the room caps (``max_rooms_per_user``, ``max_rooms``,
        ``rooms_created_per_hour``)."""
        pr = self.rooms.private.get(room)
        chosen = self.rooms.floor(room) if pr is not None else self.labels.default    # (a redefinition keeps it)
        if label is not None:
            if not self.labels.enabled:
                raise Refusal(E.BAD_FIELD, "create: this mission has no labels; leave 'label' out")
            chosen = self.labels.from_request(label, "create: label")
            if not self.rooms.clearance(user).dominates(chosen):
                raise Refusal(E.FORBIDDEN, f"create: label {chosen} is above your clearance "
                                           f"{self.rooms.clearance(user)}")
        if members is None:
            if not self.labels.enabled:
                raise Refusal(E.MISSING_FIELD, "create: missing field 'members'")
            if pr is not None:
                raise Refusal(E.ROOM_EXISTS, f"create: room {room!r} is a private room")
            self._check_free(user, room, None, now)
            return RoomFloor(room, user, str(chosen))
        names, sites = self.resolve_members(members, chosen, is_account)
        listed = tuple(sorted(set(names) | {user}))
        if len(listed) > max_members:
            raise Refusal(E.LIMIT, f"create: at most {max_members} members")
        self._check_free(user, room, pr, now)
        return RoomDefinition(room, user, listed, label=self.labels.text(chosen), sites=sites)

    def _check_free(self, user: str, room: str, pr: PrivateRoom | None, now: float) -> None:
        """May ``user`` (re)define ``room``? Its own private room, or a name nobody uses yet within the caps."""
        if pr is None and room in self.rooms.floors:
            raise Refusal(E.ROOM_EXISTS, f"create: room {room!r} already exists (labeled "
                                         f"{self.rooms.floor(room)})")
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

    def _visible_page(self, user: str, after: str, limit: int) -> tuple[list[str], bool]:
        """The rooms ``user`` may see, in name order after ``after``: a page of at most ``limit``
        (and ``rooms_page``), and whether more follow."""
        limit = min(limit, self.rooms_page)
        page: list[str] = []
        for room in sorted(n for n in self.rooms.names() if n > after):
            if not self.rooms.visible(user, room):
                continue
            if len(page) == limit:
                return page, True
            page.append(room)
        return page, False

    def _entry(self, room: str) -> dict[str, Any]:
        """A room's directory entry (without ``joined``, which is the user's)."""
        entry = {"room": room, "private": room in self.rooms.private, "members": len(self.rooms.counted_members(room)),
                 "last_at": self.rooms.activity.get(room)}
        label = self.rooms.label_json(room)
        if label is not None:
            entry["label"] = label
        return entry

    def directory(self, user: str, after: str, limit: int) -> dict[str, Any]:
        """The ``directory`` reply: public rooms known here (from every site's traffic) and the private rooms
        the user belongs to, with member counts and last activity, a page at a time."""
        page, more = self._visible_page(user, after, limit)
        mine = self.rooms.rooms_of(user)
        return P.directory([{**self._entry(room), "joined": room in mine} for room in page], more)

    def take_directory(self) -> list[Action]:
        """The directory entries that changed since the last call, pushed (the edge's presence timer, so at
        most once a ``presence_interval``) to the sessions that asked for the directory: public rooms to every
        one, a private room to its members, a labeled room only to readers its floor is dominated by;
        a room no longer public (made private, or closed by a claim) is withdrawn from everyone who may list
        it. A private room's name never goes to a non-member. At most ``rooms_page`` rooms a push (the rest
        at the next ones): a roster naming thousands of rooms must not overflow a client's queue."""
        rooms = self.rooms
        changed = sorted(rooms.changed)
        rooms.changed = set(changed[self.rooms_page:])
        public: list[dict[str, Any]] = []
        removed: list[str] = []
        private: list[tuple[str, dict[str, Any]]] = []
        labeled: list[ToDirectoryReaders] = []       # (labeled public rooms: to the cleared readers only)
        for room in changed[:self.rooms_page]:
            pr = rooms.private.get(room)
            floor = rooms.floor(room) if self.labels.enabled and room in rooms.floors else None
            if pr is None and room not in rooms.pending and rooms.known(room):
                rooms.listed.add(room)
                if floor is None:
                    public.append(self._entry(room))
                else:
                    labeled.append(ToDirectoryReaders(P.directory_update([self._entry(room)], []), None, floor))
                continue
            if room in rooms.listed:
                rooms.listed.discard(room)
                if floor is None:
                    removed.append(room)
                else:
                    labeled.append(ToDirectoryReaders(P.directory_update([], [room]), None, floor))
            if pr is not None:
                private.append((room, self._entry(room)))
        out: list[Action] = []
        if public or removed:
            out.append(ToDirectoryReaders(P.directory_update(public, removed)))
        out += labeled
        for room, entry in private:
            out.append(ToDirectoryReaders(P.directory_update([entry], []), tuple(sorted(rooms.private[room].members)),
                                          rooms.floor(room) if self.labels.enabled else None))
        return out

    def room_list(self, user: str, online_here: Iterable[str], after: str, limit: int) -> dict[str, Any]:
        """The ``rooms`` reply: the rooms ``user`` may see, a page at a time (``after`` the previous page)."""
        page, more = self._visible_page(user, after, limit)
        online = self.rooms.online_anywhere(online_here)
        mine = self.rooms.rooms_of(user)
        out: list[dict[str, Any]] = []
        for room in page:
            members = self.rooms.counted_members(room)
            entry = {"room": room, "private": room in self.rooms.private, "members": len(members),
                     "online": len(members & online), "joined": room in mine}
            label = self.rooms.label_json(room)
            if label is not None:
                entry["label"] = label
            out.append(entry)
        return P.rooms(out, more)
