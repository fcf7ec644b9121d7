"""Audit finding 7: a local client that stops reading costs bounded memory; the replay log is capped in bytes.

Before the fix RCM wrote every delivery to every subscribed client's transport,
whose buffer grew without limit for a client that did not read (+76 MiB for
80 MB sent), and the replay log was capped only by its number of entries.

The server runs in this process (one site, its peer never connects, so every
send is delivered at once); the stuck client is a raw Unix socket that says
hello and never reads.
"""
from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from testkit import wait_until

from contracts.mission import MissionError, load_mission, parse_mission
from faultinject.missions import write_mission
from rcm import wire
from rcm.client import Delivery, RcmClient, socket_path
from rcm.server import RcmServer
from rcm.server.localclients import LIVE_QUEUE_BYTES, REPLAY_CHUNK_BYTES

PAYLOAD = 200_000
SENDS = 80                   # 16 MB of deliveries


def mission(tmp_path: Path, **rcm):
    return load_mission(write_mission(tmp_path / "m.toml", "slow", ["A", "B"],
                                      rcm={"suspect_timeout": 300.0, "durable": False, **rcm}))


async def stuck_client(path) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_unix_connection(str(path))
    writer.write(wire.encode_frame(["hello", "stuck", None, None]))
    await writer.drain()
    return reader, writer


async def send_all(client: RcmClient, n: int = SENDS) -> None:
    for i in range(n):
        await client.send(bytes([i % 256]) * PAYLOAD)


@pytest.mark.timeout(60)
async def test_client_that_stops_reading_costs_bounded_memory(tmp_path: Path):
    m = mission(tmp_path)
    server = RcmServer(m, "A")
    await server.start()
    try:
        _, writer = await stuck_client(socket_path(m, "A"))
        await wait_until(lambda: any(c.name == "stuck" for c in server.clients.members), "the stuck client",
                         interval=0.01, timeout=60)
        stuck = next(c for c in server.clients.members if c.name == "stuck")
        sender = await RcmClient.connect(socket_path(m, "A"), name="sender")
        await send_all(sender)
        # All 16 MB were delivered; what waits for the stuck client stays about one chunk past the live limit.
        assert server.deliveries.last_n == SENDS
        queued = stuck.transport.get_write_buffer_size() + sum(len(p) for p in stuck.pending)
        assert queued <= LIVE_QUEUE_BYTES + REPLAY_CHUNK_BYTES + 2 * PAYLOAD
        assert stuck.replay_next is not None, "a client that does not read catches up from the replay log"
        assert stuck in server.clients.members          # slow, not dropped: the replay log still holds what it lacks
        await sender.close()
        writer.close()
    finally:
        await server.stop()


@pytest.mark.timeout(60)
async def test_stuck_client_is_dropped_when_the_replay_log_moves_past_it(tmp_path: Path, caplog):
    m = mission(tmp_path, replay_log_bytes=4 << 20)
    server = RcmServer(m, "A")
    await server.start()
    try:
        reader, writer = await stuck_client(socket_path(m, "A"))
        await wait_until(lambda: any(c.name == "stuck" for c in server.clients.members), "the stuck client",
                         interval=0.01, timeout=60)
        sender = await RcmClient.connect(socket_path(m, "A"), name="sender")
        await send_all(sender)
        assert server.deliveries.bytes <= 4 << 20
        assert server.clients.dropped == 1
        assert not any(c.name == "stuck" for c in server.clients.members)
        assert "dropping client 'stuck'" in caplog.text and "replay_log_bytes" in caplog.text
        # The reader keeps working; the stuck one finds its connection closed when it reads at last.
        with pytest.raises((ConnectionError, asyncio.IncompleteReadError)):
            while await reader.read(1 << 20):
                pass
            raise ConnectionError("closed")
        await sender.close()
        writer.close()
    finally:
        await server.stop()


@pytest.mark.timeout(60)
async def test_replay_log_is_capped_in_bytes(tmp_path: Path):
    m = mission(tmp_path, replay_log_bytes=2 << 20)
    server = RcmServer(m, "A")
    await server.start()
    try:
        sender = await RcmClient.connect(socket_path(m, "A"), name="sender")
        await send_all(sender, 40)
        assert server.deliveries.bytes <= 2 << 20
        assert len(server.deliveries) == server.deliveries.last_n - server.deliveries.first + 1 < 40
        stats = await sender.stats()
        assert stats["replay_log_bytes"] == server.deliveries.bytes
        await sender.close()
    finally:
        await server.stop()


@pytest.mark.timeout(60)
async def test_resume_with_a_backlog_larger_than_the_queue_cap(tmp_path: Path):
    """The backlog goes out paced by the client's reading: a resume is never dropped for its size."""
    m = mission(tmp_path, client_queue_bytes=4 << 20)
    assert m.rcm.client_queue_bytes < SENDS * PAYLOAD
    server = RcmServer(m, "A")
    await server.start()
    try:
        sender = await RcmClient.connect(socket_path(m, "A"), name="sender")
        await send_all(sender)
        late = await RcmClient.connect(socket_path(m, "A"), name="late", since=(sender.incarnation, 0))
        got = 0
        async for ev in late.events():
            if isinstance(ev, Delivery):
                got += 1
                if got == SENDS:
                    break
        assert server.clients.dropped == 0
        await late.close()
        await sender.close()
    finally:
        await server.stop()


def test_queue_settings_are_checked(tmp_path: Path):
    raw = {"mission": {"name": "m"}, "sites": {"A": {"rcm": "127.0.0.1:1", "chat": "127.0.0.1:2"}}}
    s = parse_mission(raw, tmp_path).rcm
    assert (s.client_queue_bytes, s.replay_log_bytes) == (16 << 20, 128 << 20)
    with pytest.raises(MissionError, match="client_queue_bytes = 1000 must be at least 4194304"):
        parse_mission({**raw, "rcm": {"client_queue_bytes": 1000}}, tmp_path)
    with pytest.raises(MissionError, match="replay_log_bytes = 1000 must be at least max_frame_bytes"):
        parse_mission({**raw, "rcm": {"replay_log_bytes": 1000}}, tmp_path)


@pytest.mark.timeout(60)
async def test_client_over_its_queue_cap_is_dropped_with_the_reason(tmp_path: Path, caplog):
    """Replies pile up for a client that asks and never reads: past client_queue_bytes it is dropped."""
    m = mission(tmp_path, client_queue_bytes=4 << 20)
    server = RcmServer(m, "A")
    await server.start()
    try:
        reader, writer = await stuck_client(socket_path(m, "A"))
        one = len(wire.encode_frame(["stats", 1, server.stack.stats()]))
        writer.write(b"".join(wire.encode_frame(["stats", i]) for i in range(2 * (4 << 20) // one)))
        try:
            await writer.drain()
        except ConnectionError:
            pass                          # dropped while it was still writing
        await wait_until(lambda: server.clients.dropped == 1, "the stuck client dropped", interval=0.01, timeout=60)
        assert "dropping client 'stuck'" in caplog.text and "client_queue_bytes = 4194304" in caplog.text
        writer.close()
    finally:
        await server.stop()
