"""``python -m deploy`` command lines: help, one-line refusals, and the supervisor's restart policy."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from testkit import wait_until

from deploy import netns
from deploy.supervisor import Backoff, Supervisor
from faultinject.missions import write_mission

REPO = Path(__file__).resolve().parents[2]


def deploy(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "deploy", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("command", [[], ["up"], ["demo"], ["certs"], ["netns"], ["status"]])
def test_help(command: list[str]) -> None:
    r = deploy(*command, "--help")
    assert r.returncode == 0 and "usage: python -m deploy" in r.stdout


@pytest.mark.parametrize("args, needle", [
    (["up"], "--mission"),
    (["frobnicate"], "invalid choice"),
    (["up", "--mission", "/nonexistent/m.toml"], "not found"),
    (["demo", "--duration", "-3"], "must be greater than 0"),
    (["demo", "--outage", "30"], "UP:DOWN"),
    (["netns", "--mission", "/nonexistent/m.toml"], "not found"),
])
def test_bad_arguments_are_one_line_exit_2(args: list[str], needle: str) -> None:
    r = deploy(*args)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and needle in r.stderr, r.stderr
    assert r.stderr.startswith("python -m deploy")


def test_up_refuses_unknown_site_and_missing_certificates(tmp_path: Path) -> None:
    m = write_mission(tmp_path / "m.toml", "t", ["A", "B"], rcm={"tls": True})
    r = deploy("up", "--mission", str(m), "--site", "Z")
    assert r.returncode == 2 and "'Z' is not in the mission" in r.stderr
    r = deploy("up", "--mission", str(m))
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert "/A/tls/ca.pem is missing" in r.stderr and "python -m deploy certs --mission" in r.stderr


def test_up_refuses_a_data_dir_too_deep_for_the_rcm_socket(tmp_path: Path) -> None:
    m = write_mission(tmp_path / "m.toml", "t", ["A"], data_dir="d" * 120)
    r = deploy("up", "--mission", str(m))
    assert r.returncode == 2 and "data_dir is too deep" in r.stderr


def test_up_refuses_an_address_in_use(tmp_path: Path) -> None:
    m = write_mission(tmp_path / "m.toml", "t", ["A"])
    chat = m.read_text().split('chat = "127.0.0.1:')[1].split('"')[0]
    with socket.create_server(("127.0.0.1", int(chat))):
        r = deploy("up", "--mission", str(m))
    assert r.returncode == 1 and "address already in use: sites.A.chat" in r.stderr


def test_netns_reason_when_not_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert "needs root" in (netns.netns_unavailable_reason() or "")
    monkeypatch.setattr(netns.shutil, "which", lambda name: None)
    assert "iproute2" in (netns.netns_unavailable_reason() or "")


def test_backoff_doubles_to_the_cap_and_resets_after_a_stable_run() -> None:
    b = Backoff(first=0.5, longest=4.0, stable_after=60.0)
    delays, d = [], None
    for _ in range(6):
        d = b.next_delay(d, ran_for=1.0)
        delays.append(d)
    assert delays == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    assert b.next_delay(4.0, ran_for=61.0) == 0.5


def test_subnet_avoids_networks_in_use() -> None:
    import ipaddress
    first = netns.pick_subnet("seed", [])
    assert first == netns.pick_subnet("seed", []) and first.prefixlen == 24 and first.is_private
    second = netns.pick_subnet("seed", [first])
    assert not first.overlaps(second) and second.is_private
    with pytest.raises(netns.NetnsUnavailable, match="no free private"):
        netns.pick_subnet("seed", [ipaddress.ip_network("10.0.0.0/8")])


async def test_a_configuration_error_is_not_restarted(tmp_path: Path) -> None:
    m = write_mission(tmp_path / "m.toml", "t", ["A"], chat={"no_such_key": 1})
    events: list[tuple[str, str, str]] = []
    sup = Supervisor(m, on_event=lambda s, r, w: events.append((s, r, w)), grace=10)
    await sup.start()
    try:
        await wait_until(lambda: sup.procs[("A", "chat")].state == "failed", "the chat server given up on",
                         timeout=30)
        chat, rcm = sup.procs[("A", "chat")], sup.procs[("A", "rcm")]
        assert chat.state == "failed" and chat.starts == 1 and chat.last_exit == 2
        assert rcm.state == "running" and rcm.pid is not None
        # The console says why, in the server's own words (its one error line), not only where to look.
        said = [w for _, r, w in events if r == "chat" and "not restarting" in w]
        assert len(said) == 1 and said[0].startswith("exited with status 2 (unknown key [chat].no_such_key")
        assert "no_such_key" in chat.log_path.read_text()
    finally:
        codes = await sup.stop()
    assert codes[("A", "rcm")] == 0


def test_fixed_ports_skip_a_busy_block() -> None:
    from faultinject.missions import fixed_ports
    site_ports, proxy_ports = fixed_ports(2, 2, base=17301)
    with socket.create_server(("127.0.0.1", site_ports[0])):
        moved, moved_proxies = fixed_ports(2, 2, base=17301)
    assert site_ports[0] not in moved and len(moved) == 4 and len(moved_proxies) == 2
    assert all(p < 32768 for p in moved + moved_proxies)       # below the kernel's ephemeral range
