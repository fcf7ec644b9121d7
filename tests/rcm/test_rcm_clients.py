"""The local client API of a real server: a second client, resume, refusals, signals; the socket's owner and
mode, and that a process on it can neither pick the origin of what it sends nor pass for another site."""
from __future__ import annotations

import asyncio
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import msgpack
import pytest
from testkit import wait_until

from faultinject.missions import write_mission
from faultinject.procs import LocalRcm
from rcm import wire
from rcm.client import Delivery, RcmClient, RcmError, StatusChange, socket_path
from rcm.wire import local as clientwire

FAST = dict(heartbeat_timeout=0.2, liveness_timeout=1.0, silence_timeout=2.0, suspect_timeout=30.0,
            reconnect_period=0.3, max_payload_bytes=2000, max_frame_bytes=4096)


async def deliveries(c: RcmClient, n: int, timeout: float = 5.0) -> list[Delivery]:
    out: list[Delivery] = []

    async def read() -> None:
        async for ev in c.events():
            if isinstance(ev, Delivery):
                out.append(ev)
                if len(out) == n:
                    return
    await asyncio.wait_for(read(), timeout)
    return out


@pytest.mark.timeout(60)
async def test_second_client_sees_everything_and_resumes(tmp_path: Path):
    mp = write_mission(tmp_path / "m.toml", "clients", ["A", "B"], rcm=FAST)
    servers = LocalRcm(mp)
    clients: list[RcmClient] = []
    try:
        await asyncio.to_thread(servers.start_all)
        path = socket_path(servers.mission, "A")
        first = await RcmClient.connect(path, name="chat")
        second = await RcmClient.connect(path, name="monitor")
        clients = [first, second]
        await wait_until(lambda: first.statuses["B"] == "connected", "B connected")
        a1 = await first.send(b"from the first client")
        a2 = await second.send(b"from the second client")
        assert a1.seq + 1 == a2.seq
        got1, got2 = await deliveries(first, 2), await deliveries(second, 2)
        assert [d.msg_id for d in got1] == [d.msg_id for d in got2] == [a1.msg_id, a2.msg_id]
        # Resume: a third client that says it processed delivery 1 gets only 2.
        third = await RcmClient.connect(path, name="late", since=(first.incarnation, got1[0].n))
        clients.append(third)
        assert [d.msg_id for d in await deliveries(third, 1)] == [a2.msg_id]
        # Every client starts with the status of every peer.
        fresh = await RcmClient.connect(path, name="fresh")
        clients.append(fresh)
        assert fresh.statuses == {"B": "connected"}
        # Refusals are errors to the sender only, with a reason.
        with pytest.raises(RcmError, match="max_payload_bytes"):
            await second.send(b"x" * 2001)
        with pytest.raises(RcmError, match="unknown destination"):
            await second.send(b"x", ["Z"])
        # Expiry: a send already expired is refused; one that expires is replayed as a stub after it.
        with pytest.raises(RcmError, match="already past"):
            await second.send(b"x", expires_at=time.time() - 1.0)
        exp = time.time() + 0.3
        a3 = await first.send(b"short-lived", expires_at=exp)
        (live,) = await deliveries(first, 1)
        assert live.msg_id == a3.msg_id and live.expires_at == pytest.approx(exp)
        await wait_until(lambda: time.time() > exp + 0.05, "the message expired")
        replayer = await RcmClient.connect(path, name="replayer", since=(first.incarnation, live.n - 1))
        clients.append(replayer)
        (stub,) = await deliveries(replayer, 1)
        assert stub.msg_id == a3.msg_id and stub.expired and stub.payload == b""
        stats = await first.stats()
        assert sorted(stats["clients"]) == ["chat", "fresh", "late", "monitor", "replayer"]
    finally:
        for c in clients:
            await c.close()
        await asyncio.to_thread(servers.stop_all)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
async def test_signals_stop_cleanly(tmp_path: Path, sig):
    mp = write_mission(tmp_path / "m.toml", "sig", ["A", "B"], rcm=FAST)
    servers = LocalRcm(mp)
    await asyncio.to_thread(servers.start_all)
    c = await RcmClient.connect(socket_path(servers.mission, "B"), name="t")
    try:
        proc = servers.procs["A"]
        proc.send_signal(sig)
        assert await asyncio.to_thread(proc.wait, 15) == 0
        assert not socket_path(servers.mission, "A").exists()
        seen = []

        async def watch() -> None:
            async for ev in c.events():
                if isinstance(ev, StatusChange) and ev.site == "A":
                    seen.append(ev.status)
                    if ev.status == "suspected":
                        return
        await asyncio.wait_for(watch(), 10)
        assert "site A stopping" in servers.log_tail("A") and "Traceback" not in servers.log_tail("A")
    finally:
        await c.close()
        await asyncio.to_thread(servers.stop_all)


