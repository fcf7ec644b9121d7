"""Shared by the ``deploy up`` tests: fast timeouts, supervisor status, stopping the supervisor."""
from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import IO, Any

from chat_server.launcher import peers_connected

REPO = Path(__file__).resolve().parents[2]
FAST_RCM = {"heartbeat_timeout": 0.2, "liveness_timeout": 1.0, "silence_timeout": 2.0, "suspect_timeout": 20.0,
            "reconnect_period": 0.3}
FAST_CHAT = {"kdf_n": 1024, "receipt_interval": 0.05, "presence_interval": 0.05, "rcm_ack_interval": 0.05}


def supervisor_status(data_dir: Path, site: str) -> dict[str, Any] | None:
    """The site's ``supervisor.json`` under ``data_dir``, or None while it is not (validly) written."""
    try:
        return json.loads((data_dir / site / "logs" / "supervisor.json").read_text())
    except (OSError, ValueError):
        return None


def all_connected(st: dict[str, Any] | None, peers: list[str]) -> bool:
    """The supervisor status's last health shows RCM up and every one of ``peers`` connected (the launcher's rule)."""
    return peers_connected((st or {}).get("health"), peers)


def stop_deploy(proc: subprocess.Popen, out: IO[Any]) -> int:
    """SIGINT ``deploy up`` (if still running) and return its exit code; kill its group if it hangs."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    try:
        return proc.wait(60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    finally:
        out.close()
