"""The log's fdatasync runs off the event loop (rcm/server/commits.py, rcm/server/process.py): while a sync
stalls, the site keeps reading and its peers keep hearing it, and nothing the stalled batches promise leaves.

Real servers in this process on loopback; A's log worker is gated on a ``threading.Event`` (a stalled disk).
"""
from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
from rcm_certs import make_ca, write_site
from testkit import Kept, wait_until

from contracts.mission import load_mission
from faultinject.missions import write_mission
from rcm import wire
from rcm.client import Delivery, RcmClient, socket_path
from rcm.durability.wal import Wal, WalError
from rcm.server import RcmServer
from rcm.server.localclients import ClientProtocol

FAST = {"heartbeat_timeout": 0.2, "liveness_timeout": 1.0, "silence_timeout": 2.0, "suspect_timeout": 30.0,
        "reconnect_period": 0.1}


class Gate:
    """A stalled disk: forced commits of ``wal`` block in its worker thread until ``open``."""

    def __init__(self, wal: Wal) -> None:
        self.opened = threading.Event()
        self.blocked = threading.Event()      # a sync is waiting at the gate
        self.error: WalError | None = None
        self.real = wal.commit
        wal.commit = self.commit  # type: ignore[method-assign]

    def commit(self, data: bytes, forced: bool) -> None:
        if forced and not self.opened.is_set():
            self.blocked.set()
            self.opened.wait(20)
            if self.error is not None:
                raise self.error
        self.real(data, forced)

    def open(self, error: WalError | None = None) -> None:
        self.error = error
        self.opened.set()


async def received(client: RcmClient, out: list[Delivery]) -> None:
    async for ev in client.events():
        if isinstance(ev, Delivery):
            out.append(ev)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("tls", [False, True], ids=["plaintext", "tls"])
async def test_a_stalled_sync_holds_every_promise_while_the_site_keeps_reading_and_its_peers_hear_it(
        tmp_path: Path, tls: bool):
    """With zstd (the default) and, in one run, TLS: the heartbeats that overtake held frames are compressed and
    encrypted in the order they are written (a byte out of order would break B's codec or TLS, and close)."""
    m = load_mission(write_mission(tmp_path / "m.toml", "stall", ["A", "B"], rcm={**FAST, "tls": tls}))
    if tls:
        ca = make_ca("stall")
        for site in ("A", "B"):
            write_site(m.site_dir(site) / "tls", ca, site, "stall")
    a, b = RcmServer(m, "A"), RcmServer(m, "B")
    clients: list[RcmClient] = []
    tasks: list[asyncio.Task] = []
    gate: Gate | None = None
    try:
        await a.start()
        await b.start()
        await wait_until(lambda: a.stack.statuses()["B"] == b.stack.statuses()["A"] == "connected", "connected")
        ca = await RcmClient.connect(socket_path(m, "A"), name="chat")
        cb = await RcmClient.connect(socket_path(m, "B"), name="chat")
        clients += [ca, cb]
        at_a: list[Delivery] = []
        tasks.append(asyncio.create_task(received(ca, at_a)))
        await cb.send(b"before", ["A"])
        await wait_until(lambda: [d.payload for d in at_a] == [b"before"], "the first message at A")
        b_to_a = b.stack.channels.peers["A"].out

        gate = Gate(a.wal)
        send_a = asyncio.create_task(ca.send(b"from A"))           # A's sync of it stalls
        await asyncio.to_thread(gate.blocked.wait, 10)
        worker = a.log_worker
        assert worker is not None
        released_n, keepalives, syncs = a.clients.released_n, worker.keepalives, a.wal.syncs
        numbered = a.deliveries.last_n
        await cb.send(b"stalled 1", ["A"])                          # B's log is fine: accepted at B
        await cb.send(b"stalled 2", ["A"])
        # A keeps reading: B's messages are taken by A's stack and numbered in its replay log...
        await wait_until(lambda: a.deliveries.last_n >= numbered + 2, "A's stack to take B's messages")
        # ...and B keeps hearing A (liveness-only heartbeats) for longer than B's liveness timeout.
        await wait_until(lambda: worker.keepalives >= keepalives + 7, "a liveness timeout's worth of heartbeats")
        assert b.stack.statuses()["A"] == "connected" and a.stack.statuses()["B"] == "connected"
        assert len(a._conns) == 1 and all(p.codec.compressed for p in a._conns.values())
        # Nothing A's stalled batches promise has left: no accepted, no delivery, no acknowledgement.
        assert not send_a.done()
        assert a.clients.released_n == released_n and [d.payload for d in at_a] == [b"before"]
        assert b_to_a.acked < b_to_a.next_seq - 1, "B holds an acknowledgement of what A has not logged"
        assert a.wal.syncs == syncs and worker.commits.in_flight and len(worker.commits) >= 2

        gate.open()
        accepted = await asyncio.wait_for(send_a, 10)
        await wait_until(lambda: len(at_a) == 4, "every delivery at A")
        assert sorted(d.payload for d in at_a) == sorted([b"before", b"stalled 1", b"stalled 2", b"from A"])
        assert [d.n for d in at_a] == sorted(d.n for d in at_a)              # in numbering order
        assert accepted.msg_id.startswith("A:")
        await wait_until(lambda: b_to_a.acked == b_to_a.next_seq - 1, "B's frames acknowledged after the sync")
    finally:
        if gate is not None:
            gate.open()
        for t in tasks:
            t.cancel()
        for c in clients:
            await c.close()
        await a.stop()
        await b.stop()


