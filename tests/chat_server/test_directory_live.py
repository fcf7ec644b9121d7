"""The room directory is live: entries that change are pushed (directory_update) to sessions that read it."""
from __future__ import annotations


def update_naming(room: str):
    return lambda f: f["type"] == "directory_update" and any(e["room"] == room for e in f["rooms"])


async def test_a_user_signed_in_before_rooms_existed_sees_them_appear_and_change(cluster_factory):
    cl = await cluster_factory(["A", "B"], users={"A": ["alice"], "B": ["bob", "bea"]})
    alice = await cl.client("A", "alice")
    assert (await alice.request({"type": "directory"}))["rooms"] == []       # "No rooms yet"
    bob = await cl.client("B", "bob")
    await bob.join("ops")
    await cl.settle()
    f = await alice.wait_for(update_naming("ops"), 5)
    assert f["rooms"] == [{"room": "ops", "private": False, "members": 1, "last_at": None}]
    ack = await bob.say("ops", "tanker on station")
    bea = await cl.client("B", "bea")
    await bea.join("ops")
    await cl.settle()
    f = await alice.wait_for(lambda f: update_naming("ops")(f) and f["rooms"][0]["members"] == 2, 5)
    sent_at = cl.servers["B"].store.message(ack["msg_id"]).sent_at
    assert f["rooms"] == [{"room": "ops", "private": False, "members": 2, "last_at": sent_at}]
    assert f["removed"] == []
    # A private room: its entry goes to its members' sessions only, never its name to anyone else.
    await bea.request({"type": "directory"})
    await bob.request({"type": "create", "room": "cell", "members": ["bea"]})
    await cl.settle()
    f = await bea.wait_for(update_naming("cell"), 5)
    assert f["rooms"] == [{"room": "cell", "private": True, "members": 2, "last_at": None}]    # bob and bea
    await bob.say("ops", "after cell")                      # a later push alice does get ...
    await cl.settle()
    await alice.wait_for(lambda f: update_naming("ops")(f) and f["rooms"][0]["last_at"] != sent_at, 5)
    assert not [e for e in alice.drain_events() if "cell" in str(e)]       # ... and none naming cell before it
    # A session that never asked for the directory is pushed nothing (old clients see no new frame).
    assert not [e for e in bob.drain_events() if e["type"] == "directory_update"]
