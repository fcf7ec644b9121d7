"""The latest-wins table of one site, its dirty sets, its bounds and the LATEST frame (sans-IO).

Theory of operation (docs/rcm.md, "Latest wins (positions)")
-----------------------------------------------------------
Ordinary RCM messages are numbered, buffered until acknowledged, resent,
repaired and globally ordered. A position report needs none of that: for each
``(origin site, key)`` only the newest report matters, an older one still
waiting for a slow link is worth nothing, and every report expires. So this
table keeps one ``Entry`` per ``(origin, key)``:

* a local ``publish`` gives the report ``version = max(previous + 1,
  int(now * 1e6))`` (it grows across restarts as long as the clock does);
* a received entry is kept only if its version is newer than the one held and
  it has not expired; anything else is dropped and counted (never the peer's
  fault: a late or duplicate report is normal on a flooded mesh);
* a kept entry (own or received) is marked *dirty* for each neighbour that
  should get it: with ``relaying`` every other connected neighbour (not the one
  it came from, not its origin, not one the link-state says the origin reaches
  directly) while ``hops + 1 < max_hops``; without, only the origin's own
  entries, to its direct neighbours;
* each neighbour's dirty set is insertion-ordered (the oldest change goes
  first; a key changed again keeps its place) and holds keys, not values:
  ``take`` builds the frame from the entry held *now*, so a superseded report
  still waiting for a slow link is never written;
* a neighbour whose connection (re)opens (a new session) gets every live entry
  it should have marked dirty (``session_opened``): a site that was cut off is
  brought up to date with the newest report of each key only;
* expired entries are never delivered nor written (``take`` and ``live`` skip
  them) and are dropped from memory by ``expire``.

``hops`` counts the relays an entry crossed: 0 for a site's own entries and
for those received from their origin; a relay writes ``hops + 1``.

Bounds (``rcm.wire.latest``: ``MAX_KEY``, ``MAX_PAYLOAD``, ``MAX_TTL``, ``MAX_PER_ORIGIN``,
``MAX_ENTRIES``): past an origin's or the table's cap the least recently
updated entry (of that origin, or of all) is evicted. A received entry whose
``expires_at`` is further than ``MAX_TTL`` ahead is clamped to it (a peer's
clock may run ahead); one whose version is beyond what an honest clock can
have given by now (``now + MAX_TTL``, in microseconds) is dropped and counted,
so a forged far-future version cannot freeze a key. A LATEST frame whose bytes
are wrong (types, sizes, a site index, hops past ``max_hops``) is a
``LatestError`` (``rcm.wire.latest.parse_frame``): the stack treats it as the
peer's protocol violation.

Nothing here is durable: entries live in memory only (reports expire; a
restarted site is brought up to date by its neighbours' ``session_opened``).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from rcm.wire.latest import MAX_ENTRIES, MAX_PER_ORIGIN, MAX_TTL, Entry, check_report

SWEEP_PERIOD = 1.0
"""Seconds between two sweeps of expired entries (``expire``)."""

Slot = tuple[str, bytes]       # (origin, key)


class LatestTable:
    """One site's latest-wins entries and its neighbours' dirty sets (see the module docstring)."""

    def __init__(self, site: str, relaying: bool, max_hops: int, per_origin: int = MAX_PER_ORIGIN,
                 total: int = MAX_ENTRIES) -> None:
        self.site = site
        self.relaying = relaying
        self.max_hops = max_hops
        self.per_origin = per_origin
        self.total = total
        self.entries: dict[Slot, Entry] = {}            # least recently updated first
        self.by_origin: dict[str, dict[bytes, None]] = {}  # per origin, least recently updated first
        self.dirty: dict[str, dict[Slot, None]] = {}       # neighbour -> slots to write, oldest change first
        self.swept_at = float("-inf")
        self.counters = {"published": 0, "received": 0, "kept": 0, "stale": 0, "expired": 0,
                         "future": 0, "evicted": 0, "written": 0}

    # -- reports in ------------------------------------------------------------------------------
    def publish(self, key: bytes, payload: bytes, expires_at: float, now: float,
                neighbours: Iterable[str]) -> Entry | None:
        """A report of this site: held, and dirty for ``neighbours`` (the connected ones). None when it has
        expired already (dropped, counted); ``LatestError`` when out of bounds; ``expires_at`` is clamped
        to ``now + MAX_TTL``."""
        check_report(key, payload, expires_at)
        self.counters["published"] += 1
        if expires_at <= now:
            self.counters["expired"] += 1
            return None
        held = self.entries.get((self.site, key))
        version = max(held.version + 1 if held is not None else 1, int(now * 1e6))
        e = Entry(self.site, key, version, min(float(expires_at), now + MAX_TTL), 0, bytes(payload))
        self._hold(e)
        self._mark(e, neighbours)
        return e

    def received(self, came_from: str, e: Entry, now: float, neighbours: Iterable[str],
                 linked: Callable[[str, str], bool]) -> Entry | None:
        """An entry from neighbour ``came_from``: the entry kept (to deliver), or None if it was not newer,
        expired, from the future or our own. ``linked(a, b)``: the link-state shows a direct link a-b."""
        self.counters["received"] += 1
        if e.origin == self.site:
            self.counters["stale"] += 1             # our own, back by some path: we hold the newest
            return None
        if e.expires_at <= now:
            self.counters["expired"] += 1
            return None
        if e.version > (now + MAX_TTL) * 1e6:
            self.counters["future"] += 1
            return None
        held = self.entries.get((e.origin, e.key))
        if held is not None and held.version >= e.version and held.expires_at > now:
            self.counters["stale"] += 1
            return None
        if e.expires_at > now + MAX_TTL:
            e = Entry(e.origin, e.key, e.version, now + MAX_TTL, e.hops, e.payload)
        self.counters["kept"] += 1
        self._hold(e)
        if self.forwards(e):
            self._mark(e, (n for n in neighbours if n != came_from and not linked(e.origin, n)))
        return e

    def forwards(self, e: Entry) -> bool:
        """Does this site write ``e`` on to its neighbours? Its own, always; others only when relaying and
        one more relay stays within ``max_hops``."""
        return e.origin == self.site or (self.relaying and e.hops + 1 < self.max_hops)

    def session_opened(self, neighbour: str, now: float) -> None:
        """``neighbour``'s connection (re)opened: every live entry it should have is dirty for it."""
        d = self.dirty.setdefault(neighbour, {})
        for slot, e in self.entries.items():
            if e.expires_at > now and e.origin != neighbour and self.forwards(e):
                d[slot] = None

    # -- reports out -------------------------------------------------------------------------------
    def waiting(self, neighbour: str) -> bool:
        """Has ``neighbour`` dirty slots (some may have expired since: ``take`` skips them)?"""
        return bool(self.dirty.get(neighbour))

    def waiting_neighbours(self) -> list[str]:
        return [n for n, d in self.dirty.items() if d]

    def take(self, neighbour: str, now: float) -> tuple[Entry, int] | None:
        """The next entry to write to ``neighbour`` (as held now) and the hops its frame carries; it leaves
        the dirty set. None when nothing live is dirty."""
        d = self.dirty.get(neighbour)
        while d:
            slot = next(iter(d))
            del d[slot]
            e = self.entries.get(slot)
            if e is None or e.expires_at <= now:
                continue
            self.counters["written"] += 1
            return e, e.hops if e.origin == self.site else e.hops + 1
        return None

    def forget(self, neighbour: str) -> None:
        """``neighbour`` is gone for good (not needed across reconnections: a new session marks all)."""
        self.dirty.pop(neighbour, None)

    # -- what is held ------------------------------------------------------------------------------
    def live(self, now: float) -> list[Entry]:
        """Every entry that has not expired, least recently updated first."""
        return [e for e in self.entries.values() if e.expires_at > now]

    def expire(self, now: float) -> None:
        """Drop expired entries (at most once per ``SWEEP_PERIOD``; ``take`` and ``live`` skip them anyway)."""
        if now < self.swept_at + SWEEP_PERIOD:
            return
        self.swept_at = now
        for slot in [s for s, e in self.entries.items() if e.expires_at <= now]:
            self._drop(slot)

    def stats(self) -> dict[str, Any]:
        return {"latest_entries": len(self.entries),
                **{f"latest_{k}": v for k, v in self.counters.items()}}

    # -- internals -----------------------------------------------------------------------------------
    def _hold(self, e: Entry) -> None:
        slot = (e.origin, e.key)
        keys = self.by_origin.setdefault(e.origin, {})
        if slot in self.entries:
            del self.entries[slot]              # re-inserted last: the most recently updated
            del keys[e.key]
        else:
            if len(keys) >= self.per_origin:
                self._evict((e.origin, next(iter(keys))))
            if len(self.entries) >= self.total:
                self._evict(next(iter(self.entries)))
        self.entries[slot] = e
        self.by_origin.setdefault(e.origin, {})[e.key] = None

    def _evict(self, slot: Slot) -> None:
        self.counters["evicted"] += 1
        self._drop(slot)

    def _drop(self, slot: Slot) -> None:
        del self.entries[slot]
        keys = self.by_origin[slot[0]]
        del keys[slot[1]]
        if not keys:
            del self.by_origin[slot[0]]
        for d in self.dirty.values():          # a dirty set never outgrows the table
            d.pop(slot, None)

    def _mark(self, e: Entry, neighbours: Iterable[str]) -> None:
        slot = (e.origin, e.key)
        for n in neighbours:
            if n != e.origin:
                self.dirty.setdefault(n, {}).setdefault(slot, None)

