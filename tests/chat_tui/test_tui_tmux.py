"""Smoke test of the full-screen app in a real terminal: tmux runs ``python -m chat_tui`` against a real server."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest
from tui_servers import PASSWORD, TuiSites, env

from chat_server.client import ChatClient

TMUX = shutil.which("tmux")
pytestmark = pytest.mark.skipif(TMUX is None, reason="tmux is not installed (deploy/sysdeps.sh installs it)")


def tmux(sock: str, *args: str) -> str:
    assert TMUX is not None
    r = subprocess.run([TMUX, "-L", sock, *args], capture_output=True, text=True, timeout=10)
    assert r.returncode == 0, r.stderr
    return r.stdout


def capture(sock: str) -> str:
    return tmux(sock, "capture-pane", "-p", "-t", "tui")


def wait_screen(sock: str, text: str, timeout: float = 20.0) -> str:
    deadline = time.monotonic() + timeout
    screen = ""
    while time.monotonic() < deadline:
        screen = capture(sock)
        if text in screen:
            return screen
        time.sleep(0.1)
    raise AssertionError(f"{text!r} not on screen after {timeout} s:\n{screen}")


async def test_full_app_in_tmux_shows_sent_and_received_messages(mission: TuiSites):
    sock = f"rcm-tui-{os.getpid()}"
    room = f"tmux-{os.getpid()}"
    e = env()
    e["RCM_CHAT_PASSWORD"] = PASSWORD
    e["TERM"] = "xterm-256color"
    cmd = f"{sys.executable} -m chat_tui {mission.url('A')} --user alice"
    env_args = [a for k in ("RCM_CHAT_PASSWORD", "PYTHONPATH", "TERM") for a in ("-e", f"{k}={e[k]}")]
    tmux(sock, "-f", "/dev/null", "new-session", "-d", "-s", "tui", "-x", "100", "-y", "30", *env_args, cmd)
    bob = await ChatClient.connect(mission.url("B"), "bob", PASSWORD)
    try:
        wait_screen(sock, "alice@A")
        wait_screen(sock, "B connected")
        await bob.join(room)
        tmux(sock, "send-keys", "-t", "tui", "-l", f"/join {room}")
        tmux(sock, "send-keys", "-t", "tui", "Enter")
        wait_screen(sock, f"# {room}")
        tmux(sock, "send-keys", "-t", "tui", "-l", "hello through tmux")
        tmux(sock, "send-keys", "-t", "tui", "Enter")
        screen = wait_screen(sock, "alice@A: hello through tmux  ✓ 2/2")
        got = await bob.wait_for(lambda f: f.get("type") == "message" and f.get("room") == room, 10)
        assert got["text"] == "hello through tmux" and got["user"] == "alice"
        await bob.say(room, "bob here")
        screen = wait_screen(sock, "bob@B: bob here")
        assert screen.index("hello through tmux") < screen.index("bob here")
        tmux(sock, "send-keys", "-t", "tui", "C-q")      # the app quits, so its session ends
        deadline = time.monotonic() + 10

        def alive() -> bool:
            r = subprocess.run([TMUX, "-L", sock, "list-sessions"], capture_output=True, text=True)
            return "tui:" in r.stdout
        while time.monotonic() < deadline and alive():
            time.sleep(0.1)
        assert not alive(), "Ctrl+Q did not quit the app"
    finally:
        await bob.close()
        subprocess.run([TMUX, "-L", sock, "kill-server"], capture_output=True)
