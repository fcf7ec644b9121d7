"""Coverage-guided fuzzing (atheris) of the RCM frame decoder, handshake and stack.

Each input is split in two: the first part goes to a fresh accepted
connection before its handshake (HELLO parsing), the second, after a valid
HELLO from peer B, as frames of an open connection. The target fails on any
exception escaping the stack, or if the other peer's connection is disturbed.

    .venv/bin/pip install -e '.[fuzz]'
    .venv/bin/python bench/fuzz_rcm.py -runs=1000000 [-max_len=512]
"""
from __future__ import annotations

import itertools
import sys

import atheris

with atheris.instrument_imports():
    from rcm import wire
    from rcm.config import RcmSettings
    from rcm.stack import Close, SiteStack, Transmit

SETTINGS = RcmSettings(max_frame_bytes=4096, max_payload_bytes=1024)
TERMS = ["lamport", "robust", ["A", "B", "C"]]
HELLO_B = wire.encode_frame([wire.HELLO, wire.PROTOCOL_VERSION, "m", "B", 7, 0, 0, 1, 0, TERMS])
HELLO_C = wire.encode_frame([wire.HELLO, wire.PROTOCOL_VERSION, "m", "C", 9, 0, 0, 1, 0, TERMS])
ids = itertools.count()
stack = SiteStack("A", ["A", "B", "C"], SETTINGS, 1, 0.0, mission="m")
stack.start(0.0)
stack.connection_made("good", 0.0, None)
stack.data_received("good", HELLO_C, 0.0)
now = 1.0


def target(data: bytes) -> None:
    global now
    now += 0.001
    fdp = atheris.FuzzedDataProvider(data)
    first = fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 256))
    rest = fdp.ConsumeBytes(fdp.remaining_bytes())
    for pre_handshake in (True, False):
        conn = f"bad{next(ids)}"
        stack.connection_made(conn, now, None)
        acts = []
        if pre_handshake:
            acts += stack.data_received(conn, first, now)
        else:
            acts += stack.data_received(conn, HELLO_B, now)
            acts += stack.data_received(conn, rest, now)
        for a in acts:
            if isinstance(a, Close) and a.conn == "good":
                raise AssertionError(f"the good connection was closed: {a}")
        if pre_handshake:
            assert not any(isinstance(a, Transmit) and a.conn == "good" for a in acts)
        if conn in stack.conns:
            stack.connection_lost(conn, now)
    if stack.status("C") != "connected" or "good" not in stack.conns:
        raise AssertionError("the good link was disturbed")
    stack.data_received("good", wire.encode_frame([wire.HEARTBEAT, stack.peers["C"].inb.expected % 128]), now)


if __name__ == "__main__":
    atheris.Setup(sys.argv, target)
    atheris.Fuzz()
