"""The disk's flush latency beside a benchmark round (``peer_irc_fanout.py --disk-probe``).

A child process appends 300 bytes to a file in the round's directory and forces it (``fdatasync``) every
20 ms, as a write-ahead log's group commit does under a steady load, until the round ends; the round's
result then carries the syncs' p50, p99 and max and how many took over 50 ms. It tells a round whose tail
is the disk's (RCM accepts a line only once it is on disk: rcm/durability/wal.py) from one whose tail is the
server's, on a machine whose disk stalls now and then (a virtual disk on a shared host). The probe's own
load is one small sync per 20 ms.

    with disk_probe(Path(tmpdir)) as probe:
        ... the round ...
    result["disk"] = probe.summary
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

INTERVAL = 0.02
SLOW = 0.05


class Probe:
    summary: dict[str, Any] | None = None


def summarize(latencies: list[float]) -> dict[str, Any]:
    xs = sorted(latencies)
    if not xs:
        return {"syncs": 0}

    def at(q: float) -> float:
        return round(xs[min(len(xs) - 1, int(q * len(xs)))] * 1000, 2)

    return {"syncs": len(xs), "p50_ms": at(0.5), "p99_ms": at(0.99), "max_ms": round(xs[-1] * 1000, 1),
            "over_50ms": sum(x > SLOW for x in xs)}


@contextlib.contextmanager
def disk_probe(directory: Path) -> Iterator[Probe]:
    out = directory / "disk-probe.json"
    child = subprocess.Popen([sys.executable, __file__, str(directory / "disk-probe.log"), str(out)])
    probe = Probe()
    try:
        yield probe
    finally:
        child.send_signal(signal.SIGTERM)
        child.wait(30)
        if out.exists():
            probe.summary = summarize(json.loads(out.read_text()))


def main(log: str, out: str) -> None:
    stop = False

    def done(*_: Any) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, done)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    latencies: list[float] = []
    try:
        while not stop:
            os.write(fd, b"x" * 299 + b"\n")
            t0 = time.perf_counter()
            os.fdatasync(fd)
            latencies.append(time.perf_counter() - t0)
            time.sleep(INTERVAL)
    finally:
        os.close(fd)
        Path(out).write_text(json.dumps(latencies))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
