"""SiteStack on a virtual-time network: reliability, FIFO, IGO, statuses."""
from __future__ import annotations

import pytest
from rcm_harness import Net

from contracts.mission import RcmSettings
from rcm.actions import Backpressure, SendRefused
from rcm.connman import SLOW_REDIAL_PERIOD
from rcm.stack import SiteStack

SITES = ["A", "B", "C"]
# The paper's semantics: one link down means that peer is suspected. (With the default routing =
# "relay" a third site carries the traffic instead: tests/rcm/test_relay.py.)
DIRECT = RcmSettings(routing="direct")


def order_at(net: Net, site: str) -> list[tuple[str, int]]:
    return [(d.origin, d.seq) for d in net.logs[site].delivered]


@pytest.mark.parametrize("routing", ["relay", "direct"])
def test_sites_connect_and_deliver_in_one_global_order(routing):
    net = Net(SITES, settings=RcmSettings(routing=routing))
    net.run(until=5)
    assert all(net.status(s, p) == "connected" for s in SITES for p in SITES if p != s)
    for i in range(5):
        for s in SITES:
            net.send(s, f"{s}{i}".encode())
        net.run(until=net.now + 0.003)
    net.run(until=net.now + 2)
    orders = [order_at(net, s) for s in SITES]
    assert len(orders[0]) == 15
    assert orders[0] == orders[1] == orders[2]
    keys = [d.key for d in net.logs["A"].delivered]
    assert keys == sorted(keys)
    assert not any(d.late for s in SITES for d in net.logs[s].delivered)


@pytest.mark.parametrize("routing", ["relay", "direct"])
def test_delivery_latency_is_two_one_way_delays_not_sending_period(routing):
    net = Net(SITES, delay=0.05, settings=RcmSettings(routing=routing))
    net.run(until=5)
    t0 = net.now
    # C sorts last, so every other site might still send something ordered
    # before (1, "C"): delivery needs their clock announcements.
    net.send("C", b"hello")
    net.run(until=t0 + 0.099)
    assert not any(net.logs[s].delivered for s in SITES)
    net.run(until=t0 + 0.1001)
    assert all(len(net.logs[s].delivered) == 1 for s in SITES)


def test_reliable_fifo_through_a_short_outage():
    net = Net(SITES, settings=DIRECT)
    net.run(until=5)
    net.set_link("A", "B", "down")
    for i in range(20):
        net.send("A", f"m{i}".encode())
        net.run(until=net.now + 0.5)
    assert net.status("A", "B") == "suspected"
    net.set_link("A", "B", "up")
    net.run(until=net.now + 10)
    assert net.status("A", "B") == "connected"
    got = [d.payload for d in net.logs["B"].delivered if d.origin == "A"]
    assert got == [f"m{i}".encode() for i in range(20)]
    # Only what was really lost was resent: nothing B already had came twice.
    assert net.stacks["B"].stats()["peers"]["A"]["duplicates"] == 0


def test_suspected_site_is_not_waited_for_and_its_messages_come_late():
    net = Net(SITES, settings=DIRECT)
    net.run(until=5)
    net.set_link("A", "C", "blackhole")
    net.set_link("B", "C", "blackhole")
    c = net.send("C", b"from-c")          # (1, C): vanishes into the blackhole for now
    net.run(until=net.now + 0.1)
    net.send("A", b"a1")                  # (1, A): nothing C sends can precede it
    a2 = net.send("A", b"a2")             # (2, A): C might still send (1, C) first
    assert tuple(c.order) < tuple(a2.order)
    net.run(until=net.now + 1)
    assert [d.payload for d in net.logs["B"].delivered] == [b"a1"]   # a2 held: C still connected
    net.run(until=net.now + 6)
    assert net.status("B", "C") == "suspected"
    assert [d.payload for d in net.logs["B"].delivered] == [b"a1", b"a2"]
    net.set_link("A", "C", "up")
    net.set_link("B", "C", "up")
    net.run(until=net.now + 30)
    for site in ("A", "B"):
        late = [d for d in net.logs[site].delivered if d.payload == b"from-c"]
        assert len(late) == 1 and late[0].late, site
        assert late[0].key == tuple(c.order)
    # C, alone in its component, delivered its own (1, C) first: A's (1, A)
    # reached it after that place had passed.
    at_c = {d.payload: d.late for d in net.logs["C"].delivered}
    assert at_c == {b"from-c": False, b"a1": True, b"a2": False}


