"""TLS session resumption over memory BIOs (rcm.server.tlslink): fewer bytes, the same identities, and no
resumption with another site's session; a session outlives a cut link; real servers resume after one."""
from __future__ import annotations

import contextlib
import gc
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from rcm_certs import make_ca, write_site

from rcm.server.tls import tls_contexts
from rcm.server.tlslink import REFUSAL_LOG_EVERY, REFUSALS_KEPT, SiteTls, TlsLink


def handshake(client: ssl.SSLContext, server: ssl.SSLContext, session: ssl.SSLSession | None = None
              ) -> tuple[TlsLink, TlsLink, list[int]]:
    """Run a dialer's and an acceptor's TLS against each other; return them and the flights' sizes."""
    c, s = TlsLink(client, False, session), TlsLink(server, True)
    up, down = c.start(), b""
    flights = [len(up)]
    for _ in range(6):
        if up:
            _, down = s.feed(up)
            up = b""
            flights.append(len(down))
        if down:
            _, up = c.feed(down)
            down = b""
            if up:
                flights.append(len(up))
        if c.done and s.done and not up and not down:
            break
    assert c.done and s.done
    return c, s, flights


def test_a_reconnection_resumes_with_fewer_bytes_and_the_same_identities(contexts) -> None:
    a, b = contexts["A"], contexts["B"]
    c, s, full = handshake(a[1], b[0])
    assert not c.reused and c.session is not None
    assert s.identity() == ("A", "m") and c.identity() == ("B", "m")
    c2, s2, resumed = handshake(a[1], b[0], c.session)
    assert c2.reused and s2.reused
    # Resumed, the certificates verified at the first handshake still name the peers.
    assert s2.identity() == ("A", "m") and c2.identity() == ("B", "m")
    # No certificate flight either way: the acceptor's first flight and the dialer's second shrink.
    assert resumed[1] < full[1] / 3 and resumed[2] < full[2] / 5, (full, resumed)
    assert sum(resumed) < 0.7 * sum(full), (full, resumed)


def test_a_resumed_client_hello_carries_no_certificate(contexts) -> None:
    """Stateful tickets (rcm.server.tls): the acceptor keeps the session and the dialer's certificate, the
    ticket is an id, so the resumed ClientHello and the ticket are small; the identity is still the cert's."""
    a, b = contexts["A"], contexts["B"]
    c, s, full = handshake(a[1], b[0])
    assert full[0] < 200 and full[-1] < 100, full                # no padding; a 32-byte ticket id
    c2, s2, resumed = handshake(a[1], b[0], c.session)
    assert c2.reused and resumed[0] < 300 and resumed[-1] < 100, resumed
    assert s2.identity() == ("A", "m") and c2.identity() == ("B", "m")


def test_a_cut_connection_keeps_its_session_only_through_end(contexts) -> None:
    """OpenSSL forgets the session of a connection freed without close_notify (a cut link); ``end()`` keeps it."""
    a, b = contexts["A"], contexts["B"]
    c, s, _ = handshake(a[1], b[0])
    session = c.session
    del c, s                                   # freed without a shutdown, as after a cut
    c2, s2, _ = handshake(a[1], b[0], session)
    assert not c2.reused and s2.identity() == ("A", "m")       # a full handshake again
    assert c2.session is None                  # an offer the acceptor did not know brings no ticket
    c3, s3, _ = handshake(a[1], b[0])          # so the dialer offers nothing: a full handshake with a ticket
    session = c3.session
    assert session is not None
    c3.end()
    s3.end()
    del c3, s3
    c4, s4, _ = handshake(a[1], b[0], session)
    assert c4.reused and s4.identity() == ("A", "m")


def test_one_ticket_per_session_and_it_resumes_again(contexts) -> None:
    """A resumed handshake brings no new ticket (one flight less to the dialer) and the session resumes again."""
    a, b = contexts["A"], contexts["B"]
    c, s, full = handshake(a[1], b[0])
    c2, s2, resumed = handshake(a[1], b[0], c.session)
    assert full[3] > 0 and sum(resumed[3:]) == 0 and c2.reused, (full, resumed)
    c3, s3, _ = handshake(a[1], b[0], c2.session)
    assert c3.reused and s3.identity() == ("A", "m")


