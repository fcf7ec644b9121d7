"""Chat server behaviour over WebSockets, on the in-process RCM double (chat_fake_rcm)."""
from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest
from testkit import wait_until

from chat_server.journal import journal_files, read_journal
from deploy.supervisor import health_line

pytestmark = pytest.mark.timeout(60)


def is_msg(text: str):
    return lambda f: f["type"] == "message" and f["text"] == text


async def test_two_sites_chat_in_a_public_room(cluster_factory):
    cl = await cluster_factory(["A", "B"], users={"A": ["alice"], "B": ["bob"]})
    alice = await cl.client("A", "alice")
    bob = await cl.client("B", "bob")
    assert alice.welcome["site"] == "A" and alice.welcome["sites"] == {"A": "connected", "B": "connected"}
    assert alice.welcome["session"]
    joined = await alice.join("ops")
    assert joined["room"] == "ops" and joined["history"] == [] and joined["private"] is False
    await bob.join("ops")
    ack = await alice.say("ops", "hello from A", client_id="c1")
    assert ack == {"type": "ack", "client_id": "c1", "msg_id": "A:" + ack["msg_id"].split(":")[1], "id": ack["id"]}
    for c in (alice, bob):
        m = await c.wait_for(is_msg("hello from A"), 5)
        assert (m["room"], m["origin"], m["user"], m["msg_id"], m["late"]) == \
        ("ops", "A", "alice", ack["msg_id"], False)
        assert isinstance(m["order"], list) and isinstance(m["sent_at"], float)
    # The author learns which sites delivered its message: its own and B (batched receipts over RCM).
    sites = set()
    while sites != {"A", "B"}:
        r = await alice.wait_for(lambda f: f["type"] == "receipt" and f["msg_id"] == ack["msg_id"], 5)
        sites.add(r["site"])
    # One copy per site crossed RCM, whatever the number of members.
    await bob.say("ops", "hi from B")
    await alice.wait_for(is_msg("hi from B"), 5)
    h = await bob.history("ops")
    assert [m["text"] for m in h["messages"]] == ["hello from A", "hi from B"]


async def test_journal_records_send_and_deliver_before_clients_see_them(cluster_factory):
    cl = await cluster_factory(["A", "B"], users={"A": ["alice"], "B": ["bob"]})
    alice = await cl.client("A", "alice")
    bob = await cl.client("B", "bob")
    await alice.join("ops")
    await bob.join("ops")
    seen_at_delivery = []

    def check(frame):
        if frame["type"] == "message":
            recs = [r for f in journal_files(cl.mission.site_dir("B") / "journal") for r in read_journal(f)]
            seen_at_delivery.append(any(r["kind"] == "deliver" and r["msg_id"] == frame["msg_id"] for r in recs))
    bob.on_frame = check
    ack = await alice.say("ops", "durable")
    await bob.wait_for(is_msg("durable"), 5)
    assert seen_at_delivery == [True]
    recs_a = [r for f in journal_files(cl.mission.site_dir("A") / "journal") for r in read_journal(f)]
    send = [r for r in recs_a if r["kind"] == "send"]
    assert len(send) == 1 and send[0]["msg_id"] == ack["msg_id"] and send[0]["text"] == "durable"
    assert set(send[0]) == {"kind", "site", "at", "msg_id", "origin", "seq", "room", "user", "text", "sent_at", "order",
                            "skipped"}
    deliver = [r for r in recs_a if r["kind"] == "deliver"]
    assert [d["n"] for d in deliver] == [1]
    assert recs_a.index(send[0]) < recs_a.index(deliver[0])     # the send record comes first
    assert set(deliver[0]) == {"kind", "site", "n", "at", "msg_id", "origin", "seq", "order", "late", "room", "user",
                               "text", "sent_at", "via"}
    assert deliver[0]["via"] == []                              # (Contract 3 extension: no relays, direct)
    status = [r for r in recs_a if r["kind"] == "status"]
    assert status and status[0]["peer"] == "B" and status[0]["status"] == "connected"


