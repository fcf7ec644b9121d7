"""Fixtures for chat server tests: missions in tmp_path, in-process chat servers on a fake RCM (and, for the IRC
front end's tests, sites A and B with an IRC port: ``sites``)."""
from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from chat_cluster import Cluster
from chat_fake_rcm import FakeNetwork
from chat_missions import add_users, make_mission
from irc_testing import IrcSites


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
