"""Where a reliable stream resumes on a new connection, byte by byte, in the orders a race can take.

Two ``SiteStack``s and the connections between them; the test delivers each
connection's bytes when it says so, so the interleavings that a loaded machine
produces (a double dial after a link comes back) are exact and replayable.
"""
from __future__ import annotations

from collections.abc import Hashable

import pytest

from contracts.mission import RcmSettings
from rcm import wire
from rcm.actions import Close, Delivery, StatusChange, Transmit
from rcm.stack import SiteStack

SETTINGS = RcmSettings(routing="direct", durable=False)


class Pair:
    """Sites A and B; connections named by the test, opened, fed and cut by hand."""

    def __init__(self, tls: bool, settings: RcmSettings = SETTINGS) -> None:
        self.tls = tls
        self.now = 0.0
        self.stacks = {s: SiteStack(s, ["A", "B"], settings, 1, 0.0, mission="m") for s in ("A", "B")}
        self.pending: dict[tuple[str, Hashable], bytes] = {}
        self.other: dict[tuple[str, Hashable], tuple[str, Hashable]] = {}
        self.closing: dict[tuple[str, Hashable], tuple[str, Hashable]] = {}   # closed here, last bytes on the way
        self.delivered: dict[str, list[Delivery]] = {"A": [], "B": []}
        self.statuses: dict[str, list[str]] = {"A": [], "B": []}      # each site's status changes of its peer
        for s, st in self.stacks.items():
            self._run(s, st.start(0.0))        # first dials: the test makes its own

    def _run(self, site: str, actions: list) -> None:
        for a in actions:
            if isinstance(a, Transmit):
                self.pending[(site, a.conn)] = self.pending.get((site, a.conn), b"") + a.data
            elif isinstance(a, Close):
                # What the other end wrote and this one had not read is gone; this end's last bytes
                # (a BYE) still arrive, then the other end sees the connection lost (``flush``).
                end = self.other.pop((site, a.conn), None)
                if end is not None:
                    self.pending.pop(end, None)
                    self.closing[(site, a.conn)] = end
            elif isinstance(a, Delivery):
                self.delivered[site].append(a)
            elif isinstance(a, StatusChange):
                self.statuses[site].append(a.status)

    def dial(self, dialer: str, name: str) -> None:
        """``dialer`` opens connection ``name`` to the other site (both ends know it by that name)."""
        acceptor = "B" if dialer == "A" else "A"
        self.other[(dialer, name)] = (acceptor, name)
        self.other[(acceptor, name)] = (dialer, name)
        proven = (lambda s: (s, "m")) if self.tls else (lambda s: None)
        self._run(acceptor, self.stacks[acceptor].connection_made(name, self.now, None, proven(dialer)))
        self._run(dialer, self.stacks[dialer].connection_made(name, self.now, acceptor, proven(acceptor)))

    def flush(self, site: str, name: str) -> None:
        """What ``site`` wrote on ``name`` so far arrives at the other end (then its close, if it closed it)."""
        data = self.pending.pop((site, name), b"")
        end = self.other.get((site, name)) or self.closing.get((site, name))
        if end is None:
            return
        if data and end in self.other:
            self._run(end[0], self.stacks[end[0]].data_received(end[1], data, self.now))
        if self.closing.pop((site, name), None) is not None and self.other.pop(end, None) is not None:
            self.pending.pop(end, None)
            self._run(end[0], self.stacks[end[0]].connection_lost(end[1], self.now))

    def cut(self, name: str) -> None:
        """The link resets connection ``name``: both ends see it lost."""
        for site in ("A", "B"):
            if (site, name) in self.other:
                del self.other[(site, name)]
                self.pending.pop((site, name), None)
                self._run(site, self.stacks[site].connection_lost(name, self.now))

    def settle(self, until: float) -> None:
        """Timers and every open connection's bytes until ``until`` (one tick per 10 ms)."""
        while self.now < until:
            self.now = round(self.now + 0.01, 6)
            for s, st in self.stacks.items():
                self._run(s, st.timer(self.now))
            for site, name in [*self.other, *self.closing]:
                self.flush(site, name)

    def send(self, site: str, n: int, tag: str) -> None:
        for i in range(n):
            _, actions = self.stacks[site].send(f"{tag}-{i}".encode(), None, self.now)
            self._run(site, actions)

    def peer(self, site: str) -> dict:
        return self.stacks[site].stats()["peers"]["B" if site == "A" else "A"]


def connected_then_cut(tls: bool) -> Pair:
    """A and B connected, each holding the other's first 5 messages, acknowledged; the link then cuts,
    and each sends 10 more while it is down (buffered: the other is only suspected)."""
    pair = Pair(tls)
    pair.dial("B", "first")
    for s in ("A", "B"):
        pair.send(s, 5, f"{s} before")
    pair.settle(1.0)
    for s in ("A", "B"):
        assert pair.peer(s)["acked_upto"] == pair.peer(s)["frontier"] == 5
    pair.cut("first")
    for s in ("A", "B"):
        pair.send(s, 10, f"{s} outage")
    return pair


