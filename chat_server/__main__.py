"""Command line (Contract 4).

    python -m chat_server --mission FILE --site NAME
    python -m chat_server adduser --mission FILE --site NAME [--role ROLE] USER      (password on stdin)
    python -m chat_server roles --mission FILE --site NAME [USER [--grant ROLE] [--revoke ROLE]]
    python -m chat_server adduser ... [--clearance LABEL] USER
    python -m chat_server clearance --mission FILE --site NAME [USER [LABEL]]
"""
from __future__ import annotations

import asyncio
import getpass
import signal
import sys
from typing import TYPE_CHECKING, NoReturn

from contracts.labels import Label, LabelError
from contracts.mission import Mission, MissionError, load_mission
from rcm.cli import OneLineParser, add_event_loop_argument, die, event_loop_choice, run, setup_logging, stop_on_term

from .accounts import Clearances, Roles, hash_password, role_names
from .config import chat_settings
from .protocol import USER_NAME

if TYPE_CHECKING:
    from .store import ChatStore

PROG = "python -m chat_server"


def fail(message: str, status: int = 2) -> NoReturn:
    """One line on stderr and a non-zero exit (2: bad arguments or configuration, 1: runtime failure)."""
    die("chat_server", message, status)


def open_store(mission: Mission, site: str) -> ChatStore:
    """The site's chat database for a command, or its one-line error (a damaged file, say)."""
    from .store import ChatStore, StoreError
    try:
        return ChatStore(mission.site_dir(site) / "chat" / "chat.db")
    except StoreError as e:
        fail(str(e))


def server_parser() -> OneLineParser:
    p = OneLineParser(prog=PROG, description="Run the chat server of one site (chat protocol v1 on /ws). "
                      f"To create an account: {PROG} adduser --mission FILE --site NAME USER (password on stdin); "
                      f"its roles: {PROG} roles --mission FILE --site NAME [USER --grant ROLE]; its clearance "
                      f"(labeled missions): {PROG} clearance --mission FILE --site NAME [USER [LABEL]].")
    p.add_argument("--mission", required=True, metavar="FILE", help="mission file (TOML)")
    p.add_argument("--site", required=True, metavar="NAME", help="this site's name in the mission")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    add_event_loop_argument(p)
    return p


def account_parser(command: str, description: str) -> OneLineParser:
    """A subcommand on one site's accounts: ``--mission`` and ``--site`` (the site that keeps them)."""
    p = OneLineParser(prog=f"{PROG} {command}", description=description)
    p.add_argument("--mission", required=True, metavar="FILE", help="mission file (TOML)")
    p.add_argument("--site", required=True, metavar="NAME", help="the site that keeps the account")
    return p


def adduser_parser() -> OneLineParser:
    p = account_parser("adduser", "Create an account at a site. The password is read "
                         "from stdin (one line; prompted without echo on a terminal).")
    p.add_argument("--replace", action="store_true", help="set a new password for an existing user")
    p.add_argument("--role", action="append", default=[], metavar="ROLE",
                   help="grant the account a role (repeat it, or ROLE,ROLE), e.g. flash: [chat] flash_role")
    p.add_argument("--clearance", metavar="LABEL",
                   help="the account's clearance, as people write labels (e.g. SECRET or \"SECRET//REL TO GBR, "
                        "USA\"), at most the site's; default: the mission's default label (labeled missions)")
    p.add_argument("user", help="user name: a letter, then letters, digits, '_', '.', '-' (at most 32)")
    return p


def roles_parser() -> OneLineParser:
    p = account_parser("roles", "List the roles of a site's accounts, or grant and "
                         "revoke one account's (they apply to its next message: no restart). [chat] flash_role "
                         "(default flash) and immediate_role (default: none) name the roles FLASH and IMMEDIATE need.")
    p.add_argument("--grant", action="append", default=[], metavar="ROLE", help="give USER a role (repeatable)")
    p.add_argument("--revoke", action="append", default=[], metavar="ROLE", help="take a role from USER (repeatable)")
    p.add_argument("user", nargs="?", help="the account (without it: every account that holds a role)")
    return p


def clearance_parser() -> OneLineParser:
    p = account_parser("clearance", "List the clearances of a site's accounts, show one "
                         "account's, or set it (labeled missions; it applies to the account's next request: no "
                         "restart). A clearance is at most the site's ([sites.X.clearance]).")
    p.add_argument("user", nargs="?", help="the account (without it: every account and its clearance)")
    p.add_argument("label", nargs="?", help="the new clearance, e.g. SECRET or \"SECRET//REL TO GBR, USA\"")
    return p


