"""Intermittent global order with a sequencer per connected component.

Theory of operation
-------------------
Each site sees a *view*: itself plus the peers it currently sees as
``connected``. The view's *leader* (the sequencer) is the site whose name sorts
first in it, so every site of a stable component picks the same leader without
an election, and a site alone is its own leader. A change of view that changes
the leader starts a new *epoch* at the new leader.

Order keys are ``(epoch, leader, n)``: the ``n``-th assignment the leader made
in its epoch. Epoch ids ``(epoch, leader)`` are unique (a leader only uses its
own name) and grow: a new leader takes the highest epoch id it has seen plus
one, and every site tells newly connected peers (``resync``) and its connected
peers (on growth, in ``flush``) the highest epoch id it has seen, so a leader
that learns of a higher one moves past it. After a view change settles, every
key a leader assigns is above everything its members delivered: no late
deliveries in a stable component.

A data message goes to its destinations with a header naming the sender's
place in the order when it sent (its *hint*: the epoch id and ``n`` of its last
in-order delivery) and, if the destinations are not every peer, the
destination list. The leader assigns a key to every message it receives (and to
messages whose origin asks it with a ``q`` request because the leader is not a
destination), then sends the assignment, coalesced in ``flush`` and reliable,
to the message's destinations and origin. Assignments from one leader reach a
site in FIFO order, so a site delivers the smallest assigned key it holds once
no assignment it already knows but whose data is still missing (from a
connected origin) comes before it.

Nothing waits without bound. A message that gets no assignment within
``assign_wait`` seconds of arrival (its leader was lost, or views are
intransitive) is placed by its hint: key ``(epoch, leader, n, origin, seq)``,
i.e. just after what its sender had seen; an assignment whose data does not
arrive within ``assign_wait`` stops holding others. A message whose key is
below what the site already delivered in order is delivered at once, marked
late, with that key: this is how messages of other components (and of a lost
leader) arrive after a partition heals. Per-origin FIFO is kept: a message is
never delivered before an earlier message of the same origin.

When the leader changes, an origin asks the new leader to order its own
messages that have no key yet; the new leader also orders what it holds
unassigned. A leader ignores a second request for a message it already ordered.

Wire cost: header ``[e, L, n]`` (plus destinations for partial multicasts);
one assignment body per destination per input batch, ``["a", e, L, n1, o1,
s1, n2, o2, s2, ...]``, one output for all the destinations owed the same
bodies (the stack writes one copy of it per next hop on relay paths).
Latency in a stable component: two one-way delays (data to the leader,
assignment from it) for messages not sent by the leader, whatever the
sending rates.

Every field received from a peer is checked before any state changes: epochs,
counters and sequence numbers must lie in ``[0, KEY_INT_MAX]`` (2^53), site
names must be sites of the mission; anything else raises ``ValueError`` and
the stack closes that peer's link. A new epoch never passes the bound.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from typing import Any

from sortedcontainers import SortedDict

from .base import (
    CONNECTED,
    DISCONNECTED,
    KEY_INT_MAX,
    Deliver,
    OrderingProtocol,
    OrderKey,
    Output,
    PeerInputError,
    SendControl,
    key_int,
    peer_int,
    urgent_late,
)

EpochId = tuple[int, str]
NO_EPOCH: EpochId = (0, "")


class _Held:
    """A message whose data arrived here and that is not delivered yet."""

    __slots__ = ("payload", "hint", "key")

    def __init__(self, payload: bytes, hint: tuple[Any, ...]) -> None:
        self.payload = payload
        self.hint = hint
        self.key: OrderKey | None = None


class SequencerIGO(OrderingProtocol):
    """IGO with a deterministic sequencer per component; key ``(epoch, leader, n)``."""

    name = "sequencer"

    def __init__(self, site: str, peers: Iterable[str], now: float = 0.0,
                 assign_wait: float = 2.0) -> None:
        super().__init__(site, peers, now)
        if not assign_wait > 0:
            raise ValueError("assign_wait must be positive")
        self.assign_wait = float(assign_wait)
        self.leader = site
        self.epoch: EpochId = (1, site)            # my epoch while I lead
        self.counter = 0
        self.epoch_seen: EpochId = self.epoch
        self.announced: EpochId = self.epoch
        self.frontier: OrderKey | None = None
        self.held: dict[tuple[str, int], _Held] = {}
        self.queues: dict[str, deque[int]] = {}     # origin -> held seqs, arrival order
        self.ready: SortedDict = SortedDict()       # key -> (origin, seq), data held
        # Assignments whose data has not arrived: key and when the assignment came.
        self.early: dict[tuple[str, int], tuple[OrderKey, float]] = {}
        self.early_keys: SortedDict = SortedDict()  # key -> (origin, seq), data missing
        self.early_waits: deque[tuple[float, str, int]] = deque()
        self.waiting: deque[tuple[float, str, int]] = deque()  # unassigned, arrival order
        self.delivered_upto: dict[str, int] = {}
        self.own_unassigned: dict[int, list[str] | None] = {}
        self.assigned_upto: dict[str, int] = {}     # as leader: origin -> last seq ordered
        self.outbox: dict[str, list[tuple[EpochId, int, str, int]]] = {}

    # -- events -------------------------------------------------------------
    def local_send(self, seq: int, payload: bytes, now: float, dests: Sequence[str] = (),
                   urgent: bool = False) -> tuple[Any, OrderKey | None, list[Output]]:
        subset = self._subset(dests)
        hint = self._hint()
        header: list[Any] = [*hint, self.leader]
        if subset is not None:
            header.append(subset)
        if urgent:
            d = self._urgent(self.site, seq, hint, payload)
            return header, d.key, [d]
        self._hold(self.site, seq, payload, hint, now)
        out: list[Output] = []
        key: OrderKey | None = None
        if self.leader == self.site:
            key = self._assign(self.site, seq, subset, now)
        else:
            self.own_unassigned[seq] = subset
            if subset is not None and self.leader not in subset:
                out.append(SendControl(["q", seq, subset], reliable=True, to=(self.leader,)))
        out.extend(self._drain(now))
        return header, key, out

    def receive(self, origin: str, seq: int, header: Any, payload: bytes,
                now: float, urgent: bool = False) -> list[Output]:
        if not isinstance(header, (list, tuple)) or len(header) not in (4, 5):
            raise PeerInputError("sequencer header must be [epoch, leader, n, sequencer(, dests)]")
        e = peer_int(header[0], "sequencer hint epoch", now)
        lead = self._site_name(header[1], "sequencer hint leader", empty=True)
        n = peer_int(header[2], "sequencer hint n", now)
        sequencer = self._site_name(header[3], "sequencer named in the header")
        subset = self._dests(header[4]) if len(header) == 5 else None
        hint = (e, lead, n)
        self._see_epoch((e, lead))
        if urgent:
            # Never ordered by a sequencer: its key is its hint, the same at every site.
            return [self._urgent(origin, seq, hint, payload), *self._drain(now)]
        self._hold(origin, seq, payload, hint, now)
        if sequencer == self.site:
            # The sender chose me as its sequencer: order it. A message meant
            # for another sequencer (another component, or before a view
            # change) keeps the key that one gives it.
            self._assign(origin, seq, subset, now)
        return self._drain(now)

    def control(self, peer: str, body: Any, now: float) -> list[Output]:
        # Every field is checked before anything changes: a bad body leaves no trace.
        if not isinstance(body, (list, tuple)) or not body:
            raise PeerInputError("sequencer control must be a non-empty list")
        tag = body[0]
        if tag == "a":
            if len(body) < 3:
                raise PeerInputError("assignment must be [\"a\", epoch, leader, n, origin, seq, ...]")
            eid = (peer_int(body[1], "assignment epoch", now), self._site_name(body[2], "assignment leader"))
            entries = body[3:]
            if len(entries) % 3:
                raise PeerInputError("assignment entries come in threes")
            learned = [(peer_int(entries[i], "assigned n", now),
                        self._site_name(entries[i + 1], "assigned origin"),
                        peer_int(entries[i + 2], "assigned seq", now)) for i in range(0, len(entries), 3)]
            self._see_epoch(eid)
            for n, origin, seq in learned:
                self._learn(origin, seq, (eid[0], eid[1], n), now)
        elif tag == "q":
            entries = body[1:]
            if len(entries) % 2:
                raise PeerInputError("order requests come in pairs")
            asked = [(peer_int(entries[i], "requested seq", now),
                      self._dests(entries[i + 1]) if entries[i + 1] is not None else None)
                     for i in range(0, len(entries), 2)]
            if self.leader == self.site:
                for seq, subset in asked:
                    self._assign(peer, seq, subset, now)
        elif tag == "e":
            if len(body) != 3:
                raise PeerInputError("epoch announcement must be [\"e\", epoch, leader]")
            self._see_epoch((peer_int(body[1], "announced epoch", now),
                             self._site_name(body[2], "announced leader")))
        else:
            raise PeerInputError(f"unknown sequencer control {tag!r}")
        return self._drain(now)

    def recovered(self, origin: str, seq: int, header: Any, key: OrderKey, late: bool) -> None:
        if seq > self.delivered_upto.get(origin, 0):
            self.delivered_upto[origin] = seq
        if origin == self.site:
            self.own_unassigned.pop(seq, None)
        eid = (key_int(key[0], "recovered epoch"), self._site_name(key[1], "recovered leader"))
        self._see_epoch(eid)
        if self.leader == self.site and eid >= self.epoch:
            # This epoch of mine ordered messages before the restart: never reuse its keys.
            self._new_epoch()
        super().recovered(origin, seq, header, key, late)

    def set_status(self, peer: str, status: str, now: float) -> list[Output]:
        old = self.status.get(peer)
        super().set_status(peer, status, now)
        out: list[Output] = []
        if status == DISCONNECTED:
            # Data from a disconnected origin will not come on this session:
            # its assignments must not hold anything any more.
            for ident in [i for i in self.early if i[0] == peer]:
                key, _ = self.early.pop(ident)
                self.early_keys.pop(key, None)
            self.outbox.pop(peer, None)
        view_changed = (old == CONNECTED) != (status == CONNECTED)
        leader = min([self.site, *self.connected_peers()])
        if leader == self.site and view_changed:
            # The component changed under me: a new epoch, ordering above
            # anything seen, for the new membership.
            self.leader = leader
            self._lead(now)
        elif leader != self.leader:
            self.leader = leader
            if self.own_unassigned:
                body: list[Any] = ["q"]
                for s, subset in self.own_unassigned.items():
                    body += [s, subset]
                out.append(SendControl(body, reliable=True, to=(leader,)))
        out.extend(self._drain(now))
        return out

    def resync(self, peer: str, now: float) -> list[Output]:
        return [SendControl(["e", *self.epoch_seen], reliable=False, to=(peer,))]

    def tick(self, now: float) -> list[Output]:
        waiting = self.waiting
        while waiting and waiting[0][0] + self.assign_wait <= now:
            _, origin, seq = waiting.popleft()
            h = self.held.get((origin, seq))
            if h is not None and h.key is None:
                # No sequencer ordered it in time: place it after what its sender saw.
                self._give_key(origin, seq, h, (*h.hint, origin, seq))
                if origin == self.site:
                    self.own_unassigned.pop(seq, None)
        early_waits = self.early_waits
        while early_waits and early_waits[0][0] + self.assign_wait <= now:
            since, origin, seq = early_waits.popleft()
            entry = self.early.get((origin, seq))
            if entry is not None and entry[1] == since:
                # Its data did not come: stop holding others for it. If it comes
                # later it is placed by its hint.
                del self.early[(origin, seq)]
                self.early_keys.pop(entry[0], None)
        return self._drain(now)

    def next_deadline(self) -> float | None:
        ds = []
        for queue, table in ((self.waiting, None), (self.early_waits, self.early)):
            while queue:
                since, origin, seq = queue[0]
                if table is None:
                    h = self.held.get((origin, seq))
                    live = h is not None and h.key is None
                else:
                    entry = table.get((origin, seq))
                    live = entry is not None and entry[1] == since
                if live:
                    ds.append(since + self.assign_wait)
                    break
                queue.popleft()
        return min(ds) if ds else None

    def flush(self, now: float) -> list[Output]:
        out: list[Output] = []
        # Peers owed the same assignments (every message to every site: all of them) get them as one
        # output each, to all of them, so that the stack can write one copy per next hop on relay paths.
        owed: dict[tuple[tuple[Any, ...], ...], list[str]] = {}
        for peer, entries in self.outbox.items():
            bodies: list[list[Any]] = []
            for eid, n, origin, seq in entries:
                if not bodies or (bodies[-1][1], bodies[-1][2]) != eid:
                    bodies.append(["a", eid[0], eid[1]])
                bodies[-1] += [n, origin, seq]
            if bodies:
                owed.setdefault(tuple(map(tuple, bodies)), []).append(peer)
        for bodies_, peers in owed.items():
            out.extend(SendControl(list(body), reliable=True, to=tuple(peers)) for body in bodies_)
        self.outbox.clear()
        if self.epoch_seen > self.announced:
            self.announced = self.epoch_seen
            out.append(SendControl(["e", *self.epoch_seen], reliable=False))
        return out

    def pending_count(self) -> int:
        return len(self.held)

    # -- durability -------------------------------------------------------------
    def snapshot(self) -> Any:
        """Epochs, counters and frontier a restarted site needs not to reuse keys."""
        return {"seen": list(self.epoch_seen), "epoch": list(self.epoch), "n": self.counter,
                "frontier": list(self.frontier) if self.frontier is not None else None,
                "assigned": dict(self.assigned_upto)}

    def restore(self, snapshot: Any) -> None:
        if not snapshot:
            return
        # A log written before the honest ceiling may hold epochs at the bound: ``restored_int``.
        seen = (self.restored_int(snapshot["seen"][0]), str(snapshot["seen"][1]))
        self.epoch_seen = max(self.epoch_seen, seen, (self.restored_int(snapshot["epoch"][0]), self.site))
        # Keys of the last incarnation's epoch may be in flight: start above it.
        self._new_epoch()
        self.announced = self.epoch_seen
        if snapshot["frontier"] is not None:
            self.frontier = tuple(snapshot["frontier"])
        for origin, seq in snapshot["assigned"].items():
            self.assigned_upto[origin] = max(self.assigned_upto.get(origin, 0), int(seq))

    # -- internals ------------------------------------------------------------
    def _site_name(self, value: Any, what: str, empty: bool = False) -> str:
        """``value`` if it names a site of the mission (or is ``""`` when ``empty``), else ValueError."""
        if type(value) is not str or not (value == self.site or value in self.status or (empty and value == "")):
            raise PeerInputError(f"{what} {value!r} is not a site of this mission")
        return value

    def _dests(self, value: Any) -> list[str]:
        if not isinstance(value, (list, tuple)):
            raise PeerInputError(f"destination list {value!r} is not a list")
        return [self._site_name(d, "destination") for d in value]

    def _subset(self, dests: Sequence[str]) -> list[str] | None:
        """The destination list for the header, None when it is every peer."""
        ds = sorted(set(dests) - {self.site})
        return None if ds == list(self.peers) else ds

    def _hint(self) -> tuple[Any, ...]:
        f = self.frontier
        if f is None:
            return (0, "", 0)
        return (f[0], f[1], f[2])

    def _urgent(self, origin: str, seq: int, hint: tuple[Any, ...], payload: bytes) -> Deliver:
        """An urgent message: key ``(*hint, origin, seq)`` (just after what its sender had delivered),
        delivered now; in place only if this site delivered exactly up to that hint and holds nothing
        ordered before it (any later assignment is above it)."""
        key = (*hint, origin, seq)
        at = self.frontier[:3] if self.frontier is not None else (0, "", 0)
        late = urgent_late(key, self.frontier)
        if (not late and tuple(at) == tuple(hint) and not (self.ready and self.ready.peekitem(0)[0] < key)
                and not self.early_keys and not self._waiting_for_key()):
            self.frontier = key
        return Deliver(origin, seq, key, late, payload)

    def _waiting_for_key(self) -> bool:
        """Does a held message still wait for its key (it may get one below an urgent message's)?"""
        return any(h.key is None for h in self.held.values())

    def _hold(self, origin: str, seq: int, payload: bytes, hint: tuple[Any, ...], now: float) -> None:
        h = _Held(payload, hint)
        self.held[(origin, seq)] = h
        self.queues.setdefault(origin, deque()).append(seq)
        early = self.early.pop((origin, seq), None)
        if early is not None:
            self.early_keys.pop(early[0], None)
            self._give_key(origin, seq, h, early[0])
        else:
            self.waiting.append((now, origin, seq))

    def _give_key(self, origin: str, seq: int, h: _Held, key: OrderKey) -> None:
        if key in self.ready:
            # Only a leader restarted without its history reuses a key: keep both.
            key = (*key[:3], origin, seq)
        h.key = key
        self.ready[key] = (origin, seq)

    def _see_epoch(self, eid: EpochId) -> None:
        if eid > self.epoch_seen:
            self.epoch_seen = eid
            if self.leader == self.site and eid > self.epoch:
                # A member saw a later epoch: order above it from now on.
                self._new_epoch()

    def _new_epoch(self) -> None:
        e = self.epoch_seen[0] + 1
        if e > KEY_INT_MAX:
            # Only a peer announcing an epoch no honest run reaches gets here:
            # keep the keys in range and increasing here, if not the same everywhere.
            if self.epoch == (KEY_INT_MAX, self.site):
                return
            e = KEY_INT_MAX
        self.epoch = (e, self.site)
        self.epoch_seen = max(self.epoch_seen, self.epoch)
        self.counter = 0

    def _lead(self, now: float) -> None:
        """My view changed and I lead it: new epoch; order my own messages without a key.

        Others' messages waiting for a key are left to their origins, which ask
        me when they see me as their new sequencer: their old sequencer may
        have ordered them already, and one key per message keeps the order
        the same everywhere.
        """
        self._new_epoch()
        for s, subset in list(self.own_unassigned.items()):
            self._assign(self.site, s, subset, now)

    def _assign(self, origin: str, seq: int, subset: list[str] | None,
                now: float) -> OrderKey | None:
        """As leader: give ``origin:seq`` the next key and tell its sites."""
        if seq <= self.assigned_upto.get(origin, 0):
            return None
        self.assigned_upto[origin] = seq
        self.counter += 1
        eid = self.epoch
        key = (eid[0], eid[1], self.counter)
        targets = set(subset) if subset is not None else set(self.peers) | {self.site}
        targets.add(origin)
        for p in sorted(targets):      # sorted: a set of names iterates in PYTHONHASHSEED order
            if p != self.site and self.status.get(p, DISCONNECTED) != DISCONNECTED:
                self.outbox.setdefault(p, []).append((eid, self.counter, origin, seq))
        if self.site in targets:
            self._learn(origin, seq, key, now)
        return key

    def _learn(self, origin: str, seq: int, key: OrderKey, now: float) -> None:
        """An assignment for ``origin:seq`` (first one wins)."""
        if origin == self.site:
            self.own_unassigned.pop(seq, None)
        h = self.held.get((origin, seq))
        if h is not None:
            if h.key is None:
                self._give_key(origin, seq, h, key)
            return
        if seq <= self.delivered_upto.get(origin, 0) or (origin, seq) in self.early:
            return
        if origin == self.site or key in self.early_keys:
            return
        self.early[(origin, seq)] = (key, now)
        self.early_keys[key] = (origin, seq)
        self.early_waits.append((now, origin, seq))

    def _early_blocks(self, key: OrderKey, now: float) -> bool:
        """Does a known assignment below ``key`` still wait for its data?"""
        for ek in self.early_keys.irange(maximum=key, inclusive=(True, False)):
            origin, seq = self.early_keys[ek]
            if self.status.get(origin) == CONNECTED:
                return True
        return False

    def _drain(self, now: float) -> list[Output]:
        out: list[Output] = []
        progress = True
        while progress and self.ready:
            progress = False
            for key in self.ready:
                if self._early_blocks(key, now):
                    return out
                origin, seq = self.ready[key]
                queue = self.queues[origin]
                if queue[0] != seq:
                    head = self.held[(origin, queue[0])]
                    if head.key is None:
                        return out      # FIFO: wait until the earlier message has a place
                    continue            # the earlier one has a higher key: it goes first
                queue.popleft()
                if not queue:
                    del self.queues[origin]
                h = self.held.pop((origin, seq))
                del self.ready[key]
                late = self.frontier is not None and key < self.frontier
                if not late:
                    self.frontier = key
                if seq > self.delivered_upto.get(origin, 0):
                    self.delivered_upto[origin] = seq
                if origin == self.site:
                    self.own_unassigned.pop(seq, None)
                self._see_epoch((key[0], key[1]))
                out.append(Deliver(origin, seq, key, late, h.payload))
                progress = True
                break
        return out
