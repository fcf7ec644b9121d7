"""One server per site directory (rcm.durability.dirlock): a second RCM or chat server on a running site's
directory stops with one line, before it reads, repairs or bumps anything there."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from contracts.mission import load_mission
from faultinject.missions import write_mission
from rcm.durability.dirlock import DirLocked, holder, lock_dir, unlock_dir
from rcm.server import RcmServer

ROOT = Path(__file__).resolve().parents[2]
TAKE = ("import sys; from pathlib import Path; from rcm.durability.dirlock import lock_dir, DirLocked\n"
        "try:\n    lock_dir(Path(sys.argv[1]), 'the test server')\n"
        "except DirLocked as e:\n    print(e); sys.exit(3)\n"
        "print('taken', flush=True)\nif len(sys.argv) > 2: sys.stdin.read()\n")


def take_elsewhere(directory: Path, hold: bool = False) -> subprocess.Popen:
    """Another process taking ``directory``'s lock (and, with ``hold``, keeping it until its stdin closes)."""
    args = [sys.executable, "-c", TAKE, str(directory)] + (["hold"] if hold else [])
    return subprocess.Popen(args, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def test_another_process_is_refused_while_the_lock_is_held_and_told_who_holds_it(tmp_path: Path) -> None:
    lock_dir(tmp_path, "site A's RCM server")
    try:
        p = take_elsewhere(tmp_path)
        out, _ = p.communicate(timeout=30)
        assert p.returncode == 3
        assert f"the test server already runs from {tmp_path.resolve()} (process {os.getpid()} holds" in out
    finally:
        unlock_dir(tmp_path)
    p = take_elsewhere(tmp_path)
    assert p.communicate(timeout=30)[0].strip() == "taken" and p.returncode == 0


def test_a_killed_holder_leaves_no_stale_lock(tmp_path: Path) -> None:
    holder = take_elsewhere(tmp_path, hold=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "taken"
    with pytest.raises(DirLocked, match=f"process {holder.pid} holds"):
        lock_dir(tmp_path, "site A's RCM server")
    holder.send_signal(signal.SIGKILL)
    holder.communicate(timeout=30)          # closes its pipes
    assert lock_dir(tmp_path, "site A's RCM server") == tmp_path.resolve() / "lock"
    unlock_dir(tmp_path)


def test_holder_names_the_process_holding_the_lock_and_none_when_free(tmp_path: Path) -> None:
    assert holder(tmp_path) is None                             # no lock file yet
    other = take_elsewhere(tmp_path, hold=True)
    assert other.stdout is not None and other.stdout.readline().strip() == "taken"
    assert holder(tmp_path) == str(other.pid)
    assert holder(tmp_path) == str(other.pid)                   # asking did not take it
    other.communicate(timeout=30)                               # (stdin closed: it exits)
    assert holder(tmp_path) is None


def test_taking_it_again_in_one_process_hands_it_to_the_new_holder(tmp_path: Path) -> None:
    """A test starting a site's server anew in its own process (the old object abandoned, as after a crash)."""
    lock_dir(tmp_path, "old")
    lock_dir(tmp_path, "new")
    p = take_elsewhere(tmp_path)
    p.communicate(timeout=30)
    assert p.returncode == 3                                   # held, by the new holder
    unlock_dir(tmp_path)
    p = take_elsewhere(tmp_path)
    p.communicate(timeout=30)
    assert p.returncode == 0


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=60)


@pytest.mark.timeout(60)
async def test_a_second_rcm_server_for_a_running_site_stops_before_touching_its_files(tmp_path: Path) -> None:
    path = write_mission(tmp_path / "m.toml", "locks", ["A", "B"])
    mission = load_mission(path)
    server = RcmServer(mission, "A")
    await server.start()
    try:
        files = {p.name: p.read_bytes() for p in server.dir.iterdir() if p.is_file()}
        assert {"state.json", "wal.log", "lock"} <= set(files)
        r = run_cli("rcm", "--mission", str(path), "--site", "A")
        assert r.returncode == 2, r.stderr
        assert r.stderr.count("\n") == 1 and "site A's RCM server already runs from" in r.stderr
        assert f"process {os.getpid()} holds" in r.stderr
        assert {p.name: p.read_bytes() for p in server.dir.iterdir() if p.is_file()} == files   # incarnation too
    finally:
        await server.stop()
    # Stopped: the directory is free again (a restart by the supervisor).
    again = RcmServer(mission, "A")
    assert again.state.incarnation == server.state.incarnation + 1
    await again.stop()


@pytest.mark.timeout(60)
async def test_a_second_chat_server_for_a_running_site_stops_with_one_line(tmp_path: Path) -> None:
    from chat_server.server import ChatServer
    path = write_mission(tmp_path / "m.toml", "locks", ["A", "B"])
    server = ChatServer(load_mission(path), "A")
    try:
        r = run_cli("chat_server", "--mission", str(path), "--site", "A")
        assert r.returncode == 2, r.stderr
        assert r.stderr.count("\n") == 1 and "site A's chat server already runs from" in r.stderr
        # Accounts are made beside a running server: adduser takes no lock.
        r = subprocess.run([sys.executable, "-m", "chat_server", "adduser", "--mission", str(path), "--site", "A",
                            "zed"], cwd=ROOT, input="pw-long-enough\n", capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
    finally:
        await server.stop()
