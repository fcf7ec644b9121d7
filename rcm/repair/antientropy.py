"""Anti-entropy: fetch what this site was told it missed from any site that holds it (sans-IO).

Theory of operation (docs/rcm.md, Repair, has the long form and a worked example)
-------------------------------------------------------------------------------
A site learns that it missed messages from a MISSED notice of their origin
(the origin skipped it while it was disconnected). Those ranges become its
*wants*. Every site keeps what it delivered for ``retention`` seconds
(``rcm.repair.retention``): the origin holds its own messages, and so does every
other destination that got them.

Three reliable frames of the channel carry the exchange (``rcm.repair.frames``:
what each holds, and how it is read and checked): ``SUMMARY`` (what the
sender holds), ``FETCH`` (send me these) and ``REPAIR`` (one retained
message, or the stub of an expired one). A site with wants sends a SUMMARY
with ``reply = 1`` to each peer when the peer becomes connected, when its
wants grow, and every ``repair_period`` while they last; the peer answers
with its own (``reply = 0``, never answered). The requester plans from the
summaries: each wanted range goes to one holder, the origin first, else the
connected peer that holds it with the least outstanding, and is asked again
elsewhere if nothing came from that holder for ``repair_period``.

A holder serves requests at most ``repair_rate`` bytes per second per peer
(a token bucket of one second) and only while that peer's channel has fewer
unacknowledged frames than ``window`` (``SERVE_WINDOW``, or about a second of
``repair_rate`` in frames if more): repair goes out in the gaps of live
traffic and never queues far ahead of it. A request for a confined message
(``rcm.wire.envelope``) from a site outside its confinement is answered as
not held (counted: ``confined_refused``), never with content; its REPAIR
carries the mask, so the channel and relays confine it too. (Summaries name
it like any message held: its number, never its content. An honest site
never asks for it: it wants only what its origin told it it missed, which
was addressed to it. Leaving it out of the summaries would cut a summary's
ranges into one per message around every confined one, past the frame cap.) What it was asked for but no
longer holds (retention passed) it answers with a fresh summary, so the
requester turns elsewhere.

A received REPAIR is delivered only if it is still wanted (``Repaired``);
a copy from a second holder, or one after a restart, finds it no longer
wanted and is dropped: exactly once. Wants leave when the message is
delivered, by repair or otherwise; they are logged (``Wanted`` records in a
compacted log, MISSED and ``Delivered`` records in the live one).

Bounds: every frame is checked before anything changes (``rcm.repair.frames``).
Serving work is bounded per frame and per peer: a
request is cut to what this site holds when it arrives (range arithmetic, never
a walk over numbers), at most ``SERVE_QUEUE`` requests wait per peer (more are
dropped: the requester asks again), each message served or skipped costs tokens
of the peer's bucket, and the summary that tells a requester to look elsewhere
goes at most once per ``period``. At most ``WANT_RANGES`` wanted ranges per
origin are kept (past that the oldest are given up, and counted).
"""
from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ordering import honest_ceiling
from rcm import ranges, wire
from rcm.repair.frames import (
    FETCH_MESSAGES,
    FETCH_RANGES,
    SUMMARY_RANGES,
    Repaired,
    RepairError,
    parse_fetch,
    parse_repair,
    parse_summary,
    repair_body,
)
from rcm.repair.retention import Retention
from rcm.wire import envelope

SERVE_QUEUE = 64            # most FETCH requests waiting to be served per peer
SERVE_WINDOW = 8            # serve only while the peer's channel has fewer unacknowledged frames than
WINDOW_FRAME = 512          # ... this, or one per WINDOW_FRAME bytes of repair_rate if more (one second's worth)
WANT_RANGES = 4096          # most wanted ranges per origin
REPAIR_OVERHEAD = 40        # bytes a REPAIR frame costs beyond its payload (for the rate)


@dataclass(frozen=True, slots=True)
class Offer:
    """Put a repair frame (``kind``, ``body``) in ``peer``'s channel."""

    peer: str
    kind: int
    body: list[Any]


@dataclass(slots=True)
class _Asked:
    """What we asked one peer for and has not come yet, and until when we wait for it."""

    wanted: dict[str, list[list[int]]] = field(default_factory=dict)
    until: float = 0.0


