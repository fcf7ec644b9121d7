"""``python -m deploy netns``: two sites in their own network namespaces; their users chat.

Needs root and iproute2; otherwise skipped with the reason.
"""
from __future__ import annotations

import ipaddress
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from deploy_harness import FAST_CHAT, FAST_RCM, REPO, all_connected, stop_deploy, supervisor_status
from testkit import wait_until

from chat_server.client import ChatClient
from contracts.mission import Address, load_mission
from deploy.netns import Topology, derived_mission, netns_unavailable_reason
from faultinject.missions import write_mission
from faultinject.procs import add_users

PASSWORD = "pw-deploy-netns"
REASON = netns_unavailable_reason()


def test_the_derived_mission_moves_every_address_into_the_namespaces_and_keeps_the_rest(tmp_path: Path) -> None:
    """Without root: only the file is derived (rcm, chat and irc at the namespace's address, dial dropped,
    the rate tables and every other key kept, plaintext declared a lab's)."""
    mpath = write_mission(tmp_path / "mission.toml", "ns3", ["A", "B", "C"], rcm=FAST_RCM, chat=FAST_CHAT,
                          proxies=True, rates={"A": {"B": 56000}})
    mpath.write_text(mpath.read_text().replace('[sites.B]\n', '[sites.B]\nirc = "127.0.0.1:16601"\n'))
    m = load_mission(mpath)
    topo = Topology("9", ["A", "B", "C"], ipaddress.ip_network("10.77.1.0/24"))
    d = load_mission(derived_mission(m, topo))
    for s in "ABC":
        host, old = topo.address(s), m.site(s)
        assert (d.site(s).rcm, d.site(s).chat) == (Address(host, old.rcm.port), Address(host, old.chat.port))
        assert d.site(s).dial == {}
    assert d.site("B").irc == Address(topo.address("B"), 16601)
    assert d.site("A").rate == {"B": 56000}
    assert d.rcm == replace(m.rcm, insecure_plaintext=True)
    assert d.chat == {**m.chat, "health_details_from": topo.host_address}
    assert d.data_dir == m.data_dir


def netns_inode(pid: int) -> int:
    return os.stat(f"/proc/{pid}/ns/net").st_ino


@pytest.mark.slow
@pytest.mark.skipif(REASON is not None, reason=f"netns mode unavailable: {REASON}")
async def test_users_at_two_namespaced_sites_chat(tmp_path: Path) -> None:
    mpath = write_mission(tmp_path / "mission.toml", "ns2", ["A", "B"], rcm=FAST_RCM, chat=FAST_CHAT)
    data_dir = load_mission(mpath).data_dir
    await add_users(mpath, {"A": ["alice"], "B": ["bob"]}, PASSWORD)
    out = open(tmp_path / "netns.out", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "deploy", "netns", "--mission", str(mpath),
                             "--status-interval", "0.3"], cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True, env={**os.environ, "COLUMNS": "200"})
    namespaces = f"rcm{proc.pid % 100000}-"
    clients: list[ChatClient] = []
    try:
        await wait_until(lambda: all_connected(supervisor_status(data_dir, "A"), ["B"])
                         and all_connected(supervisor_status(data_dir, "B"), ["A"]),
                         "sites connected through their namespaces", timeout=60.0,
                         dead=lambda: proc.poll() is not None and (tmp_path / "netns.out").read_text()[-2000:])
        derived = load_mission(data_dir / "netns" / "mission.toml")
        a, b = derived.site("A"), derived.site("B")
        assert a.rcm.host != b.rcm.host and not a.rcm.host.startswith("127.")
        assert a.dial == {} and b.dial == {}
        # the servers really run in separate network stacks, neither of them ours
        pids = {s: supervisor_status(data_dir, s)["processes"]["rcm"]["pid"] for s in ("A", "B")}   # type: ignore[index]
        inodes = {s: netns_inode(p) for s, p in pids.items()}
        assert len({inodes["A"], inodes["B"], netns_inode(os.getpid())}) == 3
        ns_list = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert f"{namespaces}0" in ns_list and f"{namespaces}1" in ns_list

        alice = await ChatClient.connect(f"ws://{a.chat.host}:{a.chat.port}/ws", "alice", PASSWORD)
        bob = await ChatClient.connect(f"ws://{b.chat.host}:{b.chat.port}/ws", "bob", PASSWORD)
        clients += [alice, bob]
        await alice.join("ops")
        await bob.join("ops")
        ack = await alice.say("ops", "hello from namespace A")
        msg = await bob.wait_for(lambda f: f.get("type") == "message" and f.get("text") == "hello from namespace A")
        assert msg["origin"] == "A" and msg["msg_id"] == ack["msg_id"]
        await bob.say("ops", "B here, loud and clear")
        msg = await alice.wait_for(lambda f: f.get("type") == "message" and f.get("text") == "B here, loud and clear")
        assert msg["origin"] == "B"
    finally:
        for c in clients:
            await c.close()
        code = stop_deploy(proc, out)
    text = (tmp_path / "netns.out").read_text(errors="replace")
    assert code == 0, text[-3000:]
    assert "namespaces removed" in text
    assert namespaces not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-br", "link"], capture_output=True, text=True).stdout
    assert f"rcm{proc.pid % 100000}h" not in links
