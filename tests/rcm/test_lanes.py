"""Paced links and precedence lanes (issue 19), on a virtual clock: ``rcm.channels.lanes`` and the stack around it."""
from __future__ import annotations

import pytest
from rcm_harness import Net

from contracts.mission import RcmSettings
from rcm.actions import Delivery
from rcm.channels import lanes

RATE = 56_000
PACED = {"A": {"B": RATE}, "B": {"A": RATE}}


def test_pacer_is_a_token_bucket_in_time():
    p = lanes.Pacer(RATE, burst=0.05)
    assert p.ready(0.0)
    p.charge(700)                       # 5600 bits: the link is busy for 0.1 s
    assert not p.ready(0.0)
    assert p.ready_at() == pytest.approx(0.05)
    assert p.ready(0.05) and not p.ready(0.049)
    p.charge(700)                       # written at 0.05: queued behind the first, busy until 0.2
    p.settle(0.05)
    assert p.free_at == pytest.approx(0.2)
    assert p.ready(10.0) and p.free_at == pytest.approx(0.2)   # idle time is not banked
    p.charge(7000)
    p.settle(10.0)
    assert p.free_at == pytest.approx(11.0)


def test_headers_carry_precedence_and_old_headers_read_as_routine():
    assert lanes.wrap(7, "routine") == 7
    assert lanes.unwrap(7) == (7, "routine")
    assert lanes.unwrap(lanes.wrap([3, "A", 4], "flash")) == ([3, "A", 4], "flash")
    assert lanes.unwrap(lanes.wrap(5, "priority")) == (5, "priority")
    for bad in ({"p": 9, "h": 1}, {"p": "flash", "h": 1}, {"h": 1}, {"p": 0, "h": 1, "y": 2},
                {"x": float("nan"), "h": 1}, {"x": 5.0, "e": 2, "h": 1}):
        with pytest.raises(ValueError):
            lanes.unwrap(bad)
    assert [lanes.lane(p) for p in ("flash", "immediate", "priority", "routine")] == [0, 1, 2, 2]
    assert lanes.lane("flash", lanes=False) == lanes.ORDERED_LANE


