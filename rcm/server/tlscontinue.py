"""A TLS connection that outlives its TCP connection on a slow link: continuation without a handshake (sans-IO).

Theory of operation
-------------------
On a 2.4 kbit/s link even a resumed TLS 1.3 handshake is four flights and
about 650 bytes with both HELLOs: 3.4 s from SYN to open (docs/rcm.md, "TLS
resumption on slow links"). XMPP over HF (XEP-0361) resumes a link without a
handshake at all; this does the same for our TLS. When a connection on a
link paced slower than ``rcm.connman.SLOW_LINK_BPS`` is cut, each end *parks* its TLS
connection (its ``ssl.SSLObject``, keys and record counters) instead of
closing it (``Parked``, kept by ``rcm.server.tlslink.SiteTls``). The next
TCP connection between the two sites, whichever dials, opens with a
cleartext ``RESUME`` naming the parked connection by a token; the acceptor
answers ``OK`` and both carry on the same TLS stream on the new socket. The
RCM stack above sees a new connection as always (its HELLOs, its resend
from the frontier, a new compression context): only the handshake is gone.
Four flights remain (RESUME, OK, the dialer's HELLO, the acceptor's) and
about 240 bytes.

The stream's bytes. TLS records carry sequence numbers: a receiver cannot
skip a record it never got. So each end counts the TLS bytes it has sent
(``tx``) and received (``rx``) since the connection's handshake, and keeps
its last ``RING_BYTES`` sent (``TlsLink``'s ring). ``RESUME`` and ``OK``
each carry the sender's ``rx`` and ``tx``: each end resends what the other
did not receive (a record cut in half included) before anything new, and
discards the application bytes of everything the other sent before the cut
(``discard_until``): those belonged to the old connection, whose frames the
stack resends from its frontier anyway, and the new connection's
compression context could not read them. A peer whose ``rx`` is older than
the ring, or newer than what was sent, cannot be continued with.

Tokens. A token is 16 bytes of TLS's exporter (RFC 8446 section 7.5,
``rcm.server.tls.export_secret``) for the connection and its number of
continuations so far (``continued``): both ends derive it, nobody without
the connection's secrets can, and it changes with every continuation, so a
token seen on the link is worth nothing afterwards. It is sent in the clear:
someone on the path who sees one may race the real dialer with it, and then
fails at the first record (AEAD) and the link falls back to a handshake,
which someone on the path can force anyway. A token never authenticates
anything: every byte after ``OK`` is a record of the old connection's keys.

Falling back. Everything that does not match falls back to today's
handshake, never to a wrong stream: an acceptor that does not know the
token (it restarted, its parked connection expired, it is using it itself)
answers ``NO`` and a TLS handshake follows on the same connection; a dialer
whose ``RESUME`` gets anything but an answer forgets the parked connection
and dials again. Only a connection whose peer's HELLO offered continuation
(``rcm.wire.handshake.CAP_TLS_CONTINUE``) is parked: an earlier release,
which would take a ``RESUME`` for a bad TLS record, never gets one. If an ``OK`` is lost with its
connection, the acceptor has counted a continuation the dialer has not: the
tokens differ from then on and the next ``RESUME`` gets ``NO``. A parked
connection lives at most ``LIFETIME`` after its handshake (the life of a
session ticket), so keys are renewed by a handshake at least that often.
"""
from __future__ import annotations

from dataclasses import dataclass

RING_BYTES = 1 << 16      # TLS bytes each end keeps to resend: at 2.4 kbit/s, 3.6 minutes of the link
LIFETIME = 7200.0         # seconds after its handshake a connection may still be continued (a ticket's life)
TOKEN_BYTES = 16
EXPORTER_LABEL = b"EXPORTER-rcm-continuation"

RESUME = b"RCMr"          # + token + rx + tx: a dialer continues the connection the token names
OK = b"RCMo"              # + rx + tx: continued; the stream goes on after this
NO = b"RCMn"              # unknown token: a TLS handshake follows on this connection
RESUME_LEN = 4 + TOKEN_BYTES + 8 + 8
OK_LEN = 4 + 8 + 8
FIRST_BYTE = RESUME[:1]   # never a TLS record's first byte (22, a handshake), so an acceptor tells them apart


@dataclass(frozen=True, slots=True)
class Resume:
    """A dialer's RESUME: the token of the connection to continue, and how far its stream got both ways."""

    token: bytes
    rx: int       # TLS bytes the dialer received from us
    tx: int       # TLS bytes the dialer sent us


@dataclass(frozen=True, slots=True)
class Answer:
    """An acceptor's answer: ``ok`` with its own counts, or not (a handshake follows)."""

    ok: bool
    rx: int = 0
    tx: int = 0


class ContinuationError(ValueError):
    """Bytes that are not what the other end of a continuation should have sent."""


def resume_bytes(token: bytes, rx: int, tx: int) -> bytes:
    if len(token) != TOKEN_BYTES:
        raise ValueError("a continuation token is 16 bytes")
    return RESUME + token + rx.to_bytes(8, "big") + tx.to_bytes(8, "big")


def answer_bytes(answer: Answer) -> bytes:
    return OK + answer.rx.to_bytes(8, "big") + answer.tx.to_bytes(8, "big") if answer.ok else NO


def read_resume(buf: bytes | bytearray) -> Resume | None:
    """The RESUME at the start of ``buf`` (None: not all in yet); ``ContinuationError`` if it is not one."""
    if buf[:len(RESUME)] != RESUME[:len(buf)]:
        raise ContinuationError("not a RESUME")
    if len(buf) < RESUME_LEN:
        return None
    return Resume(bytes(buf[4:4 + TOKEN_BYTES]), int.from_bytes(buf[20:28], "big"),
                  int.from_bytes(buf[28:36], "big"))


def read_answer(buf: bytes | bytearray) -> tuple[Answer, int] | None:
    """The answer at the start of ``buf`` and its length (None: not all in yet); ``ContinuationError`` for
    anything else (a TLS alert, say)."""
    head = bytes(buf[:4])
    if len(head) < 4:
        if not (OK.startswith(head) or NO.startswith(head)):
            raise ContinuationError("not an answer to RESUME")
        return None
    if head == NO:
        return Answer(False), 4
    if head != OK:
        raise ContinuationError("not an answer to RESUME")
    if len(buf) < OK_LEN:
        return None
    return Answer(True, int.from_bytes(buf[4:12], "big"), int.from_bytes(buf[12:20], "big")), OK_LEN
