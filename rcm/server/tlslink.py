"""TLS of one inter-site connection over memory BIOs, with session resumption (sans-IO).

Theory of operation
-------------------
asyncio's ``start_tls`` cannot resume a TLS session (Python 3.11 passes no
``session=`` to the ``SSLObject`` it makes), so the edge runs TLS itself:
``TlsLink`` wraps an ``ssl.SSLObject`` over two ``ssl.MemoryBIO``; ``start()``
gives the first flight (a dialer's ClientHello), ``feed(bytes)`` takes what
the socket read and returns (application bytes, bytes to write back), and
``send(bytes)`` the records for application bytes. Nothing here touches a
socket or a clock; the edge (``rcm.server.process``) keeps the handshake
timeout and the socket.

Resumption (TLS 1.3 session tickets). The acceptor issues one ticket after each
handshake (``tls_contexts``: ``num_tickets = 1``); the dialer keeps the newest
``ssl.SSLSession`` per peer it dialed (``session``, once it holds a ticket) and
offers it on its next dial of that peer only. A resumed handshake sends no
certificate and no CertificateVerify either way. The tickets are *stateful*
(``rcm.server.tls``): the acceptor keeps each session in its process's
session cache, including the dialer's certificate as it was verified at the
full handshake, and the ticket is only the session's 32-byte id, so a
resumed ClientHello is about 280 bytes (a stateless ticket carrying the
certificate made it about 830). ``getpeercert()`` returns the cached
certificate, and the dialer's session likewise holds the acceptor's; the
identity (CN, O) the HELLO must match is read from it exactly as after a full
handshake (``identity``). Resuming needs the session's secret (the PSK
binder), not only its id; a session lives in the acceptor that made it (a
restart empties the cache: a full handshake again), and the dialer offers a
session only to the peer it was made with (``SSLObject`` also refuses a
session of another context). Sessions live at most 2 hours (OpenSSL's
default), and a full handshake is made whenever one is refused.

A link cut ends a connection without TLS's close_notify, and OpenSSL then
drops the connection's session as "bad" (the acceptor's cache entry, and the
dialer's copy is marked not resumable) when the ``SSLObject`` is freed: a
rule of TLS 1.0 against truncation, which TLS 1.1 and later no longer require
(a truncated stream is detected by our frames, not by TLS). So the edge calls
``end()`` when a connection is gone: it marks TLS as shut down (its
close_notify is never sent) and the session stays resumable. A connection
that failed with a TLS error is not saved this way: OpenSSL forgets its
session at the error itself.

One ticket per session, not per connection. A resumed handshake would end
with a new ticket (79 bytes, in the flight that carries the acceptor's HELLO,
so 0.26 s at 2.4 kbit/s before the dialer's side opens), but a stateful
session resumes any number of times until it expires: the acceptor makes its
``SSLObject`` only once the ClientHello's first record is in
(``client_hello_offers_psk``, a bounded look at its extensions) and sets
``num_tickets`` (which OpenSSL copies when the object is made) to 0 when
the dialer offers a session, 1 otherwise. A dialer does not offer a session past its
lifetime (``resumable``); one whose session is refused anyway (the acceptor
restarted) makes a full handshake without a ticket, forgets the session
(``SiteTls``, the sessions a site keeps), and gets a ticket at its next, full, handshake. The look is
only a hint: OpenSSL parses and checks the ClientHello itself.

Continuation (slow links; ``rcm.server.tlscontinue``). A ``TlsLink`` counts the
TLS bytes it received (``rx``) and sent (``tx``) and keeps the last
``RING_BYTES`` it sent; ``token`` names its next continuation. On a link
paced slower than 64 kbit/s the edge parks a cut connection's ``TlsLink``
in ``SiteTls`` (``park``, one per peer) instead of ending it; the next
connection of the pair takes it back (``unpark`` when dialing,
``unpark_token`` when a RESUME comes in), resends what the peer missed
(``resend_from``) and goes on (``continue_with``), dropping the application
bytes the peer resends of the old connection (``discard_until``). A parked
connection is ended once it is replaced, taken past ``LIFETIME`` after its
handshake (``born``), or refused.

Refusals. A handshake that fails leaves OpenSSL's alert in the outgoing BIO
(``pending``): the edge writes it before closing, so the peer learns why
(an "unknown ca" alert for a certificate of another mission's CA) instead of
seeing a connection closed mid-handshake. ``refusal`` says both sides of it
in an operator's words; ``SiteTls.refusal_line`` logs each (peer, reason) at
most once a minute, since a dialer refused for a certificate redials every
``reconnect_period`` for as long as nobody fixes it.
"""
from __future__ import annotations