def double_dial_after_restore(pair: Pair, bye_first: bool) -> None:
    """Both ends dial when the link returns. B's dial Y completes first at both ends, and each sends
    its outage frames on Y; A's dial X wrote its HELLO (A's frontier: 5) just before A took B's.
    X is the connection both ends keep (A sorts first): B replaces Y by X when that HELLO comes,
    A when B's answer comes (or, ``bye_first``, A hears B's BYE on Y first and closes Y), neither
    having heard the other acknowledge what it took on Y."""
    pair.dial("B", "Y")
    pair.flush("B", "Y")            # A adopts Y and answers: SYNC at 6, A's outage frames 6..15
    pair.dial("A", "X")             # A's HELLO on X: frontier 5, written now
    pair.flush("A", "Y")            # B adopts Y: SYNC at 6 and its outage frames (ack 5); takes A's 6..15
    pair.flush("B", "Y")            # A takes B's 6..15 on Y
    assert pair.peer("A")["frontier"] == pair.peer("B")["frontier"] == 15
    assert pair.peer("A")["acked_upto"] == pair.peer("B")["acked_upto"] == 5
    pair.flush("A", "X")            # B: X replaces Y; the HELLO on it said 5, A holds 15
    if bye_first:
        pair.flush("B", "Y")        # A: B closed Y ("replaced by a newer connection")
        assert pair.stacks["A"].peers["B"].conn is None
    pair.flush("B", "X")            # A: X replaces Y too (or simply opens)
    pair.settle(pair.now + 2.0)


@pytest.mark.parametrize("bye_first", [False, True], ids=["answer-first", "bye-first"])
@pytest.mark.parametrize("tls", [True, False], ids=["tls", "plaintext"])
def test_a_double_dial_resends_nothing_the_peer_took_on_the_replaced_connection(tls: bool, bye_first: bool):
    """The HELLO of the connection kept was written before its writer took frames on the other one;
    the side that replaces waits for the peer's first acknowledgement on the kept connection (and
    without TLS, the dialer too: its stream would restart after its last acknowledgement)."""
    pair = connected_then_cut(tls)
    double_dial_after_restore(pair, bye_first)
    for s, other in (("A", "B"), ("B", "A")):
        assert pair.peer(s)["duplicates"] == 0, s
        assert pair.peer(s)["resent"] == 0 and pair.peer(s)["buffered"] == 0, s
        got = [d.payload for d in pair.delivered[s] if d.origin == other]
        assert got == [f"{other} before-{i}".encode() for i in range(5)] + [
            f"{other} outage-{i}".encode() for i in range(10)]
    assert pair.stacks["A"].peers["B"].conn == "X" and pair.stacks["B"].peers["A"].conn == "X"
    assert pair.stacks["A"].status("B") == pair.stacks["B"].status("A") == "connected"
    # The streams go on, on X.
    for s in ("A", "B"):
        pair.send(s, 3, f"{s} after")
    pair.settle(pair.now + 1.0)
    for s, other in (("A", "B"), ("B", "A")):
        assert [d.payload for d in pair.delivered[s] if d.origin == other][-3:] == [
            f"{other} after-{i}".encode() for i in range(3)]
        assert pair.peer(s)["duplicates"] == 0


@pytest.mark.parametrize("bye_first", [False, True], ids=["answer-first", "bye-first"])
def test_crossed_dials_never_show_the_peer_suspected(bye_first: bool):
    """Both sites dial at once while connected (a start-up, or a restore both noticed): the pair keeps A's
    dial, and B's BYE on the one it drops ("replaced by a newer connection") may reach A before B's answer
    on A's dial. The link was never down, so neither site reports B or A suspected meanwhile (seen in a lab:
    A showed B suspected for an instant, on every screen, at each crossing)."""
    pair = Pair(tls=True)
    pair.dial("B", "Y")
    pair.settle(1.0)
    assert pair.stacks["A"].status("B") == pair.stacks["B"].status("A") == "connected"
    pair.statuses = {"A": [], "B": []}
    pair.dial("A", "X")
    pair.flush("A", "X")            # B: X replaces Y (A sorts first), BYE on Y, its answer on X
    if bye_first:
        pair.flush("B", "Y")        # A: B closed Y ("replaced by a newer connection"); X still in its handshake
        assert pair.stacks["A"].peers["B"].conn is None
    pair.flush("B", "X")
    pair.settle(pair.now + 2.0)
    assert pair.stacks["A"].peers["B"].conn == "X" and pair.stacks["B"].peers["A"].conn == "X"
    assert pair.statuses == {"A": [], "B": []}


