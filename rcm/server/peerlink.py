"""One inter-site TCP connection at the edge: TLS, compression and corked writes around the server's stack.

Theory of operation
-------------------
``PeerLink`` is the asyncio ``Protocol`` of one connection between RCM servers
(``rcm.server.process``). It owns what is the connection's alone: its TLS
session over memory BIOs (``rcm.server.tlslink``; the handshake, its timer
and the session tickets), the link codec (``rcm.wire.compress``) and the outbox
that corks the plaintext of one event-loop turn into one write
(``rcm.server.outbox``), and the lingering timer of a held write. What
concerns the site (the stack, the count of handshakes in progress against
``max_handshaking``, the sessions kept per peer to resume, the connections
table, the write scheduling, the pacer's accounting) it asks of its host,
the server, through ``PeerHost``: it never writes the server's fields. The
site's TLS contexts and the sessions it keeps to resume are
``rcm.server.tlslink.SiteTls``'s.

Byte order on the link: everything written goes through the outbox in the
order it is made; TLS flights and the codec's released bytes are socket bytes
made before anything still corked is encrypted (``Outbox.raw``/``coded``), so
the codec and TLS see the stack's plaintext in the order it is sent here.
What the server holds for the log's sync (``rcm.server.commits``) is sent here
only once released, so it is encoded in the order it is written.
"""
from __future__ import annotations

import asyncio
import logging
import ssl
import time
from typing import Any, Protocol, cast

from rcm import wire
from rcm.channels.pacing import LINGER_BYTES
from rcm.server.outbox import Outbox, WireMeter
from rcm.server.tlscontinue import FIRST_BYTE, RESUME_LEN, ContinuationError, read_answer, read_resume
from rcm.server.tlslink import SiteTls, TlsLink, refusal
from rcm.wire.compress import CompressionError, LinkCodec
from rcm.wire.handshake import CAP_TLS_CONTINUE

log = logging.getLogger("rcm")


class PeerHost(Protocol):
    """What a connection asks of the server it belongs to."""

    site: str
    tls: SiteTls | None          # with [rcm] tls: the contexts, the sessions to resume, the handshake counts
    meter: WireMeter
    compression: bool            # zstd offered in the HELLO
    tls_continue: bool           # [rcm] tls_continue: offered in the HELLO, cut connections parked on slow links
    hello_max_frame: int
    handshake_timeout: float

    def next_conn_id(self) -> int: ...

    def admit_handshake(self, peername: Any) -> bool:
        """An accepted connection starts its TLS handshake: False (refused, counted) past max_handshaking."""

    def handshake_ended(self) -> None:
        """An admitted handshake is over (either way)."""

    def link_established(self, link: PeerLink, identity: tuple[str, str] | None) -> None:
        """``link`` is ready for the stack (TLS done, or none)."""

    def link_received(self, link: PeerLink, data: bytes) -> None:
        """The stack's bytes from ``link``'s peer."""

    def link_lost(self, link: PeerLink, tell_stack: bool) -> None:
        """``link`` is gone (``tell_stack``: not closed by the stack's own decision)."""

    def dial_failed(self, peer: str) -> None: ...

    def slow_link(self, peer: str) -> bool:
        """Is the link to ``peer`` paced slower than ``rcm.connman.SLOW_LINK_BPS``?"""

    def want_flush(self, link: PeerLink, hold: float = 0.0) -> None:
        """``link`` corked bytes: call its ``flush`` (at the end of the turn, or after ``hold``)."""

    def link_wrote(self, link: PeerLink, sent: int, plain: int) -> None:
        """``link`` wrote ``sent`` socket bytes for ``plain`` of the stack's (its pacer's accounting)."""

    def who(self, link: PeerLink) -> str:
        """``link``'s peer as far as the stack knows it, for logs."""


class WriteTurns:
    """When the site's corked connections write: once per event-loop turn, each in one piece; or, for a write
    that may linger on a slow link, once its hold is up (``want_flush``). The server owns one."""

    __slots__ = ("_corked", "_handle")

    def __init__(self) -> None:
        self._corked: dict[int, PeerLink] = {}      # connections with bytes of this turn
        self._handle: asyncio.Handle | None = None

    def want_flush(self, link: PeerLink, hold: float = 0.0) -> None:
        """``link`` corked bytes this turn: write them at the start of the next loop iteration (once per turn),
        or, when they may wait ``hold`` seconds for more (a slow link, nothing urgent), once that is up unless
        something that may not wait comes first, or ``LINGER_BYTES`` are corked (nothing more to gain by waiting:
        a link draining a backlog would only idle)."""
        if hold > 0.0 and link.id not in self._corked and link.box.corked < LINGER_BYTES:
            link.linger(hold)
            return
        self._corked[link.id] = link
        if self._handle is None:
            self._handle = asyncio.get_running_loop().call_soon(self._flush_turn)

    def _flush_turn(self) -> None:
        self._handle = None
        corked, self._corked = self._corked, {}
        for link in corked.values():
            link.flush()


