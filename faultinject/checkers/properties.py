"""The RCM properties as functions over a History: each returns its violations.

Theory of operation
-------------------
Each checker states one property of the RCM specification (the paper's
"Semantics" section) as a predicate over what the sites recorded, the way
Jepsen's checkers do: an empty list means the property held on this history.

Definitions (times are record ``at`` times):

* A site *sees* a peer with the peer's last logical status recorded at or
  before ``t``; a (re)started site sees every peer ``disconnected``.
* Two live sites are *joined* at ``t`` when the link between them is up (the
  paper's direct links) or, when the sites relay (``LinkTimeline.max_hops``),
  a path of up links among live sites joins them in at most ``max_hops`` links.
* A set ``S`` of two or more live sites is *stable* at ``t`` when every site of
  ``S`` sees every other site of ``S`` connected and sees every site outside
  ``S`` disconnected (the paper's definition, on observed statuses), and, if a
  link timeline is given, every two sites of ``S`` are really joined. With
  relaying sites a period also ends where a link between two sites of ``S``
  changes: the paths of S's traffic move then, as they do at a status change. A *stable
  period* is a maximal interval ``[t1, t2)`` during which the same ``S`` is
  stable.
* A message is *stable* in that period when its origin is in ``S`` and it was
  sent in ``[t1 + margin, t2 - settle]``: ``margin`` lets the protocols'
  state exchange after the view change finish; ``settle`` is how long its
  delivery may take while the period lasts (with an announcement window,
  ``settle_with_window``: the one place that widens it for that).

Properties:

* reliability: a message from ``o`` to ``d`` is delivered at ``d`` (and at
  ``o`` itself) unless, at or after the send, ``o`` or ``d`` saw the other
  disconnected or crashed; one reported missing and later delivered must
  be marked repaired (counted as repaired, not lost); eventual delivery,
  what repair adds, is ``checkers.eventual``;
* no duplicates within one incarnation of a site; FIFO per origin within one
  incarnation (sequence numbers only grow);
* IGO: at every site, in-order deliveries have strictly increasing keys and a
  late delivery's key is below the highest in-order key already delivered
  (a repaired one, delivered beside the order at its original key, excepted);
  in a stable period, each stable message is delivered at every site of ``S``
  it was addressed to, in order (not late), within ``settle``, and all those
  sites deliver the stable messages in the same relative order;
* connection awareness (needs the link timeline): while two sites are joined
  for longer than ``t_up``, both see each other connected from ``t_up`` after
  they were joined; while they are not (a link down or blackholed, a crashed
  end, no path), the live end does not see the peer connected from ``t_down``
  after it failed; a peer is seen disconnected only after it was not seen
  connected for ``suspect``;
* robustness (needs the link timeline): once nothing in the network changed
  for ``t_robust``, statuses match it: connected when joined, disconnected
  otherwise.
"""
from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterable
from typing import Any

from contracts import journal as J
from contracts.status import LinkStatus

from .awareness import EPS, AwarenessBounds, _joined, check_connection_awareness, check_robustness
from .confined import Confinement
from .history import UP, Delivery, History, LinkTimeline, StablePeriod, Violation
from .urgent import check_urgent_keys


# -- messages -------------------------------------------------------------------
def _saw_disconnected(h: History, site: str, peer: str, t: float, at_send: bool) -> bool:
    """Did ``site`` see ``peer`` disconnected after ``t`` (or at ``t`` if ``at_send``)?

    Only the sender's view at send time counts (it skipped the peer); a
    receiver that has not finished its handshake yet still gets the message.
    """
    tl = h.status_of(site, peer)
    if at_send and tl.at(t) == LinkStatus.DISCONNECTED.value:
        return True
    return any(v == LinkStatus.DISCONNECTED.value for _, v in tl.changes(t, float("inf")))


def _crashed_after(h: History, site: str, t: float) -> bool:
    tl = h.alive[site]
    if tl.at(t) == 0:
        return True
    prev = tl.at(t)
    for _, v in tl.changes(t, float("inf")):
        if v == 0 or v != prev:
            return True
    return False


