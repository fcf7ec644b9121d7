"""The pacing layer: which frame a paced link writes next, and when (sans-IO).

Theory of operation (``rcm.channels.lanes`` has the primitives and the long form)
------------------------------------------------------------------------
A neighbour whose link is paced (``[sites.A.rate]``) has a ``Pacer`` (a token
bucket in time, with the ``LaneShare`` of its urgent and ordered lanes) and a
``ForwardQueue`` (frames this site relays for other origins, written by the
same pacer). A channel whose route crosses a paced link beyond its first hop
has a ``RouteLimit``. This layer owns them all and decides; the channel layer
executes: at each turn it asks ``choose`` which frame goes next on a
neighbour's link (a numbered frame to write again, the head of a channel's
lane, or a relayed frame), writes it, and says how many bytes went
(``wrote``); the shares are kept here. Every byte written to a paced
neighbour, heartbeats and acks included, is charged (``charge``) and the
pacer settles at the end of each batch (``settle``). What crossed the link
differs from what the stack wrote (link compression takes some off, a TLS
record adds 22 B to every write): the edge reports the difference each time
it writes (``adjust``), so a pacer counts the link's bytes and a paced link
is neither left idle by compression nor overrun by record overhead.

A channel offers its hop two classes: the urgent lanes (FLASH, IMMEDIATE) and
the ordered lane; while both have frames waiting the urgent class takes at
most its share of the bytes, relayed frames taking part by the lane of their
stream's head; a channel paced to its route keeps the same share within its
own stream. LATEST frames (``rcm.latest``) take part in the ordered class: when
it is that class's turn and the link is idle, they share it with the ordered
lane byte for byte (``LatestTurn``).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rcm.channels import fragments, lanes
from rcm.channels.lanes import ForwardQueue, Pacer, RouteLimit, Stub
from rcm.channels.p2p import OutboundChannel
from rcm.connman import SLOW_LINK_BPS, slow_link
from rcm.routing.relay import Direct, Path, Relay


@dataclass(frozen=True, slots=True)
class Resend:
    """Write ``peer``'s next numbered frame again (a resend goes first, outside the share)."""

    peer: str


@dataclass(frozen=True, slots=True)
class LaneFrame:
    """Write the head of ``peer``'s highest lane from ``floor`` down."""

    peer: str
    floor: int
    urgent: bool
    contended: bool          # both classes had frames waiting at the hop
    both_in_stream: bool     # the channel itself had both (its route's share)
    latest_waited: bool = False   # a LATEST frame could have gone instead (their share)


@dataclass(frozen=True, slots=True)
class Forwarded:
    """Write the next relayed frame waiting for the hop, of lane ``floor`` or below."""

    floor: int
    urgent: bool
    contended: bool
    latest_waited: bool = False


@dataclass(frozen=True, slots=True)
class LatestTurn:
    """Write the hop's next LATEST frame (``rcm.latest``)."""

    contended: bool          # urgent frames waited too
    shared: bool             # the ordered lane had frames waiting (their share)


Choice = Resend | LaneFrame | Forwarded | LatestTurn


LINGER_SECONDS = 0.25
"""The least a write with nothing urgent in it may wait on a slow link for later writes to join it: about one
fragment's link time (``fragments.FRAGMENT_SECONDS``); each write it saves is a TLS record (22 B) and, on a
radio, a packet (~40 B of IP/TCP headers), a fifth of a second of a 2.4 kbit/s link together."""
LINGER_BYTES = 300
"""On the slowest links a write may wait as long as the link takes to carry this many bytes (1 s at 2.4 kbit/s,
0.5 s at 4.8, ``LINGER_SECONDS`` from 9.6 kbit/s on): about five writes' overhead. ``bench/hf.py`` (2.4 kbit/s,
60-character lines): 0.25 -> 1 s took the TLS records per message copy from 3.3 to 2.2 and the bytes per copy
from 124 to 93, FLASH never waiting (docs/rcm.md, "Lingering")."""
RATIO_WRITE = 256
"""Writes of at least this many stack bytes tell the pacer what a stack byte costs on the link (``Pacing.adjust``)."""
RATIO_FLOOR = 0.1
"""The least a stack byte is charged at, however well the link compresses."""
LINGER_BELOW_BPS = SLOW_LINK_BPS
"""Links paced slower than this linger: the slow links of ``rcm.connman.slow_link``."""


