"""What the chat core asks the edge to do: small frozen records, executed in the order given.

The edge (server.py) runs one core step in one database transaction: store and
journal actions in order (a journal ``deliver`` is always the last write of a
delivery), then the commit, then client and RCM actions. A step that fails
before its commit is rolled back and the core reloads its rooms from the
database.

``write`` is the only code of the server that changes the site's database: the
core's actions, and the few the edge adds to a step of its own (the say
pipeline's pending sends, session tokens, RCM's resume position, a quarantined
delivery) are records here too, so every change is one step, in one
transaction (tests/chat_server/test_chat_edge.py checks that no other module
calls the store's writers).
"""
from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from contracts.labels import Label

from .journal import Journal
from .payload import Payload
from .store import CHAT_GONE_STATE, ChatStore, HeldMessage, PrivateRoom, RoomFloor
from .store_messages import StoredMessage

LOSSES_STATE = "lost_ranges"
"""The store's state key of ``StoreLosses``."""
JOURNAL_N_STATE = "journal_n"       # ... of the delivery counter (StoreMessage, StoreJournalN)
ROSTER_GEN_STATE = "roster_gen"     # ... of StoreRosterGeneration
RCM_STATE = "rcm"                   # ... of StoreRcmPosition: [incarnation, n]

log = logging.getLogger("chat_server")
HELD_MAX = 10_000             # private-room messages held for a definition; beyond it the oldest are dropped


# --- the database (inside the step's transaction) ------------------------------------------------
@dataclass(frozen=True, slots=True)
class RecordSent:
    """An own message's ``(user, client_id)`` is known: a retry of the same say is acked with ``msg_id``."""

    user: str
    client_id: str
    msg_id: str


@dataclass(frozen=True, slots=True)
class StoreMessage:
    message: StoredMessage
    delivered_at: float
    own: bool                 # delivered at its origin site: the site's own receipt too


@dataclass(frozen=True, slots=True)
class HoldMessage:
    held: HeldMessage


@dataclass(frozen=True, slots=True)
class ReleaseHeld:
    msg_id: str


@dataclass(frozen=True, slots=True)
class StoreDefinition:
    def_id: str
    room: str


@dataclass(frozen=True, slots=True)
class StorePrivateRoom:
    room: PrivateRoom


@dataclass(frozen=True, slots=True)
class StoreRoomFloor:
    """A labeled public room's label (rooms.py, ``set_floor``)."""

    floor: RoomFloor


@dataclass(frozen=True, slots=True)
class StoreMembership:
    user: str
    room: str
    member: bool              # False: the membership ends


@dataclass(frozen=True, slots=True)
class StoreReceipt:
    msg_id: str
    site: str


@dataclass(frozen=True, slots=True)
class StoreAcknowledgement:
    msg_id: str
    user: str
    site: str
    at: float


@dataclass(frozen=True, slots=True)
class StoreReadMarker:
    """Move ``user``'s read marker in ``room`` forward to ``order`` (never back), having seen up to ``n``."""

    user: str
    room: str
    order: list[Any]
    n: int


@dataclass(frozen=True, slots=True)
class StoreRosterGeneration:
    """The generation of the roster just published: a restarted server publishes newer ones."""

    generation: int


@dataclass(frozen=True, slots=True)
class StoreChatGone:
    """The peers whose chat server is gone (its will came, no roster since) and their wills' RCM seqs, kept across
    a restart of ours."""

    sites: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class IndexForSearch:
    """The messages stored since the last time, into the full-text index in one go (store_messages.py)."""


@dataclass(frozen=True, slots=True)
class StoreJournalN:
    """The site's delivery counter (``n``), after deliveries recovered from the journal."""

    n: int


@dataclass(frozen=True, slots=True)
class StorePending:
    """A say handed to RCM whose answer is not known yet (sending.py: a barrier settles it after a crash)."""

    user: str
    client_id: str
    at: float


