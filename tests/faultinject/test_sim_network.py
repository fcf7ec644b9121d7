"""The simulated TCP network: ordering, splits, blackholes, breaks, closes, crashes."""
from __future__ import annotations

import random

from faultinject.sim import EventLoop, LinkModel, Network


class Host:
    def __init__(self):
        self.events = []
        self.data = {}

    def connection_made(self, site, conn, peer):
        self.events.append(("made", site, conn, peer))

    def data_received(self, site, conn, data):
        self.data.setdefault((site, conn), bytearray()).extend(data)
        self.events.append(("data", site, conn, len(data)))

    def connection_lost(self, site, conn):
        self.events.append(("lost", site, conn))

    def dial_failed(self, site, peer):
        self.events.append(("failed", site, peer))


def make(seed=1, split=0.5):
    loop = EventLoop()
    host = Host()
    models = {("A", "B"): LinkModel(0.01, 0.005, 0.05)}
    net = Network(loop, random.Random(seed), ["A", "B"], models, host, connect_timeout=1.0,
                  split_prob=split)
    return loop, host, net


def connected(loop, host, net):
    net.dial("A", "B")
    loop.run_until(loop.now + 1.0)
    made = {e[1]: e[2] for e in host.events if e[0] == "made"}
    assert set(made) == {"A", "B"}
    return made["A"], made["B"]


def test_dial_makes_both_ends_acceptor_first():
    loop, host, net = make()
    a, b = connected(loop, host, net)
    kinds = [(e[0], e[1], e[3]) for e in host.events]
    assert kinds == [("made", "B", None), ("made", "A", "B")]
    assert a != b and a[0] == b[0]


def test_bytes_arrive_in_order_split_and_coalesced():
    loop, host, net = make()
    a, b = connected(loop, host, net)
    sent = b""
    for i in range(200):
        chunk = bytes([i % 256]) * (1 + i % 37)
        sent += chunk
        net.write("A", a, chunk)
        if i % 10 == 0:
            loop.run_until(loop.now + 0.003)
    loop.run_until(loop.now + 1.0)
    assert bytes(host.data[("B", b)]) == sent
    arrivals = [e for e in host.events if e[0] == "data"]
    assert len(arrivals) != 200          # split and coalesced, not one call per write


def test_blackhole_stalls_without_reset_then_delivers_everything():
    loop, host, net = make()
    a, b = connected(loop, host, net)
    net.set_link("A", "B", "blackhole")
    net.write("A", a, b"during")
    loop.run_until(loop.now + 5.0)
    assert ("B", b) not in host.data and not any(e[0] == "lost" for e in host.events)
    net.dial("B", "A")
    loop.run_until(loop.now + 0.99)
    assert not any(e[0] == "failed" for e in host.events)
    loop.run_until(loop.now + 0.02)
    assert ("failed", "B", "A") in host.events       # a dial into a blackhole times out
    net.set_link("A", "B", "up")
    loop.run_until(loop.now + 1.0)
    assert bytes(host.data[("B", b)]) == b"during"


def test_down_breaks_connections_and_loses_in_flight_bytes():
    loop, host, net = make()
    a, b = connected(loop, host, net)
    net.write("A", a, b"lost")
    net.set_link("A", "B", "down")
    loop.run_until(loop.now + 1.0)
    assert ("B", b) not in host.data
    assert ("lost", "A", a) in host.events and ("lost", "B", b) in host.events
    t = loop.now
    net.dial("A", "B")
    loop.run_until(t + 0.25)
    assert host.events[-1] == ("failed", "A", "B")   # refused fast


def test_close_delivers_then_eof_and_never_reports_the_closer():
    loop, host, net = make()
    a, b = connected(loop, host, net)
    net.write("A", a, b"bye")
    net.close("A", a)
    net.write("B", b, b"too late")
    loop.run_until(loop.now + 1.0)
    assert bytes(host.data[("B", b)]) == b"bye"
    assert ("lost", "B", b) in host.events and ("lost", "A", a) not in host.events
    assert ("A", a) not in host.data


def test_crash_resets_the_peer_or_is_found_after_a_blackhole():
    loop, host, net = make()
    a, b = connected(loop, host, net)
    net.crash("B")
    loop.run_until(loop.now + 1.0)
    assert ("lost", "A", a) in host.events
    loop2, host2, net2 = make(seed=2)
    a2, b2 = connected(loop2, host2, net2)
    net2.set_link("A", "B", "blackhole")
    net2.crash("B")
    net2.restart("B")
    loop2.run_until(loop2.now + 3.0)
    assert not any(e[0] == "lost" for e in host2.events)   # silence, no reset
    net2.write("A", a2, b"hello?")
    net2.set_link("A", "B", "up")
    loop2.run_until(loop2.now + 2.0)
    assert ("lost", "A", a2) in host2.events               # the restarted host resets it
    assert ("B", b2) not in host2.data


def test_dial_to_a_crashed_site_fails():
    loop, host, net = make()
    net.crash("B")
    net.dial("A", "B")
    loop.run_until(1.0)
    assert host.events == [("failed", "A", "B")]
