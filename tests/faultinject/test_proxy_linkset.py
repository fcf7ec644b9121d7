"""LinkSet (faultinject/links.py) and its HTTP control endpoint against mission files in tmp_path."""
from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from contracts.mission import load_mission
from faultinject.control import ControlServer
from faultinject.links import LinkSet, groups_from_text
from faultinject.missions import free_ports
from faultinject.proxy import FORWARD, REVERSE, LinkError
from faultinject.schedule import periodic
from faultinject.shaping import LinkMode, Shape


def free_port() -> int:
    return free_ports(1)[0]


class Site:
    """Stands in for a site's RCM server: accepts connections and queues them."""

    def __init__(self) -> None:
        self.accepted: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = asyncio.Queue()
        self.writers: list[asyncio.StreamWriter] = []
        self.server: asyncio.Server | None = None
        self.port = 0

    def _on(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        self.writers.append(w)
        self.accepted.put_nowait((r, w))

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._on, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        assert self.server is not None
        self.server.close()
        await close_all(self.writers)
        await self.server.wait_closed()


async def close_all(writers: list[asyncio.StreamWriter]) -> None:
    for w in writers:
        w.close()
    for w in writers:
        with contextlib.suppress(ConnectionError, OSError):
            await w.wait_closed()


def write_mission(tmp_path: Path, ports: dict[str, int], dial: dict[str, dict[str, int]]) -> Path:
    lines = ['[mission]', 'name = "linktest"', 'data_dir = "var"', ""]
    for s, port in ports.items():
        lines += [f"[sites.{s}]", f'rcm = "127.0.0.1:{port}"', f'chat = "127.0.0.1:{free_port()}"']
        if dial.get(s):
            lines.append(f"[sites.{s}.dial]")
            lines += [f'{peer} = "127.0.0.1:{p}"' for peer, p in dial[s].items()]
        lines.append("")
    path = tmp_path / "mission.toml"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


@contextlib.asynccontextmanager
async def two_sites(tmp_path: Path,
                    **kwargs: object) -> AsyncIterator[tuple[LinkSet, dict[str, Site], list[asyncio.StreamWriter]]]:
    sites = {"A": Site(), "B": Site()}
    for s in sites.values():
        await s.start()
    path = write_mission(tmp_path, {n: s.port for n, s in sites.items()},
                         {"A": {"B": free_port()}, "B": {"A": free_port()}})
    clients: list[asyncio.StreamWriter] = []
    try:
        async with LinkSet(load_mission(path), **kwargs) as links:  # type: ignore[arg-type]
            try:
                yield links, sites, clients
            finally:
                await close_all(clients)
    finally:
        for s in sites.values():
            await s.close()


async def dial(links: LinkSet, src: str, dst: str,
               clients: list[asyncio.StreamWriter]) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Connect the way site ``src`` reaches ``dst``: to ``sites.src.dial.dst``."""
    addr = links.mission.sites[src].dial[dst]
    r, w = await asyncio.open_connection(addr.host, addr.port)
    clients.append(w)
    return r, w


async def exchange(links: LinkSet, sites: dict[str, Site], src: str, dst: str,
                   clients: list[asyncio.StreamWriter]) -> None:
    r, w = await dial(links, src, dst, clients)
    w.write(f"{src}>{dst}".encode())
    tr, tw = await asyncio.wait_for(sites[dst].accepted.get(), 5)
    assert await asyncio.wait_for(tr.readexactly(3), 5) == f"{src}>{dst}".encode()
    tw.write(b"ok")
    assert await asyncio.wait_for(r.readexactly(2), 5) == b"ok"


async def expect_down(links: LinkSet, sites: dict[str, Site], src: str, dst: str,
                      clients: list[asyncio.StreamWriter]) -> None:
    r, _ = await dial(links, src, dst, clients)
    try:
        data = await asyncio.wait_for(r.read(10), 5)
    except ConnectionResetError:
        data = b""
    assert data == b""
    assert sites[dst].accepted.empty()


async def test_one_proxy_per_dial_entry_forwarding_to_the_peer(tmp_path: Path) -> None:
    async with two_sites(tmp_path) as (links, sites, clients):
        assert set(links.proxies) == {("A", "B"), ("B", "A")}
        assert links.pairs() == [("A", "B")]
        assert links.uncovered_pairs() == [] and links.half_covered_pairs() == []
        assert links.proxy("A", "B").target == ("127.0.0.1", sites["B"].port)
        await exchange(links, sites, "A", "B", clients)
        await exchange(links, sites, "B", "A", clients)
        assert links.proxy("A", "B").stats().forward.bytes_out == 3
        assert links.proxy("B", "A").stats().reverse.bytes_out == 2


async def test_cut_acts_on_both_directions_and_restore(tmp_path: Path) -> None:
    async with two_sites(tmp_path) as (links, sites, clients):
        await links.cut("B", "A")
        assert links.mode("A", "B") is LinkMode.RESET
        assert links.proxy("A", "B").mode is links.proxy("B", "A").mode is LinkMode.RESET
        await expect_down(links, sites, "A", "B", clients)
        await expect_down(links, sites, "B", "A", clients)
        await links.restore("A", "B")
        await exchange(links, sites, "A", "B", clients)
        await exchange(links, sites, "B", "A", clients)
        assert [(e.link, e.value) for e in links.history if e.kind == "mode"] == [
            ("A-B", "reset"), ("A-B", "up")]


async def test_partition_by_groups_and_heal(tmp_path: Path) -> None:
    async with two_sites(tmp_path) as (links, sites, clients):
        await links.partition(["A"], ["B"], mode="blackhole")
        assert links.mode("A", "B") is LinkMode.BLACKHOLE
        with pytest.raises(LinkError, match="leaves site 'B' in no group"):
            await links.partition(["A"])
        with pytest.raises(LinkError, match="'C' is not in the mission"):
            await links.partition(["A"], ["B", "C"])
        await links.heal()
        assert links.mode("A", "B") is LinkMode.UP
        await exchange(links, sites, "A", "B", clients)


async def test_set_shape_follows_the_data_not_the_dialler(tmp_path: Path) -> None:
    async with two_sites(tmp_path) as (links, sites, clients):
        slow = Shape(delay=0.3)
        links.set_shape("A", "B", slow)
        assert links.proxy("A", "B").shape(FORWARD) == slow    # A's connections, A's bytes
        assert links.proxy("B", "A").shape(REVERSE) == slow    # B's connections, A's answers
        assert links.proxy("A", "B").shape(REVERSE) == Shape()
        assert links.shape("A", "B") == slow and links.shape("B", "A") == Shape()
        with pytest.raises(LinkError, match="not in the mission"):
            links.set_shape("A", "Z", slow)


async def test_half_covered_and_uncovered_pairs(tmp_path: Path) -> None:
    ports = {"A": free_port(), "B": free_port(), "C": free_port()}
    path = write_mission(tmp_path, ports, {"A": {"B": free_port()}})
    links = LinkSet(load_mission(path))
    assert links.pairs() == [("A", "B")]
    assert links.half_covered_pairs() == [("A", "B")]
    assert links.uncovered_pairs() == [("A", "C"), ("B", "C")]
    with pytest.raises(LinkError, match="no proxy in either direction"):
        await links.set_link("A", "C", "reset")


async def test_start_failure_closes_what_was_started(tmp_path: Path) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        ports = {"A": free_port(), "B": free_port()}
        path = write_mission(tmp_path, ports, {"A": {"B": free_port()}, "B": {"A": taken.getsockname()[1]}})
        links = LinkSet(load_mission(path))
        with pytest.raises(LinkError, match="B->A: cannot listen"):
            await links.start()
        assert not links.proxy("A", "B").running
    finally:
        taken.close()


async def test_schedule_drives_the_links(tmp_path: Path) -> None:
    async with two_sites(tmp_path, seed=5) as (links, sites, clients):
        task = links.start_schedule(periodic([("A", "B")], up=1, down=2, cycles=2), time_scale=0.05)
        await asyncio.wait_for(task, 5)
        modes = [e.value for e in links.history if e.kind == "mode"]
        assert modes == ["reset", "up", "reset", "up"]
        ts = [e.t for e in links.history if e.kind == "mode"]
        # 2 s down scaled by 0.05: 0.1 s between the commands; each mode is recorded once applied (a reset
        # closes connections first), which on a loaded machine shaves up to tens of ms off the gap.
        assert ts[1] - ts[0] >= 0.07 and ts[3] - ts[2] >= 0.07
        await exchange(links, sites, "A", "B", clients)


def test_groups_from_text() -> None:
    assert groups_from_text("A,B|C, D") == [["A", "B"], ["C", "D"]]
    with pytest.raises(ValueError, match="A,B|C,D"):
        groups_from_text("A,B")


async def test_control_endpoint(tmp_path: Path) -> None:
    async with two_sites(tmp_path) as (links, sites, clients):
        async with ControlServer(links) as control, aiohttp.ClientSession(control.url) as http:
            async with http.get("/links") as r:
                body = await r.json()
                assert r.status == 200
                assert body["links"][0]["pair"] == "A-B" and body["links"][0]["mode"] == "up"
                assert {p["name"] for p in body["links"][0]["proxies"]} == {"A->B", "B->A"}

            async with http.post("/links/B/A", json={"mode": "blackhole", "policy": "buffer"}) as r:
                assert r.status == 200 and (await r.json())["mode"] == "blackhole"
            assert links.mode("A", "B") is LinkMode.BLACKHOLE
            assert links.proxy("A", "B").policy.value == "buffer"

            async with http.post("/links/A/B", json={"mode": "sideways"}) as r:
                assert r.status == 400 and "mode" in (await r.json())["error"]
            async with http.post("/links/A/Q", json={"mode": "up"}) as r:
                assert r.status == 404 and "'Q'" in (await r.json())["error"]
            async with http.post("/links/A/B", data=b"{not json") as r:
                assert r.status == 400 and "JSON" in (await r.json())["error"]

            async with http.post("/heal") as r:
                assert r.status == 200
            assert links.mode("A", "B") is LinkMode.UP

            async with http.post("/partition", json={"groups": [["A"], ["B"]]}) as r:
                assert r.status == 200
            assert links.mode("A", "B") is LinkMode.RESET
            async with http.post("/partition", json={"groups": [["A"]]}) as r:
                assert r.status == 400

            async with http.put("/shape/A/B", json={"delay": 0.2, "bandwidth_bps": 56000}) as r:
                assert r.status == 200 and (await r.json())["bandwidth_bps"] == 56000
            assert links.shape("A", "B") == Shape(delay=0.2, bandwidth_bps=56000)
            async with http.put("/shape/A/B", json={"delay": -1}) as r:
                assert r.status == 400 and "delay" in (await r.json())["error"]
            async with http.get("/shape/B/A") as r:
                assert (await r.json())["delay"] == 0.0

            async with http.get("/history") as r:
                h = await r.json()
            assert [e["value"] for e in h["links"] if e["kind"] == "mode"] == ["blackhole", "up", "reset"]
            assert any(e["kind"] == "shape" for e in h["proxies"])
