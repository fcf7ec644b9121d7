"""deploy/examples: the missions are valid, the systemd units start the right programs for the instance's site."""
from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from contracts.mission import load_mission

EXAMPLES = Path(__file__).resolve().parents[2] / "deploy" / "examples"
UNITS = {"rcm@.service": "rcm", "rcm-chat@.service": "chat_server"}


@pytest.mark.parametrize("name, sites, tls", [
    ("paper-4site.toml", ["ground1", "ground2", "awacs", "jstars"], False),
    ("paper-4site-hosts.toml", ["ground1", "ground2", "awacs", "jstars"], True),
    ("ten-site.toml", ["ops1", "ops2", "ops3", "tanker1", "awacs1", "awacs2", "jstars1", "rivet1", "ship1", "ship2"],
     False),
    ("tactical-4site.toml", ["ground1", "ground2", "awacs", "jstars"], False),
])
def test_example_missions_load(name: str, sites: list[str], tls: bool) -> None:
    m = load_mission(EXAMPLES / name)
    assert list(m.sites) == sites and m.rcm.tls is tls
    assert (m.rcm.heartbeat_timeout, m.rcm.liveness_timeout, m.rcm.suspect_timeout, m.rcm.reconnect_period) == \
        (1.0, 5.0, 60.0, 3.0)       # the paper's


def test_the_tactical_example_sets_every_extension() -> None:
    m = load_mission(EXAMPLES / "tactical-4site.toml")
    assert (m.rcm.routing, m.rcm.max_hops, m.rcm.repair) == ("relay", 3, True)
    assert all(m.site(s).irc is not None for s in m.sites)
    assert m.site("awacs").rate == {"ground1": 56000, "ground2": 56000, "jstars": 56000}


def test_the_hf_example_scales_the_timeouts_and_paces_every_link_at_2400() -> None:
    m = load_mission(EXAMPLES / "hf-4site.toml")
    r = m.rcm
    assert (r.heartbeat_timeout, r.liveness_timeout, r.silence_timeout, r.suspect_timeout) == (5.0, 20.0, 40.0, 120.0)
    assert r.handshake_timeout >= 30.0 and r.tls and r.relaying and r.compression == "zstd"
    assert all(m.site(s).rate == {p: 2400 for p in m.sites if p != s} for s in m.sites)


def unit(name: str) -> configparser.ConfigParser:
    cp = configparser.ConfigParser(strict=False, interpolation=None)
    cp.optionxform = str        # type: ignore[assignment,method-assign]
    cp.read_string((EXAMPLES / "systemd" / name).read_text())
    return cp


@pytest.mark.parametrize("name, module", UNITS.items())
def test_units_run_the_sites_server_and_do_not_restart_on_bad_configuration(name: str, module: str) -> None:
    u = unit(name)
    exec_start = u["Service"]["ExecStart"].split()
    assert exec_start[1:4] == ["-m", module, "--mission"] and exec_start[exec_start.index("--site") + 1] == "%i"
    assert u["Service"]["Restart"] == "on-failure" and u["Service"]["RestartPreventExitStatus"] == "2"
    assert u["Service"]["KillSignal"] == "SIGTERM"
    assert u["Service"]["EnvironmentFile"] == "/etc/rcm/rcm.env"
    env = (EXAMPLES / "systemd" / "rcm.env").read_text()
    assert "RCM_MISSION=" in env and "RCM_LOG_LEVEL=" in env
    if module == "chat_server":
        assert "rcm@%i.service" in u["Unit"]["Wants"] and "rcm@%i.service" in u["Unit"]["After"]


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
def test_units_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    for name in UNITS:
        text = (EXAMPLES / "systemd" / name).read_text()
        text = text.replace("/opt/rcm/.venv/bin/python", sys.executable)
        text = text.replace("/etc/rcm/rcm.env", str(EXAMPLES / "systemd" / "rcm.env"))
        (tmp_path / name.replace("@", "@site1")).write_text(text)
    r = subprocess.run(["systemd-analyze", "verify", *map(str, sorted(tmp_path.iterdir()))],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "rcm" not in r.stderr.lower() or "unknown" not in r.stderr.lower(), r.stderr


def test_the_coalition_example_labels_its_sites_and_clears_the_partner_for_less() -> None:
    m = load_mission(EXAMPLES / "coalition-4site.toml")
    assert m.labels.enabled and m.labels.levels[-1] == "SECRET" and m.rcm.relaying and m.rcm.repair
    cl = m.clearances()
    secret_uk_us = m.labels.parse("SECRET//REL TO GBR, USA")
    assert m.labels.cleared(secret_uk_us, cl) == {"hq", "awacs"}
    assert m.labels.cleared(m.labels.parse("SECRET"), cl) == {"hq", "awacs", "jstars"}
    assert m.labels.cleared(m.labels.parse("CONFIDENTIAL"), cl) == set(m.sites)
    assert m.labels.cleared(m.labels.parse("CONFIDENTIAL//REL TO AUS"), cl) == {"partner"}
