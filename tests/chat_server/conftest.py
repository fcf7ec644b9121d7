"""Fixtures for chat server tests: missions in tmp_path, in-process chat servers on a fake RCM (and, for the IRC
front end's tests, sites A and B with an IRC port: ``sites``)."""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from chat_fake_rcm import FakeNetwork
from chat_missions import PASSWORD, add_users, make_mission
from irc_testing import IrcSites

from chat_server.client import ChatClient
from chat_server.config import parse_chat_settings
from chat_server.server import ChatServer
from contracts.mission import Mission


class Cluster:
    """Chat servers of a mission on one fake RCM network, in this event loop."""

    def __init__(self, mission: Mission, net: FakeNetwork, clock: Callable[[], float] | None = None,
                 monotonic: Callable[[], float] | None = None) -> None:
        self.mission = mission
        self.net = net
        self.servers: dict[str, ChatServer] = {}
        self.clients: list[ChatClient] = []
        self.kw: dict[str, Any] = {}
        if clock is not None:
            self.kw["clock"] = clock
        if monotonic is not None:
            self.kw["monotonic"] = monotonic

    async def start(self, site: str) -> ChatServer:
        settings = parse_chat_settings(self.mission.chat)
        srv = ChatServer(self.mission, site, settings, rcm_connect=self.net.connector(site), host="127.0.0.1",
                         port=0, **self.kw)
        await srv.start()
        await asyncio.wait_for(srv.rcm_connected.wait(), 5)
        self.servers[site] = srv
        return srv

    async def stop(self, site: str) -> None:
        await self.servers.pop(site).stop()

    def url(self, site: str) -> str:
        return f"ws://127.0.0.1:{self.servers[site].port}/ws"

    async def client(self, site: str, user: str, password: str = PASSWORD, **kw: Any) -> ChatClient:
        c = await ChatClient.connect(self.url(site), user, password, **kw)
        self.clients.append(c)
        return c

    async def settle(self) -> None:
        """Let deliveries, rosters and receipts propagate (fake RCM is immediate; flushers tick at 50 ms)."""
        for _ in range(3):
            for srv in self.servers.values():
                await srv.flush_roster()
                await srv.flush_receipts(wait=0.0)
            await asyncio.sleep(0.02)

    async def close(self) -> None:
        for c in self.clients:
            await c.close()
        for site in list(self.servers):
            await self.stop(site)


@pytest.fixture
async def cluster_factory(tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    made: list[Cluster] = []

    async def make(sites: list[str], users: dict[str, list[str]] | None = None,
                   chat: dict[str, Any] | None = None, **kw: Any) -> Cluster:
        mission = make_mission(tmp_path, sites, chat)
        for site, names in (users or {}).items():
            add_users(mission, site, names)
        cl = Cluster(mission, FakeNetwork(sites), **kw)
        made.append(cl)
        for s in sites:
            await cl.start(s)
        return cl

    yield make
    for cl in made:
        await cl.close()


@pytest.fixture
async def sites(tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    """The IRC front end's tests: ``await sites(**kw)`` starts sites A (IRC) and B (``irc_testing.IrcSites``);
    all are closed after the test."""
    made: list[IrcSites] = []

    async def make(**kw: Any) -> IrcSites:
        s = IrcSites(tmp_path, **kw)
        made.append(s)
        await s.start()
        return s
    yield make
    for s in made:
        await s.close()
