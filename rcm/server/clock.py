"""The RCM server's clock: the wall clock's time, but never set back.

Theory of operation
-------------------
The stack takes one ``now`` (rcm.stack.site.SiteStack) for two things:
timers (heartbeats, liveness and suspicion, pacing, redials, batching),
which need a clock that moves on steadily, and expiry (the ``expires_at`` of
messages and of latest-wins reports: seconds since the epoch, set at one
site and compared at others), which needs the wall clock. The host's wall
clock can step: NTP or chrony correcting it, an operator setting it, a GPS
receiver's first fix after a cold start. Fed straight to the stack, a step
back of D seconds froze every timer for D: a paced link wrote nothing, a
peer that went silent was not suspected, the redials stopped.

``SteadyClock`` reads the wall clock and the monotonic clock. A step
forward is taken at once, as before (expiry is right at once; the timers due
within the step fire now, a blip the links recover from in a heartbeat or a
redial). A step back is not: the clock goes on with the monotonic clock and
closes on the wall clock by running slower, at most ``SLEW`` of the time that
passes (10%: meanwhile every timer runs up to 10% slow, which no timeout
minds, and a paced link writes up to 10% under its rate). A step back of 10 s
is gone in 100 s, an hour's in 10 hours; until then the site judges expiry
by a clock that is ahead of the host's by what is left (as a site whose
clock runs ahead: docs/rcm.md, "Expiry"), and a restart of the RCM server
takes the host's time at once (its streams are durable). Only slowing down
is ever needed, so the clock never runs fast: a paced link never writes over
its rate. ``read`` is sans-IO (both readings passed in); calling the clock
reads the host's clocks.

A reading that finds the wall clock more than ``STEP_NOTICED`` away from
where the last one put it has stepped: ``take_step`` returns it once, for the
edge to log.
"""
from __future__ import annotations

import time
from collections.abc import Callable

SLEW = 0.1             # of the elapsed time: how much slower the clock may run to close on a wall clock set back
STEP_NOTICED = 1.0     # s: a wall clock this far from the clock's target has stepped (logged)


class SteadyClock:
    """Seconds since the epoch, never set back (module doc); ``clock()`` reads the host's clocks."""

    def __init__(self, wall: Callable[[], float] = time.time,
                 monotonic: Callable[[], float] = time.monotonic, slew: float = SLEW) -> None:
        assert 0.0 < slew < 1.0
        self._wall = wall
        self._monotonic = monotonic
        self.slew = slew
        self._base: float | None = None     # wall time at monotonic 0 as the clock runs: now = mono + base
        self._mono = 0.0                    # the last monotonic reading
        self._target = 0.0                  # wall time at monotonic 0 as the wall clock last said
        self.stepped: float | None = None   # the last step seen (s, + forward), until the edge takes it

    def __call__(self) -> float:
        return self.read(self._wall(), self._monotonic())

    def read(self, wall: float, mono: float) -> float:
        """The clock at these readings of the wall and the monotonic clock (``mono`` never goes back)."""
        if self._base is None:
            self._base = self._target = wall - mono
            self._mono = mono
            return wall
        target = wall - mono
        if abs(target - self._target) > STEP_NOTICED:
            self.stepped = target - self._target
        self._target = target
        room = self.slew * max(0.0, mono - self._mono)
        self._mono = max(self._mono, mono)
        if target >= self._base:            # on time, or set forward: the wall clock's time at once
            self._base = target
        else:                               # set back: run slower until it has caught up
            self._base = max(target, self._base - room)
        return self._mono + self._base

    def offset(self) -> float:
        """How far this clock is ahead of the wall clock's last reading (s), still to close."""
        return 0.0 if self._base is None else self._base - self._target

    def take_step(self) -> float | None:
        """The step seen since the last call (s, + forward), or None."""
        s, self.stepped = self.stepped, None
        return s
