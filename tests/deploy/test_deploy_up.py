"""``python -m deploy up`` on a three-site mission: a chat server killed -9 is restarted, users chat across."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from deploy_harness import FAST_CHAT, FAST_RCM, REPO, all_connected, stop_deploy, supervisor_status
from testkit import alive, exited, wait_until

from chat_server.client import ChatClient
from contracts.mission import load_mission
from faultinject.missions import write_mission
from faultinject.procs import add_users

PASSWORD = "pw-deploy-up"




@pytest.mark.slow
async def test_up_restarts_a_killed_chat_server_and_messages_cross(tmp_path: Path) -> None:
    sites = ["A", "B", "C"]
    mpath = write_mission(tmp_path / "mission.toml", "up3", sites, rcm=FAST_RCM, chat=FAST_CHAT)
    users = {"A": ["alice"], "B": ["bob"], "C": ["carol"]}
    await add_users(mpath, users, PASSWORD)
    out = open(tmp_path / "up.out", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "deploy", "up", "--mission", str(mpath),
                             "--status-interval", "0.3"], cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True,
                            env={**os.environ, "COLUMNS": "200"})
    clients: list[ChatClient] = []
    seen_pids: set[int] = set()
    m = load_mission(mpath)
    try:
        await wait_until(lambda: all(all_connected(supervisor_status(tmp_path / "var", s), m.peers_of(s))
                                     for s in sites), "every site up and connected", timeout=60.0, dead=exited(proc))
        for s in sites:
            seen_pids |= {p["pid"] for p in supervisor_status(tmp_path / "var", s)["processes"].values()}   # type: ignore[index]
        st = subprocess.run([sys.executable, "-m", "deploy", "status", "--mission", str(mpath)], cwd=REPO,
                            capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "200"})
        assert st.returncode == 0 and st.stdout.count("peers 2/2 connected") == 3, st.stdout + st.stderr
        url = {s: f"ws://{m.site(s).chat.host}:{m.site(s).chat.port}/ws" for s in sites}
        alice, bob, carol = [await ChatClient.connect(url[s], users[s][0], PASSWORD, reconnect=True)
                             for s in sites]
        clients += [alice, bob, carol]
        for c in clients:
            await c.join("ops")
        await alice.say("ops", "before the crash")
        for c in (bob, carol):
            await c.wait_for(lambda f: f.get("type") == "message" and f.get("text") == "before the crash")

        victim = supervisor_status(tmp_path / "var", "B")["processes"]["chat"]        # type: ignore[index]
        assert victim["restarts"] == 0
        os.kill(victim["pid"], signal.SIGKILL)

        def restarted() -> bool:
            st = supervisor_status(tmp_path / "var", "B")
            chat = (st or {}).get("processes", {}).get("chat", {})
            return chat.get("restarts", 0) >= 1 and chat.get("pid") not in (None, victim["pid"]) \
                and all_connected(st, ["A", "C"])
        await wait_until(restarted, "B's chat server restarted and healthy", timeout=60.0, dead=exited(proc))
        new_pid = supervisor_status(tmp_path / "var", "B")["processes"]["chat"]["pid"]   # type: ignore[index]
        seen_pids.add(new_pid)
        assert not alive(victim["pid"])

        # bob's client reconnects by itself (session resume); his next message crosses to A and C
        ack = await bob.say("ops", "after the restart, from B")
        assert ack["msg_id"].startswith("B:")
        for c in (alice, carol):
            await c.wait_for(lambda f: f.get("type") == "message" and f.get("text") == "after the restart, from B")
        await alice.say("ops", "welcome back, B")
        await bob.wait_for(lambda f: f.get("type") == "message" and f.get("text") == "welcome back, B")
        assert bob.reconnects >= 1
    finally:
        for c in clients:
            await c.close()
        code = stop_deploy(proc, out)
    text = (tmp_path / "up.out").read_text(errors="replace")
    assert code == 0, text[-3000:]
    assert "B chat supervisor: killed by signal 9; restarting in" in text
    assert "supervisor: restarted (pid" in text
    assert "stopped: every process exited" in text
    assert seen_pids and not [p for p in seen_pids if alive(p)], "children left running after deploy up"
    st = subprocess.run([sys.executable, "-m", "deploy", "status", "--mission", str(mpath)], cwd=REPO,
                        capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "200"})
    assert st.returncode == 1 and st.stdout.count("not answering") == 3, st.stdout + st.stderr
    # each site's log file got its server's lines
    assert "ready on http" in (tmp_path / "var" / "B" / "logs" / "chat.log").read_text()


@pytest.mark.timeout(60)
async def test_up_ends_with_status_2_when_every_server_fails_to_start(tmp_path: Path) -> None:
    """Another process holds the site's directories (a mission already up from a copy of the mission file with
    other ports): each server says so and exits 2, which is not restarted; nothing is left to supervise."""
    import io

    from rich.console import Console

    from deploy.up import run_up
    m = write_mission(tmp_path / "m.toml", "up2", ["A"], rcm=FAST_RCM, chat=FAST_CHAT)
    hold = ("import sys; from pathlib import Path; from rcm.durability.dirlock import lock_dir\n"
            "for d in sys.argv[1:]: Path(d).mkdir(parents=True, exist_ok=True); lock_dir(Path(d), 'x')\n"
            "print('held', flush=True); sys.stdin.read()")
    site = load_mission(m).site_dir("A")
    holder = subprocess.Popen([sys.executable, "-c", hold, str(site / "rcm"), str(site / "chat")], cwd=REPO,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        out = io.StringIO()
        code = await run_up(m, None, Console(file=out, width=400), status_interval=0.2, show_logs=False)
        printed = out.getvalue()
        assert code == 2, printed
        assert "every server failed to start" in printed
        assert f"(site A's RCM server already runs from {site.resolve() / 'rcm'} (process {holder.pid}" in printed
    finally:
        holder.communicate(timeout=30)
