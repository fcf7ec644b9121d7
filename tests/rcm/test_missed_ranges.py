"""Audit finding 5: MISSED as ranges, split under the frame cap, bounded per peer, old logs readable.

Before the fix one MISSED frame listed every skipped seq: past the frame cap
the peer closed the link, the frame was resent on reconnection, and the link
was dead for good.
"""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rcm_harness import Net

from contracts.mission import RcmSettings
from rcm import actions, ranges, wire
from rcm.client import Missing, RcmClient
from rcm.durability.records import MissedSends, decode
from rcm.stack import SiteStack
from rcm.wire import local as clientwire

# Direct links only: these tests cut A-C and need C disconnected while B still reaches both.
SMALL = RcmSettings(suspect_timeout=10.0, max_frame_bytes=2048, max_payload_bytes=1000, routing="direct")


def disconnect_c(net: Net) -> None:
    net.run(until=5)
    net.set_link("A", "C", "down")
    net.run(until=net.now + 12)
    assert net.status("A", "C") == "disconnected"


def reconnect_c(net: Net) -> None:
    net.set_link("A", "C", "up")
    net.run(until=net.now + 10)
    assert net.status("A", "C") == "connected"
    assert net.status("C", "A") == "connected"


def told_missing(net: Net, site: str, origin: str) -> list[int]:
    return ranges.expand(r for m in net.logs[site].missing if m.origin == origin for r in m.ranges)


def test_long_disconnection_missed_fits_one_frame():
    """Thousands of skipped sends, one range, one small frame; the link lives on."""
    net = Net(["A", "B", "C"], settings=SMALL)
    disconnect_c(net)
    seqs = [net.send("A", b"x").seq for _ in range(3000)]
    assert net.stacks["A"].peers["C"].missed == [[seqs[0], seqs[-1]]]
    reconnect_c(net)
    assert [(m.origin, m.ranges) for m in net.logs["C"].missing] == [("A", ((seqs[0], seqs[-1]),))]
    assert net.logs["C"].missing[0].count == 3000
    assert not any("protocol error" in line for s in "AC" for line in net.logs[s].logs)


