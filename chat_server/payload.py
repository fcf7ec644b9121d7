"""Chat payloads carried by RCM between chat servers (msgpack maps).

RCM payloads are opaque bytes to RCM. Every chat server speaks the four kinds
below; the origin site of a payload is the RCM delivery's ``origin``, never a
field, so a site cannot speak for another.

========  =====================================================================
kind      fields
========  =====================================================================
``m``     chat message: ``r`` room, ``u`` user, ``t`` text, ``s`` sent_at (float),
          ``c`` client_id
``d``     private room definition: ``r`` room, ``o`` owner, ``m`` member list
``p``     roster of the origin site: ``g`` generation (int, grows), ``on`` users
          online there, ``rm`` {room: [local members]}
``a``     receipts: ``ids`` msg_ids the origin site has delivered
``b``     barrier: ``b`` a token; sent by a chat server to its own site only, so that
          its delivery proves every earlier send of the site has been delivered
========  =====================================================================

Unknown kinds and malformed payloads are ignored (and logged) so that a newer
chat server can talk to an older one.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgpack


@dataclass(frozen=True, slots=True)
class ChatMessage:
    room: str
    user: str
    text: str
    sent_at: float
    client_id: str


@dataclass(frozen=True, slots=True)
class RoomDefinition:
    room: str
    owner: str
    members: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Roster:
    generation: int
    online: tuple[str, ...]
    rooms: dict[str, tuple[str, ...]]


@dataclass(frozen=True, slots=True)
class Receipts:
    msg_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Barrier:
    token: str


Payload = ChatMessage | RoomDefinition | Roster | Receipts | Barrier


class PayloadError(ValueError):
    """Not a chat payload this server understands."""


def encode_payload(p: Payload) -> bytes:
    if isinstance(p, ChatMessage):
        body: dict[str, Any] = {"k": "m", "r": p.room, "u": p.user, "t": p.text, "s": p.sent_at, "c": p.client_id}
    elif isinstance(p, RoomDefinition):
        body = {"k": "d", "r": p.room, "o": p.owner, "m": list(p.members)}
    elif isinstance(p, Roster):
        body = {"k": "p", "g": p.generation, "on": list(p.online), "rm": {r: list(m) for r, m in p.rooms.items()}}
    elif isinstance(p, Receipts):
        body = {"k": "a", "ids": list(p.msg_ids)}
    elif isinstance(p, Barrier):
        body = {"k": "b", "b": p.token}
    else:  # pragma: no cover - type checker guards this
        raise TypeError(p)
    return msgpack.packb(body, use_bin_type=True)


def _str(v: Any, what: str) -> str:
    if not isinstance(v, str):
        raise PayloadError(f"{what} must be a string")
    return v


def _strs(v: Any, what: str) -> tuple[str, ...]:
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise PayloadError(f"{what} must be a list of strings")
    return tuple(v)


def decode_payload(data: bytes) -> Payload:
    """Decode a chat payload; raise PayloadError if it is not one."""
    try:
        body = msgpack.unpackb(data, raw=False)
    except Exception as e:  # msgpack raises several unrelated types
        raise PayloadError(f"not msgpack: {e}") from None
    if not isinstance(body, dict):
        raise PayloadError("payload is not a map")
    kind = body.get("k")
    if kind == "m":
        sent_at = body.get("s")
        if isinstance(sent_at, bool) or not isinstance(sent_at, (int, float)):
            raise PayloadError("sent_at must be a number")
        return ChatMessage(_str(body.get("r"), "room"), _str(body.get("u"), "user"), _str(body.get("t"), "text"),
                           float(sent_at), _str(body.get("c", ""), "client_id"))
    if kind == "d":
        return RoomDefinition(_str(body.get("r"), "room"), _str(body.get("o"), "owner"),
                              _strs(body.get("m"), "members"))
    if kind == "p":
        gen = body.get("g")
        rooms = body.get("rm")
        if isinstance(gen, bool) or not isinstance(gen, int):
            raise PayloadError("generation must be an integer")
        if not isinstance(rooms, dict):
            raise PayloadError("rooms must be a map")
        return Roster(gen, _strs(body.get("on"), "online"),
                      {_str(r, "room"): _strs(m, "members") for r, m in rooms.items()})
    if kind == "a":
        return Receipts(_strs(body.get("ids"), "ids"))
    if kind == "b":
        return Barrier(_str(body.get("b"), "token"))
    raise PayloadError(f"unknown payload kind {kind!r}")
