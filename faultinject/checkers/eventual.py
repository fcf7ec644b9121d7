"""Eventual delivery: what repair promises beyond the paper (docs/rcm.md, Repair).

Theory of operation
-------------------
Reliability (``properties.check_reliability``) excuses a message lost while
its two ends saw each other disconnected. Repair takes most of that excuse
back: the origin tells the destination what it skipped once they are joined
again (a MISSED notice), and the destination fetches it from any site that
holds it. So:

    a message sent by ``o`` to ``d`` (skipped or not) is delivered at ``d`` by
    the end of the run if, after the send, ``o`` and ``d`` were joined for
    ``window`` seconds on end (``d`` learns what it missed), and from then on
    ``d`` and some *holder* ``h`` were joined for ``window`` seconds on end,
    within ``retention`` of ``h``'s delivery.

A holder is a site that delivered the message (the origin included) and
still has it: with ``durable`` sites a crash loses nothing; without, a crash
wipes a site's log, so a holder that crashed after its delivery does not
count, and a crash of ``o`` or ``d`` after the send excuses the message (what
``o`` owed ``d`` and what ``d`` wanted were in the lost memory). Joined has the
checkers' meaning (``properties``): a direct link up, or with relaying sites
a path of up links among live sites; for a confined message (a subset send,
``checkers.confined``) a path through its destinations and origin only, and
a stranded channel excuses what waits behind it.

``window`` is how long repair may take once a path exists: noticing the path
(``t_up`` plus the link-state news), one summary round trip, the fetch, and a
stalled request given up after ``repair_period``.
"""
from __future__ import annotations

from .awareness import EPS, _joined, _segments
from .confined import Confinement, allowed_sites
from .history import UP, History, LinkTimeline, Violation


def _first_joined(h: History, links: LinkTimeline, a: str, b: str, after: float, window: float,
                  within: tuple[Confinement, frozenset[str]] | None = None) -> float | None:
    """The start of the first ``window`` seconds at or after ``after`` during which ``a`` and ``b`` are joined
    (``within``: through the sites of that set only)."""
    if a == b:
        return after
    tl = _joined(h, links, a, b) if within is None else within[0].joined_within(within[1], a, b)
    for t1, t2, v in _segments(tl, h.end):
        if v != UP:
            continue
        start = max(t1, after)
        if start + window <= t2 + EPS and start + window <= h.end + EPS:
            return start
    return None


def _crashed_since(h: History, site: str, t: float) -> bool:
    tl = h.alive[site]
    return tl.at(t) == 0 or any(v == 0 for _, v in tl.changes(t, float("inf")))


def check_eventual_delivery(h: History, links: LinkTimeline, window: float, retention: float = float("inf"),
                            durable: bool = False, confinement: Confinement | None = None) -> list[Violation]:
    """Every message reaches every destination that was joined to its origin and then to a holder (module doc).
    ``confinement``: a confined message's paths are within its allowed sites, and a stranded channel excuses
    what waits behind it (``checkers.confined``)."""
    delivered: dict[str, dict[str, float]] = {}      # msg_id -> site -> first delivery time
    for site, ds in h.deliveries.items():
        for d in ds:
            delivered.setdefault(d.msg_id, {}).setdefault(site, d.at)
    out: list[Violation] = []
    for msg_id, send in h.sends.items():
        origin, ts = send["origin"], float(send["at"])
        dests = send.get("dests")
        if dests is None:
            dests = [s for s in h.sites if s != origin]
        got = delivered.get(msg_id, {})
        allowed = allowed_sites(h, send) if confinement is not None else None
        within = (confinement, allowed) if confinement is not None and allowed is not None else None
        for d in dests:
            if d == origin or d in got:
                continue
            if not durable and (_crashed_since(h, origin, ts) or _crashed_since(h, d, ts)):
                continue
            if confinement is not None and confinement.excuses(d, send):
                continue
            told = _first_joined(h, links, origin, d, ts, window, within)
            if told is None:
                continue
            for holder, th in sorted(got.items(), key=lambda x: x[1]):
                if not durable and _crashed_since(h, holder, th):
                    continue
                # The origin tells and serves on one path; another holder serves once d has been told.
                start = _first_joined(h, links, holder, d, max(th, told if holder == origin else told + window),
                                      window, within)
                if start is not None and start + window <= th + retention:
                    out.append(Violation("eventual", d, msg_id,
                                         f"sent by {origin} at {ts:.3f}; {d} joined {origin} from {told:.3f} and "
                                         f"holder {holder} from {start:.3f} for {window:g} s, never delivered"))
                    break
    return out
