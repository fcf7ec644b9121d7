"""Both servers on either event loop (``--event-loop`` / ``$RCM_EVENT_LOOP``): site A on asyncio, site B on
uvloop, real processes, plaintext and mutual TLS between them; a message each way, and a clean stop. A loop
that does not exist is one line."""
from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from chat_server.client import ChatClient
from contracts.mission import load_mission
from deploy import certs
from faultinject.missions import write_mission
from faultinject.procs import LocalChat, LocalRcm, chat_endpoint, wait_connected
from rcm.cli import EVENT_LOOP_ENV

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]

PW = "pw-loops"
RCM = {"heartbeat_timeout": 0.1, "liveness_timeout": 0.4, "silence_timeout": 0.8, "reconnect_period": 0.2}


def test_an_unknown_event_loop_is_one_line(tmp_path: Path) -> None:
    mission = write_mission(tmp_path / "m.toml", "loops", ["A"], data_dir="data")
    for module in ("rcm", "chat_server"):
        done = subprocess.run([sys.executable, "-m", module, "--mission", str(mission), "--site", "A"],
                              env={**os.environ, EVENT_LOOP_ENV: "libev"}, capture_output=True, text=True,
                              timeout=30)
        assert done.returncode == 2, done.stderr
        assert done.stderr.count("\n") == 1 and "RCM_EVENT_LOOP='libev'" in done.stderr, done.stderr
        assert "asyncio, uvloop" in done.stderr
        done = subprocess.run([sys.executable, "-m", module, "--mission", str(mission), "--site", "A",
                               "--event-loop", "libev"], capture_output=True, text=True, timeout=30)
        assert done.returncode == 2 and "invalid choice: 'libev'" in done.stderr, done.stderr


@pytest.mark.parametrize("tls", [False, True], ids=["plaintext", "tls"])
async def test_a_site_on_asyncio_and_a_site_on_uvloop_talk(tmp_path: Path, tls: bool) -> None:
    path = write_mission(tmp_path / "m.toml", "loops", ["A", "B"], data_dir="data", rcm={**RCM, "tls": tls},
                         chat={"kdf_n": 1024})
    on = {"A": "asyncio", "B": "uvloop"}
    if tls:                                   # mutual TLS between the two loops' RCM servers, as deploy makes it
        certs.create(load_mission(path))
    rcm = {s: LocalRcm(path, sites=[s], env={EVENT_LOOP_ENV: loop}) for s, loop in on.items()}
    chat = {s: LocalChat(path, sites=[s], env={EVENT_LOOP_ENV: loop}) for s, loop in on.items()}
    clients: list[ChatClient] = []
    try:
        for s in on:
            await asyncio.to_thread(rcm[s].start_all, 30.0)
        chat["A"].add_users({"A": ["alice"], "B": ["bob"]}, PW)
        for s in on:
            chat[s].start(s)
        await wait_connected(rcm["A"].mission, list(on), 30.0)
        for s in on:
            pid = chat[s].procs[s].pid
            assert Path(f"/proc/{pid}/maps").read_text().count("uvloop") > 0 if on[s] == "uvloop" else \
                "uvloop" not in Path(f"/proc/{pid}/maps").read_text(), f"chat {s} is not on {on[s]}"
        mission = load_mission(path)
        (url_a, ssl_a), (url_b, ssl_b) = (chat_endpoint(mission, s, ws=True) for s in on)
        alice = await ChatClient.connect(url_a, "alice", PW, ssl=ssl_a)
        bob = await ChatClient.connect(url_b, "bob", PW, ssl=ssl_b)
        clients += [alice, bob]
        for c in clients:
            await c.join("ops")
        await alice.say("ops", "from asyncio")
        await bob.wait_for(lambda f: f["type"] == "message" and f["text"] == "from asyncio", timeout=20)
        await bob.say("ops", "from uvloop")
        await alice.wait_for(lambda f: f["type"] == "message" and f["text"] == "from uvloop", timeout=20)
    finally:
        for c in clients:
            await c.close()
        codes = {}
        for s in on:
            p = chat[s].procs.get(s)
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGTERM)
                codes[s] = await asyncio.to_thread(p.wait, 30)
            await asyncio.to_thread(chat[s].stop_all)
            await asyncio.to_thread(rcm[s].stop_all)
    assert codes == {"A": 0, "B": 0}
