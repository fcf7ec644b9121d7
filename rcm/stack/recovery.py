"""Reading a site's write-ahead log back into the state its stack resumes from, and the reverse.

Theory of operation
-------------------
``replay(records, ...)`` folds the typed records of ``rcm.durability.records`` (a live
log, a compacted one, or a compacted one followed by live records) into a
``Recovered`` value: per peer, the outbound buffer and its acknowledgement,
the inbound stream and frontier, the sends it skipped and was not told of; the
highest message sequence number; the ordering protocol's snapshot; and, in log
order, the inputs to feed the ordering protocol again (every logged message,
ours included, and every reliable control body) with the set of messages
already delivered. ``SiteStack.restore`` hands each collaborator its part
through the collaborator's own ``restore`` method.

``snapshot(stack)`` is the reverse for compaction: the live state as records
(``SiteStack.snapshot_records``). Pure functions: no file, no clock.
``restore(stack, records, now)`` applies the result to a fresh ``SiteStack``.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ordering import Deliver
from rcm import ranges, wire
from rcm.actions import Log
from rcm.channels import lanes
from rcm.channels.lanes import ORDERED_LANE
from rcm.channels.p2p import OutFrame
from rcm.channels.peer import MISSED_RANGES_MAX
from rcm.durability.records import (
    Acked,
    Delivered,
    InboundFrontier,
    Kept,
    KeptMessage,
    LocalSend,
    MissedSends,
    Outbound,
    PeerStream,
    Pending,
    Received,
    ReceivedControl,
    Record,
    Snapshot,
    Wanted,
)

if TYPE_CHECKING:
    from rcm.durability.replay import DeliveryLog
    from rcm.stack import SiteStack

@dataclass(frozen=True, slots=True)
class MessageInput:
    """A logged message to give the ordering protocol again (``origin`` may be this site)."""

    origin: str
    seq: int
    header: Any
    payload: bytes


@dataclass(frozen=True, slots=True)
class ControlInput:
    """A logged reliable control body from ``peer`` to give the ordering protocol again."""

    peer: str
    body: Any


@dataclass(slots=True)
class PeerState:
    """What one peer's channel resumes from."""

    acked: int = 0                                          # our stream: acknowledged up to here
    frames: dict[int, OutFrame] = field(default_factory=dict)   # our stream: link seq -> frame
    inbound: tuple[int, int] | None = None                  # its stream: (incarnation, frontier)
    missed: list[list[int]] = field(default_factory=list)   # skipped sends, ranges (untold and told)
    missed_told: list[list[int]] = field(default_factory=list)   # ranges already queued in MISSED frames
    queued: list[OutFrame] = field(default_factory=list)    # our stream: waiting in lanes, unnumbered


@dataclass(slots=True)
class Recovered:
    msg_seq: int
    snapshot: Any
    peers: dict[str, PeerState]
    inputs: list[MessageInput | ControlInput]
    delivered: dict[tuple[str, int], tuple[tuple[Any, ...], bool]]   # (origin, seq) -> (key, late) when delivered
    # Retention (rcm.repair.retention): (origin, seq) -> what was kept (delivered at: None if unknown).
    kept: dict[tuple[str, int], KeptMessage] = field(default_factory=dict)
    wants: dict[str, list[list[int]]] = field(default_factory=dict)   # reported missing (rcm.repair.antientropy)


def _lane(header: Any, lanes_on: bool) -> int:
    """The lane a logged message waits in on a paced link (its precedence rides in its header)."""
    try:
        return lanes.lane(lanes.unwrap(header)[1], lanes_on)
    except ValueError:
        return ORDERED_LANE


