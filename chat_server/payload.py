"""Chat payloads carried by RCM between chat servers: msgpack arrays (compact) or maps (earlier releases).

Theory of operation
-------------------
RCM payloads are opaque bytes to RCM. The origin site of a payload is the RCM
delivery's ``origin``, never a field, so a site cannot speak for another. Each
payload is decoded once, here, into one of the small frozen types below, with
every value checked against the bounds any site can store and show; anything
else raises ``PayloadError`` (the edge logs and skips it).

Two layouts, told apart by msgpack's first byte, so that a newer chat server
reads every payload an older one sends:

* **maps** (every release): ``{"k": kind, ...}`` with short keys, the table
  below. Definitions, barriers, definition requests and acknowledgements are
  always sent this way (they are rare; every release reads them). A chat
  server with ``[chat] compact_payloads = false`` sends its chat messages,
  rosters and receipts this way too (a mission upgraded one site at a time).
* **arrays** (compact, payload_arrays.py): ``[code, ...]`` for chat messages,
  rosters (full, deltas, tips, requests) and receipts: positional fields, no
  field the receiver can derive, integers as msgpack packs them smallest. An
  earlier release cannot read these (it logs and skips them).

========  =====================================================================
kind      fields (map layout)
========  =====================================================================
``m``     chat message: ``r`` room, ``u`` user, ``t`` text, ``s`` sent_at (float),
          ``c`` client_id; ``d`` (private rooms only) the msg_id of the room's
          definition the sender's site applied; ``re`` the msg_id it answers.
          ``l`` its security label as people write it (labeled missions; absent: the
          default label). A message's precedence is not a field: it is RCM's own (the send's
          and the delivery's ``precedence``), carried once. Earlier releases
          also wrote a copy, ``pr``; it is ignored, whatever it holds.
``d``     private room definition: ``r`` room, ``o`` owner, ``m`` member list;
          when a site re-sends a definition it knows (to a peer that may have
          missed it), ``i`` and ``ik`` carry the original msg_id and order key;
          labeled missions: ``l`` the room's label (its floor), ``st`` the sites
          hosting a member (its content goes only there)
``f``     labeled public room (labeled missions): ``r`` room, ``o`` owner, ``l`` its
          label (floor); ``i`` and ``ik`` as for ``d`` when re-sent
``p``     roster of the origin site: ``g`` generation (int, grows), ``on`` users
          online there, ``rm`` {room: [local members]}, ``pv`` {private room:
          definition msg_id} for the private rooms among them; ``w`` the sites whose
          roster the origin lacks (it restarted): each site named publishes its own
``a``     receipts: ``ids`` msg_ids the origin site has delivered
``b``     barrier: ``b`` a token; sent by a chat server to its own site only, so that
          its delivery proves every earlier send of the site has been delivered
``q``     definition request: ``r`` room; a site holding messages of a private room
          whose definition it lacks asks the site that sent them (which knows it)
``k``     acknowledgement: ``m`` the msg_id of a flash or immediate message, ``u`` the
          user of the origin site who acknowledged it, ``s`` when (Unix seconds)
========  =====================================================================

Unknown kinds and malformed payloads are ignored (and logged) so that a newer
chat server can talk to an older one. Malformed includes values no site could
store or show: names outside the protocol's name rules, a ``sent_at`` that is
not a finite time, integers outside 63 bits, lists longer than ``MAX_LIST``
(audit row 2: one such value used to stop every chat server of the mission).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

import msgpack

from contracts.mission import SITE_NAME
from contracts.precedence import PRECEDENCES, Precedence
from ordering.keys import key_problem

from .protocol import MAX_CLIENT_ID, MSG_ID, ROOM_NAME, USER_NAME

MAX_LIST = 10_000                 # names in a definition, roster or receipt batch
MAX_INT = (1 << 63) - 1           # generations and sequence numbers fit SQLite's signed 64 bits
MAX_LABEL = 512                   # characters of a label's people's spelling (contracts.labels reads at most that)
MAX_SENT_AT = 1e11                # Unix seconds (the year 5138): beyond is not a clock reading


@dataclass(frozen=True, slots=True)
class ChatMessage:
    room: str
    user: str
    text: str
    sent_at: float
    client_id: str
    definition: str = ""          # msg_id of the private room's definition at the sender's site; "" if public
    definition_order: tuple[Any, ...] = ()  # and that definition's order key
    reply_to: str = ""            # the msg_id this message answers (its precedence is RCM's: not here)
    receipts: tuple[str, ...] = ()          # msg_ids the sending site delivered (receipts riding along)
    label: str = ""               # its security label as people write it ("": the default; labeling.py reads it)


@dataclass(frozen=True, slots=True)
class RoomDefinition:
    room: str
    owner: str
    members: tuple[str, ...]
    def_id: str = ""              # set when re-sent: the original definition's msg_id ...
    def_order: tuple[Any, ...] = ()         # ... and order key (the identity every site compares)
    label: str = ""               # the room's label, its floor ("": the default)
    sites: tuple[str, ...] = ()   # the sites hosting a member (labeled missions; (): every cleared site)


@dataclass(frozen=True, slots=True)
class RoomFloor:
    """A labeled public room: its label (floor), set once by its creator (the earliest in the global order)."""

    room: str
    owner: str
    label: str
    def_id: str = ""              # set when re-sent, as for RoomDefinition
    def_order: tuple[Any, ...] = ()


@dataclass(frozen=True, slots=True)
class Roster:
    generation: int
    online: tuple[str, ...]
    rooms: dict[str, tuple[str, ...]]
    private: dict[str, str] = field(default_factory=dict)    # private room -> its definition's msg_id
    want: tuple[str, ...] = ()    # sites whose roster the origin lacks: each publishes its own (a restart's ask)


@dataclass(frozen=True, slots=True)
class RosterDelta:
    """The origin's roster changes from generation ``generation - 1`` to ``generation`` (compact only)."""

    generation: int
    came: tuple[str, ...] = ()                          # users now online there
    went: tuple[str, ...] = ()                          # users no longer online there
    joined: dict[str, tuple[str, ...]] = field(default_factory=dict)   # room -> local members who joined
    left: dict[str, tuple[str, ...]] = field(default_factory=dict)     # room -> local members who left
    private: dict[str, str] = field(default_factory=dict)    # private rooms among ``joined`` -> definition msg_id


