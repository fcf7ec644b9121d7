"""The real ``python -m chat_tui`` command: --plain clients at two sites, and the command line's errors."""
from __future__ import annotations

import os
import queue
import re
import socket
import subprocess
import sys
import threading
import time

from tui_servers import PASSWORD, TuiSites, env

CMD = [sys.executable, "-m", "chat_tui"]


class LineReader:
    """Reads a process's stdout on a thread; ``expect`` waits (bounded) for a line matching a pattern."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self._q: queue.Queue[str | None] = queue.Queue()
        self._thread = threading.Thread(target=self._pump, daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        with self.proc.stdout:
            for line in self.proc.stdout:
                self._q.put(line.rstrip("\n"))
        self._q.put(None)

    def close(self) -> None:
        """Kill the process if it still runs; close its pipes."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self._thread.join(10)

    def expect(self, pattern: str, timeout: float = 20.0) -> str:
        rx = re.compile(pattern)
        for line in self.lines:
            if rx.search(line):
                return line
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no line matching {pattern!r} within {timeout} s; got:\n" + "\n".join(self.lines))
            try:
                line = self._q.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                raise AssertionError(f"process ended before a line matching {pattern!r}; got:\n"
                                     + "\n".join(self.lines))
            self.lines.append(line)
            if rx.search(line):
                return line


def plain(url: str, user: str, password: str | None = PASSWORD, *extra: str) -> subprocess.Popen:
    e = env()
    e.pop("RCM_CHAT_PASSWORD", None)
    if password is not None:
        e["RCM_CHAT_PASSWORD"] = password
    return subprocess.Popen(CMD + [url, "--user", user, "--plain", *extra], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=e)


def send(proc: subprocess.Popen, line: str) -> None:
    assert proc.stdin is not None
    proc.stdin.write(line + "\n")
    proc.stdin.flush()


def finish(proc: subprocess.Popen) -> int:
    if proc.stdin is not None and not proc.stdin.closed:
        proc.stdin.close()
    try:
        return proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_plain_clients_at_two_sites_exchange_a_message(mission: TuiSites):
    room = f"crossing-{os.getpid()}"
    bob = plain(mission.url("B"), "bob")
    alice = plain(mission.url("A"), "alice")
    b, a = LineReader(bob), LineReader(alice)
    try:
        b.expect(r"^connection: connected to B as bob$")
        b.expect(r"^sites: A connected, B connected$")
        send(bob, f"/join {room}")
        a.expect(r"^connection: connected to A as alice$")
        send(alice, f"/join {room}")
        send(alice, "hello from site A")
        line = b.expect(rf"\[{room}\] alice@A: hello from site A$")
        assert re.match(r"^\d\d:\d\d:\d\d ", line)
        a.expect(rf"\[{room}\] alice@A \(you\): hello from site A$")
        a.expect(r"^receipt A:\d+ delivered at B \(2/2 sites\)$")
        send(bob, "and back from B")
        a.expect(rf"\[{room}\] bob@B: and back from B$")
        # Presence is coalesced and travels between sites: /who answers from
        # what site A knows, so ask once A has heard that bob is online.
        a.expect(r"^presence B: \+bob$")
        send(alice, "/who")
        a.expect(r"^--   B \(connected\): bob$")
        send(alice, "/frobnicate")
        a.expect(r"^!! unknown command /frobnicate \(try /help\)$")
        assert finish(alice) == 0
        assert finish(bob) == 0
    finally:
        a.close()
        b.close()


def test_plain_wrong_password_exits_non_zero_with_one_line(mission: TuiSites):
    p = plain(mission.url("A"), "alice", "wrong")
    out, _ = p.communicate("", timeout=30)
    assert p.returncode == 1
    assert "connection: login refused: unknown user, wrong password or expired session" in out.splitlines()


def test_plain_unreachable_server_says_so_and_retries_with_back_off():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    p = plain(f"ws://127.0.0.1:{port}/ws", "alice", "pw", "--retry-max", "0.4", "--wait", "1.5")
    r = LineReader(p)
    try:
        r.expect(rf"^connection: unreachable \(cannot connect to 127.0.0.1:{port}: Connection refused\); "
                 r"retry 1 in 0\.\d s$")
        r.expect(r"retry 3 in")
        send(p, "/join ops")
        p.stdin.close()      # type: ignore[union-attr]
        r.expect(r"^!! end of input: some requests got no reply within 1.5 s$")
        assert p.wait(20) == 1
    finally:
        r.close()


def run_cli(*args: str, stdin: str = "") -> subprocess.CompletedProcess:
    e = env()
    e.pop("RCM_CHAT_PASSWORD", None)
    return subprocess.run(CMD + list(args), input=stdin, capture_output=True, text=True, env=e, timeout=30)


def test_cli_help_and_bad_arguments():
    h = run_cli("--help")
    assert h.returncode == 0 and "--plain" in h.stdout and "RCM_CHAT_PASSWORD" in h.stdout
    for args, message in [
        (["http://127.0.0.1:8101/ws", "--user", "alice"], "it must start with ws:// or wss://"),
        (["ws://127.0.0.1:99999/ws", "--user", "alice"], "bad URL"),
        (["ws://127.0.0.1:8101/ws", "--user", "9lives"], "user name '9lives' must match"),
        (["ws://127.0.0.1:8101/ws"], "the following arguments are required: --user"),
        (["ws://127.0.0.1:8101/ws", "--user", "alice", "--plain"], "no password: set $RCM_CHAT_PASSWORD"),
    ]:
        r = run_cli(*args)
        assert r.returncode == 2, (args, r)
        assert r.stdout == "" and len(r.stderr.strip().splitlines()) == 1 and message in r.stderr, (args, r.stderr)
