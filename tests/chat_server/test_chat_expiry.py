"""Message expiry on the chat side (issue 36 item 5): ``say {expires_in}``, RCM's ``expires_at`` kept with the
message, its expired stub journaled and never shown, history and search marking it at read time.

The core tests drive ``ChatCore`` sans-IO (test_chat_core's ``Site``); the cluster tests run chat servers on
the fake RCM (chat_fake_rcm.py), which stubs a message delivered past its ``expires_at`` as RCM does, on a
virtual clock shared by RCM and the chat servers.
"""
from __future__ import annotations

import json
import math
import time

import pytest
from test_chat_core import Site, kinds, msg
from testkit import wait_until

from chat_server.actions import Broadcast, JournalRecord, ToRoom
from chat_server.client import ChatError
from chat_server.journal import read_journal
from chat_server.payload import encode_payload
from chat_server.protocol import EXPIRES_IN_MAX, FrameError, parse_client_frame
from chat_server.store import HeldMessage
from rcm.client import Delivery


def deliver(site: Site, origin: str, seq: int, t: int, payload: bytes = b"", now: float = 0.0, **kw) -> list:
    site.n += 1
    d = Delivery(site.n, origin, seq, f"{origin}:{seq}", [t, origin], kw.pop("late", False), payload, **kw)
    p = None if d.expired else site.core.decode(d)
    return site.step(site.core.delivery(d, p, now))


# --- the core, sans-IO ------------------------------------------------------------------------------------
def test_a_message_keeps_rcms_expiry_in_store_journal_and_frames_and_reads_expired_after_it(tmp_path):
    a = Site(tmp_path)
    out = deliver(a, "B", 1, 5, encode_payload(msg("ops", "bob", "short-lived")), now=10.0, expires_at=100.0)
    assert kinds(out) == ["StoreMessage", "JournalRecord", "ToRoom", "QueueReceipt"]
    assert out[1].fields["expires_at"] == 100.0 and a.records()[0]["expires_at"] == 100.0
    shown = out[2].frame
    assert shown["expires_at"] == 100.0 and "expired" not in shown
    stored = a.store.message("B:1")
    assert stored is not None and stored.expires_at == 100.0
    assert "expired" not in stored.frame(99.9)
    assert stored.frame(100.0)["expired"] is True                    # read at or past expires_at
    a.core.history.clock = lambda: 150.0
    page = a.core.history.page("ops", None)["messages"]
    assert [(m["msg_id"], m["expires_at"], m["expired"]) for m in page] == [("B:1", 100.0, True)]
    plain = deliver(a, "B", 2, 6, encode_payload(msg("ops", "bob", "for ever")))
    assert "expires_at" not in plain[1].fields and "expires_at" not in plain[2].frame


def test_an_expired_stub_is_journaled_expired_and_is_neither_shown_nor_numbered(tmp_path):
    a = Site(tmp_path)
    out = deliver(a, "B", 1, 5, expires_at=50.0, expired=True, late=True)
    assert out == [JournalRecord("control", dict(msg_id="B:1", origin="B", seq=1, order=[5, "B"], late=True)),
                   JournalRecord("expired", dict(msg_id="B:1", origin="B", seq=1))]      # its place, then what it was
    assert [{k: r[k] for k in ("kind", "msg_id", "origin", "seq")} for r in a.records()] == [
        {"kind": k, "msg_id": "B:1", "origin": "B", "seq": 1} for k in ("control", "expired")]
    assert not a.store.has_message("B:1") and a.core.journal_n == 0
    assert a.core.losses.revisions() == []                           # nothing was missing, nothing to revise
    after = deliver(a, "B", 2, 6, encode_payload(msg("ops", "bob", "next")))
    assert after[1].fields["n"] == 1                                 # the stub took no delivery number


def test_a_stub_of_a_stored_message_is_a_replay_and_changes_nothing(tmp_path):
    a = Site(tmp_path)
    deliver(a, "B", 1, 5, encode_payload(msg("ops", "bob", "had it")), expires_at=50.0)
    assert deliver(a, "B", 1, 5, expires_at=50.0, expired=True) == []
    assert [r["kind"] for r in a.records()] == ["deliver"]
    assert a.store.message("B:1").text == "had it"


def test_a_missing_message_answered_by_its_stub_is_revised_as_expired_not_recovered(tmp_path):
    a = Site(tmp_path)
    a.step(a.core.missing("B", ((3, 4),)))
    deliver(a, "B", 3, 7, expires_at=50.0, expired=True, late=True, repaired=True)
    deliver(a, "B", 4, 8, encode_payload(msg("ops", "bob", "kept")), late=True, repaired=True)
    notices = [x.frame for x in a.core.losses.revisions() if isinstance(x, Broadcast)]
    assert notices == [{"type": "missing", "origin": "B", "count": 0, "ranges": [], "more": False,
                        "recovered": 1, "expired": 1}]
    assert a.core.losses.still_missing() == {}


