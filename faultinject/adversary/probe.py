"""A site under attack from one peer, measured frame by frame (sans-IO, virtual time).

Site A runs a real ``SiteStack`` (Lamport order, relaying, repair, durable
records, small caps) with two peers: C, honest, and B, which sends what
``rcm_frames`` draws. For every hostile frame the probe checks:

* nothing escapes ``data_received`` (a bad frame closes B's link, nothing more);
* the work is bounded: the Python calls made while A handles the frame
  (a ``sys.setprofile`` hook counts calls into Python and C functions) stay
  within ``CALL_BUDGET + CALLS_PER_BYTE * len(frame)``: linear in what B sent,
  never driven by a number inside it (the FETCH of ``[[1, 2^53]]`` walked
  2^53 numbers);
* no frame runs for ``WATCHDOG`` seconds (a timer interrupts it: a hang);
* every ``SERVE_EVERY`` frames C is still served: its frames are taken (its
  stream's frontier moves), its link stays open, and A can still send to it;
* A's memory (the process's resident set) stays within ``RSS_BOUND`` of
  what it was after warming up.

When B's link closes (most hostile frames are protocol violations) B
connects again before its next frame, as a real attacker would.
"""
from __future__ import annotations

import gc
import random
import signal
import sys
import time
from dataclasses import dataclass
from types import FrameType
from typing import Any

from contracts.mission import RcmSettings
from ordering import honest_ceiling
from rcm import wire
from rcm.actions import Close, Transmit
from rcm.routing import relay
from rcm.stack import SiteStack

from .measure import RSS_BOUND, START, WATCHDOG, Calls, Hang, Report, rss, short
from .rcm_frames import KINDS, Frames, Hint

SITES = ["A", "B", "C"]
MISSION = "probe"
TICK = 0.0005                   # virtual seconds between two hostile frames
SERVE_EVERY = 100
CALL_BUDGET = 5_000
CALLS_PER_BYTE = 4
SETTINGS = RcmSettings(retention_bytes=4 << 20, max_buffered_messages=20_000, max_buffered_bytes=4 << 20,
                       heartbeat_timeout=1.0, liveness_timeout=5.0, silence_timeout=10.0)


@dataclass
class KindReport(Report):
    """What one kind of hostile frame did to the site."""

    frames: int = 0
    closed: int = 0                 # frames after which B's link was closed (violations, BYE)
    max_calls: int = 0
    max_calls_bytes: int = 0        # the size of the frame that made the most calls
    served: int = 0                 # checks that C was still served
    peak_rss: int = 0               # bytes above the warmed-up resident set

    def summary(self) -> dict[str, Any]:
        return {"kind": self.kind, "frames": self.frames, "closed": self.closed, "violations": self.violation_count,
                "max_calls": self.max_calls, "max_calls_bytes": self.max_calls_bytes, "served": self.served,
                "peak_rss_mib": round(self.peak_rss / 2**20, 1), **self.latencies(),
                "first_violations": self.violations}


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise Hang(f"a frame ran for {WATCHDOG} s")


