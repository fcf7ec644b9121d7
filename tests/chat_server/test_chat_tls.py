"""HTTPS/WSS with the site certificate: a login with the mission CA works; every refused case fails
cleanly (another CA, no CA, plain ws:// to a TLS server) and leaves the server serving others."""
from __future__ import annotations

import asyncio
import os
import ssl
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest
from chat_fake_rcm import FakeNetwork
from chat_missions import PASSWORD, add_users, make_mission
from testkit import wait_until

from chat_server.client import ChatClient, client_ssl_context
from chat_server.config import parse_chat_settings
from chat_server.server import ChatServer
from contracts.mission import Mission, MissionError, load_mission
from deploy import certs
from faultinject.missions import write_mission

pytestmark = pytest.mark.timeout(60)


def tls_mission(tmp_path: Path, chat: dict | None = None) -> Mission:
    return make_mission(tmp_path, ["A"], chat, rcm={"tls": True})


async def start(mission) -> ChatServer:
    srv = ChatServer(mission, "A", parse_chat_settings(mission.chat), rcm_connect=FakeNetwork(["A"]).connector("A"),
                     host="127.0.0.1", port=0)
    await srv.start()
    await asyncio.wait_for(srv.rcm_connected.wait(), 5)
    return srv


@pytest.fixture
async def tls_server(tmp_path: Path):
    mission = tls_mission(tmp_path)
    certs.create(mission)
    add_users(mission, "A", ["alice", "bob"])
    srv = await start(mission)
    yield mission, srv
    await srv.stop()


def ca_of(mission) -> Path:
    return mission.site_dir("A") / "tls" / "ca.pem"


async def test_wss_login_with_the_mission_ca(tls_server) -> None:
    mission, srv = tls_server
    assert srv.scheme == "https"
    c = await ChatClient.connect(f"wss://127.0.0.1:{srv.port}/ws", "alice", PASSWORD, ca_file=ca_of(mission))
    try:
        await c.join("ops")
        ack = await c.say("ops", "over TLS")
        assert ack["msg_id"].startswith("A:")
        await c.wait_for(lambda f: f["type"] == "message" and f["text"] == "over TLS", 5)
    finally:
        await c.close()
    async with aiohttp.ClientSession() as http:      # the web UI and /health are HTTPS too
        async with http.get(f"https://127.0.0.1:{srv.port}/health", ssl=client_ssl_context(ca_of(mission))) as r:
            assert r.status == 200 and (await r.json())["site"] == "A"


async def test_refused_tls_cases_fail_cleanly_and_others_carry_on(tls_server, tmp_path: Path) -> None:
    mission, srv = tls_server
    other = make_mission(tmp_path / "other", ["A"])
    certs.create(other)                                   # another mission's CA
    url = f"wss://127.0.0.1:{srv.port}/ws"
    good = await ChatClient.connect(url, "bob", PASSWORD, ca_file=ca_of(mission))
    try:
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            await ChatClient.connect(url, "alice", PASSWORD, ca_file=other.site_dir("A") / "tls" / "ca.pem")
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            await ChatClient.connect(url, "alice", PASSWORD)          # system trust store: not the mission CA
        with pytest.raises(aiohttp.ClientError):
            await ChatClient.connect(f"ws://127.0.0.1:{srv.port}/ws", "alice", PASSWORD, timeout=10)
        await good.join("ops")                            # the established session is unaffected
        assert (await good.say("ops", "still here"))["type"] == "ack"
    finally:
        await good.close()


async def test_chat_tls_false_serves_plain_http_behind_a_proxy(tmp_path: Path) -> None:
    mission = tls_mission(tmp_path, {"tls": False})       # [rcm] tls = true, [chat] tls = false
    add_users(mission, "A", ["alice"])
    srv = await start(mission)                            # no certificate needed
    try:
        assert srv.scheme == "http"
        c = await ChatClient.connect(f"ws://127.0.0.1:{srv.port}/ws", "alice", PASSWORD)
        await c.close()
    finally:
        await srv.stop()


def test_missing_certificate_is_refused_at_start_up(tmp_path: Path) -> None:
    mission = tls_mission(tmp_path)
    with pytest.raises(MissionError, match="cert.pem is missing"):
        ChatServer(mission, "A", parse_chat_settings(mission.chat), rcm_connect=FakeNetwork(["A"]).connector("A"))
    path = write_mission(tmp_path / "m.toml", "tlsm", ["A"], rcm={"tls": True})
    out = subprocess.run([sys.executable, "-m", "chat_server", "--mission", str(path), "--site", "A"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert len(out.stderr.strip().splitlines()) == 1 and "cert.pem is missing" in out.stderr, out.stderr
    assert load_mission(path).rcm.tls


async def test_tui_plain_client_over_wss_with_ca(tls_server) -> None:
    mission, srv = tls_server
    url = f"wss://127.0.0.1:{srv.port}/ws"
    env = {**os.environ, "RCM_CHAT_PASSWORD": PASSWORD}
    p = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "chat_tui", url, "--user", "alice", "--plain", "--ca", str(ca_of(mission)),
        "--wait", "3", stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    out, _ = await asyncio.wait_for(p.communicate(b"/join ops\nhello from the tui\n"), 60)
    text = out.decode(errors="replace")
    assert p.returncode == 0, text
    assert "hello from the tui" in text, text
    assert any(m.text == "hello from the tui" for m in srv.store.history("ops", 10)[0]), text
    bad = subprocess.run([sys.executable, "-m", "chat_tui", f"ws://127.0.0.1:{srv.port}/ws", "--user", "alice",
                          "--plain", "--ca", str(ca_of(mission))], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--ca is for wss://" in bad.stderr


@pytest.mark.parametrize("cap", [{"max_connections": 2}, {"max_connections_per_address": 2}])
async def test_connection_caps_hold_over_tls(tmp_path: Path, cap: dict) -> None:
    # With TLS the server learns of a connection only after its handshake; a connection over a cap
    # must still be closed at once, not left open until http_request_timeout.
    mission = tls_mission(tmp_path, {**cap, "http_request_timeout": 30})
    certs.create(mission)
    srv = await start(mission)
    ctx = client_ssl_context(ca_of(mission))
    held = [await asyncio.open_connection("127.0.0.1", srv.port, ssl=ctx) for _ in range(2)]
    try:
        await wait_until(lambda: srv.admission.open == 2, "both held connections admitted", interval=0.02)
        reader, writer = await asyncio.open_connection("127.0.0.1", srv.port, ssl=ctx)
        try:
            assert await asyncio.wait_for(reader.read(), 5) == b""
        except (ConnectionResetError, ssl.SSLError):     # (not TimeoutError: still open is the failure)
            pass                                          # closed: an abort may reach TLS as a reset
        finally:
            writer.close()
    finally:
        for _, w in held:
            w.close()
        await srv.stop()
