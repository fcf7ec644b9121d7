"""Local missions for tests, benchmarks, the runner and the demo: free ports and a mission file.

``free_ports`` hands out loopback ports below the kernel's ephemeral range;
``fixed_ports`` memorable ones below those; ``write_mission`` writes a mission
file with every site on loopback ports (and, with ``proxies``, a dial address
per directed pair for a link proxy). The processes that run a local mission
are in procs.py.
"""
from __future__ import annotations

import os
import socket
import tempfile
import time
from pathlib import Path
from typing import Any

from contracts.mission_writer import write_mission_file


def _ephemeral_range() -> tuple[int, int]:
    try:
        lo, hi = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(lo), int(hi)
    except (OSError, ValueError):
        return 32768, 60999          # Linux's default


# Ports handed out by ``free_ports`` come from below the kernel's ephemeral range, so no outgoing
# connection (a site dialing a peer, a client) can be given one between the moment it is chosen
# and the moment its server binds it. The cursor starts at a place drawn from the process id, so
# two processes choosing ports at once (a test run and a benchmark) rarely probe the same ones,
# and it only moves forward, so one process never hands out a port twice (until it wraps).
_POOL_LOW = 22000                   # above the blocks ``fixed_ports`` uses
_cursor: int | None = None
# And a port handed out is reserved for ``RESERVE_SECONDS`` in a directory every process of this user
# shares (a file per port, made exclusively): a port one process found free and has not bound yet is
# never handed out by another meanwhile, whatever its cursor (a benchmark a test worker starts has a
# cursor of its own, and once failed a test run with "address already in use").
RESERVE_SECONDS = 120.0
_RESERVED = Path(tempfile.gettempdir()) / f"rcm-free-ports-{os.getuid()}"


def port_slice(index: int, count: int) -> None:
    """Hand out ports from slice ``index`` of ``count`` equal slices of the pool from now on: for
    processes that know each other (test workers), whose pid-chosen starts could meet; a port
    another process checked free but has not bound yet is then never handed out here too."""
    global _cursor
    size = min(_ephemeral_range()[0], 65536) - _POOL_LOW
    if size >= 1000 and count > 0:
        _cursor = (index % count) * size // count


def free_ports(n: int) -> list[int]:
    """``n`` distinct TCP ports free on 127.0.0.1 now and outside the kernel's ephemeral range."""
    global _cursor
    top = min(_ephemeral_range()[0], 65536)
    if top - _POOL_LOW < 1000:       # an unusual ephemeral range: fall back on the kernel's choice
        return _kernel_ports(n)
    size = top - _POOL_LOW
    if _cursor is None:
        _cursor = (os.getpid() * 7919) % size
    ports: list[int] = []
    for _ in range(size):
        port = _POOL_LOW + _cursor
        _cursor = (_cursor + 1) % size
        if ports_free([port]) and _reserve(port):
            ports.append(port)
            if len(ports) == n:
                return ports
    raise RuntimeError(f"fewer than {n} free ports in {_POOL_LOW}-{top - 1}")


def _reserve(port: int, now: float | None = None) -> bool:
    """Claim ``port`` for ``RESERVE_SECONDS``; False if another process (or this one) claimed it within them."""
    now = time.time() if now is None else now
    path = _RESERVED / str(port)
    for _ in range(2):
        try:
            _RESERVED.mkdir(mode=0o700, exist_ok=True)
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
            return True
        except FileExistsError:
            try:
                if now - path.stat().st_mtime < RESERVE_SECONDS:
                    return False
                path.unlink()                   # an old claim: its server has bound the port, or never will
            except FileNotFoundError:
                pass
        except OSError:
            return True                         # no shared directory (read-only /tmp): the cursor alone, as before
    return False


def _kernel_ports(n: int) -> list[int]:
    socks: list[socket.socket] = []
    ports: list[int] = []
    try:
        while len(ports) < n:
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


