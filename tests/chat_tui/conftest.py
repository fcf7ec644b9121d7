"""Fixtures for chat_tui tests: one real two-site mission (RCM + chat server processes) per session."""
from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from tui_servers import TuiSites  # noqa: E402

USERS = {"A": ["alice", "carol", "erin"], "B": ["bob", "dora"]}


@pytest.fixture(scope="session")
def mission(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TuiSites]:
    """Sites A and B, each with its RCM and chat server; alice, carol and erin at A, bob and dora at B."""
    root = tmp_path_factory.mktemp("tui-mission")
    m = TuiSites(root, ["A", "B"], USERS)
    try:
        m.start()
        yield m
    finally:
        m.stop()
        shutil.rmtree(root, ignore_errors=True)
