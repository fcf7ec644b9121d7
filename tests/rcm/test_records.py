"""Write-ahead log records (rcm/records.py): typed, encoded in one place, old logs still read."""
from __future__ import annotations

import msgpack
import pytest

from rcm import wire
from rcm.durability import records as R
from rcm.durability.wal import Wal, WalError

EXAMPLES = [
    R.LocalSend(3, [7], b"p", {"B": 4}, ("C",)),
    R.Outbound("B", 5, wire.CTRL, ["a", 1, "A", 1, "B", 2]),
    R.Outbound("B", 6, wire.MISSED, [[1, 4]]),
    R.Outbound("B", 7, wire.DATA, [3, [7], b"p"]),
    R.Received("B", 9, 10, 11, [12], b"q"),
    R.ReceivedControl("B", 9, 12, wire.MISSED, [[2, 2]]),
    R.PeerStream("B", 9),
    R.Acked("B", 4),
    R.Delivered(1, "B", 11, [12, "B"], False, b"q"),
    R.ClientAck("chat", 1),
    R.Snapshot({"clock": 12}, 3),
    R.InboundFrontier("B", 9, 12),
    R.Pending("B", 13, [14], b"r"),
    R.MissedSends("C", [[3, 3], [5, 9]]),
    R.DeliveryCounter(41),
    R.Delivered(2, "C", 5, [3, "C"], True, b"s", repaired=True),
    R.Kept("B", 11, [12, "B"], 1700000000.5, b"q"),
    R.Wanted("C", [[3, 4], [9, 9]]),
]


def test_every_kind_round_trips_through_msgpack():
    assert {type(r) for r in EXAMPLES} == set(R.RECORD_TYPES)
    for r in EXAMPLES:
        raw = msgpack.unpackb(msgpack.packb(r.encode(), use_bin_type=True), raw=False, strict_map_key=False)
        assert R.decode(raw) == r, r


def test_forced_kinds_are_derived_from_the_types():
    # The set the log used to spell out by hand: everything but acks (ours and clients').
    assert R.FORCED == frozenset("SORCIDZFPMNTW")
    assert not R.Acked.forced and not R.ClientAck.forced and R.Delivered.forced


def test_old_logs_with_missed_numbers_read_as_ranges():
    assert R.decode(["M", "C", [3, 4, 5, 9]]).ranges == [[3, 5], [9, 9]]
    assert R.decode(["O", "C", 1, wire.MISSED, [10, 11, 12]]).body == [[10, 12]]
    assert R.decode(["C", "B", 1, 2, wire.MISSED, [7]]).body == [[7, 7]]
    assert R.decode(["O", "C", 2, wire.CTRL, [1, 2, 3]]).body == [1, 2, 3]     # a CTRL body is left alone


@pytest.mark.parametrize("raw", [["X", 1], ["S", 1, 2], [], "S", [7, 1]])
def test_records_no_version_wrote_are_refused(raw):
    with pytest.raises(R.RecordError):
        R.decode(raw)


def test_a_log_with_an_unknown_record_is_refused_with_its_path(tmp_path):
    w = Wal(tmp_path)
    w.append(R.Acked("B", 1))
    w.close()
    body = msgpack.packb(["X", 1])
    import struct
    import zlib
    with open(tmp_path / "wal.log", "ab") as f:
        f.write(struct.pack("<II", len(body), zlib.crc32(body)) + body)
    with pytest.raises(WalError, match="unknown kind 'X'"):
        Wal(tmp_path)


def test_a_delivery_that_was_not_repaired_is_written_as_before():
    plain = R.Delivered(1, "B", 11, [12, "B"], False, b"q")
    assert len(plain.encode()) == 7 and R.decode(plain.encode()) == plain
    fixed = R.Delivered(1, "B", 11, [12, "B"], True, b"q", repaired=True)
    assert fixed.encode()[-1] is True and R.decode(fixed.encode()).repaired
    with pytest.raises(R.RecordError):
        R.decode(["D", 1, "B"])
