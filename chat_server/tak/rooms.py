"""GeoChat chatrooms and chat rooms: the mission's ``[chat.tak_rooms]`` mapping, both ways.

Theory of operation
-------------------
A GeoChat names its room as TAK shows it: ``All Chat Rooms`` (everyone), a
group's name, or a contact's callsign for a direct message. The mission maps
chatrooms to rooms in ``[chat.tak_rooms]`` (``"Team Blue" = "blue"``); a
chatroom not mapped is the room of the same name when that is a valid room
name (protocol.py's ``ROOM_NAME``), and ``All Chat Rooms`` is the room
``all`` unless the mapping names another. A room's messages go to TAK clients
under the chatroom that maps to it (the first one, by name, when several
do), else under the room's name, ``all`` under ``All Chat Rooms``.
``parse_tak_rooms`` checks the table at start-up (config.py calls it) and
refuses a bad entry naming it. Pure: no I/O.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from contracts.mission import MissionError

from ..protocol import ROOM_NAME
from .cot import MAX_NAME

ALL_CHAT_ROOMS = "All Chat Rooms"       # TAK's room for everyone
ALL_ROOM = "all"                        # ... is this room unless [chat.tak_rooms] maps it elsewhere


def parse_tak_rooms(raw: Any) -> tuple[tuple[str, str], ...]:
    """``[chat.tak_rooms]`` (chatroom = room) as sorted pairs; MissionError naming a bad entry."""
    if raw is None:
        return ()
    if not isinstance(raw, dict):
        raise MissionError("[chat.tak_rooms] must be a table of \"GeoChat chatroom\" = \"room\"")
    out = []
    for chatroom, room in raw.items():
        if not isinstance(chatroom, str) or not chatroom.strip() or len(chatroom) > MAX_NAME:
            raise MissionError(f"[chat.tak_rooms] {chatroom!r}: a chatroom name is 1-{MAX_NAME} characters")
        if not isinstance(room, str) or not ROOM_NAME.match(room):
            raise MissionError(f"[chat.tak_rooms] {chatroom!r} = {room!r} must name a room (matching "
                               f"{ROOM_NAME.pattern})")
        out.append((chatroom, room))
    return tuple(sorted(out))


@dataclass(frozen=True)
class RoomMap:
    """The mapping of one site, both ways."""

    pairs: tuple[tuple[str, str], ...] = ()
    _to_room: dict[str, str] = field(init=False, repr=False, compare=False)
    _to_chatroom: dict[str, str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        to_room = dict(self.pairs)
        to_room.setdefault(ALL_CHAT_ROOMS, ALL_ROOM)
        to_chatroom: dict[str, str] = {}
        for chatroom, room in sorted(to_room.items()):
            to_chatroom.setdefault(room, chatroom)
        object.__setattr__(self, "_to_room", to_room)
        object.__setattr__(self, "_to_chatroom", to_chatroom)

    @property
    def all_room(self) -> str:
        """The room of ``All Chat Rooms`` (every TAK user joins it at log-in)."""
        return self.room_of(ALL_CHAT_ROOMS) or ALL_ROOM

    def room_of(self, chatroom: str) -> str | None:
        """The room a GeoChat chatroom maps to; None when it names no room (the client is told)."""
        room = self._to_room.get(chatroom)
        if room is not None:
            return room
        return chatroom if ROOM_NAME.match(chatroom) else None

    def chatroom_of(self, room: str) -> str:
        """The GeoChat chatroom a room's messages are shown in."""
        return self._to_chatroom.get(room, room)
