"""Every link of a mission: one proxy per dial entry, controlled by site pair and group.

A mission's ``[sites.A.dial] B = ADDR`` says site A reaches B through ADDR.
:class:`LinkSet` starts one :class:`LinkProxy` on each such ADDR, forwarding
to ``sites.B.rcm``. The proxy for (A, B) carries A's connections to B: its
"forward" direction is data A to B, its "reverse" data B to A. Control is by
unordered pair (``cut("A", "B")`` acts on the (A, B) and (B, A) proxies
together) and by groups (``partition(["A", "B"], ["C", "D"])``); shapes are
by directed flow (``set_shape("A", "B", shape)`` shapes every byte A sends to
B, whichever site dialled).

A pair where neither site dials the other through a proxy cannot be
controlled (``uncovered_pairs()``); one where only one direction has a proxy is
reported by ``half_covered_pairs()`` because cutting it leaves the other
site's own connections untouched.
"""
from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Iterable
from typing import Any

from contracts.mission import Mission
from faultinject.proxy import FORWARD, REVERSE, LinkError, LinkProxy
from faultinject.schedule import LinkAction, Pair, Schedule, cross_pairs, pair, run_schedule, within_pairs
from faultinject.shaping import BlackholePolicy, LinkEvent, LinkMode, Shape


