"""Mutual TLS between real RCM servers: good peers connect; a wrong CA, a
certificate for another site, or one for another mission is refused and
logged, and the good link is not disturbed."""
from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from rcm_certs import make_ca, write_site
from testkit import wait_until

from faultinject.missions import write_mission
from faultinject.procs import LocalRcm
from rcm.client import Delivery, RcmClient, socket_path

FAST = dict(heartbeat_timeout=0.2, liveness_timeout=1.0, silence_timeout=2.0, suspect_timeout=30.0,
            reconnect_period=0.3, tls=True)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("bad", ["wrong-ca", "wrong-site", "wrong-mission"])
async def test_tls_refusals_leave_good_links_alone(tmp_path: Path, bad: str):
    mp = write_mission(tmp_path / "m.toml", "tlsm", ["A", "B", "C"], rcm=FAST)
    servers = LocalRcm(mp)
    m = servers.mission
    ca = make_ca("tlsm")
    write_site(m.site_dir("A") / "tls", ca, "A", "tlsm")
    write_site(m.site_dir("B") / "tls", ca, "B", "tlsm")
    if bad == "wrong-ca":
        write_site(m.site_dir("C") / "tls", make_ca("tlsm"), "C", "tlsm")
    elif bad == "wrong-site":
        write_site(m.site_dir("C") / "tls", ca, "B", "tlsm")      # C presents B's identity
    else:
        write_site(m.site_dir("C") / "tls", ca, "C", "other")
    clients = []
    try:
        await asyncio.to_thread(servers.start_all)
        a = await RcmClient.connect(socket_path(m, "A"), name="t")
        b = await RcmClient.connect(socket_path(m, "B"), name="t")
        clients = [a, b]
        await wait_until(lambda: a.statuses.get("B") == "connected", "B connected over TLS")
        assert a.statuses["B"] == "connected"
        await asyncio.sleep(1.5)                 # C keeps trying and keeps being refused
        assert a.statuses["C"] == "suspected" and b.statuses["C"] == "suspected"   # never connected
        acc = await a.send(b"over tls", ["A", "B"])

        async def first_delivery(c):
            async for ev in c.events():
                if isinstance(ev, Delivery):
                    return ev
        got = await asyncio.wait_for(first_delivery(b), 5)
        assert got.msg_id == acc.msg_id and got.payload == b"over tls"
        logs = servers.log_tail("A", 400) + servers.log_tail("B", 400) + servers.log_tail("C", 400)
        expected = {"wrong-ca": "TLS handshake", "wrong-site": "certificate is for site 'B'",
                    "wrong-mission": "of mission 'other'"}[bad]
        assert expected in logs
        assert "Traceback" not in logs
        if bad == "wrong-ca":
            # Said in words, and once: C's certificate at A's dials (A redials every 0.3 s), and the alert A
            # writes before closing tells C why (it used to see only a connection closed mid-handshake).
            a_log = servers.log_tail("A", 400)
            assert a_log.count("TLS handshake dialing C refused: its certificate is not accepted") == 1, a_log
            assert "the peer refused the handshake (TLS alert: " in servers.log_tail("C", 400)
    finally:
        for c in clients:
            await c.close()
        await asyncio.to_thread(servers.stop_all)


def test_missing_certificates_is_one_clear_line(tmp_path: Path):
    import subprocess
    import sys
    mp = write_mission(tmp_path / "m.toml", "tlsm", ["A", "B"], rcm=FAST)
    r = subprocess.run([sys.executable, "-m", "rcm", "--mission", str(mp), "--site", "A"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "ca.pem is missing" in r.stderr
