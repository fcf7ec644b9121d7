"""Idle cost of an RCM link, and the per-message overhead, per frame kind, on a virtual clock.

Theory of operation
-------------------
Four sites (a full mesh, the product's defaults: robust channels, relay
routing, Lamport IGO, the paper's timeouts) run the real sans-IO stack
(``rcm.stack.SiteStack``) on a virtual clock with a fixed one-way delay: no
processes, no sockets, so the figures are exact and the run takes a second.
Every ``Transmit`` the stack returns is one write the edge makes on that
connection, i.e. one TCP segment on a real radio (about 40 B of IP/TCP
headers each, reported as ``packets``); its bytes are decoded into frames and
counted per frame kind (a ROUTED frame by the kind it carries, ``ROUTED/ACK``
say; an acknowledgement riding on another frame is counted with that frame,
an ack-only frame is a HEARTBEAT carrying an ack). A write holding several
frames is one packet, attributed to its first frame's kind.

Two phases after the links are up and quiet: ``idle`` (nothing sent for a
minute) and ``chat`` (each site sends a 60-byte line every 5 s, the HF
profile of issue 36). Figures are per directed link per minute, averaged
over the 12 directed links, plus the chat phase's bytes and packets per
message copy beyond the payload, and the virtual time from a send to its
delivery at each other site (p50, p95, max: what holding announcements
costs; exact, as the clock is virtual).

``--compare-delay S`` runs the chat phase twice, ``[rcm] announce_delay``
0 (today's) and S, and leads with the ratio of the announcements' packets
and of the bytes per message copy (docs/ordering.md, "Announcements on
slow links").

    .venv/bin/python bench/idle_link.py [--minutes 1] [--delay 0.3] [--rate 0]
    (--rate BPS paces every link, as [sites.A.rate] does; 0: unpaced;
     --ordering lamport|sequencer|hybrid, --announce-delay S, --compare-delay S)
"""
from __future__ import annotations

import argparse
import heapq
import itertools
import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import percentile, write_result  # noqa: E402
from contracts.mission import RcmSettings  # noqa: E402
from rcm import wire  # noqa: E402
from rcm.actions import Close, Delivery, Dial, Transmit  # noqa: E402
from rcm.stack import SiteStack  # noqa: E402
from rcm.wire import compress  # noqa: E402

SITES = ["A", "B", "C", "D"]
IP_TCP_HEADER = 40
LINE = 60


class Meter:
    """Bytes, frames and writes per frame kind of what crosses the links.

    ``codec``: also each write as the link codec sends it (``coded``, by the kind of the write's first
    frame): one zstd streaming context per connection, started with the shipped dictionary, one flushed
    block per write, the connection's first frame (its HELLO) as it is (``rcm.wire.compress``)."""

    def __init__(self, codec: bool = False) -> None:
        self.bytes: Counter[str] = Counter()
        self.frames: Counter[str] = Counter()
        self.packets: Counter[str] = Counter()
        self.coded: Counter[str] = Counter()
        self.decoders: dict[Any, wire.FrameDecoder] = {}
        self.codec = codec
        self.compressors: dict[Any, compress.Compressor] = {}

    def write(self, conn: Any, data: bytes) -> None:
        dec = self.decoders.setdefault(conn, wire.FrameDecoder(1 << 24))
        first = None
        for f in dec.feed(data):
            kind = _kind(f)
            n = len(wire.encode_frame(f))
            self.bytes[kind] += n
            self.frames[kind] += 1
            first = first or kind
        self.packets[first or "partial"] += 1
        if self.codec:
            c = self.compressors.get(conn)
            head = 0
            if c is None:               # the connection's first frame goes as it is, the rest of the write compressed
                self.compressors[conn] = c = compress.Compressor(compress.dictionary())
                length, p = wire.read_varint(data, 0, 5) or (len(data), 0)
                head = min(p + length, len(data))
            self.coded[first or "partial"] += head + (len(c.compress(data[head:])) if head < len(data) else 0)

    def reset(self) -> None:
        """Counts from zero (the connections' compression contexts go on)."""
        self.bytes.clear()
        self.frames.clear()
        self.packets.clear()
        self.coded.clear()


def _kind(f: list[Any]) -> str:
    name = wire.FRAME_NAMES.get(f[0], str(f[0]))
    if f[0] == wire.ROUTED and len(f) > 5:
        name += "/" + wire.FRAME_NAMES.get(f[5], str(f[5]))
    if f[0] == wire.HEARTBEAT and len(f) > 2 and f[2] is not None:
        name += "+ack"
    return name