@dataclass(frozen=True, slots=True)
class RosterTip:
    """The origin's roster is at ``generation`` (to a peer that may have missed deltas: it asks if behind)."""

    generation: int


@dataclass(frozen=True, slots=True)
class RosterRequest:
    """The sender lacks the addressee's current roster: send it a full one (compact only)."""


@dataclass(frozen=True, slots=True)
class ServerGone:
    """The origin's chat server is gone (stopped, crashed or cut from its RCM server): none of its users is
    online there until its next roster. Left with RCM as its will (rcm.wire.local ``will``), which RCM sends
    when the chat server's connection ends."""


@dataclass(frozen=True, slots=True)
class Receipts:
    msg_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Barrier:
    token: str


@dataclass(frozen=True, slots=True)
class DefinitionRequest:
    room: str


@dataclass(frozen=True, slots=True)
class Acknowledgement:
    msg_id: str
    user: str
    at: float


Payload = (ChatMessage | RoomDefinition | RoomFloor | Roster | RosterDelta | RosterTip | RosterRequest | Receipts
           | Barrier | DefinitionRequest | Acknowledgement | ServerGone)
COMPACT = (ChatMessage, Roster, RosterDelta, RosterTip, RosterRequest, Receipts)    # kinds with an array layout


class PayloadError(ValueError):
    """Not a chat payload this server understands."""


