"""Write-ahead log: torn tails, damage set aside, group commit, and stack recovery through compaction."""
from __future__ import annotations

import os
import random

import pytest
from rcm_harness import Net

from rcm.actions import Delivery, Persist
from rcm.durability.records import Acked, ClientAck, Delivered, LocalSend, Received
from rcm.durability.wal import Wal, whole_record_after


def test_torn_and_corrupt_tails_are_cut(tmp_path):
    w = Wal(tmp_path)
    for i in range(5):
        w.append(LocalSend(i, i, b"x", {}, ()))
    w.sync()
    size = w.size
    w.close()
    with open(tmp_path / "wal.log", "ab") as f:
        f.write(b"\x30\x00\x00\x00garbage")           # a record cut off mid-write
    w2 = Wal(tmp_path)
    assert [r.seq for r in w2.records] == [0, 1, 2, 3, 4]
    assert w2.truncated_bytes == 11 and os.path.getsize(tmp_path / "wal.log") == size
    w2.close()
    data = bytearray((tmp_path / "wal.log").read_bytes())
    data[-1] ^= 0xFF                                  # a flipped bit in the last record
    (tmp_path / "wal.log").write_bytes(bytes(data))
    assert [r.seq for r in Wal(tmp_path).records] == [0, 1, 2, 3]


def test_only_forced_records_cost_an_fdatasync(tmp_path):
    w = Wal(tmp_path)
    w.append(Acked("B", 3))
    w.append(ClientAck("chat", 9))
    w.sync()
    assert w.syncs == 0
    w.append(Received("B", 1, 1, 1, 1, b"x"))
    w.append(Received("B", 1, 2, 2, 2, b"y"))
    w.sync()
    assert w.syncs == 1                               # one batch, one sync
    assert len(Wal(tmp_path).records) == 4


@pytest.mark.parametrize("tls", [True, False], ids=["tls", "plaintext"])
def test_stack_recovers_buffers_frontiers_and_pending_after_compaction(tls):
    """Crash B, rebuild it from (compacted) records: nothing lost, nothing twice."""
    net = Net(["A", "B", "C"], durable=True, tls=tls)
    net.run(until=5)
    for i in range(5):
        net.send("B", f"b{i}".encode())
    net.run(until=net.now + 1)
    net.set_link("A", "B", "blackhole")
    net.set_link("B", "C", "blackhole")
    for i in range(5, 8):
        net.send("B", f"b{i}".encode())              # buffered for A and C, unacked
    net.send("A", b"a0")                              # reaches C, not B
    net.run(until=net.now + 0.5)
    delivered_before = {(d.origin, d.seq) for d in net.logs["B"].delivered}
    # Compact B's log the way the server does, then crash and restore from it.
    records = net.stacks["B"].snapshot_records() + [
        Delivered(n + 1, d.origin, d.seq, list(d.key), d.late, d.payload)
        for n, d in enumerate(net.logs["B"].delivered)]
    net.crash("B")
    net.set_link("A", "B", "up")
    net.set_link("B", "C", "up")
    restored = net.restart("B", records=records)
    assert not any(isinstance(a, Delivery) and (a.origin, a.seq) in delivered_before for a in restored)
    net.run(until=net.now + 10)
    for s in ("A", "C"):
        got = [d.payload for d in net.logs[s].delivered if d.origin == "B"]
        assert got == [f"b{i}".encode() for i in range(8)], s
    b_ids = [(d.origin, d.seq) for d in net.logs["B"].delivered]
    assert len(b_ids) == len(set(b_ids))
    assert ("A", 1) in set(b_ids)
    if tls:
        # The frontier B's HELLO carried spared A everything it held. Without
        # TLS nothing proves a frontier (audit finding 4): what A had not yet
        # acknowledged comes again, and A drops it as duplicates.
        assert net.stacks["A"].stats()["peers"]["B"]["duplicates"] == 0


def test_persist_records_come_before_the_bytes_of_their_batch():
    """The server logs a batch's records before executing the rest; the stack
    must therefore hand them out ahead of the Transmit that carries the ack."""
    from rcm.actions import Transmit
    net = Net(["A", "B"], durable=True)
    net.run(until=5)
    stack_b, conn = net.stacks["B"], net.stacks["B"].peers["A"].conn
    data = net.stacks["A"].send(b"x", None, net.now)[1]
    wire_bytes = b"".join(a.data for a in data if isinstance(a, Transmit))
    actions = stack_b.data_received(conn, wire_bytes, net.now)
    kinds = [type(a).__name__ for a in actions]
    assert "Persist" in kinds and "Transmit" in kinds
    assert kinds.index("Persist") < kinds.index("Transmit")
    assert isinstance([a.record for a in actions if isinstance(a, Persist)][0], Received)


