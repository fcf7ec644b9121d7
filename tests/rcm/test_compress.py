"""Link compression (rcm.wire.compress): negotiation in HELLO, streaming history, and the decompressor's bounds."""
from __future__ import annotations

import pytest
import zstandard

from rcm import wire
from rcm.wire import compress, handshake
from rcm.wire.compress import CompressionError, Decompressor, LinkCodec

TERMS = handshake.Terms("lamport", "robust", ("A", "B"), "relay", 3)


def hello(site: str) -> bytes:
    return wire.encode_frame(handshake.hello_frame("m", site, 7, 0, 0, 1, 1, TERMS))


def chat(i: int) -> bytes:
    return wire.encode_frame([wire.DATA, i % wire.CHECK_MOD, 1, [i, "A"],
                              f'["ops","alice@A","grid 31U {i:04d} moving north to the ridge, eta 20 min"]'.encode()])


def pair(dialer_offers: bool, acceptor_offers: bool, dialer_dict: bool = True,
         acceptor_dict: bool = True) -> tuple[LinkCodec, LinkCodec, list[bytes], list[bytes]]:
    """Run the handshake's first frames through a dialer's and an acceptor's codec; return what each
    side's stack received."""
    d = LinkCodec(dialer_offers, offer_dict=dialer_dict)
    a = LinkCodec(acceptor_offers, offer_dict=acceptor_dict)
    at_a: list[bytes] = []
    at_d: list[bytes] = []

    def to_a(data: bytes) -> None:
        plain, back = a.receive(data)
        at_a.append(plain)
        if back:
            to_d(back)

    def to_d(data: bytes) -> None:
        plain, back = d.receive(data)
        at_d.append(plain)
        if back:
            to_a(back)

    to_a(d.send(hello("A")))
    to_d(a.send(hello("B") + wire.encode_frame([wire.SYNC, 1, 0]) + wire.encode_frame([wire.HEARTBEAT, 1, 0])))
    to_a(d.send(wire.encode_frame([wire.SYNC, 1, 0])))
    return d, a, at_a, at_d


def frames(chunks: list[bytes]) -> list[list[object]]:
    dec = wire.FrameDecoder()
    return [f for c in chunks for f in dec.feed(c)]


def test_both_offer_compresses_after_the_hellos_and_the_stack_sees_the_same_frames() -> None:
    d, a, at_a, at_d = pair(True, True)
    assert d.compressed and a.compressed
    got_a, got_d = frames(at_a), frames(at_d)
    assert got_a[0][:3] == [wire.HELLO, wire.PROTOCOL_VERSION, "m"]
    assert got_a[0][-1] == compress.CAP_ZSTD | compress.CAP_DICT and d.dictionary and a.dictionary
    assert got_a[1] == [wire.SYNC, 1, 0]
    assert [f[0] for f in got_d] == [wire.HELLO, wire.SYNC, wire.HEARTBEAT]
    # The stack accepts a HELLO with its capabilities.
    checked = handshake.check_hello(got_a[0], mission="m", me="B", peers=["A"], dialed=None, identity=None,
                                    terms=TERMS)
    assert isinstance(checked, handshake.Hello) and checked.site == "A"


def test_history_across_write_batches_makes_a_similar_frame_cost_a_few_bytes() -> None:
    d, a, _, _ = pair(True, True)
    sizes = []
    received = []
    for i in range(20):
        data = chat(i)
        out = d.send(data)
        sizes.append((len(data), len(out)))
        received.append(a.receive(out)[0])
    assert received == [chat(i) for i in range(20)]
    raw, on_wire = sizes[-1]
    assert on_wire < raw / 3, sizes


@pytest.mark.parametrize("dialer,acceptor", [(True, False), (False, True)])
def test_with_a_peer_without_the_dictionary_both_compress_without_it(dialer: bool, acceptor: bool) -> None:
    d, a, at_a, at_d = pair(True, True, dialer, acceptor)
    assert d.compressed and a.compressed and not d.dictionary and not a.dictionary
    assert frames(at_a)[1] == [wire.SYNC, 1, 0] and [f[0] for f in frames(at_d)] == [wire.HELLO, wire.SYNC,
                                                                                         wire.HEARTBEAT]
    assert [a.receive(d.send(chat(i)))[0] for i in range(3)] == [chat(i) for i in range(3)]