def test_the_client_hello_look_is_bounded_and_only_a_hint() -> None:
    from rcm.server.tlslink import client_hello_extensions, client_hello_offers_psk, record_end
    assert record_end(b"\x16\x03\x01") is None
    assert record_end(b"\x16\x03\x01\x00\x05abc") is None
    assert record_end(b"\x16\x03\x01\x00\x02abc") == 7
    assert record_end(b"GET / HTTP/1.1\r\n") == 16            # not TLS: handed to OpenSSL at once, to refuse
    assert record_end(b"\x16\x03\x01\xff\xff") == 5             # longer than any record: likewise
    for junk in (b"", b"\x16", b"\x16\x03\x01\x00\x01\x01", b"\x16\x03\x01\x00\x30\x01" + b"\xff" * 48):
        assert client_hello_offers_psk(junk) is False
        assert client_hello_extensions(junk) == {}


def test_the_client_hello_offers_x25519_alone_and_an_acceptor_takes_no_other_group(contexts) -> None:
    """One key-exchange group (rcm.server.tls): the supported_groups list names X25519 only, both in a full
    and a resumed ClientHello; a dialer that offers only another group is refused, not downgraded."""
    from rcm.server.tlslink import PRE_SHARED_KEY, client_hello_extensions
    a, b = contexts["A"], contexts["B"]
    full = client_hello_extensions(TlsLink(a[1], False).start())
    assert full[10] == bytes.fromhex("0002001d") and PRE_SHARED_KEY not in full     # supported_groups: x25519
    c, _, _ = handshake(a[1], b[0])
    resumed = client_hello_extensions(TlsLink(a[1], False, c.session).start())
    assert resumed[10] == bytes.fromhex("0002001d") and PRE_SHARED_KEY in resumed
    other = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    other.check_hostname, other.verify_mode = False, ssl.CERT_NONE
    other.minimum_version = ssl.TLSVersion.TLSv1_3
    other.set_ecdh_curve("prime256v1")
    dialer, acceptor = TlsLink(other, False), TlsLink(b[0], True)
    assert client_hello_extensions(hello := dialer.start())[10] == bytes.fromhex("00020017")
    with pytest.raises(ssl.SSLError):
        acceptor.feed(hello)


def test_the_client_hello_reader_survives_every_truncation_and_byte_flip(contexts) -> None:
    """Untrusted bytes (rcm.server.tlslink.client_hello_extensions): every prefix and every single-byte
    change of a real resumed ClientHello gives a dict of extensions read within the record, never an error."""
    import random

    from rcm.server.tlslink import client_hello_extensions, client_hello_offers_psk
    a, b = contexts["A"], contexts["B"]
    c, _, _ = handshake(a[1], b[0])
    hello = TlsLink(a[1], False, c.session).start()
    assert client_hello_offers_psk(hello)
    rng = random.Random(36)
    cases = [hello[:n] for n in range(len(hello))]
    for _ in range(2000):
        b2 = bytearray(hello)
        b2[rng.randrange(len(b2))] = rng.randrange(256)
        cases.append(bytes(b2))
    for case in cases:
        exts = client_hello_extensions(case)
        assert sum(4 + len(v) for v in exts.values()) <= len(case)
        assert client_hello_offers_psk(case) == (41 in exts)


def test_a_session_made_with_one_site_does_not_resume_with_another(contexts) -> None:
    a, b, c_ = contexts["A"], contexts["B"], contexts["C"]
    c, _, _ = handshake(a[1], b[0])
    # A offers its B session to C: C cannot read B's ticket, so a full handshake proves both again.
    c2, s2, _ = handshake(a[1], c_[0], c.session)
    assert not c2.reused and not s2.reused
    assert s2.identity() == ("A", "m") and c2.identity() == ("C", "m")


def test_another_sites_session_cannot_be_offered_at_all(contexts) -> None:
    a, b, c_ = contexts["A"], contexts["B"], contexts["C"]
    c, _, _ = handshake(a[1], b[0])
    # C holding A's session (as if it had stolen it) cannot present it from its own context.
    with pytest.raises(ValueError, match="different SSLContext"):
        TlsLink(c_[1], False, c.session)


