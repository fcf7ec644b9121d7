"""The repair layer: what this site keeps of its deliveries, and the anti-entropy that fetches what it missed.

``rcm.repair.retention`` keeps what this site delivered; ``rcm.repair.antientropy`` decides what
to ask and serve. This service owns both and answers the stack with effects:
``Offer`` (a repair frame to put in a peer's channel, as a reliable frame of
the ordered lane, so it takes the channel's path and is acknowledged, resent
and logged like any) and ``Repaired`` (a message to deliver late and
repaired, beside the ordering protocol, which never sees it). Every delivery,
repaired or not, passes ``keep`` first: it is retained, leaves the wants, and
is delivered at most once whichever way it came.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from contracts.mission import RcmSettings
from contracts.precedence import DEFAULT
from rcm import ranges
from rcm.durability import records
from rcm.repair.antientropy import Offer, Repair
from rcm.repair.frames import Repaired
from rcm.repair.retention import Retention


class RepairService:
    """Retention and repair of one site (see the module docstring)."""

    def __init__(self, site: str, sites: list[str], settings: RcmSettings, now: float) -> None:
        self.retention = Retention(settings.retention, settings.retention_bytes)
        self.repair = (Repair(site, sites, self.retention, settings.repair_period, settings.repair_rate,
                              settings.max_payload_bytes, now)
                       if settings.repair and settings.p2p == "robust" else None)

    def keep(self, origin: str, seq: int, key: tuple[Any, ...], payload: bytes, now: float,
             repaired: bool = False, precedence: str = DEFAULT, expires_at: float | None = None,
             expired: bool = False, reach: int | None = None) -> bool:
        """A delivery is about to go up: keep it (confined to ``reach``), and say whether it goes up.

        A repaired message goes up only if it was not delivered here already (any way); one from
        the ordering protocol only if it was not repaired already. (A protocol that delivered a
        message twice would still show it twice: that is the protocol's bug, for the checkers.)
        """
        if not self.retention.add(origin, seq, key, payload, now, repaired, precedence, expires_at, expired, reach):
            held = self.retention.get(origin, seq)
            if repaired or (held is not None and held.repaired):
                return False
        if self.repair is not None:
            self.repair.delivered(origin, seq)
        return True

    def missing(self, origin: str, missed: list[list[int]], now: float) -> list[Offer]:
        return self.repair.missing(origin, missed, now) if self.repair is not None else []

    def status(self, peer: str, connected: bool, now: float) -> list[Offer]:
        return self.repair.status(peer, connected, now) if self.repair is not None else []

    def frame(self, peer: str, parsed: tuple[int, Any], now: float) -> tuple[list[Offer], Repaired | None]:
        """A SUMMARY, FETCH or REPAIR from ``peer``, decoded (``rcm.stack.frames``) as (kind, parsed body);
        with repair off here, it is ignored."""
        if self.repair is None:
            return [], None
        return self.repair.take(peer, parsed, now)

    def tick(self, now: float) -> list[Offer]:
        self.retention.expire(now)
        return self.repair.tick(now) if self.repair is not None else []

    def serving(self) -> bool:
        return self.repair is not None and self.repair.serving_any()

    def serve(self, now: float, backlog: dict[str, int],
              open_within: Callable[[str, int], bool] | None = None) -> list[Offer]:
        """Repair frames for what peers asked, within each one's rate and window (``backlog``: unacked frames;
        ``open_within(peer, mask)``: a way to the peer within a confined message's sites now)."""
        return self.repair.serve(now, backlog, open_within) if self.repair is not None else []

    def next_deadline(self) -> float | None:
        ds = [d for d in (self.retention.next_expiry(),
                          self.repair.next_deadline() if self.repair is not None else None) if d is not None]
        return min(ds) if ds else None

    def restore(self, kept: dict[tuple[str, int], records.KeptMessage],
                wants: dict[str, list[list[int]]], delivered: dict[tuple[str, int], Any], now: float) -> None:
        """What the log says was kept and wanted (``rcm.stack.recovery``); a want delivered since is no want."""
        for (origin, seq), k in kept.items():
            self.retention.add(origin, seq, k.key, k.payload, now if k.at is None else k.at, k.repaired,
                               k.precedence, k.expires_at, k.expired, k.reach)
        if self.repair is None:
            return
        for origin, wanted in wants.items():
            held = [[s, s] for (o, s) in delivered if o == origin]
            left = ranges.subtract(ranges.normalize(wanted), ranges.normalize(held))
            self.repair.restore_wants(origin, ranges.subtract(left, self.retention.held.get(origin, [])))

    def records(self) -> list[records.Record]:
        """Retained messages and wants, for a compacted log."""
        out: list[records.Record] = list(self.retention.records())
        if self.repair is not None:
            out += [records.Wanted(o, [list(r) for r in w]) for o, w in sorted(self.repair.wants.items())]
        return out

    def stats(self) -> dict[str, Any]:
        return {"retention": self.retention.stats(),
                "repair": self.repair.stats() if self.repair is not None else None}