def test_a_held_private_message_and_a_journal_recovery_keep_the_expiry(tmp_path):
    a = Site(tmp_path)
    h = HeldMessage("C:1", "secret", b"k", "B:9", "B", 9, [4, "B"], b"p", expires_at=77.5)
    a.store.hold(h, 10)
    assert a.store.held("secret") == [h]
    recs = [dict(kind="deliver", n=3, at=1.0, msg_id="B:2", origin="B", seq=2, order=[3, "B"], late=False,
                 room="ops", user="bob", text="t", sent_at=1.0, expires_at=60.0)]
    out = a.step(a.core.recovered(recs))
    shown = [x.frame for x in out if isinstance(x, ToRoom)]
    assert shown[0]["expires_at"] == 60.0 and a.store.message("B:2").expires_at == 60.0


@pytest.mark.parametrize("value", [0, 0.5, -3, EXPIRES_IN_MAX + 1, "60", True, 1e300])
def test_a_say_with_a_bad_expires_in_is_refused_naming_the_rule(value):
    frame = json.dumps({"type": "say", "room": "ops", "text": "x", "client_id": "c", "expires_in": value})
    with pytest.raises(FrameError) as e:
        parse_client_frame(frame, 1000)
    assert e.value.code == "bad_field" and "expires_in" in e.value.message


def test_a_say_with_an_infinite_expires_in_is_refused_and_a_good_one_kept():
    with pytest.raises(FrameError, match="expires_in"):
        parse_client_frame('{"type":"say","room":"ops","text":"x","client_id":"c","expires_in":Infinity}', 1000)
    req = parse_client_frame('{"type":"say","room":"ops","text":"x","client_id":"c","expires_in":3600}', 1000)
    assert req.fields["expires_in"] == 3600


# --- chat servers on the fake RCM -------------------------------------------------------------------------
class Clock:
    """Wall time that tests move on (RCM's and the chat servers')."""

    def __init__(self) -> None:
        self.t = time.time()

    def __call__(self) -> float:
        return self.t


async def test_an_expiring_say_travels_with_its_expiry_and_a_late_copy_arrives_as_an_expired_stub(cluster_factory):
    clock = Clock()
    cl = await cluster_factory(["A", "B", "C"], users={"A": ["alice"], "B": ["bob"], "C": ["carol"]}, clock=clock)
    cl.net.clock = clock
    alice, bob, carol = [await cl.client(s, u) for s, u in (("A", "alice"), ("B", "bob"), ("C", "carol"))]
    for c in (alice, bob, carol):
        await c.join("ops")
    await cl.settle()
    with pytest.raises(ChatError) as refused:
        await alice.say("ops", "never", expires_in=0)
    assert refused.value.code == "bad_field"

    cl.net.set_link("A", "C", "suspected")                  # C's copy waits for the link
    ack = await alice.say("ops", "gone in a minute", expires_in=60)
    at_b = await bob.wait_for(lambda f: f["type"] == "message" and f["msg_id"] == ack["msg_id"], 5)
    sent = next(r for r in read_journal(cl.servers["A"].journal.path) if r["kind"] == "send")
    assert at_b["expires_at"] == sent["expires_at"] == math.ceil(at_b["sent_at"] + 60)   # (whole seconds)
    assert "expired" not in at_b

    clock.t += 61                                            # past expiry: C gets RCM's stub
    cl.net.set_link("A", "C", "connected")
    journal_c = cl.servers["C"].journal.path
    await wait_until(lambda: any(r["kind"] == "expired" for r in read_journal(journal_c)), "C's expired record")
    expired = next(r for r in read_journal(journal_c) if r["kind"] == "expired")
    assert (expired["msg_id"], expired["origin"]) == (ack["msg_id"], "A")
    assert not any(r["kind"] == "deliver" and r["msg_id"] == ack["msg_id"] for r in read_journal(journal_c))
    assert (await carol.history("ops"))["messages"] == []
    assert not any(f.get("msg_id") == ack["msg_id"] or f["type"] == "missing" for f in carol.drain_events())

    page = (await bob.history("ops"))["messages"]           # B had it: served, marked expired at read time
    assert [(m["msg_id"], m["expired"]) for m in page] == [(ack["msg_id"], True)]
    found = (await bob.request({"type": "search", "query": "minute"}))["messages"]
    assert [(m["msg_id"], m.get("expired")) for m in found] == [(ack["msg_id"], True)]

    cl.net.set_link("A", "C", "disconnected")               # C is told it lost one; repair brings its stub
    lost = await alice.say("ops", "lost then expired", expires_in=30)
    seq = int(lost["msg_id"].split(":")[1])
    cl.net.set_link("A", "C", "connected")
    await carol.wait_for(lambda f: f["type"] == "missing" and f["count"] == 1, 5)
    clock.t += 31
    cl.net.repair("C", "A", [seq])
    await cl.settle()
    revised = await carol.wait_for(lambda f: f["type"] == "missing" and f["count"] == 0, 5)
    assert (revised.get("expired"), revised.get("recovered")) == (1, None)
    assert cl.servers["C"].core.losses.still_missing() == {}
    assert (await carol.history("ops"))["messages"] == []
