"""Sessions: a connection's handshake, adopting it for its peer, and refusals (sans-IO).

Theory of operation (``rcm.wire.handshake`` holds the pure checks)
-------------------------------------------------------------
The dialer speaks first (``hello_frame``); the acceptor answers once it knows
who called. ``hello`` takes a peer's HELLO: refused (``rcm.wire.handshake.Refused``:
a BYE naming the reason, and no dialing of that peer until it dials), or
adopted: one connection per pair (the dialing rule keeps the one dialed by
the site that sorts first), the peer's stream recognised or started anew,
our stream resumed after what the peer holds (a HELLO's frontier counts only
on a connection a certificate proved: on plaintext the stream resumes after
the last acknowledged frame), and, right after the SYNC, an acknowledgement
of the peer's stream. After a double dial, or without a proven frontier, the
stream may wait for the peer's first acknowledgement before resending
(``OutboundChannel.hold``), so that nothing the peer took on the replaced
connection comes twice.

Trust: a frontier past the last frame we ever sent is a protocol violation.
"""
from __future__ import annotations

from typing import Any, Protocol

from contracts.mission import RcmSettings
from ordering.base import Output
from rcm import wire
from rcm.actions import Action, Log, Persist, ProtocolViolation
from rcm.channels.connections import Connections
from rcm.channels.layer import Channels
from rcm.channels.peer import Conn, Peer
from rcm.connman import Effect
from rcm.durability import records
from rcm.routing.router import Router
from rcm.wire import handshake


class SessionHooks(Protocol):
    """What a handshake asks of the stack that composes the layers."""

    def cm_effects(self, p: Peer, effects: list[Effect], now: float) -> None: ...
    def ordering_outputs(self, outputs: list[Output], now: float) -> None: ...
    def resync(self, peer: str, now: float) -> None: ...
    def close(self, c: Conn, reason: str, bye: bool, incompatible: bool = False) -> None: ...
    def drop(self, c: Conn, reason: str, now: float, bye: bool = False, incompatible: bool = False,
             level: str = "warning", replaced: bool = False) -> None: ...
    def detach(self, c: Conn, now: float, replaced: bool = False) -> None: ...
    def session_opened(self, p: Peer, now: float) -> None: ...