def test_disconnected_destination_is_skipped_and_told_missing():
    s = RcmSettings(suspect_timeout=10.0, routing="direct")
    net = Net(SITES, settings=s)
    net.run(until=5)
    net.set_link("A", "C", "down")
    net.run(until=net.now + 12)
    assert net.status("A", "C") == "disconnected"
    r = net.send("A", b"while-apart")
    assert r.skipped == ("C",)
    net.set_link("A", "C", "up")
    net.run(until=net.now + 10)
    assert net.status("A", "C") == "connected"
    assert [(m.origin, m.ranges) for m in net.logs["C"].missing] == [("A", ((r.seq, r.seq),))]


def test_backpressure_when_buffer_full():
    net = Net(SITES, settings=RcmSettings(max_buffered_messages=3))
    net.run(until=5)
    net.set_link("A", "B", "blackhole")
    for _ in range(3):
        net.send("A", b"x")
    with pytest.raises(Backpressure):
        net.send("A", b"x")


def test_refuses_oversized_payload_and_unknown_destination():
    net = Net(SITES, settings=RcmSettings(max_payload_bytes=2000, max_frame_bytes=4096))
    with pytest.raises(SendRefused, match="max_payload_bytes"):
        net.send("A", b"x" * 2001)
    with pytest.raises(SendRefused, match="unknown destination"):
        net.send("A", b"x", ["Z"])


def test_restarted_site_is_recognised_and_resynchronised():
    net = Net(SITES)
    net.run(until=5)
    net.crash("C")
    net.run(until=net.now + 2)
    net.restart("C")
    net.run(until=net.now + 5)
    assert net.status("A", "C") == "connected"
    net.send("C", b"after-restart")
    net.run(until=net.now + 1)
    for s in SITES:
        d = [x for x in net.logs[s].delivered if x.payload == b"after-restart"]
        assert len(d) == 1 and not d[0].late, s


def test_bytes_lost_inside_a_connection_are_detected_and_resent():
    net = Net(SITES, settings=DIRECT)
    net.run(until=5)
    net.set_link("A", "B", "lossy")
    net.send("A", b"lost-in-connection")
    net.run(until=net.now + 0.2)
    net.set_link("A", "B", "up")
    net.run(until=net.now + 5)     # next heartbeat exposes the gap; redial after reconnect_period
    got = [d.payload for d in net.logs["B"].delivered]
    assert got == [b"lost-in-connection"]
    assert any("frames were lost inside the connection" in m for m in net.logs["B"].logs)


def test_two_dials_by_one_site_both_ends_keep_the_later_one():
    """Handshakes completing in opposite orders at the two ends still agree."""
    from rcm.actions import Close, StatusChange, Transmit

    s = RcmSettings()
    a = SiteStack("A", ["A", "B"], s, 1, 0.0, mission="m")
    b = SiteStack("B", ["A", "B"], s, 1, 0.0, mission="m")
    a.start(0.0)
    b.start(0.0)
    out_a = a.connection_made("a1", 0.0, "B") + a.connection_made("a2", 0.0, "B")
    b.connection_made("b1", 0.0, None)
    b.connection_made("b2", 0.0, None)
    hello = {t.conn: t.data for t in out_a if isinstance(t, Transmit)}
    # B hears the second dial first, then the first.
    back = b.data_received("b2", hello["a2"], 0.1) + b.data_received("b1", hello["a1"], 0.1)
    closed_at_b = {x.conn for x in back if isinstance(x, Close)}
    assert closed_at_b == {"b1"}
    replies = {}
    for x in back:
        if isinstance(x, Transmit):
            replies[x.conn] = replies.get(x.conn, b"") + x.data
    # A hears the answers the other way round: the first dial's answer first.
    acts = a.data_received("a1", replies["b1"], 0.2) + a.data_received("a2", replies["b2"], 0.2)
    assert a.peers["B"].conn == "a2" and b.peers["A"].conn == "b2"
    assert not any(isinstance(x, StatusChange) and x.status != "connected" for x in acts + back)
    assert a.status("B") == "connected" and b.status("A") == "connected"