@pytest.mark.timeout(30)
async def test_a_failed_sync_halts_and_releases_nothing_of_its_batch_or_those_held_behind_it(tmp_path: Path):
    m = load_mission(write_mission(tmp_path / "m.toml", "fail", ["A", "B"], rcm=FAST))
    server = RcmServer(m, "A")
    writes: list[bytes] = []
    gate: Gate | None = None
    try:
        c = ClientProtocol(server)
        c.connection_made(Kept(writes))
        c.data_received(wire.encode_frame(["hello", "chat", None, None]))
        await wait_until(lambda: writes, "the welcome")
        gate = Gate(server.wal)
        c.data_received(wire.encode_frame(["send", 1, b"first", None]))     # its sync stalls
        await asyncio.to_thread(gate.blocked.wait, 10)
        c.data_received(wire.encode_frame(["send", 2, b"second", None]))    # held behind it
        c.data_received(wire.encode_frame(["stats", 3]))                    # promises nothing, still behind
        assert server.log_worker is not None
        held = len(server.log_worker.commits)
        gate.open(WalError("cannot sync the log: Input/output error"))
        assert held >= 3              # the two sends and the stats (and the stack's timer, maybe)
        await asyncio.wait_for(server.halted.wait(), 10)
        assert "Input/output error" in (server.failed or "")
        replies = wire.FrameDecoder(1 << 20, tag=str).feed(b"".join(writes))
        assert [f[0] for f in replies if f[0] in ("accepted", "stats", "d")] == []
    finally:
        if gate is not None:
            gate.open(gate.error or WalError("test over"))
        await server.stop()


def test_a_catching_up_client_reads_the_replay_log_only_up_to_the_last_released_delivery():
    """Deliveries numbered in a batch that waits for its sync are in the replay log already: not for reading."""
    from rcm.actions import Delivery as StackDelivery
    from rcm.durability.replay import DeliveryLog
    from rcm.server.localclients import LocalClients

    log = DeliveryLog(1 << 20)
    frames = [log.add(StackDelivery("B", i, (i, "B"), False, f"m{i}".encode()))[0] for i in (1, 2)]
    hub = LocalClients("A", log, 1 << 20, clock=lambda: 0.0)
    hub.broadcast_delivery(frames[0])                       # released: its batch's sync completed
    log.add(StackDelivery("B", 3, (3, "B"), False, b"m3"))   # numbered; its batch still waits
    assert hub.released_n == 1 and log.last_n == 3
    writes: list[bytes] = []

    class Server:
        clients = hub

    c = ClientProtocol(Server())  # type: ignore[arg-type]
    c.connection_made(Kept(writes))
    hub.subscribe(c, None, None, log_id=1)                   # a new client: it reads from the replay log
    hub.flush()
    got = wire.FrameDecoder(1 << 20, tag=str).feed(b"".join(writes))
    assert [f[1] for f in got if f[0] == "d"] == [1]
    assert c.replay_next is None                              # live: the rest reaches it when released
    hub.broadcast_delivery(frames[1])
    hub.flush()
    got = wire.FrameDecoder(1 << 20, tag=str).feed(b"".join(writes))
    assert [f[1] for f in got if f[0] == "d"] == [1, 2]


@pytest.mark.timeout(30)
async def test_a_moved_sequence_number_reservation_is_written_in_the_worker_before_accepted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """state.json's reservation moves (every BLOCK sends; 2 here) in the log worker; the send that moved it is
    accepted only once it is written, and a failed write halts without accepting it."""
    import rcm.durability.state as state_module

    monkeypatch.setattr(state_module, "BLOCK", 2)
    m = load_mission(write_mission(tmp_path / "m.toml", "reserve", ["A", "B"], rcm=FAST))
    server = RcmServer(m, "A")
    writes: list[bytes] = []
    loop_thread = threading.get_ident()
    in_worker: list[bool] = []
    opened = threading.Event()
    real_write = server.state.write

    def write(data: bytes) -> None:
        in_worker.append(threading.get_ident() != loop_thread)
        opened.wait(20)
        if b'"reserved": 6' in data:
            raise OSError(28, "No space left on device")
        real_write(data)

    server.state.write = write  # type: ignore[method-assign]

    def accepted() -> list[int]:
        return [f[1] for f in wire.FrameDecoder(1 << 20, tag=str).feed(b"".join(writes)) if f[0] == "accepted"]

    try:
        c = ClientProtocol(server)
        c.connection_made(Kept(writes))
        c.data_received(wire.encode_frame(["hello", "chat", None, None]))
        reserved = server.state.reserved                     # the start took numbers up to here
        for ref in range(1, 4):              # the second send takes the last number reserved: the reservation moves
            c.data_received(wire.encode_frame(["send", ref, b"m", None]))
        await wait_until(lambda: in_worker, "the reservation's write")
        assert server.state.reserved == reserved + 2 and in_worker == [True]
        assert 2 not in accepted() and 3 not in accepted()   # the third is held behind the second
        opened.set()
        await wait_until(lambda: accepted() == [1, 2, 3], "accepted after the write, in order")
        for ref in range(4, 6):                              # the fourth moves it again: that write fails
            c.data_received(wire.encode_frame(["send", ref, b"m", None]))
        await asyncio.wait_for(server.halted.wait(), 10)
        assert "state.json" in (server.failed or "") and "No space left" in (server.failed or "")
        assert accepted() == [1, 2, 3]
    finally:
        opened.set()
        await server.stop()