def test_fragmented_missed_is_split_under_the_frame_cap():
    """Sends alternately to B only and to everyone: C misses every other seq, 400 ranges, several frames."""
    net = Net(["A", "B", "C"], settings=SMALL)
    disconnect_c(net)
    skipped = []
    for _ in range(400):
        net.send("A", b"b only", ["B"])
        skipped.append(net.send("A", b"everyone").seq)
    reconnect_c(net)
    notices = net.logs["C"].missing
    assert len(notices) == -(-400 // ranges.per_frame(SMALL.max_frame_bytes)) > 1
    assert told_missing(net, "C", "A") == skipped
    for m in notices:     # each notice came in one frame under the cap
        assert len(wire.encode_frame([wire.MISSED, 0, [list(r) for r in m.ranges], 1])) < SMALL.max_frame_bytes
    assert not any("protocol error" in line for s in "AC" for line in net.logs[s].logs)


def test_missed_ranges_are_bounded_per_peer(monkeypatch):
    """Past MISSED_RANGES_MAX ranges the last one widens: memory stays bounded, nothing is left out."""
    import rcm.channels.peer

    monkeypatch.setattr(rcm.channels.peer, "MISSED_RANGES_MAX", 8)
    net = Net(["A", "B", "C"], settings=SMALL)
    disconnect_c(net)
    skipped = []
    for _ in range(50):
        net.send("A", b"b only", ["B"])
        skipped.append(net.send("A", b"everyone").seq)
    missed = net.stacks["A"].peers["C"].missed
    assert len(missed) == 8
    assert set(skipped) <= set(ranges.expand(missed))
    reconnect_c(net)
    assert set(skipped) <= set(told_missing(net, "C", "A"))


@pytest.mark.parametrize("body", [
    [5, 6, 7],                       # the old format: a list of seqs
    [[3, 2]],                        # first > last
    [[1, 4], [5, 9]],                # adjacent: not canonical
    [[5, 9], [1, 2]],                # out of order
    [[0, 3]],                        # seqs start at 1
    [[1, 2**63]],                    # past the key bound
    [[1, 2**53]],                    # at the bound: no site can have sent that many (it expanded to 2 GiB)
    [[1, 2**43 + 1]],                # past what any honest run can have sent by t = 1 (honest_ceiling)
    [],                              # nothing missed is not a MISSED frame
    [[1, 2, 3]],
])
def test_malformed_missed_ranges_close_the_link(body):
    s = SiteStack("A", ["A", "B"], RcmSettings(), 1, 0.0, mission="m")
    s.start(0.0)
    s.connection_made("b", 0.0, None)
    s.data_received("b", wire.encode_frame([wire.HELLO, wire.PROTOCOL_VERSION, "m", "B", 7, 0, 0, 1, 0,
                                            ["lamport", "robust", ["A", "B"], "relay", 3]]) +
                    wire.encode_frame([wire.SYNC, 1]), 0.0)
    acts = s.data_received("b", wire.encode_frame([wire.MISSED, 1, body]), 1.0)
    assert any(getattr(a, "reason", "").startswith("protocol error from B: malformed MISSED") for a in acts)
    assert not any(isinstance(a, actions.Missing) for a in acts)


def test_old_format_missed_log_records_still_restore():
    """A log written before ranges: M and O records with plain seq lists."""
    s = SiteStack("A", ["A", "B", "C"], SMALL, 1, 0.0, mission="m", durable=True)
    records = [
        ["S", 1, 1, b"one", {"B": 1}, ["C"]],
        ["S", 2, 2, b"two", {"B": 2}, ["C"]],
        ["M", "C", [3, 4, 5, 9]],
        ["O", "C", 1, wire.MISSED, [10, 11, 12]],
    ]
    s.restore([decode(r) for r in records], 0.0)
    assert s.peers["C"].missed == [[1, 5], [9, 9]]
    assert [f.payload for f in s.peers["C"].out.buffer] == [[[10, 12]]]
    snap = [r for r in s.snapshot_records() if isinstance(r, MissedSends)]
    assert [r.encode() for r in snap] == [["M", "C", [[1, 5], [9, 9]]]]
    again = SiteStack("A", ["A", "B", "C"], SMALL, 1, 0.0, mission="m", durable=True)
    again.restore(s.snapshot_records(), 0.0)
    assert again.peers["C"].missed == [[1, 5], [9, 9]]


def test_sent_missed_frames_are_not_reported_again_after_restore():
    s = SiteStack("A", ["A", "B", "C"], SMALL, 1, 0.0, mission="m", durable=True)
    records = [["S", i, i, b"m", {"B": i}, ["C"]] for i in range(1, 8)]
    records.append(["O", "C", 1, wire.MISSED, [[1, 3]]])
    s.restore([decode(r) for r in records], 0.0)
    assert s.peers["C"].missed == [[4, 7]]


def test_client_missing_event_carries_ranges():
    c = RcmClient()
    c._dispatch(clientwire.decode_event(["missing", "B", [[3, 5], [9, 9]]]))
    ev = c._events.get_nowait()
    assert ev == Missing("B", ((3, 5), (9, 9)))
    assert ev.count == 4
    assert Missing.from_seqs("B", [9, 4, 3, 5]) == ev


async def test_server_splits_missing_under_the_client_frame_cap(tmp_path, monkeypatch):
    from testkit import Kept

    from contracts.mission import load_mission
    from faultinject.missions import write_mission
    from rcm.server import RcmServer
    from rcm.server.localclients import ClientProtocol

    monkeypatch.setattr(clientwire, "CLIENT_MAX_FRAME", 1000)
    m = load_mission(write_mission(tmp_path / "m.toml", "missed", ["A", "B"]))
    server = RcmServer(m, "A")
    events: list = []
    try:
        c = ClientProtocol(server)
        c.connection_made(Kept(events=events))
        c.data_received(wire.encode_frame(["hello", "chat", None, None]))
        events.clear()
        notice = actions.Missing("B", tuple((i, i) for i in range(1, 400, 2)))
        server._apply([notice])
        data = b"".join(d for kind, d in events if kind == "write")
        frames = wire.FrameDecoder(1000, tag=str).feed(data)      # each under the (patched) cap
        assert len(frames) > 1 and all(f[0] == "missing" for f in frames)
        assert [tuple(r) for f in frames for r in f[2]] == list(notice.ranges)
    finally:
        server.wal.close()


@given(st.sets(st.integers(1, 200)), st.sets(st.integers(1, 200)))
def test_ranges_subtract_is_set_difference(a, b):
    assert ranges.expand(ranges.subtract(ranges.of_seqs(a), ranges.of_seqs(b))) == sorted(a - b)


@given(st.lists(st.integers(1, 5), max_size=60), st.integers(1, 6))
def test_ranges_add_covers_everything_within_the_cap(gaps, most):
    rs: list[list[int]] = []
    seq, seqs = 0, []
    for g in gaps:
        seq += g
        seqs.append(seq)
        ranges.add(rs, seq, most)
    assert len(rs) <= most
    assert set(seqs) <= set(ranges.expand(rs))
    assert rs == ranges.normalize(rs)
    assert ranges.cap(ranges.of_seqs(seqs), most) == rs
