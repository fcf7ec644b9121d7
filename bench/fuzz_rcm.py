"""Coverage-guided fuzzing (atheris) of the RCM frame decoder, handshake and stack.

Each input is split in two: the first part goes to a fresh accepted
connection before its handshake (HELLO parsing), the second, after a valid
HELLO from peer B, as frames of an open connection. The target fails on any
exception escaping the stack, or if the other peer's connection is disturbed.

    .venv/bin/pip install -e '.[fuzz]'
    .venv/bin/python bench/fuzz_rcm.py -runs=1000000 [-max_len=512]
    .venv/bin/python bench/fuzz_rcm.py --quick          # 5,000 seeded random inputs, no atheris
"""
from __future__ import annotations

import itertools
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._fuzzing import atheris, main  # noqa: E402

if atheris is not None:
    with atheris.instrument_imports():
        from contracts.mission import RcmSettings
        from contracts.status import LinkStatus
        from rcm import wire
        from rcm.actions import Close, Transmit
        from rcm.stack import SiteStack
else:
    from contracts.mission import RcmSettings
    from contracts.status import LinkStatus
    from rcm import wire
    from rcm.actions import Close, Transmit
    from rcm.stack import SiteStack

SETTINGS = RcmSettings(max_frame_bytes=4096, max_payload_bytes=1024)
CONNECTED = LinkStatus.CONNECTED.value
ids = itertools.count()
stack = SiteStack("A", ["A", "B", "C"], SETTINGS, 1, 0.0, mission="m")
# The mission's terms as this version of the stack puts them in a HELLO (their wire form has grown).
TERMS = stack.terms.encode() if hasattr(stack.terms, "encode") else ["lamport", "robust", ["A", "B", "C"]]
HELLO_B = wire.encode_frame([wire.HELLO, wire.PROTOCOL_VERSION, "m", "B", 7, 0, 0, 1, 0, TERMS])
HELLO_C = wire.encode_frame([wire.HELLO, wire.PROTOCOL_VERSION, "m", "C", 9, 0, 0, 1, 0, TERMS])
stack.start(0.0)
stack.connection_made("good", 0.0, None)
stack.data_received("good", HELLO_C, 0.0)
if stack.status("C") != CONNECTED:
    raise SystemExit("fuzz_rcm: the good peer's HELLO was refused: the fuzzer's HELLO no longer matches the stack")
now = 1.0


COUNTS = {"connections": 0, "closed": 0}


def target(fdp: Any) -> None:
    global now
    now += 0.001
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
        COUNTS["connections"] += 1
        if conn in stack.conns:
            stack.connection_lost(conn, now)
        else:
            COUNTS["closed"] += 1
    if stack.status("C") != CONNECTED or "good" not in stack.conns:
        raise AssertionError("the good link was disturbed")
    stack.data_received("good", wire.encode_frame([wire.HEARTBEAT, stack.peers["C"].inb.expected % 128]), now)


def tally() -> str:
    return (f"hostile connections closed by the stack {COUNTS['closed']}/{COUNTS['connections']}, "
            "the good link undisturbed")


if __name__ == "__main__":
    sys.exit(main("fuzz_rcm", target, __doc__.splitlines()[0], tally))
