"""TLS continued across TCP connections on a slow link (rcm.server.tlscontinue): the stream goes on where each end
stopped, what was lost in the cut is resent and never delivered, tokens change with every continuation, and
everything that does not match falls back to a handshake; real servers on a paced link continue after a cut."""
from __future__ import annotations

import asyncio
import gc
import os
from pathlib import Path
from typing import Any

import pytest
from test_tls_resumption import both_connected, cut, handshake, running, tls_mission

from rcm.server.tls import export_secret
from rcm.server.tlscontinue import (
    EXPORTER_LABEL,
    LIFETIME,
    NO,
    OK_LEN,
    RESUME_LEN,
    RING_BYTES,
    Answer,
    ContinuationError,
    answer_bytes,
    read_answer,
    read_resume,
    resume_bytes,
)
from rcm.server.tlslink import SiteTls, TlsLink

SLOW = {"A": {"B": 9600}, "B": {"A": 9600}}      # paced below rcm.connman.SLOW_LINK_BPS: TLS is continued


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def sites(contexts: dict[str, Any], clock: Clock) -> tuple[SiteTls, SiteTls]:
    return SiteTls(*contexts["A"], clock), SiteTls(*contexts["B"], clock)


def connected(contexts: dict[str, Any], clock: Clock) -> tuple[TlsLink, TlsLink]:
    c, s, _ = handshake(contexts["A"][1], contexts["B"][0])
    c.born = s.born = clock()
    return c, s


def park(site_a: SiteTls, site_b: SiteTls, a_end: TlsLink, b_end: TlsLink) -> None:
    """The cut: each site parks its end of the connection to continue it."""
    site_a.park("B", a_end)
    site_b.park("A", b_end)


def go_on(site_d: SiteTls, site_a: SiteTls, dialer_peer: str) -> tuple[TlsLink, TlsLink, bytes, bytes]:
    """One continuation as the edge makes it: the dialer's RESUME, the acceptor's answer and resend, the dialer's
    resend. Returns both links and what each end's resend put on the new connection."""
    d = site_d.unpark(dialer_peer)
    assert d is not None and (wire := d.resume()) is not None
    asked = read_resume(wire)
    assert asked is not None
    answer_wire, a = site_a.accept(asked)
    assert a is not None
    got = read_answer(answer_wire)
    assert got is not None and got[1] == OK_LEN
    d_resend = d.answered(got[0])
    assert d_resend is not None
    return d, a, answer_wire[OK_LEN:], d_resend


