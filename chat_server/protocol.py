"""Chat protocol v1 (Contract 2 of DESIGN.md): frame validation and construction.

Theory of operation
-------------------
Sans-IO. ``parse_client_frame(text, limits)`` turns one WebSocket text frame
from a client into a validated ``Request`` or raises ``FrameError`` carrying
the error code, a message naming the problem, and ``in_reply_to``. The server
turns a ``FrameError`` into an ``error`` frame and keeps the connection open.
Server frames are plain dicts built by the small functions at the bottom and
encoded once with ``encode``; a message fanned out to a thousand clients is
encoded a single time.

Extensions to Contract 2 (documented in docs/chat-protocol.md): an optional
``id`` on every client frame, echoed in the reply; ``hello {user, session,
last_n}`` to resume a session; ``create {room, members}`` for private rooms;
``history {after_n}``; ``n`` (site-local delivery number) on messages;
``session``/``presence``/``n`` in ``welcome``; ``left``, ``rooms`` and
``history`` replies; ``skipped`` in ``ack``; ``logout {all?}`` -> ``logged_out``;
``rooms {after?, limit?}`` pages -> ``more``.

Precedence (``contracts.precedence``) has one spelling on this boundary and is
checked once, here: a client's ``say`` names its level (``"flash"`` ...
``"routine"``) or leaves ``precedence`` out (routine); anything else (``""``,
``null``, ``0``, ``"FLASH"``) is refused with ``bad_field``. A parsed ``say``
always holds ``fields["precedence"]``, a ``Precedence``, so nothing behind the
edge checks it again. ``message`` frames to clients always carry the name,
``"routine"`` included.

Expiry (second round): a ``say`` may carry ``expires_in``, seconds from
``EXPIRES_IN_MIN`` to ``EXPIRES_IN_MAX`` (a finite number; anything else is
refused with ``bad_field``); the server makes it an absolute ``expires_at``
when it hands the message to RCM. ``message`` frames carry ``expires_at`` when
the message has one, and ``expired: true`` when the server built the frame
after it (history, search and resumed sessions compute it at read time).

Labels (second round, labeled missions only): ``say {label?}`` and
``create {room, label?, members?}`` take a label as JSON (``{"level",
"caveats"}``) or as people write it (``"SECRET//REL TO GBR, USA"``); here it is
only checked to be a string or an object, the mission's scheme reads it
(labeling.py). ``create`` members may be ``name@SITE``; without ``members`` a
``create`` makes a labeled public room.
"""
from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from contracts.mission import SITE_NAME
from contracts.precedence import Precedence
from contracts.text import lone_surrogate
from ordering.keys import key_problem
from ordering.keys import sortable_key as sortable_key  # re-exported: the clients sort with it

PROTOCOL_VERSION = 1

ROOM_NAME = re.compile(r"^[A-Za-z0-9#][A-Za-z0-9_.#:+-]{0,63}\Z")   # \Z: "$" would let a trailing newline in
USER_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,31}\Z")
UNIT_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9 _.#:+-]{0,30}[A-Za-z0-9_.#:+-])?\Z")   # a callsign: inner spaces
MAX_CLIENT_ID = 64
MAX_ID_LEN = 64
MAX_INT = (1 << 63) - 1       # integer fields (n, limits) are stored and compared as SQLite's signed 64 bits
MAX_QUERY = 200               # characters of a search query
EXPIRES_IN_MIN = 1.0          # seconds: a say's ``expires_in`` (expiry, second round)
EXPIRES_IN_MAX = 7 * 86400.0
MSG_ID = re.compile(rf"^({SITE_NAME.pattern[1:-2]}):([1-9][0-9]{{0,18}})\Z")   # "<site>:<seq>", the site rule
_MENTION = re.compile(r"(?<![\w@])@([A-Za-z][A-Za-z0-9_.-]{0,31})(?:@([A-Za-z][A-Za-z0-9_.-]{0,31}))?")


