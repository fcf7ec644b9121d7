"""chat_server.launcher's health helpers against stand-in chat servers (no real processes: fast).

``wait_connected`` is the one "until every site sees every other connected" of deploy, the runner,
the benchmarks and the test harnesses; ``chat_health`` is the one ``/health`` request.
"""
from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from chat_server.launcher import chat_health, peers_connected, wait_clients_connected, wait_connected
from contracts.mission import Mission, load_mission
from faultinject.missions import write_mission

CONNECTED = {"rcm": True, "status": "ok"}


@pytest.fixture
async def sites(tmp_path: Path) -> AsyncIterator[tuple[Mission, dict[str, dict[str, Any]]]]:
    """A two-site mission whose chat ports answer ``/health`` with ``bodies[site]`` (the test edits them)."""
    mission = load_mission(write_mission(tmp_path / "m.toml", "launch", ["A", "B"]))
    bodies: dict[str, dict[str, Any]] = {s: {"site": s, "status": "ok", "rcm": True, "sites": {s: "connected"}}
                                         for s in mission.sites}
    runners = []
    for s in mission.sites:
        async def health(request: web.Request, s: str = s) -> web.Response:
            return web.json_response(bodies[s])
        app = web.Application()
        app.router.add_get("/health", health)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", mission.site(s).chat.port).start()
        runners.append(runner)
    try:
        yield mission, bodies
    finally:
        for r in runners:
            await r.cleanup()


def test_connected_means_rcm_up_and_every_peer_connected() -> None:
    assert peers_connected({"rcm": True, "sites": {"A": "connected", "B": "connected"}}, ["B"])
    assert not peers_connected({"rcm": True, "sites": {"A": "connected"}}, ["B"])          # not reported yet
    assert not peers_connected({"rcm": True, "sites": {"B": "suspected"}}, ["B"])
    assert not peers_connected({"rcm": False, "sites": {"B": "connected"}}, ["B"])         # stale statuses
    assert not peers_connected({"status": "ok"}, ["B"])                                    # no details
    assert not peers_connected(None, ["B"])


async def test_wait_connected_returns_once_every_site_sees_every_other(sites) -> None:
    mission, bodies = sites
    rounds: list[dict[str, Any]] = []

    def each_round(health: dict[str, Any]) -> None:
        rounds.append(health)
        if len(rounds) == 3:                 # the peers come up on the third look
            bodies["A"]["sites"]["B"] = "connected"
            bodies["B"]["sites"]["A"] = "connected"
    health = await wait_connected(mission, timeout=10, interval=0.01, on_round=each_round)
    assert len(rounds) == 4
    assert health["A"]["sites"] == {"A": "connected", "B": "connected"}


async def test_wait_connected_names_the_sites_still_apart(sites) -> None:
    mission, bodies = sites
    bodies["A"]["sites"]["B"] = "connected"
    bodies["B"]["sites"]["A"] = "suspected"
    with pytest.raises(TimeoutError, match=r"not all connected after 0.2 s: B sees \{'B': 'connected', 'A': "
                                           r"'suspected'\}"):
        await wait_connected(mission, timeout=0.2, interval=0.01)


async def test_health_of_a_port_answered_by_another_site_or_nobody_is_down(sites, tmp_path: Path) -> None:
    import aiohttp
    mission, bodies = sites
    bodies["B"]["site"] = "Z"
    other = load_mission(write_mission(tmp_path / "o.toml", "other", ["C"]))
    async with aiohttp.ClientSession() as http:
        assert (await chat_health(http, mission, "A"))["status"] == "ok"
        b = await chat_health(http, mission, "B")
        assert b["status"] == "down" and b["error"] == "port answered by 'Z'"
        c = await chat_health(http, other, "C", timeout=1)
        assert c["status"] == "down" and c["error"]


async def test_wait_clients_connected_needs_every_peer_reported_connected() -> None:
    """Through RCM clients: a client that has not been told about a peer yet is not connected to it."""
    from types import SimpleNamespace
    a, b = SimpleNamespace(statuses={"B": "connected"}), SimpleNamespace(statuses={})
    with pytest.raises(TimeoutError, match=r"B sees \{\}"):
        await wait_clients_connected({"A": a, "B": b}, timeout=0.05, interval=0.01)   # type: ignore[dict-item]
    b.statuses = {"A": "connected"}
    await wait_clients_connected({"A": a, "B": b}, timeout=1, interval=0.01)          # type: ignore[dict-item]