class LinkSet:
    """One proxy per dial entry of ``mission``; all randomness from ``seed``."""

    def __init__(self, mission: Mission, *, shape: Shape | None = None,
                 policy: BlackholePolicy = BlackholePolicy.DISCARD, seed: int = 0) -> None:
        self.mission = mission
        self.seed = seed
        self.proxies: dict[tuple[str, str], LinkProxy] = {}
        for a, site in mission.sites.items():
            for b, addr in site.dial.items():
                self.proxies[(a, b)] = LinkProxy(
                    addr, mission.sites[b].rcm, name=f"{a}->{b}", forward=shape, reverse=shape,
                    policy=policy, seed=f"{seed}/{a}->{b}")
        self._pair_mode: dict[Pair, LinkMode] = {p: LinkMode.UP for p in self.pairs()}
        self.history: list[LinkEvent] = []
        self._schedules: set[asyncio.Task[None]] = set()
        self._started = False

    # -- lifecycle ----------------------------------------------------------------
    async def start(self) -> None:
        """Start every proxy; if one cannot bind, the started ones are closed again."""
        started: list[LinkProxy] = []
        try:
            for proxy in self.proxies.values():
                await proxy.start()
                started.append(proxy)
        except BaseException:
            for proxy in started:
                await proxy.close()
            raise
        self._started = True
        for p in self.pairs():
            self._record(p, "start", self._pair_mode[p].value)

    async def close(self) -> None:
        """Stop schedules, then every proxy."""
        for task in list(self._schedules):
            task.cancel()
        if self._schedules:
            await asyncio.gather(*self._schedules, return_exceptions=True)
        for proxy in self.proxies.values():
            await proxy.close()
        if self._started:
            self._started = False
            for p in self.pairs():
                self._record(p, "stop", self._pair_mode[p].value)

    async def __aenter__(self) -> LinkSet:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- structure ----------------------------------------------------------------
    def pairs(self) -> list[Pair]:
        """Unordered pairs with at least one proxy."""
        return sorted({pair(a, b) for a, b in self.proxies})

    def uncovered_pairs(self) -> list[Pair]:
        """Pairs of the mission with no proxy in either direction (not controllable)."""
        every = {pair(a, b) for a, b in itertools.combinations(self.mission.sites, 2)}
        return sorted(every - set(self.pairs()))

    def half_covered_pairs(self) -> list[Pair]:
        """Pairs where only one site dials the other through a proxy."""
        return [p for p in self.pairs() if len(self._proxies_of(p)) == 1]

    def proxy(self, dialler: str, peer: str) -> LinkProxy:
        """The proxy site ``dialler`` uses to reach ``peer``."""
        try:
            return self.proxies[(dialler, peer)]
        except KeyError:
            raise LinkError(f"no link proxy for {dialler}->{peer}: sites.{dialler}.dial.{peer} "
                            "is not in the mission") from None

    def _check_site(self, s: str) -> None:
        if s not in self.mission.sites:
            raise LinkError(f"site {s!r} is not in the mission (sites: {', '.join(self.mission.sites)})")

    def _proxies_of(self, p: Pair) -> list[LinkProxy]:
        a, b = p
        return [x for x in (self.proxies.get((a, b)), self.proxies.get((b, a))) if x is not None]

    # -- control ------------------------------------------------------------------
    def mode(self, a: str, b: str) -> LinkMode:
        """The mode last set on the pair {a, b}."""
        self._check_site(a)
        self._check_site(b)
        p = pair(a, b)
        if p not in self._pair_mode:
            raise LinkError(f"link {a}-{b} has no proxy in either direction")
        return self._pair_mode[p]

    async def set_link(self, a: str, b: str, mode: LinkMode | str, *,
                       policy: BlackholePolicy | str | None = None) -> None:
        """Put both directions of the pair {a, b} in ``mode``."""
        self._check_site(a)
        self._check_site(b)
        p = pair(a, b)
        proxies = self._proxies_of(p)
        if not proxies:
            raise LinkError(f"link {a}-{b} has no proxy in either direction "
                            f"(add sites.{a}.dial.{b} or sites.{b}.dial.{a} to the mission)")
        mode = LinkMode(mode)
        if self._pair_mode[p] is not mode:  # recorded when commanded, before resets wind down
            self._pair_mode[p] = mode
            self._record(p, "mode", mode.value)
        await asyncio.gather(*(x.set_mode(mode, policy=policy) for x in proxies))

    async def cut(self, a: str, b: str, mode: LinkMode | str = LinkMode.RESET) -> None:
        """Take the pair {a, b} down (by reset unless ``mode`` says blackhole)."""
        mode = LinkMode(mode)
        if mode is LinkMode.UP:
            raise LinkError("cut needs a down mode: reset or blackhole")
        await self.set_link(a, b, mode)

    async def restore(self, a: str, b: str) -> None:
        await self.set_link(a, b, LinkMode.UP)

    async def partition(self, *groups: Iterable[str], mode: LinkMode | str = LinkMode.RESET) -> None:
        """Split the sites into ``groups``: cut links between groups, bring up links within.

        Every site of the mission must be in exactly one group.
        """
        mode = LinkMode(mode)
        if mode is LinkMode.UP:
            raise LinkError("partition needs a down mode: reset or blackhole")
        gs = [list(g) for g in groups]
        for g in gs:
            for s in g:
                self._check_site(s)
        missing = [s for s in self.mission.sites if not any(s in g for g in gs)]
        if missing:
            raise LinkError(f"partition leaves site {missing[0]!r} in no group")
        try:
            cut, keep = cross_pairs(gs), within_pairs(gs)
        except ValueError as e:
            raise LinkError(str(e)) from None
        await self._set_pairs(keep, LinkMode.UP)
        await self._set_pairs(cut, mode)

    async def heal(self) -> None:
        """Bring every link up."""
        await self._set_pairs(self.pairs(), LinkMode.UP)

    async def _set_pairs(self, pairs: Iterable[Pair], mode: LinkMode) -> None:
        controllable = set(self.pairs())
        await asyncio.gather(*(self.set_link(a, b, mode) for a, b in pairs if (a, b) in controllable))

    async def apply(self, action: LinkAction) -> None:
        """Carry out one schedule action (pairs without a proxy are skipped)."""
        for a, b in action.pairs:
            self._check_site(a)
            self._check_site(b)
        await self._set_pairs(action.pairs, action.mode)

    def start_schedule(self, schedule: Schedule, *, time_scale: float = 1.0) -> asyncio.Task[None]:
        """Run ``schedule`` in the background from now; cancelled by :meth:`close`."""
        for a, b in schedule.pairs():
            self._check_site(a)
            self._check_site(b)
        task = asyncio.get_running_loop().create_task(
            run_schedule(self.apply, schedule, time_scale=time_scale), name="link schedule")
        self._schedules.add(task)
        task.add_done_callback(self._schedules.discard)
        return task

    def set_shape(self, src: str, dst: str, shape: Shape) -> None:
        """Shape every byte ``src`` sends to ``dst``, on both proxies of the pair."""
        self._check_site(src)
        self._check_site(dst)
        touched = False
        if (src, dst) in self.proxies:
            self.proxies[(src, dst)].set_shape(FORWARD, shape)
            touched = True
        if (dst, src) in self.proxies:
            self.proxies[(dst, src)].set_shape(REVERSE, shape)
            touched = True
        if not touched:
            raise LinkError(f"link {src}-{dst} has no proxy in either direction")

    def shape(self, src: str, dst: str) -> Shape:
        """The shape of bytes ``src`` sends to ``dst``."""
        if (src, dst) in self.proxies:
            return self.proxies[(src, dst)].shape(FORWARD)
        if (dst, src) in self.proxies:
            return self.proxies[(dst, src)].shape(REVERSE)
        raise LinkError(f"link {src}-{dst} has no proxy in either direction")

    # -- observation ----------------------------------------------------------------
    def describe(self) -> dict[str, Any]:
        """JSON-ready state of every pair and proxy."""
        links = []
        for p in self.pairs():
            links.append({"pair": f"{p[0]}-{p[1]}", "sites": list(p), "mode": self._pair_mode[p].value,
                          "proxies": [x.describe() for x in self._proxies_of(p)]})
        return {"mission": self.mission.name, "sites": list(self.mission.sites), "links": links,
                "uncovered": [f"{a}-{b}" for a, b in self.uncovered_pairs()],
                "half_covered": [f"{a}-{b}" for a, b in self.half_covered_pairs()]}

    def proxy_history(self) -> list[LinkEvent]:
        """Every proxy's events, in time order."""
        return sorted((e for x in self.proxies.values() for e in x.history), key=lambda e: e.t)

    def _record(self, p: Pair, kind: str, value: Any) -> None:
        try:
            t = asyncio.get_running_loop().time()
        except RuntimeError:
            t = time.monotonic()
        self.history.append(LinkEvent(time.time(), t, f"{p[0]}-{p[1]}", kind, value))


def groups_from_text(text: str) -> list[list[str]]:
    """``"A,B|C,D"`` -> ``[["A", "B"], ["C", "D"]]`` (for command lines)."""
    groups = [[s.strip() for s in g.split(",") if s.strip()] for g in text.split("|")]
    if len(groups) < 2 or any(not g for g in groups):
        raise ValueError(f"groups {text!r} must look like A,B|C,D (two or more non-empty groups)")
    return groups


__all__ = ["LinkSet", "groups_from_text"]
