"""The whole RCM protocol stack of one site, sans-IO.

Theory of operation
-------------------
``SiteStack`` composes, bottom to top:

* socket channels: one TCP connection per peer at most, framed by ``rcm.wire``;
  a handshake (HELLO both ways, then SYNC) identifies the peer, its
  incarnation, and where each direction's reliable stream resumes;
* the connection manager (``rcm.connman.PeerConnection`` per peer), which turns
  connection events and timers into the logical statuses connected /
  suspected / disconnected;
* point-to-point channels (``rcm.p2p``): robust, or one of the paper's baselines;
* multicast: a send is copied to the channel of every destination;
* intermittent global order: an ``ordering`` protocol decides when and how
  messages are delivered.

It never touches a socket or a clock. The edge (``rcm.server`` for real
sockets, ``faultinject.sim`` for the simulator) calls the event methods with
the current time and executes the returned actions: ``Transmit`` bytes on a
connection, ``Close`` it, ``Dial`` a peer, hand a message up (``Delivered``),
report a ``StatusChanged`` or a ``MissingNotice``, or ``Log`` a line.

Trust: a HELLO's frontier (the last frame the peer holds of our stream) is
checked against what we ever sent: past it is a protocol violation. It drops
frames from our buffer only on a connection whose peer a TLS certificate
proved (``identity``); on a plaintext one the stream resumes after the last
acknowledged frame and the peer discards duplicates, so a HELLO alone can
never make this site forget buffered data. (Plaintext is refused off loopback
unless the mission says it is a lab: ``rcm.config``.)

Dialing rule: both sites dial while they have no connection; if two
connections between the same pair exist at once, both keep the one dialed by
the site whose name sorts first (for two dialed by the same site, the newer),
so the pair converges on a single connection without negotiating.

Destinations that are disconnected when a message is sent are skipped, not
refused: the send reports them, and when such a peer connects again it gets
MISSED frames naming the messages it will never receive (its client sees a
``MissingNotice``). Both carry inclusive ``[first, last]`` ranges of message
sequence numbers (``rcm.ranges``), split so that no frame passes
``max_frame_bytes``; the skipped numbers wait per peer as ranges too, at most
``MISSED_RANGES_MAX`` of them (past that the last one widens over the gap).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Hashable, Sequence

from ordering import KEY_INT_MAX, ClockExhausted, Deliver, SendControl, make_protocol
from ordering.base import OrderingProtocol

from . import ranges, wire
from .config import RcmSettings
from .connman import (CloseSocket, DialPeer, Effect, PeerConnection, SendHeartbeat, Status,
                      StatusChange, TcpChange, TcpState)
from .p2p import ChannelFull, InboundChannel, OutboundChannel, OutFrame


# -- actions ---------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Transmit:
    conn: Hashable
    data: bytes


@dataclass(frozen=True, slots=True)
class Close:
    conn: Hashable
    reason: str


@dataclass(frozen=True, slots=True)
class Dial:
    peer: str


@dataclass(frozen=True, slots=True)
class Delivered:
    origin: str
    seq: int
    key: tuple
    late: bool
    payload: bytes


@dataclass(frozen=True, slots=True)
class StatusChanged:
    peer: str
    status: str


@dataclass(frozen=True, slots=True)
class MissingNotice:
    """Messages of ``origin`` this site will never get: inclusive ``(first, last)`` sequence ranges."""

    origin: str
    ranges: tuple[tuple[int, int], ...]

    @property
    def count(self) -> int:
        """How many messages the ranges name."""
        return ranges.count(self.ranges)


@dataclass(frozen=True, slots=True)
class Persist:
    """Append ``record`` to the write-ahead log before executing the other actions."""

    record: list


@dataclass(frozen=True, slots=True)
class Log:
    level: str   # "info" | "warning"
    message: str


Action = Transmit | Close | Dial | Delivered | StatusChanged | MissingNotice | Persist | Log


@dataclass(frozen=True, slots=True)
class SendResult:
    msg_id: str
    seq: int
    order: list | None
    skipped: tuple[str, ...]


class SendError(Exception):
    """A client send was not accepted."""

    code = "refused"


class SendRefused(SendError):
    code = "refused"


class Backpressure(SendError):
    code = "backpressure"


# -- per-connection and per-peer state -----------------------------------------
@dataclass(slots=True)
class _Conn:
    id: Hashable
    dialed_peer: str | None          # the site we dialed, None if we accepted
    decoder: wire.FrameDecoder
    opened_at: float
    identity: tuple[str, str] | None = None   # (site, mission) proven by a TLS certificate
    peer_boot: int = 0
    dial_seq: int = 0                # which dial of its dialer this connection is
    peer: str | None = None          # known after the peer's HELLO
    open: bool = False               # handshake complete and adopted
    tx_msg_base: int = 0
    rx_msg_base: int = 0
    tx_ack_base: int = 0
    rx_ack_base: int = 0


@dataclass(slots=True)
class _Peer:
    name: str
    cm: PeerConnection
    out: OutboundChannel
    inb: InboundChannel
    conn: Hashable | None = None
    missed: list[list[int]] = field(default_factory=list)   # skipped sends, as [first, last] ranges
    bytes_in: int = 0
    bytes_out: int = 0
    frames_in: int = 0
    frames_out: int = 0
    delivered: int = 0
    late: int = 0
    refused_connections: int = 0
    last_refusal: str = ""


MISSED_RANGES_MAX = 4096
"""Most separate ranges of skipped sends kept per peer (``rcm.ranges.add``)."""


class ProtocolViolation(Exception):
    """A peer sent something the protocol does not allow; close its connection."""


def _logged_ranges(body: Any) -> list:
    """Missed numbers from a log record: ranges, or a plain list of numbers (logs before ranges)."""
    if all(type(x) is int for x in body):
        return ranges.of_seqs(body)
    return [list(r) for r in body]


def _short(value: Any, limit: int = 80) -> str:
    """``repr(value)`` cut to ``limit`` characters, for reasons and logs."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


