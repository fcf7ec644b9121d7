"""``python -m rcm --mission FILE --site NAME``: run one site's RCM server."""
from __future__ import annotations

from contracts.mission import MissionError, load_mission
from rcm.cli import (
    OneLineParser,
    add_event_loop_argument,
    die,
    event_loop_choice,
    open_files_limit,
    run,
    setup_logging,
    stop_on_term,
)
from rcm.durability.state import StateError

RCM_OPEN_FILES = 4096
"""The soft limit of open files an RCM server raises itself to (its peers, its local clients, its log): never
an accept failing for want of one (on Python 3.11 that spins: chat_server.admission.OpenFiles)."""


def main(argv: list[str] | None = None) -> int:
    stop_on_term()
    ap = OneLineParser(prog="python -m rcm",
                       description="Run the RCM server of one site of a mission.")
    ap.add_argument("--mission", required=True, help="mission file (TOML)")
    ap.add_argument("--site", required=True, help="this site's name in the mission")
    ap.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    add_event_loop_argument(ap)
    args = ap.parse_args(argv)
    loop = event_loop_choice(ap.prog, args.event_loop)
    try:
        mission = load_mission(args.mission)
        mission.site(args.site)
    except MissionError as e:
        die(ap.prog, str(e))
    setup_logging(args.log_level, args.site)
    open_files_limit(RCM_OPEN_FILES)
    from rcm.durability.dirlock import DirLocked
    from rcm.durability.wal import WalError
    from rcm.server import serve
    from rcm.server.tls import TlsError
    try:
        run(serve(mission, args.site), loop)
    except (StateError, TlsError, DirLocked) as e:
        die(ap.prog, str(e))
    except WalError as e:
        die(ap.prog, f"site {args.site} stopped: {e}", status=1)
    except OSError as e:
        die(ap.prog, f"cannot start site {args.site}: {e}", status=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
