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
certificate and no CertificateVerify either way: the acceptor decrypts the
ticket (its keys live in its process: a restart means a full handshake again),
which holds the session it made at the full handshake, including the
dialer's certificate as it was verified then; ``getpeercert()`` returns that
certificate, and the dialer's session likewise holds the acceptor's. The
identity (CN, O) the HELLO must match is read from it exactly as after a full
handshake (``identity``). A ticket is bound to the acceptor that issued it
(no other site can decrypt it) and only proves that the dialer holds the
resumption secret of a session in which it proved its certificate; the
dialer offers a session only to the peer it was made with (``SSLObject``
also refuses a session of another context). Tickets live at most 2 hours
(OpenSSL's default), and a full handshake is made whenever one is refused.
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
