"""The stack's repair glue: retention of deliveries, repair frames in and out (mixed into ``SiteStack``).

``rcm.retention`` keeps what this site delivered; ``rcm.repair`` decides what
to ask and serve; this file connects them to the stack: repair frames enter
and leave as reliable frames of each peer's channel (so they take the
channel's path, direct or relayed, and are acknowledged, resent and logged
like any), a repaired message goes up as a ``Delivery`` flagged late and
repaired, beside the ordering protocol (which never sees it, so its state is
untouched), and every delivery, repaired or not, is kept and leaves the wants.
"""
from __future__ import annotations

from typing import Any

from contracts.precedence import DEFAULT
from contracts.status import LinkStatus

from . import lanes, records
from .actions import Delivery, Log, ProtocolViolation
from .peer import Peer
from .repair import Offer, Repair, RepairError
from .retention import Retention
from .stackbase import StackBase


class Repairing(StackBase):
    """Retention and repair (mixed into ``SiteStack``)."""

    def _repair_setup(self, now: float) -> None:
        s = self.settings
        self.retention = Retention(s.retention, s.retention_bytes)
        self.repair = (Repair(self.site, self.sites, self.retention, s.repair_period, s.repair_rate,
                              s.max_payload_bytes, now)
                       if s.repair and s.p2p == "robust" else None)

    def _kept(self, origin: str, seq: int, key: tuple[Any, ...], payload: bytes, now: float,
              repaired: bool = False, precedence: str = DEFAULT) -> bool:
        """A delivery is about to go up: keep it, and say whether it goes up.

        A repaired message goes up only if it was not delivered here already (any way); one from
        the ordering protocol only if it was not repaired already. (A protocol that delivered a
        message twice would still show it twice: that is the protocol's bug, for the checkers.)
        """
        if not self.retention.add(origin, seq, key, payload, now, repaired, precedence):
            held = self.retention.get(origin, seq)
            if repaired or (held is not None and held.repaired):
                return False
        if self.repair is not None:
            self.repair.delivered(origin, seq)
        return True

    def _repair_missing(self, origin: str, missed: list[list[int]], now: float) -> None:
        if self.repair is not None:
            self._repair_offers(self.repair.missing(origin, missed, now), now)

    def _repair_status(self, p: Peer, now: float) -> None:
        if self.repair is not None:
            self._repair_offers(self.repair.status(p.name, p.cm.status is LinkStatus.CONNECTED, now), now)

    def _repair_in(self, p: Peer, kind: int, body: Any, now: float, link_seq: int | None = None) -> None:
        """A new SUMMARY, FETCH or REPAIR frame of ``p``'s stream: checked, then counted, logged, handled."""
        offers: list[Offer] = []
        got = None
        if self.repair is not None:     # off here (a peer may still have it on): the frame is taken and ignored
            try:
                offers, got = self.repair.frame(p.name, kind, body, now)
            except RepairError as e:
                raise ProtocolViolation(str(e)) from None
        self._accept(p, now, link_seq)
        if self.durable:
            self._persist(records.ReceivedControl(p.name, p.inb.peer_incarnation, p.inb.frontier, kind, None))
        if got is not None:
            key = tuple(got.key)
            if self._kept(got.origin, got.seq, key, got.payload, now, repaired=True, precedence=got.precedence):
                self.delivered_local += 1
                if got.origin in self.peers:
                    self.peers[got.origin].delivered += 1
                    self.peers[got.origin].late += 1
                self._out.append(Delivery(got.origin, got.seq, key, True, got.payload, got.precedence,
                                          repaired=True))
        self._repair_offers(offers, now)
        self._held_announcement(p, now)

    def _repair_timer(self, now: float) -> None:
        self.retention.expire(now)
        if self.repair is not None:
            self._repair_offers(self.repair.tick(now), now)

    def _repair_serve(self, now: float) -> None:
        if self.repair is not None and self.repair.serving_any():
            backlog = {name: len(p.out) for name, p in self.peers.items()}
            self._repair_offers(self.repair.serve(now, backlog), now)

    def _repair_deadline(self) -> float | None:
        ds = [d for d in (self.retention.next_expiry(),
                          self.repair.next_deadline() if self.repair is not None else None) if d is not None]
        return min(ds) if ds else None

    def _repair_offers(self, offers: list[Offer], now: float) -> None:
        for o in offers:
            p = self.peers[o.peer]
            if p.cm.status is not LinkStatus.CONNECTED:
                continue
            # In the ordered lane on a paced link (rcm.lanes): FLASH and IMMEDIATE pass repair.
            if not self._offer_reliable(p, o.kind, o.body, lanes.ORDERED_LANE):
                self._out.append(Log("warning", f"repair frame to {o.peer} dropped: buffer full"))
                continue
            self._pump(p, now)

    def _repair_records(self) -> list[records.Record]:
        """Retained messages and wants, for a compacted log."""
        out: list[records.Record] = list(self.retention.records())
        if self.repair is not None:
            out += [records.Wanted(o, [list(r) for r in w]) for o, w in sorted(self.repair.wants.items())]
        return out

    def _repair_stats(self) -> dict[str, Any]:
        return {"retention": self.retention.stats(),
                "repair": self.repair.stats() if self.repair is not None else None}
