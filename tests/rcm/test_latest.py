"""Latest wins (rcm.latest, rcm.wire.latest): the table alone, then the stack on a virtual clock."""
from __future__ import annotations

import pytest
from rcm_harness import Net

from rcm import wire
from rcm.channels import lanes
from rcm.latest.table import LatestTable
from rcm.wire.latest import MAX_TTL, Entry, LatestError, encode_frame, parse_frame

SITES = ["A", "B", "C", "D"]
INDEX = {s: i for i, s in enumerate(SITES)}


def site_at(i):
    if type(i) is not int or not 0 <= i < len(SITES):
        raise LatestError("not a site")
    return SITES[i]


def never_linked(a, b):
    return False


def drain(t: LatestTable, n: str, now: float) -> list[tuple[Entry, int]]:
    out = []
    while (got := t.take(n, now)) is not None:
        out.append(got)
    return out


# -- the table --------------------------------------------------------------------------------------
def test_a_newer_report_supersedes_the_one_waiting_and_only_the_newest_is_written():
    t = LatestTable("A", relaying=True, max_hops=3)
    for i in range(10):
        t.publish(b"u1", b"p%d" % i, 100.0, 10.0 + i * 1e-7, ["B"])
    (e, hops), = drain(t, "B", 11.0)
    assert e.payload == b"p9" and hops == 0
    assert e.version > 10_000_000           # versions grow past the clock's microseconds, never repeat
    assert t.publish(b"u1", b"x", 100.0, 0.0, []).version == e.version + 1     # a clock behind still grows


def test_received_entries_are_kept_only_when_newer_and_alive():
    t = LatestTable("B", relaying=True, max_hops=3)
    new = Entry("A", b"u", 200, 50.0, 0, b"new")
    assert t.received("A", new, 10.0, ["C"], never_linked) == new
    assert t.received("A", Entry("A", b"u", 100, 50.0, 0, b"old"), 10.0, ["C"], never_linked) is None
    assert t.received("A", new, 10.0, ["C"], never_linked) is None                # a duplicate
    assert t.received("A", Entry("A", b"v", 1, 9.0, 0, b"x"), 10.0, [], never_linked) is None   # expired
    assert t.received("A", Entry("A", b"w", int(1e18), 50.0, 0, b"x"), 10.0, [], never_linked) is None
    far = t.received("A", Entry("A", b"z", 5, 1e9, 0, b"x"), 10.0, [], never_linked)
    assert far is not None and far.expires_at == 10.0 + MAX_TTL                  # clamped, not refused
    assert t.received("C", Entry("B", b"mine", 5, 50.0, 0, b"x"), 10.0, [], never_linked) is None
    assert (t.counters["stale"], t.counters["expired"], t.counters["future"]) == (3, 1, 1)
    assert [e.payload for e in t.live(10.0)] == [b"new", b"x"]
    assert t.live(60.0) == [] or all(e.expires_at > 60.0 for e in t.live(60.0))


def test_expired_entries_are_never_written_nor_listed_and_are_swept():
    t = LatestTable("A", relaying=True, max_hops=3)
    t.publish(b"short", b"s", 12.0, 10.0, ["B"])
    t.publish(b"long", b"l", 100.0, 10.0, ["B"])
    assert t.publish(b"gone", b"g", 9.0, 10.0, ["B"]) is None           # expired already: dropped
    assert [e.key for e, _ in drain(t, "B", 13.0)] == [b"long"]
    assert [e.key for e in t.live(13.0)] == [b"long"]
    t.expire(13.0)
    assert list(t.entries) == [("A", b"long")]


def test_local_reports_out_of_bounds_are_refused_and_far_expiries_clamped():
    t = LatestTable("A", relaying=True, max_hops=3)
    for key, payload in ((b"", b"p"), (b"k" * 65, b"p"), (b"k", b"p" * 1025), ("k", b"p")):
        with pytest.raises(LatestError):
            t.publish(key, payload, 20.0, 10.0, [])
    assert t.publish(b"k" * 64, b"p" * 1024, 1e12, 10.0, []).expires_at == 10.0 + MAX_TTL
    assert len(t.entries) == 1


