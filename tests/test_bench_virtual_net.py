"""The benchmarks' virtual network (bench/idle_link.py ``VirtualNet``, ``CutNet``, ``Meter``): links that are cut
and restored, and bytes counted as the link codec sends them (``bench/relay.py --sim`` reads both)."""
from __future__ import annotations

from typing import Any

from bench import relay
from bench.idle_link import CutNet, VirtualNet
from contracts.mission import parse_rcm_settings
from rcm.wire import handshake
from rcm.wire.compress import CAP_DICT, CAP_ZSTD, LinkCodec

SETTINGS = parse_rcm_settings({"heartbeat_timeout": 1.0, "liveness_timeout": 5.0, "silence_timeout": 10.0,
                               "suspect_timeout": 60.0, "reconnect_period": 3.0, "routing": "relay"})


def linked(net: VirtualNet, a: str, b: str) -> bool:
    return any(end[0] == a and other[0] == b for end, other in net.peer_of.items())


def test_a_cut_link_has_no_connection_and_refuses_dials_until_it_is_restored() -> None:
    net = CutNet(SETTINGS, 0.05, 0, sites=["A", "B", "C"])
    net.run(10.0)
    assert linked(net, "A", "B") and linked(net, "B", "A")
    net.outage("A", "B", True)
    net.run(30.0)                                   # several reconnect periods: every dial across the cut fails
    assert not linked(net, "A", "B") and not linked(net, "B", "A")
    assert linked(net, "A", "C") and linked(net, "C", "B")
    net.outage("A", "B", False)
    net.run(40.0)
    assert linked(net, "A", "B") and linked(net, "B", "A")


class Recording(VirtualNet):
    """Every write of every connection kept, in order, and which two ends made a connection."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.writes: dict[Any, list[bytes]] = {}
        self.pairs: list[tuple[Any, Any]] = []
        super().__init__(*args, **kwargs)
        count = self.meter.write

        def keep(conn: Any, data: bytes) -> None:
            self.writes.setdefault(conn, []).append(data)
            count(conn, data)

        self.meter.write = keep                     # type: ignore[method-assign]

    def _dial(self, s: str, peer: str) -> None:
        before = set(self.peer_of)
        super()._dial(s, peer)
        x, y = (k for k in self.peer_of if k not in before)
        self.pairs.append((x, y))


def socket_bytes(wx: list[bytes], wy: list[bytes]) -> int:
    """What two real codecs put on the socket for one connection's writes both ways (each reads the other's
    HELLO after writing its own), less the capability fields the stacks' HELLOs lack."""
    cx, cy = LinkCodec(True), LinkCodec(True)
    out = len(cx.send(wx[0])) + len(cy.send(wy[0]))
    out += len(cx.receive(handshake.offer(wy[0], CAP_ZSTD | CAP_DICT))[1])
    out += len(cy.receive(handshake.offer(wx[0], CAP_ZSTD | CAP_DICT))[1])
    out += sum(len(cx.send(w)) for w in wx[1:]) + sum(len(cy.send(w)) for w in wy[1:])
    assert cx.dictionary and cy.dictionary
    return out - sum(len(handshake.offer(w[0], CAP_ZSTD | CAP_DICT)) - len(w[0]) for w in (wx, wy))


def test_the_codec_meter_counts_what_the_link_codec_puts_on_the_socket() -> None:
    net = Recording(SETTINGS, 0.05, 0, sites=["A", "B"], codec=True)
    for i in range(40):
        net._at(1.0 + 0.25 * i, net.send, "AB"[i % 2], f"line {i} of the operators' chat".encode())
    net.run(15.0)
    assert len(net.latencies) == 40 and net.pairs
    assert sum(net.meter.coded.values()) == sum(socket_bytes(net.writes[x], net.writes[y]) for x, y in net.pairs)
    assert sum(net.meter.coded.values()) < sum(net.meter.bytes.values())          # it compresses


def test_the_relay_benchmark_on_the_virtual_clock_delivers_everything_and_names_the_relayed_writes() -> None:
    d, r = (relay.run_sim(mode, 7.0, 3.0, 1.5, 2.0, 200) for mode in ("direct", "relay"))
    for run in (d, r):
        assert run["copies_delivered"] == run["copies"] > 0
    assert not any(k.startswith("ROUTED") for k in d["writes"])
    assert {"ROUTED/DATA", "LINKS"} <= set(r["writes"])
    assert r["latency_p95_s"] < d["latency_p95_s"]            # relaying delivers around the cut links
