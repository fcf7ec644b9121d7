"""Mutual TLS between the sites of a mission: contexts, and the identity a certificate proves.

Each site reads ``<data_dir>/<site>/tls/ca.pem``, ``cert.pem`` and ``key.pem``
(made by ``python -m deploy certs``). A site certificate's CN is the site's
name and its O the mission's; the HELLO must claim exactly that (``rcm.wire.handshake``).
The edge runs TLS over memory BIOs so that a reconnection resumes the session
(``rcm.server.tlslink``).

Small handshakes (issue 36: a 2.4 kbit/s link carries 300 bytes a second). The
acceptor keeps its sessions in its own memory (OpenSSL's session cache; TLS 1.3
*stateful* tickets, ``OP_NO_TICKET``): the ticket a dialer holds is a 32-byte
session id, not an encrypted copy of the session with the dialer's certificate
in it (about 550 bytes more in every resumed ClientHello). CPython gives every
context a session id context, so the cache resumes, and it returns the
certificate verified at the full handshake (``getpeercert()``) as before.
The ClientHello also goes without the extensions TLS 1.3 never uses between
our sites: no padding to 512 bytes (an old middlebox workaround), no TLS 1.2
session ticket, encrypt-then-MAC or extended master secret extension. Its
key-exchange group list names X25519 alone (``set_ecdh_curve``, which sets
OpenSSL's group list to that one group): the group OpenSSL's default list
offered first and every handshake between our sites used anyway, so 18 bytes
less in every ClientHello and the same strength; a peer offering only
another group is refused.

One TLS 1.3 cipher suite, TLS_CHACHA20_POLY1305_SHA256 (a 256-bit key, as
the AES-256 suite OpenSSL chose before, with a SHA-256 handshake hash; RFC
8439's AEAD, in every TLS 1.3 library), and a short list of signature algorithms
(``SIGNATURE_ALGORITHMS``: SHA-256 and SHA-384 ECDSA, which the mission's
P-256 certificates use, Ed25519 and the SHA-256 RSA ones) instead of
OpenSSL's 15: with SHA-384 out of the handshake each Finished and the PSK
binder are 16 bytes shorter, and the ClientHello's suite and signature lists
22 bytes (a resumed reconnection 70 bytes shorter in all, 0.23 s at 2.4
kbit/s: docs/rcm.md, "TLS resumption on slow links"). Python's ``ssl`` names
neither setting (``set_ciphers`` is TLS 1.2's), so ``narrow`` calls OpenSSL's
own ``SSL_CTX_set_ciphersuites`` and ``SSL_CTX_set1_sigalgs_list`` on the
context through ctypes, with the ``SSL_CTX`` pointer CPython keeps first in
its context object; it checks that pointer against the context's options
before it uses it and reads the result back (``get_ciphers``). Where any of
that fails, the context keeps OpenSSL's defaults (only bytes differ: every
peer still agrees on a suite) and the server says so once.
"""
from __future__ import annotations

import asyncio
import ctypes
import logging
import ssl
from functools import cache
from pathlib import Path
from typing import Any

from contracts.mission import Mission

# OpenSSL option bits Python's ssl module does not name (OpenSSL 3.0 values).
OP_NO_EXTENDED_MASTER_SECRET = 0x1
OP_TLSEXT_PADDING = 0x10          # in OP_ALL, which Python sets: pads a ClientHello of 256-511 bytes to 512
OP_NO_ENCRYPT_THEN_MAC = 0x80000
KEY_EXCHANGE_GROUP = "X25519"     # the only (EC)DHE group offered and accepted between sites
CIPHER_SUITE = "TLS_CHACHA20_POLY1305_SHA256"     # the only TLS 1.3 suite offered and accepted (``narrow``)
SIGNATURE_ALGORITHMS = "ECDSA+SHA256:ECDSA+SHA384:ed25519:RSA-PSS+SHA256:RSA+SHA256"
SSL_CTRL_SET_SIGALGS_LIST = 98    # OpenSSL's SSL_CTX_set1_sigalgs_list is this SSL_CTX_ctrl
SSL_CTRL_MODE = 33                # and SSL_CTX_set_mode / SSL_CTX_get_mode (larg 0) this one
SSL_MODE_NO_AUTO_CHAIN = 0x8      # send the chain cert.pem holds, not one built from the trust store

log = logging.getLogger("rcm")


class TlsError(Exception):
    """TLS is on but the site's certificates are missing or unusable."""