class PeerLink(asyncio.Protocol):
    """One inter-site TCP connection (see the module docstring)."""

    def __init__(self, server: PeerHost, dialed: str | None) -> None:
        self.server = server
        self.dialed = dialed
        self.id: int = server.next_conn_id()
        self.transport: asyncio.Transport | None = None
        self.closed_by_us = False
        self.ready = False
        self.tls: TlsLink | None = None          # with [rcm] tls: TLS over memory BIOs (rcm.server.tlslink)
        self.tls_timer: asyncio.TimerHandle | None = None
        self.upgrading = False                   # counted by the server (``admit_handshake``)
        self.ticketed: ssl.SSLSession | None = None
        self.offered = False                     # a dialer offered a session to resume
        # Continuing a parked TLS connection (rcm.server.tlscontinue): "dialer" from the RESUME until the
        # answer, "acceptor" while a RESUME comes in; its bytes so far.
        self.cont: str | None = None
        self._pre = bytearray()
        self.tls_broken = False                  # a record failed: this TLS can never be continued
        # Compression of the rest of the stream once both HELLOs offered it (rcm.wire.compress).
        self.codec = LinkCodec(server.compression, server.hello_max_frame,
                               extra_caps=CAP_TLS_CONTINUE if server.tls and server.tls_continue else 0)
        # What this turn writes, corked as plaintext and written once (rcm.server.outbox): after a TLS
        # handshake the last TLS flight and the first frames go in one segment.
        self.box = Outbox(self.codec, server.meter)
        self.lingering: asyncio.TimerHandle | None = None     # a held write's flush (``send``'s ``hold``)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # Not an isinstance check: uvloop's transports implement asyncio.Transport without subclassing it.
        self.transport = transport = cast(asyncio.Transport, transport)
        srv = self.server
        if not srv.tls:
            self._established(None)
            return
        if self.dialed is None:
            # A TLS handshake in progress counts against max_handshaking
            # like a connection waiting for its HELLO (the stack counts those).
            if not srv.admit_handshake(transport.get_extra_info("peername")):
                self.closed_by_us = True
                transport.abort()
                return
            self.upgrading = True
        self.tls_timer = asyncio.get_running_loop().call_later(srv.handshake_timeout, self._tls_timeout)
        parked = srv.tls.unpark(self.dialed) if self.dialed else None
        resume = parked.resume() if parked is not None else None
        if parked is not None and resume is not None:
            # The cut connection's TLS goes on over this one: RESUME, then wait for the acceptor's answer.
            self.tls = self.box.tls = parked
            self.cont = "dialer"
            self.box.raw(resume)
            self.flush()
            return
        if parked is not None:
            parked.end()
        self._tls_start()

    def _tls_start(self) -> None:
        """A TLS handshake on this connection (a dialer's first flight: its ClientHello)."""
        srv = self.server
        assert srv.tls is not None
        ctx = srv.tls.context(server_side=self.dialed is None)
        session = srv.tls.session(self.dialed) if self.dialed else None     # a resumable one, or none
        self.offered = session is not None
        try:
            self.tls = self.box.tls = TlsLink(ctx, server_side=self.dialed is None, session=session)
            first = self.tls.start()
        except ssl.SSLError as e:
            self._tls_refused(e)
            return
        if first:
            self.box.raw(first)
            self.flush()

    def _continuation(self, data: bytes) -> bytes | None:
        """``data`` while a continuation is being agreed: what follows it for TLS (None: nothing yet, or the
        connection is closing). A dialer reads the answer to its RESUME, an acceptor the RESUME."""
        srv = self.server
        assert srv.tls is not None and self.tls is not None
        self._pre += data
        if self.cont == "acceptor":
            try:
                asked = read_resume(self._pre)
            except ContinuationError:          # not ours after all: TLS refuses it
                rest, self._pre, self.cont = bytes(self._pre), bytearray(), None
                return rest
            if asked is None:
                return None
            rest, self._pre, self.cont = bytes(self._pre[RESUME_LEN:]), bytearray(), None
            reply, link = srv.tls.accept(asked)
            self.box.raw(reply)
            if link is None:             # NO: a TLS handshake follows on this connection
                self.flush()
                return rest
            self.tls = self.box.tls = link
            self._continued()
            return rest
        parked = self.tls
        try:
            got = read_answer(self._pre)
        except ContinuationError:
            # Not an answer (a TLS alert, say): forget the parked TLS, dial again as before.
            log.info("%s: %s did not continue our TLS connection; the next dial makes a handshake",
                     srv.site, self.dialed)
            self._continuation_failed(parked)
            return None
        if got is None:
            return None
        answer, n = got
        rest, self._pre, self.cont = bytes(self._pre[n:]), bytearray(), None
        if not answer.ok:
            log.info("%s: %s no longer holds our TLS connection (it restarted, or the connection is too old); "
                     "a handshake follows", srv.site, self.dialed)
            parked.end()
            self._tls_start()
            return rest
        resend = parked.answered(answer)
        if resend is None:
            log.info("%s: %s continued our TLS connection from a point we no longer hold; the next dial makes "
                     "a handshake", srv.site, self.dialed)
            self._continuation_failed(parked)
            return None
        self.box.raw(resend)
        self._continued()
        return rest

    def _continuation_failed(self, parked: TlsLink) -> None:
        parked.end()
        self.tls = self.box.tls = None
        self.cont = None
        self._tls_ended()
        self.closed_by_us = True
        if self.transport is not None:
            self.transport.abort()
        if self.dialed:
            self.server.dial_failed(self.dialed)

    def _continued(self) -> None:
        """The parked TLS goes on over this connection: for the stack, a connection whose TLS is up."""
        srv = self.server
        assert srv.tls is not None and self.tls is not None
        self._tls_ended()
        srv.tls.established("continued")
        identity = self.tls.identity()
        log.debug("%s: TLS with %s continued without a handshake", srv.site, identity[0] if identity else "?")
        self._established(identity)
        self.flush()

    def _tls_timeout(self) -> None:
        self.tls_timer = None
        if self.tls is not None and (not self.tls.done or self.cont is not None):
            self._tls_refused(TimeoutError(f"no TLS handshake within {self.server.handshake_timeout:g} s"))

    def _tls_ended(self) -> None:
        """The handshake is over, one way or the other: it no longer counts against max_handshaking."""
        if self.upgrading:
            self.upgrading = False
            self.server.handshake_ended()
        if self.tls_timer is not None:
            self.tls_timer.cancel()
            self.tls_timer = None

    def _tls_refused(self, e: BaseException) -> None:
        """A refused handshake is logged (each peer and reason at most once a minute: ``SiteTls.refusal_line``);
        the alert that says why goes to the peer; nothing else moves (a dialer's dial failed)."""
        srv = self.server
        self._tls_ended()
        peername = self.transport.get_extra_info("peername") if self.transport is not None else None
        who = f"dialing {self.dialed}" if self.dialed else f"from {peername[0] if peername else '?'}"
        reason = refusal(e, dialing=self.dialed is not None)
        line = srv.tls.refusal_line(who, reason, time.monotonic()) if srv.tls is not None else reason
        if line is not None:
            log.warning("%s: TLS handshake %s refused: %s", srv.site, who, line)
        self.closed_by_us = True
        alert = self.tls.pending() if self.tls is not None else b""
        if self.transport is not None:
            if alert and not self.transport.is_closing():
                self.transport.write(alert)       # then close: the alert goes out first
                self.transport.close()
            else:
                self.transport.abort()
        if self.dialed:
            srv.dial_failed(self.dialed)

    def _tls_received(self, data: bytes) -> bytes | None:
        """TLS records in, application bytes out (None: the connection is closing)."""
        tls = self.tls
        assert tls is not None and self.transport is not None
        srv = self.server
        site_tls = srv.tls
        assert site_tls is not None
        was_done = tls.done
        try:
            app, out = tls.feed(data)
        except ssl.SSLError as e:
            self.tls_broken = True
            if not was_done:
                self._tls_refused(e)
            else:
                self._protocol_error(f"TLS: {getattr(e, 'reason', None) or e}")
            return None
        if out:
            self.box.raw(out)
            self.server.want_flush(self)
        if self.dialed and self.ticketed is not tls.session and tls.session is not None:
            self.ticketed = tls.session
            site_tls.ticket(self.dialed, tls.session)      # resume with it next time
        if tls.done and not was_done:
            self._tls_ended()
            if self.dialed and self.offered and not tls.reused and tls.session is None:
                # The acceptor did not know our session (it restarted) and, as we offered one, sends no
                # ticket (rcm.server.tlslink): offer none next time, so that the next full handshake brings one.
                site_tls.ticket(self.dialed, None)
            site_tls.established("resumed" if tls.reused else "full")
            tls.born = site_tls.clock()
            identity = tls.identity()
            if identity is None:
                log.warning("%s: closing a connection %s without a peer certificate", srv.site,
                            self.transport.get_extra_info("peername"))
                self.close()
                return None
            log.debug("%s: TLS with %s: %s", srv.site, identity[0], "resumed" if tls.reused else "full handshake")
            self._established(identity)
        if tls.eof:
            self.flush()
            self.transport.close()
        return app

    def _established(self, identity: tuple[str, str] | None) -> None:
        self.ready = True
        self.server.link_established(self, identity)

    def data_received(self, data: bytes) -> None:
        tls = self.tls
        if (tls is not None and self.dialed is None and tls.rx == 0 and not self._pre and data[:1] == FIRST_BYTE
                and self.cont is None):
            self.cont = "acceptor"         # a RESUME, not a ClientHello (rcm.server.tlscontinue)
        if self.cont is not None:
            got = self._continuation(data)
            if not got or self.closed_by_us:
                return
            data = got
        if self.tls is not None:
            got = self._tls_received(data)
            if not got or not self.ready or self.closed_by_us:
                return
            data = got
        elif not self.ready:
            return
        self._from_peer(data)

    def _from_peer(self, data: bytes) -> None:
        try:
            plain, released = self.codec.receive(data)
        except CompressionError as e:
            self._protocol_error(str(e))
            return
        if released:
            self.box.coded(released)
            self.server.want_flush(self)
        if plain:
            self.server.link_received(self, plain)

    def send(self, data: bytes, hold: float = 0.0) -> None:
        """The stack's bytes for this connection: corked until the end of the turn (``flush``), or up to
        ``hold`` seconds on a slow link (``rcm.channels.connections``, "Lingering")."""
        self.box.send(data)
        self.server.want_flush(self, hold)

    def linger(self, hold: float) -> None:
        """Write what is corked ``hold`` seconds from now, unless a flush comes first (``WriteTurns``)."""
        if self.lingering is None:
            self.lingering = asyncio.get_running_loop().call_later(hold, self.flush)

    def flush(self) -> None:
        """Write what this turn corked, in one piece (also before we close)."""
        if self.lingering is not None:
            self.lingering.cancel()
            self.lingering = None
        if not self.box:
            return
        data = self.box.take()
        if data and self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)
            if self.ready:
                self.server.link_wrote(self, len(data), self.box.taken)

    def close(self) -> None:
        """Close the connection after what is written (or corked) for it."""
        self.closed_by_us = True
        self.flush()
        if self.transport is not None:
            self.transport.close()

    def _protocol_error(self, reason: str) -> None:
        """The peer's compressed stream is bad: what the stack does with a bad frame (BYE, close, logged)."""
        srv = self.server
        log.warning("%s: closing connection: protocol error from %s: %s", srv.site, srv.who(self), reason)
        self.send(wire.encode_frame([wire.BYE, f"protocol error: {reason}"[:200]]))
        self.close()
        srv.link_lost(self, tell_stack=True)

    def _continues(self, peer: str) -> bool:
        """Is this cut connection's TLS parked, to be continued by the next (rcm.server.tlscontinue)? Only on a slow
        link, with both ends offering it in their HELLOs on this connection (an earlier release takes a RESUME
        for a bad record), and only a TLS that is whole: no record failed, no close_notify."""
        assert self.tls is not None
        return (self.server.tls_continue and self.ready and not self.tls_broken and not self.tls.eof
                and bool(self.codec.peer_caps & CAP_TLS_CONTINUE) and self.server.slow_link(peer))

    def connection_lost(self, exc: Exception | None) -> None:
        if self.lingering is not None:
            self.lingering.cancel()
            self.lingering = None
        self.box.drop()
        srv = self.server
        tls = self.tls
        if self.cont == "dialer" and tls is not None and srv.tls is not None and self.dialed:
            srv.tls.park(self.dialed, tls)      # unanswered: still ours to continue (or to fall back from)
            self._tls_ended()
            if not self.closed_by_us:
                srv.dial_failed(self.dialed)
            return
        if tls is not None:
            peer = self.dialed or ((tls.identity() or ("",))[0] if tls.done else "")
            if srv.tls is not None and tls.done and peer and self._continues(peer):
                srv.tls.park(peer, tls)          # a slow link: continued on the next connection
            else:
                tls.end()        # a cut link still leaves the session resumable (rcm.server.tlslink)
                if srv.tls is not None and tls.done and peer:
                    srv.tls.forget(peer)     # a connection parked before no longer applies (the peer changed)
        if self.tls is not None and not self.tls.done and not self.closed_by_us:
            self._tls_refused(exc or ConnectionError("connection closed during the TLS handshake"))
            return
        self._tls_ended()
        self.server.link_lost(self, tell_stack=not self.closed_by_us)
