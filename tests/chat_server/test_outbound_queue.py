"""What a client is sent fits its outbound queue (on the RCM double): a resume's backlog is paced by the
client's reading, never a reason to close it, and a history or joined page holds at most half the queue
and says ``more``. A client that stops reading altogether: test_chat_bad_input.py."""
from __future__ import annotations

import aiohttp
import pytest

pytestmark = pytest.mark.timeout(60)

BIG = {"max_text_bytes": 8000, "max_frame_bytes": 16384, "outbound_queue_bytes": 65536}


async def test_a_resume_whose_backlog_exceeds_the_outbound_queue_is_paced_not_closed(cluster_factory):
    cl = await cluster_factory(["A"], users={"A": ["alice", "bob"]}, chat=BIG)
    alice, bob = await cl.client("A", "alice"), await cl.client("A", "bob")
    await alice.join("ops")
    await bob.join("ops")
    token, last_n = alice.session_token, alice.last_n
    await alice.close()
    for i in range(40):                               # 40 x 7 kB: four times the 64 kB outbound queue
        await bob.say("ops", f"{i} " + "x" * 7000)
    async with aiohttp.ClientSession() as http, http.ws_connect(cl.url("A"), max_msg_size=0) as ws:
        await ws.send_json({"type": "hello", "user": "alice", "session": token, "last_n": last_n})
        got = []
        while len(got) < 40:
            f = await ws.receive_json(timeout=10)
            assert f["type"] != "error", f
            if f["type"] == "message":
                got.append(int(f["text"].split()[0]))
        assert got == list(range(40))
        await bob.say("ops", "live after the replay")
        while (f := await ws.receive_json(timeout=10))["type"] != "message":
            pass
        assert f["text"] == "live after the replay"
        assert not ws.closed


async def test_a_history_page_of_long_messages_fits_the_outbound_queue(cluster_factory):
    cl = await cluster_factory(["A"], users={"A": ["alice", "bob"]}, chat=BIG)
    alice, bob = await cl.client("A", "alice"), await cl.client("A", "bob")
    await bob.join("ops")
    for i in range(30):
        await bob.say("ops", f"{i} " + "y" * 7000)
    page = await alice.history("ops", limit=500)      # the TUI's catch-up asks for 500
    assert page["more"] and 0 < len(page["messages"]) < 30
    assert int(page["messages"][-1]["text"].split()[0]) == 29     # the newest, the rest by `before`
    older = await alice.history("ops", before=page["messages"][0]["msg_id"], limit=500)
    assert int(older["messages"][-1]["text"].split()[0]) == int(page["messages"][0]["text"].split()[0]) - 1
    joined = await alice.join("ops")
    assert joined["more"] and joined["history"][-1]["text"].startswith("29 ")
    await alice.say("ops", "still connected")
