"""Sites whose mission files disagree on what must be shared refuse each other at HELLO, saying why."""
from __future__ import annotations

import pytest

from rcm import wire
from rcm.config import RcmSettings
from rcm.stack import Close, Log, SiteStack, Transmit

SITES = ["A", "B", "C"]


def stack(**settings) -> SiteStack:
    s = SiteStack("A", SITES, RcmSettings(**settings), 1, 0.0, mission="m")
    s.start(0.0)
    return s


def hello(terms, version=wire.PROTOCOL_VERSION) -> bytes:
    return wire.encode_frame([wire.HELLO, version, "m", "B", 7, 0, 0, 1, 0, terms])


@pytest.mark.parametrize("terms, reason", [
    (["sequencer", "robust", SITES],
     "B orders messages with 'sequencer', A with 'lamport': every site of a mission must use the same [rcm] "
     "ordering"),
    (["lamport", "tcp", SITES],
     "B runs 'tcp' channels, A 'robust': every site of a mission must use the same [rcm] p2p"),
    (["lamport", "robust", ["A", "B", "C", "D"]],
     "the mission files of B and A list different sites (only B's has D): every site must load the same "
     "mission file"),
    (["lamport", "robust", ["A", "B"]],
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
    assert any(isinstance(x, Log) and x.message.endswith(f"A refused the connection: {why}") for x in acts_b)
    assert b.stats()["peers"]["A"]["last_refusal"] == f"A refused this site: {why}"
    assert a.status("B") != "connected" and b.status("A") != "connected"


def test_an_old_peer_is_refused_by_version_not_as_malformed():
    s = stack()
    s.connection_made("b", 1.0, None)
    old = wire.encode_frame([wire.HELLO, 1, "m", "B", 7, 0, 0, 1, 0])
    closes = [a for a in s.data_received("b", old, 1.0) if isinstance(a, Close)]
    assert [c.reason for c in closes] == [f"refused: protocol version 1, this server speaks {wire.PROTOCOL_VERSION}"]


@pytest.mark.parametrize("terms", [None, ["lamport", "robust"], ["lamport", 3, SITES], ["lamport", "robust", "ABC"],
                                   ["lamport", "robust", ["A", 2]]])
def test_malformed_terms_close_the_connection(terms):
    s = stack()
    s.connection_made("b", 1.0, None)
    closes = [a for a in s.data_received("b", hello(terms), 1.0) if isinstance(a, Close)]
    assert len(closes) == 1 and "malformed HELLO terms" in closes[0].reason


def test_matching_terms_connect():
    s = stack()
    s.connection_made("b", 1.0, None)
    s.data_received("b", hello(["lamport", "robust", ["C", "B", "A"]]), 1.0)
    assert s.status("B") == "connected"
