"""Chat payloads carried by RCM between chat servers (msgpack maps).

RCM payloads are opaque bytes to RCM. Every chat server speaks the four kinds
below; the origin site of a payload is the RCM delivery's ``origin``, never a
field, so a site cannot speak for another.

========  =====================================================================
kind      fields
========  =====================================================================
``m``     chat message: ``r`` room, ``u`` user, ``t`` text, ``s`` sent_at (float),
          ``c`` client_id; ``d`` (private rooms only) the msg_id of the room's
          definition the sender's site applied; ``re`` the msg_id it answers.
          A message's precedence is not a field: it is RCM's own (the send's
          and the delivery's ``precedence``), carried once. Earlier releases
          also wrote a copy, ``pr``; it is ignored, whatever it holds.
``d``     private room definition: ``r`` room, ``o`` owner, ``m`` member list;
          when a site re-sends a definition it knows (to a peer that may have
          missed it), ``i`` and ``ik`` carry the original msg_id and order key
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


@dataclass(frozen=True, slots=True)
class RoomDefinition:
    room: str
    owner: str
    members: tuple[str, ...]
    def_id: str = ""              # set when re-sent: the original definition's msg_id ...
    def_order: tuple[Any, ...] = ()         # ... and order key (the identity every site compares)


@dataclass(frozen=True, slots=True)
class Roster:
    generation: int
    online: tuple[str, ...]
    rooms: dict[str, tuple[str, ...]]
    private: dict[str, str] = field(default_factory=dict)    # private room -> its definition's msg_id
    want: tuple[str, ...] = ()    # sites whose roster the origin lacks: each publishes its own (a restart's ask)


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


Payload = ChatMessage | RoomDefinition | Roster | Receipts | Barrier | DefinitionRequest | Acknowledgement


class PayloadError(ValueError):
    """Not a chat payload this server understands."""


def encode_payload(p: Payload) -> bytes:
    if isinstance(p, ChatMessage):
        body: dict[str, Any] = {"k": "m", "r": p.room, "u": p.user, "t": p.text, "s": p.sent_at, "c": p.client_id}
        if p.definition:
            body["d"], body["dk"] = p.definition, list(p.definition_order)
        if p.reply_to:
            body["re"] = p.reply_to
    elif isinstance(p, RoomDefinition):
        body = {"k": "d", "r": p.room, "o": p.owner, "m": list(p.members)}
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
    else:  # pragma: no cover - type checker guards this
        raise TypeError(p)
    return bytes(msgpack.packb(body, use_bin_type=True))


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
    if not isinstance(body, dict):
        raise PayloadError("payload is not a map")
    kind = body.get("k")
    if kind == "m":
        sent_at = body.get("s")
        if (isinstance(sent_at, bool) or not isinstance(sent_at, (int, float))
                or not math.isfinite(sent_at) or not 0 <= sent_at <= MAX_SENT_AT):
            raise PayloadError(f"sent_at {sent_at!r} is not a time (finite Unix seconds)")
        # An optional field, when present, has its type: a nil or 0 would be stored as NULL and fail the
        # step at every site (found by faultinject.adversary's chat probe).
        definition, definition_order = body.get("d", ""), body.get("dk", [])
        if definition != "":
            _msg_id(definition, "definition")
            problem = key_problem(definition_order)
            if problem:
                raise PayloadError(f"definition order key: {problem}")
        try:
            text = _str(body.get("t"), "text")
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise PayloadError("text is not valid Unicode") from None
        reply_to = body.get("re", "")
        if reply_to != "":
            _msg_id(reply_to, "reply_to")
        # An earlier release's ``pr`` (its copy of RCM's precedence) is not read: RCM's is the one.
        return ChatMessage(_name(body.get("r"), "room", ROOM_NAME), _name(body.get("u"), "user", USER_NAME),
                           text, float(sent_at), _str(body.get("c", ""), "client_id", MAX_CLIENT_ID), definition,
                           tuple(definition_order) if definition else (), reply_to)
    if kind == "d":
        def_id, def_order = body.get("i", ""), body.get("ik", [])
        if def_id != "":
            _msg_id(def_id, "definition id")
            problem = key_problem(def_order)
            if problem:
                raise PayloadError(f"definition order key: {problem}")
        return RoomDefinition(_name(body.get("r"), "room", ROOM_NAME), _name(body.get("o"), "owner", USER_NAME),
                              _names(body.get("m"), "members", USER_NAME), def_id, tuple(def_order) if def_id else ())
    if kind == "p":
        gen = body.get("g")
        rooms = body.get("rm")
        private = body.get("pv", {})
        if isinstance(gen, bool) or not isinstance(gen, int) or not 0 <= gen <= MAX_INT:
            raise PayloadError("generation must be an integer of at most 63 bits")
        if not isinstance(rooms, dict) or not isinstance(private, dict):
            raise PayloadError("rooms must be a map")
        if len(rooms) > MAX_LIST or len(private) > MAX_LIST:
            raise PayloadError(f"a roster lists more than {MAX_LIST} rooms")
        return Roster(gen, _names(body.get("on"), "online", USER_NAME),
                      {_name(r, "room", ROOM_NAME): _names(m, "members", USER_NAME) for r, m in rooms.items()},
                      {_name(r, "room", ROOM_NAME): _msg_id(i, "definition") for r, i in private.items()},
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
        at = body.get("s")
        if isinstance(at, bool) or not isinstance(at, (int, float)) or not math.isfinite(at) or \
                not 0 <= at <= MAX_SENT_AT:
            raise PayloadError(f"acknowledgement time {at!r} is not a time")
        return Acknowledgement(_msg_id(body.get("m"), "acknowledged message"), _name(body.get("u"), "user", USER_NAME),
                               float(at))
    raise PayloadError(f"unknown payload kind {kind!r}")
