"""Audit finding 4: without TLS nothing authenticates a HELLO.

Before the fix anyone who reached an RCM port could claim any site: a high
boot replaced the genuine peer's connection, a spoofed frontier made the site
drop what it had buffered for the real peer (silent loss), and forged DATA was
delivered as that site's. Now plaintext is refused off loopback unless the
mission declares a lab network, a frontier past what was ever sent is a
protocol violation, and a frontier drops buffered frames only on a connection
whose peer a certificate proved.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from contracts.mission import MissionError, RcmSettings, load_mission, parse_mission
from rcm import wire
from rcm.actions import Close, Transmit
from rcm.stack import SiteStack

REPO = Path(__file__).resolve().parents[2]


def raw_mission(rcm: dict, a_rcm: str = "127.0.0.1:7101", b_rcm: str = "127.0.0.1:7102",
                dial: dict | None = None) -> dict:
    a = {"rcm": a_rcm, "chat": "127.0.0.1:8101"}
    if dial:
        a["dial"] = dial
    return {"mission": {"name": "m"}, "rcm": rcm,
            "sites": {"A": a, "B": {"rcm": b_rcm, "chat": "127.0.0.1:8102"}}}


@pytest.mark.parametrize("kw, key", [
    (dict(b_rcm="10.0.0.2:7102"), "sites.B.rcm = 10.0.0.2:7102"),
    (dict(a_rcm="0.0.0.0:7101"), "sites.A.rcm = 0.0.0.0:7101"),
    (dict(b_rcm="ground2.example.net:7102"), "sites.B.rcm = ground2.example.net:7102"),
    (dict(dial={"B": "192.168.1.9:9102"}), "sites.A.dial.B = 192.168.1.9:9102"),
])
def test_plaintext_refused_off_loopback(tmp_path: Path, kw, key):
    with pytest.raises(MissionError) as e:
        parse_mission(raw_mission({"tls": False}, **kw), tmp_path)
    msg = str(e.value)
    assert msg.startswith(f"[rcm] tls = false but {key} is not a loopback address")
    assert "tls = true" in msg and "insecure_plaintext = true" in msg
    # The same mission with TLS, or declared a lab network, loads.
    assert parse_mission(raw_mission({"tls": True}, **kw), tmp_path).rcm.tls
    lab = parse_mission(raw_mission({"insecure_plaintext": True}, **kw), tmp_path)
    assert lab.rcm.insecure_plaintext and not lab.rcm.tls


@pytest.mark.parametrize("host", ["127.0.0.1", "127.3.2.1", "localhost", "[::1]"])
def test_plaintext_on_loopback_loads(tmp_path: Path, host):
    m = parse_mission(raw_mission({}, a_rcm=f"{host}:7101", dial={"B": f"{host}:9102"}), tmp_path)
    assert not m.rcm.tls


def test_insecure_plaintext_with_tls_is_a_contradiction(tmp_path: Path):
    with pytest.raises(MissionError, match="insecure_plaintext = true contradicts tls = true"):
        parse_mission(raw_mission({"tls": True, "insecure_plaintext": True}), tmp_path)


@pytest.mark.parametrize("name", ["paper-4site.toml", "paper-4site-hosts.toml", "ten-site.toml"])
def test_deploy_examples_still_load(name):
    load_mission(REPO / "deploy" / "examples" / name)


# -- the stack: what a HELLO's frontier may do ---------------------------------------------------
SITES = ["A", "B", "C"]


def hello(frontier: int, boot: int, known: int = 1) -> bytes:
    """B's HELLO saying it holds A's stream (incarnation ``known``) up to ``frontier``."""
    return wire.encode_frame([wire.HELLO, wire.PROTOCOL_VERSION, "m", "B", 7, known, frontier, boot, 0,
                              ["lamport", "robust", SITES, "relay", 3]])


def a_with_ten_frames_for_b() -> SiteStack:
    """A, connected to B on "genuine", with ten messages written to B and not acknowledged."""
    s = SiteStack("A", SITES, RcmSettings(), 1, 0.0, mission="m")
    s.start(0.0)
    s.connection_made("genuine", 0.0, None, identity=None)
    s.data_received("genuine", hello(0, boot=1, known=0) + wire.encode_frame([wire.SYNC, 1]), 0.0)
    for i in range(10):
        s.send(f"m{i}".encode(), ["B"], 0.1)
    assert len(s.peers["B"].out) == 10 and s.peers["B"].out.hwm == 10
    return s


def sync_start(actions, conn) -> int:
    data = b"".join(a.data for a in actions if isinstance(a, Transmit) and a.conn == conn)
    return next(f[1] for f in wire.FrameDecoder().feed(data) if f[0] == wire.SYNC)


def test_frontier_past_what_was_sent_is_a_violation():
    s = a_with_ten_frames_for_b()
    s.connection_made("spoof", 1.0, None)
    acts = s.data_received("spoof", hello(frontier=2**40, boot=99), 1.0)
    closed = {a.conn: a.reason for a in acts if isinstance(a, Close)}
    assert list(closed) == ["spoof"]
    assert "HELLO frontier 1099511627776 is past the last frame A ever sent to B (10)" in closed["spoof"]
    # Refused before anything moved: the genuine connection and the buffer are untouched.
    assert s.peers["B"].conn == "genuine" and len(s.peers["B"].out) == 10


def test_unproven_frontier_discards_nothing():
    """A plaintext HELLO claiming B holds all ten frames: A keeps them and resends them all."""
    s = a_with_ten_frames_for_b()
    s.connection_made("spoof", 1.0, None)
    acts = s.data_received("spoof", hello(frontier=10, boot=99), 1.0)
    assert s.peers["B"].conn == "spoof"          # plaintext cannot tell it from B: hence the config rule
    assert len(s.peers["B"].out) == 10           # but nothing buffered for the real B is gone
    assert sync_start(acts, "spoof") == 1


def test_proven_frontier_spares_the_resend():
    """Over TLS (a certificate named B) the frontier lets A forget what B holds, as designed."""
    s = a_with_ten_frames_for_b()
    s.connection_made("tls", 1.0, None, identity=("B", "m"))
    acts = s.data_received("tls", hello(frontier=7, boot=99), 1.0)
    assert [f.link_seq for f in s.peers["B"].out.buffer] == [8, 9, 10]
    assert sync_start(acts, "tls") == 8


async def test_insecure_plaintext_is_logged_loudly_at_start(tmp_path: Path, caplog):
    from faultinject.missions import write_mission
    from rcm.server import RcmServer

    m = load_mission(write_mission(tmp_path / "m.toml", "lab", ["A", "B"],
                                   rcm={"insecure_plaintext": True, "durable": False}))
    server = RcmServer(m, "A")
    await server.start()
    await server.stop()
    assert "INSECURE: tls = false with [rcm] insecure_plaintext = true" in caplog.text
