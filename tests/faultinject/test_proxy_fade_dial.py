"""A dial made during a fade: what the client sends is carried once the fade
ends; a client that gives up before it ends never reaches the target (a real
SYN would not have crossed, so no zombie connection appears later)."""
from __future__ import annotations

import asyncio

from test_proxy_link import QUIET, dial, link, read_exactly, wait_until


async def test_bytes_sent_while_the_dial_waits_arrive_first() -> None:
    async with link() as (proxy, target, clients):
        await proxy.blackhole(policy="buffer")
        _, c_writer = await dial(proxy, clients)
        c_writer.write(b"HELLO")
        await asyncio.sleep(QUIET)
        assert target.accepted.empty()
        await proxy.up()
        t_reader, _ = await target.next()
        c_writer.write(b"+more")
        assert await read_exactly(t_reader, 10) == b"HELLO+more"


async def test_a_dial_abandoned_during_the_fade_never_reaches_the_target() -> None:
    async with link() as (proxy, target, clients):
        await proxy.blackhole(policy="buffer")
        _, c_writer = await dial(proxy, clients)
        c_writer.write(b"HELLO")
        c_writer.close()                               # gave up: handshake timeout
        await wait_until(lambda: proxy.stats().connections.abandoned == 1)
        await proxy.up()
        await asyncio.sleep(QUIET)
        assert target.accepted.empty()
        assert proxy.stats().forward.bytes_out == 0
