"""The interface every IGO ordering protocol implements.

Theory of operation
-------------------
An ordering protocol sits at the top of a site's RCM protocol stack. It is pure
code: it never reads a clock and never touches a socket. The stack below it
gives it events (a local send, a data message from a peer, a control message
from a peer, a change of a peer's logical status, the passing of time) together
with the current time ``now`` (Unix seconds, or virtual seconds in the
simulator), and the protocol answers with a list of outputs:

* ``Deliver``: hand a message to the site's client, with its order key and a
  late flag;
* ``SendControl``: send a protocol control body (e.g. a Lamport clock
  announcement or a sequencer's order assignment) to peers, either reliably
  (in FIFO with data on the robust point-to-point channel) or best-effort.

Data messages travel with a small protocol ``header`` chosen by the protocol at
``local_send`` (for Lamport: the logical timestamp). Headers and control bodies
must be msgpack-serialisable (ints, strings, bytes, lists, dicts, None).

Order keys are tuples of ints and strings; their lexicographic order is the
global order. They appear in JSON as arrays (chat protocol ``order`` field).

Every integer in an order key is in ``[0, KEY_INT_MAX]`` (2^53). A peer
controls the clocks, epochs and counters it puts on the wire, so each protocol
checks every such value it receives with ``key_int`` *before* changing any
state, and raises ``ValueError`` for one out of range: the stack treats that
as a protocol violation and closes only that peer's connection. A protocol
never moves its own clock past the bound either: a local send that would
raises ``ClockExhausted`` and the stack refuses it. Why 2^53: no honest run
comes near it (a Lamport clock at a million sends a second reaches it after
285 years; a hybrid clock's ``l`` is the time in milliseconds), every key
then stays exact in a JSON number read as an IEEE double (browsers), well
inside a signed 63-bit integer (SQLite, Spark ``LongType``, msgpack), and
one bad value can no longer poison every site's store.

A value from a peer must also be one an honest run could have reached by now
(``peer_int``, ``honest_ceiling``): at most ``HONEST_BASE`` (2^43) plus a
million per second since 2020. Without it one peer announcing exactly 2^53
moved every site's clock to the bound and every later send was refused, for
good (the clock is logged). With it a peer can move a clock by at most the
ceiling, which grows a million a second and reaches 2^53 in the year 2305, so
no single value can exhaust a clock, and one that tries closes only its link.
A bound relative to what is known (``known + step``) was rejected: an honest
site can come back from a long, busy partition far ahead, and since it
re-announces the same clock at every reconnection a step bound would partition
it for good; the ceiling depends only on the time, so it never refuses an
honest site. Hybrid clocks are milliseconds of real time (about 1.8 x 10^12 in
2026), far under it. What happens at the bound itself: docs/ordering.md.

The stack guarantees, per origin: FIFO delivery of non-urgent data and reliable
control frames while the peer is connected or suspected (urgent messages may
overtake them: ``receive``); and that a best-effort
control body sent by a peer after a data message arrives after that message
(same connection, FIFO). Messages may be lost only when a peer is
disconnected.

``flush`` is called at the end of every batch of input events; protocols that
announce state (clocks) coalesce announcements there so that a burst of input
costs one announcement per peer.
"""
from __future__ import annotations

import abc
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from contracts.status import REPORTED, LinkStatus

OrderKey = tuple[Any, ...]  # ints and strings; their lexicographic order is the global order

CONNECTED = LinkStatus.CONNECTED.value       # statuses as the stack gives them (contracts.status)
SUSPECTED = LinkStatus.SUSPECTED.value
DISCONNECTED = LinkStatus.DISCONNECTED.value
STATUSES = REPORTED


@dataclass(frozen=True, slots=True)
class Deliver:
    """Deliver a message to the local client."""

    origin: str
    seq: int
    key: OrderKey
    late: bool
    payload: bytes


@dataclass(frozen=True, slots=True)
class SendControl:
    """Send a control body to peers (``to=None``: every peer not disconnected)."""

    body: Any
    reliable: bool = False
    to: tuple[str, ...] | None = None


Output = Deliver | SendControl


KEY_INT_MAX = 2 ** 53
"""No integer in an order key (clock, counter, epoch, message sequence number) exceeds this."""


class OrderingError(Exception):
    """A protocol was driven in a way its contract forbids."""