import hmac
import ssl
from collections import deque
from collections.abc import Callable

from rcm.server.tls import export_secret, peer_identity
from rcm.server.tlscontinue import (
    EXPORTER_LABEL,
    LIFETIME,
    NO,
    RING_BYTES,
    TOKEN_BYTES,
    Answer,
    Resume,
    answer_bytes,
    resume_bytes,
)

RECORD_MAX = 5 + (1 << 14) + 256      # a TLS record's header and its largest body
REFUSAL_LOG_EVERY = 60.0              # seconds between two log lines of one (peer, reason)
REFUSALS_KEPT = 256                   # (peer, reason) pairs remembered for that (each source address is one)
CERTS_HINT = ("every site's certificate must come from this mission's CA (`python -m deploy certs --mission "
              "FILE`, the same ca.pem at every site)")


class TlsLink:
    """One connection's TLS, over memory BIOs (see the module docstring)."""

    __slots__ = ("_obj", "_ctx", "_in", "_out", "_hello", "done", "eof", "server_side", "rx", "tx", "_ring",
                 "_ring_start", "_ring_bytes", "discard_until", "continued", "born")

    def __init__(self, ctx: ssl.SSLContext, server_side: bool, session: ssl.SSLSession | None = None) -> None:
        self._in = ssl.MemoryBIO()
        self._out = ssl.MemoryBIO()
        self._ctx = ctx
        self.server_side = server_side
        self._hello = bytearray()     # an acceptor's first bytes, until the ClientHello's first record is whole
        self._obj: ssl.SSLObject | None = None
        if not server_side:
            self._obj = ctx.wrap_bio(self._in, self._out, server_side=False, session=session)
        self.done = False     # the handshake completed
        self.eof = False      # the peer closed its side of TLS (close_notify)
        # The stream as a continuation sees it (rcm.server.tlscontinue): TLS bytes received and sent since the
        # start, the last RING_BYTES sent (whole writes, oldest first, from offset _ring_start), the peer's
        # stream offset below which application bytes belong to a connection before a continuation, how many
        # continuations this connection has made, and when its handshake completed (the edge's wall clock).
        self.rx = 0
        self.tx = 0
        self._ring: deque[bytes] = deque()
        self._ring_start = 0
        self._ring_bytes = 0
        self.discard_until = 0
        self.continued = 0
        self.born: float | None = None

    @property
    def obj(self) -> ssl.SSLObject:
        """The TLS connection (an acceptor's exists once the ClientHello's first record is in)."""
        if self._obj is None:
            raise ValueError("no ClientHello yet")
        return self._obj

    def start(self) -> bytes:
        """The first flight (a dialer's ClientHello; nothing for an acceptor)."""
        if self._obj is None:
            return b""
        self._handshake()
        return self._sent(self._out.read())

    def feed(self, data: bytes) -> tuple[bytes, bytes]:
        """(application bytes, bytes to write) for ``data`` read from the socket; ``ssl.SSLError`` if the
        peer's TLS is refused (a bad certificate, a corrupt record)."""
        if self.rx < self.discard_until and data:
            # The peer resends what we missed of the connection before a continuation: read, never delivered.
            n = min(len(data), self.discard_until - self.rx)
            self.rx += n
            self._in.write(data[:n])
            self._read_all()
            data = data[n:]
        self.rx += len(data)
        if self._obj is None:
            self._hello += data
            end = record_end(self._hello)
            if end is None:
                return b"", b""
            # One ticket per session (module docstring): OpenSSL reads num_tickets when the object is made.
            self._ctx.num_tickets = 0 if client_hello_offers_psk(bytes(self._hello[:end])) else 1
            self._obj = self._ctx.wrap_bio(self._in, self._out, server_side=True)
            data, self._hello = bytes(self._hello), bytearray()
        self._in.write(data)
        if not self.done:
            self._handshake()
        return self._read_all() if self.done else b"", self._sent(self._out.read())

    def _read_all(self) -> bytes:
        app: list[bytes] = []
        while True:
            try:
                chunk = self.obj.read(1 << 16)
            except ssl.SSLWantReadError:
                break
            except ssl.SSLZeroReturnError:
                self.eof = True
                break
            if not chunk:
                break
            app.append(chunk)
        return b"".join(app)

    def pending(self) -> bytes:
        """What TLS still has to write: after a refused handshake, the alert that tells the peer why."""
        return self._out.read()

    def send(self, data: bytes) -> bytes:
        """The records carrying ``data``."""
        self.obj.write(data)
        return self._sent(self._out.read())

    def _sent(self, data: bytes) -> bytes:
        """``data`` leaves for the socket: counted, and kept among the last ``RING_BYTES`` sent."""
        if data:
            self.tx += len(data)
            self._ring.append(data)
            self._ring_bytes += len(data)
            while self._ring_bytes - len(self._ring[0]) >= RING_BYTES:
                old = self._ring.popleft()
                self._ring_bytes -= len(old)
                self._ring_start += len(old)
        return data

    def resend_from(self, rx: int) -> bytes | None:
        """What we sent from offset ``rx`` of our stream on (the peer received up to there), or None when that is
        no longer kept or more than we sent (no continuation then)."""
        if rx < self._ring_start or rx > self.tx:
            return None
        return b"".join(self._ring)[rx - self._ring_start:]

    def token(self) -> bytes | None:
        """The token of this connection's next continuation (rcm.server.tlscontinue), None if it has none."""
        if not self.done or self._obj is None:
            return None
        return export_secret(self._obj, self._ctx, EXPORTER_LABEL, self.continued.to_bytes(8, "big"), TOKEN_BYTES)

    def continue_with(self, peer_tx: int) -> None:
        """Continued on a new socket: the peer sent ``peer_tx`` bytes before it, whose application bytes are the
        old connection's (read and dropped as they come again), and the next continuation has the next token."""
        self.discard_until = peer_tx
        self.continued += 1

    def resume(self) -> bytes | None:
        """A dialer's RESUME for this parked connection, or None if it has no token (no continuation)."""
        token = self.token()
        return None if token is None else resume_bytes(token, self.rx, self.tx)

    def answered(self, answer: Answer) -> bytes | None:
        """The acceptor said OK: what we resend before anything new (and the stream goes on), or None when we no
        longer hold what it missed (no continuation: dial again)."""
        resend = self.resend_from(answer.rx)
        if resend is not None:
            self.continue_with(answer.tx)
        return resend

    def end(self) -> None:
        """The connection is gone (or closing): keep its session resumable (see the module docstring)."""
        if not self.done or self._obj is None:
            return
        try:
            self._obj.unwrap()     # marks the close_notify as sent; the bytes are never written
        except (ssl.SSLError, ValueError):
            pass

    def _handshake(self) -> None:
        try:
            self.obj.do_handshake()
        except ssl.SSLWantReadError:
            return
        self.done = True

    @property
    def reused(self) -> bool:
        """Was the session resumed (no certificates exchanged)?"""
        return self._obj is not None and bool(self._obj.session_reused)

    @property
    def session(self) -> ssl.SSLSession | None:
        """The dialer's session, once it holds a ticket to resume it with (else None)."""
        s = self._obj.session if self._obj is not None else None
        return s if s is not None and s.has_ticket else None

    def identity(self) -> tuple[str, str] | None:
        """(CN, O) of the peer's certificate as verified (at this handshake, or at the one resumed)."""
        return peer_identity(self._obj.getpeercert()) if self._obj is not None else None


