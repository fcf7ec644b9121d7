"""Sites whose mission files disagree on what must be shared refuse each other at HELLO, saying why."""
from __future__ import annotations

import pytest

from contracts.mission import RcmSettings
from rcm import wire
from rcm.actions import Close, Dial, Log, Transmit
from rcm.stack import SiteStack

SITES = ["A", "B", "C"]


def stack(**settings) -> SiteStack:
    s = SiteStack("A", SITES, RcmSettings(**settings), 1, 0.0, mission="m")
    s.start(0.0)
    return s


def hello(terms, version=wire.PROTOCOL_VERSION) -> bytes:
    return wire.encode_frame([wire.HELLO, version, "m", "B", 7, 0, 0, 1, 0, terms])


@pytest.mark.parametrize("terms, reason", [
    (["sequencer", "robust", SITES, "relay", 3],
     "B orders messages with 'sequencer', A with 'lamport': every site of a mission must use the same [rcm] "
     "ordering"),
    (["lamport", "tcp", SITES, "direct", 1],
     "B runs 'tcp' channels, A 'robust': every site of a mission must use the same [rcm] p2p"),
    (["lamport", "robust", SITES, "direct", 1],
     "B routes with routing = 'direct', max_hops = 1, A with 'relay', 3: every site of a mission must use the "
     "same [rcm] routing"),
    (["lamport", "robust", SITES, "relay", 2],
     "B routes with routing = 'relay', max_hops = 2, A with 'relay', 3: every site of a mission must use the "
     "same [rcm] routing"),
    (["lamport", "robust", ["A", "B", "C", "D"], "relay", 3],
     "the mission files of B and A list different sites (only B's has D): every site must load the same "
     "mission file"),
    (["lamport", "robust", ["A", "B"], "relay", 3],
     "the mission files of B and A list different sites (only A's has C): every site must load the same "
     "mission file"),
])
def test_a_peer_with_other_terms_is_refused_with_the_reason(terms, reason):
    s = stack()
    s.connection_made("b", 1.0, None)
    acts = s.data_received("b", hello(terms), 1.0)
    closes = [a for a in acts if isinstance(a, Close)]
    assert [c.reason for c in closes] == [f"refused: {reason}"]
    assert any(isinstance(a, Log) and reason in a.message for a in acts)
    assert s.status("B") != "connected"
    peer = s.stats()["peers"]["B"]
    assert peer["refused_connections"] == 1 and peer["last_refusal"] == reason


def sent(acts, conn) -> bytes:
    return b"".join(a.data for a in acts if isinstance(a, Transmit) and a.conn == conn)


def test_both_operators_learn_why():
    a = stack()
    b = SiteStack("B", SITES, RcmSettings(ordering="hybrid"), 1, 0.0, mission="m")
    b.start(0.0)
    a.connection_made("from-b", 1.0)
    to_a = sent(b.connection_made("to-a", 1.0, "A"), "to-a")      # B dials A: its HELLO
    acts_a = a.data_received("from-b", to_a, 1.0)
    why = "B orders messages with 'hybrid', A with 'lamport': every site of a mission must use the same [rcm] ordering"
    assert a.stats()["peers"]["B"]["last_refusal"] == why
    acts_b = b.data_received("to-a", sent(acts_a, "from-b"), 1.1)  # A's BYE
    assert any(isinstance(x, Close) and x.conn == "to-a" for x in acts_b)
    assert any(isinstance(x, Log) and why in x.message for x in acts_b)
    assert any(isinstance(x, Log) and x.message.endswith(f"A refused the connection: {why}; not dialing A "
                                                         "until it dials B") for x in acts_b)
    assert b.stats()["peers"]["A"]["last_refusal"] == f"A refused this site: {why}"
    assert a.status("B") != "connected" and b.status("A") != "connected"
    # Neither redials the other in a loop: both wait to be dialed (an upgraded site dials everyone).
    assert a.peers["B"].cm.dials_held and b.peers["A"].cm.dials_held
    for t in (5.0, 20.0, 100.0):
        assert not any(isinstance(x, Dial) for x in a.timer(t) + b.timer(t))


def test_a_peer_of_the_previous_version_is_refused_once_and_not_redialed():
    """Mixed versions: an old site's HELLO, and its BYE to ours, stop the dialing; its redials log once a minute."""
    s = stack()
    old = wire.encode_frame([wire.HELLO, wire.PROTOCOL_VERSION - 1, "m", "B", 7, 0, 0, 1, 0,
                             ["lamport", "robust", SITES]])
    logs = []
    for i in range(20):                                  # the old site redials every 3 s
        s.connection_made(f"b{i}", 3.0 * i, None)
        logs += [x.message for x in s.data_received(f"b{i}", old, 3.0 * i) if isinstance(x, Log)]
    v = wire.PROTOCOL_VERSION
    assert len(logs) == 1 and f"protocol version {v - 1}, this server speaks {v}" in logs[0]
    assert s.stats()["peers"]["B"]["refused_connections"] == 20
    assert not any(isinstance(x, Dial) and x.peer == "B" for t in range(60) for x in s.timer(float(t)))
    # Our dial answered by an old site's BYE (it refuses version 5 as 'protocol version 5, ...').
    c = stack()
    c.connection_made("to-b", 0.0, "B")
    acts = c.data_received("to-b", wire.encode_frame([wire.BYE, "refused: protocol version 5, this server "
                                                                 "speaks 4"]), 0.1)
    assert any(isinstance(x, Log) and "not dialing B until it dials A" in x.message for x in acts)
    assert not any(isinstance(x, Dial) and x.peer == "B" for t in range(60) for x in c.timer(float(t)))
    # Once B is upgraded and dials us, everything is as usual.
    c.connection_made("from-b", 70.0, None)
    c.data_received("from-b", hello(["lamport", "robust", SITES, "relay", 3]), 70.0)
    assert c.status("B") == "connected" and not c.peers["B"].cm.dials_held


def test_an_old_peer_is_refused_by_version_not_as_malformed():
    s = stack()
    s.connection_made("b", 1.0, None)
    old = wire.encode_frame([wire.HELLO, 1, "m", "B", 7, 0, 0, 1, 0])
    closes = [a for a in s.data_received("b", old, 1.0) if isinstance(a, Close)]
    assert [c.reason for c in closes] == [f"refused: protocol version 1, this server speaks {wire.PROTOCOL_VERSION}"]


@pytest.mark.parametrize("terms", [None, ["lamport", "robust"], ["lamport", 3, SITES], ["lamport", "robust", "ABC"],
                                   ["lamport", "robust", ["A", 2]],
                                   ["lamport", "robust", SITES], ["lamport", "robust", SITES, "relay", "3"]])
def test_malformed_terms_close_the_connection(terms):
    s = stack()
    s.connection_made("b", 1.0, None)
    closes = [a for a in s.data_received("b", hello(terms), 1.0) if isinstance(a, Close)]
    assert len(closes) == 1 and "malformed HELLO terms" in closes[0].reason


def test_matching_terms_connect():
    s = stack()
    s.connection_made("b", 1.0, None)
    s.data_received("b", hello(["lamport", "robust", ["C", "B", "A"], "relay", 3]), 1.0)
    assert s.status("B") == "connected"