@pytest.mark.timeout(90)
def test_a_stop_asked_the_moment_the_client_socket_appears_still_stops_cleanly(tmp_path: Path) -> None:
    """The client socket exists (and answers: a supervisor's sign of readiness) before the server has finished
    starting; a SIGTERM then ran no ``stop`` (the process just ended, status 0) and left the socket behind.
    The loop now takes the signals over before the server starts."""
    mp = write_mission(tmp_path / "m.toml", "early", ["A", "B"], rcm=FAST)
    servers = LocalRcm(mp)
    path = socket_path(servers.mission, "A")
    for _ in range(3):
        proc = servers.start("A")
        deadline = time.monotonic() + 30
        while not path.exists():
            assert proc.poll() is None and time.monotonic() < deadline, servers.log_tail("A")
            time.sleep(0.0005)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
        assert not path.exists(), servers.log_tail("A")
        assert "site A stopping" in servers.log_tail("A")


# --- the local socket: who may connect, and what a local process can claim -----------------------------
@pytest.fixture(scope="module")
def rcm2(tmp_path_factory):
    """Two real RCM sites, shared by the tests of the local socket below."""
    base = tmp_path_factory.mktemp("local-socket")
    path = write_mission(base / "mission.toml", "local-socket", ["A", "B"],
                         rcm={"heartbeat_timeout": 0.1, "liveness_timeout": 0.4, "reconnect_period": 0.2})
    servers = LocalRcm(path, log_level="warning")
    servers.start_all()
    try:
        yield servers
    finally:
        servers.stop_all()


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_the_client_socket_is_owner_only_inside_an_owner_only_directory(rcm2):
    for site in ("A", "B"):
        sock = socket_path(rcm2.mission, site)
        st, parent = os.stat(sock), os.stat(sock.parent)
        assert stat.S_ISSOCK(st.st_mode)
        assert st.st_uid == os.getuid() and parent.st_uid == os.getuid()
        assert stat.S_IMODE(st.st_mode) & 0o007 == 0, oct(st.st_mode)          # nobody else by the mode ...
        assert stat.S_IMODE(parent.st_mode) == 0o700, oct(parent.st_mode)      # ... nor through the directory


@pytest.mark.slow
@pytest.mark.timeout(90)
@pytest.mark.skipif(os.getuid() != 0, reason="needs root to try the socket as another user")
def test_another_user_cannot_connect_to_the_client_socket(rcm2):
    sock = str(socket_path(rcm2.mission, "A"))
    probe = ("import os, socket, sys\n"
             "os.setgroups([]); os.setgid(65534); os.setuid(65534)\n"
             "s = socket.socket(socket.AF_UNIX)\n"
             "try:\n    s.connect(sys.argv[1])\nexcept PermissionError:\n    print('refused')\n"
             "else:\n    print('connected')\n")
    out = subprocess.run([sys.executable, "-c", probe, sock], capture_output=True, text=True, timeout=30)
    assert out.stdout.strip() == "refused", (out.stdout, out.stderr)
    # The same process as the servers' user may (the documented trust boundary: the user, not the process).
    s = socket.socket(socket.AF_UNIX)
    s.connect(sock)
    s.close()


@pytest.mark.slow
@pytest.mark.timeout(90)
async def test_a_local_process_cannot_send_as_another_site(rcm2):
    """A process on B's socket sends a chat payload naming A as its origin (and a raw send frame with an
    origin element): A's client gets it from B, numbered in B's sequence."""
    a = await RcmClient.connect(socket_path(rcm2.mission, "A"), name="reader")
    b = await RcmClient.connect(socket_path(rcm2.mission, "B"), name="intruder")
    try:
        await wait_until(lambda: a.statuses.get("B") == "connected" and b.statuses.get("A") == "connected",
                         "A and B connected", timeout=5)
        forged = msgpack.packb({"k": "m", "r": "ops", "u": "alice", "t": "as A", "s": 1.0, "c": "x",
                                "origin": "A", "msg_id": "A:1"})
        acc = await b.send(forged)
        assert acc.msg_id.startswith("B:")
        # A raw client whose send frame carries an extra element naming A: refused, or sent as B's.
        reader, writer = await asyncio.open_unix_connection(str(socket_path(rcm2.mission, "B")))
        writer.write(wire.encode_frame(["hello", "raw", None, None]))
        writer.write(wire.encode_frame(["send", 1, b"raw", None, "A"]))
        writer.write(wire.encode_frame(["send", 2, b"raw2", None, {"origin": "A"}]))
        dec, replies = clientwire.decoder(), []
        while len([f for f in replies if f[0] in ("accepted", "refused", "error")]) < 2:
            try:
                data = await asyncio.wait_for(reader.read(65536), 10)
            except (BrokenPipeError, ConnectionResetError):
                break       # the server closed on the bad frame while our later frames were still going out
            if not data:
                break
            replies += dec.feed(data)
        writer.close()
        for f in replies:
            if f[0] == "accepted":
                assert str(f[2]).startswith("B:"), f
        got: list[Delivery] = []

        async def collect() -> None:
            async for ev in a.events():
                if isinstance(ev, Delivery):
                    got.append(ev)
                    if ev.payload == forged:
                        return
        await asyncio.wait_for(collect(), 10)
        for ev in got:
            assert ev.origin == "B" and ev.msg_id.startswith("B:"), ev
    finally:
        await a.close()
        await b.close()


