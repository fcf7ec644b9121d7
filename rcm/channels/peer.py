"""What a ``SiteStack`` keeps per connection and per peer.

A ``Conn`` is one TCP connection, from accept or dial to close: its frame
decoder, what its HELLO said, and the per-connection bases of the wire's
delta encodings. A ``Peer`` is one remote site for the life of the stack: its
connection manager (``rcm.connman``), the two halves of its point-to-point
channel (``rcm.channels.p2p``, ``rcm.channels.receiving``), the connection
currently adopted for it, the sends it skipped while disconnected, and
counters for ``stats``.
"""
from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

from rcm import ranges, wire
from rcm.channels.p2p import OutboundChannel
from rcm.channels.receiving import InboundChannel
from rcm.connman import PeerConnection
from rcm.routing.relay import RelayState

MISSED_RANGES_MAX = 4096
"""Most separate ranges of skipped sends kept per peer (``rcm.ranges.add``)."""


@dataclass(slots=True)
class Conn:
    id: Hashable
    dialed_peer: str | None          # the site we dialed, None if we accepted
    decoder: wire.FrameDecoder
    opened_at: float
    identity: tuple[str, str] | None = None   # (site, mission) proven by a TLS certificate
    peer_boot: int = 0
    dial_seq: int = 0                # which dial of its dialer this connection is
    peer: str | None = None          # known after the peer's HELLO
    open: bool = False               # handshake complete and adopted
    tx_msg_base: int = 0             # last msg_seq written (DATA deltas)
    rx_msg_base: int = 0             # last msg_seq read
    tx_ack_base: int = 0             # last ack written (ack deltas)
    rx_ack_base: int = 0             # last ack read
    tx_next: int = 1                 # link seq the next reliable frame written here has (after SYNC)
    fragments: Any = None            # partial frames received in pieces (``rcm.channels.fragments.Reassembly``)

    def dialer(self, me: str) -> str:
        """The site that dialed this connection (known once the HELLO is taken)."""
        return me if self.dialed_peer is not None else self.peer  # type: ignore[return-value]

    def who(self) -> str:
        """The peer as far as it is known, for reasons and logs."""
        return self.peer or (self.dialed_peer and f"{self.dialed_peer}?") or "unidentified peer"


@dataclass(slots=True)
class Peer:
    name: str
    cm: PeerConnection
    out: OutboundChannel
    inb: InboundChannel
    conn: Hashable | None = None
    missed: list[list[int]] = field(default_factory=list)   # skipped sends, as [first, last] ranges
    bytes_in: int = 0
    bytes_out: int = 0
    frames_in: int = 0
    frames_out: int = 0
    delivered: int = 0
    late: int = 0
    refused_connections: int = 0
    last_refusal: str = ""
    relay: RelayState = field(default_factory=RelayState)
    refusal_log: tuple[str, float, int] = ("", float("-inf"), 0)   # last reason logged, when, since
    fragments_out: int = 0           # FRAG pieces written (``rcm.channels.fragments``)
    fragments_in: int = 0

    def missed_send(self, seq: int) -> None:
        """Our message ``seq`` skipped this peer (disconnected): it will be told in a MISSED frame."""
        ranges.add(self.missed, seq, MISSED_RANGES_MAX)

    def refused(self, reason: str) -> None:
        """A connection with this peer was refused (by either end)."""
        self.refused_connections += 1
        self.last_refusal = reason

    def refused_us(self, reason: str) -> None:
        """The peer answered our dial with a refusal."""
        self.last_refusal = reason

    def stats(self) -> dict[str, Any]:
        s = self.out.stats
        return {
            "status": self.cm.status.value, "tcp": self.cm.tcp.value,
            "sent": s.sent, "transmitted": s.transmitted, "resent": s.resent, "acked": s.acked,
            "lost": s.lost, "stubbed": s.stubbed, "withheld": s.withheld,
            "buffered": len(self.out), "buffered_bytes": self.out.bytes, "bytes_in": self.bytes_in,
            "bytes_out": self.bytes_out, "frames_in": self.frames_in, "frames_out": self.frames_out,
            "delivered": self.delivered, "late": self.late, "duplicates": self.inb.duplicates,
            "frontier": self.inb.frontier, "acked_upto": self.out.acked,
            "gaps": self.inb.gaps, "refused_connections": self.refused_connections,
            "last_refusal": self.last_refusal, "queued": self.out.queued,
            "fragments_out": self.fragments_out, "fragments_in": self.fragments_in,
            **self.relay.counters,
        }
