"""Issue 23 item 1, the local client socket with real RCM processes: who may connect, and that a local
process can neither pick the origin of what it sends nor make another site's messages look like its own."""
from __future__ import annotations

import asyncio
import os
import socket
import stat
import subprocess
import sys

import msgpack
import pytest

from faultinject.missions import write_mission
from faultinject.procs import LocalRcm
from rcm.client import Delivery, RcmClient, socket_path

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]
SITES = ["A", "B"]


@pytest.fixture(scope="module")
def rcm2(tmp_path_factory):
    base = tmp_path_factory.mktemp("review23")
    path = write_mission(base / "mission.toml", "review23", SITES,
                         rcm={"heartbeat_timeout": 0.1, "liveness_timeout": 0.4, "reconnect_period": 0.2})
    servers = LocalRcm(path, log_level="warning")
    servers.start_all()
    try:
        yield servers
    finally:
        servers.stop_all()


def test_review23_the_client_socket_is_owner_only_inside_an_owner_only_directory(rcm2):
    for site in SITES:
        sock = socket_path(rcm2.mission, site)
        st, parent = os.stat(sock), os.stat(sock.parent)
        assert stat.S_ISSOCK(st.st_mode)
        assert st.st_uid == os.getuid() and parent.st_uid == os.getuid()
        assert stat.S_IMODE(st.st_mode) & 0o007 == 0, oct(st.st_mode)          # nobody else by the mode ...
        assert stat.S_IMODE(parent.st_mode) == 0o700, oct(parent.st_mode)      # ... nor through the directory


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to try the socket as another user")
def test_review23_another_user_cannot_connect_to_the_client_socket(rcm2):
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


async def test_review23_a_local_process_cannot_send_as_another_site(rcm2):
    """A process on B's socket sends a chat payload naming A as its origin (and a raw send frame with an
    origin element): A's client gets it from B, numbered in B's sequence."""
    a = await RcmClient.connect(socket_path(rcm2.mission, "A"), name="reader")
    b = await RcmClient.connect(socket_path(rcm2.mission, "B"), name="intruder")
    try:
        for _ in range(100):
            if a.statuses.get("B") == "connected" and b.statuses.get("A") == "connected":
                break
            await asyncio.sleep(0.05)
        forged = msgpack.packb({"k": "m", "r": "ops", "u": "alice", "t": "as A", "s": 1.0, "c": "x",
                                "origin": "A", "msg_id": "A:1"})
        acc = await b.send(forged)
        assert acc.msg_id.startswith("B:")
        # A raw client whose send frame carries an extra element naming A: refused, or sent as B's.
        from rcm import wire
        from rcm.wire import local as clientwire
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
        await asyncio.sleep(0.3)
        for ev in got:
            assert ev.origin == "B" and ev.msg_id.startswith("B:"), ev
    finally:
        await a.close()
        await b.close()