@dataclass(slots=True)
class _Serving:
    """Requests from one peer, and its token bucket."""

    queue: deque[tuple[str, list[list[int]]]] = field(default_factory=deque)
    unheld: bool = False        # something asked for is not held any more: answer with a summary
    tokens: float = 0.0
    at: float = 0.0
    blocked: bool = False       # the next message is confined and no way within its sites reaches the peer


# -- the state machine ---------------------------------------------------------------------------
class Repair:
    """One site's repair state: its wants, peers' holdings, requests both ways (module docstring)."""

    def __init__(self, site: str, sites: Sequence[str], retention: Retention, period: float, rate: int,
                 max_payload: int, now: float) -> None:
        self.site = site
        self.sites = sorted(sites)
        self.index = {s: i for i, s in enumerate(self.sites)}
        self.retention = retention
        self.period = period
        self.rate = rate
        self.max_payload = max_payload
        self.window = max(SERVE_WINDOW, rate // WINDOW_FRAME)
        self.wants: dict[str, list[list[int]]] = {}
        self.holdings: dict[str, dict[str, list[list[int]]]] = {}     # peer -> its last summary
        self.asked: dict[str, _Asked] = {}
        self.serving: dict[str, _Serving] = {}
        self.unheld_told: dict[str, float] = {}     # peer -> when we last told it (a summary) what we lack
        self.connected: set[str] = set()
        self.summary_due: float | None = None
        self.counters = {"repaired": 0, "duplicates": 0, "served": 0, "served_bytes": 0, "fetches": 0,
                         "summaries_out": 0, "summaries_in": 0, "unheld": 0, "given_up": 0, "stalls": 0,
                         "confined_refused": 0, "confined_unreachable": 0}

    # -- events ------------------------------------------------------------------------------
    def missing(self, origin: str, missed: list[list[int]], now: float) -> list[Offer]:
        """``origin`` told us it skipped ``missed``: want them (but what we already hold)."""
        held = self.retention.held.get(origin, [])
        new = ranges.subtract(missed, held) if held else [list(r) for r in missed]
        if not new or origin == self.site:
            return []
        self._want(origin, new)
        # Peers we know nothing of are asked; if the others' last summaries do not cover it all, them too.
        out = self._ask_all(now, only_unknown=True)
        if self._unplanned():
            known = [p for p in sorted(self.connected) if p in self.holdings]
            out += [self._summary(p, reply=True) for p in known]
        return out

    def restore_wants(self, origin: str, wanted: list[list[int]]) -> None:
        """Recovery: wants read back from the log."""
        if origin != self.site and wanted:
            self._want(origin, wanted)

    def delivered(self, origin: str, seq: int) -> None:
        """``origin:seq`` was delivered here (any way): not wanted any more."""
        w = self.wants.get(origin)
        if w and ranges.discard(w, seq) and not w:
            del self.wants[origin]

    def status(self, peer: str, connected: bool, now: float) -> list[Offer]:
        """``peer`` became connected (ask what it holds, if we want anything) or left connected."""
        if not connected:
            self.connected.discard(peer)
            self.holdings.pop(peer, None)
            self.asked.pop(peer, None)
            self.serving.pop(peer, None)
            self.unheld_told.pop(peer, None)
            return []
        if peer in self.connected:
            return []
        self.connected.add(peer)
        return [self._summary(peer, reply=True)] if self.wants else []

    def frame(self, peer: str, kind: int, body: Any, now: float) -> tuple[list[Offer], Repaired | None]:
        """A repair frame's body from ``peer``, parsed here (``parse_*`` raise ``RepairError`` before anything
        changes), then taken (``take``)."""
        ceiling = honest_ceiling(now)
        if kind == wire.SUMMARY:
            return self.take(peer, (kind, parse_summary(body, self.sites, ceiling)), now)
        if kind == wire.FETCH:
            return self.take(peer, (kind, parse_fetch(body, self.sites, ceiling)), now)
        if kind == wire.REPAIR:
            return self.take(peer, (kind, parse_repair(body, self.sites, self.max_payload, ceiling)), now)
        raise RepairError(f"not a repair frame: {kind!r}")

    def take(self, peer: str, parsed: tuple[int, Any], now: float) -> tuple[list[Offer], Repaired | None]:
        """A parsed repair frame from ``peer`` (``rcm.stack.frames`` decodes them once): what to send, and the
        message to deliver if it was a REPAIR still wanted here."""
        kind, body = parsed
        if kind == wire.SUMMARY:
            reply, held = body
            self.counters["summaries_in"] += 1
            self.holdings[peer] = held
            out = [self._summary(peer, reply=False)] if reply else []
            return out + self._plan(now), None
        if kind == wire.FETCH:
            origin, wanted = body
            s = self.serving.setdefault(peer, _Serving(tokens=float(self.rate), at=now))
            # Cut to what we hold now, by range arithmetic: what is not held costs no walk.
            have = ranges.intersect(wanted, self.retention.held.get(origin, []))
            unheld = ranges.count(wanted) - ranges.count(have)
            if unheld:
                s.unheld = True
                self.counters["unheld"] += unheld
            if have and len(s.queue) < SERVE_QUEUE:
                s.queue.append((origin, have))
            return [], None
        got: Repaired = body
        asked = self.asked.get(peer)
        if asked is not None:
            asked.until = now + self.period         # progress: wait on for the rest
            w = asked.wanted.get(got.origin)
            if w is not None:
                ranges.discard(w, got.seq)
                if not w:
                    del asked.wanted[got.origin]
            if not asked.wanted:
                del self.asked[peer]
        w = self.wants.get(got.origin)
        if w is None or not ranges.contains(w, got.seq):
            self.counters["duplicates"] += 1
            return self._plan(now) if asked is not None and peer not in self.asked else [], None
        self.delivered(got.origin, got.seq)
        self.counters["repaired"] += 1
        return (self._plan(now) if peer not in self.asked else []), got

    def tick(self, now: float) -> list[Offer]:
        """Periodic summaries while something is wanted, and requests that stalled."""
        out: list[Offer] = []
        stalled = [p for p, a in self.asked.items() if now >= a.until]
        for p in stalled:
            del self.asked[p]
            self.counters["stalls"] += 1
        if self.wants and (self.summary_due is None or now >= self.summary_due):
            out += self._ask_all(now, only_unknown=False)
        elif stalled:
            out += self._plan(now)
        if not self.wants:
            self.summary_due = None
        return out

    def serve(self, now: float, backlog: dict[str, int],
              open_within: Callable[[str, int], bool] | None = None) -> list[Offer]:
        """REPAIR frames for what peers asked, within each one's rate and window (``backlog``: unacked frames).
        A confined message is served only while ``open_within(peer, mask)`` (a way within its sites now);
        until then the peer's requests wait here, and go as soon as one does."""
        out: list[Offer] = []
        for peer, s in list(self.serving.items()):
            s.tokens = min(float(self.rate), s.tokens + (now - s.at) * self.rate)
            s.at = now
            while s.queue and s.tokens > 0 and backlog.get(peer, 0) < self.window:
                origin, todo = s.queue[0]
                seq = todo[0][0]
                h = self.retention.get(origin, seq)
                if (h is not None and h.reach is not None and open_within is not None
                        and envelope.in_reach(h.reach, self.index[peer]) and not open_within(peer, h.reach)):
                    # Confined, and no way within its sites reaches the requester now: the request waits
                    # here (every batch looks again), and goes the moment one does; the requester may ask
                    # another holder meanwhile (a second copy is dropped there: exactly once).
                    if not s.blocked:
                        s.blocked = True
                        self.counters["confined_unreachable"] += 1
                    break
                s.blocked = False
                ranges.discard(todo, seq)
                if not todo:
                    s.queue.popleft()
                if h is not None and not envelope.in_reach(h.reach, self.index[peer]):
                    # Confined away from the requester (it never heard of it from us: a forged or stale
                    # FETCH): answered as not held, never with content.
                    self.counters["confined_refused"] += 1
                    h = None
                if h is None:           # held when asked, expired since: a skip costs like a small frame
                    s.unheld = True
                    self.counters["unheld"] += 1
                    s.tokens -= REPAIR_OVERHEAD
                    continue
                if h.expires_at is not None and not h.expired and h.expires_at <= now:
                    h = self.retention.strip(origin, seq)       # served after its expiry: a stub
                body = repair_body(self.index[origin], seq, h.key, h.payload, h.precedence, h.expires_at, h.expired,
                                   h.reach)
                out.append(Offer(peer, wire.REPAIR, body))
                backlog[peer] = backlog.get(peer, 0) + 1
                cost = len(body[3]) + REPAIR_OVERHEAD
                s.tokens -= cost
                self.counters["served"] += 1
                self.counters["served_bytes"] += cost
            if not s.queue and s.unheld and now >= self.unheld_told.get(peer, float("-inf")) + self.period:
                s.unheld = False
                self.unheld_told[peer] = now
                out.append(self._summary(peer, reply=False))
            if not s.queue and not s.unheld:
                del self.serving[peer]
        return out

    def next_deadline(self) -> float | None:
        ds = [a.until for a in self.asked.values()]
        if self.wants and self.summary_due is not None:
            ds.append(self.summary_due)
        for s in self.serving.values():
            if s.queue and s.tokens <= 0:
                ds.append(s.at + (1.0 - s.tokens) / self.rate)
        for peer, s in self.serving.items():
            told = self.unheld_told.get(peer)
            if not s.queue and s.unheld and told is not None:
                ds.append(told + self.period)
        return min(ds) if ds else None

    def serving_any(self) -> bool:
        return bool(self.serving)

    def wanted_count(self) -> int:
        return sum(ranges.count(w) for w in self.wants.values())

    def stats(self) -> dict[str, Any]:
        return {**self.counters, "wanted": self.wanted_count(),
                "asked": sum(ranges.count(w) for a in self.asked.values() for w in a.wanted.values()),
                "serving": sum(ranges.count(r) for s in self.serving.values() for _, r in s.queue)}

    # -- internals ---------------------------------------------------------------------------
    def _want(self, origin: str, new: list[list[int]]) -> None:
        merged = ranges.normalize([*self.wants.get(origin, []), *new])
        if len(merged) > WANT_RANGES:
            dropped = merged[:len(merged) - WANT_RANGES]
            self.counters["given_up"] += ranges.count(dropped)
            merged = merged[len(merged) - WANT_RANGES:]
        self.wants[origin] = merged

    def _summary(self, peer: str, reply: bool) -> Offer:
        held = self.retention.holdings()
        body = [[self.index[o], rs[-SUMMARY_RANGES:]] for o, rs in sorted(held.items())]
        self.counters["summaries_out"] += 1
        return Offer(peer, wire.SUMMARY, [1 if reply else 0, body])

    def _ask_all(self, now: float, only_unknown: bool) -> list[Offer]:
        """Ask connected peers for their summaries (and plan with those we know)."""
        self.summary_due = now + self.period
        out = [self._summary(p, reply=True) for p in sorted(self.connected)
               if not only_unknown or p not in self.holdings]
        return out + self._plan(now)

    def _plan(self, now: float) -> list[Offer]:
        """FETCH each wanted range not asked for yet from one connected peer that holds it."""
        out: list[Offer] = []
        for origin in sorted(self.wants):
            todo = self.wants[origin]
            for a in self.asked.values():
                if origin in a.wanted:
                    todo = ranges.subtract(todo, a.wanted[origin])
            if not todo:
                continue
            peers = sorted((p for p in self.connected if origin in self.holdings.get(p, {})),
                           key=lambda p: (p != origin, self._load(p), p))
            for p in peers:
                room = FETCH_MESSAGES - self._load(p)
                if room <= 0:
                    continue
                got = _first(ranges.intersect(todo, self.holdings[p][origin]), room, FETCH_RANGES)
                if not got:
                    continue
                a = self.asked.setdefault(p, _Asked())
                a.wanted[origin] = ranges.normalize([*a.wanted.get(origin, []), *got])
                a.until = now + self.period
                todo = ranges.subtract(todo, got)
                out.append(Offer(p, wire.FETCH, [self.index[origin], got]))
                self.counters["fetches"] += 1
                if not todo:
                    break
        return out

    def _unplanned(self) -> bool:
        """Is something wanted that no request covers?"""
        for origin, w in self.wants.items():
            todo = w
            for a in self.asked.values():
                if origin in a.wanted:
                    todo = ranges.subtract(todo, a.wanted[origin])
            if todo:
                return True
        return False

    def _load(self, peer: str) -> int:
        a = self.asked.get(peer)
        return sum(ranges.count(w) for w in a.wanted.values()) if a else 0


def _first(rs: list[list[int]], most: int, most_ranges: int) -> list[list[int]]:
    """The first ``most`` numbers of a range list, in at most ``most_ranges`` ranges."""
    out: list[list[int]] = []
    for first, last in rs[:most_ranges]:
        if most <= 0:
            break
        take = min(last, first + most - 1)
        out.append([first, take])
        most -= take - first + 1
    return out
