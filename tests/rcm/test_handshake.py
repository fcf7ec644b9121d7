"""The HELLO handshake as pure functions (rcm/handshake.py)."""
from __future__ import annotations

import pytest

from rcm import wire
from rcm.actions import ProtocolViolation
from rcm.wire.handshake import Candidate, Hello, Refused, Terms, check_hello, frame_limit, hello_frame, keeps_new

TERMS = Terms("lamport", "robust", ("A", "B", "C"))


def check(frame, dialed=None, identity=None):
    return check_hello(frame, mission="m", me="A", peers=["B", "C"], dialed=dialed, identity=identity,
                       terms=TERMS)


def test_a_good_hello_is_taken_with_its_fields():
    got = check(hello_frame("m", "B", 5, 1, 17, 2, 3, TERMS))
    assert got == Hello("B", 5, 1, 17, 2, 3)


@pytest.mark.parametrize("frame, reason", [
    (hello_frame("other", "B", 5, 1, 0, 1, 0, TERMS), "wrong mission 'other'"),
    (hello_frame("m", "Z", 5, 1, 0, 1, 0, TERMS), "unknown site 'Z'"),
    (hello_frame("m", "A", 5, 1, 0, 1, 0, TERMS), "unknown site 'A'"),
    ([wire.HELLO, 1, "m"], "protocol version 1, this server speaks"),
])
def test_refusals_say_why(frame, reason):
    got = check(frame)
    assert isinstance(got, Refused) and got.reason.startswith(reason) and got.peer is None


def test_the_identity_is_checked_before_the_terms():
    other = Terms("sequencer", "robust", ("A", "B", "C"))
    frame = hello_frame("m", "B", 5, 1, 0, 1, 0, other)
    assert "certificate is for site 'C'" in check(frame, identity=("C", "m")).reason
    got = check(frame, identity=("B", "m"))
    assert got.peer == "B" and "orders messages with 'sequencer'" in got.reason
    assert "dialed C but B answered" in check(frame, dialed="C").reason


@pytest.mark.parametrize("frame", [[wire.HELLO, wire.PROTOCOL_VERSION, "m"],
                                   hello_frame("m", "B", 0, 1, 0, 1, 0, TERMS),
                                   hello_frame("m", "B", 5, 1, -1, 1, 0, TERMS)])
def test_malformed_hellos_are_violations(frame):
    with pytest.raises(ProtocolViolation):
        check(frame)


def test_frame_limit_leaves_room_for_a_long_site_list():
    assert frame_limit("m", "A", TERMS, 1 << 20) == 4096
    many = Terms("lamport", "robust", tuple(f"site{i:03d}" for i in range(500)))
    assert 4096 < frame_limit("m", "A", many, 1 << 20) < 1 << 20


def test_dialing_rule_is_the_same_seen_from_both_ends():
    # A connection dialed by A (the site that sorts first) wins over one dialed by B...
    assert keeps_new(Candidate(1, "A", 1), Candidate(1, "B", 9))
    assert not keeps_new(Candidate(1, "B", 9), Candidate(1, "A", 1))
    # ...of two dials by the same site, the later; and a restarted peer's always.
    assert keeps_new(Candidate(1, "B", 3), Candidate(1, "B", 2))
    assert keeps_new(Candidate(2, "B", 1), Candidate(1, "A", 5))
