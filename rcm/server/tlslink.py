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
"""
from __future__ import annotations

import ssl
from typing import Any


class TlsLink:
    """One connection's TLS, over memory BIOs (see the module docstring)."""

    __slots__ = ("obj", "_in", "_out", "done", "eof", "server_side")

    def __init__(self, ctx: ssl.SSLContext, server_side: bool, session: ssl.SSLSession | None = None) -> None:
        self._in = ssl.MemoryBIO()
        self._out = ssl.MemoryBIO()
        self.server_side = server_side
        self.obj = ctx.wrap_bio(self._in, self._out, server_side=server_side, session=session)
        self.done = False     # the handshake completed
        self.eof = False      # the peer closed its side of TLS (close_notify)

    def start(self) -> bytes:
        """The first flight (a dialer's ClientHello; nothing for an acceptor)."""
        self._handshake()
        return self._out.read()

    def feed(self, data: bytes) -> tuple[bytes, bytes]:
        """(application bytes, bytes to write) for ``data`` read from the socket; ``ssl.SSLError`` if the
        peer's TLS is refused (a bad certificate, a corrupt record)."""
        self._in.write(data)
        if not self.done:
            self._handshake()
        app: list[bytes] = []
        if self.done:
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
        return b"".join(app), self._out.read()

    def send(self, data: bytes) -> bytes:
        """The records carrying ``data``."""
        self.obj.write(data)
        return self._out.read()

    def end(self) -> None:
        """The connection is gone (or closing): keep its session resumable (see the module docstring)."""
        if not self.done:
            return
        try:
            self.obj.unwrap()     # marks the close_notify as sent; the bytes are never written
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
        return bool(self.obj.session_reused)

    @property
    def session(self) -> ssl.SSLSession | None:
        """The dialer's session, once it holds a ticket to resume it with (else None)."""
        s = self.obj.session
        return s if s is not None and s.has_ticket else None

    def identity(self) -> tuple[str, str] | None:
        """(CN, O) of the peer's certificate as verified (at this handshake, or at the one resumed)."""
        return peer_identity(self.obj.getpeercert())


def peer_identity(cert: dict[str, Any] | None) -> tuple[str, str] | None:
    """(CN, O) of a verified certificate as ``getpeercert()`` gives it, or None without one."""
    if not cert:
        return None
    fields = {k: v for rdn in cert.get("subject", ()) for k, v in rdn}
    return str(fields.get("commonName", "")), str(fields.get("organizationName", ""))
