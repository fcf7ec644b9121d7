"""front_end.Requests, handle_now, work_requests and Signal: a TCP front end's per-connection requests, handled by
its reader or its worker one at a time, and the reader's wake-up."""
from __future__ import annotations

import asyncio

from chat_server.front_end import Requests, Signal, handle_now, work_requests


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


class Conn:
    def __init__(self) -> None:
        self.requests: Requests[str] = Requests()
        self.taken = Signal()


async def test_the_reader_and_the_worker_share_the_requests_one_at_a_time_in_order() -> None:
    """What the reader finds waiting it handles at once, in order; a request put while it handles one (the
    worker wakes for it) waits until that one is done, never handled beside it; a handler's False ends either
    part."""
    conn = Conn()
    handled: list[str] = []
    running: list[str] = []
    gate = asyncio.Event()

    async def handle(item: str) -> bool:
        assert not running, f"{item} handled beside {running}"
        running.append(item)
        try:
            if item == "say":
                conn.requests.put_nowait("join")      # a server frame's request, while the say is on RCM
                await gate.wait()
            handled.append(item)
            return item != "quit"
        finally:
            running.remove(item)

    async def reader() -> bool:
        conn.requests.put_nowait("nick")           # two lines read at once (the worker wakes for them)
        conn.requests.put_nowait("say")
        return await handle_now(conn.requests, handle)

    worker = asyncio.ensure_future(work_requests(conn, handle))
    await asyncio.sleep(0)                          # the worker waits for a request
    reading = asyncio.ensure_future(reader())
    for _ in range(5):
        await asyncio.sleep(0)
    assert not worker.done()
    assert handled == ["nick"] and running == ["say"]      # the reader's two in order; the join waits for the say
    gate.set()
    assert await asyncio.wait_for(reading, 1) is True

    async def joined() -> None:
        while handled != ["nick", "say", "join"]:
            assert not worker.done()
            await conn.taken.wait()
            conn.taken.clear()
    await asyncio.wait_for(joined(), 1)
    conn.requests.put_nowait("quit")
    conn.requests.put_nowait("after")
    await asyncio.wait_for(worker, 1)                  # the worker's handler said the connection is done
    assert handled == ["nick", "say", "join", "quit"] and conn.taken.is_set()
    assert await handle_now(conn.requests, handle) is True and handled[-1] == "after"
    conn.requests.put_nowait("quit")
    conn.requests.put_nowait("never")
    assert await handle_now(conn.requests, handle) is False and handled[-1] == "quit"


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