@pytest.mark.timeout(30)
async def test_connections_past_the_cap_are_told_why_and_closed_and_the_others_go_on(tmp_path: Path,
                                                                                     monkeypatch) -> None:
    """A local program leaking connections cannot take the descriptors the peers need (localclients.MAX_CLIENTS)."""
    from contracts.mission import load_mission
    from rcm.server import RcmServer, localclients
    monkeypatch.setattr(localclients, "MAX_CLIENTS", 3)
    server = RcmServer(load_mission(write_mission(tmp_path / "m.toml", "cap", ["A", "B"], rcm=FAST)), "A")
    await server.start()
    path = socket_path(server.mission, "A")
    chat = await RcmClient.connect(path, name="chat")
    idle = [await asyncio.open_unix_connection(str(path)) for _ in range(2)]
    try:
        reader, writer = await asyncio.open_unix_connection(str(path))       # the fourth
        got = await asyncio.wait_for(reader.read(), 10)                       # read to EOF: closed
        frames = clientwire.decoder().feed(got)
        assert frames == [["error", "too many local clients (3 connected): try again later"]]
        writer.close()
        assert server.stats()["clients_refused"] == 1
        accepted = await chat.send(b"still served")                           # the others go on
        assert accepted.seq >= 1
        idle[0][1].close()                                                     # one leaves: room for another
        await wait_until(lambda: len(server.clients.connected) == 2, "the idle connection gone")
        again = await RcmClient.connect(path, name="monitor")
        await again.close()
    finally:
        for _, w in idle[1:]:
            w.close()
        await chat.close()
        await server.stop()


@pytest.mark.timeout(90)
async def test_a_clients_will_goes_out_when_it_is_gone_and_never_when_taken_back_or_the_server_stops(
        tmp_path: Path) -> None:
    """A client's will (rcm.wire.local ``will``) is sent as its site's message once its connection ends, even by
    a crash; taken back, it is not; a bad one is a bad request; the server's own stop sends none."""
    mp = write_mission(tmp_path / "m.toml", "wills", ["A", "B"], rcm=FAST)
    servers = LocalRcm(mp)
    clients: list[RcmClient] = []
    try:
        await asyncio.to_thread(servers.start_all)
        path_a, path_b = socket_path(servers.mission, "A"), socket_path(servers.mission, "B")
        reader = await RcmClient.connect(path_b, name="reader")
        sender = await RcmClient.connect(path_a, name="sender")
        clients += [reader, sender]
        await wait_until(lambda: reader.statuses["A"] == "connected" and sender.statuses["B"] == "connected",
                         "A and B connected")

        async def next_from_a() -> bytes:
            (d,) = await deliveries(reader, 1)
            assert d.origin == "A"
            return d.payload

        # Left and the client gone: the will arrives at B (and A), from A.
        leaver = await RcmClient.connect(path_a, name="chat")
        await leaver.will(b"chat of A is gone")
        await leaver.stats()                                   # (the will is in before what follows)
        await leaver.close()
        assert await next_from_a() == b"chat of A is gone"
        # Replaced, then taken back: nothing when it goes.
        taker = await RcmClient.connect(path_a, name="chat")
        await taker.will(b"first", ["B"])
        await taker.will(b"second", ["B"])
        await taker.will(None)
        await taker.stats()
        await taker.close()
        await sender.send(b"marker 1")
        assert await next_from_a() == b"marker 1"
        # A client killed (its process gone: the socket closes under it) sends its will too.
        script = ("import asyncio,sys\nfrom rcm.client import RcmClient\n"
                  "async def main():\n"
                  f"    c = await RcmClient.connect({str(path_a)!r}, name='doomed')\n"
                  "    await c.will(b'doomed is gone', ['B'])\n"
                  "    await c.stats()\n"
                  "    print('ready', flush=True)\n"
                  "    await asyncio.sleep(3600)\n"
                  "asyncio.run(main())\n")
        proc = await asyncio.create_subprocess_exec(sys.executable, "-c", script, stdout=asyncio.subprocess.PIPE)
        assert proc.stdout is not None
        assert (await proc.stdout.readline()).strip() == b"ready"
        proc.kill()
        await proc.wait()
        assert await next_from_a() == b"doomed is gone"
        # A bad will (an unknown site, a payload over max_payload_bytes) is a bad request: told, closed, not kept.
        for bad in ([b"x", ["Z"]], [b"x" * 2001, None]):
            raw = await RcmClient.connect(path_a, name="bad")
            raw._write(clientwire.encode(["will", *bad]))
            with pytest.raises(RcmError):
                await raw.stats()
            await raw.close()
        await sender.send(b"marker 2")
        assert await next_from_a() == b"marker 2"
        # The server's stop is not the client's end: no will (its peers see the site's status instead).
        stayer = await RcmClient.connect(path_a, name="chat")
        await stayer.will(b"must not be sent")
        await stayer.stats()
        await asyncio.to_thread(servers.stop, "A")
        await stayer.close()
        await asyncio.to_thread(servers.start, "A")
        await asyncio.to_thread(servers.wait_ready, "A")
        sender = await RcmClient.connect(path_a, name="sender")
        clients.append(sender)
        await wait_until(lambda: sender.statuses["B"] == "connected", "A and B connected again")
        await sender.send(b"marker 3")
        assert await next_from_a() == b"marker 3"
    finally:
        for c in clients:
            await c.close()
        await asyncio.to_thread(servers.stop_all)