@pytest.mark.parametrize("p2p", ["tcp", "tcp-suspect"])
def test_a_baseline_reconnects_after_a_sync_skipped_what_it_dropped(p2p):
    """The paper's TCP baselines drop what they cannot send; the next connection's SYNC starts
    after it, so the peer's frontier passes the last frame ever written. A later HELLO carrying
    that frontier was refused as impossible ("HELLO frontier 161 is past the last frame A ever
    sent to C (119)") at every redial, for good: a CI run of paper-fig7 caught it after a
    double dial replaced the first connection back."""
    net = Net(["A", "C"], RcmSettings(p2p=p2p, routing="direct", suspect_timeout=30.0), delay=0.02)
    net.run(3.0)
    net.send("A", b"before")
    net.run(4.0)
    net.set_link("A", "C", "down")
    net.run(6.0)
    for i in range(5):
        net.send("A", b"dropped %d" % i)          # no connection: the baseline drops them
    net.set_link("A", "C", "up")
    net.run(10.0)
    assert net.status("A", "C") == "connected" and net.status("C", "A") == "connected"
    net.set_link("A", "C", "down")                  # a new connection, nothing written since the SYNC
    net.run(12.0)
    net.set_link("A", "C", "up")
    net.run(16.0)
    assert net.status("A", "C") == "connected" and net.status("C", "A") == "connected"
    assert not [m for m in net.logs["A"].logs if "past the last frame" in m]
    net.send("A", b"after")
    net.run(17.0)
    assert [d.payload for d in net.logs["C"].delivered if d.origin == "A"][-1] == b"after"


def test_the_later_site_of_a_slow_link_holds_its_dial_while_it_has_an_accepted_connection_in_handshake():
    """The stack counts accepted connections waiting for their HELLO, the edge those still in TLS; either
    holds the fallback dial of the site that dials second on a slow link, and only that one."""
    net = Net(["A", "B", "C"], RcmSettings(reconnect_period=3.0), rates={"A": {"B": 2_400}, "B": {"A": 2_400}})
    b = net.stacks["B"]
    assert not b.holds_dial("A", 0)
    assert b.holds_dial("A", 1)                                  # one in TLS at the edge
    assert not b.holds_dial("C", 1)                              # B-C is not paced
    assert not net.stacks["A"].holds_dial("B", 1)                # A dials first: it never holds
    b.connection_made("in-1", 0.0)                               # accepted, waiting for its HELLO
    assert b.handshaking() == 1 and b.holds_dial("A", 0)


def test_the_edge_waits_for_a_connect_as_long_as_a_radio_handshake_needs_even_where_it_redials_sooner():
    """The site that dials first on a slow paced link redials a second after a failed dial, but the edge gives
    a connect ``reconnect_period`` (``SiteStack.dial_timeout``): TCP's handshake over a 2.4 kbit/s radio with
    300 ms each way takes about a second, and a 1 s wait would give it up every time. A longer redial period
    (the later site's) is waited in full."""
    net = Net(["A", "B", "C"], RcmSettings(reconnect_period=3.0), rates={"A": {"B": 2_400}, "B": {"A": 2_400}})
    assert net.stacks["A"].peers["B"].cm.redial == SLOW_REDIAL_PERIOD
    assert net.stacks["A"].dial_timeout("B") == 3.0
    assert net.stacks["B"].dial_timeout("A") == net.stacks["B"].peers["A"].cm.redial > 3.0
    assert net.stacks["A"].dial_timeout("C") == net.stacks["C"].dial_timeout("A") == 3.0
