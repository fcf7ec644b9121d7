"""TEST HELPER: real RCM and chat server processes of a small mission, for the chat_tui tests.

``TuiSites`` writes a mission file with free loopback ports (faultinject.missions),
starts ``python -m rcm`` and ``python -m chat_server`` per site with the local
launcher every harness shares (``faultinject.procs``), creates user accounts,
and can restart a chat server (same port) to test reconnection.
"""
from __future__ import annotations

import os
from pathlib import Path

from contracts.mission import load_mission
from faultinject.missions import write_mission
from faultinject.procs import LocalChat, LocalRcm

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
    """RCM + chat servers for ``sites``, with ``users`` per site (the launcher: faultinject.procs)."""

    def __init__(self, root: Path, sites: list[str], users: dict[str, list[str]]) -> None:
        self.root = root
        self.sites = sites
        self.path = write_mission(root / "mission.toml", "tui", sites, rcm=FAST_RCM, chat=FAST_CHAT)
        self.mission = load_mission(self.path)
        self.users = users
        self.rcm = LocalRcm(self.path, env=env())
        self.chat = LocalChat(self.path, env=env())

    def url(self, site: str) -> str:
        return self.chat.url(site)

    def start(self) -> TuiSites:
        self.rcm.start_all()
        self.chat.add_users(self.users, PASSWORD, roles=("flash",))      # they send FLASH: [chat] flash_role
        self.chat.start_all(timeout=20.0)
        return self

    def start_chat(self, site: str) -> None:
        self.chat.start(site)

    def wait_chat(self, site: str, timeout: float = 20.0) -> None:
        self.chat.wait_ready(site, timeout)

    def chat_running(self, site: str) -> bool:
        return self.chat.alive(site)

    def stop_chat(self, site: str) -> None:
        self.chat.stop(site)

    def log_tail(self, site: str) -> str:
        return self.chat.log_tail(site)

    def stop(self) -> None:
        self.chat.stop_all()
        self.rcm.stop_all()
