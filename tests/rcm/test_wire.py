"""Wire codec: framing, limits, malformed input."""
from __future__ import annotations

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rcm import wire
from rcm.wire import FrameDecoder, FrameError, encode_frame, encode_varint


def test_roundtrip_split_at_every_byte():
    frames = [[wire.DATA, 1, 1, 7, b"x" * 300, 3], [wire.HEARTBEAT, 5], [wire.ANNOUNCE, 12]]
    data = b"".join(encode_frame(f) for f in frames)
    for cut in range(len(data) + 1):
        d = FrameDecoder()
        got = d.feed(data[:cut]) + d.feed(data[cut:])
        assert got == frames
        assert d.buffered == 0


def test_small_frames_have_one_byte_prefix():
    assert encode_frame([wire.HEARTBEAT, 1])[0] == 3
    assert len(encode_varint(127)) == 1 and len(encode_varint(128)) == 2


def test_oversized_frame_refused_before_buffering_it():
    d = FrameDecoder(max_frame=100)
    with pytest.raises(FrameError, match="exceeds the 100-byte limit"):
        d.feed(encode_varint(101))


@pytest.mark.parametrize("raw, msg", [
    (b"\xff\xff\xff\xff\xff\x01", "longer than 5 bytes"),
    (b"\x00", "empty frame"),
    (b"\x01\xc1", "undecodable"),                     # 0xc1 is never valid msgpack
    (b"\x02\x91\xa1", "undecodable"),                 # truncated string inside the frame
    (encode_varint(1) + msgpack.packb(7), "not an array"),
    (encode_varint(1) + msgpack.packb([]), "not an array"),
    (b"\x03" + msgpack.packb(["x"]), "not an array"),
])
def test_malformed_input(raw, msg):
    with pytest.raises(FrameError, match=msg):
        FrameDecoder().feed(raw)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_decoder_never_raises_anything_but_frame_error(data):
    d = FrameDecoder(max_frame=64)
    try:
        frames = d.feed(data)
    except FrameError:
        return
    assert all(isinstance(f, list) and type(f[0]) is int for f in frames)


def test_read_varint_reads_what_encode_varint_wrote_waits_while_torn_and_bounds_its_length():
    from rcm.wire import encode_varint, read_varint
    for n in (0, 1, 127, 128, 300, 2**34):
        data = b"\x00" + encode_varint(n) + b"rest"
        assert read_varint(data, 1, 10) == (n, len(data) - 4)
        assert read_varint(data[:len(data) - 5], 1, 10) is None          # its last byte not here yet
    assert read_varint(b"\x80\x80", 0, 5) is None
    with pytest.raises(ValueError):
        read_varint(b"\x80" * 6, 0, 5)
    with pytest.raises(ValueError):
        read_varint(b"\x80" * 5, 0, 5)
