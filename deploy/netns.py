"""``python -m deploy netns``: each site in its own Linux network namespace (several hosts on one machine).

Theory of operation
-------------------
For a mission of N sites this creates, with ``ip`` (iproute2, as root):

* a hub namespace ``rcm<id>-hub`` holding a bridge ``br0`` (the "site
  network"; bridging happens inside the hub, so the machine's own firewall
  and forwarding settings are never involved);
* per site, a namespace ``rcm<id>-<i>`` whose ``eth0`` is one end of a veth
  pair, the other end a port of the hub's bridge; ``eth0`` gets
  ``10.R.S.<i+1>/24``, a private /24 not used by any address of this
  machine;
* one more veth pair from this (the root) namespace into the bridge, with
  ``10.R.S.254/24``, so the supervisor, a browser or a test on this machine
  can reach every site's chat server, as an operator's LAN would.

Each site's processes run under ``ip netns exec rcm<id>-<i>``: a real separate
network stack per site (own loopback, routes, sockets, TCP state). The
derived mission file ``<data_dir>/netns/mission.toml`` (written by
``contracts.mission_writer``) is the original with each site's ``rcm``, ``chat``
and ``irc`` host replaced by its namespace's address (same ports) and ``dial``
tables dropped (link proxies listen on loopback, which is per namespace);
``data_dir`` stays the original one, so accounts and journals are the same as
in a loopback run. ``--outage UP:DOWN`` takes the chosen
sites' ``eth0`` down for DOWN seconds after every UP seconds: a kernel-level
outage (packets lost, TCP stalls), not a proxy's.

Everything is removed on exit, also after a failure during set-up: the
namespaces, their veths and the root-side veth.
"""
from __future__ import annotations

import asyncio
import hashlib
import ipaddress
import json
import os
import shutil
import subprocess
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from contracts.mission import Address, Mission, load_mission
from contracts.mission_writer import write_mission_file


class NetnsUnavailable(Exception):
    """Namespaces cannot be made here (not root, no iproute2, no permission); the message says why."""


def netns_unavailable_reason() -> str | None:
    """Why ``deploy netns`` cannot run on this machine, or None when it can."""
    if os.name != "posix" or not Path("/proc/self/ns/net").exists():
        return "network namespaces need Linux"
    if shutil.which("ip") is None:
        return "the `ip` command (iproute2) is missing: apt-get install iproute2"
    if os.geteuid() != 0:
        return "creating network namespaces needs root (run as root, e.g. with sudo)"
    return None


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    p = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and p.returncode != 0:
        raise NetnsUnavailable(f"`ip {' '.join(args)}` failed: {p.stderr.strip() or p.returncode}")
    return p


def used_networks() -> list[ipaddress.IPv4Network]:
    """IPv4 networks of every address of this (root) namespace."""
    p = _ip("-j", "addr", check=False)
    nets = []
    try:
        for link in json.loads(p.stdout or "[]"):
            for a in link.get("addr_info", []):
                if a.get("family") == "inet":
                    nets.append(ipaddress.IPv4Network(f"{a['local']}/{a['prefixlen']}", strict=False))
    except (ValueError, KeyError):
        pass
    return nets


def pick_subnet(seed: str, used: list[ipaddress.IPv4Network]) -> ipaddress.IPv4Network:
    """A 10.R.S.0/24 overlapping nothing in ``used``, chosen from ``seed`` (stable for one run id)."""
    start = int(hashlib.sha256(seed.encode()).hexdigest(), 16)
    for k in range(4096):
        n = (start + k) % (200 * 250)
        net = ipaddress.IPv4Network(f"10.{50 + n // 250}.{n % 250}.0/24")
        if not any(net.overlaps(u) for u in used):
            return net
    raise NetnsUnavailable("no free private /24 in 10.50.0.0-10.249.255.0 on this machine")


