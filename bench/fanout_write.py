"""The fan-out write path alone: CPU per delivery of ``Sessions.to_room`` to many sockets, per write mode and loop.

Theory of operation
-------------------
``bench/peer_irc_fanout.py`` measures a whole site (RCM round trip, journal,
front end) against ngircd; this isolates the last step, where the chat
server spends most of its time at 1,000 clients: handing one encoded frame
to every session of a room and writing it to each socket. ``--clients``
loopback TCP connections are accepted into the event loop's own transports
(``loop.connect_accepted_socket``), each wrapped in a ``sessions.Session``
in one room; ``--lines`` message frames are fanned out with
``Sessions.to_room``, one per loop turn, as deliveries arrive at 50 lines/s.
The client ends are drained between batches, outside the timed part, so the
figure is the sending thread's CPU alone (``time.thread_time``: user +
system, so the kernel's share of each ``send`` counts; a busy machine
stretches wall time, not this).

Modes, each on every loop of ``--event-loops``, interleaved over ``--rounds``:
``session`` (the server's path: ``Sessions.to_room``, each session's first
frame of the turn at once, the rest at the turn's end,
``transport.write``) and ``floor`` (``os.write`` of a frame's worth of bytes
to each socket in a bare loop: the system calls alone, what no Python server
can go under with one write per client per line). The first line gives the
ratio session / floor per loop. (Writing around the transport, one
``os.write`` while its buffer is empty, was tried as a third mode: 0.96-0.99
of the session path at 1,000 clients, while two runs of the same path differ
by 0.90-0.91; it was not kept.)

``--irc`` adds a third mode, ``irc``: the same sockets as the IRC front
end's connections (irc_server.py ``IrcConnection``, registered and in the
room, on a stand-in for the chat server that has what a connection reads), the
frame fanned out by ``Sessions.to_room`` and shown by each connection in step
(``IrcSession.in_step``) as the server does: the IRC front end's whole cost per
recipient. (2026-11-29, 1,000 clients, uvloop, five rounds: irc 11.9 us against
the WebSocket path's 8.4 and the floor's 6.5 per delivery; the IRC path's
Python is about 2.5-3.5 us a recipient above the WebSocket path's, which
matches the whole-site benchmark's IRC/WebSocket CPU per delivery, 12.9 against
10.9 us; two runs of the same mode differ by up to 20% on this machine, so
compare medians of five rounds or more. Since the edge's steps, irc_steps.py,
2026-11-29 later: IRC over the WebSocket path 0.35-0.95 us.) It also measures the
translation of one message frame by each of ``--clients`` sans-IO
``IrcSession`` s in one channel (``on_frame``, sharing the front end's
quotes, presence and nick lists as irc_server.py's sessions do), in
microseconds of CPU per recipient.

    .venv/bin/python bench/fanout_write.py                  # 1,000 clients, 400 lines, 3 rounds (~15 s)
    .venv/bin/python bench/fanout_write.py --irc            # and IRC's translation per recipient
    .venv/bin/python bench/fanout_write.py --quick          # 200 clients, 100 lines, 1 round
"""
from __future__ import annotations

import argparse
import asyncio
import os
import resource
import socket
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import write_result  # noqa: E402
from chat_server.config import ChatSettings  # noqa: E402
from chat_server.sessions import Session, Sessions  # noqa: E402
from chat_server.tasks import Tasks  # noqa: E402
from rcm.cli import EVENT_LOOPS, run  # noqa: E402

ROOM = "fanout"
BATCH = 50            # lines between drains of the client ends (50 x ~250 bytes stays inside a socket's buffer)


def _frame(i: int) -> dict[str, Any]:
    return {"type": "message", "room": ROOM, "msg_id": f"A:{i}", "origin": "A", "user": "author", "n": i,
            "text": f"fan {time.time():.6f} {i}", "sent_at": 1_700_000_000.0 + i, "precedence": "ROUTINE"}


def _drain(clients: list[socket.socket]) -> None:
    for c in clients:
        try:
            while c.recv(1 << 16):
                pass
        except BlockingIOError:
            pass