def test_the_stream_goes_on_where_each_end_stopped_and_what_the_cut_lost_is_never_delivered(contexts) -> None:
    clock = Clock()
    site_a, site_b = sites(contexts, clock)
    c, s = connected(contexts, clock)
    assert s.feed(c.send(b"before"))[0] == b"before" and c.feed(s.send(b"back"))[0] == b"back"
    # The cut: half of A's next record reached B, all of B's next record was lost.
    half = c.send(b"old frame of A, half delivered")
    s.feed(half[:len(half) // 2])
    s.send(b"old frame of B, lost")
    park(site_a, site_b, c, s)
    token = c.token()
    assert token == s.token() and token is not None and len(token) == 16
    d, a, a_resend, d_resend = go_on(site_a, site_b, "B")
    assert d is c and a is s
    assert len(d_resend) == len(half) - len(half) // 2      # the rest of the half-delivered record
    assert a_resend and a_resend != b""                      # B's whole lost record
    # The resent bytes are read and dropped: they were the old connection's.
    assert a.feed(d_resend) == (b"", b"") and d.feed(a_resend) == (b"", b"")
    # New bytes on the continued stream arrive as they are, both ways.
    assert a.feed(d.send(b"HELLO from A"))[0] == b"HELLO from A"
    assert d.feed(a.send(b"HELLO from B"))[0] == b"HELLO from B"


def test_seeded_cuts_anywhere_in_either_direction_deliver_every_old_byte_at_most_once_and_every_new_one(
        contexts) -> None:
    """Forty cuts at seeded random byte positions, each direction cut on its own (a record cut in half, whole
    records lost, nothing lost), either site dialing: what reached the peer before the cut is delivered once and
    in order, nothing of the old connection after the cut is ever delivered, and the first bytes written after
    each continuation arrive whole, both ways. The resends' sizes are exactly what each end missed."""
    import random
    rng = random.Random(36)
    clock = Clock()
    site_a, site_b = sites(contexts, clock)
    c, s = connected(contexts, clock)
    ends = {"A": c, "B": s}
    for k in range(40):
        got: dict[str, bytes] = {}
        for src, dst in (("A", "B"), ("B", "A")):
            writes = [f"{src}{k}.{i}|".encode() for i in range(rng.randint(0, 4))]
            wire = b"".join(ends[src].send(w) for w in writes)
            cut_at = rng.randint(0, len(wire))
            delivered = ends[dst].feed(wire[:cut_at])[0]
            assert b"".join(writes).startswith(delivered)          # in order, a prefix: whole records only
            got[dst] = delivered
        park(site_a, site_b, ends["A"], ends["B"])
        dialer = rng.choice("AB")
        acceptor = "B" if dialer == "A" else "A"
        missed_by = {d: ends["A" if d == "B" else "B"].tx - ends[d].rx for d in "AB"}
        d, a, a_resend, d_resend = go_on(site_a if dialer == "A" else site_b, site_b if dialer == "A" else site_a,
                                         acceptor)
        assert d is ends[dialer] and a is ends[acceptor]
        assert len(d_resend) == missed_by[acceptor] and len(a_resend) == missed_by[dialer]
        # What the cut lost comes again and is read, never delivered; it may arrive in pieces.
        for link, resend in ((a, d_resend), (d, a_resend)):
            split = rng.randint(0, len(resend))
            assert link.feed(resend[:split])[0] == b"" and link.feed(resend[split:])[0] == b""
        for src, dst in (("A", "B"), ("B", "A")):
            fresh = f"new {k} from {src}".encode()
            assert ends[dst].feed(ends[src].send(fresh))[0] == fresh
    assert c.continued == s.continued == 40


def test_resent_and_new_bytes_in_one_read_deliver_only_the_new(contexts) -> None:
    clock = Clock()
    site_a, site_b = sites(contexts, clock)
    c, s = connected(contexts, clock)
    c.send(b"lost one")
    c.send(b"lost two")
    park(site_a, site_b, c, s)
    d, a, _, d_resend = go_on(site_a, site_b, "B")
    assert a.feed(d_resend + d.send(b"fresh"))[0] == b"fresh"


def test_a_token_is_worth_one_continuation_and_the_next_cut_uses_the_next(contexts) -> None:
    clock = Clock()
    site_a, site_b = sites(contexts, clock)
    c, s = connected(contexts, clock)
    park(site_a, site_b, c, s)
    first = c.token()
    go_on(site_a, site_b, "B")
    assert c.token() == s.token() and c.token() != first
    park(site_a, site_b, c, s)
    assert first is not None and site_b.unpark_token(first) is None      # seen on the link: worth nothing now
    d, a, _, _ = go_on(site_b, site_a, "A")                              # this time B dials
    assert a.feed(d.send(b"third connection"))[0] == b"third connection"
    assert c.continued == s.continued == 2


def test_an_unknown_token_an_expired_connection_or_a_lost_past_is_no_continuation(contexts) -> None:
    clock = Clock()
    site_a, site_b = sites(contexts, clock)
    c, s = connected(contexts, clock)
    park(site_a, site_b, c, s)
    assert site_b.unpark_token(b"\0" * 16) is None and "A" in site_b.parked
    # The acceptor counted a continuation whose OK was lost with its connection: the tokens differ from then on.
    s.continue_with(s.rx)
    assert c.token() is not None and site_b.unpark_token(c.token() or b"") is None
    # Past the lifetime of a session ticket a handshake renews the keys: nothing parked is taken any more.
    clock.t += LIFETIME
    assert site_a.unpark("B") is None and site_a.parked == {}
    c2, s2 = connected(contexts, clock)
    clock.t += LIFETIME + 1
    site_a.park("B", c2)          # already too old: ended, not kept
    assert site_a.parked == {}
    # More sent since the peer's last byte than the ring holds: that past is gone, no continuation.
    c3, _ = connected(contexts, clock)
    for _ in range(RING_BYTES // 1000 + 2):
        c3.send(b"x" * 1000)
    assert c3.resend_from(0) is None and c3.resend_from(c3.tx + 1) is None
    assert c3.resend_from(c3.tx) == b"" and len(c3.resend_from(c3.tx - 10) or b"") == 10


def test_the_wire_of_a_continuation_is_read_strictly() -> None:
    token = bytes(range(16))
    wire = resume_bytes(token, 7, 9)
    assert len(wire) == RESUME_LEN and read_resume(wire) is not None
    assert read_resume(wire).token == token and (read_resume(wire).rx, read_resume(wire).tx) == (7, 9)  # type: ignore[union-attr]
    for n in range(RESUME_LEN):
        assert read_resume(wire[:n]) is None              # not all in yet
    for bad in (b"\x16\x03\x01", b"RCMx", b"X"):
        with pytest.raises(ContinuationError):
            read_resume(bad)
    ok = answer_bytes(Answer(True, 3, 4))
    assert read_answer(ok + b"more") == (Answer(True, 3, 4), OK_LEN) and read_answer(NO + b"tls") == (Answer(False), 4)
    for n in range(OK_LEN):
        assert read_answer(ok[:n]) is None
    for bad in (b"\x15\x03\x03\x00\x02\x02\x30", b"RCMr", b"Z"):      # a TLS alert, say
        with pytest.raises(ContinuationError):
            read_answer(bad)
    with pytest.raises(ValueError):
        resume_bytes(b"short", 0, 0)


def test_the_exporter_is_refused_for_an_object_of_another_context(contexts) -> None:
    c, s, _ = handshake(contexts["A"][1], contexts["B"][0])
    assert export_secret(c.obj, contexts["A"][1], EXPORTER_LABEL, b"", 16) == \
        export_secret(s.obj, contexts["B"][0], EXPORTER_LABEL, b"", 16)
    assert export_secret(c.obj, contexts["B"][0], EXPORTER_LABEL, b"", 16) is None
    fresh = TlsLink(contexts["A"][1], False)
    assert fresh.token() is None                   # no handshake yet: nothing to continue


@pytest.mark.timeout(40)
async def test_servers_on_a_slow_link_continue_their_tls_after_a_cut(tmp_path: Path) -> None:
    """Two real servers paced at 9.6 kbit/s: a reset is followed by a continuation, not a handshake; a message
    sent before the cut and one after both arrive; an unpaced pair resumes as before (the other test module)."""
    from testkit import wait_until

    from rcm.server import RcmServer

    m = tls_mission(tmp_path, SLOW)
    a, b = RcmServer(m, "A"), RcmServer(m, "B")

    def connected() -> bool:
        return both_connected(a, b)

    async with running(a, b):
        await wait_until(connected, "A and B connected")
        assert a.tls_handshakes["continued"] == 0
        cut(a)
        await wait_until(lambda: not connected(), "the cut seen")
        gc.collect()
        await wait_until(lambda: connected() and a.tls_handshakes["continued"] + b.tls_handshakes["continued"],
                         "A and B connected again on the same TLS connection")
        assert a.tls_handshakes["continued"] == b.tls_handshakes["continued"] == 1
        assert a.tls_handshakes["resumed"] == b.tls_handshakes["resumed"] == 0
        assert a.tls is not None and b.tls is not None and a.tls.parked == {} and b.tls.parked == {}
        # Anyone reaching the port may send a RESUME: a token B does not hold gets NO (a handshake would follow);
        # a token B holds is taken only with its connection's next bytes; junk after NO is a refused handshake.
        r, w = await asyncio.open_connection(b.cfg.rcm.host, b.cfg.rcm.port)
        w.write(resume_bytes(os.urandom(16), 0, 0))
        assert await r.readexactly(4) == NO
        w.write(b"\x16\x03\x01\x00\x05junk!" * 3)
        rest = await asyncio.wait_for(r.read(), 10)      # B closes it (after a TLS alert, if OpenSSL writes one)
        assert not rest.startswith(b"RCM")
        w.close()
        assert connected() and a.tls_handshakes["full"] == 1
        # Both HELLOs crossed the continued stream; a second cut continues it again, with the next token.
        cut(b)
        await wait_until(lambda: not connected(), "the second cut seen")
        await wait_until(lambda: connected() and a.tls_handshakes["continued"] == 2, "continued again")
        assert b.tls_handshakes["continued"] == 2 and a.tls_handshakes["full"] == b.tls_handshakes["full"] == 1


@pytest.mark.timeout(40)
async def test_a_peer_that_restarted_answers_no_and_the_same_connection_makes_a_handshake(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """B restarts after a cut on a slow link: A's RESUME names a connection B no longer holds, B answers NO, and
    A makes a TLS handshake on the same connection (full: B's session cache went with its process)."""
    from testkit import wait_until

    from rcm.server import RcmServer

    caplog.set_level("INFO", logger="rcm")
    m = tls_mission(tmp_path, SLOW)
    a, b = RcmServer(m, "A"), RcmServer(m, "B")

    def connected(b: RcmServer) -> bool:
        return both_connected(a, b)

    async with running(a, b) as started:
        await wait_until(lambda: connected(b), "A and B connected")
        started.remove(b)
        await b.stop()
        await wait_until(lambda: a.tls is not None and "B" in a.tls.parked, "A parks the cut connection")
        b2 = RcmServer(m, "B")
        started.append(b2)
        await b2.start()
        await wait_until(lambda: connected(b2), "A and the new B connected")
        assert a.tls is not None and b2.tls is not None
        assert a.tls_handshakes["continued"] == 0 and b2.tls_handshakes["continued"] == 0
        assert b2.tls_handshakes["full"] == 1 and a.tls_handshakes["full"] == 2 and a.tls.parked == {}
        assert "A: B no longer holds our TLS connection" in caplog.text     # A asked; B said NO


@pytest.mark.timeout(60)
async def test_a_peer_of_an_earlier_release_is_never_sent_a_resume_and_one_that_went_back_dials_in(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """A peer whose HELLO does not offer continuation (an earlier release, or ``tls_continue = false``): a cut
    connection with it is not parked, the reconnection resumes with a handshake. A peer that restarted into an
    earlier release after a connection was parked takes the RESUME for a bad record and closes: the dialer
    keeps trying, the peer's own dial (a ClientHello, as that release always dials) makes the connection, and
    the stale parked connection is forgotten at the next cut."""
    from testkit import wait_until

    import rcm.server.peerlink as peerlink
    from rcm.server import RcmServer

    caplog.set_level("INFO", logger="rcm")
    m = tls_mission(tmp_path, SLOW)
    a, b = RcmServer(m, "A"), RcmServer(m, "B")

    def connected(b: RcmServer) -> bool:
        return both_connected(a, b)

    b.tls_continue = False                  # B's HELLO offers no continuation, as an earlier release's
    async with running(a, b) as started:
        await wait_until(lambda: connected(b), "A and B connected")
        await wait_until(lambda: "B" in a.tls_sessions, "A holds a ticket")
        cut(a)
        await wait_until(lambda: not connected(b), "the cut seen")
        await wait_until(lambda: connected(b) and a.tls_handshakes["resumed"] == 1, "resumed with a handshake")
        assert a.tls is not None and a.tls.parked == {} and a.tls_handshakes["continued"] == 0
        # Now B offers it: the next cut parks the connection at both ends. B then restarts as an earlier release.
        b.tls_continue = True
        cut(a)
        await wait_until(lambda: not connected(b), "the second cut seen")
        await wait_until(lambda: connected(b), "connected again (B's HELLO now offers continuation)")
        cut(a)
        await wait_until(lambda: "B" in a.tls.parked, "A parks the connection")
        started.remove(b)
        await b.stop()
        monkeypatch.setattr(peerlink, "FIRST_BYTE", b"\xff")    # acceptors take a RESUME for a TLS record
        old = RcmServer(m, "B")
        old.tls_continue = False
        started.append(old)
        await old.start()
        await wait_until(lambda: connected(old), "A and the earlier release connected (its own dial)")
        assert old.tls_handshakes["continued"] == 0 and a.stack.conns and all(
            p.dialed is None for p in a._conns.values())               # the connection is the earlier release's
        cut(a)
        await wait_until(lambda: not connected(old), "a cut with the earlier release")
        await wait_until(lambda: connected(old), "connected again")
        assert a.tls.parked == {}                                      # the stale connection is forgotten
