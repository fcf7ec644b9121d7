"""Lost and recovered, as clients are told: recovered replaces lost, delivery marks update after repair.

A site cut off long enough is reported messages lost (``missing``); RCM's repair may bring them later
(late and repaired). Every frame must then say the same thing: the revised notice (count 0), the
repaired copy in place, the author's delivery marks (a receipt from the site that has it now), history
with current receipts, and ``welcome`` telling a client that was away what is still missing.
"""
from __future__ import annotations

from testkit import wait_until


def missing_from(origin: str, **fields):
    return lambda f: (f["type"] == "missing" and f["origin"] == origin
                      and all(f.get(k) == v for k, v in fields.items()))


async def test_after_repair_recovered_replaces_lost_and_the_delivery_marks_update(cluster_factory):
    cl = await cluster_factory(["A", "B", "C"], users={"A": ["alice"], "C": ["carol"]})
    alice = await cl.client("A", "alice")
    carol = await cl.client("C", "carol")
    await alice.join("ops")
    await carol.join("ops")
    await cl.settle()
    cl.net.set_link("A", "C", "disconnected")
    ack = await alice.say("ops", "while C is gone")
    assert ack["skipped"] == ["C"]
    seq = int(ack["msg_id"].split(":")[1])
    cl.net.set_link("A", "C", "connected")                  # C is told the message is lost
    lost = await carol.wait_for(missing_from("A"), 5)
    assert (lost["count"], lost["ranges"]) == (1, [[seq, seq]])
    away = await cl.client("C", "carol")                    # a client logging in now is told, too
    assert away.welcome["missing"] == {"A": 1}
    await away.close()

    cl.net.repair("C", "A", [seq])
    back = await carol.wait_for(lambda f: f["type"] == "message" and f["msg_id"] == ack["msg_id"], 5)
    assert (back["late"], back["repaired"], back["text"]) == (True, True, "while C is gone")
    await cl.settle()
    revised = await carol.wait_for(missing_from("A", recovered=1), 5)
    assert (revised["count"], revised["ranges"]) == (0, [])              # the red notice goes
    # The author's delivery mark: C has it now (the ack said "not sent to C").
    await alice.wait_for(lambda f: f == {"type": "receipt", "msg_id": ack["msg_id"], "site": "C"}, 5)
    page = (await alice.history("ops"))["messages"]
    assert [(m["msg_id"], m["receipts"]) for m in page] == [(ack["msg_id"], ["A", "B", "C"])]
    assert "skipped" not in page[0]
    at_c = (await carol.history("ops"))["messages"]
    assert [(m["msg_id"], m["repaired"], m["late"]) for m in at_c] == [(ack["msg_id"], True, True)]
    again = await cl.client("C", "carol")                   # nothing is missing any more
    assert again.welcome["missing"] == {}
    await wait_until(lambda: cl.servers["C"].core.losses.lost == {}, "C's kept ranges emptied")