def ports_free(ports: list[int]) -> bool:
    """Whether every port in ``ports`` can be bound on 127.0.0.1 right now."""
    for p in ports:
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", p))
            except OSError:
                return False
    return True


def fixed_ports(n_sites: int, n_proxies: int = 0, base: int = 17101, tries: int = 100) -> tuple[list[int], list[int]]:
    """Memorable ports below the ones ``free_ports`` hands out, so the two never race: RCM at ``base``+i,
    chat at ``base``+1000+i, proxies from ``base``+2000; the whole block shifted by 10 until every port is free.
    Returns (site ports as ``write_mission`` takes them, proxy ports)."""
    for k in range(tries):
        b = base + 10 * k
        site_ports = [p for i in range(n_sites) for p in (b + i, b + 1000 + i)]
        proxy_ports = [b + 2000 + j for j in range(n_proxies)]
        if ports_free(site_ports + proxy_ports):
            return site_ports, proxy_ports
    raise RuntimeError(f"no free block of ports from {base}")


def write_mission(path: Path, name: str, sites: list[str], rcm: dict[str, Any] | None = None,
                  dial: dict[str, dict[str, str]] | None = None, data_dir: str = "var",
                  chat: dict[str, Any] | None = None, proxies: bool = False,
                  ports: list[int] | None = None, proxy_ports: list[int] | None = None,
                  rates: dict[str, dict[str, int]] | None = None, labels: dict[str, Any] | None = None,
                  clearances: dict[str, dict[str, Any]] | None = None) -> Path:
    """Write a mission file with every site on free 127.0.0.1 ports.

    ``proxies=True`` gives every site a ``dial`` address of its own for every
    peer (a free port where a link proxy can listen), so every directed link
    can be emulated by ``faultinject.links.LinkSet``. ``ports`` (rcm, chat
    for each site in turn) and ``proxy_ports`` (one per directed pair) choose
    the ports instead (see ``fixed_ports``). ``rates``: site -> {peer: bits per second}, its
    ``[sites.A.rate]`` table (paced links, precedence lanes). ``labels``: the ``[labels]`` table;
    ``clearances``: site -> its ``[sites.A.clearance]`` table (``{"level", "caveats"}``).
    """
    ports = ports or free_ports(2 * len(sites))
    if len(ports) != 2 * len(sites):
        raise ValueError(f"ports: need {2 * len(sites)}, got {len(ports)}")
    if proxies:
        pairs = [(a, b) for a in sites for b in sites if a != b]
        if proxy_ports is not None:
            if len(proxy_ports) != len(pairs):
                raise ValueError(f"proxy_ports: need {len(pairs)}, got {len(proxy_ports)}")
            pports = list(proxy_ports)
        else:
            pports = [p for p in free_ports(len(pairs) + 2 * len(sites)) if p not in ports][:len(pairs)]
        dial = {a: {} for a in sites}
        for (a, b), port in zip(pairs, pports):
            dial[a][b] = f"127.0.0.1:{port}"
    tables: dict[str, Any] = {"mission": {"name": name, "data_dir": data_dir}, "rcm": dict(rcm or {})}
    if chat:
        tables["chat"] = dict(chat)
    if labels:
        tables["labels"] = dict(labels)
    sites_table: dict[str, dict[str, Any]] = {}
    for i, s in enumerate(sites):
        site: dict[str, Any] = {"rcm": f"127.0.0.1:{ports[2 * i]}", "chat": f"127.0.0.1:{ports[2 * i + 1]}"}
        if dial and dial.get(s):
            site["dial"] = dict(dial[s])
        if rates and rates.get(s):
            site["rate"] = {peer: int(bps) for peer, bps in rates[s].items()}
        if clearances and clearances.get(s):
            site["clearance"] = dict(clearances[s])
        sites_table[s] = site
    tables["sites"] = sites_table
    return write_mission_file(path, tables)
