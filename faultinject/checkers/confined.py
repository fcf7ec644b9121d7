"""Confined channels: when RCM's confinement of subset sends makes a channel wait (docs/relay.md, Confinement).

Theory of operation
-------------------
A send to a strict subset of the other sites is *confined*: its content travels
only among its destinations and its origin (the chat server's need-to-know
routing, DESIGN.md "Labels"). RCM's channel from origin ``o`` to destination
``s`` carries its frames in order; while it holds confined frames it may cross
only the sites all of them allow (the *meet*: the intersection of their
allowed sets), and when ``o`` and ``s`` are not joined within that set the
channel *waits*. Everything behind the confined frame waits with it (FIFO per
origin), and so does ``s``'s total order: ``s`` cannot deliver past ``o``'s
waiting message, nor learn ``o``'s clock from the frames behind it.

``Confinement(h, links)`` computes, per channel ``(o, s)``, the intervals during
which it is *blocked*: it holds a confined message (sent by ``o`` to ``s``,
``s`` not skipped, not yet delivered at ``s``) and ``o`` and ``s`` are not
joined (the checkers' meaning: a path of up links among live sites, at most
``max_hops`` long; with ``settled``, only links up and sites running for that
long count, the time a restarted site or a raised link takes to connect)
within the meet of the allowed sets of the confined
messages it holds. Only relaying sites confine anything: on the paper's
direct links (``links.max_hops`` None) a channel's path is its link whatever
it holds, so nothing is ever blocked beyond what the link itself does.

A message counts as held by the channel from its send until its
acknowledgement comes back: at most ``ack_slack`` after the first time, from
its first delivery at ``s`` on, that ``o`` and ``s`` are joined (acks take
any path: they carry no content). A destination skipped at the send, or one
that got the message by repair or never, may be served by any holder, whose
channel to it then counts it from the holder's delivery (repair waits for a
path within the allowed sites too). So the blocked intervals are an
over-approximation, and the checkers that use them (``properties``,
``eventual``) excuse at most the stalls confinement can cause: a stable
period with a blocked channel inside it is not held to the settle bound, and
at the end of a run a blocked channel excuses what waits behind it
(``stranded``).
"""
from __future__ import annotations

import functools
from typing import Any

from .awareness import AwarenessBounds, _joined, _segments, hop_reach
from .history import UP, History, LinkTimeline, StablePeriod, Timeline

Channel = tuple[str, str]

ACK_SLACK = 2.0
"""Seconds an acknowledgement may take once the two ends are joined again (an ack interval, a relayed path
learnt, a round trip; generous: a longer hold excuses more, never less)."""


def allowed_sites(h: History, send: dict[str, Any]) -> frozenset[str] | None:
    """The sites a sent message may reach, its destinations and its origin, when it is confined (its ``dests``
    leave out some other site); None when it goes to every site. A chat server's labeled send (no ``dests`` in
    its journal) goes to the sites whose journaled clearance dominates its label (``History.cleared``)."""
    dests = send.get("dests")
    origin = send["origin"]
    if dests is None and send.get("label") is not None and h.clearances:
        dests = [s for s in h.sites if s != origin and h.cleared(s, send["label"])]
    if dests is None:
        return None
    others = {s for s in h.sites if s != origin}
    if others <= set(dests):
        return None
    return frozenset(dests) | {origin}


