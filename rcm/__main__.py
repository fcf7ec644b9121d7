"""``python -m rcm --mission FILE --site NAME``: run one site's RCM server."""
from __future__ import annotations

import asyncio

from contracts.mission import MissionError, load_mission
from rcm.cli import OneLineParser, die, setup_logging, stop_on_term
from rcm.durability.state import StateError


def main(argv: list[str] | None = None) -> int:
    stop_on_term()
    ap = OneLineParser(prog="python -m rcm",
                       description="Run the RCM server of one site of a mission.")
    ap.add_argument("--mission", required=True, help="mission file (TOML)")
    ap.add_argument("--site", required=True, help="this site's name in the mission")
    ap.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    args = ap.parse_args(argv)
    try:
        mission = load_mission(args.mission)
        mission.site(args.site)
    except MissionError as e:
        die(ap.prog, str(e))
    setup_logging(args.log_level, args.site)
    from rcm.durability.wal import WalError
    from rcm.server import serve
    from rcm.server.tls import TlsError
    try:
        asyncio.run(serve(mission, args.site))
    except (StateError, TlsError) as e:
        die(ap.prog, str(e))
    except WalError as e:
        die(ap.prog, f"site {args.site} stopped: {e}", status=1)
    except OSError as e:
        die(ap.prog, f"cannot start site {args.site}: {e}", status=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
