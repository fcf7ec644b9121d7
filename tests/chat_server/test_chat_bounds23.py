"""Issue 23 item 2: every structure of the chat server keyed or grown by remote input has a bound, and a
metric (docs/security.md, "Bounded memory"). Tests named ``*_hole_*`` failed before their fix."""
from __future__ import annotations

import asyncio

import aiohttp
import pytest

from chat_server.client import ChatError

pytestmark = pytest.mark.timeout(60)


async def test_bounds23_hole_create_counts_against_the_room_caps(cluster_factory):
    """Audit row 12 capped the room names a join brings into being; ``create`` brought them in unchecked
    (no rate, no ``max_rooms``, and the owner joined past ``max_rooms_per_user``): a create loop grew the
    private rooms, definitions and room names of every site without bound."""
    cl = await cluster_factory(["A", "B"], users={"A": ["alice"]},
                               chat={"rooms_created_burst": 3, "rooms_created_per_hour": 1.0})
    alice = await cl.client("A", "alice")
    made = []
    with pytest.raises(ChatError) as e:
        for i in range(10):
            await alice.create(f"cell{i}", ["bob"])
            made.append(i)
    assert e.value.code == "limit" and "new rooms" in str(e.value), e.value
    assert len(made) == 3
    await alice.create("cell0", ["bob", "carol"])          # changing an own room's members is not a new name
    await cl.settle()
    assert len(cl.servers["B"].private) == 3


async def test_bounds23_hole_create_respects_max_rooms_per_user_and_max_rooms(cluster_factory):
    cl = await cluster_factory(["A"], users={"A": ["alice", "bob"]},
                               chat={"max_rooms_per_user": 2, "max_rooms": 3})
    alice, bob = await cl.client("A", "alice"), await cl.client("A", "bob")
    await alice.create("c1", [])
    await alice.create("c2", [])
    await cl.settle()
    with pytest.raises(ChatError, match="rooms per user"):
        await alice.create("c3", [])
    await bob.create("b1", [])
    await cl.settle()
    with pytest.raises(ChatError, match="max_rooms"):
        await bob.create("b2", [])
    assert sorted(cl.servers["A"].private) == ["b1", "c1", "c2"]


async def test_bounds23_hole_an_irc_client_cannot_queue_requests_without_bound(tmp_path):
    """An IRC connection's lines became requests in an unbounded queue: while its says waited on RCM the
    server went on reading it (a WebSocket is not read then: TCP pushes back). The reader now waits."""
    from test_irc import IrcSites

    s = IrcSites(tmp_path, chat={"rate_limit_frames": 5000.0, "rate_limit_burst": 20000,
                                 "user_rate_limit_frames": 5000.0, "user_rate_limit_burst": 20000})
    await s.start()
    try:
        irc = await s.irc("alice")
        await irc.numeric("001")
        irc.send("JOIN #ops")
        await irc.numeric("366")
        ws = await s.ws("A", "carol")
        await ws.join("ops")
        s.net.gate = asyncio.Event()                 # RCM stops answering sends
        for i in range(3000):
            irc.send(f"PRIVMSG #ops :line {i}")
        await irc.writer.drain()
        await asyncio.sleep(1.0)
        conn = next(iter(s.servers["A"].irc_front.connections))
        from chat_server import irc_server
        assert conn.requests.qsize() <= getattr(irc_server, "IRC_REQUESTS_MAX", 64), conn.requests.qsize()
        s.net.gate.set()                             # RCM answers again: every line is sent, in order
        await ws.wait_for(lambda f: f["type"] == "message" and f["text"] == "line 2999", 30)
        texts = [f["text"] for f in ws.drain_events() if f["type"] == "message"]
        nums = [int(t.split()[1]) for t in texts]
        assert nums == sorted(nums)
    finally:
        s.net.gate = None
        await s.close()


async def test_bounds23_health_shows_the_size_of_every_bounded_structure(cluster_factory):
    """The metric of each bound (docs/security.md lists them) in /health's details, for this host's tools."""
    cl = await cluster_factory(["A", "B"], users={"A": ["alice"]})
    alice = await cl.client("A", "alice")
    await alice.join("ops")
    async with aiohttp.ClientSession() as http:
        async with http.get(f"http://127.0.0.1:{cl.servers['A'].port}/health") as r:
            body = await r.json()
    mem = body["memory"]
    for key in ("sessions", "connections_per_address", "user_rate_buckets", "room_rate_buckets", "rooms",
                "private_rooms", "pending_private_rooms", "known_definitions", "roster_rooms",
                "pending_receipts", "definition_requests", "login_failure_keys", "login_blocked_keys",
                "says_in_flight", "irc_requests_queued"):
        assert isinstance(mem.get(key), int), key
    assert mem["sessions"] == 1 and mem["rooms"] >= 1


def test_bounds23_hole_the_login_limiter_keeps_at_most_max_keys_waits():
    """Failures were capped at ``max_keys`` keys, the waits they cause were not: a guess spread over many
    user names (any name, known or not, is a key) grew the table for as long as the waits lasted."""
    from chat_server.accounts import LoginLimiter

    lim = LoginLimiter(max_failures=1, window=60.0, lockout=3600.0, max_keys=100)
    for i in range(1000):                                  # a burst within one second: no wait has ended
        for _ in range(3):
            lim.failed(f"user{i}", i / 1000)
    assert len(lim._failures) <= 100 + 1 and len(lim._blocked_until) <= 100 + 1, len(lim._blocked_until)
    assert lim.retry_after("user999", 1.0) > 0             # the newest waits are kept