def encode_payload(p: Payload, compact: bool = False) -> bytes:
    """The payload's bytes: the array layout for the kinds that have one when ``compact`` (the chat server
    passes ``[chat] compact_payloads``), else the map layout every release reads (deltas, tips and roster
    requests exist only as arrays)."""
    if isinstance(p, COMPACT) and (compact or isinstance(p, (RosterDelta, RosterTip, RosterRequest))):
        from .payload_arrays import encode_array
        return encode_array(p)
    if isinstance(p, ChatMessage):
        body: dict[str, Any] = {"k": "m", "r": p.room, "u": p.user, "t": p.text, "s": p.sent_at, "c": p.client_id}
        if p.definition:
            body["d"], body["dk"] = p.definition, list(p.definition_order)
        if p.reply_to:
            body["re"] = p.reply_to
        if p.label:
            body["l"] = p.label
        # (receipts ride along only in the array layout: the map layout's readers would ignore them)
    elif isinstance(p, RoomDefinition):
        body = {"k": "d", "r": p.room, "o": p.owner, "m": list(p.members)}
        if p.def_id:
            body["i"], body["ik"] = p.def_id, list(p.def_order)
        if p.label:
            body["l"] = p.label
        if p.sites:
            body["st"] = list(p.sites)
    elif isinstance(p, RoomFloor):
        body = {"k": "f", "r": p.room, "o": p.owner, "l": p.label}
        if p.def_id:
            body["i"], body["ik"] = p.def_id, list(p.def_order)
    elif isinstance(p, Roster):
        body = {"k": "p", "g": p.generation, "on": list(p.online), "rm": {r: list(m) for r, m in p.rooms.items()}}
        if p.private:
            body["pv"] = dict(p.private)
        if p.want:
            body["w"] = list(p.want)
    elif isinstance(p, Receipts):
        body = {"k": "a", "ids": list(p.msg_ids)}
    elif isinstance(p, Barrier):
        body = {"k": "b", "b": p.token}
    elif isinstance(p, DefinitionRequest):
        body = {"k": "q", "r": p.room}
    elif isinstance(p, Acknowledgement):
        body = {"k": "k", "m": p.msg_id, "u": p.user, "s": p.at}
    elif isinstance(p, ServerGone):
        body = {"k": "g"}
    else:  # pragma: no cover - type checker guards this
        raise TypeError(p)
    return bytes(msgpack.packb(body, use_bin_type=True))


