"""``python -m deploy lab``: the lab starts, its commands cut and heal links and kill and restart sites
(the statuses and ``via`` show it), and it stops leaving no process behind."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from deploy_harness import REPO
from testkit import alive, descendants, wait_until_sync

from contracts.mission import load_mission
from deploy.__main__ import main
from deploy.lab import LabPorts, lab_tables, write_lab_mission
from deploy.supervisor import health_line


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    """Run ``python -m deploy ARGV`` in this process: its exit status and what it printed."""
    try:
        code = main(list(argv))
    except SystemExit as e:
        code = int(e.code or 0)
    out = capsys.readouterr()
    return code, out.out + out.err


def test_the_lab_mission_dials_every_link_through_its_own_proxy(tmp_path: Path) -> None:
    ports = LabPorts(12100, 4)
    m = load_mission(write_lab_mission(tmp_path, ["g1", "g2", "air1", "air2"], ports, "lab"))
    dials = [(a, b, site.dial[b]) for a, site in m.sites.items() for b in m.peers_of(a)]
    assert len(dials) == 12 and len({addr for _, _, addr in dials}) == 12
    assert all(site.irc is not None for site in m.sites.values())
    assert m.rcm.relaying and m.rcm.suspect_timeout == 20.0
    assert len(set(ports.every())) == len(ports.every()) and max(ports.every()) == ports.control
    assert "chat" not in lab_tables(["a", "b"], LabPorts(12100, 2), "lab")


def test_slowing_a_link_below_what_its_sites_can_miss_heartbeats_for_says_so(tmp_path: Path) -> None:
    """The lab's sites do not pace ([sites.X.rate]): at 2,400 bit/s a backlog of 300 bytes holds heartbeats past
    the fast profile's 1 s liveness timeout, so `slow` says so (seen: a 20-line burst, A and B suspected each
    other six times and a line was marked late); at 64 kbit/s, or with a rate limit removed, it says nothing."""
    from deploy.lab_control import unpaced_link_note
    m = load_mission(write_lab_mission(tmp_path, ["A", "B"], LabPorts(12100, 2), "fast"))
    note = unpaced_link_note(m, "A", "B", 2400)
    assert note is not None and "A and B do not pace" in note and "more than 300 bytes" in note
    assert "liveness_timeout 1 s" in note and "'HF links'" in note
    assert unpaced_link_note(m, "A", "B", 64_000) is None and unpaced_link_note(m, "A", "B", None) is None
    (tmp_path / "lab").mkdir()
    lab = load_mission(write_lab_mission(tmp_path / "lab", ["A", "B"], LabPorts(12100, 2), "lab"))
    assert "more than 750 bytes" in (unpaced_link_note(lab, "A", "B", 2400) or "")


def test_an_hf_lab_takes_the_hf_example_settings_paces_every_link_and_shapes_its_links_to_the_radio(
        tmp_path: Path) -> None:
    """``--timeouts hf``: deploy/examples/hf-4site.toml is the one home of the HF settings; every site paces to
    its rate towards every peer, every link is shaped to it and 300 ms (at the start and after each heal), and
    `slow` warns when a link goes below what the sites pace to."""
    from deploy.lab import HF_EXAMPLE, hf_links
    from deploy.lab_control import unpaced_link_note
    example = load_mission(HF_EXAMPLE)
    m = load_mission(write_lab_mission(tmp_path, ["A", "B", "C"], LabPorts(12100, 3), "hf"))
    for key in ("heartbeat_timeout", "liveness_timeout", "silence_timeout", "suspect_timeout", "reconnect_period",
                "handshake_timeout", "announce_delay", "compression", "tls", "tls_continue"):
        assert getattr(m.rcm, key) == getattr(example.rcm, key), key
    assert m.rcm.suspect_timeout == 120.0 and m.rcm.relaying and m.rcm.tls and m.rcm.tls_continue
    (tmp_path / "lab").mkdir()
    assert not load_mission(write_lab_mission(tmp_path / "lab", ["A", "B"], LabPorts(12100, 2), "lab")).rcm.tls
    assert m.chat["receipt_interval"] == example.chat["receipt_interval"] == 15.0 and m.chat["tls"] is False
    assert {s: site.rate for s, site in m.sites.items()} == {
        "A": {"B": 2400, "C": 2400}, "B": {"A": 2400, "C": 2400}, "C": {"A": 2400, "B": 2400}}
    assert hf_links("hf") == {"bandwidth_bps": 2400, "delay": 0.3} and hf_links("lab") is None
    assert unpaced_link_note(m, "A", "B", 2400) is None
    note = unpaced_link_note(m, "A", "B", 1200)
    assert note is not None and note.startswith("note: A paces to 2400 bit/s and B paces to 2400 bit/s, more than")


def test_health_line_names_the_relay_of_a_relayed_peer() -> None:
    h = {"status": "ok", "rcm": True, "sites": {"A": "connected", "B": "connected", "C": "suspected"},
         "via": {"B": "D"}, "clients": 1, "n": 3}
    assert health_line("A", h) == "ok, peers 1/2 connected (C suspected, B via D), 1 clients, 3 delivered"
    h["chat_down"] = ["B"]          # RCM reaches B, B's chat server is gone (its will came)
    assert health_line("A", h) == ("ok, peers 1/2 connected (C suspected, B via D, B's chat server down), 1 clients, "
                                   "3 delivered")


def test_health_line_says_whether_rcm_is_unreachable_or_connected_and_silent() -> None:
    h = {"status": "degraded", "rcm": True, "rcm_stalled": True, "sites": {"A": "suspected", "B": "suspected"},
         "clients": 2, "n": 7}
    assert health_line("A", h) == "RCM NOT ANSWERING, peers 0/1 connected (B suspected), 2 clients, 7 delivered"
    h = {**h, "rcm": False, "rcm_stalled": False}
    assert health_line("A", h).startswith("RCM UNREACHABLE, ")


def test_lab_commands_without_a_running_lab_say_how_to_start_one(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    code, out = cli(capsys, "lab", "cut", "A", "B", "--dir", str(tmp_path))
    assert code == 1 and f"no lab is running from {tmp_path}" in out and "python -m deploy lab --dir" in out


def test_a_lab_refuses_a_directory_whose_sites_servers_run_outside_it_and_fresh_deletes_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A ``deploy up`` (or a server started by hand) on the lab's directory: the servers hold their directories'
    locks (rcm.durability.dirlock); a lab started there would have rewritten the mission under them on other
    ports and started a second set of servers on the same files."""
    rcm_dir = tmp_path / "A" / "rcm"
    rcm_dir.mkdir(parents=True)
    (rcm_dir / "wal.log").write_bytes(b"theirs")
    hold = ("import sys; from pathlib import Path; from rcm.durability.dirlock import lock_dir\n"
            "lock_dir(Path(sys.argv[1]), 'x'); print('held', flush=True); sys.stdin.read()")
    holder = subprocess.Popen([sys.executable, "-c", hold, str(rcm_dir)], cwd=REPO, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        code, out = cli(capsys, "lab", "--dir", str(tmp_path), "--sites", "A,B", "--fresh")
        assert code == 1
        assert f"site A's RCM server (process {holder.pid}) runs from {tmp_path}" in " ".join(out.split())
        assert (rcm_dir / "wal.log").read_bytes() == b"theirs" and not (tmp_path / "mission.toml").exists()
    finally:
        holder.communicate(timeout=30)


@pytest.mark.slow
def test_lab_cuts_heals_kills_restarts_and_stops_clean(capsys: pytest.CaptureFixture[str]) -> None:
    lab_dir = Path(tempfile.mkdtemp(prefix="rcmlab-", dir="/tmp"))     # Unix socket paths must stay short
    out_path = lab_dir / "lab.out"
    d = ["--dir", str(lab_dir / "lab")]
    with open(out_path, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "deploy", "lab", *d, "--sites", "A,B,C", "--users", "alice",
                                 "--timeouts", "fast"], cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True,
                                env={**os.environ, "COLUMNS": "200"})
    try:
        def printed() -> str:
            assert proc.poll() is None, out_path.read_text(errors="replace")[-3000:]
            return out_path.read_text(errors="replace")
        # The guide is printed line by line after the lab is up: wait for the line this test reads.
        wait_until_sync(lambda: "alice in a browser at A  http://127.0.0.1:" in printed(), "the lab up", timeout=60)
        assert "every site sees every other connected" in printed()
        servers = descendants(proc.pid)
        assert len(servers) >= 6                       # an RCM and a chat server per site

        def status() -> tuple[int, str]:
            return cli(capsys, "lab", "status", *d)

        assert cli(capsys, "lab", "cut", "A", "C", *d) == (0, "cut A-C: connections reset, new ones refused\n")
        code, text = wait_until_sync(lambda: (s := status())[0] == 0 and "(C via B)" in s[1] and s,
                                     "C relayed through B at A")
        assert "link A-C: reset" in text and "C: ok, peers 2/2 connected (A via B)" in text, text

        assert cli(capsys, "lab", "heal", *d)[0] == 0
        wait_until_sync(lambda: (s := status())[0] == 0 and "via" not in s[1], "every link direct again")
        code, said = cli(capsys, "lab", "slow", "A", "B", "--bandwidth", "2400", *d)
        assert code == 0 and said.startswith("slow A-B: 0 s delay + up to 0 s jitter, 2400 bit/s, each way\nnote: A "
                                             "and B do not pace to this link"), said
        assert cli(capsys, "lab", "heal", "A", "B", *d)[0] == 0

        code, said = cli(capsys, "lab", "kill", "C", *d)
        assert code == 0 and "kept down until `restart C`" in said
        code, text = wait_until_sync(lambda: "C suspected" in (s := status())[1] and s, "C suspected at A")
        assert code == 1 and "site C: rcm held; chat held" in text and "C: chat server at" in text, text
        assert cli(capsys, "lab", "restart", "C", *d)[0] == 0
        code, text = wait_until_sync(lambda: (s := status())[0] == 0 and s, "C back", timeout=30)
        assert "site C: rcm running" in text and "restarted 1x" in text, text
        servers += descendants(proc.pid)

        code, said = cli(capsys, "lab", "stop", *d)
        assert code == 0 and said.startswith("lab stopped"), said
        assert proc.wait(30) == 0
        assert not [p for p in servers if alive(p)]
        assert "lab stopped: every process exited" in out_path.read_text()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        shutil.rmtree(lab_dir, ignore_errors=True)


def test_readme_points_to_the_lab_and_lists_every_doc() -> None:
    readme = (REPO / "README.md").read_text()
    assert "make demo" in readme and "make test" in readme and "make lab" in readme
    missing = [p.name for p in (REPO / "docs").glob("*.md") if f"`docs/{p.name}`" not in readme
               and p.name != "rcm-state-machines.md"]          # generated by `make docs`
    assert not missing, f"README.md does not list {missing}"
