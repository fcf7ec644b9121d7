"""front_end.Requests and Signal: a TCP front end's per-connection request queue and its reader's wake-up."""
from __future__ import annotations

import asyncio

from chat_server.front_end import Requests, Signal


async def test_requests_come_out_in_order_and_a_waiting_worker_wakes_on_the_next() -> None:
    q: Requests[int] = Requests()
    q.put_nowait(1)
    q.put_nowait(2)
    assert q.qsize() == 2
    assert [await q.get(), await q.get()] == [1, 2] and q.qsize() == 0
    got = asyncio.ensure_future(q.get())
    await asyncio.sleep(0)
    assert not got.done()                       # nothing queued: the worker waits
    q.put_nowait(3)
    q.put_nowait(4)
    assert await got == 3 and await q.get() == 4


async def test_a_cancelled_wait_leaves_the_queue_usable() -> None:
    q: Requests[str] = Requests()
    waiting = asyncio.ensure_future(q.get())
    await asyncio.sleep(0)
    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)
    q.put_nowait("x")
    assert await asyncio.wait_for(q.get(), 1) == "x"


async def test_a_signal_wakes_its_waiter_and_a_set_signal_does_not_wait() -> None:
    s = Signal()
    waiter = asyncio.ensure_future(s.wait())
    await asyncio.sleep(0)
    assert not waiter.done()
    s.set()
    await asyncio.wait_for(waiter, 1)
    await asyncio.wait_for(s.wait(), 1)         # still set
    s.clear()
    assert not s.is_set()