@pytest.mark.parametrize(("caps", "expect"), [((), False), (clientwire.CAPS, True)])
async def test_a_client_leaves_no_will_with_a_server_of_an_earlier_release(tmp_path: Path, caps: tuple[str, ...],
                                                                           expect: bool) -> None:
    """An RCM server of an earlier release lists no caps in its welcome and takes ``will`` for a bad request
    (closing the connection): during an upgrade a new chat server meets it, so the client says nothing and
    ``will`` returns False; a server that lists ``will`` gets it."""
    got: list[list] = []
    acked = asyncio.Event()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        dec = clientwire.decoder()
        writer.write(clientwire.welcome("A", ["A", "B"], 7, {"B": "connected"}, "lamport", 1, 0, {"B": None}, caps))
        try:
            while data := await reader.read(4096):
                for f in dec.feed(data):
                    got.append(f)
                    if f[0] == "ack":
                        acked.set()
        finally:
            writer.close()

    path = tmp_path / "rcm.sock"
    server = await asyncio.start_unix_server(serve, str(path))
    try:
        c = await RcmClient.connect(path, name="chat")
        assert await c.will(b"gone") is expect
        await c.ack(1)
        await asyncio.wait_for(acked.wait(), 10)
        assert [f[0] for f in got] == ["hello", *(["will"] if expect else []), "ack"], got
        await c.close()
    finally:
        server.close()
        await server.wait_closed()


def test_a_welcome_lists_its_caps_after_via_and_one_without_them_reads_as_before() -> None:
    new = clientwire.decode_event(msgpack.unpackb(clientwire.welcome(
        "A", ["A", "B"], 7, {"B": "connected"}, "lamport", 1, 0, {"B": None}, clientwire.CAPS)[1:]))
    assert new.caps == ("will",) and new.via == {"B": None}
    old = clientwire.decode_event(["welcome", "A", ["A", "B"], 7, {"B": "connected"}, "lamport", 1, 0])
    assert old.caps == () and old.via == {"B": None}


def test_a_will_goes_when_the_client_goes_and_not_when_its_server_stops() -> None:
    """The guard the process test above cannot tell apart (at a real stop the connections close too late for
    a will to leave anyway): a client connection that ends while the server runs hands its will to the API;
    one that ends because the server is stopping does not."""
    from rcm.durability.replay import DeliveryLog
    from rcm.server.localclients import ClientProtocol, LocalClients

    class Api:
        def __init__(self) -> None:
            self.gone: list[ClientProtocol] = []

        def client_gone(self, c: ClientProtocol) -> None:
            self.gone.append(c)

    class Server:
        stopping = False
        api = Api()
        clients = LocalClients("A", DeliveryLog(1 << 20), 1 << 20)

    for stopping, handed in ((True, False), (False, True)):
        Server.stopping, Server.api.gone = stopping, []
        c = ClientProtocol(Server())          # type: ignore[arg-type]
        c.will = clientwire.Will(b"gone", None)
        c.connection_lost(None)
        assert Server.api.gone == ([c] if handed else [])