# -- audit finding 18: partial writes, directory fsyncs ------------------------------------------
def test_wal_completes_partial_writes(tmp_path, monkeypatch):
    """``os.write`` may write less than asked (a full disk, a signal): the rest must follow."""
    w = Wal(tmp_path)
    real = os.write

    def short(fd, data):
        return real(fd, bytes(data[:7])) if fd == w._fd else real(fd, data)

    monkeypatch.setattr(os, "write", short)
    for i in range(20):
        w.append(LocalSend(i, i, b"payload" * 3, {}, ()))
    w.sync()
    monkeypatch.undo()
    w.close()
    assert [r.seq for r in Wal(tmp_path).records] == list(range(20))
    assert os.path.getsize(tmp_path / "wal.log") == w.size


def test_failed_write_leaves_a_whole_log_and_keeps_the_batch(tmp_path, monkeypatch):
    import errno

    from rcm.durability.wal import WalError

    w = Wal(tmp_path)
    w.append(LocalSend(0, 0, b"kept", {}, ()))
    w.sync()
    good = w.size
    real = os.write
    calls = []

    def disk_full(fd, data):
        if fd != w._fd:
            return real(fd, data)
        calls.append(len(data))
        if len(calls) == 1:
            return real(fd, bytes(data[:5]))          # half a record header, then the disk is full
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", disk_full)
    w.append(LocalSend(1, 1, b"not yet", {}, ()))
    with pytest.raises(WalError, match="No space left on device"):
        w.sync()
    monkeypatch.undo()
    assert os.path.getsize(tmp_path / "wal.log") == good     # the torn record was cut off
    assert [r.seq for r in Wal(tmp_path).records] == [0]
    w.sync()                                                 # space again: the batch goes in whole
    assert [r.seq for r in Wal(tmp_path).records] == [0, 1]


def fsynced_paths(monkeypatch) -> list[str]:
    seen: list[str] = []
    real = os.fsync

    def spy(fd):
        seen.append(os.readlink(f"/proc/self/fd/{fd}"))
        return real(fd)

    monkeypatch.setattr(os, "fsync", spy)
    return seen


def test_new_log_file_fsyncs_its_directory(tmp_path, monkeypatch):
    d = tmp_path / "site" / "rcm"
    seen = fsynced_paths(monkeypatch)
    w = Wal(d)
    assert str(d) in seen                 # the new wal.log's directory entry
    assert str(d.parent) in seen          # the new rcm directory's entry in its parent
    seen.clear()
    w.append(LocalSend(0, 0, b"x", {}, ()))
    w.rewrite([LocalSend(0, 0, b"x", {}, ())])
    assert str(d / "wal.compact") in seen  # the compacted file itself
    assert seen[-1] == str(d)             # the rename, made durable
    w.close()


def five_records(tmp_path) -> bytearray:
    w = Wal(tmp_path)
    for i in range(5):
        w.append(LocalSend(i, i, b"x" * 50, {}, ()))
    w.sync()
    w.close()
    return bytearray((tmp_path / "wal.log").read_bytes())


def test_damage_with_whole_records_after_it_sets_the_log_aside(tmp_path):
    data = five_records(tmp_path)
    data[len(data) // 5 + 20] ^= 0xFF                 # a bad byte in the second record; three whole ones follow
    (tmp_path / "wal.log").write_bytes(bytes(data))
    w = Wal(tmp_path)
    assert w.records == [] and w.truncated_bytes == 0
    assert w.set_aside is not None and f"damaged at byte {len(data) // 5} of {len(data)}" in w.set_aside
    aside = list(tmp_path.glob("wal.log.damaged-*"))
    assert [p.read_bytes() for p in aside] == [bytes(data)]       # kept whole, for the operator
    assert os.path.getsize(tmp_path / "wal.log") == 0
    w.append(LocalSend(9, 9, b"y", {}, ()))
    w.sync()
    w.close()
    assert [r.seq for r in Wal(tmp_path).records] == [9]


def test_a_tail_of_zeros_or_of_garbage_is_torn_not_damaged(tmp_path):
    data = five_records(tmp_path)
    rng = random.Random(5)
    for tail in (bytes(64 << 10), rng.randbytes(64 << 10), b"\x30\x00\x00\x00" + bytes(5000)):
        (tmp_path / "wal.log").write_bytes(bytes(data) + tail)
        w = Wal(tmp_path)
        assert [r.seq for r in w.records] == [0, 1, 2, 3, 4] and w.set_aside is None
        assert w.truncated_bytes == len(tail)
        w.close()
    assert whole_record_after(bytes(data), 1) == len(data) // 5
    assert whole_record_after(bytes(data), len(data) - 1) is None
