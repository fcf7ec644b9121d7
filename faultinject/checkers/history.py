"""Records, the ground-truth link timeline, and an indexed history over them.

Theory of operation
-------------------
Every checker reads the same input: journal records of Contract 3 (dicts with
``kind`` send / deliver / status / missing, as ``contracts.journal`` declares
them) and, for the checkers that compare what sites believed with what the
network did, a ground-truth timeline of ``LinkEvent``s. The simulator builds
exactly these records (with virtual ``at`` times); ``faultinject.checkers.journal``
loads them from a real run's ``data_dir``.

The test tools' fields and kinds, declared there too, are all optional (a
real journal lacks them): a ``send``'s ``dests`` (absent: every other site;
its ``skipped`` destinations, disconnected at send time, are never expected to
get it), ``inc`` (the site's incarnation) in ``deliver`` and ``status``
records, and the lifetimes ``start`` (a site's stack began, every peer
``disconnected``) and ``crash`` (it was lost with all its state).

A chat server's journal also has ``control`` records: RCM deliveries that
showed no chat message (rosters, receipts, room definitions; a message held
or dropped). They take places in the global order like chat messages, so the
ordering checkers read ``History.ordered``, every RCM delivery per site in
delivery order (a held message's later ``deliver`` record, shown when its
room's definition came, is not an RCM delivery and is left out there).

``History`` indexes the records once: sends by ``msg_id``, chat deliveries per
site in delivery order, ordered deliveries per site, status timelines per
(site, peer), and site lifetimes.

A ``missing`` record names its messages as seq ``ranges`` (``seqs`` in the
first round's journals; ``contracts.journal.missing_ranges`` reads both). A
range may name more messages than memory holds, so checkers look messages up in
the ranges (``Declared``, bisection) and never list them.
"""
from __future__ import annotations

import bisect
import contextlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from contracts import journal as J
from contracts.labels import Label, LabelError, Scheme
from contracts.precedence import DEFAULT, URGENT
from contracts.status import LinkStatus

UP, DOWN, BLACKHOLE = "up", "down", "blackhole"
LINK_STATES = (UP, DOWN, BLACKHOLE)


@dataclass(frozen=True, slots=True)
class Violation:
    """One broken property: what kind, where, about which message or peer, and why."""

    kind: str
    site: str
    ref: str
    detail: str

    def __str__(self) -> str:
        return f"[{self.kind}] at {self.site} ({self.ref}): {self.detail}"


@dataclass(frozen=True, slots=True)
class StablePeriod:
    """From ``start`` to ``end`` the set ``sites`` is stable (``properties.stable_periods``)."""

    sites: frozenset[str]
    start: float
    end: float


@dataclass(frozen=True, slots=True)
class LinkEvent:
    """From ``at`` on, the link between sites ``a`` and ``b`` is ``state`` (up/down/blackhole)."""

    at: float
    a: str
    b: str
    state: str

    def to_json(self) -> list[float | str]:
        return [round(self.at, 6), self.a, self.b, self.state]

    @classmethod
    def from_json(cls, v: list[Any]) -> LinkEvent:
        return cls(float(v[0]), str(v[1]), str(v[2]), str(v[3]))


def pair(a: str, b: str) -> tuple[str, str]:
    return (a, b) if a < b else (b, a)


@dataclass(slots=True)
class Timeline:
    """A step function of time: value ``values[i]`` from ``times[i]`` on."""

    initial: Any
    times: list[float] = field(default_factory=list)
    values: list[Any] = field(default_factory=list)

    def set(self, at: float, value: Any) -> None:
        if self.times and at < self.times[-1]:
            # Records of one site are in time order; tolerate equal times.
            i = bisect.bisect_right(self.times, at)
            self.times.insert(i, at)
            self.values.insert(i, value)
            return
        self.times.append(at)
        self.values.append(value)

    def at(self, t: float) -> Any:
        """The value at time ``t`` (changes at exactly ``t`` count)."""
        i = bisect.bisect_right(self.times, t)
        return self.values[i - 1] if i else self.initial

    def changes(self, t0: float, t1: float) -> list[tuple[float, Any]]:
        """Changes in (t0, t1]."""
        i = bisect.bisect_right(self.times, t0)
        j = bisect.bisect_right(self.times, t1)
        return list(zip(self.times[i:j], self.values[i:j]))

    def constant(self, t0: float, t1: float, value: Any) -> bool:
        """Is the value ``value`` throughout [t0, t1]?"""
        if self.at(t0) != value:
            return False
        return all(v == value for _, v in self.changes(t0, t1))

    def first_time(self, t0: float, pred: Callable[[Any], bool]) -> float | None:
        """The first time at or after ``t0`` at which ``pred(value)`` holds."""
        if pred(self.at(t0)):
            return t0
        i = bisect.bisect_right(self.times, t0)
        for k in range(i, len(self.times)):
            if pred(self.values[k]):
                return self.times[k]
        return None