@dataclass(frozen=True, slots=True)
class DropPending:
    """The say's fate is known: RCM refused it, or it was never accepted (sending.py's barrier)."""

    user: str
    client_id: str


@dataclass(frozen=True, slots=True)
class StoreSessionToken:
    """A login's session token (its digest) for ``user`` until ``expires_at`` (logins.py)."""

    digest: str
    user: str
    expires_at: float


@dataclass(frozen=True, slots=True)
class RevokeSessionTokens:
    """End one login of ``user`` (``digest``), or every one of its logins at this site (``digest`` None)."""

    user: str
    digest: str | None


@dataclass(frozen=True, slots=True)
class ExpireSessionTokens:
    now: float


@dataclass(frozen=True, slots=True)
class StoreRcmPosition:
    """The last RCM delivery processed and stored: the server resumes after it (``since``)."""

    incarnation: int | None
    n: int


@dataclass(frozen=True, slots=True)
class QuarantineDelivery:
    """A delivery that could not be applied, kept aside for an engineer (and skipped)."""

    rcm_n: int
    msg_id: str
    origin: str
    order_json: str
    payload: bytes
    reason: str
    at: float


@dataclass(frozen=True, slots=True)
class StoreLosses:
    """What RCM reported lost here and repair has not brought back (``Losses.snapshot``), so a
    restarted server revises the ``missing`` notice from it, not from nothing."""

    lost: dict[str, list[list[int]]]


# --- the journal (Contract 3) ----------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class JournalRecord:
    """A journal record: ``kind`` is a ``Journal`` method (send, deliver, status, missing), ``fields`` its keywords."""

    kind: str
    fields: dict[str, Any]


# --- after the commit --------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ToRoom:
    """A frame for every session of the room's local members (``label``: of those whose clearance dominates it;
    None: every one)."""

    room: str
    frame: dict[str, Any]
    label: Label | None = None


@dataclass(frozen=True, slots=True)
class ToUser:
    user: str
    frame: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Broadcast:
    """A frame for every logged-in session."""

    frame: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ToDirectoryReaders:
    """A ``directory_update`` for the sessions that asked for the directory: of ``users`` only, or every one
    (``users`` None)."""

    frame: dict[str, Any]
    users: tuple[str, ...] | None = None
    label: Label | None = None          # (labeled rooms) only to those whose clearance dominates it


@dataclass(frozen=True, slots=True)
class SendPayload:
    """A payload for other chat servers through RCM (``dests``: sites; best effort, logged if refused).

    ``within``: how far it may travel (``rcm_port.send``): False, anywhere (control data that is no secret of
    its destinations); a tuple, among its destinations and those sites (a labeled room's definition: the sites
    cleared for it)."""

    payload: Payload
    dests: tuple[str, ...]
    within: bool | tuple[str, ...] = False


@dataclass(frozen=True, slots=True)
class QueueReceipt:
    """Tell ``origin`` in the next receipt batch that its message was delivered here."""

    origin: str
    msg_id: str


@dataclass(frozen=True, slots=True)
class BarrierReached:
    """This site's barrier payload came back: every earlier send of the site has been delivered."""

    msg_id: str


STORE_ACTIONS = (RecordSent, StoreMessage, HoldMessage, ReleaseHeld, StoreDefinition, StorePrivateRoom,
                 StoreRoomFloor, StoreMembership, StoreReceipt, StoreAcknowledgement, StoreLosses, StoreReadMarker,
                 StoreRosterGeneration, StoreChatGone, IndexForSearch, StoreJournalN, StorePending, DropPending,
                 StoreSessionToken, RevokeSessionTokens, ExpireSessionTokens, StoreRcmPosition, QuarantineDelivery)

Action = (RecordSent | StoreMessage | HoldMessage | ReleaseHeld | StoreDefinition | StorePrivateRoom
          | StoreRoomFloor | StoreMembership | StoreReceipt | StoreAcknowledgement | StoreLosses | StoreReadMarker
          | StoreRosterGeneration | StoreChatGone | IndexForSearch | StoreJournalN | StorePending | DropPending
          | StoreSessionToken | RevokeSessionTokens | ExpireSessionTokens | StoreRcmPosition | QuarantineDelivery
          | JournalRecord | ToRoom | ToUser | Broadcast | ToDirectoryReaders
          | SendPayload | QueueReceipt | BarrierReached)


