"""The compact (array) layout of chat payloads: positional fields, nothing the receiver can derive.

Theory of operation
-------------------
payload.py owns the payload types, the map layout every release reads, and
the entry points (``encode_payload``, ``decode_payload``); it hands msgpack
arrays to this module. An array payload is ``[code, field, ...]``: the first
element, a small integer, names the kind and is the layout's version marker
(a map is the earlier layout; a later layout takes new codes). Optional fields
are trailing: an encoder leaves off the absent ones at the end, and writes
an empty value ("", {}, []) for an absent one before a present one.

======  ===============  =================================================================
code    kind             fields after the code
======  ===============  =================================================================
``1``   chat message     room, user, text, seconds, hundredths, reply_to ("" none),
                         receipts ({site: runs}, the sender's receipts riding along),
                         definition msg_id, definition order key (private rooms only),
                         label (labeled missions: as people write it; "" the default)
``3``   roster (full)    generation, [online], {room: [members]}, {private room: def msg_id},
                         [sites whose roster the sender lacks]
``4``   receipts         {site: runs}: the messages of each site the sender delivered
``5``   roster delta     generation, [came online], [went offline], {room: [joined]},
                         {room: [left]}, {private room among the joined: def msg_id}
``6``   roster tip       generation (the sender's current roster: a peer behind asks)
``7``   roster request   (none): send the sender a full roster
======  ===============  =================================================================

What is left out, and why it is derivable or unused:

* a chat message's ``client_id`` (the map layout's ``c``): only the origin site
  uses it, to remember which say a msg_id answers when RCM's reply was lost.
  The origin finds it in its own ``pending`` table instead, by (user,
  sent_at): the say pipeline gives each pending say of a user a distinct
  ``sent_at`` (sending.py);
* ``sent_at`` to the hundredth of a second (whole seconds, then hundredths:
  5 + 1 bytes, where a float64 takes 9); the origin journals and stores the
  same rounded time, so every site agrees (``wire_time``);
* a receipt's site in its msg_ids: receipts are grouped by the messages'
  origin site and carry sequence numbers as *runs*: ``[first, extra, gap,
  extra, ...]``, the first run ``first .. first + extra``, each next one
  starting ``gap`` after the previous run's last (``gap`` >= 1). Consecutive
  messages cost two small integers whatever their number.

Bounds, as the map layout's: names by the protocol's rules, 63-bit integers,
at most ``MAX_LIST`` names per list and rooms per map, and at most
``MAX_LIST`` msg_ids named by one payload's receipts (counted from the runs
before any is expanded: a run of 2^62 is refused, not listed).
"""
from __future__ import annotations

import math
from typing import Any

import msgpack

from contracts.mission import SITE_NAME

from .payload import (
    MAX_INT,
    MAX_LIST,
    ChatMessage,
    Payload,
    PayloadError,
    Receipts,
    Roster,
    RosterDelta,
    RosterRequest,
    RosterTip,
    _msg_id,
    _name,
    _names,
    check_definition,
    check_generation,
    check_label,
    check_private,
    check_rooms,
    check_text,
    check_time,
)
from .protocol import ROOM_NAME, USER_NAME

MESSAGE, ROSTER, RECEIPTS, DELTA, TIP, REQUEST = 1, 3, 4, 5, 6, 7


# --- times ---------------------------------------------------------------------------------------------
def wire_time(t: float) -> tuple[int, int]:
    """Unix seconds as (whole seconds, hundredths), rounded down to the hundredth."""
    cs = math.floor(t * 100 + 1e-3)           # (+1e-3: a time already on a hundredth stays on it)
    return cs // 100, cs % 100


def from_wire(seconds: int, hundredths: int) -> float:
    return seconds + hundredths / 100


def compact_time(t: float) -> float:
    """``t`` as the array layout carries it (what the origin stores and journals, so that every site agrees)."""
    return from_wire(*wire_time(t))


# --- receipts as runs ----------------------------------------------------------------------------------
def runs(seqs: list[int]) -> list[int]:
    """Sorted distinct positive ``seqs`` as runs: [first, extra, gap, extra, ...]."""
    out: list[int] = []
    last = 0
    for s in sorted(set(seqs)):
        if out and s == last + 1:
            out[-1] += 1
        else:
            out += [s, 0] if not out else [s - last, 0]
        last = s
    return out


def group_receipts(msg_ids: tuple[str, ...]) -> dict[str, list[int]]:
    by_site: dict[str, list[int]] = {}
    for m in msg_ids:
        site, seq = m.rsplit(":", 1)
        by_site.setdefault(site, []).append(int(seq))
    return {site: runs(seqs) for site, seqs in by_site.items()}