@dataclass(slots=True)
class Delivery:
    site: str
    index: int          # position in the site's delivery sequence (all incarnations)
    at: float
    msg_id: str
    origin: str
    seq: int
    key: tuple[Any, ...]
    late: bool
    inc: int
    fifo_exempt: bool = False   # held for a private room's definition, or repaired: may follow later ones
    precedence: str = DEFAULT    # flash and immediate are urgent: delivered on arrival (issue 19)
    repaired: bool = False      # recovered by repair after it was reported missing (Contract 3 extension)

    @property
    def urgent(self) -> bool:
        return self.precedence in URGENT

    @property
    def lane(self) -> str:
        """FIFO per origin holds within a lane: each urgent level, and PRIORITY with ROUTINE."""
        return self.precedence if self.precedence in URGENT else "ordered"


def missing_count(records: Iterable[dict[str, Any]]) -> int:
    """How many messages the ``missing`` records among ``records`` name, summed over records (from their ranges)."""
    return sum(last - first + 1 for r in records if r.get("kind") == J.MISSING for first, last in J.missing_of(r))


class Declared:
    """When each message was first journaled missing at a site: per (site, origin), disjoint seq ranges
    with the earliest ``at`` of a ``missing`` record naming them (looked up, never expanded)."""

    def __init__(self, records: Iterable[dict[str, Any]]) -> None:
        spans: dict[tuple[str, str], list[tuple[int, int, float]]] = {}
        for r in records:
            for first, last in J.missing_of(r):
                spans.setdefault((r["site"], r["origin"]), []).append((first, last, float(r.get("at", 0.0))))
        self._pieces = {k: J.earliest(v) for k, v in spans.items()}
        self._starts = {k: [p[0] for p in v] for k, v in self._pieces.items()}

    def first_at(self, site: str, origin: str, seq: int) -> float | None:
        """The earliest ``at`` of a ``missing`` record of ``site`` naming ``origin``'s ``seq`` (None: none did)."""
        starts = self._starts.get((site, origin))
        if not starts:
            return None
        i = bisect.bisect_right(starts, seq) - 1
        piece = self._pieces[(site, origin)][i] if i >= 0 else None
        return piece[2] if piece is not None and piece[1] >= seq else None


def _key(order: Any) -> tuple[Any, ...]:
    if isinstance(order, (list, tuple)):
        return tuple(_key(x) if isinstance(x, list) else x for x in order)
    return (order,)


@dataclass(frozen=True, slots=True)
class Clearance:
    """A ``clearance`` record, decoded: the site's scheme and what it may hold."""

    scheme: Scheme
    label: Label

    @classmethod
    def from_record(cls, r: Mapping[str, Any]) -> Clearance:
        """Decode a ``clearance`` record (``LabelError`` naming what is wrong)."""
        levels, caveats = r.get("levels"), r.get("caveats", [])
        if not isinstance(levels, list) or not isinstance(caveats, list):
            raise LabelError("a clearance record needs levels and caveats lists")
        scheme = Scheme.build(levels, caveats)
        return cls(scheme, scheme.from_json(r.get("clearance")))


