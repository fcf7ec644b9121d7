"""In-process chat servers of a mission on one fake RCM network (``Cluster``): the ``cluster_factory`` fixture's,
and for tests that build their own mission."""
from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from chat_fake_rcm import FakeNetwork
from chat_missions import PASSWORD

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