async def _connections(n: int) -> tuple[list[asyncio.Transport], list[socket.socket]]:
    loop = asyncio.get_running_loop()
    listener = socket.create_server(("127.0.0.1", 0), backlog=n)
    port = listener.getsockname()[1]
    transports, clients = [], []
    for _ in range(n):
        c = socket.create_connection(("127.0.0.1", port))
        s, _addr = listener.accept()
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)     # as aiohttp's (asyncio's accept does not)
        c.setblocking(False)
        tr, _ = await loop.connect_accepted_socket(asyncio.Protocol, s)
        transports.append(tr)
        clients.append(c)
    listener.close()
    return transports, clients


def _irc_sessions(transports: list[asyncio.Transport], tmp: Path) -> Sessions:
    """``transports`` as the IRC front end's connections (irc_server.py ``IrcConnection``), each registered as
    u<i> and in the room, on a stand-in for the chat server and front end that has what a connection reads."""
    from types import SimpleNamespace

    from chat_server.irc_marks import ShownMarks
    from chat_server.irc_messages import Quotes
    from chat_server.irc_server import IrcConnection
    from chat_server.irc_state import NickLists, Presence
    from chat_server.irc_steps import Steps
    from contracts.labels import UNLABELED
    n = len(transports)
    members = {f"u{i}" for i in range(n)} | {"author"}
    sessions = Sessions(ChatSettings(), time.monotonic, Tasks())
    server = SimpleNamespace(sessions=sessions, site="A", mission=SimpleNamespace(name="b", labels=UNLABELED),
                             settings=sessions.settings, core=SimpleNamespace(rooms=SimpleNamespace(
                                 members_of=lambda room: members)), clock=time.time, monotonic=time.monotonic)
    front = SimpleNamespace(started_at=time.time(), quotes=Quotes(), presence=Presence(), nick_lists=NickLists(),
                            shown=ShownMarks(tmp / "irc-shown.json"), steps=Steps())
    for i, tr in enumerate(transports):
        c = IrcConnection(server, front, tr, "127.0.0.1")  # type: ignore[arg-type]
        for line in (b"PASS x", f"NICK u{i}".encode(), f"USER u{i} 0 * :u".encode()):
            c.irc.receive(line, 0.0, 0.0)
        c.user = f"u{i}"
        sessions.connections.add(c)
        c.send({"type": "welcome", "site": "A", "user": f"u{i}", "sites": {"A": "connected"}, "rooms": [],
                "presence": {"A": sorted(members)}})
        c.send({"type": "joined", "room": ROOM, "history": []})
        sessions.register(c, [ROOM])
    return sessions


async def measure(n: int, lines: int, modes: list[str]) -> dict[str, float]:
    """Microseconds of this thread's CPU per delivery, per mode."""
    import tempfile
    transports, clients = await _connections(n)
    sessions = Sessions(ChatSettings(), time.monotonic, Tasks())
    for i, tr in enumerate(transports):
        s = Session(sessions, None, tr, "127.0.0.1")
        s.user = f"u{i}"
        sessions.connections.add(s)
        sessions.register(s, [ROOM])
    tmp = tempfile.TemporaryDirectory() if "irc" in modes else None     # (the IRC front end's shown marks)
    irc = _irc_sessions(transports, Path(tmp.name)) if tmp is not None else None
    fds = [tr.get_extra_info("socket").fileno() for tr in transports]
    out: dict[str, float] = {}
    for mode in modes:
        cpu = 0.0
        for b in range(0, lines, BATCH):
            _drain(clients)
            await asyncio.sleep(0)
            t = time.thread_time()
            for i in range(b, min(lines, b + BATCH)):
                if mode == "floor":
                    data = b"x" * 200
                    for fd in fds:
                        os.write(fd, data)
                else:
                    (irc if mode == "irc" and irc is not None else sessions).to_room(ROOM, _frame(i))
                    await asyncio.sleep(0)                  # the turn's end (Sessions._flush)
            cpu += time.thread_time() - t
        out[mode] = cpu / (lines * n) * 1e6
    for tr in transports:
        tr.abort()
    for c in clients:
        c.close()
    await asyncio.sleep(0)
    if tmp is not None:
        tmp.cleanup()
    return out


