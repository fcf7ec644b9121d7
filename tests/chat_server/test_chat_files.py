"""What the chat server writes on disk is the servers' user's only (RCM's files: tests/rcm/test_rcm_files.py)."""
from __future__ import annotations

import os
import stat

import pytest

pytestmark = pytest.mark.timeout(60)


async def test_the_chat_server_writes_owner_only_files(cluster_factory):
    cl = await cluster_factory(["A"], users={"A": ["alice"]})
    alice = await cl.client("A", "alice")
    await alice.join("ops")
    await alice.say("ops", "private data")
    site = cl.mission.site_dir("A")
    paths = [site, *[p for sub in ("chat", "journal") for p in [site / sub, *(site / sub).rglob("*")]]]
    modes = {str(p.relative_to(site.parent)): stat.S_IMODE(os.stat(p).st_mode) for p in paths}
    bad = {p: oct(m) for p, m in modes.items() if m & 0o077}
    assert not bad, bad
    assert any(p.endswith(".jsonl") for p in modes) and any(p.endswith("chat.db") for p in modes)