class SiteTls:
    """A site's TLS between sites: its two contexts, the newest session made with each peer it dialed (to
    resume on the next dial), and how many handshakes were full or resumed (the ``tls_handshakes`` stats)."""

    def __init__(self, server: ssl.SSLContext, client: ssl.SSLContext, clock: Callable[[], float]) -> None:
        self._server = server
        self._client = client
        self.clock = clock
        self.sessions: dict[str, ssl.SSLSession] = {}
        self.parked: dict[str, TlsLink] = {}     # peer -> the TLS of its cut connection, to continue (tlscontinue)
        self.handshakes = {"full": 0, "resumed": 0, "continued": 0}
        self.refusals: dict[tuple[str, str], tuple[float, int]] = {}   # (who, reason) -> (logged at, since then)

    def context(self, server_side: bool) -> ssl.SSLContext:
        return self._server if server_side else self._client

    def session(self, peer: str) -> ssl.SSLSession | None:
        """The session to offer when dialing ``peer`` (None: a full handshake)."""
        session = self.sessions.get(peer)
        if session is not None and not resumable(session, self.clock()):
            del self.sessions[peer]     # expired: a full handshake, which brings a new ticket
            session = None
        return session

    def ticket(self, peer: str, session: ssl.SSLSession | None) -> None:
        """Resume with ``session`` when dialing ``peer`` next (None: offer none)."""
        if session is None:
            self.sessions.pop(peer, None)
        else:
            self.sessions[peer] = session

    def established(self, how: str) -> None:
        """A connection's TLS is up: ``how`` is "full", "resumed" (a handshake each) or "continued" (none)."""
        self.handshakes[how] += 1

    def park(self, peer: str, link: TlsLink) -> None:
        """Keep the TLS of ``peer``'s cut connection, to continue it on the next (rcm.server.tlscontinue); one
        per peer, the newest. A connection past ``LIFETIME`` or without a token is ended instead."""
        old = self.parked.pop(peer, None)
        if old is not None and old is not link:
            old.end()
        if self._fresh(link) and link.token() is not None:
            self.parked[peer] = link
        else:
            link.end()

    def unpark(self, peer: str) -> TlsLink | None:
        """The parked TLS to continue when dialing ``peer`` (taken: in use until parked again), or None."""
        link = self.parked.pop(peer, None)
        if link is not None and not self._fresh(link):
            link.end()
            return None
        return link

    def forget(self, peer: str) -> None:
        """Nothing of ``peer``'s is to be continued any more (its newest connection could not be parked)."""
        link = self.parked.pop(peer, None)
        if link is not None:
            link.end()

    def accept(self, asked: Resume) -> tuple[bytes, TlsLink | None]:
        """An acceptor's answer to ``asked`` and the parked TLS that goes on over its connection: OK, our counts
        and what the dialer missed, or NO and None (a TLS handshake follows on that connection)."""
        found = self.unpark_token(asked.token)
        if found is None:
            return NO, None
        link = found[1]
        resend = link.resend_from(asked.rx)
        if resend is None:
            link.end()
            return NO, None
        out = answer_bytes(Answer(True, link.rx, link.tx)) + resend
        link.continue_with(asked.tx)
        return out, link

    def unpark_token(self, token: bytes) -> tuple[str, TlsLink] | None:
        """The parked TLS whose next continuation ``token`` names, with its peer (taken), or None."""
        for peer, link in self.parked.items():
            mine = link.token()
            if mine is not None and hmac.compare_digest(mine, token):
                return (peer, link) if self.unpark(peer) is link else None
        return None

    def _fresh(self, link: TlsLink) -> bool:
        return link.born is not None and self.clock() < link.born + LIFETIME

    def refusal_line(self, who: str, reason: str, now: float) -> str | None:
        """The log line for a refused handshake (``who``: the peer dialed, or the address it came from), or None
        while the same one was logged less than ``REFUSAL_LOG_EVERY`` ago (then counted, and the next line says
        how many). ``now``: a monotonic clock."""
        key = (who, reason)
        at, since = self.refusals.get(key, (float("-inf"), 0))
        if now < at + REFUSAL_LOG_EVERY:
            self.refusals[key] = (at, since + 1)
            return None
        if key not in self.refusals and len(self.refusals) >= REFUSALS_KEPT:
            # Handshakes from many addresses (anyone reaching the port) must not grow this: forget the pairs
            # whose minute is over (they would be logged again anyway), else the oldest.
            for old in [k for k, (t, _) in self.refusals.items() if now >= t + REFUSAL_LOG_EVERY] or \
                    [next(iter(self.refusals))]:
                del self.refusals[old]
        self.refusals[key] = (now, 0)
        return reason + (f" ({since} more such refusals since the last such line)" if since else "")


