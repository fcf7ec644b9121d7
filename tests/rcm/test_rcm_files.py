"""What an RCM server writes on disk and when: modes (audit 15) and replies after the sync (audit 18).

These run an ``RcmServer`` in this process (no child processes): the local
client socket is real, the inter-site listener binds a free port and no peer
ever connects.
"""
from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path

import pytest

from contracts.mission import load_mission
from faultinject.missions import write_mission
from rcm import wire
from rcm.client import RcmClient, socket_path
from rcm.durability.records import LocalSend
from rcm.server import RcmServer
from rcm.server.localclients import ClientProtocol


@pytest.fixture
def permissive_umask():
    """Modes must not depend on the umask the server was started with."""
    old = os.umask(0)
    yield
    os.umask(old)


def mission(tmp_path: Path, **rcm):
    path = write_mission(tmp_path / "m.toml", "files", ["A", "B"], rcm={"suspect_timeout": 30.0, **rcm})
    return load_mission(path)


def modes_under(root: Path) -> dict[str, int]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            p = Path(dirpath) / name
            out[str(p.relative_to(root))] = stat.S_IMODE(os.lstat(p).st_mode)
    out["."] = stat.S_IMODE(os.lstat(root).st_mode)
    return out


@pytest.mark.timeout(30)
async def test_every_file_rcm_writes_is_private(tmp_path: Path, permissive_umask):
    m = mission(tmp_path, wal_max_bytes=1)          # compact at every batch: the rewritten log too
    server = RcmServer(m, "A")
    await server.start()
    try:
        client = await RcmClient.connect(socket_path(m, "A"), name="chat")
        for i in range(3):
            await client.send(f"m{i}".encode())
        await client.ack(1)
        await client.close()
        assert server.log_worker is not None and server.log_worker.compactions >= 1
        modes = modes_under(server.dir)
    finally:
        await server.stop()
    assert set(modes) >= {".", "wal.log", "state.json", "rcm.sock"}
    wrong = {name: oct(mode) for name, mode in modes.items()
             if mode != {".": 0o700, "rcm.sock": 0o660}.get(name, 0o600)}
    assert not wrong, f"not private: {wrong}"


@pytest.mark.timeout(30)
async def test_older_loose_modes_are_tightened_at_start(tmp_path: Path, permissive_umask):
    m = mission(tmp_path)
    rcm_dir = m.site_dir("A") / "rcm"
    server = RcmServer(m, "A")
    await server.start()
    await server.stop()
    os.chmod(rcm_dir, 0o755)                          # as an older version left them
    os.chmod(rcm_dir / "wal.log", 0o644)
    os.chmod(rcm_dir / "state.json", 0o644)
    server = RcmServer(m, "A")
    try:
        assert stat.S_IMODE(os.stat(rcm_dir).st_mode) == 0o700
        assert stat.S_IMODE(os.stat(rcm_dir / "wal.log").st_mode) == 0o600
        assert stat.S_IMODE(os.stat(rcm_dir / "state.json").st_mode) == 0o600
    finally:
        server.wal.close()


@pytest.mark.timeout(30)
async def test_accepted_is_never_written_before_the_log_sync(tmp_path: Path):
    """A batch with a good send and a bad request: ``accepted`` goes out after fdatasync, then the error."""
    from testkit import Kept, wait_until

    m = mission(tmp_path)
    server = RcmServer(m, "A")
    events: list = []
    real_commit = server.wal.commit

    def commit(data: bytes, forced: bool) -> None:        # in the server's log worker thread
        real_commit(data, forced)
        if forced:
            events.append(("sync", b""))

    server.wal.commit = commit  # type: ignore[method-assign]
    try:
        c = ClientProtocol(server)
        c.connection_made(Kept(events=events))
        c.data_received(wire.encode_frame(["hello", "chat", None, None]))
        events.clear()
        c.data_received(wire.encode_frame(["send", 1, b"promised", None]) + wire.encode_frame(["nonsense"]))
        await wait_until(lambda: events and events[-1][0] == "close", "the bad request's close")
        order = [kind for kind, data in events if kind == "sync" or b"accepted" in data or b"error" in data]
        assert order[:2] == ["sync", "write"], events
        assert b"accepted" in next(d for k, d in events if k == "write")
        assert any(b"unknown request" in d for k, d in events if k == "write")
    finally:
        await server.settled()
        server.wal.close()


@pytest.mark.timeout(30)
async def test_a_failed_log_write_halts_the_server_without_promising(tmp_path: Path):
    """No ``accepted`` for a send whose log write failed; the server stops (a restart recovers)."""
    from rcm.client import RcmUnavailable
    from rcm.durability.wal import WalError

    m = mission(tmp_path)
    server = RcmServer(m, "A")
    await server.start()
    try:
        client = await RcmClient.connect(socket_path(m, "A"), name="chat")
        await client.send(b"before")
        real_commit = server.wal.commit

        def full(data: bytes, forced: bool) -> None:
            if data:                        # records of this batch to be written
                raise WalError("cannot write the log: No space left on device")
            real_commit(data, forced)

        server.wal.commit = full  # type: ignore[method-assign]
        with pytest.raises(RcmUnavailable):
            await client.send(b"never promised")
        await asyncio.wait_for(server.halted.wait(), 5)
        assert "No space left on device" in (server.failed or "")
        await client.close()
    finally:
        await server.stop()
    restarted = RcmServer(m, "A")
    try:
        sent = [r.payload for r in restarted.wal.records if isinstance(r, LocalSend)]
        assert sent == [b"before"]
    finally:
        restarted.wal.close()
