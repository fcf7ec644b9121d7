"""Command lines (Contract 4): --help, one-line errors, adduser with the password on a pipe."""
from __future__ import annotations

import subprocess
import sys

import pytest

from chat_server.accounts import verify_password
from chat_server.store import ChatStore
from contracts.mission import load_mission
from faultinject.missions import write_mission

pytestmark = pytest.mark.timeout(60)


def run(*args: str, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "chat_server", *args], input=stdin, capture_output=True,
                          text=True, timeout=30)


def test_help_and_bad_arguments():
    r = run("--help")
    assert r.returncode == 0 and "--mission" in r.stdout and "adduser" in r.stdout
    r = run()
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "--mission" in r.stderr
    r = run("adduser", "--help")
    assert r.returncode == 0 and "stdin" in r.stdout


def test_bad_config_is_one_line_naming_the_key(tmp_path):
    path = write_mission(tmp_path / "m.toml", "cli", ["A"], chat={"max_text_byte": 10})
    r = run("--mission", str(path), "--site", "A")
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "[chat].max_text_byte" in r.stderr
    r = run("--mission", str(tmp_path / "nope.toml"), "--site", "A")
    assert r.returncode == 2 and "not found" in r.stderr and r.stderr.strip().count("\n") == 0
    path = write_mission(tmp_path / "ok.toml", "cli", ["A"])
    r = run("--mission", str(path), "--site", "Z")
    assert r.returncode == 2 and "'Z'" in r.stderr and r.stderr.strip().count("\n") == 0


def test_adduser_reads_the_password_from_a_pipe(tmp_path):
    path = write_mission(tmp_path / "m.toml", "cli", ["A"], chat={"kdf_n": 1024})
    r = run("adduser", "--mission", str(path), "--site", "A", "alice", stdin="s3cret pass\n")
    assert r.returncode == 0, r.stderr
    store = ChatStore(load_mission(path).site_dir("A") / "chat" / "chat.db")
    try:
        stored = store.password_hash("alice")
        assert stored is not None and verify_password("s3cret pass", stored) and "s3cret" not in stored
    finally:
        store.close()
    r = run("adduser", "--mission", str(path), "--site", "A", "alice", stdin="other\n")
    assert r.returncode == 1 and "already exists" in r.stderr
    r = run("adduser", "--mission", str(path), "--site", "A", "9bad", stdin="x\n")
    assert r.returncode == 2 and "user name" in r.stderr
    r = run("adduser", "--mission", str(path), "--site", "A", "bob", stdin="")
    assert r.returncode == 1 and "empty password" in r.stderr


def test_a_damaged_database_is_one_line_saying_what_to_do(tmp_path):
    path = write_mission(tmp_path / "m.toml", "cli", ["A"], chat={"kdf_n": 1024})
    db = load_mission(path).site_dir("A") / "chat" / "chat.db"
    assert run("adduser", "--mission", str(path), "--site", "A", "alice", stdin="pw\n").returncode == 0
    db.write_bytes(bytes(b ^ 0x5A for b in db.read_bytes()))          # every byte of it wrong
    for args in (("--mission", str(path), "--site", "A"), ("adduser", "--mission", str(path), "--site", "A", "bob")):
        r = run(*args, stdin="pw\n")
        assert r.returncode == 2 and r.stderr.strip().count("\n") == 0, r.stderr     # no stack trace
        assert f"cannot open the chat database {db}: file is not a database" in r.stderr
        assert "move it aside" in r.stderr and "journal" in r.stderr


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_server_stops_cleanly_on_signals(tmp_path, sig):
    import signal
    path = write_mission(tmp_path / "m.toml", "cli", ["A"], chat={"kdf_n": 1024})
    p = subprocess.Popen([sys.executable, "-m", "chat_server", "--mission", str(path), "--site", "A"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline()            # no RCM server is running: it serves and keeps retrying RCM
        assert "ready" in line
        p.send_signal(getattr(signal, sig))
        _, err = p.communicate(timeout=20)
        assert p.returncode == 0 and "chat server A stopped" in err, err
    finally:
        if p.poll() is None:
            p.kill()
        p.communicate()