class Confinement:
    """Blocked intervals of every channel (see the module docstring)."""

    def __init__(self, h: History, links: LinkTimeline | None, ack_slack: float = ACK_SLACK,
                 settled: float = 0.0) -> None:
        self.h = h
        self.links = links
        self.ack_slack = ack_slack
        self.settled = settled
        self.blocked: dict[Channel, list[tuple[float, float]]] = {}
        self._within: dict[frozenset[str], dict[Channel, Timeline]] = {}
        self._stuck: tuple[frozenset[str], dict[str, float]] | None = None
        if links is None or links.max_hops is None:
            return
        first: dict[tuple[str, str], float] = {}
        repaired: set[tuple[str, str]] = set()
        for site, ds in h.deliveries.items():
            for d in ds:
                first.setdefault((site, d.msg_id), d.at)
                if d.repaired:
                    repaired.add((site, d.msg_id))
        # Per channel: (time, +1 / -1, allowed set) as confined messages enter and leave it.
        events: dict[Channel, list[tuple[float, int, frozenset[str]]]] = {}
        for send in h.sends.values():
            allowed = allowed_sites(h, send)
            if allowed is None:
                continue
            o, ts, msg_id = send["origin"], float(send["at"]), send["msg_id"]
            skipped = set(send.get("skipped") or ())
            for s in allowed - {o}:
                got = first.get((s, msg_id))
                # The origin's channel holds it from the send; one that repair brings (skipped, lost, or
                # never there) may come from any holder, whose channel holds it from the holder's delivery.
                holders = [(o, ts)]
                if s in skipped or got is None or (s, msg_id) in repaired:
                    holders += [(x, first[(x, msg_id)]) for x in sorted(allowed - {o, s}) if (x, msg_id) in first]
                for x, t in holders:
                    ev = events.setdefault((x, s), [])
                    ev.append((t, 1, allowed))
                    if got is not None:
                        ev.append((self._acked(x, s, max(got, t)), -1, allowed))
        for ch, ev in events.items():
            spans = self._spans(ch, sorted(ev, key=lambda e: (e[0], -e[1])))
            if spans:
                self.blocked[ch] = spans

    @classmethod
    def for_checks(cls, h: History, links: LinkTimeline | None,
                   bounds: AwarenessBounds | None) -> Confinement | None:
        """The confinement the checkers excuse on a run (None unless its sites relay: only they confine): a
        path within the allowed sites counts once it had time to connect, ``t_up + relay`` of ``bounds``, as
        statuses are judged (0 without bounds). The one way ``properties.check_all`` (simulated runs) and
        ``verdict.run_checks`` (real processes) build it."""
        if links is None or links.max_hops is None:
            return None
        return cls(h, links, settled=bounds.t_up + bounds.relay if bounds is not None else 0.0)

    def _spans(self, ch: Channel, ev: list[tuple[float, int, frozenset[str]]]) -> list[tuple[float, float]]:
        """The blocked intervals of channel ``ch`` from its messages' entries and exits, in time order."""
        o, s = ch
        held: dict[frozenset[str], int] = {}
        out: list[tuple[float, float]] = []
        for i, (t, sign, allowed) in enumerate(ev):
            held[allowed] = held.get(allowed, 0) + sign
            if not held[allowed]:
                del held[allowed]
            nxt = ev[i + 1][0] if i + 1 < len(ev) else self.h.end
            if not held or nxt <= t and i + 1 < len(ev):
                continue
            meet = frozenset.intersection(*held)
            tl = self.joined_within(meet, o, s)
            for t1, t2 in _not_up(tl, t, nxt):
                if out and out[-1][1] >= t1:
                    out[-1] = (out[-1][0], max(out[-1][1], t2))
                else:
                    out.append((t1, t2))
        return out

    def _acked(self, o: str, s: str, t: float) -> float:
        """When the frame ``s`` received at ``t`` leaves ``o``'s channel: its acknowledgement, which takes any
        path back, arrives within ``ack_slack`` of the first time from ``t`` on that ``o`` and ``s`` are joined
        (the end of the run if never)."""
        for t1, t2, v in _segments(_joined(self.h, self.links, o, s), self.h.end):     # type: ignore[arg-type]
            if v == UP and t2 > t:
                return min(max(t1, t) + self.ack_slack, self.h.end)
        return self.h.end

    def channel_blocked(self, o: str, s: str, t1: float, t2: float) -> bool:
        """Is channel ``o`` to ``s`` blocked at some time in ``[t1, t2]``?"""
        return any(a <= t2 and b >= t1 for a, b in self.blocked.get((o, s), ()))

    def unblocked(self, p: StablePeriod) -> list[StablePeriod]:
        """The parts of stable period ``p`` during which no channel between two of its sites is blocked: the
        statuses say the sites are joined, but a blocked channel holds what it carries (and its destination's
        order) as a partition would, so the period is stable only outside those spans."""
        spans = sorted(span for (o, s), ss in self.blocked.items() if o in p.sites and s in p.sites
                       for span in ss if span[0] < p.end and span[1] > p.start)
        out: list[StablePeriod] = []
        t = p.start
        for a, b in spans:
            if a > t:
                out.append(StablePeriod(p.sites, t, a))
            t = max(t, b)
        if t < p.end:
            out.append(StablePeriod(p.sites, t, p.end))
        return out

    def stranded(self) -> list[Channel]:
        """The channels blocked at the end of the run: what they hold, and what waits behind it, never arrives."""
        end = self.h.end
        return sorted(ch for ch, spans in self.blocked.items() if spans[-1][1] >= end)

    def excuses(self, site: str, send: dict[str, Any]) -> bool:
        """Does a stranded channel excuse ``send``'s message for never reaching ``site``? Yes when a channel into
        ``site`` is stranded (its total order waits behind the confined message for ever), or when one of the
        message's origin's channels is stranded and the message was sent at or after the first message still
        in it (a sequencer never orders what waits behind it, so no site delivers it)."""
        if self._stuck is None:
            self._stuck = self._stuck_since()
        sites, since = self._stuck
        t = since.get(send["origin"])
        return site in sites or (t is not None and float(send["at"]) >= t)

    def _stuck_since(self) -> tuple[frozenset[str], dict[str, float]]:
        """The sites a stranded channel leads to, and per origin of one the send time of the first message
        that never left it."""
        stranded = self.stranded()
        got = {(s, d.msg_id) for s, ds in self.h.deliveries.items() for d in ds}
        since: dict[str, float] = {}
        for o, x in stranded:
            first = self.blocked[(o, x)][-1][0]
            for send in self.h.sends.values():
                if send["origin"] == o and x in self.h.dests_of(send) and (x, send["msg_id"]) not in got:
                    first = min(first, float(send["at"]))
            since[o] = min(since.get(o, first), first)
        return frozenset(s for _, s in stranded), since

    def joined_within(self, allowed: frozenset[str], a: str, b: str) -> Timeline:
        """Are ``a`` and ``b`` joined through the live sites of ``allowed`` only (UP or not), over time?"""
        table = self._within.get(allowed)
        if table is None:
            table = self._within[allowed] = _reach_within(self.h, self.links, allowed,     # type: ignore[arg-type]
                                                          self.settled)
        return table[(a, b) if a < b else (b, a)]


