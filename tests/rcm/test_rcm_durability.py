"""kill -9 of RCM servers during traffic: no accepted message is lost, none is
delivered twice to a client that resumes with ``since``."""
from __future__ import annotations

import asyncio
import random
from collections import Counter
from pathlib import Path

import pytest

from faultinject.missions import write_mission
from faultinject.procs import LocalRcm
from rcm import actions
from rcm.client import Delivery, RcmClient, RcmError, RcmUnavailable, socket_path

SITES = ["A", "B", "C"]
FAST = dict(heartbeat_timeout=0.2, liveness_timeout=1.0, silence_timeout=2.0, suspect_timeout=30.0,
            reconnect_period=0.3)


class Consumer:
    """A client that stores its last delivery number and resumes after restarts."""

    def __init__(self, mission, site: str) -> None:
        self.mission, self.site = mission, site
        self.got: Counter[str] = Counter()
        self.cursor: tuple[int, int] | None = None
        self.client: RcmClient | None = None
        self.reconnects = 0

    async def run(self) -> None:
        while True:
            try:
                self.client = await RcmClient.connect(socket_path(self.mission, self.site),
                                                      name="durable-test", since=self.cursor, timeout=2)
            except RcmUnavailable:
                await asyncio.sleep(0.1)
                continue
            if self.cursor is not None and self.cursor[0] != self.client.incarnation:
                raise AssertionError(f"{self.site}: delivery numbering was lost across a restart")
            try:
                async for ev in self.client.events():
                    if isinstance(ev, Delivery):
                        self.got[ev.msg_id] += 1
                        self.cursor = (self.client.incarnation, ev.n)
                        await self.client.ack(ev.n)
            except RcmUnavailable:
                self.reconnects += 1
                self.client = None
                await asyncio.sleep(0.1)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("wal_max_bytes", [64 << 20, 30_000], ids=["no-compaction", "compacting"])
async def test_kill_9_during_traffic_loses_and_duplicates_nothing(tmp_path: Path, wal_max_bytes: int):
    mp = write_mission(tmp_path / "m.toml", "durable", SITES, rcm={**FAST, "wal_max_bytes": wal_max_bytes})
    servers = LocalRcm(mp)
    m = servers.mission
    consumers = {s: Consumer(m, s) for s in SITES}
    tasks: list[asyncio.Task] = []
    accepted: list[str] = []
    rng = random.Random(11)
    try:
        await asyncio.to_thread(servers.start_all)
        tasks = [asyncio.create_task(c.run()) for c in consumers.values()]

        async def sender(site: str, stop: asyncio.Event) -> None:
            client = None
            i = 0
            while not stop.is_set():
                try:
                    if client is None:
                        client = await RcmClient.connect(socket_path(m, site), name="sender", timeout=2)
                    i += 1
                    acc = await client.send(f"{site}-{i}".encode())
                    accepted.append(acc.msg_id)
                except (RcmUnavailable, RcmError):
                    client = None
                    await asyncio.sleep(0.05)
                await asyncio.sleep(0.005)
            if client is not None:
                await client.close()

        stop = asyncio.Event()
        senders = [asyncio.create_task(sender(s, stop)) for s in SITES]
        for victim in ["B", "A", "B", "C"]:
            await asyncio.sleep(rng.uniform(0.4, 1.0))
            servers.kill(victim)                         # SIGKILL: no chance to flush anything
            await asyncio.sleep(rng.uniform(0.1, 0.6))
            await asyncio.to_thread(servers.start, victim)
            await asyncio.to_thread(servers.wait_ready, victim)
        await asyncio.sleep(0.5)
        stop.set()
        await asyncio.gather(*senders)
        want = set(accepted)
        assert len(want) == len(accepted) > 100

        async def all_in() -> None:
            while not all(want <= set(c.got) for c in consumers.values()):
                await asyncio.sleep(0.1)
        try:
            await asyncio.wait_for(all_in(), 40)
        except TimeoutError:
            missing = {s: sorted(want - set(c.got))[:5] for s, c in consumers.items()}
            raise AssertionError(f"accepted messages never delivered: {missing}") from None
        await asyncio.sleep(0.5)
        for s, c in consumers.items():
            dups = [k for k, v in c.got.items() if v > 1]
            assert not dups, f"{s}: delivered twice to a resuming client: {dups[:5]}"
            assert c.reconnects >= (2 if s == "B" else 1)
        log = servers.log_tail("B", 500)
        assert "recovered" in log and "Traceback" not in log
        if wal_max_bytes < 1 << 20:
            assert "compacted the log" in log
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for c in consumers.values():
            if c.client is not None:
                await c.client.close()
        await asyncio.to_thread(servers.stop_all)