def test_an_acceptor_that_restarted_makes_a_full_handshake(contexts) -> None:
    a, b = contexts["A"], contexts["B"]
    c, _, _ = handshake(a[1], b[0])
    # A restart makes new contexts, with new ticket keys: the old ticket is refused, certificates go again.
    restarted = tls_contexts(contexts["mission"], "B")   # type: ignore[arg-type]
    c2, s2, _ = handshake(a[1], restarted[0], c.session)
    assert not c2.reused and s2.identity() == ("A", "m")


def tls_mission(tmp_path: Path, rates: dict[str, dict[str, int]] | None = None) -> Any:
    """Sites A and B with mutual TLS and the tests' fast timeouts (``rates``: their ``[sites.X.rate]``)."""
    from contracts.mission import load_mission
    from faultinject.missions import write_mission

    m = load_mission(write_mission(tmp_path / "m.toml", "m", ["A", "B"], rcm={
        "tls": True, "heartbeat_timeout": 0.2, "liveness_timeout": 1.0, "silence_timeout": 2.0,
        "suspect_timeout": 30.0, "reconnect_period": 0.1}, rates=rates))
    ca = make_ca("m")
    for site in ("A", "B"):
        write_site(m.site_dir(site) / "tls", ca, site, "m")
    return m


def both_connected(a: Any, b: Any) -> bool:
    return bool(a.stack.statuses().get(b.site) == "connected" and b.stack.statuses().get(a.site) == "connected")


@contextlib.asynccontextmanager
async def running(*servers: Any) -> AsyncIterator[list[Any]]:
    """Start ``servers``; at the end stop every server the list then holds (a test may stop some, or add)."""
    started = list(servers)
    try:
        for srv in started:
            await srv.start()
        yield started
    finally:
        for srv in started:
            await srv.stop()


def cut(server: Any) -> None:
    """Reset every inter-site connection of ``server``: neither end sends close_notify."""
    for p in list(server._conns.values()):
        assert p.transport is not None
        p.transport.abort()


@pytest.mark.timeout(30)
async def test_servers_resume_after_their_connections_are_cut(tmp_path: Path) -> None:
    """Two real servers: the link is cut (connections reset, no close_notify) and the reconnection resumes."""
    from testkit import wait_until

    from rcm.server import RcmServer

    m = tls_mission(tmp_path)
    a, b = RcmServer(m, "A"), RcmServer(m, "B")

    def connected() -> bool:
        return both_connected(a, b)

    async with running(a, b):
        await wait_until(connected, "A and B connected")
        await wait_until(lambda: a.tls_sessions or b.tls_sessions, "a dialer holds a ticket")
        cut(a)
        await wait_until(lambda: not connected(), "the cut seen")
        gc.collect()                           # the cut connections' TLS objects are freed now, not later
        await wait_until(lambda: connected() and a.tls_handshakes["resumed"] and b.tls_handshakes["resumed"],
                         "A and B connected again on a resumed session")


def test_a_refusal_is_logged_once_a_minute_per_peer_and_reason_then_with_how_many_were_not() -> None:
    site = SiteTls(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER), ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT), lambda: 0.0)
    assert site.refusal_line("dialing C", "bad", 100.0) == "bad"
    assert site.refusal_line("dialing C", "bad", 100.3) is None            # C redials every 0.3 s
    assert site.refusal_line("dialing C", "bad", 100.6) is None
    assert site.refusal_line("dialing C", "other", 100.6) == "other"       # another reason: its own line
    assert site.refusal_line("dialing D", "bad", 100.6) == "bad"           # another peer too
    assert (site.refusal_line("dialing C", "bad", 100.0 + REFUSAL_LOG_EVERY)
            == "bad (2 more such refusals since the last such line)")


def test_refusals_from_many_addresses_are_remembered_within_a_bound() -> None:
    """Anyone reaching the port can send a bad handshake from a new address each time."""
    site = SiteTls(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER), ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT), lambda: 0.0)
    for i in range(3 * REFUSALS_KEPT):
        assert site.refusal_line(f"from 10.0.{i // 256}.{i % 256}", "bad", 100.0 + i * 0.001) == "bad"
        assert len(site.refusals) <= REFUSALS_KEPT
    # Past the minute, the old pairs make room at once, the new pair is logged and kept.
    assert site.refusal_line("dialing C", "bad", 100.0 + 2 * REFUSAL_LOG_EVERY) == "bad"
    assert list(site.refusals) == [("dialing C", "bad")]


