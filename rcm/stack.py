"""The whole RCM protocol stack of one site, sans-IO.

Theory of operation
-------------------
``SiteStack`` composes, bottom to top:

* socket channels: one TCP connection per peer at most, framed by ``rcm.wire``;
  a handshake (HELLO both ways, then SYNC; ``rcm.handshake``) identifies the
  peer, its incarnation, and where each direction's reliable stream resumes;
* the connection manager (``rcm.connman.PeerConnection`` per peer), which turns
  connection events and timers into the logical statuses connected /
  suspected / disconnected;
* point-to-point channels (``rcm.p2p``): robust, or one of the paper's baselines;
* multicast: a send is copied to the channel of every destination;
* intermittent global order: an ``ordering`` protocol decides when and how
  messages are delivered.

It never touches a socket or a clock. The edge (``rcm.server`` for real
sockets, ``faultinject.sim`` for the simulator) calls the event methods with
the current time and executes the returned actions (``rcm.actions``):
``Transmit`` bytes on a connection, ``Close`` it, ``Dial`` a peer, hand a
message up (``Delivery``), report a ``StatusChange`` or ``Missing`` messages,
``Persist`` a write-ahead log record (``rcm.records``) or ``Log`` a line.

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
``Missing`` event). Both carry inclusive ``[first, last]`` ranges of message
sequence numbers (``rcm.ranges``), split so that no frame passes
``max_frame_bytes``; the skipped numbers wait per peer as ranges too, at most
``MISSED_RANGES_MAX`` of them (past that the last one widens over the gap).

The stack changes its collaborators (connection manager, channels, ordering
protocol) only through their methods; the write-ahead log is read back by
``rcm.recovery`` and each collaborator restores its own part.
"""
from __future__ import annotations

from typing import Any, Hashable, Iterable, Sequence

from ordering import KEY_INT_MAX, ClockExhausted, Deliver, SendControl, make_protocol
from ordering.base import OrderingProtocol

from . import handshake, ranges, records, recovery, wire
from .actions import (Action, Backpressure, Close, Delivery, Dial, Log, Missing, Persist,
                      ProtocolViolation, SendError, SendRefused, SendResult, StatusChange, Transmit)
from .config import RcmSettings
from .connman import CloseSocket, DialPeer, Effect, PeerConnection, SendHeartbeat, Status, TcpChange, TcpState
from .connman import StatusChange as LogicalChange
from .p2p import ChannelFull, InboundChannel, OutboundChannel
from .peer import Conn, Peer

__all__ = ["SiteStack", "MISSED_RANGES_MAX", "Action", "Backpressure", "Close", "Delivery", "Dial", "Log",
           "Missing", "Persist", "ProtocolViolation", "SendError", "SendRefused", "SendResult",
           "StatusChange", "Transmit"]

