"""Peer baseline: a three-server ngircd network (Debian's ``ngircd``) behind our link proxies.

Theory of operation
-------------------
An IRC network is a spanning tree of servers: here ``A - B - C`` (B the hub),
each server link dialled by one side through a :class:`faultinject.proxy.LinkProxy`,
so the same proxies and outage schedules as in front of RCM sites apply to it.
Each server runs from its own configuration in a temporary directory, on
ports from ``faultinject.missions.free_ports``, with penalties off
(``MaxPenaltyTime = 0``) so a harness client may post at the test rate, and
``ConnectRetry`` at ngircd's floor of 5 s (RCM redials every 3 s).

:class:`IrcClient` is a minimal RFC 2812 client on a raw socket: it registers,
joins a channel, posts ``PRIVMSG`` and records every ``PRIVMSG`` it receives
with the time it arrived. An IRC server does not echo a client's own lines;
the client's own view places them where it sent them, as irssi shows them.

Nothing here is part of the product: it is measurement infrastructure for
``bench/peer_irc_outage.py``.
"""
from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from faultinject.missions import free_ports
from faultinject.proxy import LinkProxy
from faultinject.shaping import Shape

NGIRCD = shutil.which("ngircd") or "/usr/sbin/ngircd"
LINK_PASSWORD = "bench-link"


def ngircd_available() -> bool:
    """True when Debian's ngircd is installed (``bash deploy/sysdeps.sh ngircd``)."""
    return os.path.exists(NGIRCD)


@dataclass
class IrcServer:
    site: str
    name: str
    port: int
    conf: Path
    proc: subprocess.Popen[bytes] | None = None


class IrcNetwork:
    """ngircd servers for ``sites`` linked as a chain (each site to the next), every link through a proxy.

    ``links[(a, b)]`` is the proxy carrying the server link between neighbours ``a`` and ``b``
    (``a`` dials ``b`` through it).
    """

    def __init__(self, sites: list[str], directory: Path, shape: Shape | None = None) -> None:
        self.sites = sites
        self.dir = directory
        ports = free_ports(2 * len(sites))
        self.servers = {s: IrcServer(s, f"{s.lower()}.irc.bench", ports[i], directory / f"{s}.conf")
                        for i, s in enumerate(sites)}
        self.links: dict[tuple[str, str], LinkProxy] = {}
        for i in range(len(sites) - 1):
            a, b = sites[i], sites[i + 1]
            self.links[(a, b)] = LinkProxy(("127.0.0.1", ports[len(sites) + i]),
                                           ("127.0.0.1", self.servers[b].port), name=f"irc {a}->{b}",
                                           forward=shape, reverse=shape)

    def _config(self, s: IrcServer) -> str:
        lines = ["[Global]", f"Name = {s.name}", f"Info = bench site {s.site}", "Listen = 127.0.0.1",
                 f"Ports = {s.port}", "MotdPhrase = bench", "AdminInfo1 = bench", "AdminInfo2 = bench",
                 "AdminEMail = bench@localhost", f"PidFile = {self.dir / (s.site + '.pid')}",
                 "", "[Limits]", "MaxPenaltyTime = 0", "ConnectRetry = 5", "PingTimeout = 30", "PongTimeout = 10",
                 "MaxConnectionsIP = 0", "MaxJoins = 0", "",
                 "[Options]", "Ident = no", "PAM = no", "DNS = no", ""]
        for (a, b), proxy in self.links.items():
            if s.site not in (a, b):
                continue
            peer = self.servers[b if s.site == a else a]
            lines += ["[Server]", f"Name = {peer.name}", "Host = 127.0.0.1",
                      f"MyPassword = {LINK_PASSWORD}", f"PeerPassword = {LINK_PASSWORD}"]
            if s.site == a:                       # a dials b through the link proxy
                lines.append(f"Port = {proxy.listen[1]}")
            lines.append("")
        return "\n".join(lines)

    async def start(self) -> None:
        self.dir.chmod(0o777)                     # ngircd drops root; it writes its pid file here
        for proxy in self.links.values():
            await proxy.start()
        for s in self.servers.values():
            s.conf.write_text(self._config(s))
            log = open(self.dir / f"{s.site}.log", "wb")
            s.proc = subprocess.Popen([NGIRCD, "-n", "-f", str(s.conf)], stdout=log, stderr=subprocess.STDOUT)
            log.close()
        deadline = time.monotonic() + 20
        for s in self.servers.values():
            while True:
                with contextlib.suppress(OSError):
                    _, w = await asyncio.open_connection("127.0.0.1", s.port)
                    w.close()
                    break
                if time.monotonic() > deadline or (s.proc is not None and s.proc.poll() is not None):
                    raise RuntimeError(f"ngircd for {s.site} did not start: {self.log_tail(s.site)}")
                await asyncio.sleep(0.1)

    def log_tail(self, site: str, lines: int = 10) -> str:
        path = self.dir / f"{site}.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""

    def linked(self) -> bool:
        """Every server link is registered (ngircd logs 'Server ... registered')."""
        text = "".join((self.dir / f"{s}.log").read_text(errors="replace") for s in self.sites
                       if (self.dir / f"{s}.log").exists())
        return all(f'Server "{self.servers[b].name}"' in text and "registered" in text for _, b in self.links)

    async def close(self) -> None:
        for s in self.servers.values():
            if s.proc is not None and s.proc.poll() is None:
                s.proc.terminate()
        for s in self.servers.values():
            if s.proc is not None:
                try:
                    await asyncio.to_thread(s.proc.wait, 10)
                except subprocess.TimeoutExpired:
                    s.proc.kill()
        for proxy in self.links.values():
            await proxy.close()

    def bytes_between_sites(self) -> int:
        total = 0
        for proxy in self.links.values():
            st = proxy.stats()
            total += st.forward.bytes_out + st.reverse.bytes_out
        return total


