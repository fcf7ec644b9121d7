"""``python -m faultinject.proxy``: run every link of a mission until SIGINT/SIGTERM."""
from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import Sequence
from typing import NoReturn

from contracts.mission import MissionError, load_mission
from faultinject.links import LinkSet, groups_from_text
from faultinject.proxy import LinkError
from faultinject.schedule import Schedule, cross_pairs, flapping, periodic, run_schedule
from faultinject.shaping import BlackholePolicy, LinkMode, Shape

PROG = "python -m faultinject.proxy"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        """One clear line, exit status 2."""
        self.exit(2, f"{PROG}: error: {message}\n")


def _host_port(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise argparse.ArgumentTypeError(f"{text!r} must be HOST:PORT (port 0-65535, 0 picks one)")
    return host.strip("[]"), int(port)


def _seconds_pair(text: str) -> tuple[float, float]:
    try:
        a, b = (float(x) for x in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} must be two numbers of seconds, UP:DOWN") from None
    if not (a > 0 and b > 0):
        raise argparse.ArgumentTypeError(f"{text!r}: both durations must be > 0")
    return a, b


def _non_negative(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not v >= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be >= 0")
    return v


def _positive(text: str) -> float:
    v = _non_negative(text)
    if v == 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be > 0")
    return v


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, description=(
        "Run one link-emulating TCP proxy per [sites.X.dial] entry of a mission file "
        "(site X dials peer Y through it; it forwards to sites.Y.rcm) until SIGINT or SIGTERM. "
        "See docs/faultinject.md."))
    p.add_argument("--mission", required=True, metavar="FILE", help="mission file (TOML, Contract 1)")
    p.add_argument("--control", type=_host_port, metavar="HOST:PORT",
                   help="serve the HTTP control endpoint here (port 0 picks a free port)")
    p.add_argument("--seed", type=int, default=0, help="seed for all randomness (jitter, flapping); default 0")
    p.add_argument("--delay", type=_non_negative, default=0.0, metavar="S",
                   help="one-way delay in seconds, every direction of every link")
    p.add_argument("--jitter", type=_non_negative, default=0.0, metavar="S",
                   help="extra delay drawn uniformly from [0, S] per chunk (never reorders)")
    p.add_argument("--bandwidth", type=_positive, metavar="BPS",
                   help="bandwidth cap in bits/s per direction (e.g. 56000); default unlimited")
    p.add_argument("--queue-bytes", type=int, default=Shape().queue_bytes, metavar="N",
                   help="bytes a direction may hold before the proxy stops reading (back-pressure)")
    p.add_argument("--policy", choices=[x.value for x in BlackholePolicy], default="discard",
                   help="what a blackholed link does with arriving bytes (default discard)")
    p.add_argument("--down-mode", choices=["reset", "blackhole"], default="reset",
                   help="how scheduled outages take links down (default reset)")
    p.add_argument("--periodic", type=_seconds_pair, metavar="UP:DOWN",
                   help="alternate UP seconds up and DOWN seconds down (the paper: 30:10)")
    p.add_argument("--groups", metavar="A,B|C,D",
                   help="with --periodic: the outage is this partition (default: every link goes down)")
    p.add_argument("--flap", type=_seconds_pair, metavar="MEAN_UP:MEAN_DOWN",
                   help="every link flaps independently with exponential up/down periods (needs --duration)")
    p.add_argument("--duration", type=_positive, metavar="S",
                   help="length of the schedule in (unscaled) seconds; links stay up afterwards")
    p.add_argument("--time-scale", type=_positive, default=1.0, metavar="F",
                   help="multiply every schedule time by F (0.1 = ten times faster)")
    return p


def _schedule(args: argparse.Namespace, links: LinkSet) -> tuple[Schedule | None, bool]:
    """(schedule, repeat forever) from the arguments."""
    down = LinkMode(args.down_mode)
    if args.periodic:
        up_s, down_s = args.periodic
        if args.groups:
            groups = groups_from_text(args.groups)
            for g in groups:
                for s in g:
                    if s not in links.mission.sites:
                        raise ValueError(f"--groups: no site {s!r} in the mission")
            pairs = [p for p in cross_pairs(groups) if p in set(links.pairs())]
        else:
            pairs = links.pairs()
        if not pairs:
            raise ValueError("--periodic: the mission has no proxied link to take down")
        if args.duration is None:
            return periodic(pairs, up=up_s, down=down_s, cycles=1, down_mode=down), True
        return periodic(pairs, up=up_s, down=down_s, until=args.duration, down_mode=down), False
    if args.flap:
        if args.duration is None:
            raise ValueError("--flap needs --duration")
        mean_up, mean_down = args.flap
        return flapping(links.pairs(), seed=args.seed, mean_up=mean_up, mean_down=mean_down,
                        duration=args.duration, down_mode=down), False
    return None, False


async def _run_schedule(links: LinkSet, schedule: Schedule, repeat: bool, time_scale: float) -> None:
    while True:
        await run_schedule(links.apply, schedule, time_scale=time_scale)
        if not repeat:
            return


async def serve(args: argparse.Namespace) -> int:
    mission = load_mission(args.mission)
    shape = Shape(delay=args.delay, jitter=args.jitter, bandwidth_bps=args.bandwidth,
                  queue_bytes=args.queue_bytes)
    links = LinkSet(mission, shape=shape, policy=BlackholePolicy(args.policy), seed=args.seed)
    if not links.proxies:
        raise LinkError(f"mission {mission.name!r} has no [sites.X.dial] entries: no link to emulate")
    schedule, repeat = _schedule(args, links)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    control = None
    schedule_task: asyncio.Task[None] | None = None
    await links.start()
    try:
        for (a, b), proxy in links.proxies.items():
            host, port = proxy.address
            print(f"link {a}->{b}: {host}:{port} -> {proxy.target[0]}:{proxy.target[1]}", flush=True)
        for a, b in links.uncovered_pairs():
            print(f"warning: {a}-{b} has no dial entry either way: that link cannot be controlled", flush=True)
        for a, b in links.half_covered_pairs():
            print(f"warning: {a}-{b} is proxied one way only: cutting it leaves the other site's "
                  "own connections up", flush=True)
        if args.control:
            from faultinject.control import ControlServer
            control = ControlServer(links, *args.control)
            await control.start()
            print(f"control: {control.url}", flush=True)
        if schedule is not None:
            schedule_task = asyncio.create_task(_run_schedule(links, schedule, repeat, args.time_scale))
            print(f"schedule: {len(schedule.actions)} actions{' per cycle, repeating' if repeat else ''}, "
                  f"time scale {args.time_scale}, seed {args.seed}", flush=True)
        print("ready", flush=True)
        await stop.wait()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        if schedule_task is not None:
            schedule_task.cancel()
            await asyncio.gather(schedule_task, return_exceptions=True)
        if control is not None:
            await control.close()
        await links.close()
    print("stopped", flush=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return asyncio.run(serve(args))
    except (MissionError, LinkError, ValueError) as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2 if isinstance(e, (MissionError, ValueError)) else 1


if __name__ == "__main__":
    raise SystemExit(main())