def write(actions: Sequence[Action], store: ChatStore, journal: Journal) -> tuple[list[Action], int | None]:
    """Execute the store and journal actions in order (inside the caller's transaction).

    Returns the actions for after the commit (memberships among them, for the sessions to follow) and
    the ``n`` of the last journal ``deliver`` record written, if any: once written, a delivery counts."""
    after: list[Action] = []
    written_n: int | None = None
    for a in actions:
        if isinstance(a, StoreMessage):
            store.add_message(a.message, a.delivered_at)
            store.set_state(JOURNAL_N_STATE, a.message.n)
            if a.own:
                store.add_receipts([(a.message.msg_id, a.message.origin)])
        elif isinstance(a, JournalRecord):
            getattr(journal, a.kind)(**a.fields)
            if a.kind == "deliver":
                written_n = a.fields["n"]
        elif isinstance(a, RecordSent):
            store.record_sent(a.user, a.client_id, a.msg_id)
            store.remove_pending(a.user, a.client_id)
        elif isinstance(a, HoldMessage):
            log.info("holding %s of private room %s until its definition %s arrives", a.held.msg_id, a.held.room,
                     a.held.def_id)
            dropped = store.hold(a.held, HELD_MAX)
            if dropped is not None:
                log.warning("dropped held message %s: more than %d held", dropped, HELD_MAX)
        elif isinstance(a, ReleaseHeld):
            store.release(a.msg_id)
        elif isinstance(a, StoreDefinition):
            store.add_definition(a.def_id, a.room)
        elif isinstance(a, StorePrivateRoom):
            store.put_private_room(a.room)
        elif isinstance(a, StoreRoomFloor):
            store.put_room_floor(a.floor)
        elif isinstance(a, StoreMembership):
            (store.add_membership if a.member else store.remove_membership)(a.user, a.room)
            after.append(a)
        elif isinstance(a, StoreReceipt):
            store.add_receipt(a.msg_id, a.site)
        elif isinstance(a, StoreAcknowledgement):
            store.add_acknowledgement(a.msg_id, a.user, a.site, a.at)
        elif isinstance(a, StoreLosses):
            store.set_state(LOSSES_STATE, a.lost)
        elif isinstance(a, StoreReadMarker):
            store.mark_read(a.user, a.room, a.order, a.n)
        elif isinstance(a, StoreRosterGeneration):
            store.set_state(ROSTER_GEN_STATE, a.generation)
        elif isinstance(a, IndexForSearch):
            store.index_for_search()
        elif isinstance(a, StoreChatGone):
            store.set_state(CHAT_GONE_STATE, dict(a.sites))
        elif isinstance(a, StoreJournalN):
            store.set_state(JOURNAL_N_STATE, a.n)
        elif isinstance(a, StorePending):
            store.add_pending(a.user, a.client_id, a.at)
        elif isinstance(a, DropPending):
            store.remove_pending(a.user, a.client_id)
        elif isinstance(a, StoreSessionToken):
            store.add_session(a.digest, a.user, a.expires_at)
        elif isinstance(a, RevokeSessionTokens):
            if a.digest is None:
                store.delete_sessions_of(a.user)
            else:
                store.delete_session(a.digest)
        elif isinstance(a, ExpireSessionTokens):
            store.expire_sessions(a.now)
        elif isinstance(a, StoreRcmPosition):
            store.set_state(RCM_STATE, [a.incarnation, a.n])
        elif isinstance(a, QuarantineDelivery):
            store.quarantine(a.rcm_n, a.msg_id, a.origin, a.order_json, a.payload, a.reason, a.at)
        else:
            after.append(a)
    return after, written_n