def mentioned(text: str, site: str) -> tuple[str, ...]:
    """Users of ``site`` a text names: ``@user`` (at any site) and ``@user@site``; sorted, no repeats."""
    out = set()
    for user, at in _MENTION.findall(text):
        user, at = user.rstrip(".-"), at.rstrip(".-")
        if user and (not at or at == site):
            out.add(user)
    return tuple(sorted(out))


class ErrorCode:
    BAD_JSON = "bad_json"                 # the frame is not JSON
    BAD_FRAME = "bad_frame"               # JSON, but not an object, or binary
    UNKNOWN_TYPE = "unknown_type"
    MISSING_FIELD = "missing_field"
    BAD_FIELD = "bad_field"               # wrong type or invalid value
    TOO_LARGE = "too_large"               # text longer than max_text_bytes
    NOT_AUTHENTICATED = "not_authenticated"
    ALREADY_AUTHENTICATED = "already_authenticated"
    AUTH_FAILED = "auth_failed"
    RATE_LIMITED = "rate_limited"         # login attempts over the limit
    FORBIDDEN = "forbidden"               # private room, not a member
    NOT_JOINED = "not_joined"
    NOT_FOUND = "not_found"               # no such message at this site (yet: it may be on its way)
    ROOM_EXISTS = "room_exists"
    LIMIT = "limit"                       # too many rooms / members
    TRY_AGAIN = "try_again"               # RCM buffers full
    REJECTED = "rejected"                 # RCM refused the message
    UNAVAILABLE = "unavailable"           # RCM connection is down
    INTERNAL = "internal"