def check_reliability(h: History, crashes_lose: bool = True,
                      confinement: Confinement | None = None) -> list[Violation]:
    """Every message arrives where it was sent unless its two ends saw each other disconnected; a message that
    expired before it reached a site arrived there as a stub (an ``expired`` record: a chat server journals
    no ``deliver`` for it, the simulator does), which is not a loss.

    ``crashes_lose``: a crash of either end excuses a loss (sites without a
    write-ahead log). With ``False`` (durable sites) only the statuses do.
    ``confinement``: a channel stranded by a confined message excuses what waits behind it
    (``Confinement.excuses``).
    """
    got = {(d.site, d.msg_id) for ds in h.deliveries.values() for d in ds}
    repaired = {(d.site, d.msg_id) for ds in h.deliveries.values() for d in ds if d.repaired}
    out: list[Violation] = []
    for msg_id, send in h.sends.items():
        origin, ts = send["origin"], float(send["at"])
        for d in [origin, *h.dests_of(send)]:
            if (d, msg_id) in got or (d, msg_id) in h.expired:
                continue
            if crashes_lose and (_crashed_after(h, origin, ts) or _crashed_after(h, d, ts)):
                continue
            if d != origin and (_saw_disconnected(h, origin, d, ts, True)
                                or _saw_disconnected(h, d, origin, ts, False)):
                continue
            if confinement is not None and confinement.excuses(d, send):
                continue
            out.append(Violation("reliability", d, msg_id,
                                 f"sent by {origin} at {ts:.3f}, never delivered, and neither "
                                 f"site saw the other disconnected"))
    # Delivered, not by repair, yet named by a missing record: looked up in the record's ranges (one
    # may name 2^53 messages), per (site, origin) among the sorted seqs delivered there.
    delivered: dict[tuple[str, str], set[int]] = {}
    for ds in h.deliveries.values():
        for dv in ds:
            if (dv.site, dv.msg_id) not in repaired:
                delivered.setdefault((dv.site, dv.origin), set()).add(dv.seq)
    seqs_at = {k: sorted(v) for k, v in delivered.items()}
    for r in h.missing:
        site, seqs = r["site"], seqs_at.get((r["site"], r["origin"]), [])
        for first, last in J.missing_of(r):
            for seq in seqs[bisect.bisect_left(seqs, first):bisect.bisect_right(seqs, last)]:
                out.append(Violation("reliability", site, f"{r['origin']}:{seq}",
                                     f"declared missing at {float(r['at']):.3f} but delivered"))
    return out


def check_no_duplicates(h: History) -> list[Violation]:
    """No site delivers a message twice within one incarnation."""
    out: list[Violation] = []
    for site, ds in h.deliveries.items():
        seen: dict[tuple[int, str], Delivery] = {}
        for d in ds:
            k = (d.inc, d.msg_id)
            if k in seen:
                out.append(Violation("duplicate", site, d.msg_id,
                                     f"delivered at {seen[k].at:.3f} and again at {d.at:.3f}"))
            else:
                seen[k] = d
    return out


def check_fifo(h: History) -> list[Violation]:
    """Deliveries from one origin come in the order it sent them, within a lane (``Delivery.lane``).

    The documented exceptions, marked in the journal, are exempt: a repaired message, and a private
    room's message held until the room's definition reached the site."""
    out: list[Violation] = []
    for site, ds in h.ordered.items():
        last: dict[tuple[int, str, str], Delivery] = {}      # (incarnation, origin, lane)
        for d in ds:
            if d.fifo_exempt:
                continue
            k = (d.inc, d.origin, d.lane)
            prev = last.get(k)
            if prev is not None and d.seq <= prev.seq:
                out.append(Violation("fifo", site, d.msg_id,
                                     f"seq {d.seq} of {d.origin} delivered after seq {prev.seq}"))
            if prev is None or d.seq > prev.seq:
                last[k] = d
    return out


