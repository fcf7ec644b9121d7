"""The chat server processes of a mission on this machine (the scenario runner's sites).

``LocalChat`` is ``deploy.local.LocalRcm``'s counterpart for ``python -m
chat_server``: start one per site, wait until its HTTP port answers, kill -9 it
(a crash) or stop it with SIGTERM (SIGKILL after a grace period). Accounts are
created with ``python -m chat_server adduser`` (password on stdin). Each
process logs to ``data_dir/<site>/logs/chat.log``.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from rcm.config import Mission, load_mission


class LocalChat:
    """The chat server processes of a mission's sites."""

    def __init__(self, mission_path: Path, sites: list[str] | None = None, log_level: str = "info",
                 env: dict[str, str] | None = None) -> None:
        self.mission_path = Path(mission_path)
        self.mission: Mission = load_mission(self.mission_path)
        self.sites = sites or list(self.mission.sites)
        self.log_level = log_level
        self.env = {**os.environ, **(env or {})}
        self.procs: dict[str, subprocess.Popen] = {}

    def url(self, site: str) -> str:
        c = self.mission.site(site).chat
        return f"ws://{c.host}:{c.port}/ws"

    def http(self, site: str) -> str:
        c = self.mission.site(site).chat
        return f"http://{c.host}:{c.port}"

    def add_users(self, users: dict[str, list[str]], password: str) -> None:
        """Create accounts (site -> user names), all adduser processes at once."""
        running = []
        for site, names in users.items():
            for u in names:
                running.append((site, u, subprocess.Popen(
                    [sys.executable, "-m", "chat_server", "adduser", "--mission", str(self.mission_path),
                     "--site", site, u], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT, env=self.env)))
        for site, u, p in running:
            out, _ = p.communicate((password + "\n").encode(), timeout=60)
            if p.returncode != 0:
                raise RuntimeError(f"adduser {u} at {site} failed: {out.decode(errors='replace').strip()}")

    def start(self, site: str) -> subprocess.Popen:
        logdir = self.mission.site_dir(site) / "logs"
        logdir.mkdir(parents=True, exist_ok=True)
        with open(logdir / "chat.log", "ab") as log:
            p = subprocess.Popen([sys.executable, "-m", "chat_server", "--mission", str(self.mission_path),
                                  "--site", site, "--log-level", self.log_level],
                                 stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=self.env)
        self.procs[site] = p
        return p

    def wait_ready(self, site: str, timeout: float = 30.0) -> None:
        """Return once the site's chat port accepts connections."""
        c = self.mission.site(site).chat
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            p = self.procs[site]
            if p.poll() is not None:
                raise RuntimeError(f"chat server {site} exited with {p.returncode}: {self.log_tail(site)}")
            try:
                with socket.create_connection((c.host, c.port), 0.5):
                    return
            except OSError:
                time.sleep(0.05)
        raise TimeoutError(f"chat server {site} not listening after {timeout} s: {self.log_tail(site)}")

    def log_tail(self, site: str, lines: int = 20) -> str:
        path = self.mission.site_dir(site) / "logs" / "chat.log"
        try:
            return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"

    def alive(self, site: str) -> bool:
        p = self.procs.get(site)
        return p is not None and p.poll() is None

    def kill(self, site: str) -> None:
        """SIGKILL, as a crash."""
        p = self.procs.pop(site, None)
        if p is not None and p.poll() is None:
            p.kill()
            p.wait()

    def stop(self, site: str, grace: float = 15.0) -> int | None:
        p = self.procs.pop(site, None)
        if p is None:
            return None
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(grace)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        return p.returncode

    def stop_all(self) -> dict[str, int | None]:
        for p in self.procs.values():       # signal every one first, then wait: they stop in parallel
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        return {s: self.stop(s) for s in list(self.procs)}

    def __enter__(self) -> "LocalChat":
        for s in self.sites:
            self.start(s)
        for s in self.sites:
            self.wait_ready(s)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop_all()


__all__ = ["LocalChat"]