def _not_up(tl: Timeline, t1: float, t2: float) -> list[tuple[float, float]]:
    """The parts of ``[t1, t2]`` during which ``tl`` is not UP."""
    out: list[tuple[float, float]] = []
    start = t1 if tl.at(t1) != UP else None
    for t, v in tl.changes(t1, t2):
        if v != UP and start is None:
            start = t
        elif v == UP and start is not None:
            out.append((start, t))
            start = None
    if start is not None:
        out.append((start, t2))
    return out


def _reach_within(h: History, links: LinkTimeline, allowed: frozenset[str], settled: float = 0.0
                  ) -> dict[Channel, Timeline]:
    """Per pair of ``allowed``: UP while a path of at most ``max_hops`` up links among its live sites joins them
    (``settled``: only links up, and sites running, for that long count: the time they take to connect)."""
    hops = links.max_hops or 1
    members = sorted(s for s in allowed if s in h.alive)
    changes = [*links.change_times, *(t for s in members for t in h.alive[s].times)]
    times = sorted({0.0, *changes, *(t + settled for t in changes if settled)})

    def usable(a: str, b: str, t: float) -> bool:
        tl = links.link(a, b)
        return tl.at(t) == UP and (not settled or tl.constant(max(0.0, t - settled), t, UP))

    def running(x: str, t: float) -> bool:
        tl = h.alive[x]
        if not settled:
            return bool(tl.at(t))
        t0 = max(0.0, t - settled)
        return bool(tl.at(t0)) and not tl.changes(t0, t)

    out = {(a, b): Timeline(None) for i, a in enumerate(members) for b in members[i + 1:]}
    last: dict[Channel, str] = {}
    for t in times:
        live = [x for x in members if running(x, t)]
        reach = hop_reach(live, functools.partial(usable, t=t), hops)
        for a, b in out:
            v = UP if a in reach and b in reach[a] else "apart"
            if last.get((a, b)) != v:
                out[(a, b)].set(t, v)
                last[(a, b)] = v
    return out


__all__ = ["Confinement", "allowed_sites"]