class Refusal(Exception):
    """A request was refused (the domain's error): the edge turns it into an ``error`` frame."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class FrameError(Refusal):
    """A client frame is malformed; ``in_reply_to`` is known from the frame itself."""

    def __init__(self, code: str, message: str, in_reply_to: Any = None) -> None:
        super().__init__(code, message)
        self.in_reply_to = in_reply_to


UNAVAILABLE_TEXT = "the site's RCM server is not reachable; try again"


def unavailable() -> Refusal:
    """The one refusal for 'RCM is not reachable now'."""
    return Refusal(ErrorCode.UNAVAILABLE, UNAVAILABLE_TEXT)


@dataclass(frozen=True, slots=True)
class Request:
    """A validated client frame: ``type``, its fields, and the reply tag."""

    type: str
    fields: dict[str, Any]
    reply_to: Any          # the frame's ``id`` if it had one, else ``client_id`` (say), else the type
    id: Any = None         # the client's ``id``, echoed in the reply


# Field specs per client frame type: name -> (python types, required).
_STR = (str,)
_INT = (int,)
_BOOL = (bool,)
_NUM = (int, float)
_LABEL = (str, dict)       # a security label: {"level", "caveats"} or the people's text (labeling.py reads it)
_NOT_NULL = {("say", "precedence")}    # null is not "absent" here: routine has one spelling (absent or "routine")
_SPECS: dict[str, dict[str, tuple[tuple[type, ...], bool]]] = {
    "hello": {"user": (_STR, True), "password": (_STR, False), "session": (_STR, False),
              "last_n": (_INT, False)},
    "join": {"room": (_STR, True)},
    "leave": {"room": (_STR, True)},
    "say": {"room": (_STR, True), "text": (_STR, True), "client_id": (_STR, True), "reply_to": (_STR, False),
            "precedence": (_STR, False), "expires_in": (_NUM, False), "label": (_LABEL, False)},
    "rooms": {"after": (_STR, False), "limit": (_INT, False)},
    "directory": {"after": (_STR, False), "limit": (_INT, False)},
    "history": {"room": (_STR, True), "before": ((str, list), False), "after_n": (_INT, False),
                "around": (_STR, False), "limit": (_INT, False)},
    "search": {"query": (_STR, True), "room": (_STR, False), "user": (_STR, False), "from": (_NUM, False),
               "to": (_NUM, False), "limit": (_INT, False)},
    "mark_read": {"room": (_STR, True), "order": ((list,), True)},
    "acknowledge": {"msg_id": (_STR, True)},
    "create": {"room": (_STR, True), "members": ((list,), False), "label": (_LABEL, False)},
    "logout": {"all": (_BOOL, False)},
    "position": {"unit": (_STR, False), "lat": (_NUM, True), "lon": (_NUM, True), "alt": (_NUM, False),
                 "course": (_NUM, False), "speed": (_NUM, False), "at": (_NUM, False), "expires_in": (_NUM, False)},
    "positions": {},
}
CLIENT_TYPES = tuple(_SPECS)


def _type_name(types: tuple[type, ...]) -> str:
    names = {str: "a string", int: "an integer", list: "an array", bool: "true or false", float: "a number",
             dict: "an object"}
    if types == _NUM:
        return "a number"
    return " or ".join(names[t] for t in types)


def parse_client_frame(text: str, max_text_bytes: int, max_members: int = 500) -> Request:
    """Validate one client text frame; raise FrameError naming the problem."""
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise FrameError(ErrorCode.BAD_JSON, f"frame is not valid JSON: {e}") from None
    if not isinstance(obj, dict):
        raise FrameError(ErrorCode.BAD_FRAME, f"frame must be a JSON object, got {type(obj).__name__}")
    rid = obj.get("id")
    if rid is not None and not (isinstance(rid, (str, int)) and not isinstance(rid, bool)
                                and len(str(rid)) <= MAX_ID_LEN):
        raise FrameError(ErrorCode.BAD_FIELD, f"field 'id' must be a string or integer of at most "
                         f"{MAX_ID_LEN} characters")
    ftype = obj.get("type")
    reply_to: Any = rid if rid is not None else ftype
    if ftype is None:
        raise FrameError(ErrorCode.MISSING_FIELD, "missing field 'type'", reply_to)
    if not isinstance(ftype, str):
        raise FrameError(ErrorCode.BAD_FIELD, "field 'type' must be a string", reply_to)
    spec = _SPECS.get(ftype)
    if spec is None:
        raise FrameError(ErrorCode.UNKNOWN_TYPE,
                         f"unknown frame type {ftype[:40]!r} (known: {', '.join(CLIENT_TYPES)})", reply_to)
    if ftype == "say" and rid is None and isinstance(obj.get("client_id"), str):
        reply_to = obj["client_id"]
    fields: dict[str, Any] = {}
    for name, (types, required) in spec.items():
        if name not in obj or (obj[name] is None and (ftype, name) not in _NOT_NULL):
            if required:
                raise FrameError(ErrorCode.MISSING_FIELD, f"{ftype}: missing field {name!r}", reply_to)
            continue
        v = obj[name]
        if (isinstance(v, bool) and bool not in types) or not isinstance(v, types):
            raise FrameError(ErrorCode.BAD_FIELD, f"{ftype}: field {name!r} must be {_type_name(types)}",
                             reply_to)
        if isinstance(v, int) and not -MAX_INT - 1 <= v <= MAX_INT:
            raise FrameError(ErrorCode.BAD_FIELD, f"{ftype}: field {name!r} must fit in 63 bits "
                             f"(at most {MAX_INT})", reply_to)
        if any(isinstance(x, str) and lone_surrogate(x) for x in (v if isinstance(v, list) else (v,))):
            # JSON may carry one ("\ud800"); UTF-8 cannot: the database, the journal and scrypt refuse it later
            raise FrameError(ErrorCode.BAD_FIELD, f"{ftype}: field {name!r} is not valid Unicode (a lone "
                             "surrogate)", reply_to)
        fields[name] = v
    _check_values(ftype, fields, reply_to, max_text_bytes, max_members)
    return Request(ftype, fields, reply_to, rid)


def _check_values(ftype: str, f: dict[str, Any], reply_to: Any, max_text_bytes: int, max_members: int) -> None:
    def bad(msg: str, code: str = ErrorCode.BAD_FIELD) -> FrameError:
        return FrameError(code, f"{ftype}: {msg}", reply_to)

    if "room" in f and not ROOM_NAME.match(f["room"]):
        raise bad(f"room {f['room'][:70]!r} must match {ROOM_NAME.pattern}")
    if ftype == "hello":
        if not USER_NAME.match(f["user"]):
            raise bad(f"user {f['user'][:40]!r} must match {USER_NAME.pattern}")
        if ("password" in f) == ("session" in f):
            raise bad("exactly one of 'password' and 'session' is required", ErrorCode.MISSING_FIELD
                      if "password" not in f else ErrorCode.BAD_FIELD)
        if "last_n" in f and f["last_n"] < 0:
            raise bad("last_n must be 0 or more")
    elif ftype == "say":
        if not f["client_id"] or len(f["client_id"]) > MAX_CLIENT_ID:
            raise bad(f"client_id must be 1-{MAX_CLIENT_ID} characters")
        size = len(f["text"].encode("utf-8", "surrogatepass"))
        if size > max_text_bytes:
            raise bad(f"text is {size} bytes, the limit is {max_text_bytes}", ErrorCode.TOO_LARGE)
        if not f["text"].strip():
            raise bad("text is empty")
        if "reply_to" in f and not MSG_ID.match(f["reply_to"]):
            raise bad(f"reply_to {f['reply_to'][:70]!r} is not a message id (site:seq)")
        # The one place a say's precedence is checked: from here on it is a ``Precedence`` (absent: ROUTINE).
        try:
            f["precedence"] = Precedence.parse(f.get("precedence", Precedence.ROUTINE.value))
        except ValueError as e:
            raise bad(f"{e} (absent: routine)") from None
        if "expires_in" in f and not (math.isfinite(f["expires_in"])
                                      and EXPIRES_IN_MIN <= f["expires_in"] <= EXPIRES_IN_MAX):
            raise bad(f"expires_in must be seconds from {EXPIRES_IN_MIN:g} to {EXPIRES_IN_MAX:g} (7 days), "
                      f"got {f['expires_in']!r}")
    elif ftype in ("rooms", "directory"):
        if "limit" in f and f["limit"] <= 0:
            raise bad("limit must be positive")
        if "after" in f and not ROOM_NAME.match(f["after"]):
            raise bad(f"after {f['after'][:70]!r} must be a room name")
    elif ftype == "search":
        if not f["query"].strip() or len(f["query"]) > MAX_QUERY:
            raise bad(f"query must be 1-{MAX_QUERY} characters")
        if "user" in f and not USER_NAME.match(f["user"]):
            raise bad(f"user {f['user'][:40]!r} must match {USER_NAME.pattern}")
        if "limit" in f and f["limit"] <= 0:
            raise bad("limit must be positive")
        for k in ("from", "to"):
            if k in f and not (f[k] == f[k] and abs(f[k]) < 1e12):
                raise bad(f"{k} must be a time in Unix seconds")
    elif ftype == "mark_read":
        if key_problem(f["order"]) is not None:
            raise bad(f"order must be an order key: {key_problem(f['order'])}")
    elif ftype == "acknowledge":
        if not MSG_ID.match(f["msg_id"]):
            raise bad(f"msg_id {f['msg_id'][:70]!r} is not a message id (site:seq)")
    elif ftype == "history":
        if "limit" in f and f["limit"] <= 0:
            raise bad("limit must be positive")
        if "after_n" in f and f["after_n"] < 0:
            raise bad("after_n must be 0 or more")
        if isinstance(f.get("before"), list) and key_problem(f["before"]) is not None:
            raise bad(f"before must be a msg_id or an order key: {key_problem(f['before'])}")
        if sum(k in f for k in ("before", "after_n", "around")) > 1:
            raise bad("give at most one of 'before', 'after_n' and 'around'")
        if "around" in f and not MSG_ID.match(f["around"]):
            raise bad(f"around {f['around'][:70]!r} is not a message id (site:seq)")
    elif ftype == "position":
        _check_position(f, bad)
    elif ftype == "create":
        members = f.get("members", [])
        if len(members) > max_members:
            raise bad(f"{len(members)} members, the limit is {max_members}", ErrorCode.LIMIT)
        for m in members:
            name, at, site = m.partition("@") if isinstance(m, str) else ("", "", "")
            if not USER_NAME.match(name) or (at and not SITE_NAME.match(site)):
                raise bad(f"members must be user names matching {USER_NAME.pattern}, or name@SITE, "
                          f"got {str(m)[:40]!r}")


POSITION_BOUNDS = {"lat": 90.0, "lon": 180.0, "alt": 100_000.0, "speed": 10_000.0}   # (positions.py decodes
# other sites' reports with the same bounds)
POSITION_LIFE_MAX = 3600.0      # seconds: a report's longest life (rcm.wire.latest.MAX_TTL, tested equal: RCM keeps
# no latest-wins value longer)


def _check_position(f: dict[str, Any], bad: Callable[[str], FrameError]) -> None:
    if "unit" in f and not UNIT_NAME.match(f["unit"]):
        raise bad(f"unit {f['unit'][:40]!r} must be a callsign matching {UNIT_NAME.pattern}")
    for name, bound in POSITION_BOUNDS.items():
        if name in f and not (math.isfinite(f[name]) and abs(f[name]) <= bound):
            raise bad(f"{name} must be a number from -{bound:g} to {bound:g}")
    if "course" in f and not (math.isfinite(f["course"]) and 0 <= f["course"] < 360):
        raise bad("course must be degrees from 0 to below 360")
    if "speed" in f and f["speed"] < 0:
        raise bad("speed must be 0 or more (metres per second)")
    if "at" in f and not (math.isfinite(f["at"]) and 0 < f["at"] < 1e11):
        raise bad("at must be a time in Unix seconds")
    if "expires_in" in f and not (math.isfinite(f["expires_in"]) and 1 <= f["expires_in"] <= POSITION_LIFE_MAX):
        raise bad(f"expires_in must be seconds from 1 to {POSITION_LIFE_MAX:g}, got {f['expires_in']!r}")


# --- server frames ---------------------------------------------------------------------------

def encode(frame: dict[str, Any]) -> str:
    """One server frame as the text of a WebSocket frame."""
    return json.dumps(frame, separators=(",", ":"), ensure_ascii=False)


def error(code: str, message: str, in_reply_to: Any = None) -> dict[str, Any]:
    f: dict[str, Any] = {"type": "error", "code": code, "message": message}
    if in_reply_to is not None:
        f["in_reply_to"] = in_reply_to
    return f


def with_id(frame: dict[str, Any], rid: Any) -> dict[str, Any]:
    if rid is not None:
        frame["id"] = rid
    return frame


def message(*, msg_id: str, room: str, origin: str, user: str, text: str, sent_at: float, order: list[Any],
            late: bool, n: int) -> dict[str, Any]:
    """The ``message`` frame."""
    return {"type": "message", "room": room, "msg_id": msg_id, "origin": origin, "user": user, "text": text,
            "sent_at": sent_at, "order": order, "late": late, "n": n}


def welcome(*, site: str, user: str, sites: dict[str, str], rooms: list[str], session: str | None, n: int,
            presence: dict[str, list[str]]) -> dict[str, Any]:
    return {"type": "welcome", "protocol": PROTOCOL_VERSION, "site": site, "user": user, "sites": sites,
            "rooms": rooms, "session": session, "n": n, "presence": presence}


def joined(*, room: str, private: bool, history: list[dict[str, Any]], more: bool,
           members: list[str] | None = None) -> dict[str, Any]:
    frame: dict[str, Any] = {"type": "joined", "room": room, "private": private, "history": history, "more": more}
    if members is not None:
        frame["members"] = members
    return frame


def left(room: str, reason: str | None = None) -> dict[str, Any]:
    frame: dict[str, Any] = {"type": "left", "room": room}
    if reason is not None:
        frame["reason"] = reason
    return frame


def ack(client_id: str, msg_id: str, skipped: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
    frame: dict[str, Any] = {"type": "ack", "client_id": client_id, "msg_id": msg_id}
    if skipped:
        frame["skipped"] = sorted(skipped)
    return frame


def receipt(msg_id: str, site: str) -> dict[str, Any]:
    return {"type": "receipt", "msg_id": msg_id, "site": site}


def site_status(site: str, status: str, via: str | None = None, chat_down: bool = False) -> dict[str, Any]:
    """``chat_down``: RCM reaches the site but its chat server is gone (its will came, no roster since): nobody
    there is online, and what is said reaches the site's RCM server, to be shown when its chat server is back."""
    frame: dict[str, Any] = {"type": "site_status", "site": site, "status": status}
    if via is not None:
        frame["via"] = via              # reached through relays: the next hop
    if chat_down:
        frame["chat_down"] = True
    return frame


