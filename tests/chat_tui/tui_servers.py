"""TEST HELPER: real RCM and chat server processes of a small mission, for the chat_tui tests.

``TuiSites`` writes a mission file with free loopback ports (faultinject.missions),
starts ``python -m rcm`` and ``python -m chat_server`` per site, creates user
accounts with ``python -m chat_server adduser``, and can restart a chat server
(same port) to test reconnection.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from faultinject.missions import write_mission
from faultinject.procs import LocalRcm
from rcm.config import load_mission

PASSWORD = "correct horse"
REPO = Path(__file__).resolve().parents[2]
# Fast failure detection so status changes show up within a second or two.
FAST_RCM = {"heartbeat_timeout": 0.2, "liveness_timeout": 1.0, "silence_timeout": 2.0,
            "suspect_timeout": 3.0, "reconnect_period": 0.3}
FAST_CHAT = {"kdf_n": 1024, "receipt_interval": 0.05, "presence_interval": 0.05, "rcm_ack_interval": 0.05}


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = str(REPO) + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
    return e


class TuiSites:
    """RCM + chat servers for ``sites``, with ``users`` per site."""

    def __init__(self, root: Path, sites: list[str], users: dict[str, list[str]]) -> None:
        self.root = root
        self.sites = sites
        self.path = write_mission(root / "mission.toml", "tui", sites, rcm=FAST_RCM, chat=FAST_CHAT)
        self.mission = load_mission(self.path)
        self.users = users
        self.rcm = LocalRcm(self.path, env=env())
        self.chat: dict[str, subprocess.Popen] = {}

    def url(self, site: str) -> str:
        c = self.mission.site(site).chat
        return f"ws://{c.host}:{c.port}/ws"

    def start(self) -> TuiSites:
        self.rcm.start_all()
        for site, names in self.users.items():
            for u in names:
                subprocess.run([sys.executable, "-m", "chat_server", "adduser", "--mission", str(self.path),
                                "--site", site, u], input=PASSWORD + "\n", text=True, check=True,
                               capture_output=True, env=env(), timeout=30)
        for s in self.sites:
            self.start_chat(s)
        for s in self.sites:
            self.wait_chat(s)
        return self

    def start_chat(self, site: str) -> None:
        logdir = self.mission.site_dir(site) / "logs"
        logdir.mkdir(parents=True, exist_ok=True)
        with open(logdir / "chat.log", "ab") as log:
            self.chat[site] = subprocess.Popen(
                [sys.executable, "-m", "chat_server", "--mission", str(self.path), "--site", site],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env())

    def wait_chat(self, site: str, timeout: float = 20.0) -> None:
        c = self.mission.site(site).chat
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.chat[site].poll() is not None:
                raise RuntimeError(f"chat server {site} exited: {self.log_tail(site)}")
            try:
                with socket.create_connection((c.host, c.port), 0.5):
                    return
            except OSError:
                time.sleep(0.05)
        raise TimeoutError(f"chat server {site} not listening after {timeout} s")

    def stop_chat(self, site: str) -> None:
        p = self.chat.pop(site, None)
        if p is not None and p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def log_tail(self, site: str) -> str:
        path = self.mission.site_dir(site) / "logs" / "chat.log"
        try:
            return "\n".join(path.read_text(errors="replace").splitlines()[-20:])
        except FileNotFoundError:
            return "(no log)"

    def stop(self) -> None:
        for s in list(self.chat):
            self.stop_chat(s)
        self.rcm.stop_all()