class History:
    """Records of one run, indexed for the checkers."""

    def __init__(self, records: Iterable[dict[str, Any]], sites: Iterable[str] = (),
                 end: float | None = None, infer_repaired: bool = False) -> None:
        """``infer_repaired``: a delivery of a message the site had journaled as missing counts as
        repaired even without the journal's ``repaired`` flag (journals of chat servers that do not
        write it yet: only repair delivers such a message)."""
        self.sends: dict[str, dict[str, Any]] = {}
        self.deliveries: dict[str, list[Delivery]] = {}
        self.ordered: dict[str, list[Delivery]] = {}      # every RCM delivery, chat or control
        self.status: dict[tuple[str, str], Timeline] = {}
        self.alive: dict[str, Timeline] = {}     # site -> incarnation (0: down)
        self.missing: list[dict[str, Any]] = []
        self.expired: set[tuple[str, str]] = set()      # (site, msg_id): it expired before reaching the site
        # A labeled mission's chat servers journal their clearance (``leaks.Clearance``): a labeled send is
        # meant only for the sites whose clearance dominates its label (``dests_of``).
        self.clearances: dict[str, Clearance] = {}
        site_set = set(sites)
        last = 0.0
        first_at: dict[str, float] = {}
        starts: list[tuple[str, float]] = []
        for r in records:
            kind = r.get("kind")
            site: Any = r.get("site")        # a JSON value: the site's name (every reader sets it)
            at = float(r.get("at", 0.0))
            last = max(last, at)
            if site is not None:
                site_set.add(site)
                first_at.setdefault(site, at)
            if kind == J.SEND:
                self.sends[r["msg_id"]] = r
            elif kind == J.DELIVER or kind == J.CONTROL:
                d = Delivery(site, 0, at, r["msg_id"], r["origin"], int(r["seq"]), _key(r.get("order")),
                             bool(r.get("late")), int(r.get("inc", 1)), bool(r.get("held") or r.get("repaired")),
                             str(r.get("precedence") or DEFAULT), bool(r.get("repaired")))
                if kind == J.DELIVER:
                    lst = self.deliveries.setdefault(site, [])
                    d.index = len(lst)
                    lst.append(d)
                if kind == J.CONTROL or not r.get("held"):
                    self.ordered.setdefault(site, []).append(d)
            elif kind == J.STATUS:
                site_set.add(r["peer"])
                self._status(site, r["peer"]).set(at, r["status"])
            elif kind == J.START:
                self._alive(site).set(at, int(r.get("inc", 1)))
                starts.append((site, at))
            elif kind == J.CRASH:
                self._alive(site).set(at, 0)
            elif kind == J.MISSING:
                self.missing.append(r)
            elif kind == J.EXPIRED:
                self.expired.add((site, r["msg_id"]))
            elif kind == J.CLEARANCE and site is not None:
                with contextlib.suppress(LabelError):       # (the leak checker names an unreadable one)
                    self.clearances[site] = Clearance.from_record(r)
        self.sites = sorted(site_set)
        for site, at in starts:
            # A (re)started RCM server gives every peer the suspect timeout to
            # (re)connect: every peer starts suspected (docs/rcm.md, Durability).
            for peer in self.sites:
                if peer != site:
                    tl = self._status(site, peer)
                    i = bisect.bisect_left(tl.times, at)
                    tl.times.insert(i, at)
                    tl.values.insert(i, LinkStatus.SUSPECTED.value)
        self.end = end if end is not None else last
        for s in self.sites:
            life = self.alive.get(s)
            if life is None:
                # A real journal without lifetimes: the site lived the whole run.
                self.alive[s] = Timeline(1)
            elif life.values and life.values[0] == 0:
                life.initial = 1    # its first lifetime record is a crash: it was running
        for s in self.sites:
            self.deliveries.setdefault(s, [])
            self.ordered.setdefault(s, [])
        if infer_repaired:
            declared = Declared(self.missing)
            for site, ds in [*self.ordered.items(), *self.deliveries.items()]:
                for d in ds:
                    t = declared.first_at(site, d.origin, d.seq)
                    if t is not None and t <= d.at:
                        d.repaired = d.fifo_exempt = True

    def _status(self, site: str, peer: str) -> Timeline:
        tl = self.status.get((site, peer))
        if tl is None:
            tl = self.status[(site, peer)] = Timeline(LinkStatus.DISCONNECTED.value)
        return tl

    def _alive(self, site: str) -> Timeline:
        tl = self.alive.get(site)
        if tl is None:
            tl = self.alive[site] = Timeline(0)
        return tl

    def status_of(self, site: str, peer: str) -> Timeline:
        return self.status.get((site, peer)) or Timeline(LinkStatus.DISCONNECTED.value)

    def dests_of(self, send: dict[str, Any]) -> list[str]:
        """Where a sent message was meant to go (sender excluded), skipped ones removed."""
        origin = send["origin"]
        dests = send.get("dests")
        if dests is None:
            dests = [s for s in self.sites if s != origin]
            label = send.get("label")
            if label is not None and self.clearances:       # a labeled chat message: the sites cleared for it
                dests = [s for s in dests if self.cleared(s, label)]
        skipped = set(send.get("skipped") or ())
        return [d for d in dests if d != origin and d not in skipped]


    def cleared(self, site: str, label: Any) -> bool:
        """Does ``site``'s journaled clearance dominate ``label`` (a site with none, or an unreadable label:
        no, so that nothing is expected where it may not go)?"""
        cl = self.clearances.get(site)
        if cl is None:
            return False
        try:
            return cl.label.dominates(cl.scheme.from_json(label))
        except LabelError:
            return False


class LinkTimeline:
    """Ground truth: per pair of sites, the link state over time, with site crashes.

    ``max_hops``: the sites relay (``[rcm] routing = "relay"``): two sites can
    talk while a path of up links joins them, at most ``max_hops`` links long,
    and the checkers judge statuses and stable sets by paths, not direct links.
    None: the paper's direct links.
    """

    def __init__(self, events: Iterable[LinkEvent], sites: Iterable[str],
                 initial: str = UP, max_hops: int | None = None) -> None:
        self.links: dict[tuple[str, str], Timeline] = {}
        self.max_hops = max_hops
        self.sites = sorted(sites)
        for a in self.sites:
            for b in self.sites:
                if a < b:
                    self.links[(a, b)] = Timeline(initial)
        self.change_times: list[float] = []
        for e in sorted(events, key=lambda e: e.at):
            self.links.setdefault(pair(e.a, e.b), Timeline(initial)).set(e.at, e.state)
            self.change_times.append(e.at)

    def state(self, a: str, b: str, t: float) -> str:
        state: str = self.links[pair(a, b)].at(t)      # links hold UP, DOWN or BLACKHOLE
        return state

    def link(self, a: str, b: str) -> Timeline:
        return self.links[pair(a, b)]