def presence(site: str, online: list[str], offline: list[str]) -> dict[str, Any]:
    return {"type": "presence", "site": site, "online": online, "offline": offline}


def missing(origin: str, count: int, ranges: list[list[int]], more: bool, recovered: int = 0,
            expired: int = 0) -> dict[str, Any]:
    """Messages of ``origin`` reported lost here: ``count`` still missing (``ranges`` of RCM seqs, ``more``
    if not all are listed); ``recovered``, when present, how many of them repair brought back since the
    last notice (the notice is then a revision: they are in place now, marked repaired); ``expired``, when
    present, how many of them repair answered with an expired stub since the last notice (they existed,
    expired before they reached this site: neither lost nor shown)."""
    f = {"type": "missing", "origin": origin, "count": count, "ranges": ranges, "more": more}
    if recovered:
        f["recovered"] = recovered
    if expired:
        f["expired"] = expired
    return f


def rooms(rooms: list[dict[str, Any]], more: bool) -> dict[str, Any]:
    return {"type": "rooms", "rooms": rooms, "more": more}


def history(room: str, messages: list[dict[str, Any]], more: bool) -> dict[str, Any]:
    return {"type": "history", "room": room, "messages": messages, "more": more}


def created(room: str, members: list[str], msg_id: str) -> dict[str, Any]:
    return {"type": "created", "room": room, "members": members, "msg_id": msg_id}