def tls_paths(mission: Mission, site: str) -> dict[str, Path]:
    """The site's certificate, key and mission CA (made by ``python -m deploy certs``); RCM and the chat
    server both read them from here."""
    d = mission.site_dir(site) / "tls"
    return {"ca": d / "ca.pem", "cert": d / "cert.pem", "key": d / "key.pem"}


def tls_contexts(mission: Mission, site: str) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """(server, client) contexts for mutual TLS with the mission CA.

    Both sides present their site certificate and require the peer's, signed
    by the mission CA. Host names are not checked by TLS: the peer's site and
    mission are read from its certificate (CN, O) and must match its HELLO.
    """
    paths = tls_paths(mission, site)
    for path in paths.values():
        if not path.exists():
            raise TlsError(f"tls = true but {path} is missing (create certificates with "
                           f"`python -m deploy certs --mission {mission.path or 'FILE'}`)")
    try:
        server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(paths["ca"]))
        server.verify_mode = ssl.CERT_REQUIRED
        server.load_cert_chain(str(paths["cert"]), str(paths["key"]))
        client = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(paths["ca"]))
        client.check_hostname = False
        client.verify_mode = ssl.CERT_REQUIRED
        client.load_cert_chain(str(paths["cert"]), str(paths["key"]))
    except (ssl.SSLError, OSError) as e:
        raise TlsError(f"cannot load TLS material from {paths['cert'].parent}: {e}") from None
    for ctx in (server, client):
        # Every site runs this code: TLS 1.3 only (a ClientHello without the TLS 1.2 suites and
        # extensions is about 290 bytes shorter), and without the middlebox compatibility mode (a
        # 32-byte legacy session id each way and a ChangeCipherSpec record each way).
        ctx.minimum_version = ssl.TLSVersion.TLSv1_3
        ctx.options &= ~(ssl.OP_ENABLE_MIDDLEBOX_COMPAT | OP_TLSEXT_PADDING)
        # TLS 1.2 extensions a TLS 1.3-only ClientHello need not carry (12 bytes).
        ctx.options |= OP_NO_EXTENDED_MASTER_SECRET | OP_NO_ENCRYPT_THEN_MAC
        # One key-exchange group, the one every handshake used (its key share was the only one sent):
        # a supported_groups list of 1 instead of 10 (18 bytes).
        ctx.set_ecdh_curve(KEY_EXCHANGE_GROUP)
        narrow(ctx)
        no_auto_chain(ctx)
    # Stateful TLS 1.3 tickets: the acceptor keeps the session (with the dialer's certificate) in its
    # memory and gives the dialer a 32-byte id (see the module docstring). The client context's
    # OP_NO_TICKET only drops the empty TLS 1.2 session ticket extension; it still takes TLS 1.3 tickets.
    server.options |= ssl.OP_NO_TICKET
    client.options |= ssl.OP_NO_TICKET
    # One resumption ticket per handshake (rcm.server.tlslink): a dialer keeps only the newest.
    server.num_tickets = 1
    return server, client


@cache
def _libssl() -> Any:
    """OpenSSL's functions ``narrow`` calls, from the libssl CPython's ``_ssl`` is linked with; None if absent."""
    try:
        import _ssl
        lib = ctypes.CDLL(_ssl.__file__)
        lib.SSL_CTX_get_options.argtypes = [ctypes.c_void_p]
        lib.SSL_CTX_get_options.restype = ctypes.c_uint64
        lib.SSL_CTX_set_ciphersuites.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        lib.SSL_CTX_set_ciphersuites.restype = ctypes.c_int
        lib.SSL_CTX_ctrl.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_long, ctypes.c_char_p]
        lib.SSL_CTX_ctrl.restype = ctypes.c_long
        lib.SSL_get_SSL_CTX.argtypes = [ctypes.c_void_p]
        lib.SSL_get_SSL_CTX.restype = ctypes.c_void_p
        lib.SSL_is_server.argtypes = [ctypes.c_void_p]
        lib.SSL_is_server.restype = ctypes.c_int
        lib.SSL_export_keying_material.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t,
                                                   ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p,
                                                   ctypes.c_size_t, ctypes.c_int]
        lib.SSL_export_keying_material.restype = ctypes.c_int
        return lib
    except (OSError, AttributeError):
        return None


@cache
def _kept_defaults() -> None:
    """Said once per process: ``narrow`` could not narrow a context."""
    log.warning("TLS handshakes keep OpenSSL's default cipher suites and signature algorithms (this Python "
                "gives no way to set them): about 80 bytes more per handshake, nothing else changes")