class Pacing:
    """Pacers, forwarding queues and route limits of one site (see the module docstring)."""

    def __init__(self, paced: Mapping[str, int]) -> None:
        """``paced``: neighbour -> bits per second this site writes to it."""
        self.pacers = {p: Pacer(bps) for p, bps in paced.items()}
        self.forwards = {p: ForwardQueue() for p in paced}
        self.turn = {p: False for p in paced}     # a tie of lanes goes to the relayed frame, then to our own
        self.limits: dict[str, RouteLimit] = {}    # channels relayed over a paced link beyond the first hop

    # -- state the channel layer asks about --------------------------------------------------------
    def paced(self, hop: str) -> bool:
        return hop in self.pacers

    def rate(self, hop: str) -> int | None:
        """Bits per second this site writes to neighbour ``hop`` (None: unpaced)."""
        pacer = self.pacers.get(hop)
        return None if pacer is None else pacer.rate

    def limited(self, peer: str) -> bool:
        return peer in self.limits

    def laned(self, peer: str, path: Path | None) -> bool:
        """Do a laned channel's new frames wait in lanes, numbered when written? While its path crosses a
        paced link, or it has no path yet (the next may); on an unpaced path they are numbered at once, so
        that a multicast crosses each link once."""
        if isinstance(path, Direct):
            return peer in self.pacers
        if isinstance(path, Relay):
            return path.hop in self.pacers or peer in self.limits
        return True

    def may_write(self, peer: str, out: OutboundChannel, now: float) -> bool:
        """Does ``peer``'s route let its channel write a frame now (``rcm.channels.lanes.RouteLimit``)?"""
        limit = self.limits.get(peer)
        return limit is None or limit.ready(out.in_flight(), now)

    def ready(self, hop: str, now: float) -> bool:
        """May the link to ``hop`` take a frame now (always, when it is not paced)?"""
        pacer = self.pacers.get(hop)
        return pacer is None or pacer.ready(now)

    def idle(self, hop: str, now: float) -> bool:
        """Is the link to ``hop`` idle, so that a LATEST frame may go (always, when it is not paced)?"""
        pacer = self.pacers.get(hop)
        return pacer is None or pacer.idle(now)

    def idle_at(self, hop: str) -> float | None:
        """When the link to paced ``hop`` is idle again (None: not paced)."""
        pacer = self.pacers.get(hop)
        return pacer.free_at if pacer is not None else None

    def linger(self, hop: str) -> float:
        """How long a write to ``hop`` that nothing urgent is in may wait for later ones to join it: on a
        paced link slower than ``LINGER_BELOW_BPS``, ``LINGER_SECONDS`` or the link time of ``LINGER_BYTES``
        if longer; else 0 (``rcm.channels.connections``)."""
        pacer = self.pacers.get(hop)
        if pacer is None or not slow_link(pacer.rate):
            return 0.0
        return max(LINGER_SECONDS, LINGER_BYTES * 8 / pacer.rate)

    def fragment_size(self, hop: str) -> int | None:
        """The largest piece of a frame written to paced ``hop`` (``rcm.channels.fragments``); None: not paced."""
        pacer = self.pacers.get(hop)
        return fragments.fragment_size(pacer.rate) if pacer is not None else None

    def set_route(self, peer: str, rate: int | None) -> None:
        """``peer``'s route now crosses a paced link of ``rate`` beyond its first hop (None: it does not)."""
        if rate is None:
            self.limits.pop(peer, None)
        elif peer not in self.limits or self.limits[peer].rate != rate:
            self.limits[peer] = RouteLimit(rate)

    # -- choosing, and accounting for what was written -------------------------------------------
    def choose(self, hop: str, chans: Mapping[str, OutboundChannel], now: float, latest: bool = False
               ) -> Choice | None:
        """What the link to ``hop`` writes next of ``chans`` (the laned channels written through it), of
        the frames relayed through it and (``latest``: one waits) of its LATEST frames; None when nothing
        may go now (a LATEST frame whose turn it is waits for the link to be idle)."""
        resend, best = self._candidates(chans, now)
        if resend is not None:
            return Resend(resend)
        fwd = self.forwards.get(hop)
        relayed: list[tuple[int, int] | None] = ([fwd.head(), fwd.head(lanes.ORDERED_LANE)]
                                                 if fwd is not None else [None, None])
        if relayed[0] is not None and relayed[0][0] == lanes.ORDERED_LANE:
            relayed[0] = None
        waits = [best[c] is not None or relayed[c] is not None for c in (0, 1)]
        ordered = waits[1]
        waits[1] = ordered or latest
        if not (waits[0] or waits[1]):
            return None
        pacer = self.pacers.get(hop)
        urgent = pacer.share.urgent_next(*waits) if pacer is not None else waits[0]
        if not urgent and latest and (not ordered or pacer is None or pacer.latest.urgent_next(True, True)):
            # Their turn: a LATEST frame goes once the link is idle (the ordered lane does not take it meanwhile).
            return LatestTurn(waits[0], ordered) if pacer is None or pacer.idle(now) else None
        mine, theirs = best[0 if urgent else 1], relayed[0 if urgent else 1]
        tie = theirs is not None and mine is not None and theirs[0] == mine[0]
        turn = self.turn.get(hop, False)
        # A relayed frame going in pieces takes its turn whole: the pieces go one after the other, as the
        # whole frame would (a FLASH still passes them: it is not of their lane).
        cutting = fwd is not None and theirs is not None and theirs[0] in fwd.cutting
        take_relayed = theirs is not None and (mine is None or theirs[0] < mine[0] or (tie and (turn or cutting)))
        if tie and not cutting:
            self.turn[hop] = not take_relayed     # turn about
        floor = 0 if urgent else lanes.ORDERED_LANE
        contended = waits[0] and waits[1]
        latest_waited = latest and not urgent
        if take_relayed:
            return Forwarded(floor, urgent, contended, latest_waited)
        assert mine is not None
        q = chans[mine[1]]
        both = q.next_lane() != lanes.ORDERED_LANE and q.next_lane(lanes.ORDERED_LANE) is not None
        return LaneFrame(mine[1], floor, urgent, contended, both, latest_waited)

    def wrote(self, hop: str, choice: LaneFrame | Forwarded | LatestTurn, n: int) -> None:
        """``n`` bytes went on the link to ``hop`` for ``choice``: the shares of the link and the route."""
        pacer = self.pacers.get(hop)
        if isinstance(choice, LatestTurn):
            if pacer is not None:
                pacer.share.wrote(False, n, choice.contended)
                pacer.latest.wrote(True, n, choice.shared)
            return
        if isinstance(choice, LaneFrame):
            limit = self.limits.get(choice.peer)
            if limit is not None:
                limit.pacer.share.wrote(choice.urgent, n, choice.both_in_stream)
        if pacer is not None:
            pacer.share.wrote(choice.urgent, n, choice.contended)
            if not choice.urgent:
                pacer.latest.wrote(False, n, choice.latest_waited)

    def wrote_on_route(self, peer: str, n: int, now: float) -> None:
        """``n`` bytes (about) of ``peer``'s channel went on its route (its route limit's pacer)."""
        limit = self.limits.get(peer)
        if limit is not None:
            limit.wrote(n, now)

    def charge(self, hop: str, n: int) -> None:
        """``n`` bytes were written to neighbour ``hop`` in the current event (anything: heartbeats too),
        charged at what the link's large writes recently took per stack byte (``adjust``)."""
        pacer = self.pacers.get(hop)
        if pacer is not None:
            est = round(n * pacer.ratio)
            pacer.charge(est)
            pacer.est_owed += est
            pacer.plain_owed += n

    def adjust(self, hop: str, sent: int, plain: int, now: float) -> None:
        """A write put ``sent`` bytes on the link to ``hop`` for ``plain`` of the stack's (link compression,
        TLS records; the edge reports each write, ``SiteStack.wire_sent``): charge the difference from what
        ``charge`` counted for them at once, so the pacer counts the link's bytes, not the stack's.

        ``charge`` counts a stack byte at ``ratio``, link bytes per stack byte of the last writes of at
        least ``RATIO_WRITE`` stack bytes (a small write is mostly a record's fixed overhead, charged here
        when it is known): a write held at the edge for later ones to join it (``linger``) is then charged
        about what it will cost, where at the stack's size the link stood idle for the difference, too late
        to give back when the edge reported it (``bench/paced_drain.py``)."""
        pacer = self.pacers.get(hop)
        if pacer is None:
            return
        pacer.settle(now)
        est = 0
        if plain and pacer.plain_owed:
            part = min(plain, pacer.plain_owed)
            est = round(pacer.est_owed * part / pacer.plain_owed)
            pacer.est_owed -= est
            pacer.plain_owed -= part
            if plain >= RATIO_WRITE:
                pacer.ratio = min(1.0, max(RATIO_FLOOR, (pacer.ratio + sent / plain) / 2))
        extra = sent - est
        if extra < 0:       # give back at most the link time still ahead: what already left is gone
            extra = max(extra, -int(max(0.0, pacer.free_at - now) * pacer.rate / 8))
        if extra:
            pacer.charge(extra)
            pacer.settle(now)

    def connection_gone(self, hop: str) -> None:
        """The connection to ``hop`` is gone: bytes charged to it that were never written are not reported,
        and the next one starts new compression contexts, which shrink a stack byte less at first: charge
        at face value until its own large writes say otherwise (with the last connection's cost, the first
        writes after a link came back overfilled it, and a FLASH relayed over it waited behind them:
        ``bench/precedence.py --relay``)."""
        pacer = self.pacers.get(hop)
        if pacer is not None:
            pacer.est_owed = pacer.plain_owed = 0
            pacer.ratio = 1.0

    def settle(self, now: float) -> None:
        """End of a batch: the links are busy for what was written."""
        for pacer in self.pacers.values():
            pacer.settle(now)

    # -- relayed frames waiting for a paced neighbour ---------------------------------------------
    def push_forward(self, hop: str, origin: str, lane: int, data: bytes, entries: int,
                     stub: Stub | None = None) -> bool:
        """Queue a relayed frame for paced ``hop``; False (counted) if it does not fit. ``stub``: when its message
        expires, and how to make the stub that goes instead after that (``rcm.wire.envelope``)."""
        return self.forwards[hop].push(origin, lane, data, entries, stub)

    def push_forward_all(self, hop: str, origin: str, lane: int, frames: list[tuple[bytes, int, Stub | None]]) -> bool:
        """Queue the pieces of one relayed frame for paced ``hop``, all or none (``ForwardQueue.push_all``)."""
        return self.forwards[hop].push_all(origin, lane, frames)

    def pop_forward(self, hop: str, floor: int, now: float | None = None) -> tuple[bytes, int]:
        return self.forwards[hop].pop(floor, now)

    def forwarding(self) -> list[str]:
        """Paced neighbours with relayed frames waiting."""
        return [hop for hop, q in self.forwards.items() if q.streams]

    def clear_forward(self, hop: str) -> int:
        """The connection to ``hop`` is gone: its relayed frames go (their origins resend); how many
        destinations they carried."""
        q = self.forwards.get(hop)
        return q.clear() if q is not None else 0

    # -- deadlines ------------------------------------------------------------------------------------
    def ready_at(self, hop: str | None, peer: str, out: OutboundChannel, hop_heard: bool) -> float | None:
        """When ``peer``'s waiting frames may be written through ``hop``, if time is what they wait for:
        None when they go at once (nothing paces them) or wait for something else (a silent link, an
        acknowledgement)."""
        if hop is None:
            return None
        pacer = self.pacers.get(hop)
        if pacer is not None and not hop_heard:
            return None
        at = pacer.ready_at() if pacer is not None else None
        limit = self.limits.get(peer)
        if limit is not None:
            if not limit.open(out.in_flight()):
                return None         # a full window opens with an acknowledgement
            at = limit.pacer.ready_at() if at is None else max(at, limit.pacer.ready_at())
        return at

    def after_latest(self, hop: str, at: float, latest: bool, forwarded: bool = False) -> float:
        """When an ordered frame (``forwarded``: the relayed frame at the head of ``hop``'s queue) ready at
        ``at`` may go, given whether a LATEST frame waits for ``hop``: when it is LATEST's turn the ordered
        lane waits for it, and it for the link to be idle (``choose``)."""
        pacer = self.pacers.get(hop)
        if not latest or pacer is None or not pacer.latest.urgent_next(True, True):
            return at
        if forwarded:
            head = self.forwards[hop].head()
            if head is None or head[0] != lanes.ORDERED_LANE:
                return at
        return max(at, pacer.free_at)

    def forward_ready_at(self, hop: str) -> float | None:
        q = self.forwards.get(hop)
        return self.pacers[hop].ready_at() if q is not None and q.streams else None

    def peer_stats(self, peer: str) -> dict[str, Any]:
        pacer, fwd, limit = self.pacers.get(peer), self.forwards.get(peer), self.limits.get(peer)
        return {"paced_bytes": pacer.bytes if pacer is not None else None,
                "forward_queued": len(fwd) if fwd is not None else None,
                "forward_dropped": fwd.dropped if fwd is not None else None,
                "route_rate": limit.rate if limit is not None else None}

    # -- internals --------------------------------------------------------------------------------------
    def _candidates(self, chans: Mapping[str, OutboundChannel], now: float
                    ) -> tuple[str | None, list[tuple[int, str] | None]]:
        """A channel with a numbered frame to write again (it goes first), or none and the best
        (lane, channel) of each class, urgent and ordered, among ``chans`` that may write now."""
        best: list[tuple[int, str] | None] = [None, None]
        for name, out in chans.items():
            if not self.may_write(name, out, now):
                continue
            offers = self._offers(name, out)
            if offers is None:
                return name, best
            for cls, ln in enumerate(offers):
                cand = best[cls]
                if ln is not None and (cand is None or ln < cand[0]):
                    best[cls] = (ln, name)
        return None, best

    def _offers(self, name: str, out: OutboundChannel) -> tuple[int | None, int | None] | None:
        """The lanes a channel offers its hop now, (urgent, ordered), either None; None when it has a
        numbered frame to write again first. A channel paced to its route keeps the urgent share within its
        own stream: when it is the ordered lane's turn there, it offers only that."""
        ln = out.next_lane()
        if ln is not None and ln < 0:
            return None
        if ln is None or ln == lanes.ORDERED_LANE:
            return None, ln
        ordered = out.next_lane(lanes.ORDERED_LANE)
        limit = self.limits.get(name)
        if limit is not None and not limit.pacer.share.urgent_next(True, ordered is not None):
            return None, ordered
        return ln, ordered
