"""``python -m deploy``: run missions on this machine.

    python -m deploy demo [--mission FILE] [--duration SECONDS]
"""
from __future__ import annotations

import asyncio
from pathlib import Path

from rcm.cli import OneLineParser, die
from rcm.config import MissionError, load_mission

EXAMPLES = Path(__file__).resolve().parent / "examples"


def main(argv: list[str] | None = None) -> int:
    ap = OneLineParser(prog="python -m deploy", description="Run RCM suite missions on this machine.")
    sub = ap.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run every site of a mission with scripted senders")
    demo.add_argument("--mission", default=str(EXAMPLES / "paper-4site.toml"))
    demo.add_argument("--duration", type=float, default=60.0, help="seconds (default 60)")
    args = ap.parse_args(argv)
    if args.command == "demo":
        try:
            load_mission(args.mission)
        except MissionError as e:
            die(ap.prog, str(e))
        if args.duration < 20:
            die(ap.prog, "--duration must be at least 20 seconds (the demo kills and restarts a site)")
        from rich.console import Console

        from .rcm_demo import run_demo
        return asyncio.run(run_demo(Path(args.mission), args.duration, Console(highlight=False)))
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
