"""Hostile inter-site frames, one generator per kind (``rcm.wire``, ``rcm.routing.relay``, ``rcm.repair.frames``,
``rcm.wire.latest``, ``rcm.channels.fragments``).

Each generator builds a frame of its kind from a ``random.Random`` and a
``Hint`` (what the target site expects next, read from it: a fuzzer that only
ever sent wrong stream checks would test nothing past the first line). Fields
are good values, numbers at and around the bounds, or values of the wrong
type, in proportions that keep most frames plausible enough to reach deep
code. Frames are lists, encoded by the probe with ``rcm.wire.encode_frame``
(NaN and floats included; integers up to 2^64 - 1, what msgpack carries).

LATEST frames (latest wins, outside the reliable stream) carry times: the
probe's clock starts at ``measure.START`` and moves 0.5 ms a frame, so an
honest-looking report has a version just past ``START`` in microseconds
(growing, as a publishing site's does) and expires some minutes after it.
Their keys mostly come from a few units (reports supersede each other), now
and then from a large space (the table's eviction at its caps).
"""
from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgpack

from ordering import KEY_INT_MAX
from rcm import wire
from rcm.routing import relay
from rcm.wire import latest

from .draws import Draws
from .measure import START

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

    def __init__(self, rng: random.Random) -> None:
        super().__init__(rng)
        self.version = int(START * 1e6)         # the last honest LATEST version drawn (they grow)

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
        """A Lamport header (a timestamp), a wrapper around one (precedence, expiry, stub mark:
        ``rcm.wire.envelope``), or something else."""
        r = self.rng.random()
        ts = self.num(h.clock + 1) if r < 0.7 else self.num()
        if r < 0.5:
            return ts
        if r < 0.65:
            return {"p": self.rng.choice((0, 1, 2, 3, 4, -1, "flash")), "h": ts}
        if r < 0.85:
            return self.expiry_wrapper(ts)
        return self.odd()

    def message_expiry(self) -> Any:
        """A message's expires_at: honest (past, near, far), at and past the bounds, not finite, not a number."""
        rng = self.rng
        r = rng.random()
        if r < 0.5:
            return START + rng.choice((-30.0, -0.5, 0.0, 0.25, 5.0, 600.0, 86400.0))
        if r < 0.6:
            return int(START) + rng.choice((-10, 0, 60))          # an int: integral expiries go as ints
        if r < 0.8:
            return rng.choice((math.nan, math.inf, -math.inf, -1.0, 0.0, float(2 ** 34), float(2 ** 34) + 1.0,
                               1.7e308, 5e-324, 2 ** 64 - 1, -(2 ** 63)))
        return self.odd()

    def expiry_wrapper(self, ts: Any) -> dict[str, Any]:
        """A header wrapper with an expiry and maybe the stub mark (honest or not), around ``ts``."""
        rng = self.rng
        w: dict[str, Any] = {}
        if rng.random() < 0.4:
            w["p"] = rng.choice((0, 1, 2, 3, 4))
        if rng.random() < 0.9:
            w["x"] = self.message_expiry()
        if rng.random() < 0.35:
            w["e"] = rng.choice((1, 1, 1, 0, 2, True, "1"))
        if rng.random() < 0.05:
            w["q"] = 1
        w["h"] = ts
        return w

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
        header = self.header(h)
        # A stub (e: 1) carries no payload when honest; a hostile one carries one.
        stub = isinstance(header, dict) and "e" in header and self.rng.random() < 0.6
        f = [wire.DATA, self.num(h.check), self.num(1), header, b"" if stub else self.payload(), *self.ack(h)]
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
        r = self.rng.random()
        if r < 0.3:
            body.append(self.num(1))
        elif r < 0.55:          # an expiry, maybe a stub ([.., rank, expires_at, 1]: no payload when honest)
            body += [self.num(3), self.message_expiry()]
            if self.rng.random() < 0.5:
                body.append(self.rng.choice((1, 1, 0, 2, True)))
                if self.rng.random() < 0.6:
                    body[3] = b""
            if self.rng.random() < 0.05:
                body.append(1)
        return [wire.REPAIR, self.num(h.check), body if self.rng.random() < 0.9 else self.odd(),
                *self.ack(h)]

    def latest(self, h: Hint) -> list[Any]:
        """A LATEST frame: an honest-looking report (a unit's next one, a stale or duplicate one), or one
        with fields at, past and around every bound of ``rcm.wire.latest``, of the wrong type, or too
        few or too many of them."""
        rng = self.rng
        if rng.random() < 0.4:
            f = [wire.LATEST, rng.randrange(h.nsites), rng.randrange(3), self.unit_key(), self.latest_version(),
                 START + rng.uniform(60.0, 1800.0), rng.randbytes(rng.choice((36, 36, 0, 200, latest.MAX_PAYLOAD)))]
        else:
            f = [wire.LATEST, self.site(h), self.hops(), self.latest_key(), self.latest_version(),
                 self.expires_at(), self.latest_payload()]
        r = rng.random()
        if r < 0.05:
            return f[:rng.randrange(1, 7)]
        if r < 0.1:
            return [*f, *(self.num() for _ in range(rng.choice((1, 2, 50))))]
        return f

    def unit_key(self) -> bytes:
        """A key of one of a few units (their reports supersede each other)."""
        return b"unit-%d" % self.rng.randrange(8)

    def hops(self) -> Any:
        r = self.rng.random()
        if r < 0.7:
            return self.rng.randrange(3)                # below max_hops = 3
        if r < 0.85:
            return self.rng.choice((3, 4, 127, -1))     # at and past it
        return self.num()

    def latest_key(self) -> Any:
        rng = self.rng
        r = rng.random()
        if r < 0.45:
            return self.unit_key()
        if r < 0.65:
            return b"k%d" % rng.randrange(50_000)      # many keys: the caps, eviction
        if r < 0.75:
            return rng.randbytes(rng.randrange(1, latest.MAX_KEY + 1))
        if r < 0.9:
            return rng.randbytes(rng.choice((0, 1, latest.MAX_KEY, latest.MAX_KEY + 1, 1000)))
        return self.maybe("unit-1", 0.6)               # a str, or anything

    def latest_version(self) -> Any:
        rng = self.rng
        r = rng.random()
        if r < 0.55:
            self.version += rng.randrange(1, 1000)      # about the probe clock's 0.5 ms a frame
            return self.version
        if r < 0.7:
            return self.version - rng.choice((0, 0, 1, 10**6))     # a duplicate, a stale one
        if r < 0.8:                                                # from a clock ahead: at and past the bound
            return int((START + latest.MAX_TTL) * 1e6) + rng.choice((0, 10**6, 10**9, 10**12))
        if r < 0.85:
            return rng.choice((0, 1, latest.VERSION_MAX, latest.VERSION_MAX + 1, 2**64 - 1, -1))
        return self.num(self.version)

    def expires_at(self) -> Any:
        rng = self.rng
        r = rng.random()
        if r < 0.6:
            return START + rng.uniform(60.0, 1800.0)
        if r < 0.75:
            return START + rng.choice((-1.0, 0.0, 0.001, latest.MAX_TTL, latest.MAX_TTL + 1.0, 1e9))
        if r < 0.85:
            return rng.choice((math.nan, math.inf, -math.inf, 0.0, -1.0, 1.7e308, 5e-324))
        if r < 0.92:
            return int(START) + 600                     # an int: the frame's is a float
        return self.odd()

    def latest_payload(self) -> Any:
        rng = self.rng
        r = rng.random()
        if r < 0.6:
            return rng.randbytes(36)                    # a position report's size
        if r < 0.85:
            return rng.randbytes(rng.choice((0, 1, latest.MAX_PAYLOAD - 1, latest.MAX_PAYLOAD,
                                             latest.MAX_PAYLOAD + 1, 2000, 20_000)))
        return self.payload()

    def unknown(self, h: Hint) -> list[Any]:
        return [self.rng.choice((10, 16, 127, 255, 2**31, -1, 2**64 - 1)), self.num(), self.num()]

    def frag(self, h: Hint) -> list[Any]:
        """A FRAG piece (``rcm.channels.fragments``): of a plausible frame's inner encoding (a DATA, a CTRL, a
        repair frame) at its offset, the last one with the stream check; or with a lane, offset, piece or
        check out of bounds, an offset that skips or overlaps, pieces past the frame limit, an inner frame
        that is not a reliable one (a nested FRAG, a HEARTBEAT) or not msgpack."""
        rng = self.rng
        r = rng.random()
        if r < 0.5:
            inner = [wire.DATA, self.seq_near(h, 1), self.header(h), self.payload()]
        elif r < 0.65:
            inner = [wire.CTRL, self.num(h.clock)]
        elif r < 0.75:
            inner = [wire.REPAIR, self.repair(h)[2]]
        elif r < 0.85:
            inner = [rng.choice((wire.FRAG, wire.HEARTBEAT, wire.LATEST, wire.ROUTED)), self.num(), b"x"]
        else:
            inner = self.odd()
        data: bytes = (msgpack.packb(inner, use_bin_type=True) if rng.random() < 0.95
                       else rng.randbytes(rng.choice((1, 7, 300))))
        cut = rng.randrange(len(data) + 1)
        offset: Any = 0 if rng.random() < 0.6 else rng.choice((cut, len(data), 1, 1 << 20, (1 << 20) - 1,
                                                               (1 << 20) + 1, 2**64 - 1, -1))
        chunk: Any = data[cut:] if offset else data
        if rng.random() < 0.1:
            chunk = rng.choice((b"", b"x" * 70_000, "text", None, [1]))
        lane = self.num(rng.randrange(3)) if rng.random() < 0.9 else self.odd()
        f: list[Any] = [wire.FRAG, lane, offset, chunk]
        if rng.random() < 0.6:
            f += [self.num(h.check), *self.ack(h)][:2]
        return f

    def routed(self, h: Hint, kind: int) -> list[Any]:
        """A ROUTED frame of ``kind`` "from" some site, to the target or to others through it."""
        rng = self.rng
        dests = [self.site(h), self.seq_near(h, h.frontier + 1)]
        if rng.random() < 0.3:
            dests += [self.site(h), self.seq_near(h, 1)]
        several = kind == wire.ACK and rng.random() < 0.5   # an ACK naming a stream check in each entry
        check = relay.SEVERAL_CHECKS if several else h.our_stream if kind == wire.ACK else h.peer_stream
        head = [wire.ROUTED, self.num(1), self.site(h), self.num(check), dests, kind]
        if kind == wire.DATA:
            body: list[Any] = [self.seq_near(h, 1), self.header(h), self.payload()]
        elif kind == wire.CTRL:
            body = [self.num(h.clock)]
        elif kind == wire.MISSED:
            body = [self.ranges(h, most=60_000)]
        elif kind == wire.ANNOUNCE:     # three per destination: [dest, after, generation, ...]
            dests[:] = [x for i in range(0, len(dests), 2)
                        for x in (*dests[i:i + 2], self.num(rng.randrange(relay.GENERATIONS)))]
            body = [self.num(1), self.num(h.clock + 1)]
        elif kind == wire.SYNC:
            body = [self.num(7), self.num(1), self.num(rng.randrange(relay.GENERATIONS))]
        elif kind == wire.ACK:          # three per destination: [dest, frontier, stream check, ...]
            dests[1] = self.seq_near(h, h.our_next - 1)
            if several:
                dests[:] = [x for i in range(0, len(dests), 2) for x in (*dests[i:i + 2], self.num(h.our_stream))]
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
    "SUMMARY": Frames.summary, "FETCH": Frames.fetch, "REPAIR": Frames.repair, "LATEST": Frames.latest,
    "FRAG": Frames.frag, "UNKNOWN": Frames.unknown,
    **{name: _routed(k) for name, k in ROUTED_KINDS.items()},
}
"""Every frame kind after the handshake, by name (HELLO, before it, is the probe's own case)."""
