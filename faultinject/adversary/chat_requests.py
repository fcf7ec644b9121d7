"""Hostile chat inputs, one generator per kind: a user's client frames, a peer chat server's payloads, RCM events.

Three sources reach a chat server (docs/chat-protocol.md, chat_server/payload.py):

* a signed-in user's client frames (``hello`` ... ``logout``, the second round's ``position`` and
  ``positions``, unknown types, text that is not a frame at all): every field a good value, a number at
  and around the bounds (``draws.BOUNDS``), NaN and infinities (Python's JSON reads them), a string
  at and past its limit, or a value of the wrong type; ``search`` queries with many prefixes, quotes,
  FTS5 operators, long words and unicode, at and around the search rules' limits;
* a peer chat server's payloads, as RCM delivers them (``PeerDelivery``): messages, room definitions,
  rosters, receipts, barriers, definition requests, acknowledgements and unknown kinds, their lists at
  and past ``MAX_LIST``, in an envelope (origin, sequence number, order key) that is good or at a bound;
* the RCM events a hostile peer can cause at the chat server: ``Missing`` with huge, inverted or
  overlapping ranges, deliveries with huge order keys and sequence numbers, status changes. Their
  origin is a peer's: RCM delivers the site's own messages, and reports its own losses, only from what
  the site itself sent (a forged "A:143" at A took the msg_id of alice's next message).

Each generator takes a ``random.Random`` (in ``ChatInputs``) and a ``ChatHint`` (what the site holds
now, read by the probe: the hostile user's rooms and session token, recent msg_ids, the order clock)
so that most inputs are plausible enough to get past the first check and reach deep code.
"""
from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgpack

from chat_server.payload import MAX_LIST
from chat_server.protocol import MAX_QUERY
from contracts.precedence import DEFAULT, PRECEDENCES
from contracts.status import REPORTED
from rcm.client import Missing, StatusChange

from .draws import BOUNDS, Draws

JSON_ODD: tuple[Any, ...] = (None, True, False, 1.5, -0.0, 1e308, math.nan, math.inf, -math.inf, "", "x" * 300,
                             "\ud800", "1", [], [[]], {}, {"p": 0}, [1, [2, [3, [4]]]], 10**30, -10**30)
"""Values of the wrong type (or shape) for almost any field of a JSON frame."""

WORDS = ("grid tanker station convoy medevac ready confirm abort hold fuel north south east west bravo charlie "
         "delta echo foxtrot sierra tango whiskey yankee zulu relay status report eta launch recovery casualty "
         "priority weather ceiling visibility winds runway approach departure orbit track contact").split()
"""The history's vocabulary (the probe writes its history from it): queries that match, and prefixes of it."""

ROOMS = ("r0", "r1", "r2", "r3", "r4", "r5", "#net", "ops.B", "R" + "x" * 63)
"""Rooms of the hostile world (the honest user's room is not among them: see ``chat_probe``)."""

USERS = ("mallory", "bob", "carol", "dave", "eve", "trent", "u" * 32)
SITES = ("A", "B", "C")
PEERS = ("B", "C")      # the origins RCM delivers from a peer (a site's own origin only comes from its own sends)
OPERATORS = ("AND", "OR", "NOT", "NEAR(a b, 3)", "^", "-", "+", ":", "text:", "room:", "{text user}:", "(", ")",
             "*", "\"", "''", "\\", "%", "_", "NULL", "'; DROP TABLE messages; --")


@dataclass(frozen=True, slots=True)
class PeerDelivery:
    """A hostile peer's payload as RCM delivers it (the probe numbers it ``n``)."""

    origin: str
    seq: int
    order: Any
    late: bool
    payload: bytes
    repaired: bool = False
    precedence: str = DEFAULT


Input = str | PeerDelivery | Missing | StatusChange
"""One hostile input: a client frame's text, a peer's delivery, or an RCM event."""


@dataclass(frozen=True, slots=True)
class ChatHint:
    """What the site holds now, read by the probe before each input."""

    site: str                       # the target site
    user: str                       # the hostile user (signed in)
    password: str
    session: str                    # the hostile user's session token (for resuming ``hello``)
    rooms: tuple[str, ...]          # rooms the hostile user is in
    msg_ids: tuple[str, ...]        # some msg_ids stored at the site (hostile rooms' messages)
    n: int                          # the site's last delivery number
    peer_seq: int                   # the hostile peer's next sequence number
    clock: int                      # the order clock (Lamport timestamps) at the site now
    ceiling: int                    # ordering.honest_ceiling(now)
    now: float                      # Unix seconds


