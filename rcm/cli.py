"""Command-line conventions shared by every entry point of the suite.

Bad arguments and bad configuration end the program with exit status 2 and a
single line on stderr naming the problem (no usage dump, no traceback).
"""
from __future__ import annotations

import argparse
import logging
import signal
import sys
from typing import NoReturn


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
