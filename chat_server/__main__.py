"""Command line (Contract 4).

    python -m chat_server --mission FILE --site NAME
    python -m chat_server adduser --mission FILE --site NAME USER      (password on stdin)
"""
from __future__ import annotations

import asyncio
import getpass
import signal
import sys
from typing import NoReturn

from rcm.cli import OneLineParser, die, setup_logging, stop_on_term
from rcm.config import MissionError, load_mission

from .accounts import hash_password
from .config import chat_settings
from .protocol import USER_NAME

PROG = "python -m chat_server"


def fail(message: str, status: int = 2) -> NoReturn:
    """One line on stderr and a non-zero exit (2: bad arguments or configuration, 1: runtime failure)."""
    die("chat_server", message, status)


def server_parser() -> OneLineParser:
    p = OneLineParser(prog=PROG, description="Run the chat server of one site (chat protocol v1 on /ws). "
                      f"To create an account: {PROG} adduser --mission FILE --site NAME USER (password on stdin).")
    p.add_argument("--mission", required=True, metavar="FILE", help="mission file (TOML)")
    p.add_argument("--site", required=True, metavar="NAME", help="this site's name in the mission")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    return p


def adduser_parser() -> OneLineParser:
    p = OneLineParser(prog=f"{PROG} adduser", description="Create an account at a site. The password is read "
                      "from stdin (one line; prompted without echo on a terminal).")
    p.add_argument("--mission", required=True, metavar="FILE", help="mission file (TOML)")
    p.add_argument("--site", required=True, metavar="NAME", help="the site that keeps the account")
    p.add_argument("--replace", action="store_true", help="set a new password for an existing user")
    p.add_argument("user", help="user name: a letter, then letters, digits, '_', '.', '-' (at most 32)")
    return p


def read_password() -> str:
    if sys.stdin.isatty():
        pw = getpass.getpass("Password: ")
        if getpass.getpass("Again: ") != pw:
            fail("the passwords differ")
        return pw
    line = sys.stdin.readline()
    return line[:-1] if line.endswith("\n") else line


def adduser(argv: list[str]) -> int:
    args = adduser_parser().parse_args(argv)
    if not USER_NAME.match(args.user):
        fail(f"user name {args.user!r} must match {USER_NAME.pattern}", 2)
    try:
        mission = load_mission(args.mission)
        mission.site(args.site)
        settings = chat_settings(mission)
    except MissionError as e:
        fail(str(e))
    password = read_password()
    if not password:
        fail("empty password (give it on stdin, one line)", 1)
    from .store import ChatStore
    store = ChatStore(mission.site_dir(args.site) / "chat" / "chat.db")
    try:
        if not store.add_user(args.user, hash_password(password, settings.kdf_n), replace=args.replace):
            fail(f"user {args.user!r} already exists at site {args.site} (use --replace to change the password)", 1)
    finally:
        store.close()
    print(f"user {args.user} {'updated' if args.replace else 'added'} at site {args.site}")
    return 0


async def serve(mission_path: str, site: str) -> int:
    from .server import ChatServer
    try:
        mission = load_mission(mission_path)
        mission.site(site)
        settings = chat_settings(mission)
    except MissionError as e:
        fail(str(e))
    try:
        server = ChatServer(mission, site, settings)
    except MissionError as e:
        fail(str(e))
    try:
        await server.start()
    except OSError as e:
        await server.stop()
        fail(f"cannot listen on {server.host}:{server.port}: {e.strerror or e}", 1)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    print(f"chat server {site} ready on {server.scheme}://{server.host}:{server.port}/ (WebSocket /ws)", flush=True)
    await stop.wait()
    await server.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "adduser":
        return adduser(argv[1:])
    stop_on_term()
    args = server_parser().parse_args(argv)
    setup_logging(args.log_level, args.site, "chat")
    return asyncio.run(serve(args.mission, args.site))


if __name__ == "__main__":
    raise SystemExit(main())