class ChatInputs(Draws):
    """Draws hostile chat inputs of one kind at a time (see the module docstring)."""

    ODD = JSON_ODD
    WIDE = (-2**64, 2**65)

    # -- values ---------------------------------------------------------------------------------
    def name(self, good: tuple[str, ...], p_new: float = 0.1) -> Any:
        """A name from ``good``, a new one, one at or past its rule's limits, or something else."""
        r = self.rng.random()
        if r < 1 - p_new - 0.15:
            return self.rng.choice(good)
        if r < 1 - 0.15:
            return f"n{self.rng.randrange(10**6)}"
        return self.rng.choice(("", " ", "a" * 64, "a" * 65, "b" * 33, "r0\n", "\u00e9t\u00e9", "r0 ", "-x", "#",
                                "x\x00y", "A:1", "\ud800")) if r < 0.95 else self.odd()

    def room(self, h: ChatHint) -> Any:
        rooms = h.rooms or ROOMS
        return self.name(rooms + ROOMS if self.rng.random() < 0.5 else rooms)

    def sentence(self) -> str:
        """What an honest user writes: one to eleven words."""
        return " ".join(self.rng.choice(WORDS) for _ in range(self.rng.randrange(1, 12)))

    def long(self, limit: int) -> str:
        """A text at and past a byte limit: one byte short of it, at it, one past, four times it."""
        return "x" * self.rng.choice((limit - 1, limit, limit + 1, 4 * limit))

    def text(self, limit: int = 8192) -> Any:
        """A message text: short, at and past the byte limit, full of mentions, unicode or controls."""
        rng = self.rng
        r = rng.random()
        if r < 0.45:
            return self.sentence()
        if r < 0.55:
            return self.long(limit)
        if r < 0.62:
            return "é" * rng.choice((limit // 2, limit // 2 + 1))      # two bytes each: the limit is in bytes
        if r < 0.7:
            return " ".join(f"@{rng.choice(USERS + ('alice',))}" for _ in range(rng.choice((10, 500, 2000))))
        if r < 0.78:
            return "".join(chr(rng.choice((0x202E, 0x1F4A3, 0x0301, 0x4E2D, 0x0, 0x7, 0x1B, 0xFEFF, 0x10FFFF)))
                           for _ in range(rng.choice((1, 50, 2000))))
        if r < 0.85:
            return rng.choice(("", " ", "\n\t ", "\ud800", "a\udc00b"))
        return self.odd()

    def msg_id(self, h: ChatHint) -> Any:
        rng = self.rng
        r = rng.random()
        if r < 0.5 and h.msg_ids:
            return rng.choice(h.msg_ids)
        if r < 0.8:
            return f"{rng.choice(SITES + ('Z',))}:{self.rng.choice(BOUNDS[1:18])}"
        return rng.choice(("A:0", "B:-1", "B:" + "9" * 20, "B:1:2", ":1", "B:", "b:1", "B:01", "A" * 70 + ":1",
                           "B:1\n")) if r < 0.95 else self.odd()

    def order(self, h: ChatHint) -> Any:
        """An order key: near the clock, at a bound, malformed, or of the wrong type."""
        rng = self.rng
        r = rng.random()
        if r < 0.5:
            return [self.num(h.clock + rng.randrange(-3, 3)), rng.choice(SITES)]
        if r < 0.6:
            return [h.ceiling + rng.randrange(-1, 2), rng.choice(SITES)]
        if r < 0.85:
            return [self.num() for _ in range(rng.choice((0, 1, 3, 9, 100)))]
        return rng.choice(([1.5, "A"], ["x", "A"], [1, "A" * 300], [[1], "A"], [1, "A", [2]], [2**64, "A"],
                           [-2**63 - 1, "A"], [1, None], "1,A")) if r < 0.95 else self.odd()

    def time(self, h: ChatHint) -> Any:
        """A time in Unix seconds: now, a bound, not a time."""
        r = self.rng.random()
        if r < 0.4:
            return h.now + self.rng.uniform(-86400, 86400)
        if r < 0.8:
            return self.rng.choice((0, -1, 1e11, 1e12, -1e12, 1e12 - 1, 2**53, 2**63 - 1, 2**63, 1e308))
        return self.odd()

    # -- client frames --------------------------------------------------------------------------
    def frame(self, obj: dict[str, Any]) -> str:
        """A client frame's text: the object, sometimes with an ``id``, an unknown field, or a field missing."""
        rng = self.rng
        r = rng.random()
        if r < 0.25:
            obj["id"] = self.maybe(rng.choice((rng.randrange(10**6), "q" * rng.choice((1, 64, 65)), 2**63, -1)), 0.3)
        elif r < 0.3:
            obj[rng.choice(("zz", "type2", "__proto__", "label", "ttl"))] = self.odd()
        elif r < 0.38 and len(obj) > 1:
            del obj[rng.choice([k for k in obj if k != "type"])]
        return json.dumps(obj, ensure_ascii=rng.random() < 0.5)

    def hello(self, h: ChatHint) -> str:
        rng = self.rng
        obj: dict[str, Any] = {"type": "hello", "user": self.name((h.user, h.user, "alice") + USERS)}
        r = rng.random()
        if r < 0.45:
            obj["password"] = self.maybe(rng.choice((h.password, "wrong", "", "p" * 10_000)))
        elif r < 0.85:
            obj["session"] = self.maybe(rng.choice((h.session, "0" * 43, "", "s" * 5000)))
            if rng.random() < 0.6:
                obj["last_n"] = self.num(max(0, h.n - rng.randrange(0, 300)))
        else:
            obj["password"], obj["session"] = h.password, h.session
        return self.frame(obj)

    def join(self, h: ChatHint) -> str:
        return self.frame({"type": "join", "room": self.room(h)})

    def leave(self, h: ChatHint) -> str:
        return self.frame({"type": "leave", "room": self.room(h)})

    def say(self, h: ChatHint) -> str:
        rng = self.rng
        obj: dict[str, Any] = {"type": "say", "room": self.room(h), "text": self.text(),
                               "client_id": self.maybe(rng.choice((f"c{rng.randrange(10**9)}", f"c{rng.randrange(20)}",
                                                                   "c" * 64, "c" * 65, "")))}
        if rng.random() < 0.3:
            obj["precedence"] = self.maybe(rng.choice(PRECEDENCES + ("FLASH", "override", "")))
        if rng.random() < 0.25:
            obj["reply_to"] = self.msg_id(h)
        if rng.random() < 0.15:
            obj["label"] = self.maybe(rng.choice(({"level": "SECRET", "caveats": ["USA"]}, {"level": "X" * 300},
                                                  {"level": "SECRET", "caveats": ["C"] * 10_000}, "SECRET")))
        if rng.random() < 0.15:
            obj["expires_in"] = self.maybe(rng.choice((0, 1, 60.5, -1, 2**31, 2**53, 2**63, 1e308, math.nan)))
        return self.frame(obj)

    def _page(self, kind: str, h: ChatHint) -> str:
        obj: dict[str, Any] = {"type": kind}
        if self.rng.random() < 0.6:
            obj["after"] = self.room(h)
        if self.rng.random() < 0.6:
            obj["limit"] = self.num(self.rng.choice((1, 10, 100)))
        return self.frame(obj)

    def rooms(self, h: ChatHint) -> str:
        return self._page("rooms", h)

    def directory(self, h: ChatHint) -> str:
        return self._page("directory", h)

    def history(self, h: ChatHint) -> str:
        rng = self.rng
        obj: dict[str, Any] = {"type": "history", "room": self.room(h)}
        r = rng.random()
        if r < 0.25:
            obj["before"] = self.msg_id(h)
        elif r < 0.45:
            obj["before"] = self.order(h)
        elif r < 0.6:
            obj["around"] = self.msg_id(h)
        elif r < 0.75:
            obj["after_n"] = self.num(max(0, h.n - rng.randrange(0, 500)))
        elif r < 0.8:
            obj["before"], obj["around"] = self.msg_id(h), self.msg_id(h)
        if rng.random() < 0.6:
            obj["limit"] = self.num(rng.choice((1, 50, 500)))
        return self.frame(obj)

    def acknowledge(self, h: ChatHint) -> str:
        return self.frame({"type": "acknowledge", "msg_id": self.msg_id(h)})

    def mark_read(self, h: ChatHint) -> str:
        return self.frame({"type": "mark_read", "room": self.room(h), "order": self.order(h)})

    def create(self, h: ChatHint) -> str:
        rng = self.rng
        n = rng.choice((0, 1, 3, 49, 50, 51, 500, 501, 5000))
        members: Any = [self.name(USERS + ("alice",), 0.3) for _ in range(min(n, 60))]
        members += [f"m{i}" for i in range(n - len(members))]
        room = self.room(h) if rng.random() < 0.5 else f"p{rng.randrange(40)}"
        obj: dict[str, Any] = {"type": "create", "room": room, "members": self.maybe(members)}
        if rng.random() < 0.2:
            obj["label"] = self.maybe({"level": "SECRET"})
        return self.frame(obj)

    def logout(self, h: ChatHint) -> str:
        obj: dict[str, Any] = {"type": "logout"}
        if self.rng.random() < 0.5:
            obj["all"] = self.maybe(self.rng.random() < 0.5, 0.3)
        return self.frame(obj)

    def query(self) -> Any:
        """A search query: words, prefixes of every length (one letter: refused), phrases, FTS5 operators,
        long words, unicode, at and past the limits (``MAX_QUERY`` characters, 8 terms, 16 words)."""
        rng = self.rng

        def term() -> str:
            w = rng.choice(WORDS)
            r = rng.random()
            if r < 0.3:
                return w
            if r < 0.55:
                return w[:rng.choice((1, 1, 2, 3, 4, 6))] + "*"
            if r < 0.7:
                return '"' + " ".join(rng.choice(WORDS) for _ in range(rng.choice((1, 2, 4, 16, 17)))) + '"'
            if r < 0.8:
                return rng.choice(OPERATORS)
            if r < 0.88:
                return rng.choice(("x" * 199, "é" * 60 + "*", "中文字", "ǅ" * 5, "\u0301" * 30, "🔥*", "Σσς", "ß*"))
            return f"{rng.randrange(0, 2400):04d}"
        r = rng.random()
        if r < 0.1:                 # one-letter prefixes of the words said, distinct or one repeated to the limit
            initials = sorted({w[0] for w in WORDS})
            if rng.random() < 0.5:
                q = " ".join(c + "*" for c in rng.sample(initials, rng.choice((1, 8, len(initials)))))
            else:
                q = " ".join([rng.choice(initials) + "*"] * rng.choice((2, 8, MAX_QUERY // 3)))
        elif r < 0.2:
            q = " ".join(rng.choice(WORDS)[:2] + "*" for _ in range(rng.choice((8, 9, 40))))
        elif r < 0.85:
            q = " ".join(term() for _ in range(rng.choice((1, 1, 2, 3, 8, 9, 17))))
        elif r < 0.92:
            q = rng.choice(("", " ", '"', '""', "*", "**", '"*"', "a" * MAX_QUERY, "a" * (MAX_QUERY + 1),
                            "a " * 100, "x" * 10_000))
        else:
            return self.odd()
        return q if len(q) <= MAX_QUERY or rng.random() < 0.3 else q[:MAX_QUERY]

    def search(self, h: ChatHint) -> str:
        rng = self.rng
        obj: dict[str, Any] = {"type": "search", "query": self.query()}
        if rng.random() < 0.3:
            obj["room"] = self.room(h)
        if rng.random() < 0.2:
            obj["user"] = self.name(USERS + ("alice",))
        if rng.random() < 0.2:
            obj["from"] = self.time(h)
        if rng.random() < 0.2:
            obj["to"] = self.time(h)
        if rng.random() < 0.4:
            obj["limit"] = self.num(rng.choice((1, 20, 100)))
        return self.frame(obj)

    def position(self, h: ChatHint) -> str:
        rng = self.rng

        def coordinate(limit: float) -> Any:
            return self.maybe(rng.choice((rng.uniform(-limit, limit), limit, -limit, limit + 1e-9, 1e308, 0)), 0.2)
        obj: dict[str, Any] = {"type": "position", "lat": coordinate(90.0), "lon": coordinate(180.0),
                               "at": self.time(h)}
        if rng.random() < 0.5:
            obj["unit"] = self.name(USERS + ("alice", "U-1"))
        for k, limit in (("alt", 1e5), ("course", 360.0), ("speed", 1e4)):
            if rng.random() < 0.3:
                obj[k] = coordinate(limit)
        return self.frame(obj)

    def positions(self, h: ChatHint) -> str:
        return self.frame({"type": "positions"})

    def unknown(self, h: ChatHint) -> str:
        t = self.rng.choice(("SAY", "welcome", "message", "", " say", "say\x00", "x" * 5000, "__init__", 7, None,
                             ["say"], {"type": "say"}, math.nan))
        return self.frame({"type": t, "room": "r0", "text": "hi", "client_id": "c1"})

    def malformed(self, h: ChatHint) -> str:
        """Text that is not a frame: not JSON, not an object, nested as deep as the frame cap allows, numbers
        past what a parser takes, duplicate keys, a byte-order mark."""
        rng = self.rng
        depth = rng.choice((10, 1000, 30_000))
        return rng.choice((
            "", "{", "}", "null", "[]", '"say"', "1e400", "-" + "9" * 5000, "{" + '"a":' * 10 + "1", "\ufeff{}",
            "[" * depth + "]" * depth, '{"type":' + "[" * depth + "]" * depth + "}",
            '{"type":"say","type":"join","room":"r0"}', '{"type":"join","room":"r0"' + ',"x":1' * 5000 + "}",
            '{"type":"say","room":"r0","text":"' + "\\u0000" * 5000 + '","client_id":"c1"}',
            '{"type":"join","room":"\\ud800"}', "\x00" * 100, json.dumps({"type": "join", "room": {"$ne": 1}}),
            '{"type":"history","room":"r0","limit":' + "9" * 4300 + "}", '{"type": NaN}',
        ))

    # -- a peer chat server's payloads, as RCM delivers them ------------------------------------------
    def _names(self, good: tuple[str, ...]) -> Any:
        rng = self.rng
        r = rng.random()
        if r < 0.85:
            return [self.name(good, 0.2) for _ in range(rng.choice((0, 1, 3, 20, 200)))]
        if r < 0.9:                 # now and then at the cap
            return [f"u{i}" for i in range(rng.choice((MAX_LIST - 1, MAX_LIST, MAX_LIST + 1)))]
        return self.odd()

    def envelope(self, h: ChatHint, payload: dict[str, Any] | bytes, origin: str | None = None) -> PeerDelivery:
        """RCM's delivery of a peer's payload: mostly from B, in sequence, at the clock; now and then at a bound."""
        rng = self.rng
        r = rng.random()
        seq = h.peer_seq if r < 0.8 else rng.choice((1, h.peer_seq - 1, h.ceiling, 2**63 - 1, 2**63, 2**64 - 1))
        order = [h.clock + 1, "B"] if rng.random() < 0.8 else self.carried_order(h)
        data = payload if isinstance(payload, bytes) else _pack(payload)
        return PeerDelivery(origin or ("B" if rng.random() < 0.9 else "C"), seq, order, rng.random() < 0.2, data,
                            repaired=rng.random() < 0.05)

    def peer_message(self, h: ChatHint) -> PeerDelivery:
        rng = self.rng
        body: dict[str, Any] = {"k": "m", "r": self.maybe(rng.choice(ROOMS)), "u": self.name(USERS),
                                "t": self.text(), "s": self.maybe(rng.choice((h.now, h.now, 0, -1, 1e11, 1e11 + 1,
                                                                              1e308, math.nan, math.inf))),
                                "c": self.maybe(f"c{rng.randrange(10**6)}", 0.1)}
        if rng.random() < 0.2:
            body["d"], body["dk"] = self.msg_id(h), self.order(h)
        if rng.random() < 0.2:
            body["re"] = self.msg_id(h)
        if rng.random() < 0.2:          # an earlier release's copy of RCM's precedence: ignored, whatever it holds
            body["pr"] = self.maybe(rng.choice(PRECEDENCES + ("x",)))
        return self.envelope(h, body)

    def peer_definition(self, h: ChatHint) -> PeerDelivery:
        rng = self.rng
        body: dict[str, Any] = {"k": "d", "r": self.maybe(rng.choice(ROOMS + ("p1", "p2"))), "o": self.name(USERS),
                                "m": self._names(USERS)}
        if rng.random() < 0.4:
            body["i"], body["ik"] = self.msg_id(h), self.order(h)
        return self.envelope(h, body)

    def peer_roster(self, h: ChatHint) -> PeerDelivery:
        rng = self.rng
        rooms: Any = {rng.choice(ROOMS): self._names(USERS) for _ in range(rng.choice((0, 1, 5)))}
        if rng.random() < 0.1:
            rooms = {f"q{i}": ["bob"] for i in range(rng.choice((MAX_LIST, MAX_LIST + 1)))}
        private: Any = {}
        if rng.random() < 0.4:
            private = {rng.choice(ROOMS + (f"q{rng.randrange(2000)}",)): self.msg_id(h)
                       for _ in range(rng.choice((1, 5, 1500)))}
        body = {"k": "p", "g": self.num(int(h.now * 1e9)), "on": self._names(USERS), "rm": self.maybe(rooms),
                "pv": self.maybe(private)}
        return self.envelope(h, body)

    def peer_receipts(self, h: ChatHint) -> PeerDelivery:
        rng = self.rng
        n = rng.choice((0, 1, 50, MAX_LIST, MAX_LIST + 1))
        ids: Any = [self.msg_id(h) if rng.random() < 0.5 else f"A:{rng.randrange(1, 10**6)}" for _ in range(min(n, 60))]
        ids += [f"A:{i + 1}" for i in range(n - len(ids))]
        return self.envelope(h, {"k": "a", "ids": self.maybe(ids)})

    def peer_barrier(self, h: ChatHint) -> PeerDelivery:
        return self.envelope(h, {"k": "b", "b": self.maybe(self.rng.choice(("A-1", "b" * 200, "b" * 201)))})

    def peer_definition_request(self, h: ChatHint) -> PeerDelivery:
        return self.envelope(h, {"k": "q", "r": self.maybe(self.rng.choice(ROOMS + ("p1", "ops")))})

    def peer_acknowledgement(self, h: ChatHint) -> PeerDelivery:
        return self.envelope(h, {"k": "k", "m": self.msg_id(h), "u": self.name(USERS),
                                 "s": self.maybe(self.rng.choice((h.now, 0, -1, 1e11 + 1, math.nan)))})

    def peer_gone(self, h: ChatHint) -> PeerDelivery:
        """A chat server's will (``ServerGone``): its users offline here; from a live site, a lie about itself."""
        body: dict[str, Any] = {"k": "g"}
        if self.rng.random() < 0.3:
            body["x"] = self.maybe(self._names(USERS))        # a field it does not have: ignored
        return self.envelope(h, body)

    def peer_unknown(self, h: ChatHint) -> PeerDelivery:
        rng = self.rng
        r = rng.random()
        if r < 0.4:
            return self.envelope(h, {"k": rng.choice(("z", "", "mm", 1, None, "m\x00")), "r": "r0"})
        if r < 0.7:
            return self.envelope(h, rng.randbytes(rng.choice((0, 1, 16, 4000))))
        data = rng.choice((msgpack.packb([1, 2, 3]), msgpack.packb("m"), b"\xc1", b"\xdd\xff\xff\xff\xff",
                           b"\x91" * 10_000 + b"\x90", msgpack.packb({1: 2}), msgpack.packb({"k": "m", "r": b"r0"})))
        return self.envelope(h, data)

    # -- RCM events a hostile peer causes --------------------------------------------------------
    def missing(self, h: ChatHint) -> Missing:
        """RCM says messages of a peer will never arrive: ranges canonical or not, narrow or up to 2^64."""
        rng = self.rng
        n = 4096 if rng.random() < 0.03 else rng.choice((1, 1, 2, 10, 100, 1000))     # now and then RCM's cap
        ranges: list[tuple[int, int]] = []
        if rng.random() < 0.3:                   # malformed: inverted, overlapping, unsorted, negative
            ints = [b for b in BOUNDS] + [rng.randrange(-2**63, 2**64) for _ in range(4)]
            ranges = [(rng.choice(ints), rng.choice(ints)) for _ in range(n)]
        else:
            lo = rng.choice((1, h.peer_seq, h.ceiling - 10, 2**53 - 2 * n - 10, 2**63 - 2 * n - 10))
            for _ in range(n):
                hi = lo + rng.choice((0, 0, 3, 1000, 2**31, 2**53))
                ranges.append((lo, min(hi, 2**64 - 1)))
                lo = hi + 2
                if lo > 2**64 - 3:
                    break
        return Missing(rng.choice(("B", "B", "C")), tuple(ranges))

    def delivery(self, h: ChatHint) -> PeerDelivery:
        """A delivery whose envelope is at the bounds: order keys and sequence numbers huge, odd or malformed."""
        rng = self.rng
        inner = rng.choice((self.peer_message, self.peer_roster, self.peer_receipts, self.peer_acknowledgement))(h)
        seq = rng.choice((1, h.peer_seq, h.ceiling, h.ceiling + 1, 2**53, 2**63 - 1, 2**63, 2**64 - 1, 0, -1))
        return PeerDelivery(rng.choice(PEERS), seq, self.carried_order(h), rng.random() < 0.5, inner.payload,
                            repaired=rng.random() < 0.3, precedence=rng.choice(PRECEDENCES))

    def carried_order(self, h: ChatHint) -> list[Any]:
        """An order key as RCM's client API can carry it (a msgpack array of integers and strings): at the
        clock, past the ceiling, at every bound, empty, too long, names too long or empty."""
        rng = self.rng
        r = rng.random()
        if r < 0.4:
            return [h.clock + 1, rng.choice(SITES)]
        if r < 0.8:
            return [rng.choice(BOUNDS), rng.choice(SITES)]
        return [rng.choice(BOUNDS + ("A", "", "x" * 65, "A\x00")) for _ in range(rng.choice((0, 1, 3, 16, 17)))]

    def status(self, h: ChatHint) -> StatusChange:
        rng = self.rng
        return StatusChange(rng.choice(SITES + ("Z", "")),
                            rng.choice(REPORTED + ("up", "", "x" * 300)),
                            rng.choice((None, None, "B", "C", "A", "Z", "x" * 300)))


def _pack(value: Any) -> bytes:
    """A payload as a peer's msgpack carries it: integers beyond msgpack's range at its ends, strings
    msgpack cannot encode (lone surrogates) as raw bytes, which a peer may send where a string belongs."""
    def carried(v: Any) -> Any:
        if isinstance(v, int) and not isinstance(v, bool):
            return min(max(v, -2**63), 2**64 - 1)
        if isinstance(v, str):
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                return v.encode("utf-8", "surrogatepass")
            return v
        if isinstance(v, list):
            return [carried(x) for x in v]
        if isinstance(v, dict):
            return {carried(k): carried(x) for k, x in v.items()}
        return v
    return bytes(msgpack.packb(carried(value), use_bin_type=True))


CLIENT_KINDS: dict[str, Callable[[ChatInputs, ChatHint], str]] = {
    "hello": ChatInputs.hello, "join": ChatInputs.join, "leave": ChatInputs.leave, "say": ChatInputs.say,
    "rooms": ChatInputs.rooms, "history": ChatInputs.history, "acknowledge": ChatInputs.acknowledge,
    "directory": ChatInputs.directory, "search": ChatInputs.search, "mark_read": ChatInputs.mark_read,
    "create": ChatInputs.create, "logout": ChatInputs.logout, "position": ChatInputs.position,
    "positions": ChatInputs.positions, "unknown": ChatInputs.unknown, "malformed": ChatInputs.malformed,
}
"""A signed-in user's client frames, by kind (``hello`` is sent on a connection of its own, not signed in)."""

PEER_KINDS: dict[str, Callable[[ChatInputs, ChatHint], PeerDelivery | Missing | StatusChange]] = {
    "peer/message": ChatInputs.peer_message, "peer/definition": ChatInputs.peer_definition,
    "peer/roster": ChatInputs.peer_roster, "peer/receipts": ChatInputs.peer_receipts,
    "peer/barrier": ChatInputs.peer_barrier, "peer/definition_request": ChatInputs.peer_definition_request,
    "peer/acknowledgement": ChatInputs.peer_acknowledgement, "peer/gone": ChatInputs.peer_gone,
    "peer/unknown": ChatInputs.peer_unknown,
    "rcm/missing": ChatInputs.missing, "rcm/delivery": ChatInputs.delivery, "rcm/status": ChatInputs.status,
}
"""A hostile peer site's payloads (as RCM delivers them) and the RCM events it can cause, by kind."""

KINDS: dict[str, Callable[[ChatInputs, ChatHint], Any]] = {**CLIENT_KINDS, **PEER_KINDS}
"""Every chat input kind, by name."""
