"""The local client API of a real server: a second client, resume, refusals, signals."""
from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest

from faultinject.missions import write_mission
from faultinject.procs import LocalRcm
from rcm.client import Delivery, RcmClient, RcmError, StatusChange, socket_path

FAST = dict(heartbeat_timeout=0.2, liveness_timeout=1.0, silence_timeout=2.0, suspect_timeout=30.0,
            reconnect_period=0.3, max_payload_bytes=2000, max_frame_bytes=4096)


async def deliveries(c: RcmClient, n: int, timeout: float = 5.0) -> list[Delivery]:
    out: list[Delivery] = []

    async def read() -> None:
        async for ev in c.events():
            if isinstance(ev, Delivery):
                out.append(ev)
                if len(out) == n:
                    return
    await asyncio.wait_for(read(), timeout)
    return out


@pytest.mark.timeout(60)
async def test_second_client_sees_everything_and_resumes(tmp_path: Path):
    mp = write_mission(tmp_path / "m.toml", "clients", ["A", "B"], rcm=FAST)
    servers = LocalRcm(mp)
    clients: list[RcmClient] = []
    try:
        await asyncio.to_thread(servers.start_all)
        path = socket_path(servers.mission, "A")
        first = await RcmClient.connect(path, name="chat")
        second = await RcmClient.connect(path, name="monitor")
        clients = [first, second]
        for _ in range(100):
            if first.statuses["B"] == "connected":
                break
            await asyncio.sleep(0.05)
        a1 = await first.send(b"from the first client")
        a2 = await second.send(b"from the second client")
        assert a1.seq + 1 == a2.seq
        got1, got2 = await deliveries(first, 2), await deliveries(second, 2)
        assert [d.msg_id for d in got1] == [d.msg_id for d in got2] == [a1.msg_id, a2.msg_id]
        # Resume: a third client that says it processed delivery 1 gets only 2.
        third = await RcmClient.connect(path, name="late", since=(first.incarnation, got1[0].n))
        clients.append(third)
        assert [d.msg_id for d in await deliveries(third, 1)] == [a2.msg_id]
        # Every client starts with the status of every peer.
        fresh = await RcmClient.connect(path, name="fresh")
        clients.append(fresh)
        assert fresh.statuses == {"B": "connected"}
        # Refusals are errors to the sender only, with a reason.
        with pytest.raises(RcmError, match="max_payload_bytes"):
            await second.send(b"x" * 2001)
        with pytest.raises(RcmError, match="unknown destination"):
            await second.send(b"x", ["Z"])
        stats = await first.stats()
        assert sorted(stats["clients"]) == ["chat", "fresh", "late", "monitor"]
    finally:
        for c in clients:
            await c.close()
        await asyncio.to_thread(servers.stop_all)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
async def test_signals_stop_cleanly(tmp_path: Path, sig):
    mp = write_mission(tmp_path / "m.toml", "sig", ["A", "B"], rcm=FAST)
    servers = LocalRcm(mp)
    await asyncio.to_thread(servers.start_all)
    c = await RcmClient.connect(socket_path(servers.mission, "B"), name="t")
    try:
        proc = servers.procs["A"]
        proc.send_signal(sig)
        assert await asyncio.to_thread(proc.wait, 15) == 0
        assert not socket_path(servers.mission, "A").exists()
        seen = []

        async def watch() -> None:
            async for ev in c.events():
                if isinstance(ev, StatusChange) and ev.site == "A":
                    seen.append(ev.status)
                    if ev.status == "suspected":
                        return
        await asyncio.wait_for(watch(), 10)
        assert "site A stopping" in servers.log_tail("A") and "Traceback" not in servers.log_tail("A")
    finally:
        await c.close()
        await asyncio.to_thread(servers.stop_all)