class RcmProbe:
    """Site A, its honest peer C and its hostile peer B (see the module docstring)."""

    def __init__(self, seed: int, settings: RcmSettings = SETTINGS) -> None:
        self.rng = random.Random(seed)
        self.frames = Frames(self.rng)
        self.settings = settings
        self.now = START
        self.baseline = 0
        self._conns = 0
        self._fresh()

    def _fresh(self) -> None:
        """A new site A with C connected (at start, and after an exception left A's state unknown)."""
        self.stack = SiteStack("A", SITES, self.settings, 11, self.now, mission=MISSION, durable=True)
        self.stack.start(self.now)
        self.b: str | None = None
        self.c = self._connect("C")

    # -- peers ----------------------------------------------------------------------------------
    def _connect(self, peer: str) -> str:
        self._conns += 1
        conn = f"{peer.lower()}{self._conns}"
        s = self.stack
        s.connection_made(conn, self.now, None, identity=(peer, MISSION))
        inb = s.peers[peer].inb
        # The peer's HELLO holds everything A wrote to it so far, as a peer that read it would: were it to
        # claim only what it acknowledged, every reconnection (after each frame that closes the link) would
        # have A write its whole backlog again, and a long run would grow with the square of its frames.
        hello = [wire.HELLO, wire.PROTOCOL_VERSION, MISSION, peer, 7 if peer == "B" else 9, s.incarnation,
                 s.peers[peer].out.next_seq - 1, 1, self._conns, ["lamport", "robust", SITES, "relay", 3]]
        acts = s.data_received(conn, wire.encode_frame(hello) + wire.encode_frame([wire.SYNC, inb.frontier + 1]),
                               self.now)
        if any(isinstance(a, Close) and a.conn == conn for a in acts):
            raise AssertionError(f"{peer} could not connect: {acts}")
        return conn

    def hint(self) -> Hint:
        s = self.stack
        b = s.peers["B"]
        return Hint(check=b.inb.expected % wire.CHECK_MOD, frontier=b.inb.frontier, our_next=b.out.next_seq,
                    our_stream=relay.stream_check(s.incarnation),
                    peer_stream=relay.stream_check(b.inb.peer_incarnation), nsites=len(SITES),
                    clock=getattr(s.ordering, "clock", 0), ceiling=honest_ceiling(self.now))

    # -- one hostile frame ------------------------------------------------------------------------
    def feed(self, kind: str, report: KindReport) -> None:
        if self.b is None or self.b not in self.stack.conns:
            self.b = self._connect("B")
        frame = KINDS[kind](self.frames, self.hint())
        data = wire.encode_frame(frame)
        self.now += TICK
        counter = Calls()
        escaped: Exception | None = None
        old = signal.signal(signal.SIGALRM, _interrupt)
        signal.setitimer(signal.ITIMER_REAL, WATCHDOG)
        gc.disable()                    # a collection's finalizers are not this frame's work
        t0 = time.perf_counter()
        sys.setprofile(counter)
        try:
            acts = self.stack.data_received(self.b, data, self.now)
        except Exception as e:          # noqa: BLE001 - anything escaping is what this probe looks for
            escaped = e
        finally:
            sys.setprofile(None)
            gc.enable()
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
        if escaped is not None:
            report.violation(f"{type(escaped).__name__}: {escaped} <- {short(frame)}")
            self._fresh()               # after the watchdog is disarmed: rebuilding is not the frame's time
            return
        report.micros.append((time.perf_counter() - t0) * 1e6)
        report.frames += 1
        budget = CALL_BUDGET + CALLS_PER_BYTE * len(data)
        if counter.n > report.max_calls:
            report.max_calls, report.max_calls_bytes = counter.n, len(data)
        if counter.n > budget:
            report.violation(f"{counter.n} calls for a frame of {len(data)} bytes (budget {budget}): "
                             f"{short(frame)}")
        if any(isinstance(a, Close) and a.conn == self.b for a in acts):
            report.closed += 1
            self.b = None
        if any(isinstance(a, Close) and a.conn == self.c for a in acts):
            report.violation(f"C's link closed by B's frame {short(frame)}")
            self.c = self._connect("C")
        if report.frames % 100 == 0:
            self.stack.timer(self.now)
        if report.frames % SERVE_EVERY == 0:
            self._serve_c(report, frame)

    def _serve_c(self, report: KindReport, last: list[Any]) -> None:
        """Is C still served? Its frames are taken, its link stays open, A still sends to it."""
        s = self.stack
        c = s.peers["C"]
        if self.c not in s.conns:
            report.violation(f"C's link is gone after {short(last)}")
            self.c = self._connect("C")
            return
        before = c.inb.frontier
        clock = getattr(s.ordering, "clock", 0)
        frames = [[wire.ANNOUNCE, 0, clock],
                  [wire.DATA, c.inb.expected % wire.CHECK_MOD, 1, clock + 1, b"from C"],
                  [wire.ANNOUNCE, 0, clock + 1]]
        data = b"".join(wire.encode_frame(f) for f in frames)
        acts = s.data_received(self.c, data, self.now)
        if any(isinstance(a, Close) and a.conn == self.c for a in acts) or c.inb.frontier != before + 1:
            report.violation(f"C's frame was not taken after {short(last)} ({acts[:3]})")
            self.c = self._connect("C")
            return
        try:
            _, acts = s.send(b"from A", ["C"], self.now)
        except Exception as e:          # noqa: BLE001 - back-pressure is an answer; anything else is not
            if type(e).__name__ != "Backpressure":
                report.violation(f"A cannot send to C after {short(last)}: {e}")
            return
        if not any(isinstance(a, Transmit) and a.conn == self.c for a in acts + s.timer(self.now)):
            report.violation(f"A's message did not go to C after {short(last)}")
            return
        report.served += 1
        above = rss() - self.baseline
        report.peak_rss = max(report.peak_rss, above)
        if above > RSS_BOUND:
            report.violation(f"resident set {above >> 20} MiB above the warmed-up one")
        del acts

    def warm(self, frames: int = 2000) -> None:
        """Run honest traffic so caches and structures reach their size, then take the baseline."""
        r = KindReport("warm")
        for _ in range(frames // SERVE_EVERY + 1):
            for _ in range(SERVE_EVERY):
                self.now += TICK
            self._serve_c(r, [])
        self.baseline = rss()


def run_kind(kind: str, frames: int, seed: int) -> KindReport:
    """``frames`` hostile frames of ``kind`` against a fresh site; the report."""
    probe = RcmProbe(seed)
    probe.warm()
    report = KindReport(kind)
    for _ in range(frames):
        probe.feed(kind, report)
    return report