def check_time(v: Any, what: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not 0 <= v <= MAX_SENT_AT:
        raise PayloadError(f"{what} {v!r} is not a time (finite Unix seconds)")
    return float(v)


def check_label(v: Any) -> str:
    """A label as people write it (read against the mission's scheme by labeling.py): a short string."""
    return _str(v, "label", MAX_LABEL)


def check_generation(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= MAX_INT:
        raise PayloadError("generation must be an integer of at most 63 bits")
    return v


def check_text(v: Any) -> str:
    try:
        text = _str(v, "text")
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise PayloadError("text is not valid Unicode") from None
    return text


def check_definition(definition: Any, order: Any, what: str = "definition") -> tuple[str, tuple[Any, ...]]:
    """A definition reference (msg_id and order key); ("", ()) when absent ("")."""
    if definition == "":
        return "", ()
    _msg_id(definition, what)
    problem = key_problem(order)
    if problem:
        raise PayloadError(f"{what} order key: {problem}")
    return definition, tuple(order)


def check_rooms(v: Any, what: str) -> dict[str, tuple[str, ...]]:
    """{room: [user, ...]}"""
    if not isinstance(v, dict) or len(v) > MAX_LIST:
        raise PayloadError(f"{what} must be a map of at most {MAX_LIST} rooms")
    return {_name(r, "room", ROOM_NAME): _names(m, what, USER_NAME) for r, m in v.items()}


def check_private(v: Any) -> dict[str, str]:
    """{private room: definition msg_id}"""
    if not isinstance(v, dict) or len(v) > MAX_LIST:
        raise PayloadError(f"private rooms must be a map of at most {MAX_LIST} rooms")
    return {_name(r, "room", ROOM_NAME): _msg_id(i, "definition") for r, i in v.items()}


def _str(v: Any, what: str, max_len: int = 1 << 20) -> str:
    if not isinstance(v, str):
        raise PayloadError(f"{what} must be a string")
    if len(v) > max_len:
        raise PayloadError(f"{what} is longer than {max_len} characters")
    return v


def _name(v: Any, what: str, rule: re.Pattern[str]) -> str:
    if not isinstance(v, str) or not rule.match(v):
        raise PayloadError(f"{what} {str(v)[:40]!r} does not match {rule.pattern}")
    return v


def _names(v: Any, what: str, rule: re.Pattern[str]) -> tuple[str, ...]:
    if not isinstance(v, list):
        raise PayloadError(f"{what} must be a list")
    if len(v) > MAX_LIST:
        raise PayloadError(f"{what} lists {len(v)} names, more than {MAX_LIST}")
    return tuple(_name(x, what, rule) for x in v)


def _msg_id(v: Any, what: str) -> str:
    if not isinstance(v, str) or not MSG_ID.match(v) or int(v.rsplit(":", 1)[1]) > MAX_INT:
        raise PayloadError(f"{what} {str(v)[:40]!r} is not a message id (site:seq)")
    return v


def earlier_precedence(data: bytes) -> Precedence:
    """The precedence copy (``pr``) an earlier release wrote in a chat message; ROUTINE without a valid one.

    Read only to migrate what such a release stored with its payload alone (held messages); everything
    else takes RCM's precedence."""
    try:
        body = msgpack.unpackb(data, raw=False, strict_map_key=True)
    except Exception:  # msgpack raises several unrelated types
        return Precedence.ROUTINE
    pr = body.get("pr") if isinstance(body, dict) else None
    return Precedence(pr) if pr in PRECEDENCES else Precedence.ROUTINE


def decode_payload(data: bytes) -> Payload:
    """Decode a chat payload; raise PayloadError if it is not one, or holds a value no site could store."""
    try:
        body = msgpack.unpackb(data, raw=False, strict_map_key=True)
    except Exception as e:  # msgpack raises several unrelated types
        raise PayloadError(f"not msgpack: {e}") from None
    if isinstance(body, list):
        from .payload_arrays import decode_array
        return decode_array(body)
    if not isinstance(body, dict):
        raise PayloadError("payload is neither an array nor a map")
    kind = body.get("k")
    if kind == "m":
        sent_at = check_time(body.get("s"), "sent_at")
        # An optional field, when present, has its type: a nil or 0 would be stored as NULL and fail the
        # step at every site (found by faultinject.adversary's chat probe).
        definition, definition_order = check_definition(body.get("d", ""), body.get("dk", []))
        text = check_text(body.get("t"))
        reply_to = body.get("re", "")
        if reply_to != "":
            _msg_id(reply_to, "reply_to")
        # An earlier release's ``pr`` (its copy of RCM's precedence) is not read: RCM's is the one.
        return ChatMessage(_name(body.get("r"), "room", ROOM_NAME), _name(body.get("u"), "user", USER_NAME),
                           text, sent_at, _str(body.get("c", ""), "client_id", MAX_CLIENT_ID), definition,
                           definition_order, reply_to, (), check_label(body.get("l", "")))
    if kind == "d":
        def_id, def_order = check_definition(body.get("i", ""), body.get("ik", []), "definition id")
        return RoomDefinition(_name(body.get("r"), "room", ROOM_NAME), _name(body.get("o"), "owner", USER_NAME),
                              _names(body.get("m"), "members", USER_NAME), def_id, def_order,
                              check_label(body.get("l", "")), _names(body.get("st", []), "sites", SITE_NAME))
    if kind == "f":
        def_id, def_order = check_definition(body.get("i", ""), body.get("ik", []), "definition id")
        label = check_label(body.get("l"))
        if not label:
            raise PayloadError("a labeled room needs its label")
        return RoomFloor(_name(body.get("r"), "room", ROOM_NAME), _name(body.get("o"), "owner", USER_NAME), label,
                         def_id, def_order)
    if kind == "p":
        return Roster(check_generation(body.get("g")), _names(body.get("on"), "online", USER_NAME),
                      check_rooms(body.get("rm"), "members"), check_private(body.get("pv", {})),
                      _names(body.get("w", []), "wanted", SITE_NAME))
    if kind == "a":
        ids = body.get("ids")
        if not isinstance(ids, list) or len(ids) > MAX_LIST:
            raise PayloadError(f"ids must be a list of at most {MAX_LIST} message ids")
        return Receipts(tuple(_msg_id(i, "receipt") for i in ids))
    if kind == "b":
        return Barrier(_str(body.get("b"), "token", 200))
    if kind == "q":
        return DefinitionRequest(_name(body.get("r"), "room", ROOM_NAME))
    if kind == "k":
        return Acknowledgement(_msg_id(body.get("m"), "acknowledged message"), _name(body.get("u"), "user", USER_NAME),
                               check_time(body.get("s"), "acknowledgement time"))
    if kind == "g":
        return ServerGone()
    raise PayloadError(f"unknown payload kind {kind!r}")
