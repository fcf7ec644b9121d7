"""The edge's write path (rcm.server.outbox): one codec chunk, one TLS record and one write per turn, in order."""
from __future__ import annotations

import asyncio
import itertools
import ssl
from types import SimpleNamespace
from typing import cast

from rcm import wire
from rcm.server.outbox import Outbox, WireMeter, records
from rcm.server.peerlink import PeerLink, WriteTurns
from rcm.server.process import RcmServer
from rcm.wire.compress import LinkCodec
from tests.rcm.test_compress import chat, frames, hello, pair


class Records:
    """A stand-in for TlsLink: each send is one record (5-byte header, the plaintext, a 16-byte tag)."""

    def __init__(self, fail: bool = False) -> None:
        self.sends: list[bytes] = []
        self.fail = fail

    def send(self, data: bytes) -> bytes:
        if self.fail:
            raise ssl.SSLError("closing")
        self.sends.append(data)
        return b"\x17\x03\x03" + (len(data) + 16).to_bytes(2, "big") + data + bytes(16)


def unwrap(data: bytes) -> list[bytes]:
    out, pos = [], 0
    while pos < len(data):
        n = int.from_bytes(data[pos + 3:pos + 5], "big")
        out.append(data[pos + 5:pos + 5 + n - 16])
        pos += 5 + n
    return out


def test_a_turns_frames_go_out_as_one_compressed_chunk_one_record_and_one_write_in_order() -> None:
    d, a, _, _ = pair(True, True)
    meter = WireMeter()
    box = Outbox(d, meter)
    box.tls = tls = Records()
    sent = [chat(i) for i in range(3)] + [wire.encode_frame([wire.HEARTBEAT, 1, 0])]
    for f in sent:
        box.send(f)
    out = box.take()
    assert len(tls.sends) == 1 and records(out) == 1
    (chunk,) = unwrap(out)
    plain, _ = a.receive(chunk)
    assert frames([plain]) == frames(sent)
    assert not box and box.take() == b""
    assert meter.sends == 4 and meter.writes == 1 and meter.records == 1 and meter.plain == sum(map(len, sent))
    assert meter.frames == {"DATA": 3, "HEARTBEAT": 1}
    assert meter.frame_bytes["DATA"] == sum(map(len, sent[:3]))
    assert meter.coded == len(chunk) < meter.plain and meter.record_bytes == len(out)


def test_socket_bytes_made_before_the_turns_plaintext_is_encrypted_are_written_first() -> None:
    meter = WireMeter()
    box = Outbox(LinkCodec(False), meter)
    box.tls = Records()
    box.send(hello("A"))
    box.raw(b"handshake flight")
    out = box.take()
    assert out.startswith(b"handshake flight")
    assert unwrap(out[len(b"handshake flight"):]) == [hello("A")]
    assert meter.raw == len(b"handshake flight") and meter.writes == 1


def test_without_tls_the_coded_bytes_are_the_socket_bytes() -> None:
    box = Outbox(LinkCodec(False), WireMeter())
    box.send(hello("A"))
    box.send(chat(1))
    assert box.take() == hello("A") + chat(1)


def test_a_tls_error_leaves_nothing_to_write() -> None:
    box = Outbox(LinkCodec(False), WireMeter())
    box.tls = Records(fail=True)
    box.raw(b"flight")
    box.send(hello("A"))
    assert box.take() == b"" and not box


def test_frame_kinds_are_read_off_whole_frames_and_a_remainder_is_other() -> None:
    meter = WireMeter()
    hb = wire.encode_frame([wire.HEARTBEAT, 1, 0])
    meter.count_frames(chat(1) + hb + b"\x05\x93")
    assert meter.frames == {"DATA": 1, "HEARTBEAT": 1, "other": 1}
    assert meter.frame_bytes["other"] == 2
    big = wire.encode_frame([wire.DATA, 1, 1, [1, "A"], bytes(300)])     # a two-byte length
    meter.count_frames(big)
    assert meter.frame_bytes["DATA"] == len(chat(1)) + len(big)


class Transport:
    """What the edge writes, write by write."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True


def edge() -> tuple[PeerLink, Transport]:
    """An edge connection without TLS or compression, on a server with only what the write path uses."""
    ids = itertools.count(1)
    server = SimpleNamespace(compression=False, tls=None, tls_continue=False, hello_max_frame=4096,
                             next_conn_id=lambda: next(ids), meter=WireMeter(), want_flush=WriteTurns().want_flush)
    p = PeerLink(cast(RcmServer, server), None)
    p.transport = t = Transport()         # type: ignore[assignment]
    return p, t


async def test_the_edge_writes_a_turns_sends_once_at_the_start_of_the_next_loop_iteration() -> None:
    p, t = edge()
    p.send(hello("A"))
    p.send(chat(1))
    assert t.writes == []
    await asyncio.sleep(0)            # one loop iteration: the flush callback runs first in it
    assert t.writes == [hello("A") + chat(1)]
    p.send(chat(2))
    await asyncio.sleep(0)
    assert t.writes[1:] == [chat(2)]


async def test_closing_writes_what_the_turn_corked_first() -> None:
    p, t = edge()
    p.send(hello("A"))
    p.close()
    assert t.writes == [hello("A")] and t.closed
    await asyncio.sleep(0)
    assert t.writes == [hello("A")]


async def test_a_write_that_may_linger_waits_for_later_ones_and_one_that_may_not_takes_them_along() -> None:
    p, t = edge()
    p.send(chat(1), hold=30.0)
    p.send(chat(2), hold=30.0)
    await asyncio.sleep(0)
    assert t.writes == [] and p.lingering is not None          # held, for more to join
    p.send(chat(3))                                            # urgent (no hold): all of it goes now
    await asyncio.sleep(0)
    assert t.writes == [chat(1) + chat(2) + chat(3)] and p.lingering is None


async def test_a_lingering_write_goes_once_its_hold_is_up() -> None:
    p, t = edge()
    p.send(chat(1), hold=0.01)
    await asyncio.wait_for(_written(t), 5.0)
    assert t.writes == [chat(1)] and p.lingering is None


async def _written(t: Transport) -> None:
    while not t.writes:
        await asyncio.sleep(0.005)
