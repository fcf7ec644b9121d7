"""front_end.Requests and Signal: a TCP front end's per-connection request queue and its reader's wake-up."""
from __future__ import annotations

import asyncio

from chat_server.front_end import Requests, Signal


async def test_requests_come_out_in_order_and_a_waiting_worker_wakes_on_the_next() -> None:
    q: Requests[int] = Requests()
    q.put_nowait(1)
    q.put_nowait(2)
    assert q.qsize() == 2
    assert await q.get() == 1
    q.done()
    assert await q.get() == 2 and q.qsize() == 0
    q.done()
    got = asyncio.ensure_future(q.get())
    await asyncio.sleep(0)
    assert not got.done()                       # nothing queued: the worker waits
    q.put_nowait(3)
    q.put_nowait(4)
    assert await got == 3
    q.done()
    assert await q.get() == 4


async def test_one_request_is_handled_at_a_time_by_the_reader_or_the_worker() -> None:
    """The reader takes a request at once while none is being handled; what is put meanwhile (a server frame's
    request) waits for it to be done, and the worker takes it then, not beside it."""
    q: Requests[str] = Requests()
    worker = asyncio.ensure_future(q.get())
    await asyncio.sleep(0)
    q.put_nowait("say")
    assert q.take_now() == "say"                # the reader's, a turn before the worker would wake
    q.put_nowait("join")                        # put while the say is handled
    assert q.take_now() is None
    for _ in range(3):
        await asyncio.sleep(0)
    assert not worker.done()                    # the worker woke, and waits for the say to be done
    q.done()
    assert await asyncio.wait_for(worker, 1) == "join"
    assert q.take_now() is None                 # the worker's is being handled now
    q.put_nowait("part")
    q.done()
    assert q.take_now() == "part"


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