@dataclass
class IrcClient:
    """One IRC user: registers, joins ``channel``, records received PRIVMSGs as (text, arrival time)."""

    nick: str
    port: int
    channel: str
    received: list[tuple[str, float]] = field(default_factory=list)
    _reader: asyncio.StreamReader | None = None
    _writer: asyncio.StreamWriter | None = None
    _task: asyncio.Task[None] | None = None
    _joined: asyncio.Event = field(default_factory=asyncio.Event)

    async def connect(self, timeout: float = 20.0) -> None:
        self._reader, self._writer = await asyncio.open_connection("127.0.0.1", self.port)
        self._send(f"NICK {self.nick}")
        self._send(f"USER {self.nick} 0 * :bench {self.nick}")
        self._task = asyncio.create_task(self._read())
        await asyncio.wait_for(self._joined.wait(), timeout)

    def _send(self, line: str) -> None:
        assert self._writer is not None
        self._writer.write(line.encode() + b"\r\n")

    async def _read(self) -> None:
        assert self._reader is not None
        while True:
            raw = await self._reader.readline()
            if not raw:
                return
            now = time.time()
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            prefix = ""
            if line.startswith(":"):
                prefix, _, line = line[1:].partition(" ")
            command, _, rest = line.partition(" ")
            if command == "PING":
                self._send(f"PONG {rest}")
            elif command == "001":
                self._send(f"JOIN {self.channel}")
            elif command == "JOIN" and prefix.split("!")[0] == self.nick:
                self._joined.set()
            elif command == "PRIVMSG":
                _, _, text = rest.partition(" :")
                self.received.append((text, now))

    async def say(self, text: str) -> None:
        self._send(f"PRIVMSG {self.channel} :{text}")
        assert self._writer is not None
        await self._writer.drain()

    async def close(self) -> None:
        if self._writer is not None:
            with contextlib.suppress(Exception):
                self._send("QUIT :done")
                await self._writer.drain()
            self._writer.close()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)


@contextlib.asynccontextmanager
async def irc_network(sites: list[str], shape: Shape | None = None):  # type: ignore[no-untyped-def]
    """A started ngircd chain in a temporary directory, every server link shaped by ``shape``; closed on exit."""
    with tempfile.TemporaryDirectory(prefix="ngircd-bench-") as d:
        net = IrcNetwork(sites, Path(d), shape)
        try:
            await net.start()
            yield net
        finally:
            await net.close()