class SiteStack:
    """Sans-IO RCM stack for one site (see the module docstring)."""

    def __init__(self, site: str, sites: Sequence[str], settings: RcmSettings, incarnation: int,
                 now: float, mission: str = "sim", ordering: str | None = None,
                 first_seq: int = 1, durable: bool = False, boot: int | None = None) -> None:
        if site not in sites:
            raise ValueError(f"site {site!r} is not among {list(sites)}")
        if incarnation <= 0:
            raise ValueError("incarnation must be positive")
        self.site = site
        self.sites = sorted(sites)
        self.settings = settings
        self.incarnation = incarnation      # identity of this site's reliable stream
        self.boot = boot if boot is not None else incarnation   # one more per process start
        self.mission = mission
        self.msg_seq = first_seq - 1
        peers = [s for s in self.sites if s != site]
        self.ordering: OrderingProtocol = make_protocol(ordering or settings.ordering, site, peers, now)
        self.peers: dict[str, _Peer] = {
            p: _Peer(p, PeerConnection(p, settings, now, first_dial=self._first_dial(p, now)),
                     OutboundChannel(settings.p2p, settings.max_buffered_messages),
                     InboundChannel())
            for p in peers
        }
        for p in peers:
            self.ordering.set_status(p, self.peers[p].cm.status.value, now)
        self.conns: dict[Hashable, _Conn] = {}
        self._out: list[Action] = []
        self._dials = 0
        self._tx: dict[Hashable, list[bytes]] = {}
        self.delivered_local = 0
        # Durability: emit Persist records, and remember what the ordering
        # protocol holds so a compaction can write it out.
        self.durable = durable
        self.undelivered: dict[tuple[str, int], tuple[Any, bytes]] = {}
        # Connections that have not finished HELLO cost memory and prove nothing:
        # there are at most ``max_handshaking`` accepted ones, each decoding
        # frames of at most ``hello_max_frame`` bytes until its HELLO is taken.
        self.max_handshaking = settings.max_handshaking or max(32, 4 * len(peers))
        self.hello_max_frame = self._hello_frame_limit()
        self.handshakes_refused = 0
        self._handshake_log_at = float("-inf")
        self._handshake_log_count = 0

    def _first_dial(self, peer: str, now: float) -> float:
        # Both ends dial at once: sites start in any order, and waiting would
        # only delay the first connection. A resulting duplicate is resolved
        # by the dialing rule.
        return now

    # ======================================================================
    # public events
    # ======================================================================
    def start(self, now: float) -> list[Action]:
        """First dials; call once."""
        return self.timer(now)

    def connection_made(self, conn: Hashable, now: float, peer: str | None = None,
                        identity: tuple[str, str] | None = None) -> list[Action]:
        """A TCP connection is up: dialed by us to ``peer``, or accepted (``peer=None``).

        ``identity``: with TLS, the (site, mission) named by the peer's verified
        certificate; the HELLO must then claim exactly that site and mission.
        """
        if conn in self.conns:
            raise ValueError(f"connection {conn!r} already known")
        if peer is not None and peer not in self.peers:
            raise ValueError(f"dialed unknown peer {peer!r}")
        c = _Conn(conn, peer, wire.FrameDecoder(self.hello_max_frame), now, identity)
        if peer is None and self.handshaking() >= self.max_handshaking:
            self._refuse_handshake(c, now)
            return self._finish(now)
        self.conns[conn] = c
        if peer is not None:
            self._dials += 1
            c.dial_seq = self._dials
            # The dialer speaks first; the acceptor answers once it knows who called.
            self._write(c, self._hello_frame(peer, c.dial_seq))
        return self._finish(now)

    def data_received(self, conn: Hashable, data: bytes, now: float) -> list[Action]:
        c = self.conns.get(conn)
        if c is None:
            return []
        try:
            if c.peer is not None:
                self.peers[c.peer].bytes_in += len(data)
            while conn in self.conns:
                # Before HELLO one frame at a time, under the small limit; the
                # frames behind the HELLO in the same read get the full one.
                frames = c.decoder.feed(data, most=None if c.open else 1)
                data = b""
                if not frames:
                    break
                for frame in frames:
                    if conn not in self.conns:
                        break  # closed by an earlier frame of this batch
                    self._frame(c, frame, now)
        except (wire.FrameError, ProtocolViolation) as e:
            who = c.peer or (c.dialed_peer and f"{c.dialed_peer}?") or "unidentified peer"
            self._drop(c, f"protocol error from {who}: {e}", now, bye=True)
        return self._finish(now)

    def connection_lost(self, conn: Hashable, now: float) -> list[Action]:
        c = self.conns.pop(conn, None)
        if c is None:
            return []
        self._tx.pop(conn, None)
        self._detach(c, now, "connection lost")
        return self._finish(now)

    def dial_failed(self, peer: str, now: float) -> list[Action]:
        p = self.peers.get(peer)
        if p is not None:
            p.cm.dial_failed(now)
        return self._finish(now)

    def send(self, payload: bytes, dests: Sequence[str] | None, now: float
             ) -> tuple[SendResult, list[Action]]:
        """The local client sends ``payload`` to ``dests`` (None: every site)."""
        if not isinstance(payload, (bytes, bytearray)):
            raise SendRefused("payload must be bytes")
        if len(payload) > self.settings.max_payload_bytes:
            raise SendRefused(f"payload of {len(payload)} bytes exceeds max_payload_bytes = "
                              f"{self.settings.max_payload_bytes}")
        if dests is None:
            targets = list(self.peers)
        else:
            unknown = [d for d in dests if d != self.site and d not in self.peers]
            if unknown:
                raise SendRefused(f"unknown destination site {unknown[0]!r}")
            targets = sorted({d for d in dests if d != self.site})
        skipped = [d for d in targets if self.peers[d].cm.status is Status.DISCONNECTED]
        live = [d for d in targets if d not in skipped]
        full = [d for d in live if not self.peers[d].out.has_room()]
        if full:
            raise Backpressure(f"outbound buffer to {full[0]} is full "
                               f"({self.settings.max_buffered_messages} messages): try again later")
        seq = self.msg_seq + 1
        payload = bytes(payload)
        try:
            header, key, outputs = self.ordering.local_send(seq, payload, now, dests=tuple(live))
        except ClockExhausted as e:
            raise SendRefused(str(e)) from None
        self.msg_seq = seq
        links: dict[str, int] = {}
        for d in live:
            links[d] = self.peers[d].out.offer(wire.DATA, seq, header, payload).link_seq
        if self.durable:
            self._out.append(Persist(["S", seq, header, payload, links, skipped]))
            self.undelivered[(self.site, seq)] = (header, payload)
        for d in live:
            self._pump(self.peers[d], now)
        for d in skipped:
            ranges.add(self.peers[d].missed, seq, MISSED_RANGES_MAX)
        self._ordering_outputs(outputs, now)
        result = SendResult(f"{self.site}:{seq}", seq, list(key) if key is not None else None,
                            tuple(skipped))
        return result, self._finish(now)

    def timer(self, now: float) -> list[Action]:
        for c in list(self.conns.values()):
            if not c.open and now >= c.opened_at + self.settings.handshake_timeout:
                self._drop(c, f"no handshake within {self.settings.handshake_timeout:g} s", now)
        for p in self.peers.values():
            self._effects(p, p.cm.tick(now), now)
            inb = p.inb
            if (p.conn is not None and inb.frontier > inb.acked_sent and inb.unacked_since is not None
                    and now >= inb.unacked_since + self.settings.ack_interval):
                self._heartbeat(p, now)
        self._ordering_outputs(self.ordering.tick(now), now)
        return self._finish(now)

    def handshaking(self) -> int:
        """Accepted connections that have not finished their HELLO."""
        return sum(1 for c in self.conns.values() if not c.open and c.dialed_peer is None)

    def next_deadline(self) -> float | None:
        ds: list[float] = []
        for p in self.peers.values():
            d = p.cm.next_deadline()
            if d is not None:
                ds.append(d)
            inb = p.inb
            if p.conn is not None and inb.frontier > inb.acked_sent and inb.unacked_since is not None:
                ds.append(inb.unacked_since + self.settings.ack_interval)
        for c in self.conns.values():
            if not c.open:
                ds.append(c.opened_at + self.settings.handshake_timeout)
        d = self.ordering.next_deadline()
        if d is not None:
            ds.append(d)
        return min(ds) if ds else None

    # -- durability -------------------------------------------------------------
    def restore(self, records: list[list], now: float) -> list[Action]:
        """Rebuild state from the write-ahead log (see ``rcm.wal``) before ``start``.

        Returns the deliveries of messages that were logged but not delivered
        before the restart (every peer is disconnected now, so they are
        delivered at once, in order-key order).
        """
        snap = None
        frames: dict[str, dict[int, OutFrame]] = {p: {} for p in self.peers}
        acked = {p: 0 for p in self.peers}
        inb: dict[str, tuple[int, int]] = {}
        missed: dict[str, list] = {p: [] for p in self.peers}        # [first, last] pairs
        missed_sent: dict[str, list] = {p: [] for p in self.peers}
        inputs: list[tuple] = []
        delivered: set[tuple[str, int]] = set()
        msg_seq = self.msg_seq

        def seen(peer: str, inc: int, link_seq: int) -> None:
            old_inc, front = inb.get(peer, (0, 0))
            inb[peer] = (inc, max(front, link_seq) if old_inc == inc else link_seq)

        for r in records:
            k = r[0]
            if k == "S":
                _, seq, header, payload, links, skipped = r
                msg_seq = max(msg_seq, seq)
                inputs.append(("m", self.site, seq, header, payload))
                for peer, ls in links.items():
                    if peer in frames:
                        frames[peer][ls] = OutFrame(ls, wire.DATA, seq, header, payload)
                for peer in skipped:
                    if peer in missed:
                        missed[peer].append((seq, seq))
            elif k == "O":
                _, peer, ls, kind, body = r
                if peer not in frames:
                    continue
                if kind == wire.DATA:
                    seq, header, payload = body
                    frames[peer][ls] = OutFrame(ls, kind, seq, header, payload)
                else:
                    if kind == wire.MISSED:
                        # Older logs hold a list of numbers: it goes out as ranges now.
                        body = ranges.cap(_logged_ranges(body), ranges.per_frame(self.settings.max_frame_bytes))
                        missed_sent[peer].extend(body)
                    frames[peer][ls] = OutFrame(ls, kind, 0, None, body)
            elif k == "R":
                _, origin, inc, ls, seq, header, payload = r
                seen(origin, inc, ls)
                inputs.append(("m", origin, seq, header, payload))
            elif k == "C":
                _, origin, inc, ls, kind, body = r
                seen(origin, inc, ls)
                if kind == wire.CTRL:
                    inputs.append(("c", origin, body))
            elif k == "I":
                inb[r[1]] = (r[2], 0)
            elif k == "F":
                inb[r[1]] = (r[2], r[3])
            elif k == "A":
                if r[1] in acked:
                    acked[r[1]] = max(acked[r[1]], r[2])
            elif k == "D":
                delivered.add((r[2], r[3]))
            elif k == "Z":
                snap = r[1]
                msg_seq = max(msg_seq, r[2])
            elif k == "P":
                inputs.append(("m", r[1], r[2], r[3], r[4]))
            elif k == "M":
                if r[1] in missed:
                    missed[r[1]].extend(_logged_ranges(r[2]))
        self.msg_seq = msg_seq
        for name, p in self.peers.items():
            fs = frames[name]
            top = max(fs) if fs else acked[name]
            p.out.acked = acked[name]
            p.out.next_seq = max(top, acked[name]) + 1
            p.out.hwm = p.out.next_seq - 1
            p.out.buffer.extend(fs[ls] for ls in sorted(fs) if ls > acked[name])
            if name in inb:
                p.inb.peer_incarnation, p.inb.frontier = inb[name]
                p.inb.acked_sent = 0
            p.missed = ranges.cap(ranges.subtract(ranges.normalize(missed[name]),
                                                  ranges.normalize(missed_sent[name])), MISSED_RANGES_MAX)
        if snap is not None:
            self.ordering.restore(snap)
        for item in inputs:
            try:
                if item[0] == "m":
                    _, origin, seq, header, payload = item
                    outs = self.ordering.receive(origin, seq, header, payload, now)
                    if (origin, seq) not in delivered:
                        self.undelivered[(origin, seq)] = (header, payload)
                else:
                    outs = self.ordering.control(item[1], item[2], now)
            except (TypeError, ValueError, KeyError, IndexError) as e:
                # Logged before the ordering protocol checked what it takes
                # (an older version): the live path would have refused it.
                self._out.append(Log("warning", f"log record from {item[1]} skipped: the ordering "
                                                f"protocol refuses it: {e}"))
                continue
            keep = [o for o in outs if isinstance(o, Deliver) and (o.origin, o.seq) not in delivered]
            self._ordering_outputs(keep, now)
        self.ordering.flush(now)
        out, self._out = self._out, []
        return out

    def snapshot_records(self) -> list[list]:
        """The live state as log records, for a compacted log (``rcm.wal``)."""
        recs: list[list] = [["Z", self.ordering.snapshot(), self.msg_seq]]
        for (origin, seq), (header, payload) in self.undelivered.items():
            recs.append(["P", origin, seq, header, payload])
        for name, p in self.peers.items():
            if p.inb.peer_incarnation:
                recs.append(["F", name, p.inb.peer_incarnation, p.inb.frontier])
            recs.append(["A", name, p.out.acked])
            for f in p.out.buffer:
                body = [f.msg_seq, f.header, f.payload] if f.kind == wire.DATA else f.payload
                recs.append(["O", name, f.link_seq, f.kind, body])
            if p.missed:
                recs.append(["M", name, [list(r) for r in p.missed]])
        return recs

    # -- introspection --------------------------------------------------------
    def status(self, peer: str) -> str:
        return self.peers[peer].cm.status.value

    def statuses(self) -> dict[str, str]:
        return {p: self.peers[p].cm.status.value for p in self.peers}

    def stats(self) -> dict[str, Any]:
        peers = {}
        for name, p in self.peers.items():
            s = p.out.stats
            peers[name] = {
                "status": p.cm.status.value, "tcp": p.cm.tcp.value,
                "sent": s.sent, "transmitted": s.transmitted, "resent": s.resent, "acked": s.acked,
                "lost": s.lost, "buffered": len(p.out), "bytes_in": p.bytes_in,
                "bytes_out": p.bytes_out, "frames_in": p.frames_in, "frames_out": p.frames_out,
                "delivered": p.delivered, "late": p.late, "duplicates": p.inb.duplicates,
                "gaps": p.inb.gaps, "refused_connections": p.refused_connections,
                "last_refusal": p.last_refusal,
            }
        return {"site": self.site, "incarnation": self.incarnation, "ordering": self.ordering.name,
                "p2p": self.settings.p2p, "msg_seq": self.msg_seq,
                "held_back": self.ordering.pending_count(), "delivered": self.delivered_local,
                "peers": peers}

    # ======================================================================
    # internals
    # ======================================================================
    def _finish(self, now: float) -> list[Action]:
        self._ordering_outputs(self.ordering.flush(now), now)
        out = self._out
        if self._tx:
            # A Close already carried its connection's bytes; the rest go out now,
            # one Transmit per connection.
            out.extend(Transmit(conn, b"".join(chunks)) for conn, chunks in self._tx.items() if chunks)
            self._tx = {}
        self._out = []
        return out

    def _write(self, c: _Conn, frame: list) -> None:
        data = wire.encode_frame(frame)
        self._tx.setdefault(c.id, []).append(data)
        if c.peer is not None:
            p = self.peers[c.peer]
            p.bytes_out += len(data)
            p.frames_out += 1

    def _close(self, c: _Conn, reason: str, bye: bool) -> None:
        if bye:
            self._write(c, [wire.BYE, reason[:200]])
        chunks = self._tx.pop(c.id, None)
        if chunks:
            self._out.append(Transmit(c.id, b"".join(chunks)))
        self._out.append(Close(c.id, reason))
        self.conns.pop(c.id, None)

    def _drop(self, c: _Conn, reason: str, now: float, bye: bool = False) -> None:
        """Close a connection we decided to end, and tell the peer's machines."""
        self._out.append(Log("warning", f"closing connection: {reason}"))
        self._close(c, reason, bye)
        self._detach(c, now, reason)

    def _detach(self, c: _Conn, now: float, reason: str) -> None:
        if c.peer is not None and self.peers[c.peer].conn == c.id:
            p = self.peers[c.peer]
            p.conn = None
            p.out.connection_lost()
            self._effects(p, p.cm.socket_error(now), now)
        elif not c.open and c.dialed_peer is not None:
            p = self.peers[c.dialed_peer]
            if p.conn is None:
                p.cm.dial_failed(now)

    def _refuse_handshake(self, c: _Conn, now: float) -> None:
        """Close a connection accepted while ``max_handshaking`` others are still in HELLO.

        Logged at most once a minute (with how many were refused), so a flood
        of connections does not flood the log too.
        """
        reason = (f"refused: {self.site} has {self.max_handshaking} connections in handshake "
                  "([rcm] max_handshaking); try again later")
        self.handshakes_refused += 1
        self._handshake_log_count += 1
        if now >= self._handshake_log_at + 60.0:
            self._out.append(Log("warning", f"{reason} ({self._handshake_log_count} refused "
                                            "since the last such line)"))
            self._handshake_log_at = now
            self._handshake_log_count = 0
        self._close(c, reason, bye=True)

    def _hello_frame_limit(self) -> int:
        """Largest frame accepted before HELLO: 4 KiB, or room for two of this mission's HELLOs.

        A HELLO lists the mission's sites; a peer whose mission file lists more
        must still get through to be refused with the reason.
        """
        big = 2 ** 64 - 1
        hello = [wire.HELLO, wire.PROTOCOL_VERSION, self.mission, self.site, big, big, big, big, big,
                 self._terms()]
        return min(self.settings.max_frame_bytes, max(4096, 2 * len(wire.encode_frame(hello)) + 1024))

    def _hello_frame(self, peer: str, dial_seq: int = 0) -> list:
        inb = self.peers[peer].inb
        return [wire.HELLO, wire.PROTOCOL_VERSION, self.mission, self.site, self.incarnation,
                inb.peer_incarnation, inb.frontier, self.boot, dial_seq, self._terms()]

    def _terms(self) -> list:
        """What every site of a mission must agree on: the ordering protocol, the channel mode, the sites."""
        return [self.ordering.name, self.settings.p2p, self.sites]

    def _disagreement(self, site: str, terms: Any) -> str | None:
        """Why a peer's HELLO terms rule out talking to it, or None if they match ours."""
        if (not isinstance(terms, list) or len(terms) != 3 or not all(isinstance(t, str) for t in terms[:2])
                or not isinstance(terms[2], list) or not all(isinstance(t, str) for t in terms[2])):
            raise ProtocolViolation("malformed HELLO terms")
        ordering, p2p, sites = terms
        # The reason names both sites: the refused peer logs it too, where "this site" would mislead.
        me = self.site
        if ordering != self.ordering.name:
            return (f"{site} orders messages with {ordering!r}, {me} with {self.ordering.name!r}: "
                    "every site of a mission must use the same [rcm] ordering")
        if p2p != self.settings.p2p:
            return (f"{site} runs {p2p!r} channels, {me} {self.settings.p2p!r}: "
                    "every site of a mission must use the same [rcm] p2p")
        if sorted(sites) != self.sites:
            only_there = sorted(set(sites) - set(self.sites))
            only_here = sorted(set(self.sites) - set(sites))
            diff = "; ".join(part for part in (
                only_there and f"only {site}'s has {', '.join(only_there)}",
                only_here and f"only {me}'s has {', '.join(only_here)}") if part)
            return (f"the mission files of {site} and {me} list different sites ({diff or 'duplicates'}): "
                    "every site must load the same mission file")
        return None

    # -- frames ---------------------------------------------------------------
    def _frame(self, c: _Conn, f: list, now: float) -> None:
        kind = f[0]
        if not c.open:
            if kind == wire.HELLO:
                self._hello(c, f, now)
                return
            if kind == wire.BYE:
                reason = f[1] if len(f) > 1 and isinstance(f[1], str) else ""
                why = reason.removeprefix("refused: ")
                who = c.dialed_peer or "the peer"
                if c.dialed_peer is not None:
                    self.peers[c.dialed_peer].last_refusal = f"{who} refused this site: {why}"
                self._drop(c, f"{who} refused the connection: {why}", now)
                return
            raise ProtocolViolation(f"{wire.FRAME_NAMES.get(kind, kind)} frame before HELLO")
        p = self.peers[c.peer]  # type: ignore[index]
        p.frames_in += 1
        self._effects(p, p.cm.frame_received(now), now)
        try:
            if kind == wire.DATA:
                _, check, dseq, header, payload, *rest = f
                if type(dseq) is not int or dseq < 1 or not isinstance(payload, bytes):
                    raise ProtocolViolation("malformed DATA frame")
                self._check(p, check)
                seq = c.rx_msg_base + dseq
                if seq > KEY_INT_MAX:
                    raise ProtocolViolation(f"message sequence number {seq} exceeds the bound 2^53")
                c.rx_msg_base = seq
                self._ack_in(c, p, rest)
                if p.inb.next_is_new():
                    # The ordering protocol checks the header before anything
                    # changes; only a frame it takes is counted, logged and acked.
                    try:
                        outs = self.ordering.receive(p.name, seq, header, payload, now)
                    except (TypeError, ValueError) as e:
                        raise ProtocolViolation(f"bad ordering header {_short(header)}: {e}") from None
                    p.inb.accept(now)
                    if self.durable:
                        self._out.append(Persist(["R", p.name, p.inb.peer_incarnation, p.inb.frontier,
                                                  seq, header, payload]))
                        self.undelivered[(p.name, seq)] = (header, payload)
                    self._ordering_outputs(outs, now)
                else:
                    p.inb.accept(now)
            elif kind == wire.ANNOUNCE or kind == wire.CTRL:
                if kind == wire.CTRL:
                    _, check, body, *rest = f
                    self._check(p, check)
                else:
                    _, body, *rest = f
                self._ack_in(c, p, rest)
                if kind == wire.CTRL and not p.inb.next_is_new():
                    p.inb.accept(now)
                    return
                try:
                    outs = self.ordering.control(p.name, body, now)
                except (TypeError, ValueError, KeyError, IndexError) as e:
                    raise ProtocolViolation(f"bad control body {_short(body)}: {e}") from None
                if kind == wire.CTRL:
                    p.inb.accept(now)
                    if self.durable:
                        self._out.append(Persist(["C", p.name, p.inb.peer_incarnation, p.inb.frontier,
                                                  wire.CTRL, body]))
                self._ordering_outputs(outs, now)
            elif kind == wire.HEARTBEAT:
                self._check(p, f[1])
                self._ack_in(c, p, f[2:])
            elif kind == wire.MISSED:
                _, check, body, *rest = f
                self._check(p, check)
                try:
                    missed = ranges.parse(body, KEY_INT_MAX)
                except ValueError as e:
                    raise ProtocolViolation(f"malformed MISSED frame: {e}") from None
                self._ack_in(c, p, rest)
                if p.inb.accept(now):
                    if self.durable:
                        self._out.append(Persist(["C", p.name, p.inb.peer_incarnation, p.inb.frontier,
                                                  wire.MISSED, missed]))
                    self._out.append(MissingNotice(p.name, tuple((a, b) for a, b in missed)))
            elif kind == wire.SYNC:
                start = f[1]
                if type(start) is not int or start < 1 or start > KEY_INT_MAX:
                    raise ProtocolViolation("malformed SYNC frame")
                p.inb.sync(start)
            elif kind == wire.BYE:
                reason = f[1] if len(f) > 1 else ""
                self._drop(c, f"{p.name} closed the connection: {reason}", now)
            elif kind == wire.HELLO:
                raise ProtocolViolation("second HELLO on an open connection")
            else:
                raise ProtocolViolation(f"unknown frame type {kind}")
        except (ValueError, IndexError, TypeError) as e:  # too few fields, wrong types
            raise ProtocolViolation(f"malformed {wire.FRAME_NAMES.get(kind, kind)} frame: {e}") from None

    def _check(self, p: _Peer, check: Any) -> None:
        if check != p.inb.expected % wire.CHECK_MOD:
            raise ProtocolViolation(f"stream check {check!r} != {p.inb.expected % wire.CHECK_MOD}: "
                                    "frames were lost inside the connection")

    def _ack_in(self, c: _Conn, p: _Peer, rest: list) -> None:
        if rest:
            delta = rest[0]
            if type(delta) is not int or delta < 0:
                raise ProtocolViolation("malformed ack")
            c.rx_ack_base += delta
            if c.rx_ack_base >= p.out.next_seq:
                raise ProtocolViolation(f"ack {c.rx_ack_base} for a frame never sent")
            if p.out.ack(c.rx_ack_base) and self.durable:
                self._out.append(Persist(["A", p.name, p.out.acked]))

    def _hello(self, c: _Conn, f: list, now: float) -> None:
        if len(f) >= 2 and f[1] != wire.PROTOCOL_VERSION:
            version = f[1]
            self._refuse(c, f"protocol version {version!r}, this server speaks {wire.PROTOCOL_VERSION}", now)
            return
        if len(f) != 10:
            raise ProtocolViolation("malformed HELLO")
        _, version, mission, site, incarnation, known_inc, frontier, boot, dial_seq, terms = f
        if mission != self.mission:
            self._refuse(c, f"wrong mission {mission!r} (this is {self.mission!r})", now)
            return
        if not isinstance(site, str) or site not in self.peers:
            self._refuse(c, f"unknown site {site!r}", now)
            return
        if c.dialed_peer is not None and site != c.dialed_peer:
            self._refuse(c, f"dialed {c.dialed_peer} but {site} answered", now)
            return
        if c.identity is not None and c.identity != (site, mission):
            self._refuse(c, f"HELLO claims site {site!r} but the certificate is for site "
                            f"{c.identity[0]!r} of mission {c.identity[1]!r}", now)
            return
        # After the identity check: with TLS, only the site itself can set what its refusal says.
        disagreement = self._disagreement(site, terms)
        if disagreement is not None:
            self._refuse(c, disagreement, now, peer=site)
            return
        if (type(incarnation) is not int or incarnation <= 0 or type(known_inc) is not int
                or type(frontier) is not int or frontier < 0 or type(boot) is not int
                or type(dial_seq) is not int):
            raise ProtocolViolation("malformed HELLO fields")
        p = self.peers[site]
        ours = known_inc == self.incarnation
        if ours and frontier > p.out.hwm:
            raise ProtocolViolation(f"HELLO frontier {frontier} is past the last frame {self.site} ever sent "
                                    f"to {site} ({p.out.hwm})")
        c.peer = site
        c.peer_boot = boot
        if c.dialed_peer is None:
            c.dial_seq = dial_seq
        # One connection per pair: prefer the one dialed by the site that sorts first.
        if p.conn is not None and p.conn != c.id:
            old = self.conns[p.conn]
            if not self._prefer(c, old):
                if c.dialed_peer is not None:
                    p.cm.dialing = False
                self._close(c, "duplicate connection: keeping the other one", bye=True)
                return
            self._close(old, "replaced by a newer connection", bye=True)
            p.conn = None
            # Not a broken connection: we closed it ourselves, so even the
            # baselines resend what they wrote to it (resume below).
            p.out.sent_upto = p.out.acked
        if c.dialed_peer is None:
            self._write(c, self._hello_frame(site))
        if incarnation != p.inb.peer_incarnation:
            if p.inb.peer_incarnation:
                self._out.append(Log("info", f"{site} restarted (incarnation {incarnation})"))
            p.inb.reset(incarnation)
            if self.durable:
                self._out.append(Persist(["I", site, incarnation]))
        c.open = True
        c.decoder.max_frame = self.settings.max_frame_bytes
        p.conn = c.id
        c.tx_ack_base = 0
        # The frontier lets us forget what the peer holds, but only a peer whose
        # identity is proven (a TLS certificate) may make us forget anything:
        # on a plaintext connection the stream restarts after the last
        # acknowledged frame and the peer drops what it already has.
        start = p.out.resume(frontier if ours and c.identity is not None else None)
        self._write(c, [wire.SYNC, start])
        self._effects(p, p.cm.handshake_completed(now), now)
        self._pump(p, now)
        # Best-effort state (clock announcements) sent on the old connection may
        # be lost: the ordering protocol re-sends it, after the resent frames.
        self._ordering_outputs(self.ordering.resync(site, now), now)

    def _prefer(self, new: _Conn, old: _Conn) -> bool:
        """Is connection ``new`` the one both ends keep over ``old``?"""
        if new.peer_boot != old.peer_boot:
            # The peer restarted since ``old`` was made: ``old`` is dead (its end
            # is gone), even if a silent link hid its reset from us.
            return new.peer_boot > old.peer_boot
        def dialer(c: _Conn) -> str:
            return self.site if c.dialed_peer is not None else c.peer  # type: ignore[return-value]
        dn, do = dialer(new), dialer(old)
        if dn == do:
            # The same site dialed twice: the later dial wins. Both ends compare
            # the dialer's own dial numbers, so they agree whatever the order in
            # which the two handshakes completed at each end.
            return new.dial_seq > old.dial_seq
        return dn < do

    def _refuse(self, c: _Conn, reason: str, now: float, peer: str | None = None) -> None:
        """Close a connection whose HELLO we cannot accept; ``peer``: the known site it came from."""
        p = self.peers.get(c.dialed_peer or peer or "")
        if p is not None:
            p.refused_connections += 1
            p.last_refusal = reason
        self._drop(c, f"refused: {reason}", now, bye=True)

    # -- channels ---------------------------------------------------------------
    def _send_frame(self, p: _Peer, frame: list, now: float) -> bool:
        """Write a frame on the peer's connection, piggybacking an ack."""
        if p.conn is None:
            return False
        c = self.conns[p.conn]
        inb = p.inb
        if inb.frontier > inb.acked_sent or (inb.frontier > c.tx_ack_base):
            frame.append(inb.frontier - c.tx_ack_base)
            c.tx_ack_base = inb.frontier
            inb.acked_sent = inb.frontier
            inb.unacked_since = None
        self._write(c, frame)
        p.cm.frame_sent(now)
        return True

    def _heartbeat(self, p: _Peer, now: float) -> None:
        self._send_frame(p, [wire.HEARTBEAT, (p.out.sent_upto + 1) % wire.CHECK_MOD], now)

    def _pump(self, p: _Peer, now: float) -> None:
        """Write whatever the peer's channel may send now.

        Robust channels keep writing to a silent connection: TCP queues it, and
        if the connection dies the frontier exchange resends exactly what was
        lost. Only the tcp-suspect baseline holds frames back while suspected.
        Best-effort announcements never overtake reliable frames this way.
        """
        if p.conn is None:
            p.out.drop_unsendable()
            return
        if p.out.mode == "tcp-suspect" and p.cm.tcp is not TcpState.CONNECTED:
            return
        frames = p.out.to_transmit()
        if not frames:
            return
        c = self.conns[p.conn]
        for f in frames:
            check = f.link_seq % wire.CHECK_MOD
            if f.kind == wire.DATA:
                frame = [wire.DATA, check, f.msg_seq - c.tx_msg_base, f.header, f.payload]
                c.tx_msg_base = f.msg_seq
            else:
                frame = [f.kind, check, f.payload]
            self._send_frame(p, frame, now)

    def _effects(self, p: _Peer, effects: list[Effect], now: float) -> None:
        for e in effects:
            if isinstance(e, StatusChange):
                status = e.status.value
                self._out.append(StatusChanged(p.name, status))
                self._ordering_outputs(self.ordering.set_status(p.name, status, now), now)
                if e.status is Status.CONNECTED and p.missed:
                    self._offer_missed(p, now)
            elif isinstance(e, TcpChange):
                if e.state is TcpState.CONNECTED:
                    p.cm.last_sent = now
                    self._pump(p, now)
            elif isinstance(e, SendHeartbeat):
                self._heartbeat(p, now)
            elif isinstance(e, CloseSocket):
                if p.conn is not None:
                    c = self.conns[p.conn]
                    p.conn = None
                    p.out.connection_lost()
                    self._out.append(Log("info", f"closing silent connection to {p.name}: {e.reason}"))
                    self._close(c, e.reason, bye=True)
            elif isinstance(e, DialPeer):
                self._out.append(Dial(p.name))

    def _offer_missed(self, p: _Peer, now: float) -> None:
        """Queue MISSED frames for what ``p`` will never get, each under the frame cap.

        What does not fit the outbound buffer waits for the next connection.
        """
        pending = p.missed
        taken = 0
        for chunk in ranges.chunks(pending, ranges.per_frame(self.settings.max_frame_bytes)):
            body = [list(r) for r in chunk]
            try:
                f = p.out.offer(wire.MISSED, 0, None, body)
            except ChannelFull:
                break
            taken += len(chunk)
            if self.durable:
                self._out.append(Persist(["O", p.name, f.link_seq, wire.MISSED, body]))
        p.missed = pending[taken:]
        self._pump(p, now)

    def _ordering_outputs(self, outputs: list, now: float) -> None:
        for o in outputs:
            if isinstance(o, Deliver):
                self.delivered_local += 1
                if self.durable:
                    self.undelivered.pop((o.origin, o.seq), None)
                if o.origin != self.site:
                    p = self.peers[o.origin]
                    p.delivered += 1
                    if o.late:
                        p.late += 1
                self._out.append(Delivered(o.origin, o.seq, tuple(o.key), o.late, o.payload))
            elif isinstance(o, SendControl):
                targets = o.to if o.to is not None else [
                    n for n, p in self.peers.items() if p.cm.status is not Status.DISCONNECTED]
                for name in targets:
                    p = self.peers[name]
                    if o.reliable:
                        try:
                            f = p.out.offer(wire.CTRL, 0, None, o.body)
                        except ChannelFull:
                            self._out.append(Log("warning", f"control to {name} dropped: buffer full"))
                            continue
                        if self.durable:
                            self._out.append(Persist(["O", name, f.link_seq, wire.CTRL, o.body]))
                        self._pump(p, now)
                    elif p.conn is not None:
                        self._send_frame(p, [wire.ANNOUNCE, o.body], now)