def irc_translation_us(n: int, lines: int) -> float:
    """Microseconds of CPU per recipient for ``IrcSession.on_frame`` of a fanned-out message frame."""
    from chat_server.irc import IrcSession
    from chat_server.irc_messages import Quotes
    from chat_server.irc_state import NickLists, Presence
    members = {f"u{i}" for i in range(n)} | {"author"}
    shared: dict[str, Any] = {"quotes": Quotes(), "presence": Presence(), "nick_lists": NickLists()}
    sessions = []
    for i in range(n):
        s = IrcSession(server_name="A.irc.b", site="A", network="b", members_of=lambda room: members, **shared)
        for line in (b"PASS x", f"NICK u{i}".encode(), f"USER u{i} 0 * :u".encode()):
            s.receive(line, 0.0)
        s.on_frame({"type": "welcome", "site": "A", "user": f"u{i}", "sites": {"A": "connected"}, "rooms": [],
                    "presence": {"A": sorted(members)}}, 0.0)
        s.on_frame({"type": "joined", "room": ROOM, "history": []}, 0.0)
        sessions.append(s)
    t = time.thread_time()
    for i in range(lines):
        f = _frame(i)
        for s in sessions:
            s.on_frame(f, f["sent_at"] + 0.5)
    return (time.thread_time() - t) / (lines * n) * 1e6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=1000)
    ap.add_argument("--lines", type=int, default=400)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--event-loops", default="asyncio,uvloop")
    ap.add_argument("--quick", action="store_true", help="200 clients, 100 lines, one round, with --irc")
    ap.add_argument("--irc", action="store_true", help="also the IRC front end's connections (mode irc) and its "
                                                       "translation per recipient (sans-IO)")
    a = ap.parse_args()
    if a.quick:
        a.clients, a.lines, a.rounds, a.irc = 200, 100, 1, True
    loops = [x for x in a.event_loops.split(",") if x]
    if set(loops) - set(EVENT_LOOPS):
        ap.error(f"--event-loops: a subset of {','.join(EVENT_LOOPS)}")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)        # two descriptors per client
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, 2 * a.clients + 256)), hard))
    modes = ["session", "floor"] + (["irc"] if a.irc else [])
    runs: dict[str, dict[str, list[float]]] = {loop: {m: [] for m in modes} for loop in loops}
    for r in range(a.rounds):
        for loop in loops:
            order = modes if r % 2 == 0 else modes[::-1]
            got = run(measure(a.clients, a.lines, order), loop)
            for m, us in got.items():
                runs[loop][m].append(us)
    med = {loop: {m: statistics.median(v) for m, v in ms.items()} for loop, ms in runs.items()}
    head = ", ".join(f"{loop} {med[loop]['session'] / med[loop]['floor']:.2f}" for loop in loops)
    print(f"fanout_write: CPU per delivery, the session path / the bare system calls: {head} "
          f"({a.clients} clients, {a.lines} lines, median of {a.rounds})")
    for loop in loops:
        print(f"  {loop:8} " + "  ".join(f"{m} {med[loop][m]:.2f} us" for m in modes)
              + f"  (Python over the floor: {med[loop]['session'] - med[loop]['floor']:.2f} us"
              + (f"; IRC over the WebSocket path: {med[loop]['irc'] - med[loop]['session']:.2f} us" if a.irc else "")
              + ")")
    irc = None
    if a.irc:
        irc = statistics.median(irc_translation_us(a.clients, min(a.lines, 200)) for _ in range(a.rounds))
        print(f"  IRC translation (IrcSession.on_frame) {irc:.2f} us per recipient, on top of the write")
    path = write_result("fanout_write" + ("_quick" if a.quick else ""),
                        {"clients": a.clients, "lines": a.lines, "rounds": a.rounds, "us_per_delivery": runs,
                         "median_us_per_delivery": med, "irc_translation_us_per_recipient": irc})
    print(f"  -> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
