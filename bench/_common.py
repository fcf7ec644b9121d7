"""Shared set-up for the RCM benchmarks: a local mission, optional link proxies, clients."""
from __future__ import annotations

import asyncio
import contextlib
import json
import os
import platform
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

from faultinject.missions import write_mission
from faultinject.procs import LocalRcm, wait_clients_connected
from rcm.client import RcmClient, socket_path

# Where benchmarks write their JSON and plots; RCM_BENCH_RESULTS moves them (tests run the --quick modes
# into a temporary directory so they never overwrite a real run's figures).
RESULTS = Path(os.environ.get("RCM_BENCH_RESULTS") or Path(__file__).resolve().parent / "results")
# The exit status of a benchmark that could not measure because the machine is too loaded (EX_TEMPFAIL): it
# says so on stderr; tests/test_bench_quick.py skips its smoke run with that reason rather than failing.
TOO_LOADED = 75


RECEIVERS_MALLOC = "glibc.malloc.mmap_threshold=1048576:glibc.malloc.trim_threshold=8388608"
"""glibc's allocator settings for a benchmark's receiving processes (peer_irc_fanout.py, chat_fanout.py).
asyncio's transport reads into a 256 KiB buffer (``recv(max_size)``) and shrinks it to what arrived; under
glibc's default threshold (128 KiB, raised only when a larger block is freed whole) that is an mmap, an mremap
and a munmap per read. Whether a receiving process ever raised its threshold depended on its logins (IRC's
floods of JOIN lines did, WebSocket's did not), so until 2026-11-28 peer_irc_fanout's WebSocket receivers paid
three more system calls per read than its IRC ones (21 against 13 us of CPU per delivery, 52% against 28% in
the kernel) on the two cores the servers share with them, and ngircd's (a read per line) slowed ngircd. A
fixed threshold above the buffer, and a trim threshold above that, make every system's receivers read alike
(WebSocket's 13.5 us, 27% in the kernel). The servers' own processes are not touched."""


@contextlib.contextmanager
def receivers_malloc() -> Iterator[None]:
    """``RECEIVERS_MALLOC`` in the environment of the processes started inside (multiprocessing's spawn passes
    it on), and the parent's environment as it was after."""
    before = os.environ.get("GLIBC_TUNABLES")
    os.environ["GLIBC_TUNABLES"] = RECEIVERS_MALLOC if before is None else f"{before}:{RECEIVERS_MALLOC}"
    try:
        yield
    finally:
        if before is None:
            del os.environ["GLIBC_TUNABLES"]
        else:
            os.environ["GLIBC_TUNABLES"] = before


def percentile(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    xs = sorted(values)
    k = (len(xs) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def write_result(name: str, result: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    result = {"benchmark": name, "at": time.strftime("%Y-%m-%dT%H:%M:%S"),
              "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
              **result}
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    return path


@contextlib.asynccontextmanager
async def mission(sites: list[str], rcm: dict[str, Any] | None = None, proxies: bool = False,
                  shape: Any = None, log_level: str = "warning",
                  connect: bool = True) -> AsyncIterator[dict[str, Any]]:
    """Start RCM servers (and link proxies); yield {"rcm", "links", "clients", "dir"}."""
    with tempfile.TemporaryDirectory(prefix="rcm-bench-") as d:
        mp = write_mission(Path(d) / "mission.toml", "bench", sites, rcm=rcm, proxies=proxies)
        servers = LocalRcm(mp, log_level=log_level)
        links = None
        if proxies:
            from faultinject.links import LinkSet
            links = LinkSet(servers.mission, shape=shape)
            await links.start()
        clients: dict[str, RcmClient] = {}
        try:
            await asyncio.to_thread(servers.start_all)
            if connect:
                clients = {s: await RcmClient.connect(socket_path(servers.mission, s), name="bench")
                           for s in sites}
                await wait_clients_connected(clients, 30.0)
            yield {"rcm": servers, "links": links, "clients": clients, "dir": Path(d),
                   "mission": servers.mission}
        finally:
            for c in clients.values():
                await c.close()
            await asyncio.to_thread(servers.stop_all)
            if links is not None:
                await links.close()


def summary(values: list[float]) -> dict[str, float]:
    return {"n": len(values), "p50": percentile(values, 50), "p95": percentile(values, 95),
            "p99": percentile(values, 99), "max": max(values) if values else float("nan"),
            "mean": statistics.fmean(values) if values else float("nan")}