def _outage(net: Net, until: float, per_side: int = 2) -> float:
    """A and B post ROUTINE at 2 msg/s each while their link is down, then it comes back."""
    net.run(5.0)
    net.set_link("A", "B", "down")
    t = 5.0
    while t < until:
        for _ in range(per_side // 2 or 1):
            net.send("A", b"r" * 150)
            net.send("B", b"s" * 150)
        t += 0.5
        net.run(t)
    net.set_link("A", "B", "up")
    while net.status("A", "B") != "connected" or net.status("B", "A") != "connected":
        t += 0.01
        net.run(t)
    return t


def _from(net: Net, site: str, origin: str) -> list[Delivery]:
    return [d for d in net.logs[site].delivered if d.origin == origin]


@pytest.mark.parametrize("ordering", ["lamport", "sequencer", "hybrid"])
def test_a_flash_jumps_the_backlog_of_a_paced_link(ordering):
    net = Net(["A", "B"], delay=0.05, ordering=ordering, rates=PACED)
    t = _outage(net, 30.0)
    flash = net.send("A", b"FLASH", precedence="flash")
    net.run(t + 0.3)                    # far less than the backlog's 1.2 s at 56 kbit/s
    got = _from(net, "B", "A")
    assert b"FLASH" in [d.payload for d in got]
    f = next(d for d in got if d.payload == b"FLASH")
    assert got.index(f) < 10                        # behind at most the frames already on their way
    assert f.precedence == "flash"
    if ordering != "sequencer":
        # Early, not late: it overtook its place, which had not passed at B. (A sequencer's urgent key is
        # just after what its sender had delivered, which B may have delivered past with its own lines.)
        assert not f.late
    if flash.order is not None:
        assert list(f.key) == flash.order           # the key its sender gave it
    net.run(t + 30.0)
    got = _from(net, "B", "A")
    assert sorted(d.seq for d in got) == list(range(1, flash.seq + 1))      # exactly once
    routine = [d for d in got if d.precedence == "routine"]
    assert [d.seq for d in routine] == sorted(d.seq for d in routine)      # FIFO within the lane
    in_order = [tuple(d.key) for d in net.logs["B"].delivered if not d.late and d.precedence == "routine"]
    assert in_order == sorted(in_order)


def test_with_lanes_off_the_flash_waits_behind_the_backlog():
    net = Net(["A", "B"], RcmSettings(lanes=False), delay=0.05, rates=PACED)
    t = _outage(net, 30.0)
    net.send("A", b"FLASH", precedence="flash")
    net.run(t + 0.5)
    assert b"FLASH" not in [d.payload for d in _from(net, "B", "A")]
    net.run(t + 30.0)
    assert _from(net, "B", "A")[-1].payload == b"FLASH"


def test_writes_keep_to_the_rate_and_heartbeats_are_not_starved():
    net = Net(["A", "B"], delay=0.05, rates={"A": {"B": RATE}})
    t = _outage(net, 40.0, per_side=8)        # 8 msg/s from A: about 12 s of backlog at 56 kbit/s
    before = net.stacks["A"].peers["B"].bytes_out
    net.run(t + 6.0)
    sent = net.stacks["A"].peers["B"].bytes_out - before
    assert sent <= RATE / 8 * (6.0 + lanes.BURST) + 400       # one frame beyond the burst at most
    assert sent >= RATE / 8 * 6.0 * 0.9                       # and it keeps the link busy
    assert net.stacks["A"].peers["B"].out.queued > 0          # still draining
    # Acks and heartbeats went both ways throughout: nobody was suspected while it drained.
    assert [s for s in net.logs["B"].status if s[0] > t] == []
    assert [s for s in net.logs["A"].status if s[0] > t] == []
    net.run(t + 30.0)
    assert net.stacks["A"].peers["B"].out.queued == 0 and len(net.stacks["A"].peers["B"].out) == 0


def test_what_waits_in_lanes_survives_a_restart_from_the_log():
    net = Net(["A", "B"], delay=0.05, durable=True, rates=PACED)
    net.run(5.0)
    net.set_link("A", "B", "down")
    for i in range(20):
        net.send("A", b"r%d" % i)
    net.send("A", b"FLASH", precedence="flash")
    net.send("A", b"P", precedence="priority")
    net.run(8.0)
    records = [p.record for p in net.persisted["A"]]
    net.crash("A")
    net.run(9.0)
    net.restart("A", records=records)
    net.set_link("A", "B", "up")
    net.run(40.0)
    got = _from(net, "B", "A")
    assert sorted(d.seq for d in got) == list(range(1, 23))
    assert got[0].payload == b"FLASH" and got[0].precedence == "flash"
    assert {d.payload: d.precedence for d in got}[b"P"] == "priority"
    # The restarted sender's own replay of its undelivered messages keeps precedence too.
    mine = {d.payload: d.precedence for d in net.logs["A"].delivered}
    assert mine[b"FLASH"] == "flash" and mine[b"P"] == "priority"


def test_a_flash_overtakes_on_a_paced_relay_path():
    sites = ["A", "B", "C"]
    net = Net(sites, delay=0.05, rates={"A": {"B": RATE}})
    net.set_link("A", "C", "down")
    net.run(10.0)
    assert net.stacks["A"].vias()["C"] == "B"
    for _ in range(150):
        net.send("A", b"x" * 150, dests=["C"], within=False)
    flash = net.send("A", b"FLASH", dests=["C"], within=False, precedence="flash")
    net.run(10.5)
    got = _from(net, "C", "A")
    assert b"FLASH" in [d.payload for d in got] and len(got) < 30      # 150 need 3.5 s at 56 kbit/s
    net.run(60.0)
    got = _from(net, "C", "A")
    assert sorted(d.seq for d in got) == list(range(1, flash.seq + 1))


def _mission(rate: object, p2p: str = "robust") -> dict:
    return {"mission": {"name": "m"}, "rcm": {"p2p": p2p, "routing": "direct"},
            "sites": {"A": {"rcm": "127.0.0.1:7101", "chat": "127.0.0.1:8101", "rate": rate},
                      "B": {"rcm": "127.0.0.1:7102", "chat": "127.0.0.1:8102"}}}


def test_rate_tables_are_parsed_and_bad_ones_name_the_key(tmp_path):
    from contracts.mission import MissionError, parse_mission

    m = parse_mission(_mission({"B": 56000}), tmp_path)
    assert m.sites["A"].rate == {"B": 56000} and m.sites["B"].rate == {}
    assert m.rcm.lanes is True
    bad = [({"B": 0}, "sites.A.rate.B = 0"), ({"B": 56.5}, "sites.A.rate.B = 56.5"), ({"B": True}, "sites.A.rate.B"),
           ({"B": "56k"}, "sites.A.rate.B = '56k'"), ({"Z": 56000}, "sites.A.rate.Z: no site named 'Z'"),
           ({"A": 56000}, "sites.A.rate.A: a site does not send to itself"), (56000, "[sites.A.rate] must be a table")]
    for rate, words in bad:
        with pytest.raises(MissionError) as e:
            parse_mission(_mission(rate), tmp_path)
        assert words in str(e.value)
    with pytest.raises(MissionError, match=r"\[sites.A.rate\] paces robust channels only"):
        parse_mission(_mission({"B": 56000}, p2p="tcp"), tmp_path)
    with pytest.raises(MissionError, match=r"\[rcm\] lanes = 1 must be true or false"):
        parse_mission({**_mission({}), "rcm": {"lanes": 1}}, tmp_path)


def test_a_bad_precedence_is_refused_at_send():
    from rcm.actions import SendRefused

    net = Net(["A", "B"], rates=PACED)
    with pytest.raises(SendRefused, match="precedence must be one of"):
        net.send("A", b"x", precedence="urgent")


def test_a_paced_site_holds_its_writes_while_the_link_is_silent():
    """A fade (nothing flows, no reset): once the peer is silent, what A sends waits in its lanes, not in
    the network, so the FLASH sent when the link comes back is not stuck behind it."""
    net = Net(["A", "B"], delay=0.05, rates=PACED)
    net.run(5.0)
    net.set_link("A", "B", "blackhole")
    t = 5.0
    while t < 14.0:                     # silent after liveness (5 s), closed after silence (10 s) more
        net.send("A", b"r" * 150)
        t += 0.5
        net.run(t)
        if net.stacks["A"].peers["B"].cm.tcp.value == "TCP_Silent":
            break
    assert net.stacks["A"].peers["B"].cm.tcp.value == "TCP_Silent"
    for _ in range(6):
        net.send("A", b"r" * 150)
        t += 0.5
        net.run(t)
    assert net.stacks["A"].peers["B"].out.queued >= 6       # held, not written into the dead link
    net.set_link("A", "B", "up")
    net.send("A", b"FLASH", precedence="flash")
    net.run(t + 1.0)
    held_back = [d.payload for d in _from(net, "B", "A")]
    assert b"FLASH" in held_back and held_back.index(b"FLASH") < len(held_back) - 5


def test_a_flash_is_not_refused_by_the_held_back_bound():
    """Lamport holds routine messages back while a connected site never announces its clock, and refuses
    sends past max_buffered_messages (issue 23); a FLASH is never held back, so it still goes."""
    from rcm.actions import Backpressure

    net = Net(["A", "B"], RcmSettings(max_buffered_messages=20), delay=0.01)
    net.run(3.0)
    net.stacks["B"].ordering.flush = lambda now: []           # B never announces its clock
    net.stacks["B"].ordering.resync = lambda peer, now: []
    with pytest.raises(Backpressure, match="held back"):
        for i in range(40):
            net.send("A", b"m%d" % i)
            net.run(net.now + 0.05)
    flash = net.send("A", b"FLASH", precedence="flash")
    net.run(net.now + 0.5)
    assert [d.payload for d in net.logs["B"].delivered if d.seq == flash.seq] == [b"FLASH"]


def test_a_laned_channel_numbers_frames_as_it_writes_them_highest_lane_first():
    from rcm import wire
    from rcm.channels.p2p import ANNOUNCE_IN_LANE, OutboundChannel

    ch = OutboundChannel("robust", 100, lanes.LANES)
    assert not ch.queue_announcement(1)                   # nothing waits: an announcement goes at once
    for i in (1, 2):
        ch.offer(wire.DATA, i, "h", b"r", lanes.ORDERED_LANE)
    assert ch.queue_announcement(2)                       # behind the data it follows
    ch.offer(wire.DATA, 3, "h", b"i", lanes.lane("immediate"))
    ch.offer(wire.DATA, 4, "h", b"f", lanes.lane("flash"))
    ch.offer(wire.MISSED, 0, None, [[7, 7]])              # no lane: numbered at once, written first
    assert len(ch) == 5 and ch.queued == 4
    order = []
    while (t := ch.take()) is not None:
        f, _ = t
        order.append((f.kind, f.msg_seq, f.link_seq))
    assert order == [(wire.MISSED, 0, 1), (wire.DATA, 4, 2), (wire.DATA, 3, 3), (wire.DATA, 1, 4),
                     (wire.DATA, 2, 5), (ANNOUNCE_IN_LANE, 0, 0)]
    ch.offer(wire.DATA, 5, "h", b"r", lanes.ORDERED_LANE)
    assert ch.queue_announcement(3)
    ch.take()
    assert ch.queue_announcement(4)                       # an older one still waits: keep them in order
    assert ch.resume(2) == 3 and ch.next_lane() == -1     # a reconnection resends what was written first
    assert [ch.take()[0].link_seq for _ in range(4)] == [3, 4, 5, 6]
    assert ch.take()[0].kind == ANNOUNCE_IN_LANE and ch.take()[0].kind == ANNOUNCE_IN_LANE
    assert ch.take() is None and ch.stats.resent == 4
    # A newer announcement supersedes one that waits last (nothing queued after it), never one data follows.
    ch.offer(wire.DATA, 6, "h", b"f", lanes.lane("flash"))
    assert not ch.supersede_announcement() and ch.queue_announcement(5)
    assert ch.supersede_announcement() and not ch.supersede_announcement()
    assert ch.queue_announcement(6)
    ch.offer(wire.DATA, 7, "h", b"r", lanes.ORDERED_LANE)
    assert not ch.supersede_announcement()
    assert [(f.kind, f.payload) for f, _ in iter(ch.take, None)][1:] == [(ANNOUNCE_IN_LANE, 6), (wire.DATA, b"r")]


def test_the_replay_log_keeps_precedence_across_a_restart():
    from rcm.actions import Delivery as Del
    from rcm.durability import records
    from rcm.durability.replay import DeliveryLog

    log = DeliveryLog(1 << 20)
    frame, rec = log.add(Del("A", 1, (1, "A"), True, b"x", "flash"))
    assert frame[7] == {"precedence": "flash"}
    _, plain = log.add(Del("A", 2, (2, "A"), False, b"y"))
    assert plain.encode() == ["D", 2, "A", 2, [2, "A"], False, b"y"]        # routine: written as before
    back = [records.decode(r.encode()) for r in (rec, plain)]
    assert [r.precedence for r in back] == ["flash", "routine"]
    again = DeliveryLog(1 << 20)
    again.recover(back)
    assert [f[7] if len(f) > 7 else None for f in again.window(1)] == [{"precedence": "flash"}, None]
    assert [r.precedence for r in again.snapshot_records() if isinstance(r, records.Delivered)] == ["flash", "routine"]


def test_a_relay_paces_what_it_forwards_and_its_own_flash_goes_first():
    """B relays the backlogs of A and D to C over its paced link: each origin keeps at most a
    window of its stream in flight, but together they fill B's forward queue, and the relayed
    frames wait behind B's pacer (not in the network, where nothing could pass them): B's own
    FLASH is written first."""
    net = Net(["A", "B", "C", "D"], delay=0.05, rates={"B": {"C": RATE}})
    net.set_link("A", "C", "down")
    net.set_link("D", "C", "down")
    net.run(10.0)
    assert net.stacks["A"].vias()["C"] == "B" and net.stacks["D"].vias()["C"] == "B"
    before = net.stacks["B"].peers["C"].bytes_out
    for _ in range(150):
        net.send("A", b"x" * 150, dests=["C"], within=False)      # together about 7 s of B's 56 kbit/s link to C
        net.send("D", b"y" * 150, dests=["C"], within=False)
    net.run(10.5)
    assert net.stacks["B"].stats()["peers"]["C"]["forward_queued"] > 20
    net.send("B", b"FLASH", dests=["C"], precedence="flash")
    net.run(10.8)
    assert b"FLASH" in [d.payload for d in _from(net, "C", "B")]
    assert len(_from(net, "C", "A")) + len(_from(net, "C", "D")) < 80    # most of the backlogs still wait
    sent = net.stacks["B"].peers["C"].bytes_out - before
    assert sent <= RATE / 8 * (0.8 + lanes.BURST) + 600     # B kept to the rate while relaying
    net.run(60.0)
    for origin in ("A", "D"):
        assert [d.seq for d in _from(net, "C", origin)] == list(range(1, 151))   # all, once, in FIFO
    assert net.stacks["B"].stats()["peers"]["C"]["forward_queued"] == 0


def test_the_forward_queue_is_fifo_per_origin_lowest_lane_first_and_bounded():
    q = lanes.ForwardQueue(max_bytes=100)
    assert q.head() is None
    assert q.push("A", lanes.ORDERED_LANE, b"a1" * 10, entries=2)
    assert q.push("A", 0, b"a2")                    # A's FLASH stays behind A's earlier frame
    assert q.push("D", 0, b"d1")                    # D's FLASH is a stream head: it goes first
    assert not q.push("D", 0, b"x" * 100) and q.dropped == 1
    assert q.pop() == (b"d1", 1)
    assert q.pop() == (b"a1" * 10, 2) and q.pop() == (b"a2", 1)
    assert q.head() is None and q.bytes == 0
    q.push("A", 1, b"y", entries=3)
    q.push("D", 2, b"z", entries=2)
    assert len(q) == 2 and q.clear() == 5 and len(q) == 0 and q.bytes == 0


def test_an_origins_flash_passes_its_own_backlog_when_the_slow_link_is_beyond_the_relay():
    """A reaches C only through B, over A's unpaced link to B and B's paced one to C. A paces its
    channel to C to the route's slowest link and keeps at most a window of it unacknowledged, so
    its backlog waits in A's lanes (not in B's forward queue, FIFO per origin): A's FLASH
    overtakes A's own routine lines, and the backlog still crosses once, in FIFO."""
    net = Net(["A", "B", "C"], delay=0.05, rates={"B": {"C": RATE}})
    net.set_link("A", "C", "down")
    net.run(10.0)
    assert net.stacks["A"].vias()["C"] == "B"
    for _ in range(150):
        net.send("A", b"x" * 150, dests=["C"], within=False)      # about 3.5 s of B's 56 kbit/s link to C
    net.run(10.5)
    assert net.stacks["B"].stats()["peers"]["C"]["forward_queued"] < 20
    net.send("A", b"FLASH", dests=["C"], within=False, precedence="flash")
    net.run(11.0)
    got = [d.payload for d in _from(net, "C", "A")]
    assert b"FLASH" in got and len(got) < 75              # at C within half a second, past 75+ lines
    net.run(60.0)
    got = [d.seq for d in _from(net, "C", "A") if d.payload != b"FLASH"]
    assert got == list(range(1, 151))                       # all of it, once, in FIFO
    assert net.stacks["A"].stats()["peers"]["C"]["relayed_out"] < 170    # no resends from a full queue


def test_the_urgent_lanes_take_at_most_their_share_while_the_ordered_lane_waits():
    share = lanes.LaneShare()
    assert share.urgent_next(True, True)                # nothing owed: a FLASH goes first
    written = {True: 0, False: 0}
    for _ in range(200):                                # both always waiting: 2 KB FLASH, 150-byte lines
        urgent = share.urgent_next(True, True)
        n = 2048 if urgent else 150
        share.wrote(urgent, n, contended=True)
        written[urgent] += n
    assert written[True] / (written[True] + written[False]) == pytest.approx(lanes.URGENT_SHARE, abs=0.01)
    assert share.urgent_next(True, False)               # the ordered lane empty: urgent goes
    share.wrote(True, 2048, contended=False)
    assert share.balance == 0.0 and share.urgent_next(True, True)     # an idle ordered lane banks nothing
    assert not share.urgent_next(False, True)
    share.wrote(False, 10_000, contended=False)         # the urgent lanes empty: they claim nothing back
    assert share.balance == 0.0
    with pytest.raises(ValueError):
        lanes.LaneShare(0.0)


SLOW = 32_000
FLASH_2K = b"F" * 2048


def test_relayed_urgent_frames_take_part_in_the_share():
    """B's forward queue to its paced neighbour C holds a relayed FLASH backlog (stand-in frames: the link
    is blackholed, nothing B writes now is read) while B posts ROUTINE to C: B's own lines go within the
    ordered lane's share, long before the relayed backlog is gone, and the backlog goes on meanwhile."""
    net = Net(["B", "C"], delay=0.05, rates={"B": {"C": SLOW}})
    net.run(3.0)
    net.set_link("B", "C", "blackhole")         # C stays connected for B until liveness_timeout (5 s)
    hop = net.stacks["B"].peers["C"]
    pacing = net.stacks["B"].pacing
    assert pacing.paced("C")
    for _ in range(20):                          # 10 s of the link
        assert pacing.push_forward("C", "A", lanes.lane("flash"), b"x" * 2000, 1)
    before = hop.out.stats.transmitted
    for i in range(4):
        net.send("B", b"routine %d" % i, dests=["C"])
    net.run(4.5)
    assert hop.cm.tcp.value == "TCP_Connected"
    assert hop.out.stats.transmitted - before == 4 and hop.out.queued == 0
    assert 14 <= pacing.peer_stats("C")["forward_queued"] < 20


def _flood(net: Net, flooders: list[str], to: list[str], posters: dict[str, list[str]], until: float
           ) -> tuple[dict[tuple[str, int], float], dict[tuple[str, str, int], float]]:
    """Each flooder sends a 2 KB FLASH to ``to`` every 50 ms (20/s: ten times a 32 kbit/s link) while each
    poster posts a ROUTINE line twice a second to its sites. When each line was posted, and when each
    delivery (site, origin, seq) happened (to the 50 ms step)."""
    posted: dict[tuple[str, int], float] = {}
    seen: dict[tuple[str, str, int], float] = {}
    t, k = net.now, 0
    while t < until:
        for flooder in flooders:
            net.send(flooder, FLASH_2K, dests=to, precedence="flash")
        if k % 10 == 0:
            for site, dests in posters.items():
                posted[(site, net.send(site, b"routine %d" % k, dests=dests).seq)] = t
        k += 1
        t += 0.05
        net.run(t)
        for site, log in net.logs.items():
            for d in log.delivered:
                seen.setdefault((site, d.origin, d.seq), t)
    return posted, seen


def _worst(posted: dict[tuple[str, int], float], seen: dict[tuple[str, str, int], float], sites: list[str],
           before: float) -> float:
    """The longest a ROUTINE line posted before ``before`` took to be delivered at ``sites`` (inf: never)."""
    return max(seen.get((s, origin, seq), float("inf")) - at
               for (origin, seq), at in posted.items() if at < before for s in sites)


@pytest.mark.parametrize("ordering", ["lamport", "sequencer", "hybrid"])
def test_a_flash_flood_leaves_routine_and_control_traffic_their_share(ordering):
    """A floods FLASH at ten times its 32 kbit/s link to B while A and B post ROUTINE: A's lines, and the
    clock announcements and sequencer assignments the global order waits for (in the ordered lane, behind
    the FLASH), still cross within about a FLASH frame's time, and the FLASH keeps its share of the link.
    Before, nothing ROUTINE from A crossed while the flood lasted (a whole FLASH lane of it)."""
    net = Net(["A", "B"], delay=0.05, ordering=ordering, rates={"A": {"B": SLOW}, "B": {"A": SLOW}})
    net.run(3.0)
    posted, seen = _flood(net, ["A"], ["B"], {"A": ["B"], "B": ["A"]}, 23.0)
    assert _worst(posted, seen, ["A", "B"], before=21.5) < 1.5
    flashes = [d for d in net.logs["B"].delivered if d.precedence == "flash"]
    assert len(flashes) * len(FLASH_2K) >= lanes.URGENT_SHARE * SLOW / 8 * 20.0 * 0.9
    assert [d.seq for d in flashes] == sorted(d.seq for d in flashes)       # FIFO within the lane
    if ordering == "sequencer":             # ordered by the leader A's assignments, none by the fallback hint
        assert {len(d.key) for d in net.logs["B"].delivered if d.precedence == "routine"} == {3}
    for site in ("A", "B"):                 # and in one global order (announcements coalesced, rcm.channels.lanes)
        in_order = [tuple(d.key) for d in net.logs[site].delivered if not d.late and d.precedence != "flash"]
        assert in_order == sorted(in_order)


def test_a_relayed_flash_flood_leaves_routine_traffic_its_share():
    """A and D reach C only through B, whose link to C is paced, and both flood FLASH to C. Each keeps the
    urgent share within its own stream (paced to its route), and B's forward queue takes part in B's
    share of the link: A's ROUTINE lines and B's own still reach C, within a few seconds (each waits at
    B behind its origin's window of FLASH, FIFO per origin, and C waits for D's clock through B too)."""
    net = Net(["A", "B", "C", "D"], delay=0.05, rates={"B": {"C": SLOW}, "C": {"B": SLOW}})
    net.set_link("A", "C", "down")
    net.set_link("D", "C", "down")
    net.run(10.0)
    assert net.stacks["A"].vias()["C"] == "B" and net.stacks["D"].vias()["C"] == "B"
    posted, seen = _flood(net, ["A", "D"], ["B", "C"], {"A": ["B", "C"], "B": ["C"]}, 30.0)
    assert _worst(posted, seen, ["C"], before=25.0) < 5.0
    for origin in ("A", "D"):
        flashes = [d.seq for d in net.logs["C"].delivered if d.origin == origin and d.precedence == "flash"]
        assert len(flashes) >= 10 and flashes == sorted(flashes)
    assert net.stacks["B"].stats()["peers"]["C"]["forward_dropped"] == 0