class PeerInputError(ValueError):
    """A header or control body from a peer that the protocol cannot accept: the peer's fault.

    Raised before any state changes; the stack closes that peer's link. Any other exception out of a
    protocol is a bug of ours, never blamed on the peer."""


class ClockExhausted(OrderingError):
    """A local send would move this site's clock past ``KEY_INT_MAX``."""


HONEST_BASE = 2 ** 43
"""The ceiling at (and before) ``HONEST_EPOCH``: above a hybrid clock's milliseconds until the year 2248."""
HONEST_RATE = 1_000_000
"""How fast the ceiling grows, per second: more sends a second than any mission makes, all sites together."""
HONEST_EPOCH = 1_577_836_800.0
"""2020-01-01T00:00:00Z, in Unix seconds; the simulator's virtual times (from 0) are before it."""


def honest_ceiling(now: float) -> int:
    """The largest clock, counter or sequence number any honest run can have reached by ``now``."""
    grown = HONEST_RATE * (now - HONEST_EPOCH) if now > HONEST_EPOCH else 0.0
    return int(min(float(KEY_INT_MAX), HONEST_BASE + grown))


def key_int(value: Any, what: str) -> int:
    """``value`` if it is an int in ``[0, KEY_INT_MAX]``, else ``PeerInputError`` (a ValueError) naming ``what``."""
    if type(value) is not int:
        raise PeerInputError(f"{what} must be an integer, not {type(value).__name__}")
    if value < 0:
        raise PeerInputError(f"{what} = {value} is negative")
    if value > KEY_INT_MAX:
        raise PeerInputError(f"{what} = {value} exceeds the order-key bound 2^53 = {KEY_INT_MAX}")
    return value


def urgent_late(key: OrderKey, frontier: OrderKey | None) -> bool:
    """Is an urgent message (FLASH, IMMEDIATE: delivered on arrival) late? Only if its place had passed here:
    a message ordered after it was already delivered in order. Delivered before its place is settled, it
    is *early*, not late: on an idle mission, at its sender and wherever it arrives promptly, it is never
    marked late (docs/ordering.md, "Urgent messages"). A key equal to the frontier (an origin that restarted
    without its state stamped it again) has passed too: an in-order key is always above the frontier."""
    return frontier is not None and key <= frontier


def peer_int(value: Any, what: str, now: float) -> int:
    """``key_int`` for a value a peer sent: also at most ``honest_ceiling(now)``, else ``PeerInputError``."""
    v = key_int(value, what)
    ceiling = honest_ceiling(now)
    if v > ceiling:
        raise PeerInputError(f"{what} = {v} is beyond what any honest run can have reached by now ({ceiling}: "
                         f"2^43 plus a million a second since 2020)")
    return v