def replay(records: Iterable[Record], site: str, peers: Sequence[str], msg_seq: int,
           max_frame_bytes: int, lanes_on: bool = True) -> Recovered:
    """Fold log records into what the stack resumes from (see the module docstring)."""
    state = {p: PeerState() for p in peers}
    out = Recovered(msg_seq, None, state, [], {})

    def seen(peer: str, inc: int, link_seq: int) -> None:
        st = state[peer]
        old_inc, front = st.inbound or (0, 0)
        st.inbound = (inc, max(front, link_seq) if old_inc == inc else link_seq)

    for r in records:
        if isinstance(r, LocalSend):
            out.msg_seq = max(out.msg_seq, r.seq)
            out.inputs.append(MessageInput(site, r.seq, r.header, r.payload))
            for peer, ls in r.links.items():
                if peer in state:
                    frame = OutFrame(ls, wire.DATA, r.seq, r.header, r.payload, _lane(r.header, lanes_on))
                    if ls:
                        state[peer].frames[ls] = frame
                    else:
                        state[peer].queued.append(frame)       # numbered when written (rcm.channels.lanes)
            for peer in r.skipped:
                if peer in state:
                    state[peer].missed.append([r.seq, r.seq])
        elif isinstance(r, Outbound):
            if r.peer not in state:
                continue
            st = state[r.peer]
            if r.kind == wire.DATA:
                seq, header, payload = r.body
                frame = OutFrame(r.link_seq, r.kind, seq, header, payload, _lane(header, lanes_on))
                if not r.link_seq:
                    st.queued.append(frame)
                    continue
                st.frames[r.link_seq] = frame
                # Numbered as it was written: no longer waiting in its lane.
                st.queued = [f for f in st.queued if not (f.kind == wire.DATA and f.msg_seq == seq)]
            else:
                body = r.body
                if r.kind == wire.MISSED:
                    # An older log may hold more ranges than one frame takes now.
                    body = ranges.cap(body, ranges.per_frame(max_frame_bytes))
                    st.missed_told.extend(body)
                frame = OutFrame(r.link_seq, r.kind, 0, None, body, ORDERED_LANE)
                if not r.link_seq:
                    st.queued.append(frame)
                    continue
                st.frames[r.link_seq] = frame
                if r.kind == wire.MISSED:
                    # A confined message withheld in its lane became this MISSED in place (``OutboundChannel.
                    # withhold``): its DATA, read back from its send, waits no longer. Other MISSED frames name
                    # messages no DATA waits for here.
                    st.queued = [f for f in st.queued if not (f.kind == wire.DATA and ranges.contains(body, f.msg_seq))]
                if r.kind in (wire.CTRL, wire.MISSED) or r.kind in wire.REPAIR_KINDS:
                    # Control and repair frames leave the ordered lane in the order they entered it; a MISSED waiting
                    # (a withheld one, read back from a compacted log) left the lane it was withheld in: its own.
                    first = next((i for i, f in enumerate(st.queued)
                                  if f.kind == r.kind and (r.kind != wire.MISSED or f.payload == body)), None)
                    if first is not None:
                        del st.queued[first]
        elif isinstance(r, Received):
            if r.origin in state:
                seen(r.origin, r.incarnation, r.link_seq)
            out.inputs.append(MessageInput(r.origin, r.msg_seq, r.header, r.payload))
        elif isinstance(r, ReceivedControl):
            if r.origin in state:
                seen(r.origin, r.incarnation, r.link_seq)
            if r.kind == wire.CTRL:
                out.inputs.append(ControlInput(r.origin, r.body))
            elif r.kind == wire.MISSED:
                out.wants.setdefault(r.origin, []).extend(list(x) for x in r.body)
        elif isinstance(r, PeerStream):
            if r.peer in state:
                state[r.peer].inbound = (r.incarnation, 0)
        elif isinstance(r, InboundFrontier):
            if r.peer in state:
                state[r.peer].inbound = (r.incarnation, r.frontier)
        elif isinstance(r, Acked):
            if r.peer in state:
                state[r.peer].acked = max(state[r.peer].acked, r.upto)
        elif isinstance(r, Delivered):
            out.delivered[(r.origin, r.seq)] = (tuple(r.key), bool(r.late))
            old = out.kept.get((r.origin, r.seq))
            out.kept[(r.origin, r.seq)] = KeptMessage(tuple(r.key), old.at if old else None, r.payload,
                                                      bool(r.repaired), r.precedence, r.expires_at, bool(r.expired),
                                                      r.reach if r.reach is not None else old.reach if old else None)
        elif isinstance(r, Kept):
            old = out.kept.get((r.origin, r.seq))
            out.kept[(r.origin, r.seq)] = KeptMessage(tuple(r.key), float(r.at), r.payload,
                                                      bool(old and old.repaired), r.precedence, r.expires_at,
                                                      bool(r.expired),
                                                      r.reach if r.reach is not None else old.reach if old else None)
        elif isinstance(r, Wanted):
            out.wants.setdefault(r.origin, []).extend(list(x) for x in r.ranges)
        elif isinstance(r, Snapshot):
            out.snapshot = r.ordering
            out.msg_seq = max(out.msg_seq, r.msg_seq)
        elif isinstance(r, Pending):
            out.inputs.append(MessageInput(r.origin, r.seq, r.header, r.payload))
        elif isinstance(r, MissedSends):
            if r.peer in state:
                state[r.peer].missed.extend(r.ranges)
    return out