def test_one_cipher_suite_and_few_signature_algorithms_shorten_every_handshake(contexts, monkeypatch) -> None:
    """rcm.server.tls.narrow: TLS_CHACHA20_POLY1305_SHA256 alone (no SHA-384 Finished or binder) and five signature
    algorithms; against contexts OpenSSL's defaults left, in the same run, every flight but the acceptor's
    ServerHello is shorter, and a narrowed site still resumes with one that was not (only bytes differ)."""
    from rcm.server import tls
    from rcm.server.tlslink import client_hello_extensions
    a, b = contexts["A"], contexts["B"]
    monkeypatch.setattr(tls, "narrow", lambda ctx: False)
    wide = {s: tls_contexts(contexts["mission"], s) for s in "AB"}       # type: ignore[arg-type]
    monkeypatch.undo()
    c, s, full = handshake(a[1], b[0])
    assert c.obj.cipher()[0] == s.obj.cipher()[0] == tls.CIPHER_SUITE
    _, _, resumed = handshake(a[1], b[0], c.session)
    cw, _, wide_full = handshake(wide["A"][1], wide["B"][0])
    assert cw.obj.cipher()[0] == "TLS_AES_256_GCM_SHA384"
    _, _, wide_resumed = handshake(wide["A"][1], wide["B"][0], cw.session)
    assert sum(wide_resumed) - sum(resumed) >= 70 and sum(wide_full) - sum(full) >= 70, (wide_resumed, resumed)
    assert len(client_hello_extensions(TlsLink(a[1], False, c.session).start())[13]) == 2 + 2 * 5
    # A narrowed dialer and an acceptor left wide agree (on the one suite both have) and resume.
    c2, s2, _ = handshake(a[1], wide["B"][0])
    c3, s3, _ = handshake(a[1], wide["B"][0], c2.session)
    assert c3.reused and s3.identity() == ("A", "m") and c3.obj.cipher()[0] == tls.CIPHER_SUITE


def test_a_full_handshake_sends_each_sites_certificate_without_the_mission_cas(contexts, monkeypatch) -> None:
    """rcm.server.tls.no_auto_chain: the peer verifies against the CA it holds (ca.pem), so the CA's certificate
    is not sent with ours; against contexts that send it, in the same run, the acceptor's flight and the dialer's
    certificate flight are each shorter by at least the CA's certificate, and the identities are as before."""
    from rcm.server import tls
    a, b = contexts["A"], contexts["B"]
    monkeypatch.setattr(tls, "no_auto_chain", lambda ctx: False)
    chained = {s: tls_contexts(contexts["mission"], s) for s in "AB"}       # type: ignore[arg-type]
    monkeypatch.undo()
    c, s, full = handshake(a[1], b[0])
    assert s.identity() == ("A", "m") and c.identity() == ("B", "m") and not c.reused
    _, _, sent_with_ca = handshake(chained["A"][1], chained["B"][0])
    ca = len(ssl.PEM_cert_to_DER_cert((contexts["mission"].site_dir("A") / "tls" / "ca.pem").read_text()))
    assert sent_with_ca[1] - full[1] >= ca and sent_with_ca[2] - full[2] >= ca, (sent_with_ca, full, ca)
    assert tls.no_auto_chain(ssl.create_default_context()) is True


def test_a_context_that_cannot_be_narrowed_keeps_the_defaults_and_says_so_once(monkeypatch, caplog) -> None:
    from rcm.server import tls
    monkeypatch.setattr(tls, "_libssl", lambda: None)
    tls._kept_defaults.cache_clear()
    ctx = ssl.create_default_context()
    before = ctx.get_ciphers()
    assert tls.narrow(ctx) is False and tls.narrow(ssl.create_default_context()) is False
    assert ctx.get_ciphers() == before
    assert sum("keep OpenSSL's default cipher suites" in r.getMessage() for r in caplog.records) == 1
    tls._kept_defaults.cache_clear()
