"""Per-stage timestamps of a fan-out benchmark's lines inside the chat server (``peer_irc_fanout.py --stages``).

Theory of operation
-------------------
Not part of the server: ``peer_irc_fanout.py --stages`` puts this directory on the chat server's PYTHONPATH
and names an output file in ``FANOUT_STAGES_OUT``, so Python imports this module at start-up. In the chat
server process only, it wraps four methods to note, for every benchmark line (its text is ``fan <time> <n>``),
the wall clock and this thread's CPU clock when the author's ``say`` frame reaches the handlers
(``ClientFrames.handle``), when RCM's delivery of it starts (``ChatServer._on_delivery``), and when the
fan-out to the room starts and ends (``Sessions.to_room``: the writes of each session's first frame of the
turn happen inside it). It also samples the main thread's context switches and CPU every 50 lines, counts
aiohttp's heartbeat pings (when), and on the asyncio loop notes every callback that ran longer than 4 ms (the
loop's slow callbacks, without its debug mode). At exit it writes one JSON file; ``summarize`` reads it.
"""
from __future__ import annotations

import atexit
import json
import os
import sys
import time
from typing import Any

OUT = os.environ.get("FANOUT_STAGES_OUT")
_ARGV = getattr(sys, "orig_argv", [])
SLOW = 0.004            # seconds: a callback this long is noted


def _line(text: Any) -> int | None:
    """The benchmark line's number in ``fan <time> <n>``, else None."""
    if not isinstance(text, str) or not text.startswith("fan "):
        return None
    try:
        return int(text.split()[2])
    except (IndexError, ValueError):
        return None


def _install(out: str) -> None:
    import asyncio.events

    import aiohttp.web_ws as web_ws

    import chat_server.handlers as handlers
    import chat_server.server as server
    import chat_server.sessions as sessions

    lines: dict[int, dict[str, float]] = {}
    extra: dict[str, Any] = {"heartbeats": [], "slow": [], "switches": []}
    now: dict[str, float] = {}

    def stamp(n: int, name: str) -> None:
        r = lines.setdefault(n, {})
        r[name], r["cpu_" + name] = time.time(), time.thread_time()

    handle = handlers.ClientFrames.handle

    async def handle_timed(self: Any, session: Any, text: str) -> None:
        i = text.find('"fan ')
        if i >= 0:
            body = text[i + 1:text.find('"', i + 1)]
            n = _line(body)
            if n is not None:
                stamp(n, "received")
                lines[n]["written"] = float(body.split()[1])       # the author's clock (this machine's)
        await handle(self, session, text)

    on_delivery = server.ChatServer._on_delivery

    async def on_delivery_timed(self: Any, d: Any) -> None:
        now["delivery"], now["cpu_delivery"] = time.time(), time.thread_time()
        await on_delivery(self, d)

    to_room = sessions.Sessions.to_room

    def to_room_timed(self: Any, room: str, frame: dict[str, Any], readable: Any = None) -> None:
        n = _line(frame.get("text"))
        if n is None:
            return to_room(self, room, frame, readable)
        r = lines.setdefault(n, {})
        r["delivery"], r["cpu_delivery"] = now.get("delivery", 0.0), now.get("cpu_delivery", 0.0)
        stamp(n, "fanout")
        to_room(self, room, frame, readable)
        stamp(n, "fanned")
        if n % 50 == 0:
            with open("/proc/thread-self/status") as f:
                ctx = {k.strip(): int(v) for k, v in (x.split(":") for x in f if "ctxt_switches" in x)}
            extra["switches"].append((n, time.thread_time(), ctx["voluntary_ctxt_switches"],
                                      ctx["nonvoluntary_ctxt_switches"]))
        return None

    send_heartbeat = web_ws.WebSocketResponse._send_heartbeat

    def heartbeat_counted(self: Any) -> None:
        extra["heartbeats"].append(time.time())
        send_heartbeat(self)

    run = asyncio.events.Handle._run

    def run_timed(self: Any) -> None:
        t = time.perf_counter()
        run(self)
        d = time.perf_counter() - t
        if d > SLOW:
            cb = getattr(self, "_callback", None)
            name = getattr(cb, "__qualname__", repr(cb)[:60])
            coro = getattr(getattr(cb, "__self__", None), "get_coro", None)
            if coro is not None:
                name = "task " + getattr(coro(), "__qualname__", "?")
            extra["slow"].append((name, time.time() - d, d))

    handlers.ClientFrames.handle = handle_timed                     # type: ignore[method-assign]
    server.ChatServer._on_delivery = on_delivery_timed              # type: ignore[method-assign]
    sessions.Sessions.to_room = to_room_timed                       # type: ignore[method-assign]
    web_ws.WebSocketResponse._send_heartbeat = heartbeat_counted    # type: ignore[method-assign]
    asyncio.events.Handle._run = run_timed                          # type: ignore[method-assign]

    def dump() -> None:
        if not lines:           # (another ``python -m chat_server`` command, not the server)
            return
        with open(out, "w") as f:
            json.dump({"lines": lines, **extra}, f)
    atexit.register(dump)


if OUT and "-m" in _ARGV and _ARGV[_ARGV.index("-m") + 1:][:1] == ["chat_server"]:
    _install(OUT)