class OrderingProtocol(abc.ABC):
    """Base class: one instance per site."""

    name: str = "abstract"

    def __init__(self, site: str, peers: Iterable[str], now: float = 0.0) -> None:
        self.site = site
        self.peers: tuple[str, ...] = tuple(sorted(p for p in peers if p != site))
        # Every peer starts disconnected until the connection manager says otherwise.
        self.status: dict[str, str] = {p: DISCONNECTED for p in self.peers}
        self.frontier: OrderKey | None = None      # key of the last in-order delivery
        self.started = now
        self.clamped = False    # ``restore`` brought a value beyond the honest ceiling back to it (an old log)

    # -- events -------------------------------------------------------------
    @abc.abstractmethod
    def local_send(self, seq: int, payload: bytes, now: float, dests: Sequence[str] = (),
                   urgent: bool = False) -> tuple[Any, OrderKey | None, list[Output]]:
        """The local client sent message ``seq`` to ``dests`` (peers, self implied).

        ``urgent`` (FLASH, IMMEDIATE): delivered at once with its key (see ``receive``).

        ``dests`` lists exactly the peers that get the data (the stack leaves out
        disconnected ones): an empty tuple means no peer gets it, not all.
        A protocol must let the others learn whatever they need not to wait on it.

        Returns the header to attach to the data message, the order key if it
        is already known (None for protocols that assign it later), and outputs
        (typically none, or the local delivery if nothing can precede it).
        The message is delivered locally through ``Deliver`` like any other.
        """

    @abc.abstractmethod
    def receive(self, origin: str, seq: int, header: Any, payload: bytes,
                now: float, urgent: bool = False) -> list[Output]:
        """A data message from ``origin`` arrived (FIFO per origin, no duplicates).

        ``urgent`` (FLASH, IMMEDIATE precedence): the message may have overtaken
        earlier ones of its origin on the links (FIFO holds only among urgent
        messages of one level), so it teaches nothing about what else is in
        flight. It is delivered at once with its order key, flagged late unless
        it is exactly in place (nothing this site holds or can still receive
        from a connected peer is ordered before it); only then does it move the
        frontier. Non-urgent messages keep IGO.

        A header this protocol cannot accept (wrong shape, an integer outside
        ``[0, KEY_INT_MAX]``) raises ``ValueError`` before any state changes.
        """

    @abc.abstractmethod
    def control(self, peer: str, body: Any, now: float) -> list[Output]:
        """A control body from ``peer`` arrived; a bad one raises ``ValueError`` before any state changes."""

    def set_status(self, peer: str, status: str, now: float) -> list[Output]:
        """The connection manager changed ``peer``'s logical status."""
        if status not in STATUSES:
            raise OrderingError(f"unknown status {status!r}")
        self.status[peer] = status
        return []

    def resync(self, peer: str, now: float) -> list[Output]:
        """A new connection to ``peer`` opened (whatever its status).

        Best-effort control bodies sent on the old connection may have been
        lost with it; re-send whatever state the peer needs. Called after the
        channel has resent its unacknowledged reliable frames.
        """
        return []

    def tick(self, now: float) -> list[Output]:
        """Time passed; called at or after ``next_deadline()``."""
        return []

    def next_deadline(self) -> float | None:
        """When ``tick`` next needs to run, or None."""
        return None

    def flush(self, now: float) -> list[Output]:
        """End of an input batch: emit coalesced announcements."""
        return []

    def riding(self, peers: Collection[str], now: float) -> list[Output]:
        """After ``flush``: something is written to ``peers`` in this batch anyway, so an announcement the
        protocol holds back for them (Lamport's ``announce_delay``) may go now, in the same write."""
        return []

    # -- durability -----------------------------------------------------------
    def snapshot(self) -> Any:
        """msgpack-able state that a restarted site needs beyond its logged messages.

        Recovery builds a fresh protocol, calls ``restore(snapshot)`` if a
        snapshot was taken, then re-feeds every logged message (its own
        included, ``origin == site``): those delivered before the crash through
        ``recovered``, the others through ``receive``, with every peer not
        connected. The stack drops any delivery of a message already delivered.
        """
        return None

    def restore(self, snapshot: Any) -> None:  # noqa: B027 - optional: a protocol without a snapshot has nothing to adopt
        """Adopt a ``snapshot()`` taken before a restart."""

    def restored_int(self, value: Any) -> int:
        """A clock, epoch or counter read back from our own log, at most the honest ceiling.

        A log written before the ceiling existed may hold a value a peer pushed to (or near) the
        bound, where every send is refused: it comes back at the ceiling (``clamped``). Keys made
        after it may be below ones delivered before, and are delivered late; the mission goes on."""
        v = min(int(value), KEY_INT_MAX)
        ceiling = honest_ceiling(self.started)
        if v > ceiling:
            self.clamped = True
            return ceiling
        return v

    def recovered(self, origin: str, seq: int, header: Any, key: OrderKey, late: bool) -> None:
        """Restart: ``origin:seq`` (its ``header`` as sent) was delivered before it, at ``key``.

        Called, in log order, instead of ``receive`` for the logged messages
        that were already delivered: the protocol learns what they taught it
        (clocks, epochs, its place in the order) without holding them, so it
        delivers none of them again and never places a later message below
        where it had got. A header that does not parse raises ``ValueError``.
        """
        if not late and (self.frontier is None or key > self.frontier):
            self.frontier = key

    # -- introspection ------------------------------------------------------
    def connected_peers(self) -> list[str]:
        return [p for p in self.peers if self.status[p] == CONNECTED]

    @abc.abstractmethod
    def pending_count(self) -> int:
        """Messages received but held back for ordering."""


def make_protocol(name: str, site: str, peers: Iterable[str], now: float = 0.0,
                  **options: Any) -> OrderingProtocol:
    """Build the ordering protocol named in the mission file's ``[rcm] ordering``."""
    from . import registry

    try:
        cls = registry.PROTOCOLS[name]
    except KeyError:
        raise OrderingError(
            f"unknown ordering protocol {name!r} (known: {', '.join(sorted(registry.PROTOCOLS))})"
        ) from None
    return cls(site, peers, now, **options)