class Sessions:
    """Handshakes of one site's connections (see the module docstring)."""

    def __init__(self, site: str, mission: str, settings: RcmSettings, incarnation: int, boot: int,
                 terms: handshake.Terms, durable: bool, connections: Connections, channels: Channels,
                 router: Router, out: list[Action], hooks: SessionHooks) -> None:
        self.site = site
        self.mission = mission
        self.settings = settings
        self.incarnation = incarnation
        self.boot = boot
        self.terms = terms
        self.durable = durable
        self.connections = connections
        self.channels = channels
        self.peers = channels.peers
        self.router = router
        self.out = out
        self.hooks = hooks

    def hello_frame(self, peer: str, dial_seq: int = 0) -> list[Any]:
        inb = self.peers[peer].inb
        return handshake.hello_frame(self.mission, self.site, self.incarnation, inb.peer_incarnation,
                                     inb.frontier, self.boot, dial_seq, self.terms)

    def hello(self, c: Conn, f: list[Any], now: float) -> None:
        """A peer's HELLO on ``c``: refuse it, or adopt ``c`` for the peer (see the module docstring)."""
        got = handshake.check_hello(f, mission=self.mission, me=self.site, peers=list(self.peers),
                                    dialed=c.dialed_peer, identity=c.identity, terms=self.terms)
        if isinstance(got, handshake.Refused):
            self._refuse(c, got, now)
            return
        site = got.site
        p = self.peers[site]
        conns = self.connections
        ours = got.known_incarnation == self.incarnation
        if ours and got.frontier > p.out.hwm:
            raise ProtocolViolation(f"HELLO frontier {got.frontier} is past the last frame {self.site} ever sent "
                                    f"to {site} ({p.out.hwm})")
        c.peer = site
        c.peer_boot = got.boot
        if c.dialed_peer is None:
            c.dial_seq = got.dial_seq
        written = p.out.sent_upto       # the last frame of our stream written on the connection before
        replaced = False
        # One connection per pair: prefer the one dialed by the site that sorts first.
        if p.conn is not None and p.conn != c.id:
            old = conns[p.conn]
            if not handshake.keeps_new(self._candidate(c), self._candidate(old)):
                if c.dialed_peer is not None:
                    p.cm.dial_ended()
                self.out.append(Log("info", f"two connections with {site} at once: keeping the one "
                                            f"{old.dialer(self.site)} dialed"))
                self.hooks.close(c, wire.BYE_DUPLICATE, bye=True)
                return
            self.out.append(Log("info", f"two connections with {site} at once: keeping the one "
                                        f"{c.dialer(self.site)} dialed"))
            replaced = True
            self.hooks.close(old, wire.BYE_REPLACED, bye=True)
            p.conn = None
            # Not a broken connection: we closed it ourselves, so even the
            # baselines resend what they wrote to it (resume below).
            p.out.rewind()
        if c.dialed_peer is None:
            conns.write(c, self.hello_frame(site))
            conns.urgent(c.id)          # the dialer's side opens when it arrives: it never lingers
        if got.incarnation != p.inb.peer_incarnation:
            self.peer_stream(p, got.incarnation)
        c.open = True
        c.decoder.max_frame = self.settings.max_frame_bytes
        p.conn = c.id
        c.tx_ack_base = 0
        # A new connection: the peer's announcements start over (its SYNC says from which generation).
        p.relay.announce_gen, p.relay.peer_boot = None, got.boot
        ch = self.channels
        gen = ch.new_generation(p)
        # The frontier lets us forget what the peer holds, but only a peer whose
        # identity is proven (a TLS certificate) may make us forget anything:
        # on a plaintext connection the stream restarts after the last
        # acknowledged frame and the peer drops what it already has.
        proven = ours and c.identity is not None
        start = p.out.resume(got.frontier if proven else None)
        conns.write(c, [wire.SYNC, start, gen])
        c.tx_next = start
        # Say at once where we stand: our HELLO, if we dialed, is as old as the dial (and the peer
        # may be waiting for this, below).
        conns.write(c, [wire.HEARTBEAT, start % wire.CHECK_MOD, p.inb.frontier])
        c.tx_ack_base = p.inb.acknowledged()
        if written >= start and p.out.mode == "robust" and (replaced if c.dialed_peer is None else not proven):
            # We wrote frames from ``start`` on on the last connection, and the peer may hold some of
            # them that ``start`` does not count: a dialer wrote its HELLO when it dialed, maybe before
            # it took them on the connection we just replaced (both ends dialed at once); without a
            # proven frontier ``start`` follows our last acknowledgement. Resent now, they would come
            # twice: the stream waits for the peer's first acknowledgement here (an acceptor sends it
            # with its HELLO, a dialer one trip later) and goes on after it (``Channels.resume_held``).
            p.out.hold(now + self.settings.liveness_timeout)
        if self.settings.relaying:
            self.router.adopted(site, c.id)
        self.hooks.cm_effects(p, p.cm.handshake_completed(now), now)
        self.hooks.session_opened(p, now)       # latest wins: every live entry goes again (rcm.latest)
        ch.pump(p, now)
        # Best-effort state (clock announcements) sent on the old connection may
        # be lost: the ordering protocol re-sends it, after the resent frames.
        self.hooks.resync(site, now)

    def peer_stream(self, p: Peer, incarnation: int) -> None:
        """``p``'s reliable stream is a new one (it restarted without its log)."""
        if p.inb.peer_incarnation:
            self.out.append(Log("info", f"{p.name} restarted (incarnation {incarnation})"))
        p.inb.reset(incarnation)
        p.relay.announcement = None
        if self.durable:
            self.out.append(Persist(records.PeerStream(p.name, incarnation)))

    def refused_by_peer(self, c: Conn, reason: str, incompatible: bool, now: float) -> None:
        """A BYE before the HELLO: the peer refused our connection (``incompatible``: for good)."""
        why = reason.removeprefix("refused: ")
        who = c.dialed_peer or "the peer"
        if c.dialed_peer is not None:
            p = self.peers[c.dialed_peer]
            p.refused_us(f"{who} refused this site: {why}")
            # A peer of this version says when it is for good; an older one refuses
            # our version, and will as long as it runs.
            if incompatible or why.startswith("protocol version"):
                p.cm.hold_dials()
                why += f"; not dialing {who} until it dials {self.site}"
        routine = why in wire.ROUTINE_BYES and not incompatible
        self.hooks.drop(c, f"{who} refused the connection: {why}", now, level="info" if routine else "warning")

    def _candidate(self, c: Conn) -> handshake.Candidate:
        return handshake.Candidate(c.peer_boot, c.dialer(self.site), c.dial_seq)

    def _refuse(self, c: Conn, got: handshake.Refused, now: float) -> None:
        """Close a connection whose HELLO we cannot accept, and do not dial that peer again until it dials."""
        p = self.peers.get(c.dialed_peer or got.peer or got.claimed or "")
        reason = f"refused: {got.reason}"
        if p is None:
            self.hooks.drop(c, reason, now, bye=True, incompatible=True)
            return
        p.refused(got.reason)
        p.cm.hold_dials()
        last, at, since = p.refusal_log
        if last == got.reason and now < at + 60.0:
            # The same refusal again (an old peer redials every reconnect_period): once a minute.
            p.refusal_log = (last, at, since + 1)
        else:
            if since:
                reason_log = f"{reason} ({since} more refused since the last such line)"
            else:
                reason_log = f"{reason}; not dialing {p.name} until it dials {self.site}"
            p.refusal_log = (got.reason, now, 0)
            self.out.append(Log("warning", f"closing connection: {reason_log}"))
        self.hooks.close(c, reason, bye=True, incompatible=True)
        self.hooks.detach(c, now)