def check_order_keys(h: History) -> list[Violation]:
    """In-order keys strictly increase at each site; a late key is below them (over every RCM delivery,
    chat messages and control data alike). An urgent message is delivered on arrival: not flagged late,
    its key is above the in-order ones (in place, and they continue above it; or early, its place not
    settled yet, and in-order keys may still come below it); flagged late, it is below what was delivered
    (its place had passed). Since in place and early are not told apart in the records, a late key must be
    at or below the highest key delivered not late (``top``), urgent ones included."""
    out: list[Violation] = []
    for site, ds in h.ordered.items():
        frontier: tuple[Any, ...] | None = None      # the in-order keys (urgent ones aside)
        top: tuple[Any, ...] | None = None           # the highest key delivered not late
        inc = None
        for d in ds:
            if d.inc != inc:
                inc, frontier, top = d.inc, None, None
            try:
                if not d.late:
                    if frontier is not None and not d.key > frontier:
                        what = "urgent key, not flagged late," if d.urgent else "in-order key"
                        out.append(Violation("igo-order", site, d.msg_id,
                                             f"{what} {list(d.key)} not above {list(frontier)}"))
                    elif not d.urgent:
                        frontier = d.key
                    if top is None or d.key > top:
                        top = d.key
                elif d.repaired:
                    pass        # repaired: at its original key, outside this site's order (docs/rcm.md, Repair)
                elif top is None or not d.key <= top:
                    # At, not only below: an origin that restarted without its state may stamp the key
                    # its last message had, and that message's place has passed (ordering.base.urgent_late).
                    out.append(Violation("igo-late", site, d.msg_id,
                                         f"late key {list(d.key)} is above the delivered "
                                         f"{list(top) if top else None}"))
            except TypeError:
                out.append(Violation("igo-order", site, d.msg_id,
                                     f"key {list(d.key)} is not comparable with {frontier}"))
    return out


def stable_periods(h: History, links: LinkTimeline | None = None) -> list[StablePeriod]:
    """Maximal intervals in which a set of two or more sites is stable (see module doc)."""
    moments = {0.0}
    for tl in itertools.chain(h.status.values(), h.alive.values()):
        moments.update(tl.times)
    if links is not None:
        moments.update(links.change_times)
    times = sorted(t for t in moments if t <= h.end)
    # Relaying sites: a link that changes inside S changes the paths S's traffic takes, even if
    # no status changes (a relay takes over): the period ends there, as a status change ends one.
    moved: dict[float, set[frozenset[str]]] = {}
    if links is not None and links.max_hops is not None:
        for key, tl in links.links.items():
            for t in tl.times:
                moved.setdefault(t, set()).add(frozenset(key))
    open_: dict[frozenset[str], float] = {}
    out: list[StablePeriod] = []
    for t in times:
        comps = _stable_sets(h, links, t)
        for s in list(open_):
            if s not in comps or any(pair <= s for pair in moved.get(t, ())):
                out.append(StablePeriod(s, open_.pop(s), t))
        for s in comps:
            open_.setdefault(s, t)
    for s, t1 in open_.items():
        out.append(StablePeriod(s, t1, h.end))
    return out


def _stable_sets(h: History, links: LinkTimeline | None, t: float) -> set[frozenset[str]]:
    live = [s for s in h.sites if h.alive[s].at(t)]
    view: dict[str, frozenset[str]] = {}
    clean: dict[str, bool] = {}
    for s in live:
        conn = {s}
        ok = True
        for p in h.sites:
            if p == s:
                continue
            st = h.status_of(s, p).at(t)
            if st == LinkStatus.CONNECTED.value:
                conn.add(p)
            elif st != LinkStatus.DISCONNECTED.value:
                ok = False
        view[s] = frozenset(conn)
        clean[s] = ok
    found: set[frozenset[str]] = set()
    for s in live:
        S = view[s]
        if len(S) < 2 or S in found:
            continue
        if all(m in view and clean[m] and view[m] == S for m in S):
            if links is None or all(_joined(h, links, a, b).at(t) == UP
                                    for a, b in itertools.combinations(sorted(S), 2)):
                found.add(S)
    return found


