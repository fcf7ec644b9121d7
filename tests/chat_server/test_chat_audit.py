"""Regression tests for the audit of issue 25, one per finding, named after its row (on the RCM double)."""
from __future__ import annotations

import asyncio
import math

import aiohttp
import msgpack
import pytest

from chat_server.client import ChatError
from chat_server.journal import journal_files, read_journal
from chat_server.payload import ChatMessage, encode_payload

pytestmark = pytest.mark.timeout(60)


def is_msg(text: str):
    return lambda f: f["type"] == "message" and f["text"] == text


def journal(cl, site: str) -> list[dict]:
    srv = cl.servers[site]
    return [r for path in journal_files(srv.journal.directory) for r in read_journal(path)]


def raw_chat(room: str, user: str, text: str, sent_at) -> bytes:
    return msgpack.packb({"k": "m", "r": room, "u": user, "t": text, "s": sent_at, "c": ""}, use_bin_type=True)


async def test_audit2_a_nan_sent_at_is_refused_and_every_site_goes_on(cluster_factory):
    cl = await cluster_factory(["A", "B"], users={"A": ["alice"], "B": ["bob"]})
    alice, bob = await cl.client("A", "alice"), await cl.client("B", "bob")
    await alice.join("ops")
    await bob.join("ops")
    cl.net.send("A", raw_chat("ops", "alice", "poison", math.nan), None)
    cl.net.send("A", raw_chat("ops", "alice", "poison too", math.inf), None)
    await alice.say("ops", "after the poison")
    for c in (alice, bob):
        await c.wait_for(is_msg("after the poison"), 5)
    for site in ("A", "B"):
        delivers = [r for r in journal(cl, site) if r["kind"] == "deliver"]
        assert [r["text"] for r in delivers] == ["after the poison"], site
        assert cl.servers[site].rejected == 2
    assert not [f for f in bob.drain_events() if f["type"] == "message" and "poison" in f["text"]]


async def test_audit2_an_order_key_beyond_63_bits_is_refused_without_a_retry_loop(cluster_factory):
    cl = await cluster_factory(["A", "B"], users={"A": ["alice"], "B": ["bob"]})
    alice, bob = await cl.client("A", "alice"), await cl.client("B", "bob")
    await bob.join("ops")
    cl.net.inject("B", "A", encode_payload(ChatMessage("ops", "alice", "huge key", 1.0, "")), [1 << 63, "A"])
    cl.net.inject("B", "A", encode_payload(ChatMessage("ops", "alice", "deep key", 1.0, "")), [[1], "A"])
    await alice.join("ops")
    await alice.say("ops", "still here")
    await bob.wait_for(is_msg("still here"), 5)
    delivers = [r for r in journal(cl, "B") if r["kind"] == "deliver"]
    assert [r["text"] for r in delivers] == ["still here"]
    assert cl.servers["B"].rejected == 2


async def test_audit2_a_delivery_the_database_refuses_is_quarantined_and_skipped(cluster_factory, monkeypatch):
    cl = await cluster_factory(["A", "B"], users={"A": ["alice"], "B": ["bob"]})
    alice, bob = await cl.client("A", "alice"), await cl.client("B", "bob")
    await alice.join("ops")
    await bob.join("ops")
    store = cl.servers["B"].store
    real = store.add_message

    def refuse(m, at):
        if m.text == "unstorable":
            raise ValueError("the database refuses this one")
        return real(m, at)
    monkeypatch.setattr(store, "add_message", refuse)
    await alice.say("ops", "unstorable")
    await alice.say("ops", "next one")
    await bob.wait_for(is_msg("next one"), 5)
    delivers = [r for r in journal(cl, "B") if r["kind"] == "deliver"]
    assert [r["text"] for r in delivers] == ["next one"] and delivers[0]["n"] == 1
    assert [(m, o) for m, o, _ in store.quarantined()] == [("A:1", "A")]
    assert "the database refuses this one" in store.quarantined()[0][2]
    assert not [f for f in bob.drain_events() if f["type"] == "message" and f["text"] == "unstorable"]


async def test_audit2_a_database_failure_after_the_journal_record_is_recovered_from_the_journal(cluster_factory,
                                                                                                monkeypatch):
    cl = await cluster_factory(["A", "B"], users={"A": ["alice"], "B": ["bob"]})
    alice, bob = await cl.client("A", "alice"), await cl.client("B", "bob")
    await alice.join("ops")
    await bob.join("ops")
    srv = cl.servers["B"]
    real = srv.store.commit
    failed: list[bool] = []

    def commit_fails_once():
        if srv.journal_n == 1 and not failed:
            failed.append(True)
            raise OSError("disk full")
        return real()
    monkeypatch.setattr(srv.store, "commit", commit_fails_once)
    await alice.say("ops", "journaled, then the disk filled")
    await alice.say("ops", "after the disk")
    await bob.wait_for(is_msg("after the disk"), 10)
    await bob.wait_for(is_msg("journaled, then the disk filled"), 5)      # shown live once recovered
    delivers = [r for r in journal(cl, "B") if r["kind"] == "deliver"]
    assert [(r["n"], r["text"]) for r in delivers] == [(1, "journaled, then the disk filled"), (2, "after the disk")]
    assert [m.text for m in srv.store.history("ops", 10)[0]] == ["journaled, then the disk filled", "after the disk"]
    assert failed and not srv.store.quarantined()