def test_the_table_is_bounded_per_origin_and_in_all_evicting_the_least_recently_updated():
    t = LatestTable("A", relaying=True, max_hops=3, per_origin=3, total=5)
    for i in range(4):
        t.received("B", Entry("B", b"k%d" % i, 10 + i, 50.0, 0, b""), 1.0, ["C"], never_linked)
    assert sorted(k for _, k in t.entries) == [b"k1", b"k2", b"k3"] and t.counters["evicted"] == 1
    for i in range(3):
        t.received("C", Entry("C", b"c%d" % i, 10 + i, 50.0, 0, b""), 1.0, ["B"], never_linked)
    assert len(t.entries) == 5 and ("B", b"k1") not in t.entries
    assert all(len(d) <= 5 for d in t.dirty.values())                  # dirty sets never outgrow it


def test_relaying_floods_to_other_neighbours_counting_hops_up_to_max_hops():
    t = LatestTable("B", relaying=True, max_hops=3)
    linked = {frozenset(("A", "D"))}
    t.received("A", Entry("A", b"u", 5, 50.0, 0, b"x"), 1.0, ["A", "C", "D"],
               lambda a, b: frozenset((a, b)) in linked)
    assert drain(t, "A", 1.0) == [] and drain(t, "D", 1.0) == []       # not back, not where A reaches
    (e, hops), = drain(t, "C", 1.0)
    assert hops == 1                                                    # one relay crossed on arrival
    t.received("C", Entry("D", b"v", 5, 50.0, 2, b"y"), 1.0, ["A", "C"], never_linked)
    assert drain(t, "A", 1.0) == []                                     # a third relay would pass max_hops
    assert [e.key for e in t.live(1.0)] == [b"u", b"v"]                 # but it is kept and delivered


def test_direct_routing_writes_only_own_entries():
    t = LatestTable("B", relaying=False, max_hops=1)
    t.received("A", Entry("A", b"u", 5, 50.0, 0, b"x"), 1.0, ["A", "C"], never_linked)
    t.publish(b"mine", b"m", 50.0, 1.0, ["A", "C"])
    assert [e.key for e, _ in drain(t, "C", 1.0)] == [b"mine"]
    t.session_opened("C", 1.0)
    assert [e.key for e, _ in drain(t, "C", 1.0)] == [b"mine"]


def test_a_new_session_marks_every_live_entry_it_should_have():
    t = LatestTable("B", relaying=True, max_hops=3)
    t.received("A", Entry("A", b"u", 5, 50.0, 0, b"x"), 1.0, [], never_linked)
    t.received("C", Entry("C", b"w", 5, 2.0, 0, b"x"), 1.0, [], never_linked)
    t.publish(b"mine", b"m", 50.0, 1.0, [])
    t.session_opened("C", 3.0)                      # C's own entry is not sent back, the expired one not at all
    assert [(e.origin, e.key) for e, _ in drain(t, "C", 3.0)] == [("A", b"u"), ("B", b"mine")]


def test_the_latest_frame_decodes_once_within_bounds():
    e = Entry("C", b"unit", 7, 12.5, 1, b"pos")
    f = wire.FrameDecoder().feed(wire.encode_frame(encode_frame(e, INDEX, 1)))[0]
    assert parse_frame(f, site_at, 3) == e
    good = encode_frame(e, INDEX, 1)
    for i, bad in ((1, 9), (2, 3), (2, -1), (3, b""), (3, b"k" * 65), (4, 0), (4, 2 ** 63), (5, 12),
                   (5, float("inf")), (6, b"p" * 1025), (6, "text")):
        f = list(good)
        f[i] = bad
        with pytest.raises(LatestError):
            parse_frame(f, site_at, 3)
    with pytest.raises(LatestError):
        parse_frame(good[:6], site_at, 3)


# -- the stack ----------------------------------------------------------------------------------------
RATE = 56_000