def _receipts(v: Any) -> tuple[str, ...]:
    """{site: runs} -> msg_ids, at most MAX_LIST of them (counted before any run is expanded)."""
    if not isinstance(v, dict) or len(v) > MAX_LIST:
        raise PayloadError(f"receipts must be a map of at most {MAX_LIST} sites")
    bounds: list[tuple[str, int, int]] = []
    count = 0
    for site, rs in v.items():
        _name(site, "receipt site", SITE_NAME)
        if not isinstance(rs, list) or len(rs) % 2 or len(rs) > 2 * MAX_LIST:
            raise PayloadError("receipt runs must be a list of (start, extra) pairs")
        last = 0
        for i in range(0, len(rs), 2):
            step, extra = rs[i], rs[i + 1]
            if any(isinstance(x, bool) or not isinstance(x, int) for x in (step, extra)) or step < 1 or extra < 0:
                raise PayloadError("receipt runs hold positive steps and non-negative lengths")
            first = last + step
            last = first + extra
            count += extra + 1
            if last > MAX_INT or count > MAX_LIST:
                raise PayloadError(f"receipts name more than {MAX_LIST} messages, or a seq beyond 63 bits")
            bounds.append((site, first, last))
    return tuple(f"{site}:{s}" for site, first, last in bounds for s in range(first, last + 1))


# --- encoding -------------------------------------------------------------------------------------------
def _trim(fields: list[Any]) -> list[Any]:
    """Leave off trailing empty optional fields."""
    while fields and fields[-1] in ("", {}, [], ()):
        fields.pop()
    return fields


def encode_array(p: Payload) -> bytes:
    if isinstance(p, ChatMessage):
        body: list[Any] = [MESSAGE, p.room, p.user, p.text, *wire_time(p.sent_at),
                           *_trim([p.reply_to, group_receipts(p.receipts), p.definition, list(p.definition_order),
                                   p.label])]
    elif isinstance(p, Roster):
        body = [ROSTER, p.generation, list(p.online),
                *_trim([{r: list(m) for r, m in p.rooms.items()}, dict(p.private), list(p.want)])]
    elif isinstance(p, RosterDelta):
        body = [DELTA, p.generation, *_trim([list(p.came), list(p.went), {r: list(m) for r, m in p.joined.items()},
                                             {r: list(m) for r, m in p.left.items()}, dict(p.private)])]
    elif isinstance(p, RosterTip):
        body = [TIP, p.generation]
    elif isinstance(p, RosterRequest):
        body = [REQUEST]
    elif isinstance(p, Receipts):
        body = [RECEIPTS, group_receipts(p.msg_ids)]
    else:  # pragma: no cover - payload.encode_payload sends only these
        raise TypeError(p)
    return bytes(msgpack.packb(body, use_bin_type=True))


# --- decoding -------------------------------------------------------------------------------------------
def _at(body: list[Any], i: int, empty: Any) -> Any:
    return body[i] if len(body) > i else empty


def decode_array(body: list[Any]) -> Payload:
    if not body or isinstance(body[0], bool) or not isinstance(body[0], int):
        raise PayloadError("an array payload starts with its kind's code")
    code = body[0]
    if code == MESSAGE:
        if len(body) < 6 or len(body) > 11:
            raise PayloadError("a chat message has 5 to 10 fields")
        seconds, hundredths = body[4], body[5]
        if isinstance(hundredths, bool) or not isinstance(hundredths, int) or not 0 <= hundredths < 100:
            raise PayloadError(f"hundredths of a second {hundredths!r} outside 0..99")
        if isinstance(seconds, bool) or not isinstance(seconds, int):
            raise PayloadError(f"sent_at seconds {seconds!r} is not an integer")
        sent_at = check_time(from_wire(seconds, hundredths) if 0 <= seconds <= MAX_INT else -1, "sent_at")
        reply_to = _at(body, 6, "")
        if reply_to != "":
            _msg_id(reply_to, "reply_to")
        definition, order = check_definition(_at(body, 8, ""), _at(body, 9, []))
        return ChatMessage(_name(body[1], "room", ROOM_NAME), _name(body[2], "user", USER_NAME), check_text(body[3]),
                           sent_at, "", definition, order, reply_to, _receipts(_at(body, 7, {})),
                           check_label(_at(body, 10, "")))
    if code == ROSTER:
        if len(body) < 3 or len(body) > 6:
            raise PayloadError("a roster has 2 to 5 fields")
        return Roster(check_generation(body[1]), _names(body[2], "online", USER_NAME),
                      check_rooms(_at(body, 3, {}), "members"), check_private(_at(body, 4, {})),
                      _names(_at(body, 5, []), "wanted", SITE_NAME))
    if code == DELTA:
        if len(body) < 2 or len(body) > 7:
            raise PayloadError("a roster delta has 1 to 6 fields")
        return RosterDelta(check_generation(body[1]), _names(_at(body, 2, []), "came", USER_NAME),
                           _names(_at(body, 3, []), "went", USER_NAME), check_rooms(_at(body, 4, {}), "joined"),
                           check_rooms(_at(body, 5, {}), "left"), check_private(_at(body, 6, {})))
    if code == TIP:
        if len(body) != 2:
            raise PayloadError("a roster tip has one field")
        return RosterTip(check_generation(body[1]))
    if code == REQUEST:
        return RosterRequest()
    if code == RECEIPTS:
        if len(body) != 2:
            raise PayloadError("receipts have one field")
        return Receipts(_receipts(body[1]))
    raise PayloadError(f"unknown array payload code {code!r}")