async def test_numbering_survives_a_compaction_with_everything_acknowledged(tmp_path: Path):
    """Found by the kill -9 test in CI: a compacted log whose replay window was
    empty (every delivery acknowledged) restarted the numbering at 1, so a
    client resuming after n skipped what came next."""
    from rcm.server import RcmServer

    mp = write_mission(tmp_path / "m.toml", "numbering", ["A", "B"], rcm=FAST)
    m = LocalRcm(mp).mission
    srv = RcmServer(m, "A")
    srv._apply([actions.Delivery("B", i, (i, "B"), False, b"x") for i in range(1, 6)])
    await srv.settled()                   # the log's worker synced them
    srv.deliveries.ack("chat", 5)
    srv.deliveries.trim()
    assert not srv.deliveries.entries and srv.deliveries.last_n == 5
    srv._compact()
    srv.wal.close()
    if srv._timer is not None:
        srv._timer.cancel()
    again = RcmServer(m, "A")
    assert again.deliveries.last_n == 5 and again.deliveries.first == 6
    again._apply([actions.Delivery("B", 6, (6, "B"), False, b"y")])
    await again.settled()
    assert again.deliveries.entries[0][1] == 6
    again.wal.close()
    if again._timer is not None:
        again._timer.cancel()


async def test_a_log_damaged_in_the_middle_is_set_aside_and_the_site_rejoins_afresh(tmp_path: Path):
    """B's log loses a block in its middle while B is down. Cut there, it would forget frames A holds, and
    A's HELLO (frontier past the last frame B remembers sending) was refused for ever: the pair never
    connected again. Set aside, B starts afresh and A takes it as restarted."""
    mp = write_mission(tmp_path / "m.toml", "damaged", ["A", "B"], rcm=FAST)
    servers = LocalRcm(mp)
    m = servers.mission
    clients: list[RcmClient] = []

    async def connect(site: str) -> RcmClient:
        c = await RcmClient.connect(socket_path(m, site), name="damage-test", timeout=5)
        clients.append(c)
        return c

    async def received(c: RcmClient, want: set[str]) -> None:
        got: set[str] = set()
        async for ev in c.events():
            if isinstance(ev, Delivery):
                got.add(ev.payload.decode())
                await c.ack(ev.n)
                if want <= got:
                    return
    try:
        await asyncio.to_thread(servers.start_all)
        a, b = await connect("A"), await connect("B")
        for i in range(30):
            await b.send(f"before {i}".encode())
        await asyncio.wait_for(received(a, {f"before {i}" for i in range(30)}), 20)
        servers.kill("B")
        wal = m.site_dir("B") / "rcm" / "wal.log"
        data = bytearray(wal.read_bytes())
        for i in range(len(data) // 3, len(data) // 3 + 16):
            data[i] ^= 0x5A
        wal.write_bytes(bytes(data))
        await asyncio.to_thread(servers.start, "B")
        await asyncio.to_thread(servers.wait_ready, "B")
        b = await connect("B")
        await b.send(b"after, from B")
        await a.send(b"after, from A")
        await asyncio.wait_for(asyncio.gather(received(a, {"after, from B"}), received(b, {"after, from A"})), 20)
        assert list(wal.parent.glob("wal.log.damaged-*"))
        assert "damaged at byte" in servers.log_tail("B", 50)
    finally:
        for c in clients:
            await c.close()
        await asyncio.to_thread(servers.stop_all)
