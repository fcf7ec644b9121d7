"""``python -m deploy demo`` (without the Spark archive): it starts, operators chat, Ctrl-C stops it cleanly."""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from testkit import alive, descendants

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_demo_runs_operators_and_stops_cleanly_on_ctrl_c(tmp_path: Path) -> None:
    short = Path(tempfile.mkdtemp(prefix="rcmdemo-", dir="/tmp"))    # Unix socket paths must stay short
    try:
        run_demo_and_interrupt(tmp_path, short)
    finally:
        shutil.rmtree(short, ignore_errors=True)


def run_demo_and_interrupt(tmp_path: Path, demo_dir: Path) -> None:
    out_path = tmp_path / "demo.out"
    with open(out_path, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "deploy", "demo", "--duration", "300", "--interval", "0.5",
                                 "--outage", "3:2", "--no-archive", "--dir", str(demo_dir)], cwd=REPO,
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, env={**os.environ, "COLUMNS": "200"})
        try:
            deadline = time.monotonic() + 90
            while "every site sees every other connected" not in out_path.read_text(errors="replace"):
                assert proc.poll() is None, out_path.read_text(errors="replace")[-3000:]
                assert time.monotonic() < deadline, "demo sites never all connected"
                time.sleep(0.2)
            while "link awacs-ground2: reset" not in out_path.read_text(errors="replace"):   # first outage
                assert proc.poll() is None and time.monotonic() < deadline
                time.sleep(0.2)
            kids = descendants(proc.pid)
            assert len(kids) >= 8               # an RCM and a chat server per site
            proc.send_signal(signal.SIGINT)
            code = proc.wait(90)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    text = out_path.read_text(errors="replace")
    assert code == 0, text[-3000:]
    for site in ("ground1", "ground2", "awacs", "jstars"):
        assert re.search(rf"{site}\s+web UI http://127\.0\.0\.1:\d+/\s+TUI: RCM_CHAT_PASSWORD=demo \S+ -m chat_tui "
                         rf"ws://127\.0\.0\.1:\d+/ws --user guest", text), text[-3000:]
    said = re.search(r"run over \(interrupted\): 8 operators said (\d+) messages, (\d+) acknowledged", text)
    assert said and int(said.group(1)) > 0 and said.group(1) == said.group(2), text[-3000:]
    assert "every site has delivered all" in text, text[-3000:]
    assert not [k for k in kids if alive(k)], "processes left behind by the demo"
    runs = list(demo_dir.glob("run-*/mission.toml"))
    assert len(runs) == 1 and (demo_dir / "latest").is_symlink()
    journals = list(runs[0].parent.glob("*/journal/*.jsonl"))
    assert len(journals) == 4 and all(j.stat().st_size > 0 for j in journals)


