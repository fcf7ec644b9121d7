"""Property tests: whatever bytes a peer sends, the stack never raises, never
touches another connection, and either keeps or closes the offending one."""
from __future__ import annotations

import msgpack
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contracts.mission import RcmSettings
from rcm import wire
from rcm.actions import Close, Transmit
from rcm.stack import SiteStack

SITES = ["A", "B", "C"]
S = RcmSettings(max_frame_bytes=4096, max_payload_bytes=1024)

scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**40, 2**40), st.text(max_size=8),
                    st.binary(max_size=16))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(st.text(max_size=4), inner, max_size=3), max_leaves=8)
frames = st.lists(st.one_of(st.integers(0, 9), values), min_size=1, max_size=8)


def hello(site: str = "B", **kw) -> list:
    f = [wire.HELLO, wire.PROTOCOL_VERSION, "m", site, 7, 0, 0, 1, 0, ["lamport", "robust", SITES, "relay", 3]]
    for k, v in kw.items():
        f[{"version": 1, "mission": 2, "site": 3, "inc": 4, "known": 5, "frontier": 6, "boot": 7,
           "terms": 9}[k]] = v
    return f


def stack_with_good_link():
    st_ = SiteStack("A", SITES, S, 1, 0.0, mission="m")
    st_.start(0.0)
    st_.connection_made("good", 0.0, None)
    st_.data_received("good", wire.encode_frame(hello("C")), 0.0)
    assert st_.status("C") == "connected"
    return st_


def assert_isolated(actions, bad="bad"):
    """Nothing but the bad connection is closed or written to; only link-state news may go elsewhere
    (a relay site tells its neighbours when one of its links goes)."""
    for a in actions:
        if isinstance(a, Close):
            assert a.conn == bad, f"{a} touched another connection"
        if isinstance(a, Transmit) and a.conn != bad:
            assert all(f[0] == wire.LINKS for f in wire.FrameDecoder().feed(a.data)), f"{a} touched another connection"


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(frames, max_size=5))
def test_random_frames_before_handshake(fs):
    s = stack_with_good_link()
    s.connection_made("bad", 1.0, None)
    data = b"".join(wire.encode_frame(f) for f in fs)
    assert_isolated(s.data_received("bad", data, 1.0))
    assert s.status("C") == "connected"


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(frames, max_size=6))
def test_random_frames_after_handshake(fs):
    s = stack_with_good_link()
    s.connection_made("bad", 1.0, None)
    s.data_received("bad", wire.encode_frame(hello("B")), 1.0)
    data = b"".join(wire.encode_frame(f) for f in fs)
    # B is a proven peer here: its valid frames may move others (e.g. a clock
    # announcement that A passes on to C). What must hold: nothing raises and
    # the link to C is unaffected.
    s.data_received("bad", data, 1.0)
    assert s.status("C") == "connected"
    s.timer(2.0)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=300))
def test_random_bytes(data):
    s = stack_with_good_link()
    s.connection_made("bad", 1.0, None)
    assert_isolated(s.data_received("bad", data, 1.0))


@settings(max_examples=200, deadline=None)
@given(version=st.one_of(st.integers(-2**63, 2**63 - 1), st.text(max_size=3)), mission=st.text(max_size=4),
       site=st.one_of(st.text(max_size=3), st.integers(-2**63, 2**63 - 1)), inc=scalars,
       frontier=scalars)
def test_hostile_hellos_are_refused_with_a_reason(version, mission, site, inc, frontier):
    s = stack_with_good_link()
    s.connection_made("bad", 1.0, None)
    acts = s.data_received("bad", wire.encode_frame(
        hello(version=version, mission=mission, site=site, inc=inc, frontier=frontier)), 1.0)
    assert_isolated(acts)
    if not (version == wire.PROTOCOL_VERSION and mission == "m" and site == "B" and type(inc) is int and inc > 0
            and type(frontier) is int and frontier >= 0):
        assert any(isinstance(a, Close) for a in acts)


def test_oversized_payload_from_a_peer_closes_only_that_connection():
    s = stack_with_good_link()
    s.connection_made("bad", 1.0, None)
    s.data_received("bad", wire.encode_frame(hello("B")), 1.0)
    raw = msgpack.packb([wire.DATA, 1, 1, 1, b"x" * 5000])
    acts = s.data_received("bad", wire.encode_varint(len(raw)) + raw, 1.0)
    assert any(isinstance(a, Close) and "limit" in a.reason for a in acts)
    assert_isolated(acts)
