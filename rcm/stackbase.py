"""What the files of ``SiteStack`` share: its state, declared once, and the calls across them.

``SiteStack`` (``rcm.stack``) is one object in several files by concern:
``rcm.stack`` (public events, the connection manager glue, durability),
``rcm.inbound`` (frames in), ``rcm.paths`` (frames out, on each channel's
path), ``rcm.multicast`` (local sends, the ordering protocol's inputs and
outputs) and ``rcm.repairing`` (retention and repair). Each part derives from
``StackBase``, so a type checker sees the whole object's state from any part,
and the few methods one part calls in another are declared here with their
signatures (only for the type checker: at run time the methods are the
parts' own).
"""
from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from contracts.mission import RcmSettings
    from ordering.base import OrderingProtocol, Output

    from . import records
    from .actions import Action
    from .connman import Effect
    from .handshake import Terms
    from .linkstate import Advert, LinkState
    from .peer import Conn, Peer
    from .relay import Path, Routed
    from .repair import Repair
    from .retention import Retention


class StackBase:
    """The state of a ``SiteStack`` (assigned in ``SiteStack.__init__``)."""

    if TYPE_CHECKING:
        site: str
        sites: list[str]
        settings: RcmSettings
        incarnation: int
        boot: int
        mission: str
        msg_seq: int
        ordering: OrderingProtocol
        peers: dict[str, Peer]
        conns: dict[Hashable, Conn]
        terms: Terms
        durable: bool
        undelivered: dict[tuple[str, int], tuple[Any, bytes]]
        precedence: dict[tuple[str, int], str]
        delivered_local: int
        max_handshaking: int
        hello_max_frame: int
        handshakes_refused: int
        exhausted_log_at: float
        forged_log_at: float
        _handshake_log_at: float
        _handshake_log_count: int
        _out: list[Action]
        _tx: dict[Hashable, list[bytes]]
        _dials: int
        # relaying
        relaying: bool
        links: LinkState
        index: dict[str, int]
        announce_gen: int
        rto_base: float
        rto_max: float
        relay_forwarded: int
        relay_dropped: int
        advert_bytes: int
        _next_hops: dict[str, str]
        _routes_dirty: bool
        _db_due: list[Hashable]
        _usable: set[str]
        _advert_due: float
        # retention and repair
        retention: Retention
        repair: Repair | None

        # rcm.stack
        def _finish(self, now: float) -> list[Action]: ...
        def _effects(self, p: Peer, effects: list[Effect], now: float) -> None: ...
        def _persist(self, record: records.Record) -> None: ...
        def _offer_reliable(self, p: Peer, kind: int, body: Any, lane: int | None = None) -> bool: ...
        def _write(self, c: Conn, frame: list[Any]) -> None: ...
        def _write_bytes(self, c: Conn, data: bytes) -> None: ...
        def _close(self, c: Conn, reason: str, bye: bool, incompatible: bool = False) -> None: ...
        def _drop(self, c: Conn, reason: str, now: float, bye: bool = False,
                  incompatible: bool = False) -> None: ...
        def _detach(self, c: Conn, now: float) -> None: ...

        # rcm.multicast
        def _ordering_outputs(self, outputs: Sequence[Output], now: float) -> None: ...
        def _order_received(self, origin: str, seq: int, header: Any, payload: bytes,
                            now: float) -> list[Output]: ...

        # rcm.inbound
        def _accept(self, p: Peer, now: float, link_seq: int | None) -> None: ...
        def _held_announcement(self, p: Peer, now: float) -> None: ...

        # rcm.multicast
        def _offer_missed(self, p: Peer, now: float) -> None: ...

        # rcm.repairing
        def _kept(self, origin: str, seq: int, key: tuple[Any, ...], payload: bytes, now: float,
                  repaired: bool = False, precedence: str = ...) -> bool: ...
        def _repair_missing(self, origin: str, missed: list[list[int]], now: float) -> None: ...
        def _repair_status(self, p: Peer, now: float) -> None: ...
        def _repair_in(self, p: Peer, kind: int, body: Any, now: float, link_seq: int | None = None) -> None: ...

        # rcm.paths
        def _pump(self, p: Peer, now: float, fwd: tuple[int, list[int]] | None = None) -> None: ...
        def _acked(self, p: Peer, upto: int, now: float) -> None: ...
        def _send_ack(self, p: Peer, now: float, flags: int = 0) -> None: ...
        def _write_routed(self, hop: str, r: Routed, now: float) -> bool: ...
        def _service(self, hop: Peer, now: float) -> None: ...
        def _lane_for(self, p: Peer, lane: int | None) -> int | None: ...
        def _resend(self, p: Peer, now: float) -> None: ...
        def _flood(self, ad: Advert, but: Sequence[Hashable] = ()) -> None: ...
        def _path(self, p: Peer) -> Path | None: ...
        def _send_frame(self, p: Peer, frame: list[Any], now: float, tail: Any = None) -> bool: ...
        def _send_routed(self, dest: Peer, r: Routed, now: float) -> bool: ...
        def _multicast(self, live: list[str], links: dict[str, int], seq: int, header: Any, payload: bytes,
                       now: float) -> None: ...
