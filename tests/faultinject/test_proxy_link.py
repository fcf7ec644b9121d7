"""LinkProxy (faultinject/proxy.py) over real sockets on 127.0.0.1.

Timing assertions are lower bounds and orderings only, never upper bounds on
wall time; "nothing flows" is checked with short waits that must time out.
"""
from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import AsyncIterator

import pytest
from testkit import wait_until

from faultinject.proxy import LinkError, LinkProxy
from faultinject.shaping import BlackholePolicy, LinkMode, Shape, mode_timeline

QUIET = 0.25  # seconds to wait when checking that nothing arrives


class Target:
    """A listening server whose accepted connections the test drives by hand."""

    def __init__(self) -> None:
        self.accepted: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = asyncio.Queue()
        self.writers: list[asyncio.StreamWriter] = []
        self.server: asyncio.Server | None = None

    def _on_connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.append(writer)
        self.accepted.put_nowait((reader, writer))

    @property
    def address(self) -> tuple[str, int]:
        assert self.server is not None
        host, port = self.server.sockets[0].getsockname()[:2]
        return host, port

    async def __aenter__(self) -> Target:
        self.server = await asyncio.start_server(self._on_connect, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()
        await _close_all(self.writers)
        await self.server.wait_closed()

    async def next(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.wait_for(self.accepted.get(), 5)


async def _close_all(writers: list[asyncio.StreamWriter]) -> None:
    for w in writers:
        if w.transport.get_write_buffer_size():
            w.transport.abort()  # unsent data would hold a graceful close forever
        else:
            w.close()
    for w in writers:
        with contextlib.suppress(ConnectionError, OSError):
            await w.wait_closed()


@contextlib.asynccontextmanager
async def link(**kwargs: object) -> AsyncIterator[tuple[LinkProxy, Target, list[asyncio.StreamWriter]]]:
    """A target, a proxy to it, and a list where tests put client writers to be closed."""
    clients: list[asyncio.StreamWriter] = []
    async with Target() as target:
        async with LinkProxy(("127.0.0.1", 0), target.address, name="A->B", **kwargs) as proxy:  # type: ignore[arg-type]
            try:
                yield proxy, target, clients
            finally:
                await _close_all(clients)


async def dial(proxy: LinkProxy,
               clients: list[asyncio.StreamWriter]) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection(*proxy.address)
    clients.append(writer)
    return reader, writer


async def read_exactly(reader: asyncio.StreamReader, n: int) -> bytes:
    return await asyncio.wait_for(reader.readexactly(n), 5)


async def assert_nothing_arrives(reader: asyncio.StreamReader) -> None:
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(reader.read(1), QUIET)


async def assert_reset_or_eof(reader: asyncio.StreamReader) -> None:
    try:
        data = await asyncio.wait_for(reader.read(100), 5)
    except ConnectionResetError:
        return
    assert data == b""


async def test_forwards_both_ways_and_counts() -> None:
    async with link() as (proxy, target, clients):
        c_reader, c_writer = await dial(proxy, clients)
        c_writer.write(b"hello")
        t_reader, t_writer = await target.next()
        assert await read_exactly(t_reader, 5) == b"hello"
        t_writer.write(b"world!")
        assert await read_exactly(c_reader, 6) == b"world!"
        s = proxy.stats()
        assert (s.forward.bytes_in, s.forward.bytes_out) == (5, 5)
        assert (s.reverse.bytes_in, s.reverse.bytes_out) == (6, 6)
        assert s.forward.chunks_in >= 1 and s.forward.chunks_out >= 1
        assert (s.connections.accepted, s.connections.active) == (1, 1)
        # The client half-closes: the target sees EOF, answers, closes; all of it crosses.
        c_writer.write_eof()
        assert await asyncio.wait_for(t_reader.read(10), 5) == b""
        t_writer.write(b"bye")
        t_writer.close()
        assert await read_exactly(c_reader, 3) == b"bye"
        assert await asyncio.wait_for(c_reader.read(10), 5) == b""
        await wait_until(lambda: proxy.stats().connections.active == 0, timeout=5.0)
        assert proxy.stats().connections.closed == 1
        assert proxy.stats().reverse.bytes_out == 9


async def test_many_connections_are_independent() -> None:
    async with link() as (proxy, target, clients):
        pairs = []
        for i in range(5):
            c_reader, c_writer = await dial(proxy, clients)
            c_writer.write(f"conn{i}".encode())
            t_reader, t_writer = await target.next()
            assert await read_exactly(t_reader, 5) == f"conn{i}".encode()
            pairs.append((c_reader, t_writer))
        for i, (c_reader, t_writer) in enumerate(pairs):
            t_writer.write(f"back{i}".encode())
            assert await read_exactly(c_reader, 5) == f"back{i}".encode()
        assert proxy.stats().connections.accepted == 5


async def test_reset_closes_live_connections_and_refuses_new_ones() -> None:
    async with link() as (proxy, target, clients):
        c_reader, c_writer = await dial(proxy, clients)
        c_writer.write(b"ping")
        t_reader, _ = await target.next()
        assert await read_exactly(t_reader, 4) == b"ping"

        await proxy.reset()
        assert proxy.mode is LinkMode.RESET
        await assert_reset_or_eof(c_reader)
        await assert_reset_or_eof(t_reader)

        # A new connection is accepted by the kernel, then reset; it never reaches the target.
        n_reader, n_writer = await dial(proxy, clients)
        await assert_reset_or_eof(n_reader)
        assert target.accepted.empty()
        s = proxy.stats().connections
        assert (s.reset_by_link, s.refused) == (1, 1)

        await proxy.up()
        r_reader, r_writer = await dial(proxy, clients)
        r_writer.write(b"again")
        t2_reader, _ = await target.next()
        assert await read_exactly(t2_reader, 5) == b"again"


async def test_reset_sends_rst_not_fin() -> None:
    async with link() as (proxy, target, clients):
        c_reader, c_writer = await dial(proxy, clients)
        c_writer.write(b"x")
        t_reader, _ = await target.next()
        assert await read_exactly(t_reader, 1) == b"x"
        await proxy.reset()
        # After an RST the socket is dead: a read reports the reset (ECONNRESET),
        # where a FIN would have read as a clean EOF.
        with pytest.raises(ConnectionResetError):
            await asyncio.wait_for(c_reader.read(10), 5)


async def test_blackhole_holds_connection_open_and_discards() -> None:
    async with link() as (proxy, target, clients):
        c_reader, c_writer = await dial(proxy, clients)
        c_writer.write(b"before")
        t_reader, t_writer = await target.next()
        assert await read_exactly(t_reader, 6) == b"before"

        await proxy.blackhole()
        c_writer.write(b"lost")
        t_writer.write(b"gone!")
        await assert_nothing_arrives(t_reader)
        await assert_nothing_arrives(c_reader)
        assert not c_writer.transport.is_closing() and not c_reader.at_eof()
        assert not t_reader.at_eof()
        s = proxy.stats()
        assert (s.forward.bytes_dropped, s.reverse.bytes_dropped) == (4, 5)

        await proxy.up()
        c_writer.write(b"after")
        t_writer.write(b"back")
        assert await read_exactly(t_reader, 5) == b"after"   # the fade's bytes are gone
        assert await read_exactly(c_reader, 4) == b"back"
        assert proxy.stats().connections.reset_by_link == 0


async def test_blackhole_buffer_policy_delivers_on_recovery() -> None:
    async with link(policy=BlackholePolicy.BUFFER) as (proxy, target, clients):
        c_reader, c_writer = await dial(proxy, clients)
        c_writer.write(b"a")
        t_reader, _ = await target.next()
        assert await read_exactly(t_reader, 1) == b"a"
        await proxy.blackhole()
        c_writer.write(b"held")
        await assert_nothing_arrives(t_reader)
        await proxy.up()
        c_writer.write(b"+next")
        assert await read_exactly(t_reader, 9) == b"held+next"
        assert proxy.stats().forward.bytes_dropped == 0


async def test_connection_opened_during_blackhole_is_dialled_on_recovery() -> None:
    async with link() as (proxy, target, clients):
        await proxy.blackhole()
        c_reader, c_writer = await dial(proxy, clients)
        await asyncio.sleep(QUIET)
        assert target.accepted.empty()          # the SYN has not crossed the fade
        assert not c_reader.at_eof()
        await proxy.up()
        t_reader, t_writer = await target.next()
        c_writer.write(b"hi")
        assert await read_exactly(t_reader, 2) == b"hi"


async def test_reset_during_blackhole_resets_held_connections() -> None:
    async with link() as (proxy, target, clients):
        await proxy.blackhole()
        c_reader, _ = await dial(proxy, clients)
        await wait_until(lambda: proxy.stats().connections.active == 1, timeout=5.0)
        await proxy.reset()
        await assert_reset_or_eof(c_reader)
        assert target.accepted.empty()
        assert proxy.stats().connections.reset_by_link == 1


async def test_delay_is_a_lower_bound_and_order_is_kept() -> None:
    delay = 0.15
    async with link(forward=Shape(delay=delay, jitter=0.1), seed=11) as (proxy, target, clients):
        c_reader, c_writer = await dial(proxy, clients)
        sent_at = time.monotonic()
        c_writer.write(b"first")
        t_reader, _ = await target.next()
        assert await read_exactly(t_reader, 5) == b"first"
        assert time.monotonic() - sent_at >= delay
        # Many small chunks with jitter up to 0.1 s: they must arrive in order.
        expected = b"".join(b"%03d," % i for i in range(40))
        for i in range(40):
            c_writer.write(b"%03d," % i)
            await c_writer.drain()
            await asyncio.sleep(0.003)
        assert await read_exactly(t_reader, len(expected)) == expected
        assert proxy.stats().forward.chunks_in > 5  # they really were separate chunks


async def test_reverse_delay_only_delays_answers() -> None:
    async with link(reverse=Shape(delay=0.2)) as (proxy, target, clients):
        c_reader, c_writer = await dial(proxy, clients)
        c_writer.write(b"q")
        t_reader, t_writer = await target.next()
        assert await read_exactly(t_reader, 1) == b"q"
        sent_at = time.monotonic()
        t_writer.write(b"a")
        assert await read_exactly(c_reader, 1) == b"a"
        assert time.monotonic() - sent_at >= 0.2


async def test_bandwidth_cap_is_a_lower_bound_on_transfer_time() -> None:
    bps = 400_000
    size = 25_000  # 0.5 s at 400 kbit/s
    async with link(forward=Shape(bandwidth_bps=bps)) as (proxy, target, clients):
        c_reader, c_writer = await dial(proxy, clients)
        c_writer.write(b"!")
        t_reader, _ = await target.next()
        assert await read_exactly(t_reader, 1) == b"!"
        payload = bytes(i % 251 for i in range(size))
        started = time.monotonic()
        c_writer.write(payload)
        assert await read_exactly(t_reader, size) == payload
        assert time.monotonic() - started >= size * 8 / bps * 0.95  # one read may start mid-segment
        assert proxy.stats().forward.chunks_out > size // Shape().segment_bytes  # released in segments


async def test_queue_limit_stops_reading_from_the_sender() -> None:
    queue = 2_000
    async with link(forward=Shape(bandwidth_bps=80_000, queue_bytes=queue)) as (proxy, target, clients):
        c_reader, c_writer = await dial(proxy, clients)
        c_writer.write(b"x")
        t_reader, _ = await target.next()
        assert await read_exactly(t_reader, 1) == b"x"
        c_writer.write(bytes(500_000))
        await asyncio.sleep(0.5)
        s = proxy.stats().forward
        # 10 kB/s for 0.5 s is ~5 kB out; the proxy may hold at most the queue plus one read.
        assert s.bytes_in - s.bytes_out <= 2 * queue
        assert s.bytes_in < 50_000  # far from the 500 kB offered: the sender is held back


async def test_receiver_that_does_not_read_pushes_back() -> None:
    queue = 64 * 1024
    async with link(forward=Shape(queue_bytes=queue)) as (proxy, target, clients):
        c_reader, c_writer = await dial(proxy, clients)
        c_writer.write(b"x")
        t_reader, _ = await target.next()
        assert await read_exactly(t_reader, 1) == b"x"
        c_writer.write(bytes(64 * 1024 * 1024))  # far more than the kernel buffers hold
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(c_writer.drain(), 1.0)
        s = proxy.stats().forward
        assert s.bytes_in - s.bytes_out <= 2 * queue
        assert c_writer.transport.get_write_buffer_size() > 0


async def test_unreachable_target_resets_the_client() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed_port = s.getsockname()[1]
    clients: list[asyncio.StreamWriter] = []
    async with LinkProxy(("127.0.0.1", 0), ("127.0.0.1", closed_port)) as proxy:
        try:
            c_reader, _ = await dial(proxy, clients)
            await assert_reset_or_eof(c_reader)
            assert proxy.stats().connections.connect_failures == 1
        finally:
            await _close_all(clients)


async def test_history_records_every_change_with_timestamps() -> None:
    async with link() as (proxy, target, clients):
        wall = time.time()
        await proxy.blackhole()
        await proxy.blackhole()  # no change, no event
        await proxy.reset()
        proxy.set_shape("forward", Shape(delay=0.5))
        await proxy.up()
    kinds = [(e.kind, e.value if e.kind != "shape" else e.value["direction"]) for e in proxy.history]
    assert kinds == [("start", "up"), ("mode", "blackhole"), ("mode", "reset"), ("shape", "forward"),
                     ("mode", "up"), ("stop", "up")]
    assert [e.t for e in proxy.history] == sorted(e.t for e in proxy.history)
    assert all(e.at >= wall - 1 for e in proxy.history[1:])
    assert [m for _, m in mode_timeline(proxy.history, "A->B")] == ["up", "blackhole", "reset", "up", "stopped"]


async def test_close_ends_live_connections_and_frees_the_port() -> None:
    clients: list[asyncio.StreamWriter] = []
    async with Target() as target:
        proxy = LinkProxy(("127.0.0.1", 0), target.address)
        await proxy.start()
        try:
            c_reader, c_writer = await dial(proxy, clients)
            c_writer.write(b"x")
            t_reader, _ = await target.next()
            assert await read_exactly(t_reader, 1) == b"x"
            await proxy.close()
            await assert_reset_or_eof(c_reader)
            with pytest.raises(OSError):
                await asyncio.open_connection(*proxy.address)
        finally:
            await proxy.close()
            await _close_all(clients)


async def test_listen_failure_names_the_address() -> None:
    async with Target() as target:
        proxy = LinkProxy(target.address, target.address, name="A->B")
        with pytest.raises(LinkError, match=r"A->B: cannot listen on 127\.0\.0\.1:"):
            await proxy.start()
        with pytest.raises(LinkError, match="not started"):
            _ = proxy.address
        with pytest.raises(ValueError, match="direction"):
            proxy.set_shape("sideways", Shape())


async def test_bytes_still_on_their_way_when_a_reset_ends_the_connection_count_as_lost() -> None:
    """What a link carries is in = out + dropped + lost, once its connections are over (bench/hf.py waits for
    the links to hold nothing; bytes a reset stranded used to count as held for ever)."""
    async with link(forward=Shape(bandwidth_bps=8_000)) as (proxy, target, clients):
        c_reader, c_writer = await dial(proxy, clients)
        c_writer.write(b"!")
        t_reader, _ = await target.next()
        assert await read_exactly(t_reader, 1) == b"!"
        c_writer.write(b"x" * 4_000)                      # 4 s at 8 kbit/s: most of it is still on its way
        await wait_until(lambda: proxy.stats().forward.bytes_in == 4_001, "the proxy read it all")
        await proxy.reset()
        await wait_until(lambda: proxy.stats().connections.active == 0, "the connection ended")
        s = proxy.stats().forward
        assert s.bytes_lost > 0 and s.bytes_in == s.bytes_out + s.bytes_dropped + s.bytes_lost