MISSED_RANGES_MAX = 4096
"""Most separate ranges of skipped sends kept per peer (``rcm.ranges.add``)."""


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
        # Both ends dial at once: sites start in any order, and waiting would
        # only delay the first connection. A duplicate is resolved by the dialing rule.
        self.peers: dict[str, Peer] = {
            p: Peer(p, PeerConnection(p, settings, now, first_dial=now),
                    OutboundChannel(settings.p2p, settings.max_buffered_messages), InboundChannel())
            for p in peers
        }
        for p in peers:
            self.ordering.set_status(p, self.peers[p].cm.status.value, now)
        self.terms = handshake.Terms(self.ordering.name, settings.p2p, tuple(self.sites))
        self.conns: dict[Hashable, Conn] = {}
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
        self.hello_max_frame = handshake.frame_limit(mission, site, self.terms, settings.max_frame_bytes)
        self.handshakes_refused = 0
        self._handshake_log_at = float("-inf")
        self._handshake_log_count = 0

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
        c = Conn(conn, peer, wire.FrameDecoder(self.hello_max_frame), now, identity)
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
            self._drop(c, f"protocol error from {c.who()}: {e}", now, bye=True)
        return self._finish(now)

    def connection_lost(self, conn: Hashable, now: float) -> list[Action]:
        c = self.conns.pop(conn, None)
        if c is None:
            return []
        self._tx.pop(conn, None)
        self._detach(c, now)
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
            self._persist(records.LocalSend(seq, header, payload, links, tuple(skipped)))
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
            due = p.inb.ack_due()
            if p.conn is not None and due is not None and now >= due + self.settings.ack_interval:
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
            due = p.inb.ack_due()
            if p.conn is not None and due is not None:
                ds.append(due + self.settings.ack_interval)
        for c in self.conns.values():
            if not c.open:
                ds.append(c.opened_at + self.settings.handshake_timeout)
        d = self.ordering.next_deadline()
        if d is not None:
            ds.append(d)
        return min(ds) if ds else None

    # -- durability -------------------------------------------------------------
    def restore(self, log: Iterable[records.Record], now: float) -> list[Action]:
        """Rebuild state from the write-ahead log (see ``rcm.recovery``) before ``start``.

        Returns the deliveries of messages that were logged but not delivered
        before the restart (every peer is disconnected now, so they are
        delivered at once, in order-key order).
        """
        got = recovery.replay(log, self.site, list(self.peers), self.msg_seq, self.settings.max_frame_bytes)
        self.msg_seq = got.msg_seq
        for name, p in self.peers.items():
            st = got.peers[name]
            p.out.restore(st.acked, st.frames)
            if st.inbound is not None:
                p.inb.restore(*st.inbound)
            p.missed = ranges.cap(ranges.subtract(ranges.normalize(st.missed), ranges.normalize(st.missed_told)),
                                  MISSED_RANGES_MAX)
        if got.snapshot is not None:
            self.ordering.restore(got.snapshot)
        for item in got.inputs:
            try:
                if isinstance(item, recovery.MessageInput):
                    done = got.delivered.get((item.origin, item.seq))
                    if done is not None:
                        self.ordering.recovered(item.origin, item.seq, item.header, *done)
                        continue
                    outs = self.ordering.receive(item.origin, item.seq, item.header, item.payload, now)
                    self.undelivered[(item.origin, item.seq)] = (item.header, item.payload)
                else:
                    outs = self.ordering.control(item.peer, item.body, now)
            except (TypeError, ValueError, KeyError, IndexError) as e:
                # Logged before the ordering protocol checked what it takes
                # (an older version): the live path would have refused it.
                who = item.origin if isinstance(item, recovery.MessageInput) else item.peer
                self._out.append(Log("warning", f"log record from {who} skipped: the ordering "
                                                f"protocol refuses it: {e}"))
                continue
            keep = [o for o in outs if isinstance(o, Deliver) and (o.origin, o.seq) not in got.delivered]
            self._ordering_outputs(keep, now)
        self.ordering.flush(now)
        out, self._out = self._out, []
        return out

    def snapshot_records(self) -> list[records.Record]:
        """The live state as log records, for a compacted log (``rcm.wal``)."""
        recs: list[records.Record] = [records.Snapshot(self.ordering.snapshot(), self.msg_seq)]
        for (origin, seq), (header, payload) in self.undelivered.items():
            recs.append(records.Pending(origin, seq, header, payload))
        for name, p in self.peers.items():
            if p.inb.peer_incarnation:
                recs.append(records.InboundFrontier(name, p.inb.peer_incarnation, p.inb.frontier))
            recs.append(records.Acked(name, p.out.acked))
            for f in p.out.buffer:
                body = [f.msg_seq, f.header, f.payload] if f.kind == wire.DATA else f.payload
                recs.append(records.Outbound(name, f.link_seq, f.kind, body))
            if p.missed:
                recs.append(records.MissedSends(name, [list(r) for r in p.missed]))
        return recs

    # -- introspection --------------------------------------------------------
    def status(self, peer: str) -> str:
        return self.peers[peer].cm.status.value

    def statuses(self) -> dict[str, str]:
        return {p: self.peers[p].cm.status.value for p in self.peers}

    def vias(self) -> dict[str, str | None]:
        """Per peer, the next hop when only relays reach it (None: direct, or no path)."""
        return {p: None for p in self.peers}

    def stats(self) -> dict[str, Any]:
        return {"site": self.site, "incarnation": self.incarnation, "ordering": self.ordering.name,
                "p2p": self.settings.p2p, "msg_seq": self.msg_seq,
                "held_back": self.ordering.pending_count(), "delivered": self.delivered_local,
                "peers": {name: p.stats() for name, p in self.peers.items()}}

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

    def _persist(self, record: records.Record) -> None:
        self._out.append(Persist(record))

    def _write(self, c: Conn, frame: list) -> None:
        data = wire.encode_frame(frame)
        self._tx.setdefault(c.id, []).append(data)
        if c.peer is not None:
            p = self.peers[c.peer]
            p.bytes_out += len(data)
            p.frames_out += 1

    def _close(self, c: Conn, reason: str, bye: bool) -> None:
        if bye:
            self._write(c, [wire.BYE, reason[:200]])
        chunks = self._tx.pop(c.id, None)
        if chunks:
            self._out.append(Transmit(c.id, b"".join(chunks)))
        self._out.append(Close(c.id, reason))
        self.conns.pop(c.id, None)

    def _drop(self, c: Conn, reason: str, now: float, bye: bool = False) -> None:
        """Close a connection we decided to end, and tell the peer's machines."""
        self._out.append(Log("warning", f"closing connection: {reason}"))
        self._close(c, reason, bye)
        self._detach(c, now)

    def _detach(self, c: Conn, now: float) -> None:
        if c.peer is not None and self.peers[c.peer].conn == c.id:
            p = self.peers[c.peer]
            p.conn = None
            p.out.connection_lost()
            self._effects(p, p.cm.socket_error(now), now)
        elif not c.open and c.dialed_peer is not None:
            p = self.peers[c.dialed_peer]
            if p.conn is None:
                p.cm.dial_failed(now)

    def _refuse_handshake(self, c: Conn, now: float) -> None:
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

    def _hello_frame(self, peer: str, dial_seq: int = 0) -> list:
        inb = self.peers[peer].inb
        return handshake.hello_frame(self.mission, self.site, self.incarnation, inb.peer_incarnation,
                                     inb.frontier, self.boot, dial_seq, self.terms)

    # -- frames ---------------------------------------------------------------
    def _frame(self, c: Conn, f: list, now: float) -> None:
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
                    self.peers[c.dialed_peer].refused_us(f"{who} refused this site: {why}")
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
                    self._data(p, seq, header, payload, now)
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
                self._control(p, body, kind == wire.CTRL, now)
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
                        self._persist(records.ReceivedControl(p.name, p.inb.peer_incarnation, p.inb.frontier,
                                                              wire.MISSED, missed))
                    self._out.append(Missing(p.name, tuple((a, b) for a, b in missed)))
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

    def _data(self, p: Peer, seq: int, header: Any, payload: bytes, now: float) -> None:
        """A new DATA frame of ``p``'s stream: to the ordering protocol, then counted, logged, acked."""
        # The ordering protocol checks the header before anything changes; only
        # a frame it takes is counted, logged and acked.
        try:
            outs = self.ordering.receive(p.name, seq, header, payload, now)
        except (TypeError, ValueError) as e:
            raise ProtocolViolation(f"bad ordering header {_short(header)}: {e}") from None
        p.inb.accept(now)
        if self.durable:
            self._persist(records.Received(p.name, p.inb.peer_incarnation, p.inb.frontier, seq, header, payload))
            self.undelivered[(p.name, seq)] = (header, payload)
        self._ordering_outputs(outs, now)

    def _control(self, p: Peer, body: Any, reliable: bool, now: float) -> None:
        """A control body from ``p`` (a new reliable CTRL frame, or a best-effort announcement)."""
        try:
            outs = self.ordering.control(p.name, body, now)
        except (TypeError, ValueError, KeyError, IndexError) as e:
            raise ProtocolViolation(f"bad control body {_short(body)}: {e}") from None
        if reliable:
            p.inb.accept(now)
            if self.durable:
                self._persist(records.ReceivedControl(p.name, p.inb.peer_incarnation, p.inb.frontier,
                                                      wire.CTRL, body))
        self._ordering_outputs(outs, now)

    def _check(self, p: Peer, check: Any) -> None:
        if check != p.inb.expected % wire.CHECK_MOD:
            raise ProtocolViolation(f"stream check {check!r} != {p.inb.expected % wire.CHECK_MOD}: "
                                    "frames were lost inside the connection")

    def _ack_in(self, c: Conn, p: Peer, rest: list) -> None:
        if rest:
            delta = rest[0]
            if type(delta) is not int or delta < 0:
                raise ProtocolViolation("malformed ack")
            c.rx_ack_base += delta
            if c.rx_ack_base >= p.out.next_seq:
                raise ProtocolViolation(f"ack {c.rx_ack_base} for a frame never sent")
            if p.out.ack(c.rx_ack_base) and self.durable:
                self._persist(records.Acked(p.name, p.out.acked))

    def _hello(self, c: Conn, f: list, now: float) -> None:
        got = handshake.check_hello(f, mission=self.mission, me=self.site, peers=list(self.peers),
                                    dialed=c.dialed_peer, identity=c.identity, terms=self.terms)
        if isinstance(got, handshake.Refused):
            p = self.peers.get(c.dialed_peer or got.peer or "")
            if p is not None:
                p.refused(got.reason)
            self._drop(c, f"refused: {got.reason}", now, bye=True)
            return
        site = got.site
        p = self.peers[site]
        ours = got.known_incarnation == self.incarnation
        if ours and got.frontier > p.out.hwm:
            raise ProtocolViolation(f"HELLO frontier {got.frontier} is past the last frame {self.site} ever sent "
                                    f"to {site} ({p.out.hwm})")
        c.peer = site
        c.peer_boot = got.boot
        if c.dialed_peer is None:
            c.dial_seq = got.dial_seq
        # One connection per pair: prefer the one dialed by the site that sorts first.
        if p.conn is not None and p.conn != c.id:
            old = self.conns[p.conn]
            if not handshake.keeps_new(self._candidate(c), self._candidate(old)):
                if c.dialed_peer is not None:
                    p.cm.dial_ended()
                self._close(c, "duplicate connection: keeping the other one", bye=True)
                return
            self._close(old, "replaced by a newer connection", bye=True)
            p.conn = None
            # Not a broken connection: we closed it ourselves, so even the
            # baselines resend what they wrote to it (resume below).
            p.out.rewind()
        if c.dialed_peer is None:
            self._write(c, self._hello_frame(site))
        if got.incarnation != p.inb.peer_incarnation:
            if p.inb.peer_incarnation:
                self._out.append(Log("info", f"{site} restarted (incarnation {got.incarnation})"))
            p.inb.reset(got.incarnation)
            if self.durable:
                self._persist(records.PeerStream(site, got.incarnation))
        c.open = True
        c.decoder.max_frame = self.settings.max_frame_bytes
        p.conn = c.id
        c.tx_ack_base = 0
        # The frontier lets us forget what the peer holds, but only a peer whose
        # identity is proven (a TLS certificate) may make us forget anything:
        # on a plaintext connection the stream restarts after the last
        # acknowledged frame and the peer drops what it already has.
        start = p.out.resume(got.frontier if ours and c.identity is not None else None)
        self._write(c, [wire.SYNC, start])
        self._effects(p, p.cm.handshake_completed(now), now)
        self._pump(p, now)
        # Best-effort state (clock announcements) sent on the old connection may
        # be lost: the ordering protocol re-sends it, after the resent frames.
        self._ordering_outputs(self.ordering.resync(site, now), now)

    def _candidate(self, c: Conn) -> handshake.Candidate:
        return handshake.Candidate(c.peer_boot, c.dialer(self.site), c.dial_seq)

    # -- channels ---------------------------------------------------------------
    def _send_frame(self, p: Peer, frame: list, now: float) -> bool:
        """Write a frame on the peer's connection, piggybacking an ack."""
        if p.conn is None:
            return False
        c = self.conns[p.conn]
        inb = p.inb
        if inb.unacked() or inb.frontier > c.tx_ack_base:
            frame.append(inb.frontier - c.tx_ack_base)
            c.tx_ack_base = inb.acknowledged()
        self._write(c, frame)
        p.cm.frame_sent(now)
        return True

    def _heartbeat(self, p: Peer, now: float) -> None:
        self._send_frame(p, [wire.HEARTBEAT, (p.out.sent_upto + 1) % wire.CHECK_MOD], now)

    def _pump(self, p: Peer, now: float) -> None:
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

    def _effects(self, p: Peer, effects: list[Effect], now: float) -> None:
        for e in effects:
            if isinstance(e, LogicalChange):
                status = e.status.value
                self._out.append(StatusChange(p.name, status))
                self._ordering_outputs(self.ordering.set_status(p.name, status, now), now)
                if e.status is Status.CONNECTED and p.missed:
                    self._offer_missed(p, now)
            elif isinstance(e, TcpChange):
                if e.state is TcpState.CONNECTED:
                    p.cm.frame_sent(now)
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

    def _offer_missed(self, p: Peer, now: float) -> None:
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
                self._persist(records.Outbound(p.name, f.link_seq, wire.MISSED, body))
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
                self._out.append(Delivery(o.origin, o.seq, tuple(o.key), o.late, o.payload))
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
                            self._persist(records.Outbound(name, f.link_seq, wire.CTRL, o.body))
                        self._pump(p, now)
                    elif p.conn is not None:
                        self._send_frame(p, [wire.ANNOUNCE, o.body], now)
