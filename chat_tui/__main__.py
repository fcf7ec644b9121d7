"""Command line (Contract 4): ``python -m chat_tui ws://HOST:PORT/ws --user NAME [--plain]``."""
from __future__ import annotations

import argparse
import asyncio
import getpass
import os
import signal
import sys
from typing import NoReturn
from urllib.parse import urlsplit

from chat_server.protocol import USER_NAME

PROG = "python -m chat_tui"
PASSWORD_ENV = "RCM_CHAT_PASSWORD"


class OneLineParser(argparse.ArgumentParser):
    """Bad arguments: one clear line on stderr, exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def fail(message: str, status: int = 2) -> NoReturn:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    raise SystemExit(status)


def parser() -> OneLineParser:
    p = OneLineParser(
        prog=PROG,
        description="Chat with the other sites of a mission through your site's chat server. "
                    "Full-screen Textual client by default; --plain for a line client (slow links, scripts).",
        epilog=f"The password is read from ${PASSWORD_ENV} if set (for scripts), else asked for: on the login "
               "screen, or with a prompt in --plain mode. Type /help in the client for its commands.")
    p.add_argument("url", help="the chat server's WebSocket, e.g. ws://127.0.0.1:8101/ws")
    p.add_argument("--user", required=True, help="your user name at that site")
    p.add_argument("--ca", metavar="FILE",
                   help="wss:// only: trust this CA certificate (the mission CA, <data_dir>/<site>/tls/ca.pem) "
                        "instead of the system's")
    p.add_argument("--plain", action="store_true",
                   help="line client: one line per event; reads commands from stdin when it is a pipe")
    p.add_argument("--password-env", default=PASSWORD_ENV, metavar="VAR",
                   help=f"environment variable holding the password (default {PASSWORD_ENV})")
    p.add_argument("--retry-max", type=float, default=15.0, metavar="SECONDS",
                   help="longest wait between reconnection attempts (default 15)")
    p.add_argument("--wait", type=float, default=30.0, metavar="SECONDS",
                   help="--plain from a pipe: at the end of input, wait this long for replies (default 30)")
    return p


def check_url(url: str) -> str:
    """A ws:// or wss:// URL with a host and a valid port, or a one-line error."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as e:
        fail(f"bad URL {url!r}: {e}")
    if parts.scheme not in ("ws", "wss"):
        fail(f"bad URL {url!r}: it must start with ws:// or wss:// (e.g. ws://127.0.0.1:8101/ws)")
    if not parts.hostname:
        fail(f"bad URL {url!r}: no host")
    if port == 0:
        fail(f"bad URL {url!r}: port 0")
    return url


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(sys.argv[1:] if argv is None else argv)
    url = check_url(args.url)
    if not USER_NAME.match(args.user):
        fail(f"user name {args.user!r} must match {USER_NAME.pattern}")
    if args.retry_max <= 0 or args.wait < 0:
        fail("--retry-max must be positive and --wait not negative")
    password = os.environ.get(args.password_env) or None
    ssl_context = None
    if args.ca is not None:
        if not url.startswith("wss://"):
            fail("--ca is for wss:// URLs only")
        from chat_server.client import client_ssl_context
        try:
            ssl_context = client_ssl_context(args.ca)
        except (OSError, ValueError) as e:     # ssl.SSLError is an OSError
            fail(f"--ca {args.ca}: {getattr(e, 'strerror', None) or e}")

    from .link import Backoff
    backoff = Backoff(initial=min(0.5, args.retry_max), maximum=args.retry_max)
    if args.plain:
        return run_plain(url, args.user, password, backoff, args.wait, ssl_context)
    if not sys.stdout.isatty():
        fail("the full-screen client needs a terminal; use --plain for pipes and scripts")
    from .app import ChatApp
    app = ChatApp(url, args.user, password, backoff=backoff, ssl=ssl_context)
    result = app.run()
    return result if isinstance(result, int) else 0


def run_plain(url: str, user: str, password: str | None, backoff: object, wait: float,
              ssl_context: object = None) -> int:
    from .link import Backoff
    from .plain import PlainClient
    assert isinstance(backoff, Backoff)
    interactive = sys.stdin.isatty()
    if password is None:
        if not interactive:
            fail(f"no password: set ${PASSWORD_ENV} (or --password-env VAR) when stdin is not a terminal")
        try:
            password = getpass.getpass(f"password for {user}: ")
        except (EOFError, KeyboardInterrupt):
            return 1
    client = PlainClient(url, user, password, sys.stdout, backoff=backoff, ssl=ssl_context)

    async def go() -> int:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, task.cancel)
        try:
            if interactive:
                return await client.run_terminal()
            return await client.run_pipe(sys.stdin, wait)
        except asyncio.CancelledError:
            return 0

    return asyncio.run(go())


if __name__ == "__main__":
    raise SystemExit(main())
