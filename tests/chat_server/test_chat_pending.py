"""Sends of unknown fate: a ``say`` handed to RCM whose answer never came (the RCM connection broke, the
chat server was killed) is retried by the client under the same client_id. If RCM had accepted it,
the retry is acked with the first msg_id and nothing is sent again; if not, it is sent once."""
from __future__ import annotations

import asyncio
from typing import Any

import pytest
from chat_fake_rcm import FakeRcmClient, RcmUnavailable

from chat_server.client import ChatError
from chat_server.journal import journal_files, read_journal
from chat_server.payload import ChatMessage, decode_payload, encode_payload
from chat_server.store import ChatStore

pytestmark = pytest.mark.timeout(60)


def chat_sends(net: Any, text: str) -> list[bytes]:
    return [p for o, p, _ in net.sent_payloads
            if isinstance(decode_payload(p), ChatMessage) and decode_payload(p).text == text]


def break_next_send(monkeypatch: pytest.MonkeyPatch, net: Any, accept: bool) -> None:
    """The next chat message sent at site A: RCM accepts it (or not), then the connection breaks
    before the answer reaches the chat server."""
    original = FakeRcmClient.send

    async def send(self: FakeRcmClient, payload: bytes, dests: Any = None) -> Any:
        if not isinstance(decode_payload(payload), ChatMessage):
            return await original(self, payload, dests)
        monkeypatch.setattr(FakeRcmClient, "send", original)
        if accept:
            net.send(self.site, payload, dests)
        net.drop_clients(self.site)
        raise RcmUnavailable("connection to the RCM server is gone")
    monkeypatch.setattr(FakeRcmClient, "send", send)


def send_records(cl: Any, site: str, msg_id: str) -> list[dict[str, Any]]:
    """The journal's ``send`` records of ``msg_id`` at ``site``, over every run's file."""
    directory = cl.mission.site_dir(site) / "journal"
    return [r for f in journal_files(directory) for r in read_journal(f)
            if r.get("kind") == "send" and r.get("msg_id") == msg_id]


async def say_until_acked(client: Any, text: str, cid: str) -> dict[str, Any]:
    for _ in range(100):
        try:
            return await client.say("ops", text, client_id=cid)
        except ChatError as e:
            assert e.code == "unavailable", e
            await asyncio.sleep(0.05)
    raise AssertionError("never acked")


@pytest.mark.parametrize("accepted", [True, False])
async def test_retry_after_a_lost_rcm_answer_is_sent_once(cluster_factory, monkeypatch, accepted):
    cl = await cluster_factory(["A", "B"], users={"A": ["alice"], "B": ["bob"]})
    alice, bob = await cl.client("A", "alice"), await cl.client("B", "bob")
    await alice.join("ops")
    await bob.join("ops")
    break_next_send(monkeypatch, cl.net, accepted)
    with pytest.raises(ChatError) as e:
        await alice.say("ops", "fate unknown", client_id="c-1")
    assert e.value.code == "unavailable"
    ack = await say_until_acked(alice, "fate unknown", "c-1")
    again = await alice.say("ops", "fate unknown", client_id="c-1")
    assert again["msg_id"] == ack["msg_id"]
    await bob.wait_for(lambda f: f["type"] == "message" and f["text"] == "fate unknown", 5)
    await cl.settle()
    assert len(chat_sends(cl.net, "fate unknown")) == 1           # in RCM once, whichever attempt it was
    for site in ("A", "B"):
        msgs, _ = cl.servers[site].store.history("ops", 50)
        assert [m.msg_id for m in msgs if m.text == "fate unknown"] == [ack["msg_id"]]
    assert not cl.servers["A"].store.is_pending("alice", "c-1")
    # Acked means accepted: Contract 3's send record exists once, whichever attempt reached RCM.
    assert len(send_records(cl, "A", ack["msg_id"])) == 1


async def test_retry_after_a_crash_between_rcm_and_the_journal(cluster_factory):
    """The chat server dies after RCM accepted a say and before it journaled it: on restart, the
    retry is acked with RCM's msg_id (learnt from the replayed delivery or settled by a barrier)."""
    cl = await cluster_factory(["A", "B"], users={"A": ["alice"], "B": ["bob"]})
    alice = await cl.client("A", "alice")
    await alice.join("ops")
    await alice.close()
    await cl.stop("A")
    # What the killed server left behind: a pending row, and the message in RCM only.
    store = ChatStore(cl.mission.site_dir("A") / "chat" / "chat.db")
    store.add_pending("alice", "c-9", 1.0)
    store.close()
    ghost = await FakeRcmClient.connect(cl.net, "A", None)
    acc = await ghost.send(encode_payload(ChatMessage("ops", "alice", "before the crash", 1.0, "c-9")))
    await ghost.close()
    await cl.start("A")
    alice = await cl.client("A", "alice")
    ack = await say_until_acked(alice, "before the crash", "c-9")
    assert ack["msg_id"] == acc.msg_id
    await cl.settle()
    assert len(chat_sends(cl.net, "before the crash")) == 1
    msgs, _ = cl.servers["A"].store.history("ops", 50)
    assert [m.msg_id for m in msgs if m.text == "before the crash"] == [acc.msg_id]
    [rec] = send_records(cl, "A", acc.msg_id)
    assert (rec["user"], rec["room"], rec["text"], rec["seq"]) == ("alice", "ops", "before the crash", acc.seq)


async def test_pending_say_never_accepted_is_sent_after_the_barrier(cluster_factory):
    """A pending row left by a crash whose say never reached RCM: the retry waits for the barrier
    (delivered here, so nothing earlier is outstanding) and is then sent, once."""
    cl = await cluster_factory(["A"], users={"A": ["alice"]})
    alice = await cl.client("A", "alice")
    await alice.join("ops")
    await alice.close()
    await cl.stop("A")
    store = ChatStore(cl.mission.site_dir("A") / "chat" / "chat.db")
    store.add_pending("alice", "c-5", 1.0)
    store.add_pending("carol", "c-old", 1.0)             # a say nobody retries: forgotten by the barrier
    store.close()
    await cl.start("A")
    alice = await cl.client("A", "alice")
    ack = await say_until_acked(alice, "never reached RCM", "c-5")
    assert len(chat_sends(cl.net, "never reached RCM")) == 1
    barriers = [p for o, p, d in cl.net.sent_payloads if d == ("A",) and decode_payload(p).__class__.__name__
                == "Barrier"]
    assert len(barriers) == 1
    srv = cl.servers["A"]
    assert srv.store.sent_msg_id("alice", "c-5") == ack["msg_id"]
    assert not srv.store.is_pending("carol", "c-old") and not srv.store.is_pending("alice", "c-5")