async def test_session_survives_reconnect_without_loss_or_duplicates(cluster_factory):
    cl = await cluster_factory(["A", "B"], users={"A": ["alice"], "B": ["bob"]})
    alice = await cl.client("A", "alice", reconnect=True)
    bob = await cl.client("B", "bob")
    await alice.join("ops")
    await bob.join("ops")
    await bob.say("ops", "before")
    await alice.wait_for(is_msg("before"), 5)
    # Cut alice's connection under her feet; messages keep coming meanwhile.
    for s in list(cl.servers["A"].connections):
        s.transport.abort()
    for i in range(5):
        await bob.say("ops", f"during {i}")
    await bob.wait_for(is_msg("during 4"), 5)
    texts = []
    while "after" not in texts:
        if len(texts) == 5:
            await bob.say("ops", "after")
        m = await alice.wait_for(lambda f: f["type"] == "message", 10)
        texts.append(m["text"])
    assert texts == [f"during {i}" for i in range(5)] + ["after"]
    assert alice.reconnects == 1


async def test_say_retry_with_same_client_id_is_sent_once(cluster_factory):
    cl = await cluster_factory(["A"], users={"A": ["alice"]})
    alice = await cl.client("A", "alice")
    await alice.join("ops")
    a1 = await alice.say("ops", "once", client_id="same")
    a2 = await alice.say("ops", "once", client_id="same")
    assert a1["msg_id"] == a2["msg_id"]
    await cl.settle()
    h = await alice.history("ops")
    assert [m["text"] for m in h["messages"]] == ["once"]


async def test_history_survives_restart_and_pages(cluster_factory):
    cl = await cluster_factory(["A"], users={"A": ["alice"]})
    alice = await cl.client("A", "alice")
    await alice.join("ops")
    for i in range(12):
        await alice.say("ops", f"m{i}")
    await alice.wait_for(is_msg("m11"), 5)
    await alice.close()
    await cl.stop("A")
    await cl.start("A")
    alice = await cl.client("A", "alice")
    assert alice.welcome["rooms"] == ["ops"]
    joined = await alice.join("ops")
    assert [m["text"] for m in joined["history"]][-3:] == ["m9", "m10", "m11"]
    page = await alice.history("ops", limit=5)
    assert [m["text"] for m in page["messages"]] == [f"m{i}" for i in range(7, 12)] and page["more"]
    older = await alice.history("ops", limit=5, before=page["messages"][0]["msg_id"])
    assert [m["text"] for m in older["messages"]] == [f"m{i}" for i in range(2, 7)]
    # The RCM double replays everything after the restart (new incarnation): no duplicates in history.
    cl.net.restart("A")
    await asyncio.sleep(0.3)
    everything = await alice.history("ops", limit=100)
    assert [m["text"] for m in everything["messages"]] == [f"m{i}" for i in range(12)]
    recs = [r for f in journal_files(cl.mission.site_dir("A") / "journal") for r in read_journal(f)]
    ns = [r["n"] for r in recs if r["kind"] == "deliver"]
    assert ns == list(range(1, 13))


async def test_health_and_index(cluster_factory):
    cl = await cluster_factory(["A", "B"])
    async with aiohttp.ClientSession() as http:
        async with http.get(f"http://127.0.0.1:{cl.servers['A'].port}/health") as r:
            body = await r.json()
            assert r.status == 200 and body["site"] == "A" and body["rcm"] is True
            assert body["sites"] == {"A": "connected", "B": "connected"}
        async with http.get(f"http://127.0.0.1:{cl.servers['A'].port}/") as r:
            assert r.status == 200 and "<html" in (await r.text()).lower()
    cl.net.drop_clients("A")
    cl.net.sites["A"].up = False
    await asyncio.sleep(0.05)
    async with aiohttp.ClientSession() as http:
        async with http.get(f"http://127.0.0.1:{cl.servers['A'].port}/health") as r:
            assert r.status == 503 and (await r.json())["rcm"] is False


