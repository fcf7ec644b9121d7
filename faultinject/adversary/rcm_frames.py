"""Hostile inter-site frames, one generator per kind (``rcm.wire``, ``rcm.routing.relay``, ``rcm.repair.antientropy``).

Each generator builds a frame of its kind from a ``random.Random`` and a
``Hint`` (what the target site expects next, read from it: a fuzzer that only
ever sent wrong stream checks would test nothing past the first line). Fields
are good values, numbers at and around the bounds, or values of the wrong
type, in proportions that keep most frames plausible enough to reach deep
code. Frames are lists, encoded by the probe with ``rcm.wire.encode_frame``
(NaN and floats included; integers up to 2^64 - 1, what msgpack carries).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ordering import KEY_INT_MAX
from rcm import wire
from rcm.routing import relay

from .draws import Draws

MSGPACK_ODD: tuple[Any, ...] = (None, True, False, 1.5, math.nan, math.inf, -math.inf, "", "x" * 300, b"", b"\xff" * 64,
                        [], [[]], {}, {"p": 0}, {"p": 9, "h": 1}, [1, [2, [3, [4]]]])
"""Values of the wrong type for almost any field."""


@dataclass(frozen=True, slots=True)
class Hint:
    """What the target expects from the hostile peer next (read from its stack before each frame)."""

    check: int          # the stream check of the next reliable frame
    frontier: int       # the peer's stream, held up to here
    our_next: int       # the target's next link seq towards the peer (for acks)
    our_stream: int     # stream check of the target's stream (for relayed acks)
    peer_stream: int    # stream check of the peer's stream as the target holds it
    nsites: int
    clock: int          # the target's ordering clock
    ceiling: int        # ordering.honest_ceiling(now)


class Frames(Draws):
    """Draws hostile frames of one kind at a time (see the module docstring)."""

    ODD = MSGPACK_ODD
    WIDE = (0, 2**64)

    def seq_near(self, h: Hint, base: int) -> Any:
        """A sequence number near ``base``, near the ceiling, or hostile."""
        r = self.rng.random()
        if r < 0.5:
            return max(1, base + self.rng.randrange(-2, 4))
        if r < 0.6:
            return h.ceiling + self.rng.randrange(-1, 2)
        return self.num()

    def site(self, h: Hint) -> Any:
        return self.rng.randrange(h.nsites) if self.rng.random() < 0.85 else self.num()

    def payload(self) -> Any:
        r = self.rng.random()
        if r < 0.85:
            return self.rng.randbytes(self.rng.choice((0, 1, 16, 200, 2000, 20_000)))
        return self.odd()

    def ranges(self, h: Hint, most: int = 600) -> Any:
        """A range list: canonical and plausible, canonical and huge, or malformed."""
        rng = self.rng
        r = rng.random()
        if r < 0.1:
            return self.odd()
        n = most if r > 0.98 else rng.choice((1, 1, 2, 5, 50, 500))      # now and then a frame near the cap
        if r < 0.25:                    # malformed: unsorted, overlapping, inverted, bounds
            return [[self.num(), self.num()] for _ in range(n)]
        out: list[list[int]] = []
        lo = rng.choice((1, 1, max(1, h.frontier), h.ceiling - 10, KEY_INT_MAX - 2 * n - 10))
        for _ in range(n):
            width = rng.choice((0, 0, 3, 1000, 2**31, KEY_INT_MAX))
            hi = min(lo + width, KEY_INT_MAX if rng.random() < 0.5 else 2**64 - 1)
            out.append([lo, hi])
            lo = hi + 2
            if lo > 2**64 - 3:
                break
        return out

    def ack(self, h: Hint) -> list[Any]:
        """An optional trailing ack delta (and sometimes a forward list)."""
        r = self.rng.random()
        if r < 0.5:
            return []
        if r < 0.8:
            return [self.num(self.rng.randrange(0, 3))]
        return [self.num(), self.num()]

    def header(self, h: Hint) -> Any:
        """A Lamport header (a timestamp), a precedence map around one, or something else."""
        r = self.rng.random()
        ts = self.num(h.clock + 1) if r < 0.7 else self.num()
        if r < 0.6:
            return ts
        if r < 0.85:
            return {"p": self.rng.choice((0, 1, 2, 3, 4, -1, "flash")), "h": ts}
        return self.odd()

    def key(self) -> Any:
        r = self.rng.random()
        if r < 0.7:
            return [self.num(5), self.rng.choice(("A", "B", "C", "x" * 80, 7))]
        if r < 0.85:
            return [self.num() for _ in range(self.rng.choice((0, 1, 9, 100)))]
        return self.odd()

    # -- frames ---------------------------------------------------------------------------------
    def hello(self, h: Hint, mission: str, sites: list[str], claim: str) -> list[Any]:
        terms = ["lamport", "robust", sites, "relay", 3] if self.rng.random() < 0.8 else self.odd()
        return [wire.HELLO, self.num(wire.PROTOCOL_VERSION), mission if self.rng.random() < 0.9 else "other",
                claim, self.num(7), self.num(0), self.num(0), self.num(1), self.num(0), terms]

    def data(self, h: Hint) -> list[Any]:
        f = [wire.DATA, self.num(h.check), self.num(1), self.header(h), self.payload(), *self.ack(h)]
        if self.rng.random() < 0.15:
            f += [None] if len(f) == 5 else []
            f.append([self.site(h), self.seq_near(h, 1)] * self.rng.choice((1, 2)) if self.rng.random() < 0.8
                     else self.odd())
        return f

    def ctrl(self, h: Hint) -> list[Any]:
        return [wire.CTRL, self.num(h.check), self.num(h.clock), *self.ack(h)]

    def announce(self, h: Hint) -> list[Any]:
        return [wire.ANNOUNCE, self.num(self.rng.randrange(relay.GENERATIONS)), self.num(h.clock + 1), *self.ack(h)]

    def heartbeat(self, h: Hint) -> list[Any]:
        return [wire.HEARTBEAT, self.num(h.check), *self.ack(h)]

    def missed(self, h: Hint) -> list[Any]:
        return [wire.MISSED, self.num(h.check), self.ranges(h, most=60_000), *self.ack(h)]

    def bye(self, h: Hint) -> list[Any]:
        return [wire.BYE, self.rng.choice(("going", "x" * 5000, 7, None)), *([self.num()] if self.rng.random() < 0.3
                                                                             else [])]

    def sync(self, h: Hint) -> list[Any]:
        return [wire.SYNC, self.seq_near(h, h.frontier + 1), self.num(self.rng.randrange(relay.GENERATIONS))]

    def links(self, h: Hint) -> list[Any]:
        ns = [self.site(h) for _ in range(self.rng.choice((0, 1, 2, h.nsites, 50)))]
        return [wire.LINKS, self.site(h), self.num(1), self.num(self.rng.randrange(1, 100)), ns]

    def summary(self, h: Hint) -> list[Any]:
        held = [[self.site(h), self.ranges(h, most=600)] for _ in range(self.rng.choice((0, 1, 2, h.nsites + 1)))]
        return [wire.SUMMARY, self.num(h.check), [self.num(self.rng.choice((0, 1))), held], *self.ack(h)]

    def fetch(self, h: Hint) -> list[Any]:
        return [wire.FETCH, self.num(h.check), [self.site(h), self.ranges(h, most=300)], *self.ack(h)]

    def repair(self, h: Hint) -> list[Any]:
        body = [self.site(h), self.seq_near(h, 1), self.key(), self.payload()]
        if self.rng.random() < 0.3:
            body.append(self.num(1))
        return [wire.REPAIR, self.num(h.check), body if self.rng.random() < 0.9 else self.odd(),
                *self.ack(h)]

    def unknown(self, h: Hint) -> list[Any]:
        return [self.rng.choice((10, 14, 15, 127, 255, 2**31, -1, 2**64 - 1)), self.num(), self.num()]

    def routed(self, h: Hint, kind: int) -> list[Any]:
        """A ROUTED frame of ``kind`` "from" some site, to the target or to others through it."""
        rng = self.rng
        dests = [self.site(h), self.seq_near(h, h.frontier + 1)]
        if rng.random() < 0.3:
            dests += [self.site(h), self.seq_near(h, 1)]
        check = h.our_stream if kind == wire.ACK else h.peer_stream
        head = [wire.ROUTED, self.num(1), self.site(h), self.num(check), dests, kind]
        if kind == wire.DATA:
            body: list[Any] = [self.seq_near(h, 1), self.header(h), self.payload()]
        elif kind == wire.CTRL:
            body = [self.num(h.clock)]
        elif kind == wire.MISSED:
            body = [self.ranges(h, most=60_000)]
        elif kind == wire.ANNOUNCE:
            body = [self.num(1), self.num(rng.randrange(relay.GENERATIONS)), self.num(h.clock + 1)]
        elif kind == wire.SYNC:
            body = [self.num(7), self.num(1), self.num(rng.randrange(relay.GENERATIONS))]
        elif kind == wire.ACK:
            dests[1] = self.seq_near(h, h.our_next - 1)
            body = [self.num(0)] if rng.random() < 0.6 else [relay.GAP, self.seq_near(h, h.our_next)]
        elif kind == wire.SUMMARY:
            body = [self.summary(h)[2]]
        elif kind == wire.FETCH:
            body = [self.fetch(h)[2]]
        else:
            body = [self.repair(h)[2]]
        if rng.random() < 0.1:
            body = body[:-1] if rng.random() < 0.5 else [*body, self.num()]
        return head + body


ROUTED_KINDS = {f"ROUTED/{wire.FRAME_NAMES[k]}": k for k in (wire.DATA, wire.CTRL, wire.MISSED, wire.ANNOUNCE,
                                                             wire.SYNC, wire.ACK, wire.SUMMARY, wire.FETCH,
                                                             wire.REPAIR)}

def _routed(kind: int) -> Callable[[Frames, Hint], list[Any]]:
    def draw(frames: Frames, hint: Hint) -> list[Any]:
        return frames.routed(hint, kind)
    return draw


KINDS: dict[str, Callable[[Frames, Hint], list[Any]]] = {
    "DATA": Frames.data, "CTRL": Frames.ctrl, "ANNOUNCE": Frames.announce, "HEARTBEAT": Frames.heartbeat,
    "MISSED": Frames.missed, "BYE": Frames.bye, "SYNC": Frames.sync, "LINKS": Frames.links,
    "SUMMARY": Frames.summary, "FETCH": Frames.fetch, "REPAIR": Frames.repair, "UNKNOWN": Frames.unknown,
    **{name: _routed(k) for name, k in ROUTED_KINDS.items()},
}
"""Every frame kind after the handshake, by name (HELLO, before it, is the probe's own case)."""
