"""New room names are capped (on the RCM double): a rate per user and ``max_rooms`` per site, for a join
and for ``create`` alike (whose owner also counts against ``max_rooms_per_user``); ``rooms`` comes in
pages. The rate on a virtual clock, sans-IO: test_chat_core.py."""
from __future__ import annotations

import pytest

from chat_server.client import ChatError

pytestmark = pytest.mark.timeout(60)


async def test_a_join_say_leave_loop_cannot_grow_the_rooms_without_bound(cluster_factory):
    cl = await cluster_factory(["A"], users={"A": ["alice", "bob"]},
                               chat={"rooms_created_burst": 3, "rooms_page": 2})
    alice = await cl.client("A", "alice")
    for i in range(3):
        await alice.join(f"r{i}")
        await alice.say(f"r{i}", "x")
        await alice.leave(f"r{i}")
    with pytest.raises(ChatError) as e:
        await alice.join("r3")
    assert e.value.code == "limit" and "rooms_created_per_hour" in e.value.frame["message"]
    await alice.join("r0")                            # an existing room is always open
    bob = await cl.client("A", "bob")
    first = await bob.request({"type": "rooms"})
    assert [r["room"] for r in first["rooms"]] == ["r0", "r1"] and first["more"]
    rest = await bob.request({"type": "rooms", "after": "r1"})
    assert [r["room"] for r in rest["rooms"]] == ["r2"] and not rest["more"]


async def test_create_counts_against_the_room_caps(cluster_factory):
    """The cap on the room names a join brings into being did not hold for ``create`` (no rate, no
    ``max_rooms``, and the owner joined past ``max_rooms_per_user``): a create loop grew the private rooms,
    definitions and room names of every site without bound."""
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


async def test_create_respects_max_rooms_per_user_and_max_rooms(cluster_factory):
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