def test_the_dictionary_makes_a_connections_first_chat_frame_smaller() -> None:
    with_dict, without = pair(True, True)[0], pair(True, True, False, False)[0]
    assert len(with_dict.send(chat(1))) < len(without.send(chat(1))) - 10


def test_the_link_parameters_cap_the_tables_to_the_window() -> None:
    p = compress.params()
    assert p.window_log == p.hash_log == p.chain_log == compress.WINDOW_LOG
    assert p.estimated_compression_context_size() < 1 << 20


@pytest.mark.parametrize("dialer,acceptor", [(True, False), (False, True), (False, False)])
def test_unless_both_offer_the_stream_is_plain_and_the_hello_unchanged(dialer: bool, acceptor: bool) -> None:
    d, a, at_a, at_d = pair(dialer, acceptor)
    assert d.compressed is False and a.compressed is False
    if not acceptor:
        assert b"".join(at_d).startswith(hello("B"))          # byte for byte the HELLO of earlier versions
    if not dialer:
        assert b"".join(at_a).startswith(hello("A"))
    data = chat(1)
    assert d.send(data) == data and a.receive(data) == (data, b"")


def test_bytes_written_before_the_peers_hello_wait_for_it() -> None:
    d = LinkCodec(True)
    first = d.send(hello("A") + wire.encode_frame([wire.HEARTBEAT, 0, 0]))
    assert handshake.offered(first) == compress.CAP_ZSTD | compress.CAP_DICT and frames([first])[0][0] == wire.HELLO
    a = LinkCodec(True)
    assert a.receive(first[:3]) == (b"", b"")                 # the first frame arrives in pieces
    plain, _ = a.receive(first[3:])
    reply = a.send(hello("B"))
    plain_d, released = d.receive(reply)
    assert frames([plain_d])[0][0] == wire.HELLO
    assert a.receive(released)[0] == wire.encode_frame([wire.HEARTBEAT, 0, 0])


def test_a_bomb_is_refused_before_it_is_expanded() -> None:
    cctx = zstandard.ZstdCompressor(compression_params=compress.params()).compressobj()
    bomb = cctx.compress(b"\x01" * (64 << 20)) + cctx.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK)
    assert len(bomb) < 64 << 10
    with pytest.raises(CompressionError, match="expands past"):
        Decompressor().decompress(bomb)
    with pytest.raises(CompressionError, match="expands past"):       # the dictionary changes no bound
        Decompressor(dict_data=compress.dictionary()).decompress(bomb)
    # A legitimate large frame of zeros passes: the floor covers one maximal frame in any read.
    cctx = zstandard.ZstdCompressor(compression_params=compress.params()).compressobj()
    one = cctx.compress(b"\0" * (1 << 20)) + cctx.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK)
    assert len(Decompressor().decompress(one)) == 1 << 20


def test_a_window_past_the_bound_and_a_corrupt_stream_are_refused() -> None:
    big = zstandard.ZstdCompressionParameters.from_level(
        3, window_log=24, format=zstandard.FORMAT_ZSTD1_MAGICLESS, write_content_size=0)
    cctx = zstandard.ZstdCompressor(compression_params=big).compressobj()
    data = cctx.compress(b"hello " * 100) + cctx.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK)
    with pytest.raises(CompressionError):
        Decompressor().decompress(data)
    with pytest.raises(CompressionError):
        Decompressor().decompress(b"\x00\x00\xff\xff\xff\xff" * 4)


def test_a_hello_offer_with_a_bad_capability_field_is_a_protocol_violation() -> None:
    f = handshake.hello_frame("m", "A", 7, 0, 0, 1, 1, TERMS) + ["zstd"]
    with pytest.raises(Exception, match="capabilities"):
        handshake.check_hello(f, mission="m", me="B", peers=["A"], dialed=None, identity=None, terms=TERMS)
    assert handshake.offered(wire.encode_frame([wire.BYE, "no"])) == 0
    assert handshake.offer(wire.encode_frame([wire.BYE, "no"]), 1) == wire.encode_frame([wire.BYE, "no"])


def test_the_mission_setting_is_zstd_or_none() -> None:
    from contracts.mission import MissionError, parse_rcm_settings
    assert parse_rcm_settings({}).compression == "zstd"
    assert parse_rcm_settings({"compression": "none"}).compression == "none"
    with pytest.raises(MissionError, match="compression = 'lz4' must be one of zstd, none"):
        parse_rcm_settings({"compression": "lz4"})
