"""Relaying what other sites route through this one: their ROUTED frames on to each entry's next hop.

Part of the channel layer (``rcm.channels.layer``), kept apart because it is this
site's duty to others rather than its own channels: a ROUTED frame's entries
for other destinations go on, grouped by this site's next hop towards each
(``rcm.routing.router``), as one frame per next hop with one more hop counted; an
entry past ``max_hops``, one without a route, and one that would go back
where it came from are dropped (their origins resend). To a paced neighbour
they wait in its forwarding queue (``rcm.channels.pacing``), in lane order with this
site's own frames, and are counted as forwarded when written.

A confined frame (a DATA or REPAIR whose message was sent to a subset of the
sites: ``rcm.wire.envelope``) goes on only to destinations in its mask, by
next hops computed over the sites of the mask only (``Router.next_hops_within``);
with none it is dropped, and its origin resends it once a path within the
mask appears (docs/relay.md, "Confinement").

A relayed frame larger than a piece of a paced neighbour's link is queued as
its pieces (``rcm.channels.fragments``, "Relayed frames"), so a FLASH waits
at most one piece behind it.

A relayed message that expired (``rcm.wire.envelope``) before it is written on
goes on as its stub: at once when it arrived expired, from the queue when it
expired there. The relay reads only the expiry, leniently (a header it cannot
read goes as it came: its destination refuses it).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from contracts.mission import RcmSettings
from rcm import wire
from rcm.channels import fragments, lanes
from rcm.channels.connections import Connections
from rcm.channels.lanes import Stub
from rcm.channels.pacing import Pacing
from rcm.channels.peer import Peer
from rcm.repair.frames import repair_expiry, stub_repair
from rcm.routing import relay
from rcm.routing.relay import Routed
from rcm.routing.router import Router
from rcm.wire import envelope


class Forwarding:
    """What this site relays for others, and how much of it went or was dropped (see the module docstring)."""

    def __init__(self, settings: RcmSettings, peers: Mapping[str, Peer], connections: Connections, router: Router,
                 pacing: Pacing, service: Callable[[Peer, float], None]) -> None:
        """``service``: write what a paced neighbour's link may take now (``ChannelWriter.service``)."""
        self.settings = settings
        self.peers = peers
        self.connections = connections
        self.router = router
        self.pacing = pacing
        self.service = service
        self.forwarded = 0
        self.dropped = 0
        self.stubbed = 0            # relayed messages that went on as stubs (expired on arrival or in the queue)
        self.cut = 0                # relayed frames cut into pieces for a paced neighbour (rcm.channels.fragments)
        self.confined_forwarded = 0     # entries of confined frames taken on (within their masks)
        self.confined_dropped = 0       # entries naming a site outside their frame's confinement (never taken)

    def forward(self, r: Routed, entries: list[tuple[str, int]], came_from: str, now: float) -> None:
        """Other sites' entries of a ROUTED frame: on to each one's next hop (paced: behind the pacer); a
        confined frame's only to destinations in its mask, through next hops in it."""
        hops = r.hops + 1
        next_hops = self.router.next_hops_within(r.reach)
        if r.reach is not None:
            index = self.router.index
            outside = [e for e in entries if not r.reach >> index[e[0]] & 1]
            if outside:
                self.confined_dropped += len(outside)
                entries = [e for e in entries if r.reach >> index[e[0]] & 1]
            self.confined_forwarded += len(entries)
        for hop, group in relay.group_by_hop(entries, next_hops).items():
            if hops > self.settings.max_hops or hop == came_from:
                self.dropped += len(group)
                continue
            q = self.peers[hop]
            routed = r.only(group, hops)
            expires_at = _expiry(routed)
            if expires_at is not None and expires_at <= now:
                routed, expires_at = _stub(routed), None        # arrived expired: its stub goes on
                self.stubbed += 1
            if self.pacing.paced(hop) and r.kind != wire.ACK:
                frame = relay.encode(routed, self.router.index)
                data = wire.encode_frame(frame)
                lane = _relayed_lane(routed, self.settings.lanes)
                size = self.pacing.fragment_size(hop)
                if size is not None and len(data) > size:
                    pieces = self._pieces(routed, frame, lane, size, len(group), expires_at)
                    queued = q.conn is not None and self.pacing.push_forward_all(hop, r.origin, lane, pieces)
                    if queued:
                        self.cut += 1
                else:
                    stub = None
                    if expires_at is not None:
                        stub = (expires_at, partial(self._stub_bytes, routed))
                    queued = q.conn is not None and self.pacing.push_forward(hop, r.origin, lane, data, len(group),
                                                                             stub)
                if queued:
                    self.service(q, now)
                else:
                    self.dropped += len(group)
            elif q.conn is not None:
                self.connections.write(self.connections[q.conn], relay.encode(routed, self.router.index))
                q.cm.frame_sent(now)
                self.forwarded += len(group)
            else:
                self.dropped += len(group)
        self.dropped += sum(1 for d, _ in entries if d not in next_hops)

    def write(self, hop: Peer, now: float, floor: int = 0) -> None:
        """The next relayed frame waiting for paced neighbour ``hop``, of lane ``floor`` or below."""
        data, entries = self.pacing.pop_forward(hop.name, floor, now)
        if hop.conn is None:
            self.dropped += entries
            return
        if not data:
            return          # a piece of a cut frame whose message expired before its first piece: the stub went
        self.connections.write_bytes(self.connections[hop.conn], data)
        self.forwarded += entries
        hop.cm.frame_sent(now)

    def _pieces(self, routed: Routed, frame: list[Any], lane: int, size: int, entries: int,
                expires_at: float | None) -> list[tuple[bytes, int, Stub | None]]:
        stub = None if expires_at is None else (expires_at, partial(self._stub_bytes, routed))
        return cut_pieces(frame, lane, size, entries, stub)

    def _stub_bytes(self, r: Routed) -> bytes:
        """The encoded stub of relayed frame ``r`` (its message expired while it waited in a queue)."""
        self.stubbed += 1
        return wire.encode_frame(relay.encode(_stub(r), self.router.index))

    def connection_gone(self, hop: str) -> None:
        """The connection to ``hop`` is gone: what waited for it is dropped (its origins resend it)."""
        self.dropped += self.pacing.clear_forward(hop)