def narrow(ctx: ssl.SSLContext) -> bool:
    """One TLS 1.3 cipher suite and a short list of signature algorithms on ``ctx`` (the module docstring);
    False where that cannot be done (said once in the log; the context then offers OpenSSL's defaults)."""
    lib, ptr = _libssl(), _ctx_checked(ctx)
    ok = (ptr is not None
          and lib.SSL_CTX_set_ciphersuites(ptr, CIPHER_SUITE.encode()) == 1
          and lib.SSL_CTX_ctrl(ptr, SSL_CTRL_SET_SIGALGS_LIST, 0, SIGNATURE_ALGORITHMS.encode()) == 1
          and [c["name"] for c in ctx.get_ciphers() if c["protocol"] == "TLSv1.3"] == [CIPHER_SUITE])
    if not ok:
        _kept_defaults()
    return ok


def _ctx_pointer(ctx: ssl.SSLContext) -> int | None:
    """The ``SSL_CTX`` CPython keeps first in its context object, right after the object header."""
    return ctypes.c_void_p.from_address(id(ctx) + object.__basicsize__).value


def _ctx_checked(ctx: ssl.SSLContext) -> int | None:
    """``ctx``'s ``SSL_CTX`` to set something on through OpenSSL, once the options read through it are the
    context's; None where OpenSSL cannot be reached or the pointer is not that."""
    lib = _libssl()
    ptr = _ctx_pointer(ctx) if lib is not None else None
    return ptr if ptr and lib.SSL_CTX_get_options(ptr) == ctx.options else None


def export_secret(obj: ssl.SSLObject, ctx: ssl.SSLContext, label: bytes, context: bytes, n: int) -> bytes | None:
    """``n`` bytes of TLS's exporter (RFC 8446 section 7.5) for ``obj``'s connection, made with ``ctx``, once its
    handshake is done: secret to anyone without the connection's keys, the same at both ends. Python's ``ssl``
    does not offer it; OpenSSL's ``SSL_export_keying_material`` is called on the ``SSL`` CPython keeps in the
    object's ``_sslobj`` after the socket it names, checked to be ``ctx``'s and on ``obj``'s side first. None
    where that cannot be done (then nothing relies on it: ``rcm.server.tlscontinue``)."""
    lib = _libssl()
    inner = getattr(obj, "_sslobj", None)
    if lib is None or inner is None:
        return None
    ptr = ctypes.c_void_p.from_address(id(inner) + object.__basicsize__ + ctypes.sizeof(ctypes.c_void_p)).value
    if not ptr or lib.SSL_get_SSL_CTX(ptr) != _ctx_pointer(ctx) or lib.SSL_is_server(ptr) != int(obj.server_side):
        return None
    out = ctypes.create_string_buffer(n)
    if lib.SSL_export_keying_material(ptr, out, n, label, len(label), context, len(context), 1) != 1:
        return None
    return out.raw


def no_auto_chain(ctx: ssl.SSLContext) -> bool:
    """Our certificate goes alone (with whatever chain cert.pem holds), not with the mission CA's certificate that
    OpenSSL otherwise adds from the trust store: every site holds that CA already (ca.pem) and verifies against it,
    so it was 400-odd bytes each way of every full handshake for nothing (about 1.5 s of a first connection at 2.4
    kbit/s). An operator's chain with intermediates, kept in cert.pem, is still sent whole. False where OpenSSL
    cannot be reached (the CA's certificate then goes as before)."""
    lib, ptr = _libssl(), _ctx_checked(ctx)
    if ptr is None:
        return False
    mode = lib.SSL_CTX_ctrl(ptr, SSL_CTRL_MODE, SSL_MODE_NO_AUTO_CHAIN, None)
    return bool(mode & SSL_MODE_NO_AUTO_CHAIN)


def certificate_identity(transport: asyncio.BaseTransport) -> tuple[str, str] | None:
    """(CN, O) of the peer's verified certificate, or None without TLS."""
    return peer_identity(transport.get_extra_info("peercert"))


def peer_identity(cert: dict[str, Any] | None) -> tuple[str, str] | None:
    """(CN, O) of a verified certificate as ``getpeercert()`` gives it, or None without one."""
    if not cert:
        return None
    fields = {k: v for rdn in cert.get("subject", ()) for k, v in rdn}
    return str(fields.get("commonName", "")), str(fields.get("organizationName", ""))