def settle_with_window(settle: float, announce_delay: float) -> float:
    """The stable-period delivery bound ``settle`` widened for ``[rcm] announce_delay`` (``ordering/window.py``).

    A Lamport or hybrid site may hold a clock announcement up to ``announce_delay`` seconds, and a peer's
    delivery may wait for it, so a stable message may take that much longer; its order and late marks do not
    change (docs/ordering.md, "Announcements on slow links"). The ``margin`` after a view change does not
    move: a new connection's ``resync`` is never held. The sequencer announces no clock; widening its bound
    too only loosens a check it passes anyway, and keeps one rule for every protocol."""
    return settle + announce_delay


def check_igo(h: History, margin: float, settle: float,
              links: LinkTimeline | None = None, confinement: Confinement | None = None) -> list[Violation]:
    """Order keys per site, and the same in-order sequence in every stable period (urgent messages:
    delivered within ``settle``, late or not, with one key everywhere). ``confinement``: a channel between two
    sites of a period blocked by a confined message ends the period, as a status change does, until it clears
    (``Confinement.unblocked``)."""
    out = check_order_keys(h) + check_urgent_keys(h)
    first: dict[tuple[str, str], Delivery] = {}
    for site, ds in h.deliveries.items():
        for delivery in ds:
            first.setdefault((site, delivery.msg_id), delivery)
    sends = sorted(h.sends.values(), key=lambda r: float(r["at"]))
    periods = stable_periods(h, links)
    if confinement is not None:
        periods = [q for p in periods for q in confinement.unblocked(p)]
    for p in periods:
        lo, hi = p.start + margin, p.end - settle
        if hi < lo:
            continue
        stable = [r for r in sends if r["origin"] in p.sites and lo <= float(r["at"]) <= hi]
        if not stable:
            continue
        members = sorted(p.sites)
        where = "{" + ",".join(members) + f"}} stable {p.start:.3f}-{p.end:.3f}"
        positions: dict[str, dict[str, int]] = {s: {} for s in members}
        for r in stable:
            ts = float(r["at"])
            targets = {r["origin"], *h.dests_of(r)} & p.sites
            for s in sorted(targets):
                d = first.get((s, r["msg_id"]))
                if d is None or d.at > ts + settle + EPS:
                    when = "never" if d is None else f"only at {d.at:.3f}"
                    out.append(Violation("igo-stall", s, r["msg_id"],
                                         f"sent at {ts:.3f} in {where}, delivered {when}"))
                    continue
                if d.urgent:
                    continue            # on arrival: not part of the agreed in-order sequence
                if d.late:
                    out.append(Violation("igo-late-stable", s, r["msg_id"],
                                         f"sent at {ts:.3f} in {where}, delivered late"))
                positions[s][r["msg_id"]] = d.index
        for s1, s2 in itertools.combinations(members, 2):
            common = [m for m in positions[s1] if m in positions[s2]]
            common.sort(key=lambda m: positions[s1][m])
            prev = None
            for m in common:
                if prev is not None and positions[s2][m] < positions[s2][prev]:
                    out.append(Violation("igo-agreement", s2, m,
                                         f"{s1} delivered {prev} before {m}, {s2} the other way "
                                         f"round, in {where}"))
                    break
                prev = m
    return out


def check_all(h: History, *, margin: float, settle: float, links: LinkTimeline | None = None,
              bounds: AwarenessBounds | None = None, crashes_lose: bool = True,
              repair_window: float | None = None) -> list[Violation]:
    """Every checker that the inputs allow (``repair_window``: the sites repair; ``checkers.eventual``).
    With a link timeline of relaying sites, confined sends' waits are excused (``checkers.confined``)."""
    confinement = Confinement.for_checks(h, links, bounds)
    out = (check_reliability(h, crashes_lose, confinement) + check_no_duplicates(h) + check_fifo(h)
           + check_igo(h, margin, settle, links, confinement))
    if links is not None and bounds is not None:
        out += check_connection_awareness(h, links, bounds) + check_robustness(h, links, bounds)
    if links is not None and repair_window is not None:
        from .eventual import check_eventual_delivery
        out += check_eventual_delivery(h, links, repair_window, durable=not crashes_lose, confinement=confinement)
    return out


def summarize(violations: Iterable[Violation]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for v in violations:
        counts[v.kind] = counts.get(v.kind, 0) + 1
    return counts