def test_a_crossed_dial_that_fails_after_the_peer_dropped_the_other_shows_the_peer_suspected():
    """The BYE came, and then A's own dial failed before B answered on it: the link is down after all."""
    pair = Pair(tls=True)
    pair.dial("B", "Y")
    pair.settle(1.0)
    pair.statuses = {"A": [], "B": []}
    pair.dial("A", "X")
    pair.flush("A", "X")
    pair.flush("B", "Y")            # B's BYE on Y
    assert pair.statuses["A"] == []
    pair.cut("X")                   # A's dial is lost before B's answer
    assert pair.statuses["A"] == ["suspected"]
    assert pair.stacks["A"].status("B") == "suspected"


@pytest.mark.parametrize("tls", [True, False], ids=["tls", "plaintext"])
def test_after_a_cut_only_a_plaintext_acceptor_resends_what_was_unacknowledged(tls: bool):
    """One dial after a cut. With TLS each end resumes after what the other holds. Without, a HELLO
    counts for nothing: the dialer waits for the acceptor's acknowledgement, which comes with its
    HELLO, so it resends nothing the acceptor holds; the acceptor resumes after its last
    acknowledgement, and what the dialer received but had not acknowledged at the cut comes twice
    (the paper's overlap, at most ``ack_interval`` of traffic)."""
    pair = Pair(tls)
    pair.dial("B", "first")
    pair.settle(0.5)
    for s in ("A", "B"):
        pair.send(s, 3, f"{s} unacked")
    pair.flush("A", "first")
    pair.flush("B", "first")                # each holds the other's 3; no acknowledgement went yet
    unacked = {s: pair.peer(s)["frontier"] - pair.peer("B" if s == "A" else "A")["acked_upto"] for s in "AB"}
    assert unacked == {"A": 3, "B": 3}
    pair.cut("first")
    pair.dial("B", "X")
    pair.settle(pair.now + 1.0)
    assert pair.peer("A")["duplicates"] == 0                    # B (the dialer) waited for A's ack
    assert pair.peer("B")["duplicates"] == (0 if tls else unacked["B"])
    for s, other in (("A", "B"), ("B", "A")):
        assert [d.payload for d in pair.delivered[s] if d.origin == other] == [
            f"{other} unacked-{i}".encode() for i in range(3)]


@pytest.mark.parametrize("dialer", ["A", "B"])
def test_each_end_acknowledges_at_once_on_a_new_connection(dialer: str):
    """A dialer's HELLO was written at connect time, and without TLS no HELLO counts: right behind its
    SYNC each end says where it stands, so that a peer waiting for it resumes without delay."""
    pair = connected_then_cut(tls=True)
    acceptor = "B" if dialer == "A" else "A"
    pair.dial(dialer, "X")
    pair.flush(dialer, "X")
    answer = wire.FrameDecoder(1 << 20).feed(pair.pending[(acceptor, "X")])
    assert [f[0] for f in answer[:3]] == [wire.HELLO, wire.SYNC, wire.HEARTBEAT]
    assert answer[2][2] == 5                    # the ack: it holds the dialer's stream up to 5
    pair.flush(acceptor, "X")
    frames = wire.FrameDecoder(1 << 20).feed(pair.pending[(dialer, "X")])
    assert [f[0] for f in frames[:2]] == [wire.SYNC, wire.HEARTBEAT] and frames[1][2] == 5


def test_a_peer_that_never_acknowledges_holds_the_stream_at_most_the_liveness_timeout():
    """An older peer acknowledges only when it writes something; the stream then resumes from its HELLO."""
    pair = connected_then_cut(tls=True)
    pair.dial("B", "Y")
    pair.flush("B", "Y")
    pair.dial("A", "X")
    pair.flush("A", "Y")
    pair.flush("B", "Y")
    pair.flush("A", "X")                        # B replaces Y by X and waits for A's acknowledgement
    held_at, b = pair.now, pair.stacks["B"]
    assert b.peers["A"].out.held()
    assert b.next_deadline() <= held_at + SETTINGS.liveness_timeout

    def data_written() -> int:
        frames = wire.FrameDecoder(1 << 20).feed(pair.pending.get(("B", "X"), b""))
        return sum(1 for f in frames if f[0] == wire.DATA)

    pair.now = held_at + SETTINGS.liveness_timeout - 0.01
    pair._run("B", b.timer(pair.now))
    assert b.peers["A"].out.held() and data_written() == 0
    pair.now = held_at + SETTINGS.liveness_timeout
    pair._run("B", b.timer(pair.now))
    assert not b.peers["A"].out.held() and data_written() == 10     # from A's HELLO frontier on