def restore(stack: SiteStack, log: Iterable[Record], now: float) -> list[Any]:
    """Rebuild state from the write-ahead log (see ``rcm.stack.recovery``) before ``start``.

    Returns the deliveries of messages that were logged but not delivered
    before the restart (every peer is disconnected now, so they are
    delivered at once, in order-key order).
    """
    got = replay(log, stack.site, list(stack.peers), stack.msg_seq, stack.settings.max_frame_bytes,
                 stack.settings.lanes)
    for name, st in got.peers.items():
        stack.channels.restore(name, st.acked, st.frames, st.queued, st.inbound,
                               ranges.cap(ranges.subtract(ranges.normalize(st.missed),
                                                          ranges.normalize(st.missed_told)), MISSED_RANGES_MAX))
    stack.multicast.restore(got.msg_seq, got.snapshot)
    # Retention and wants first: a logged message delivered again below is then found already kept.
    stack.repairs.restore(got.kept, got.wants, got.delivered, now)
    for item in got.inputs:
        try:
            if isinstance(item, MessageInput):
                done = got.delivered.get((item.origin, item.seq))
                if done is not None:
                    stack.multicast.recovered(item.origin, item.seq, item.header, *done)
                    continue
                outs = stack.multicast.replayed(item.origin, item.seq, item.header, item.payload, now)
            else:
                outs = stack.multicast.ordering.control(item.peer, item.body, now)
        except (ValueError, TypeError, KeyError, IndexError) as e:
            # Our own log, written before the ordering protocol checked what it takes (an older version):
            # the live path would have refused it. Skipped, so that the site starts.
            who = item.origin if isinstance(item, MessageInput) else item.peer
            stack.out.append(Log("warning", f"log record from {who} skipped: the ordering "
                                            f"protocol refuses it: {e}"))
            continue
        keep = [o for o in outs if isinstance(o, Deliver) and (o.origin, o.seq) not in got.delivered]
        stack.junction.ordering_outputs(keep, now)
    if stack.multicast.ordering.clamped:
        stack.out.append(Log("warning", "the log held an ordering clock beyond what any honest run can have "
                                        "reached (a peer pushed it there before this version): brought back "
                                        "to the ceiling; messages ordered above it are delivered late"))
    stack.multicast.ordering.flush(now)
    out = list(stack.out)
    stack.out.clear()
    return out


def snapshot(stack: SiteStack) -> list[Record]:
    """The live state of ``stack`` as log records, for a compacted log (``rcm.durability.wal``)."""
    recs: list[Record] = [Snapshot(stack.ordering.snapshot(), stack.msg_seq)]
    for (origin, seq), (header, payload) in stack.multicast.undelivered.items():
        recs.append(Pending(origin, seq, header, payload))
    for name, p in stack.peers.items():
        if p.inb.peer_incarnation:
            recs.append(InboundFrontier(name, p.inb.peer_incarnation, p.inb.frontier))
        recs.append(Acked(name, p.out.acked))
        for f in [*p.out.buffer, *p.out.waiting()]:      # waiting in lanes: link_seq 0
            body = [f.msg_seq, f.header, f.payload] if f.kind == wire.DATA else f.payload
            recs.append(Outbound(name, f.link_seq, f.kind, body))
        if p.missed:
            recs.append(MissedSends(name, [list(r) for r in p.missed]))
    return recs + stack.repairs.records()


def compaction_due(size: int, limit: int, compacted: int) -> bool:
    """Is a log of ``size`` due for compaction? Past ``limit``, and once it doubled since the last
    compaction (``compacted``: its size then), so a large live state is not rewritten every batch (the
    retained messages make a compacted log as long as the limit, or longer). The server (bytes) and the
    simulator (records) apply the one rule."""
    return size > max(limit, 2 * compacted)


def compacted(stack: SiteStack, deliveries: DeliveryLog) -> list[Record]:
    """What a compacted log holds: the stack's live state and the clients' replay log."""
    return snapshot(stack) + deliveries.snapshot_records()