def refusal(e: BaseException, dialing: bool) -> str:
    """Why a handshake failed, in an operator's words (``dialing``: this site dialed)."""
    if isinstance(e, ssl.SSLCertVerificationError):
        whose = "its" if dialing else "the dialer's"
        return f"{whose} certificate is not accepted: {e.verify_message}; {CERTS_HINT}"
    reason = getattr(e, "reason", None) or str(e) or type(e).__name__
    if isinstance(e, ssl.SSLError) and reason.startswith(("TLSV1_ALERT_", "SSLV3_ALERT_")):
        alert = reason.split("_ALERT_", 1)[1].lower().replace("_", " ")
        return f"the peer refused the handshake (TLS alert: {alert}), most likely this site's certificate; {CERTS_HINT}"
    return reason


def resumable(session: ssl.SSLSession, now: float) -> bool:
    """May a dialer still offer ``session`` at wall-clock ``now`` (its lifetime, 2 hours, not over)?"""
    return now < session.time + session.timeout


def record_end(buf: bytes | bytearray) -> int | None:
    """Where the first TLS record of ``buf`` ends (None: not all in yet). A header no handshake record has
    ends it at once: OpenSSL refuses it."""
    if len(buf) < 5:
        return None
    if buf[0] != 22 or 5 + int.from_bytes(buf[3:5], "big") > RECORD_MAX:
        return len(buf)
    end = 5 + int.from_bytes(buf[3:5], "big")
    return end if len(buf) >= end else None