@dataclass
class Topology:
    """The namespaces, addresses and links of one netns run."""

    run_id: str
    sites: list[str]
    subnet: ipaddress.IPv4Network
    created: list[tuple[str, str]] = field(default_factory=list)   # ("netns", name) | ("link", name)

    @property
    def hub(self) -> str:
        return f"rcm{self.run_id}-hub"

    @property
    def host_if(self) -> str:
        return f"rcm{self.run_id}h"          # root-side veth (at most 15 characters)

    def namespace(self, site: str) -> str:
        return f"rcm{self.run_id}-{self.sites.index(site)}"

    def address(self, site: str) -> str:
        return str(self.subnet.network_address + self.sites.index(site) + 1)

    @property
    def host_address(self) -> str:
        return str(self.subnet.network_address + 254)

    def wrap(self, site: str) -> list[str]:
        """The command prefix running a program inside ``site``'s namespace."""
        return ["ip", "netns", "exec", self.namespace(site)]

    def up(self) -> None:
        """Create everything; on any failure remove what was made and raise NetnsUnavailable."""
        try:
            self._up()
        except BaseException:
            self.down()
            raise

    def _up(self) -> None:
        plen = self.subnet.prefixlen
        _ip("netns", "add", self.hub)
        self.created.append(("netns", self.hub))
        _ip("-n", self.hub, "link", "set", "lo", "up")
        _ip("-n", self.hub, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.hub, "link", "set", "br0", "up")
        for i, site in enumerate(self.sites):
            ns = self.namespace(site)
            _ip("netns", "add", ns)
            self.created.append(("netns", ns))
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", f"s{i}", "netns", self.hub)
            _ip("-n", self.hub, "link", "set", f"s{i}", "master", "br0", "up")
            _ip("-n", ns, "addr", "add", f"{self.address(site)}/{plen}", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
        _ip("link", "add", self.host_if, "type", "veth", "peer", "name", "host", "netns", self.hub)
        self.created.append(("link", self.host_if))
        _ip("-n", self.hub, "link", "set", "host", "master", "br0", "up")
        _ip("addr", "add", f"{self.host_address}/{plen}", "dev", self.host_if)
        _ip("link", "set", self.host_if, "up")

    def down(self) -> None:
        """Remove what ``up`` made (veths first, then namespaces); never raises."""
        for kind, name in reversed(self.created):
            if kind == "link":
                _ip("link", "del", name, check=False)
        if ("netns", self.hub) in self.created:       # veths go with their namespace, but lazily: be explicit
            for i in range(len(self.sites)):
                _ip("-n", self.hub, "link", "del", f"s{i}", check=False)
        for kind, name in reversed(self.created):
            if kind == "netns":
                _ip("netns", "del", name, check=False)
        self.created.clear()

    def set_site_link(self, site: str, up: bool) -> None:
        """Bring ``site``'s eth0 up or down (a real outage of every link of the site)."""
        _ip("-n", self.namespace(site), "link", "set", "eth0", "up" if up else "down")

    def describe(self) -> list[str]:
        lines = [f"hub {self.hub}: bridge br0, {self.subnet}; this machine is {self.host_address} ({self.host_if})"]
        lines += [f"site {s}: namespace {self.namespace(s)}, eth0 {self.address(s)}" for s in self.sites]
        return lines


def derived_mission(mission: Mission, topo: Topology) -> Path:
    """Write ``<data_dir>/netns/mission.toml``: each site at its namespace's address."""
    assert mission.path is not None
    rcm = mission.rcm
    if not rcm.tls:
        # Plain TCP off loopback is refused unless a mission says it is a lab; namespaces on a private
        # bridge of one machine are one.
        rcm = replace(rcm, insecure_plaintext=True)
    chat = dict(mission.chat)
    # deploy's supervisor asks each chat server for /health from this machine's end of the bridge.
    chat["health_details_from"] = ",".join(a for a in (chat.get("health_details_from", ""), topo.host_address) if a)
    sites = {}
    for s in topo.sites:
        sc, host = mission.site(s), topo.address(s)
        sites[s] = replace(sc, rcm=Address(host, sc.rcm.port), chat=Address(host, sc.chat.port), dial={},
                           irc=Address(host, sc.irc.port) if sc.irc else None)
    path = mission.data_dir / "netns" / "mission.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    derived = replace(mission, path=path, rcm=rcm, chat=chat, sites=sites)
    write_mission_file(path, derived, header=[
        f"Derived by `python -m deploy netns` from {mission.path}",
        "Each site's rcm/chat/irc host is its network namespace's address; dial tables dropped."])
    load_mission(path)      # it must be a valid mission
    return path


async def run_outages(topo: Topology, sites: list[str], up: float, down: float, stop: asyncio.Event,
                      report: Any) -> None:
    """Every ``up`` seconds take ``sites``' eth0 down for ``down`` seconds, until ``stop``."""
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), up)
            return
        except TimeoutError:
            pass
        for s in sites:
            await asyncio.to_thread(topo.set_site_link, s, False)
        report(f"outage: eth0 of {', '.join(sites)} down for {down:g} s")
        try:
            await asyncio.wait_for(stop.wait(), down)
        except TimeoutError:
            pass
        finally:
            for s in sites:
                await asyncio.to_thread(topo.set_site_link, s, True)
            report(f"outage over: eth0 of {', '.join(sites)} up")
