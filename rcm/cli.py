"""Command-line conventions shared by every entry point of the suite.

Bad arguments and bad configuration end the program with exit status 2 and a
single line on stderr naming the problem (no usage dump, no traceback).
"""
from __future__ import annotations

import argparse
import asyncio
import logging
import os
import resource
import signal
import sys
from collections.abc import Coroutine
from typing import Any, NoReturn, TypeVar

T = TypeVar("T")

#: The event loops a server may run on: Python's own, or uvloop (libuv; docs/performance.md measures both).
EVENT_LOOPS = ("asyncio", "uvloop")
EVENT_LOOP_ENV = "RCM_EVENT_LOOP"


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line: ``prog: error: message``."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"{self.prog}: error: {message} (see --help)\n")
        raise SystemExit(2)


def stop_on_term() -> None:
    """Until the server's event loop takes SIGTERM over, a stop request exits cleanly (status 0,
    ``finally`` blocks run) instead of by the signal's default action (status -15, read as a crash
    by a supervisor that stops a site still starting)."""
    def _stop(signum: int, frame: object) -> None:
        raise SystemExit(0)
    signal.signal(signal.SIGTERM, _stop)


def die(prog: str, message: str, status: int = 2) -> NoReturn:
    sys.stderr.write(f"{prog}: error: {message}\n")
    raise SystemExit(status)


def setup_logging(level: str, site: str | None = None, component: str = "rcm") -> None:
    tag = f"{component}[{site}]" if site else component
    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO),
                        format=f"%(asctime)s {tag} %(levelname)s %(message)s",
                        datefmt="%H:%M:%S", stream=sys.stderr)


def add_event_loop_argument(parser: argparse.ArgumentParser) -> None:
    """``--event-loop asyncio|uvloop``; its default is ``$RCM_EVENT_LOOP``, else asyncio."""
    parser.add_argument("--event-loop", choices=EVENT_LOOPS, default=None,
                        help=f"the event loop to run on (default: ${EVENT_LOOP_ENV}, else asyncio); "
                             "uvloop is faster for many clients (docs/performance.md)")


def event_loop_choice(prog: str, chosen: str | None) -> str:
    """The loop named on the command line, else in the environment; a clear error for anything else."""
    name = chosen or os.environ.get(EVENT_LOOP_ENV, "").strip() or "asyncio"
    if name not in EVENT_LOOPS:
        die(prog, f"{EVENT_LOOP_ENV}={name!r}: the event loop is one of {', '.join(EVENT_LOOPS)}")
    return name


def run(main: Coroutine[Any, Any, T], loop: str = "asyncio") -> T:
    """``asyncio.run(main)`` on the event loop named (``EVENT_LOOPS``)."""
    if loop == "uvloop":
        import uvloop
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(main)
    return asyncio.run(main)


def open_files_limit(want: int) -> int:
    """Raise this process's soft limit of open files to ``want`` if it is lower (never past the hard limit, as
    the Go runtime does at start); the soft limit now. A shell's default of 1,024 is below what a chat server's
    connection caps allow."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = want if hard == resource.RLIM_INFINITY else min(want, hard)
    if target > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):
            return soft
        return target
    return soft