def client_hello_extensions(record: bytes) -> dict[int, bytes]:
    """The extensions (type: body) of the ClientHello in this TLS record; {} for anything else (another
    message, a malformed or split ClientHello). Every read is bounded by the record."""
    exts: dict[int, bytes] = {}
    try:
        if record[0] != 22 or record[5] != 1:
            return {}
        p = 5 + 4 + 2 + 32                                 # record header, handshake header, version, random
        p += 1 + record[p]                                  # legacy session id
        p += 2 + int.from_bytes(record[p:p + 2], "big")     # cipher suites
        p += 1 + record[p]                                  # compression methods
        end = min(len(record), p + 2 + int.from_bytes(record[p:p + 2], "big"))
        p += 2
        while p + 4 <= end:
            n = int.from_bytes(record[p + 2:p + 4], "big")
            exts[int.from_bytes(record[p:p + 2], "big")] = record[p + 4:min(end, p + 4 + n)]
            p += 4 + n
    except IndexError:
        return {}
    return exts


PRE_SHARED_KEY = 41     # the ClientHello extension that offers a session


def client_hello_offers_psk(record: bytes) -> bool:
    """Does this TLS record hold a ClientHello offering a session (a pre_shared_key extension)? Anything
    else (another message, a malformed or split ClientHello) is False."""
    return PRE_SHARED_KEY in client_hello_extensions(record)