class VirtualNet:
    """Full mesh of SiteStacks, fixed one-way delay, every write counted."""

    def __init__(self, settings: RcmSettings, delay: float, rate: int, linger: bool = True,
                 sites: list[str] | None = None, delays: dict[tuple[str, str], float] | None = None,
                 codec: bool = False) -> None:
        """``sites``: the mission's (default ``SITES``; ``bench/peer_irc_outage.py --sim`` runs three);
        ``delays``: one way from a site to another, where not ``delay``; ``codec``: see ``Meter``."""
        sites = sites or SITES
        self.now = 0.0
        self.linger = linger                    # model the edge's lingering on slow links (Transmit.hold)
        self.held: dict[tuple[str, Any], list[bytes]] = {}
        self.delay = delay
        self.delays = delays or {}
        self.meter = Meter(codec)
        self.queue: list[Any] = []
        self._n = itertools.count()
        rates = {s: {p: rate for p in sites if p != s} for s in sites} if rate else {}
        self.stacks = {s: SiteStack(s, sites, settings, 1, 0.0, mission="idle", rates=rates.get(s),
                                    link_rates=rates or None) for s in sites}
        self.peer_of: dict[tuple[str, Any], tuple[str, Any]] = {}
        self.sent_at: dict[tuple[str, int], float] = {}
        self.latencies: list[float] = []        # send to delivery at another site, virtual seconds
        for s, st in self.stacks.items():
            self._run(s, st.start(0.0))

    def _at(self, t: float, fn: Any, *args: Any) -> None:
        heapq.heappush(self.queue, (t, next(self._n), fn, args))

    def _run(self, s: str, actions: list[Any]) -> None:
        for a in actions:
            if isinstance(a, Transmit):
                key = (s, a.conn)
                other = self.peer_of.get(key)
                if other is None:
                    continue
                held = self.held.get(key)
                if a.hold > 0.0 and self.linger:
                    # The edge's lingering on slow links (rcm.channels.connections): held until the first
                    # held write's hold is up, joined by what comes meanwhile, at once with a write that
                    # may not wait.
                    if held is None:
                        self.held[key] = held = []
                        self._at(self.now + a.hold, self._release, key, held)
                    held.append(a.data)
                    continue
                data = b"".join([*self.held.pop(key, []), a.data])
                self.meter.write(key, data)
                self._at(self.now + self.one_way(s, other[0]), self._recv, other, data)
            elif isinstance(a, Close):
                other = self.peer_of.pop((s, a.conn), None)
                if other is not None:
                    self.peer_of.pop(other, None)
                    self._at(self.now + self.one_way(s, other[0]), self._lost, other)
            elif isinstance(a, Dial):
                self._at(self.now + self.one_way(s, a.peer), self._dial, s, a.peer)
            elif isinstance(a, Delivery) and a.origin != s and (a.origin, a.seq) in self.sent_at:
                self.latencies.append(self.now - self.sent_at[(a.origin, a.seq)])

    def _release(self, key: tuple[str, Any], held: list[bytes]) -> None:
        if self.held.get(key) is not held:
            return                  # written already, with a write that could not wait
        del self.held[key]
        other = self.peer_of.get(key)
        if other is not None:
            data = b"".join(held)
            self.meter.write(key, data)
            self._at(self.now + self.one_way(key[0], other[0]), self._recv, other, data)

    def one_way(self, a: str, b: str) -> float:
        return self.delays.get((a, b), self.delay)

    def settled(self, seconds: float = 10.0) -> float:
        """Run ``seconds`` (connected, adverts flooded, quiet), then count from zero (the meter, the
        latencies); the virtual time it is."""
        self.run(seconds)
        self.meter.reset()
        self.latencies.clear()
        return self.now

    def _recv(self, end: tuple[str, Any], data: bytes) -> None:
        if end in self.peer_of:
            self._run(end[0], self.stacks[end[0]].data_received(end[1], data, self.now))

    def _lost(self, end: tuple[str, Any]) -> None:
        self._run(end[0], self.stacks[end[0]].connection_lost(end[1], self.now))

    def _dial(self, s: str, peer: str) -> None:
        a, b = ("c", next(self._n)), ("c", next(self._n))
        self.peer_of[(s, a)] = (peer, b)
        self.peer_of[(peer, b)] = (s, a)
        self._run(peer, self.stacks[peer].connection_made(b, self.now, None))
        self._run(s, self.stacks[s].connection_made(a, self.now, peer))

    def send(self, s: str, payload: bytes) -> None:
        result, actions = self.stacks[s].send(payload, None, self.now)
        self.sent_at[(s, result.seq)] = self.now
        self._run(s, actions)

    def run(self, until: float) -> None:
        while True:
            t_timer, site = min(((st.next_deadline() or float("inf"), s) for s, st in self.stacks.items()))
            t_event = self.queue[0][0] if self.queue else float("inf")
            t = min(t_timer, t_event)
            if t > until:
                self.now = until
                return
            self.now = max(self.now, t)
            if t_event <= t_timer:
                _, _, fn, args = heapq.heappop(self.queue)
                fn(*args)
            else:
                self._run(site, self.stacks[site].timer(self.now))