def test_on_a_paced_link_with_a_backlog_ten_publishes_of_one_key_write_one_frame():
    net = Net(["A", "B"], delay=0.05, rates={"A": {"B": RATE}})
    net.run(3.0)
    for _ in range(60):
        net.send("A", b"r" * 200)                  # about 2 s of the link
    net.run(3.2)
    a = net.stacks["A"]
    for i in range(10):
        net.publish("A", b"unit", b"pos%d" % i)
        net.run(net.now + 0.01)
    assert a.stats()["latest_written"] <= 1        # the link was busy all along: at most the first went
    net.run(10.0)
    got = [(x.payload, x.hops) for x in net.logs["B"].latest]
    assert got[-1] == (b"pos9", 0) and len(got) <= 2
    assert a.stats()["latest_written"] == len(got)
    assert len([d for d in net.logs["B"].delivered if d.origin == "A"]) == 60     # the chat went too


def test_reports_share_a_paced_link_with_a_chat_backlog_and_a_flash_passes_them():
    net = Net(["A", "B"], delay=0.05, rates={"A": {"B": RATE}})
    net.run(3.0)
    for _ in range(150):
        net.send("A", b"r" * 300)                  # about 7 s of the link
    t = 3.0
    while t < 5.0:
        for u in range(10):
            net.publish("A", b"unit%d" % u, b"x" * 80)
        t += 0.5
        net.run(t)
    units = {x.key for x in net.logs["B"].latest}
    assert len(units) == 10                        # every unit's report crossed while the chat backlog waited
    assert len([d for d in net.logs["B"].delivered if d.origin == "A"]) < 150
    net.send("A", b"FLASH", precedence="flash")
    for u in range(10):
        net.publish("A", b"unit%d" % u, b"y" * 80)
    net.run(t + 0.1 + lanes.BURST)                  # one LATEST frame and the burst at most before it
    assert b"FLASH" in [d.payload for d in net.logs["B"].delivered]


def test_a_relayed_path_delivers_an_entry_where_the_direct_link_is_down():
    net = Net(["A", "B", "C"])
    net.set_link("A", "C", "down")
    net.run(5.0)
    net.publish("A", b"unit", b"pos")
    net.run(6.0)
    assert [(x.origin, x.payload, x.hops) for x in net.logs["C"].latest] == [("A", b"pos", 1)]
    assert [(x.origin, x.hops) for x in net.logs["A"].latest] == [("A", 0)]      # own reports come back up
    assert net.stacks["C"].latest_entries(6.0)[0].payload == b"pos"


def test_a_reconnection_sends_the_live_entries_again_and_only_the_newest():
    net = Net(["A", "B"])
    net.run(3.0)
    net.publish("A", b"unit", b"first")
    net.run(4.0)
    net.set_link("A", "B", "down")
    net.run(5.0)
    net.publish("A", b"unit", b"second")
    net.publish("A", b"unit", b"third")
    net.publish("A", b"short", b"gone", ttl=1.0)
    net.run(8.0)
    assert [x.payload for x in net.logs["B"].latest] == [b"first"]
    net.set_link("A", "B", "up")
    net.run(20.0)
    assert net.status("B", "A") == "connected"
    assert [x.payload for x in net.logs["B"].latest] == [b"first", b"third"]


def test_a_malformed_latest_frame_closes_the_link_as_any_violation_and_traffic_goes_on():
    net = Net(["A", "B"])
    net.run(3.0)
    b = net.stacks["B"]
    conn = b.peers["A"].conn
    bad = wire.encode_frame([wire.LATEST, 0, 0, b"k" * 100, 1, 50.0, b"x"])
    net._run_actions("B", b.data_received(conn, bad, net.now))
    assert any("malformed LATEST frame" in line for line in net.logs["B"].logs)
    assert b.peers["A"].conn != conn
    net.send("A", b"after")
    net.publish("A", b"unit", b"pos")
    net.run(10.0)
    assert [d.payload for d in net.logs["B"].delivered] == [b"after"]
    assert [x.payload for x in net.logs["B"].latest] == [b"pos"]