def parse_clearance(mission: Mission, site: str, text: str) -> Label:
    """``--clearance``/``LABEL`` read against the mission's labels, at most the site's clearance (or fail)."""
    if not mission.labels.enabled:
        fail("this mission has no [labels] table: clearances need one")
    try:
        label = mission.labels.parse(text)
    except LabelError as e:
        fail(f"clearance: {e}")
    if not mission.clearance(site).dominates(label):
        fail(f"clearance {label} is above site {site}'s clearance {mission.clearance(site)}")
    return label


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
        roles = role_names(args.role)
    except ValueError as e:
        fail(f"--role: {e}")
    try:
        mission = load_mission(args.mission)
        mission.site(args.site)
        settings = chat_settings(mission)
    except MissionError as e:
        fail(str(e))
    clearance = parse_clearance(mission, args.site, args.clearance) if args.clearance is not None else None
    password = read_password()
    if not password:
        fail("empty password (give it on stdin, one line)", 1)
    store = open_store(mission, args.site)
    try:
        if not store.add_user(args.user, hash_password(password, settings.kdf_n), replace=args.replace):
            fail(f"user {args.user!r} already exists at site {args.site} (use --replace to change the password)", 1)
        Roles(store.db).grant(args.user, roles)
        clearances = Clearances(store.db, mission.labels, mission.clearance(args.site))
        if clearance is not None:
            clearances.set(args.user, clearance)
    finally:
        store.close()
    print(f"user {args.user} {'updated' if args.replace else 'added'} at site {args.site}"
          + (f" with role {', '.join(roles)}" if roles else "")
          + (f" cleared for {clearance}" if clearance is not None else ""))
    return 0


def clearance(argv: list[str]) -> int:
    """``clearance``: list, show, set (see ``clearance_parser``)."""
    args = clearance_parser().parse_args(argv)
    try:
        mission = load_mission(args.mission)
        mission.site(args.site)
    except MissionError as e:
        fail(str(e))
    label = parse_clearance(mission, args.site, args.label) if args.label is not None else None
    store = open_store(mission, args.site)
    try:
        if args.user is not None and store.password_hash(args.user) is None:
            fail(f"no user {args.user!r} at site {args.site} (create it with {PROG} adduser)", 1)
        table = Clearances(store.db, mission.labels, mission.clearance(args.site))
        if label is not None:
            table.set(args.user, label)
        for user in [args.user] if args.user is not None else store.users():
            print(f"{user}: {table.of(user)}")
    finally:
        store.close()
    return 0


def roles(argv: list[str]) -> int:
    """``roles``: list, grant, revoke (see ``roles_parser``)."""
    args = roles_parser().parse_args(argv)
    try:
        grant, revoke = role_names(args.grant), role_names(args.revoke)
    except ValueError as e:
        fail(str(e))
    if (grant or revoke) and args.user is None:
        fail("--grant and --revoke need the USER whose roles they change")
    try:
        mission = load_mission(args.mission)
        mission.site(args.site)
    except MissionError as e:
        fail(str(e))
    store = open_store(mission, args.site)
    try:
        if args.user is not None and store.password_hash(args.user) is None:
            fail(f"no user {args.user!r} at site {args.site} (create it with {PROG} adduser)", 1)
        table = Roles(store.db)
        if args.user is not None:
            table.grant(args.user, grant)
            table.revoke(args.user, revoke)
            print(f"{args.user}: {', '.join(sorted(table.of(args.user))) or '(no roles)'}")
        else:
            for user, held in table.table().items():
                print(f"{user}: {', '.join(held)}")
    finally:
        store.close()
    return 0


async def serve(mission_path: str, site: str) -> int:
    from rcm.durability.dirlock import DirLocked

    from .server import ChatServer
    from .store import StoreError
    try:
        mission = load_mission(mission_path)
        mission.site(site)
        settings = chat_settings(mission)
    except MissionError as e:
        fail(str(e))
    try:
        server = ChatServer(mission, site, settings)
    except (MissionError, StoreError, DirLocked) as e:
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
    if argv and argv[0] == "roles":
        return roles(argv[1:])
    if argv and argv[0] == "clearance":
        return clearance(argv[1:])
    stop_on_term()
    args = server_parser().parse_args(argv)
    loop = event_loop_choice(PROG, args.event_loop)
    setup_logging(args.log_level, args.site, "chat")
    return run(serve(args.mission, args.site), loop)


if __name__ == "__main__":
    raise SystemExit(main())
