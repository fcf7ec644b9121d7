"""A msg_id of a message the user may not read gets exactly the answer of a msg_id that does not exist, in every
request that names one (acknowledge, say's reply_to, history before/around), so that walking msg_ids
(``<site>:<seq>``) names no private room and counts none of its messages."""
from __future__ import annotations

from typing import Any

import pytest
from chat_missions import grant

from chat_server.client import ChatError

pytestmark = pytest.mark.timeout(60)


async def answer(client, frame: dict[str, Any]) -> dict[str, Any]:
    """The reply to ``frame``, or its error frame (without ``in_reply_to``)."""
    try:
        reply = await client.request(frame)
    except ChatError as e:
        reply = e.frame
    return {k: v for k, v in reply.items() if k not in ("id", "in_reply_to")}


def same_answer(a: dict[str, Any], b: dict[str, Any], id_a: str, id_b: str) -> bool:
    return repr(a).replace(id_a, "MSG") == repr(b).replace(id_b, "MSG")


@pytest.fixture
async def private_flash(cluster_factory):
    """Site A: alice and bob in the private room "secret" with a flash message in it; eve, not a member,
    in the public room "ops"."""
    cl = await cluster_factory(["A"], users={"A": ["alice", "bob", "eve"]})
    grant(cl.mission, "A", "bob", "flash")          # [chat] flash_role
    alice, bob, eve = [await cl.client("A", u) for u in ("alice", "bob", "eve")]
    await alice.create("secret", ["bob"])
    await alice.wait_for(lambda f: f["type"] == "joined" and f["room"] == "secret", 5)
    await bob.join("secret")
    ack = await bob.request({"type": "say", "room": "secret", "text": "classified", "client_id": "f1",
                             "precedence": "flash"})
    await eve.join("ops")
    nowhere = f"A:{int(ack['msg_id'].split(':')[1]) + 1000}"     # the next msg_ids of the walk: none yet
    return cl, alice, eve, ack["msg_id"], nowhere


async def test_acknowledge_answers_an_unreadable_message_as_one_that_does_not_exist(private_flash):
    cl, alice, eve, hidden, nowhere = private_flash
    a = await answer(eve, {"type": "acknowledge", "msg_id": hidden})
    b = await answer(eve, {"type": "acknowledge", "msg_id": nowhere})
    assert a["type"] == "error" and same_answer(a, b, hidden, nowhere), (a, b)
    assert "secret" not in repr(a)
    ok = await answer(alice, {"type": "acknowledge", "msg_id": hidden})         # a member may
    assert ok["type"] == "acknowledging"


async def test_a_reply_to_an_unreadable_message_is_taken_like_a_reply_to_an_unknown_one(private_flash):
    cl, alice, eve, hidden, nowhere = private_flash
    a = await answer(eve, {"type": "say", "room": "ops", "text": "re", "client_id": "c1", "reply_to": hidden})
    b = await answer(eve, {"type": "say", "room": "ops", "text": "re", "client_id": "c2", "reply_to": nowhere})
    assert a["type"] == b["type"] == "ack", (a, b)
    # A readable message of another room is still refused: the user can see where it is.
    await alice.join("ops")
    mine = await answer(alice, {"type": "say", "room": "secret", "text": "x", "client_id": "c3",
                                "reply_to": a["msg_id"]})
    assert mine["type"] == "error" and mine["code"] == "bad_field" and "another room" in mine["message"]


async def test_history_before_and_around_an_unreadable_message_answer_as_for_an_unknown_one(private_flash):
    cl, alice, eve, hidden, nowhere = private_flash
    for field in ("before", "around"):
        a = await answer(eve, {"type": "history", "room": "ops", field: hidden})
        b = await answer(eve, {"type": "history", "room": "ops", field: nowhere})
        assert a["type"] == "error" and same_answer(a, b, hidden, nowhere), (field, a, b)
        assert "secret" not in repr(a)


async def test_search_never_returns_an_unreadable_message(private_flash):
    cl, alice, eve, hidden, nowhere = private_flash
    assert (await answer(eve, {"type": "search", "query": "classified"}))["messages"] == []
    assert [m["msg_id"] for m in (await answer(alice, {"type": "search", "query": "classified"}))["messages"]] \
        == [hidden]