def cut_pieces(frame: list[Any], lane: int, size: int, entries: int,
               stub: Stub | None) -> list[tuple[bytes, int, Stub | None]]:
    """A relayed frame larger than a piece of a paced link's, as its pieces for the forward queue (``data,
    entries, stub`` each; ``rcm.channels.fragments``): the first counts its ``entries`` destinations. With
    ``stub`` (the message's expiry and its stub's encoding), a message that expired before its first piece is
    written goes as its stub instead, whole, and its other pieces then come out of the queue empty."""
    pieces = fragments.relayed_pieces(frame, lane, size)
    if stub is None:
        return [(p, entries if i == 0 else 0, None) for i, p in enumerate(pieces)]
    cut = _Cut(stub[1])
    rest: list[tuple[bytes, int, Stub | None]] = [(p, 0, (float("-inf"), partial(cut.piece, p))) for p in pieces[1:]]
    return [(pieces[0], entries, (stub[0], cut.stub)), *rest]


class _Cut:
    """A cut relayed frame whose message may expire in the queue: did its stub go instead of its pieces?"""

    __slots__ = ("make_stub", "stubbed")

    def __init__(self, make_stub: Callable[[], bytes]) -> None:
        self.make_stub = make_stub
        self.stubbed = False

    def stub(self) -> bytes:
        """The first piece's turn came after the expiry: the stub goes."""
        self.stubbed = True
        return self.make_stub()

    def piece(self, data: bytes) -> bytes:
        """A later piece's turn: nothing once the stub went instead."""
        return b"" if self.stubbed else data


def _expiry(r: Routed) -> float | None:
    """When the message a relayed DATA or REPAIR frame carries expires (None: it does not, or is a stub)."""
    if r.kind == wire.DATA:
        return envelope.expiry_of(r.body[1])
    if r.kind == wire.REPAIR:
        return repair_expiry(r.body[0])
    return None


def _stub(r: Routed) -> Routed:
    """The stub of a relayed DATA or REPAIR frame whose message expired (``_expiry`` is not None)."""
    if r.kind == wire.DATA:
        body: tuple[Any, ...] = (r.body[0], envelope.stub(r.body[1]), b"")
    else:
        body = (stub_repair(r.body[0], float("inf")),)
    return Routed(r.hops, r.origin, r.check, r.entries, r.kind, body, r.reach)


def _relayed_lane(r: Routed, lanes_on: bool) -> int:
    """The lane a relayed frame waits in: a DATA frame's precedence, else the ordered lane."""
    if r.kind == wire.DATA:
        try:
            return lanes.lane(lanes.unwrap(r.body[1])[1], lanes_on)
        except ValueError:
            pass                    # its destination refuses it; here it is just bytes to carry
    return lanes.ORDERED_LANE