async def test_health_says_why_a_peer_is_refused(cluster_factory):
    cl = await cluster_factory(["A", "B", "C"])
    why = "B orders messages with 'sequencer', A with 'lamport': every site of a mission must use the same " \
          "[rcm] ordering"
    cl.net.refusals[("A", "B")] = why
    cl.net.refusals[("A", "C")] = "an old refusal, C has connected since"
    cl.net.set_link("A", "B", "disconnected")
    url = f"http://127.0.0.1:{cl.servers['A'].port}/health"
    async with aiohttp.ClientSession() as http:
        for _ in range(100):
            async with http.get(url) as r:
                body = await r.json()
            if body["sites"]["B"] == "disconnected":
                break
            await asyncio.sleep(0.02)
    assert body["refusals"] == {"B": why}                 # only for a peer that is not connected
    line = health_line("A", body)
    assert line.startswith(f"ok, peers 1/2 connected (B disconnected: {why}), 0 clients")


async def test_deliveries_journaled_but_not_stored_before_a_crash_are_recovered(cluster_factory):
    cl = await cluster_factory(["A"], users={"A": ["alice"]})
    alice = await cl.client("A", "alice")
    await alice.join("ops")
    await alice.say("ops", "stored")
    await alice.wait_for(is_msg("stored"), 5)
    await alice.close()
    await cl.stop("A")
    # A crash between the journal write and the database commit leaves a deliver record only.
    last = journal_files(cl.mission.site_dir("A") / "journal")[-1]
    with open(last, "a") as f:
        f.write(json.dumps({"kind": "deliver", "site": "A", "n": 2, "at": 1.0, "msg_id": "A:99", "origin": "A",
                            "seq": 99, "order": [99, "A"], "late": False, "room": "ops", "user": "alice",
                            "text": "journaled only", "sent_at": 1.0}) + "\n")
    await cl.start("A")
    alice = await cl.client("A", "alice")
    await alice.say("ops", "after")
    await alice.wait_for(is_msg("after"), 5)
    texts = [m["text"] for m in (await alice.history("ops"))["messages"]]
    assert texts == ["stored", "after", "journaled only"]        # in global order: [99, "A"] is last
    recs = [r for f in journal_files(cl.mission.site_dir("A") / "journal") for r in read_journal(f)]
    assert [r["n"] for r in recs if r["kind"] == "deliver"] == [1, 2, 3]


async def test_a_say_in_flight_during_a_reconnect_is_sent_once(cluster_factory):
    cl = await cluster_factory(["A"], users={"A": ["alice"]})
    alice = await cl.client("A", "alice", reconnect=True)
    await alice.join("ops")
    cl.net.gate = asyncio.Event()                     # RCM holds the send
    pending = asyncio.ensure_future(alice.say("ops", "exactly once", client_id="k1"))
    await wait_until(lambda: cl.servers["A"].pipeline.busy("alice", "k1"), "the say held at RCM", interval=0.01)
    for s in list(cl.servers["A"].connections):       # the connection drops before the ack
        s.transport.abort()
    await asyncio.sleep(0.3)                          # the client reconnects and sends the say again
    cl.net.gate.set()
    ack = await asyncio.wait_for(pending, 10)
    assert alice.reconnects == 1 and ack["client_id"] == "k1"
    await alice.wait_for(is_msg("exactly once"), 5)
    texts = [m["text"] for m in (await alice.history("ops"))["messages"]]
    assert texts == ["exactly once"]
    sends = [r for f in journal_files(cl.mission.site_dir("A") / "journal") for r in read_journal(f)
             if r["kind"] == "send"]
    assert [r["msg_id"] for r in sends] == [ack["msg_id"]]
