"""Acknowledging a flash or immediate message is idempotent per user and message, at the server.

A client that acknowledges twice (the line client did, 30 ms apart; two sessions may race) sends one
acknowledgement: the repeat gets the first one's answer, no second payload goes out, and the user's site
journals one ``acknowledge`` record.
"""
from __future__ import annotations

import asyncio
import json

from testkit import wait_until

from chat_server.payload import Acknowledgement, PayloadError, decode_payload


def acknowledgements_sent(net) -> list[Acknowledgement]:
    out = []
    for _, payload, _ in net.sent_payloads:
        try:
            p = decode_payload(payload)
        except PayloadError:
            continue
        if isinstance(p, Acknowledgement):
            out.append(p)
    return out


def journal(cl, site: str) -> list[dict]:
    return [json.loads(line) for f in sorted((cl.mission.site_dir(site) / "journal").glob("*.jsonl"))
            for line in f.read_text().splitlines()]


async def test_a_repeated_acknowledge_sends_nothing_and_gets_the_same_answer(cluster_factory):
    cl = await cluster_factory(["A", "B"], users={"A": ["alice"], "B": ["bob"]})
    alice, bob = await cl.client("A", "alice"), await cl.client("B", "bob")
    other = await cl.client("A", "alice")                   # a second session of the same user
    for c in (alice, bob, other):
        await c.join("ops")
    ack = await bob.request({"type": "say", "room": "ops", "text": "contact", "client_id": "i1",
                             "precedence": "immediate"})
    msg_id = ack["msg_id"]
    await alice.wait_for(lambda f: f.get("msg_id") == msg_id and f["type"] == "message", 5)
    frame = {"type": "acknowledge", "msg_id": msg_id}
    cl.net.gate = asyncio.Event()                           # RCM takes its time: the first is on its way
    first = asyncio.ensure_future(alice.request(frame))
    await wait_until(lambda: cl.servers["A"].frames._acknowledging, "the first acknowledgement on its way")
    racing = asyncio.ensure_future(other.request(frame))    # another session of alice, meanwhile
    twice = asyncio.ensure_future(alice.request(frame))     # and the same one again
    await asyncio.sleep(0.05)                               # (whichever answer they get, nothing is sent twice)
    cl.net.gate.set()
    first, racing, twice = await asyncio.gather(first, racing, twice)
    seen = await bob.wait_for(lambda f: f["type"] == "acknowledged" and f["msg_id"] == msg_id, 5)
    assert (seen["user"], seen["site"]) == ("alice", "A")
    # A repeat gets the first one's answer while it is on its way, the acknowledgement the room got once here.
    assert first["type"] == "acknowledging"
    for repeat in (racing, twice, await alice.request(frame)):
        assert repeat in ({**first, "id": repeat["id"]}, {**seen, "id": repeat["id"]})
    assert len(acknowledgements_sent(cl.net)) == 1
    assert [r["msg_id"] for r in journal(cl, "A") if r["kind"] == "acknowledge"] == [msg_id]
    page = (await bob.history("ops"))["messages"]
    assert [a["user"] for a in page[-1]["acknowledgements"]] == ["alice"]