def logged_out(everywhere: bool) -> dict[str, Any]:
    return {"type": "logged_out", "all": everywhere}


def directory(rooms: list[dict[str, Any]], more: bool) -> dict[str, Any]:
    return {"type": "directory", "rooms": rooms, "more": more}


def directory_update(rooms: list[dict[str, Any]], removed: list[str]) -> dict[str, Any]:
    """Pushed: directory entries that changed (``rooms``, as in ``directory`` without ``joined``) and rooms
    no longer to list (``removed``)."""
    return {"type": "directory_update", "rooms": rooms, "removed": removed}


def out_of_time(sent_at: float, above_sent_at: float | None) -> int:
    """How many whole seconds a line reads earlier than the line above it in its room (0: in time order).

    Lines follow the global order every site agrees on, not the senders' clocks; clients mark a line
    this returns more than 0 for (docs/chat-protocol.md, "Order against time"). Whole seconds, as
    clients show times: a line is marked when its time, as shown, is earlier than the line above."""
    if above_sent_at is None:
        return 0
    return max(0, int(above_sent_at // 1) - int(sent_at // 1))


def results(query: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
    return {"type": "results", "query": query, "messages": messages}


def read(room: str, order: list[Any]) -> dict[str, Any]:
    return {"type": "read", "room": room, "order": order}


def positions(units: list[dict[str, Any]]) -> dict[str, Any]:
    return {"type": "positions", "units": units}


def acknowledged(msg_id: str, user: str, site: str, at: float) -> dict[str, Any]:
    return {"type": "acknowledged", "msg_id": msg_id, "user": user, "site": site, "at": at}