async def test_audit13_integers_beyond_63_bits_get_a_named_error_not_an_internal_one(cluster_factory):
    cl = await cluster_factory(["A"], users={"A": ["alice"]}, chat={"max_sessions_per_user": 1})
    alice = await cl.client("A", "alice")
    await alice.join("ops")
    for frame in ({"type": "history", "room": "ops", "after_n": 1 << 63},
                  {"type": "history", "room": "ops", "limit": 1 << 64},
                  {"type": "history", "room": "ops", "before": [1 << 63, "A"]}):
        with pytest.raises(Exception) as e:
            await alice.request(frame)
        assert getattr(e.value, "code", None) == "bad_field", frame
    # A hello with a huge last_n is refused before it authenticates: it holds no session slot.
    async with aiohttp.ClientSession() as http, http.ws_connect(cl.url("A")) as ws:
        await ws.send_json({"type": "hello", "user": "alice", "session": alice.session_token, "last_n": 1 << 63})
        reply = await ws.receive_json(timeout=5)
        assert reply["type"] == "error" and reply["code"] == "bad_field", reply
    await alice.close()
    again = await cl.client("A", "alice")       # max_sessions_per_user = 1: the refused hello took no slot
    assert again.welcome["user"] == "alice"


def texts(client) -> list[str]:
    return [f["text"] for f in client.drain_events() if f["type"] == "message"]


async def eve_sees_nothing(eve, room: str = "secret") -> None:
    with pytest.raises(ChatError) as e:
        await eve.history(room)
    assert e.value.code == "forbidden"
    with pytest.raises(ChatError) as e:
        await eve.join(room)
    assert e.value.code == "forbidden"
    assert room not in [r["room"] for r in await eve.rooms()]


@pytest.mark.parametrize("first_back", ["B", "A"])
async def test_audit1_a_private_room_made_in_a_partition_never_reaches_a_non_member(cluster_factory, first_back):
    cl = await cluster_factory(["A", "B", "C"], users={"A": ["alice"], "B": ["bob"], "C": ["eve", "carol"]})
    alice, bob = await cl.client("A", "alice"), await cl.client("B", "bob")
    eve, carol = await cl.client("C", "eve"), await cl.client("C", "carol")
    await eve.join("secret")                       # eve sits in a public room of that name at C beforehand
    cl.net.set_link("A", "C", "disconnected")
    cl.net.set_link("B", "C", "disconnected")
    await alice.create("secret", ["bob", "carol"])
    await cl.settle()
    await bob.join("secret")
    await bob.say("secret", "while C is cut off")
    # C comes back to one site only, then to the other; the definition's maker may be the last one.
    other = "A" if first_back == "B" else "B"
    cl.net.set_link(first_back, "C", "connected")
    await cl.settle()
    await bob.say("secret", "classified")
    await alice.say("secret", "top secret")
    await cl.settle()
    assert not [t for t in texts(eve) if t in ("classified", "top secret")]
    await eve_sees_nothing(eve)
    cl.net.set_link(other, "C", "connected")
    await cl.settle()
    await bob.say("secret", "after everything is back")
    await cl.settle()
    assert not [t for t in texts(eve) if t in ("classified", "top secret", "after everything is back")]
    await eve_sees_nothing(eve)
    # A member at C gets what reached C, in its place.
    joined = await carol.join("secret")
    got = [m["text"] for m in joined["history"]]
    reached_c = "classified" if first_back == "B" else "top secret"     # the other was sent while C was cut off
    assert {reached_c, "after everything is back"} <= set(got)
    stored = cl.servers["C"].store
    assert all(m.user in ("alice", "bob") for m in stored.history("secret", 100)[0])
    assert not stored.held()


async def test_audit1_a_site_that_never_got_the_definition_holds_the_messages_and_asks_their_sender(cluster_factory):
    cl = await cluster_factory(["A", "B", "C"], users={"A": ["alice"], "B": ["bob"], "C": ["eve", "carol"]})
    alice, bob = await cl.client("A", "alice"), await cl.client("B", "bob")
    eve, carol = await cl.client("C", "eve"), await cl.client("C", "carol")
    await eve.join("secret")
    # The definition from A reaches B only (A-C is down); B and C stay connected all along, so no
    # reconnection makes anyone re-send it: C learns it only by asking.
    cl.net.set_link("A", "C", "disconnected")
    await alice.create("secret", ["bob", "carol"])
    await cl.settle()
    assert "secret" not in cl.servers["C"].private
    await bob.join("secret")
    await bob.say("secret", "classified")
    await cl.settle()
    events = eve.drain_events()
    assert "classified" not in [f.get("text") for f in events]
    assert "secret" in cl.servers["C"].private           # asked B, which knew it
    left = [f for f in events if f["type"] == "left"]
    assert left and "made private by alice at A" in left[0]["reason"]
    await eve_sees_nothing(eve)
    joined = await carol.join("secret")
    assert [m["text"] for m in joined["history"]] == ["classified"]
    assert joined["history"][0]["late"] is True
    released = [r for r in journal(cl, "C") if r["kind"] == "deliver" and r["text"] == "classified"]
    assert len(released) == 1 and released[0]["held"] is True and released[0]["late"] is True