class CutNet(VirtualNet):
    """The virtual mesh with links that can be cut (``outage``): both ends of a cut link's connection see it
    reset at once, as a netsplit does, and dials across it fail until it is restored."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.cut: set[tuple[str, str]] = set()
        super().__init__(*args, **kwargs)

    def _dial(self, s: str, peer: str) -> None:
        if (s, peer) in self.cut:
            self._run(s, self.stacks[s].dial_failed(peer, self.now))
        else:
            super()._dial(s, peer)

    def outage(self, a: str, b: str, down: bool) -> None:
        """Link ``a``-``b`` cut (``down``) or restored."""
        pair = {(a, b), (b, a)}
        if not down:
            self.cut -= pair
            return
        self.cut |= pair
        for end, other in list(self.peer_of.items()):
            if (end[0], other[0]) in pair and end in self.peer_of:
                del self.peer_of[end]
                self._lost(end)


def phase(meter: Meter, minutes: float, links: int) -> dict[str, Any]:
    per = links * minutes
    kinds = sorted(set(meter.bytes) | set(meter.packets))
    table = {k: {"bytes_per_min": meter.bytes[k] / per, "frames_per_min": meter.frames[k] / per,
                 "packets_per_min": meter.packets[k] / per} for k in kinds}
    b = sum(meter.bytes.values()) / per
    p = sum(meter.packets.values()) / per
    return {"per_kind": table, "bytes_per_min": b, "packets_per_min": p,
            "bytes_per_min_with_headers": b + p * IP_TCP_HEADER}


def run(minutes: float, delay: float, rate: int, settings: RcmSettings, linger: bool = True) -> dict[str, Any]:
    net = VirtualNet(settings, delay, rate, linger)
    net.run(10.0)                                  # connected, adverts flooded, quiet
    links = len(SITES) * (len(SITES) - 1)
    net.meter.reset()
    t0 = net.now
    net.run(t0 + 60.0 * minutes)
    idle = phase(net.meter, minutes, links)
    net.meter.reset()
    t0 = net.now
    sent = 0
    for i, s in enumerate(SITES):
        t = t0 + 1.25 * i
        while t < t0 + 60.0 * minutes:
            net._at(t, net.send, s, b"x" * LINE)
            sent += 1
            t += 5.0
    net.run(t0 + 60.0 * minutes + 5.0)            # the last acks cross
    chat = phase(net.meter, minutes, links)
    copies = sent * (len(SITES) - 1)
    total = sum(net.meter.bytes.values())
    packets = sum(net.meter.packets.values())
    chat["messages"] = sent
    chat["bytes_per_copy"] = total / copies
    chat["packets_per_copy"] = packets / copies
    chat["overhead_per_copy"] = total / copies - LINE
    chat["per_copy_by_kind"] = {k: v / copies for k, v in net.meter.bytes.items()}
    lat = sorted(net.latencies)
    chat["deliveries"] = len(lat)
    chat["delivery_s"] = ({"p50": percentile(lat, 50), "p95": percentile(lat, 95), "max": lat[-1]} if lat
                          else {"p50": None, "p95": None, "max": None})
    return {"sites": len(SITES), "delay_s": delay, "rate_bps": rate, "minutes": minutes,
            "line_bytes": LINE, "heartbeat_timeout": settings.heartbeat_timeout,
            "ack_interval": settings.ack_interval, "ordering": settings.ordering,
            "announce_delay": settings.announce_delay, "idle": idle, "chat": chat}


def with_headers(ph: dict[str, Any]) -> float:
    """Bytes per message copy with the IP/TCP headers of its share of the packets."""
    return float(ph["bytes_per_copy"] + ph["packets_per_copy"] * IP_TCP_HEADER)


def announce_packets(ph: dict[str, Any]) -> float:
    """Writes a minute per directed link that an announcement leads (ROUTED ones included)."""
    return sum(float(v["packets_per_min"]) for k, v in ph["per_kind"].items() if k.split("/")[-1] == "ANNOUNCE")


def table(title: str, ph: dict[str, Any]) -> str:
    lines = [f"{title}: {ph['bytes_per_min']:.0f} B/min, {ph['packets_per_min']:.1f} packets/min per directed link "
             f"({ph['bytes_per_min_with_headers']:.0f} B/min with 40 B IP/TCP headers)",
             f"  {'kind':<16}{'B/min':>9}{'frames/min':>12}{'packets/min':>13}"]
    for k, v in ph["per_kind"].items():
        lines.append(f"  {k:<16}{v['bytes_per_min']:>9.1f}{v['frames_per_min']:>12.1f}{v['packets_per_min']:>13.1f}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=1.0)
    ap.add_argument("--delay", type=float, default=0.3, help="one-way delay, seconds")
    ap.add_argument("--rate", type=int, default=0, help="pace every link to this many bit/s (0: unpaced)")
    ap.add_argument("--heartbeat", type=float, default=None, help="[rcm] heartbeat_timeout (default: 1.0)")
    ap.add_argument("--ordering", default="lamport", help="[rcm] ordering (default: lamport)")
    ap.add_argument("--announce-delay", type=float, default=0.0, help="[rcm] announce_delay, seconds (default: 0)")
    compare = ap.add_mutually_exclusive_group()     # each leads with its own ratio against its own baseline
    compare.add_argument("--compare-delay", type=float, default=None, metavar="S",
                         help="run announce_delay 0 and S and lead with their ratio")
    compare.add_argument("--compare-linger", action="store_true",
                         help="run without and with the edge's lingering on slow links and lead with their ratio")
    ap.add_argument("--quick", action="store_true", help="half a minute of each phase (a smoke run)")
    a = ap.parse_args()
    if a.quick:
        a.minutes = 0.5
    settings = RcmSettings(durable=False, ordering=a.ordering, announce_delay=a.announce_delay)
    if a.heartbeat is not None:
        settings = replace(settings, heartbeat_timeout=a.heartbeat, liveness_timeout=max(5.0, 5 * a.heartbeat),
                           silence_timeout=max(10.0, 10 * a.heartbeat))
    if a.compare_delay is not None:
        base = run(a.minutes, a.delay, a.rate, replace(settings, announce_delay=0.0))
        settings = replace(settings, announce_delay=a.compare_delay)
    if a.compare_linger:
        base = run(a.minutes, a.delay, a.rate, settings, linger=False)
    r = run(a.minutes, a.delay, a.rate, settings)
    if a.compare_linger:
        b, c = base["chat"], r["chat"]
        print(f"idle_link: lingering on slow links against none: {with_headers(b) / with_headers(c):.2f}x fewer "
              f"bytes per message copy with IP/TCP headers ({b['bytes_per_copy']:.1f} -> {c['bytes_per_copy']:.1f} B, "
              f"{b['packets_per_copy']:.2f} -> {c['packets_per_copy']:.2f} packets, each also a TLS record); "
              f"idle {base['idle']['packets_per_min']:.1f} -> {r['idle']['packets_per_min']:.1f} packets per link "
              f"per minute; delivery p95 {b['delivery_s']['p95']:.2f} -> {c['delivery_s']['p95']:.2f} s (virtual)")
        r["baseline"] = base
    if a.compare_delay is not None:
        b, c = base["chat"], r["chat"]
        ab, ac = announce_packets(b), announce_packets(c)
        print(f"idle_link: announce_delay {a.compare_delay:g} s against 0: "
              f"{f'{ab / ac:.1f}x' if ac else 'all'} fewer announcement packets "
              f"({ab:.1f} -> {ac:.1f} per directed link per minute), "
              f"{with_headers(b) / with_headers(c):.2f}x fewer bytes per message copy with IP/TCP headers "
              f"({b['bytes_per_copy']:.1f} -> {c['bytes_per_copy']:.1f} B, "
              f"{b['packets_per_copy']:.2f} -> {c['packets_per_copy']:.2f} packets); delivery p95 "
              f"{b['delivery_s']['p95']:.2f} -> {c['delivery_s']['p95']:.2f} s (virtual)")
        r["baseline"] = base
    path = write_result("idle_link" + ("_quick" if a.quick else ""), r)
    i, c = r["idle"], r["chat"]
    print(f"idle_link: idle {i['bytes_per_min']:.0f} B and {i['packets_per_min']:.1f} packets per directed link per "
          f"minute; chat {c['bytes_per_copy']:.1f} B per message copy")
    print(table("idle", r["idle"]))
    print(table("chat (60 B line every 5 s per site)", r["chat"]))
    c = r["chat"]
    d = c["delivery_s"]
    print(f"chat: delivery at the other sites p50 {d['p50']:.2f} s, p95 {d['p95']:.2f} s, max {d['max']:.2f} s "
          f"(virtual; {c['deliveries']} of {3 * c['messages']}; {r['ordering']}, "
          f"announce_delay {r['announce_delay']:g} s)")
    print(f"chat: {c['bytes_per_copy']:.1f} B and {c['packets_per_copy']:.2f} packets per message copy "
          f"({c['overhead_per_copy']:.1f} B beyond the {LINE}-byte payload) -> {path}")


if __name__ == "__main__":
    main()
