"""The data of the client's picture (entries, rooms) and the changes ``ChatState.apply`` reports.

Kept apart from state.py so that the state's parts (state.py, operators.py,
alerts.py) can all use them; state.py re-exports every name.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from chat_server.protocol import sortable_key
from contracts.labels import Label
from contracts.precedence import DEFAULT, PRECEDENCES
from contracts.status import LinkStatus

# The statuses' names (contracts.status); UNKNOWN for a site no status has been reported for yet.
CONNECTED, SUSPECTED, DISCONNECTED, UNKNOWN = (s.value for s in (LinkStatus.CONNECTED, LinkStatus.SUSPECTED,
                                                                 LinkStatus.DISCONNECTED, LinkStatus.UNKNOWN))
STATUSES = (CONNECTED, SUSPECTED, DISCONNECTED, UNKNOWN)
MAX_ENTRIES = 2000          # entries kept per room; older ones are dropped (``/history`` fetches them again)

PENDING, ACCEPTED, DELIVERED, FAILED = "pending", "accepted", "delivered", "failed"


def status_name(value: object) -> str:
    """The status a frame's ``status`` is shown as: its name, ``unknown`` for any word contracts.status lacks."""
    return LinkStatus.parse(value).value


def precedence_name(value: object) -> str:
    """The precedence a frame's ``precedence`` is shown as: a level's name; routine when absent or not one."""
    return value if isinstance(value, str) and value in PRECEDENCES else DEFAULT


@dataclass(slots=True, eq=False)
class MessageEntry:
    """One chat message in a room's log (or the local echo of one being sent)."""

    key: str                           # stable id of the entry: the msg_id, or "pending:<client_id>"
    room: str
    user: str
    origin: str
    text: str
    sent_at: float
    order: list[Any] | None
    late: bool = False
    own: bool = False
    msg_id: str | None = None
    state: str = DELIVERED             # pending | accepted | delivered | failed (own messages)
    receipts: set[str] = field(default_factory=set)
    late_by: float | None = None       # seconds between sending and arrival here, for live late messages
    moved_up: int = 0                  # messages already shown below its place when it arrived
    precedence: str = DEFAULT          # a contracts.precedence name: flash | immediate | priority | routine
    reply_to: str | None = None        # the msg_id of the line it answers
    mentions_me: bool = False          # the server's ``mentions`` names this user
    acks: list[tuple[str, str, float]] = field(default_factory=list)   # (user, site, at), flash/immediate only
    alert: bool = False                # flash/immediate of someone else this user has not acknowledged
    acking: bool = False               # our acknowledgement is on its way
    repaired: bool = False             # reported missing here, then recovered from another site
    skipped: tuple[str, ...] = ()      # own messages: sites that were disconnected when it was sent (``ack``)
    out_of_time: int = 0               # seconds its time reads earlier than the line above it (0: in time order)
    expires_at: float | None = None    # when it expires, Unix seconds (expiry.py); None: never
    expired: bool = False              # past ``expires_at``: shown dimmed, marked
    label: Label | None = None         # its security label (labels.py); None: an unlabeled mission

    def not_sent_to(self) -> list[str]:
        """The sites this own message was not sent to and that have not delivered it since (repair)."""
        return [s for s in self.skipped if s not in self.receipts]

    @property
    def sort_key(self) -> bytes:
        return sortable_key(self.order) or b"\xff"      # (no order yet: after every key)


@dataclass(slots=True, eq=False)
class Notice:
    """A line of system text in a room's log (late message, missing messages, command output)."""

    key: str
    room: str
    text: str
    level: str = "info"                # info | success | warning | error
    scope: str = ""                    # "": command output; "room": about this room; "all": the same in every room


@dataclass(slots=True, eq=False)
class Gap:
    """Messages missing between two loaded stretches of a room's log, before the message ``before``."""

    key: str
    room: str
    before: str
    loading: bool = False


Entry = MessageEntry | Notice | Gap


@dataclass(slots=True)
class Room:
    name: str
    entries: list[Entry] = field(default_factory=list)
    unread: int = 0
    more: bool = False                 # older messages exist on the server
    joined: bool = True
    mentions: int = 0                  # unread messages that name this user
    read: list[Any] | None = None      # the read marker (order key) as the server last said
    dirty: bool = False                # something came in the room while it was read: mark it again
    label: Label | None = None         # the room's floor label (labels.py); None: unlabeled, or not known yet


# --- changes --------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Inserted:
    room: str
    index: int
    entry: Entry


@dataclass(frozen=True, slots=True)
class Updated:
    room: str
    entry: Entry


@dataclass(frozen=True, slots=True)
class Expired(Updated):
    """A message line just expired (expiry.py): redrawn in place; the line client says so."""


@dataclass(frozen=True, slots=True)
class Removed:
    room: str
    entry: Entry


@dataclass(frozen=True, slots=True)
class RoomsChanged:
    pass


@dataclass(frozen=True, slots=True)
class SitesChanged:
    site: str | None                   # None: the whole table (welcome, connection lost)
    status: str | None


@dataclass(frozen=True, slots=True)
class PresenceChanged:
    site: str
    online: tuple[str, ...]
    offline: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Receipt:
    """A site delivered one of our messages (also an ``Updated`` of its entry)."""

    entry: MessageEntry
    site: str


@dataclass(frozen=True, slots=True)
class Output:
    """Text for the operator that belongs to no room (command output, errors)."""

    text: str
    level: str = "info"


@dataclass(frozen=True, slots=True)
class Notify:
    """Something for the operator's attention: ``mention`` (a line naming them), ``flash``/``immediate``
    (an alert to acknowledge; ``repeat`` when it is a reminder). Ring the bell."""

    kind: str
    entry: MessageEntry
    repeat: bool = False


@dataclass(frozen=True, slots=True)
class Request:
    """A frame for the front end to send (``link.request``)."""

    frame: dict[str, Any]


@dataclass(frozen=True, slots=True)
class JumpTo:
    """Show this message: its room is active now."""

    room: str
    msg_id: str


@dataclass(frozen=True, slots=True)
class Panel:
    """The directory, the search results, the alerts or the positions list changed."""

    name: str                          # directory | search | alerts | positions


@dataclass(frozen=True, slots=True)
class PositionsListed:
    """``/positions``: show the positions list as it is at ``at`` (the line client prints it)."""

    at: float


@dataclass(frozen=True, slots=True)
class Banner:
    """The classification banner of the room shown changed (another room shown, its floor learnt; labels.py)."""

    room: str
    label: Label


@dataclass(frozen=True, slots=True)
class SendLabel:
    """The label the next line goes out with changed (``/label``, the picker, another room shown; labels.py)."""

    room: str
    label: Label


Change = (Inserted | Updated | Removed | RoomsChanged | SitesChanged | PresenceChanged | Receipt | Output | Notify
          | Request | JumpTo | Panel | PositionsListed | Banner | SendLabel)
