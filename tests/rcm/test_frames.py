"""Typed frames (rcm/stack/frames.py): every frame decoded once; only decoding is the peer's fault."""
from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contracts.mission import RcmSettings
from rcm import wire
from rcm.actions import ProtocolViolation
from rcm.routing import relay
from rcm.routing.linkstate import LinkState
from rcm.stack import SiteStack, frames

SITES = ["A", "B", "C"]


def decoder(relaying: bool = True) -> frames.FrameDecoder:
    return frames.FrameDecoder("A", SITES, LinkState("A", SITES, 1, 3), 1024, relaying)


@pytest.mark.parametrize("raw, kind", [
    ([wire.DATA, 3, 1, 7, b"x"], frames.Data),
    ([wire.DATA, 3, -2, {"p": 0, "h": 7}, b"x", 1, [2, 5]], frames.Data),
    ([wire.CTRL, 3, ["a", 1], 0], frames.Ctrl),
    ([wire.ANNOUNCE, 5, 9], frames.Announce),
    ([wire.HEARTBEAT, 1, 4], frames.Heartbeat),
    ([wire.MISSED, 1, [[1, 2], [5, 9]]], frames.Missed),
    ([wire.BYE, "going", 1], frames.Bye),
    ([wire.SYNC, 4, 2], frames.Sync),
    ([wire.LINKS, 1, 1, 3, [0, 2]], frames.Links),
    ([wire.SUMMARY, 1, [1, [[1, [[1, 4]]]]]], frames.Summary),
    ([wire.FETCH, 1, [1, [[1, 4]]]], frames.Fetch),
    ([wire.REPAIR, 1, [1, 2, [3, "B"], b"p", 0]], frames.RepairFrame),
    ([wire.HELLO, wire.PROTOCOL_VERSION], frames.HelloFrame),
])
def test_each_kind_decodes_into_its_type(raw, kind):
    f = decoder().decode(raw, 1.0)
    assert isinstance(f, kind)


def test_a_data_frame_carries_its_precedence_unwrapped_and_its_wire_header():
    f = decoder().decode([wire.DATA, 3, 1, {"p": 0, "h": 7}, b"x", None, [2, 5]], 1.0)
    assert isinstance(f, frames.Data)
    assert (f.message.header, f.message.precedence, f.message.wire_header) == (7, "flash", {"p": 0, "h": 7})
    assert f.ack is None and f.fwd == (("C", 5),)


def test_a_routed_frame_decodes_this_sites_entry_only():
    r = relay.Routed(1, "B", 7, (("A", 3), ("C", 4)), wire.DATA, (9, 11, b"m"))
    f = decoder().decode(relay.encode(r, {s: i for i, s in enumerate(SITES)}), 1.0)
    assert isinstance(f, frames.Routed) and f.mine is not None
    value, body = f.mine
    assert value == 3 and isinstance(body, frames.RoutedData) and body.seq == 9 and body.message.payload == b"m"
    other = relay.Routed(1, "B", 7, (("C", 4),), wire.MISSED, ("not ranges",))
    f = decoder().decode(relay.encode(other, {s: i for i, s in enumerate(SITES)}), 1.0)
    assert isinstance(f, frames.Routed) and f.mine is None       # only forwarded: its body is not ours to judge


@pytest.mark.parametrize("raw", [
    [wire.DATA, 3, 0, 7, b"x"],                     # a zero delta
    [wire.DATA, 3, 1, {"p": 9, "h": 7}, b"x"],      # no such precedence
    [wire.DATA, 3, 1, 7, "text"],                   # not bytes
    [wire.DATA, 3, 1, 7, b"x" * 2000],              # past max_payload_bytes
    [wire.DATA, 3, 1, 7, b"x", 1, [2, 0]],          # a forward entry at link seq 0
    [wire.DATA, 200, 1, 7, b"x"],                   # a check that is no check
    [wire.CTRL, 1],
    [wire.HEARTBEAT, 1, -1],                        # a negative ack
    [wire.MISSED, 1, [[5, 3]]],
    [wire.SYNC, 0],
    [wire.SYNC, 4, 200],                            # a generation out of range
    [wire.FETCH, 1, [1, [[1, 5000]]]],              # more than a requester may have outstanding
    [wire.REPAIR, 1, [1, 2, [], b"p"]],
    [wire.LINKS, 1, 2**53, 3, [0]],                 # past the honest ceiling
    [77, 1],
])
def test_malformed_frames_are_the_peers_fault(raw):
    with pytest.raises(ProtocolViolation):
        decoder().decode(raw, 1.0)


def test_relayed_kinds_without_relaying_are_refused():
    with pytest.raises(ProtocolViolation, match="unknown frame type 8"):
        decoder(relaying=False).decode([wire.ROUTED, 1, 1, 7, [0, 1], wire.CTRL, 5], 1.0)


def test_a_bug_of_ours_is_raised_not_blamed_on_the_peer(monkeypatch):
    """The broad except that turned our own errors into a closed link, blamed on the peer, is gone."""
    s = SiteStack("A", SITES, RcmSettings(), 1, 0.0, mission="m")
    s.start(0.0)
    s.connection_made("b", 0.0, None)
    s.data_received("b", wire.encode_frame([wire.HELLO, wire.PROTOCOL_VERSION, "m", "B", 7, 0, 0, 1, 0,
                                            ["lamport", "robust", SITES, "relay", 3]])
                    + wire.encode_frame([wire.SYNC, 1]), 0.0)

    def broken(*args, **kwargs):
        raise KeyError("a bug")

    monkeypatch.setattr(s.multicast, "received", broken)
    with pytest.raises(KeyError):
        s.data_received("b", wire.encode_frame([wire.DATA, 1, 1, 5, b"x"]), 1.0)


def test_a_routed_frame_whose_kind_is_not_a_number_is_malformed():
    """Found by the frame fuzzer once the broad except was gone: an unhashable kind raised TypeError."""
    with pytest.raises(ProtocolViolation):
        decoder().decode([wire.ROUTED, 1, 0, 0, [0, 1], [], 0], 1.0)


_values = st.recursive(st.none() | st.booleans() | st.integers(min_value=-2**63, max_value=2**64 - 1)
                       | st.floats() | st.text(max_size=5) | st.binary(max_size=8),
                       lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=2), inner,
                                                                                   max_size=3),
                       max_leaves=20)


@settings(max_examples=int(os.environ.get("FRAMES_EXAMPLES", "500")), deadline=None)
@given(st.integers(min_value=-1, max_value=15), st.lists(_values, max_size=8))
def test_decoding_is_total_a_frame_or_the_peers_fault(kind, fields):
    """Whatever a peer sends, decoding returns a frame or raises ProtocolViolation: nothing else escapes."""
    try:
        decoder().decode([kind, *fields], 1.0)
    except ProtocolViolation:
        pass
