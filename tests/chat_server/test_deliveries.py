"""What other sites send through RCM (on the RCM double): the origin of a delivery is RCM's, never a payload
field; receipts count for the delivering site only; payloads are validated (names, finite times, 63-bit
integers, msgpack bombs) and a bad one is refused while every site goes on; a delivery the database
cannot store is quarantined and skipped, one lost after its journal record is recovered from the journal."""
from __future__ import annotations

import math
import sqlite3
import struct

import msgpack
import pytest
from journal_checks import site_journal
from testkit import calls, wait_until

from chat_server.client import ChatError
from chat_server.payload import ChatMessage, PayloadError, Receipts, decode_payload, encode_payload

pytestmark = pytest.mark.timeout(60)


def is_msg(text: str):
    return lambda f: f["type"] == "message" and f["text"] == text


def raw_chat(room: str, user: str, text: str, sent_at) -> bytes:
    return msgpack.packb({"k": "m", "r": room, "u": user, "t": text, "s": sent_at, "c": ""}, use_bin_type=True)


# --- the origin is the delivery's, never a field ------------------------------------------------------
async def test_a_payload_naming_another_site_is_shown_as_its_real_origin(cluster_factory):
    """B's chat server (or any process on B's RCM socket) sends a chat payload dressed up as A's: extra
    ``origin``/``msg_id``/``site`` fields and a user of A. Every site shows, stores and journals it as B's."""
    cl = await cluster_factory(["A", "B", "C"], users={"A": ["alice"], "C": ["carol"]})
    alice, carol = await cl.client("A", "alice"), await cl.client("C", "carol")
    await alice.join("ops")
    await carol.join("ops")
    forged = msgpack.packb({"k": "m", "r": "ops", "u": "alice", "t": "forged order", "s": 1.0, "c": "x",
                            "o": "A", "origin": "A", "site": "A", "msg_id": "A:1", "i": "A:1"}, use_bin_type=True)
    cl.net.send("B", forged, None)
    for c, site in ((alice, "A"), (carol, "C")):
        f = await c.wait_for(is_msg("forged order"), 5)
        assert f["origin"] == "B" and f["msg_id"].startswith("B:"), f      # shown as alice@B, never alice@A
        rec = [r for r in site_journal(cl.mission, site) if r["kind"] == "deliver" and r["text"] == "forged order"]
        assert len(rec) == 1 and rec[0]["origin"] == "B" and rec[0]["msg_id"].startswith("B:"), site


async def test_receipts_are_counted_for_the_delivering_site_and_only_for_our_own_messages(cluster_factory):
    """A site cannot claim a receipt on behalf of another site, nor for messages of a third site."""
    cl = await cluster_factory(["A", "B", "C"], users={"A": ["alice"], "C": ["carol"]})
    alice, carol = await cl.client("A", "alice"), await cl.client("C", "carol")
    await alice.join("ops")
    await carol.join("ops")
    ack = await alice.say("ops", "mine")
    cmsg = await carol.say("ops", "carol's")
    await cl.settle()
    alice.drain_events()
    carol.drain_events()
    cl.net.send("B", encode_payload(Receipts((ack["msg_id"], cmsg["msg_id"]))), ["A", "C"])
    cl.net.send("B", msgpack.packb({"k": "a", "ids": [ack["msg_id"]], "site": "C", "o": "C"}, use_bin_type=True),
                ["A"])
    await cl.settle()
    got = [f for f in alice.drain_events() if f["type"] == "receipt"]
    assert {(f["msg_id"], f["site"]) for f in got} <= {(ack["msg_id"], "B")}, got
    assert not [f for f in carol.drain_events() if f["type"] == "receipt" and f["site"] == "B"]


def test_the_chat_payload_has_no_field_for_its_origin():
    """The decoded payload types carry no origin or message id a sender could choose."""
    from dataclasses import fields

    from chat_server import payload as PL
    for t in (PL.ChatMessage, PL.RoomDefinition, PL.Roster, PL.Receipts, PL.Barrier, PL.DefinitionRequest):
        names = {f.name for f in fields(t)}
        assert not names & {"origin", "site", "msg_id", "seq", "order", "n"}, (t.__name__, names)


# --- msgpack bombs in chat payloads (RCM delivers them to every site) ------------------------------
def payload_bombs(cap: int) -> dict[str, bytes]:
    n = cap - 16
    return {
        "array length beyond the data": b"\x82\xa1k\xa1p\xa2on\xdd\xff\xff\xff\xff\xa1a",
        "map length beyond the data": b"\xdf\xff\xff\xff\xff\xa1k\xa1m",
        "str length beyond the data": b"\x82\xa1k\xa1m\xa1t\xdb\xff\xff\xff\xff",
        "bin length beyond the data": b"\x82\xa1k\xa1m\xa1t\xc6\xff\xff\xff\xff",
        "nesting deeper than the stack": b"\x81\xa1k" + b"\x91" * n,
        "ext types": msgpack.packb({"k": "m", "r": msgpack.ExtType(5, b"x" * 8), "u": msgpack.Timestamp(7, 0),
                                    "t": "x", "s": 1.0}),
        "ext type as a map key": b"\x81\xd4\x05\x00\xa1m",
        "a timestamp as sent_at": msgpack.packb({"k": "m", "r": "ops", "u": "bob", "t": "x", "c": "",
                                                 "s": msgpack.Timestamp(1, 0)}, datetime=False),
        "a million empty arrays": b"\x82\xa1k\xa1a\xa3ids\xdd" + struct.pack("!I", n) + b"\x90" * n,
    }



def _refused(name: str, data: bytes) -> None:
    try:
        decode_payload(data)
    except PayloadError:
        return
    raise AssertionError(f"{name}: accepted")

def test_msgpack_bombs_in_chat_payloads_are_refused_in_bounded_time_and_memory():
    import tracemalloc
    cap = 256 * 1024                                                # [rcm] max_payload_bytes default
    # Time at the cap; memory on 32 KiB payloads (the amplification is per byte; tracemalloc is slow).
    for size, traced in ((cap, False), (32 * 1024, True)):
        for name, data in payload_bombs(size).items():
            assert len(data) <= size, name
            if traced:
                tracemalloc.start()
            work = calls(_refused, name, data)
            if traced:
                _, peak = tracemalloc.get_traced_memory()
                tracemalloc.stop()
                # Python objects cost up to ~80 bytes per one-byte msgpack value: bounded and transient.
                assert peak < 100 * size, (name, peak)
            assert work < 1_000 + 4 * size, (name, work)      # linear in the payload, whatever it declares


# --- values no site could store: refused, and every site goes on -----------------------------------
async def test_a_nan_sent_at_is_refused_and_every_site_goes_on(cluster_factory):
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
        delivers = [r for r in site_journal(cl.mission, site) if r["kind"] == "deliver"]
        assert [r["text"] for r in delivers] == ["after the poison"], site
        assert cl.servers[site].rejected == 2
    assert not [f for f in bob.drain_events() if f["type"] == "message" and "poison" in f["text"]]


async def test_an_order_key_beyond_63_bits_is_refused_without_a_retry_loop(cluster_factory):
    cl = await cluster_factory(["A", "B"], users={"A": ["alice"], "B": ["bob"]})
    alice, bob = await cl.client("A", "alice"), await cl.client("B", "bob")
    await bob.join("ops")
    cl.net.inject("B", "A", encode_payload(ChatMessage("ops", "alice", "huge key", 1.0, "")), [1 << 63, "A"])
    cl.net.inject("B", "A", encode_payload(ChatMessage("ops", "alice", "deep key", 1.0, "")), [[1], "A"])
    await alice.join("ops")
    await alice.say("ops", "still here")
    await bob.wait_for(is_msg("still here"), 5)
    delivers = [r for r in site_journal(cl.mission, "B") if r["kind"] == "deliver"]
    assert [r["text"] for r in delivers] == ["still here"]
    assert cl.servers["B"].rejected == 2


# --- a delivery the database will not take ---------------------------------------------------------
async def test_a_delivery_the_database_refuses_is_quarantined_and_skipped(cluster_factory, monkeypatch):
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
    ack = await alice.say("ops", "unstorable")
    await alice.say("ops", "next one")
    await bob.wait_for(is_msg("next one"), 5)
    delivers = [r for r in site_journal(cl.mission, "B") if r["kind"] == "deliver"]
    assert [r["text"] for r in delivers] == ["next one"] and delivers[0]["n"] == 1
    assert [(m, o) for m, o, _ in store.quarantined()] == [(ack["msg_id"], "A")]
    assert "the database refuses this one" in store.quarantined()[0][2]
    assert not [f for f in bob.drain_events() if f["type"] == "message" and f["text"] == "unstorable"]


async def test_a_database_failure_after_the_journal_record_is_recovered_from_the_journal(cluster_factory,
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
    delivers = [r for r in site_journal(cl.mission, "B") if r["kind"] == "deliver"]
    assert [(r["n"], r["text"]) for r in delivers] == [(1, "journaled, then the disk filled"), (2, "after the disk")]
    assert [m.text for m in srv.store.history("ops", 10)[0]] == ["journaled, then the disk filled", "after the disk"]
    assert failed and not srv.store.quarantined()


# --- a full disk ------------------------------------------------------------------------------------------------
class FullDisk:
    """The site's database on a full disk while ``full``: ``method`` of its store raises what SQLite raises
    then (OperationalError "database or disk is full", result code SQLITE_FULL)."""

    def __init__(self, monkeypatch, srv, method: str = "commit") -> None:
        self.full = True
        real = getattr(srv.store, method)

        def call(*args, **kw):
            if self.full:
                e = sqlite3.OperationalError("database or disk is full")
                e.sqlite_errorcode = sqlite3.SQLITE_FULL        # as SQLite's own errors carry it
                raise e
            return real(*args, **kw)
        monkeypatch.setattr(srv.store, method, call)


@pytest.mark.parametrize("method", ["commit", "add_message"])
async def test_a_full_disk_holds_deliveries_at_rcm_until_it_has_room_and_quarantines_none(cluster_factory, caplog,
                                                                                          monkeypatch, method):
    """``commit``: the journal record is written, the database fails (recovered from the journal once it has
    room); ``add_message``: the database fails first (before, such a delivery was quarantined: lost)."""
    cl = await cluster_factory(["A", "B"], users={"A": ["alice"], "B": ["bob"]})
    alice, bob = await cl.client("A", "alice"), await cl.client("B", "bob")
    await alice.join("ops")
    await bob.join("ops")
    srv = cl.servers["B"]
    disk = FullDisk(monkeypatch, srv, method)
    await alice.say("ops", "while B's disk is full")
    await alice.say("ops", "still full")

    def stalls() -> int:
        return sum("cannot store" in r.getMessage() and "database or disk is full" in r.getMessage()
                   for r in caplog.records)
    await wait_until(lambda: stalls() >= 2, "B trying to store the delivery, again and again", timeout=30)
    assert not srv.store.quarantined()
    assert not [f for f in bob.drain_events() if f["type"] == "message"]

    disk.full = False
    await bob.wait_for(is_msg("still full"), 15)
    assert [m.text for m in srv.store.history("ops", 10)[0]] == ["while B's disk is full", "still full"]
    delivers = [r for r in site_journal(cl.mission, "B") if r["kind"] == "deliver"]
    assert [(r["n"], r["text"]) for r in delivers] == [(1, "while B's disk is full"), (2, "still full")]
    assert not srv.store.quarantined()


async def test_a_say_on_a_full_disk_is_unavailable_and_names_the_disk(cluster_factory, monkeypatch):
    cl = await cluster_factory(["A", "B"], users={"A": ["alice"], "B": ["bob"]})
    alice, bob = await cl.client("A", "alice"), await cl.client("B", "bob")
    await alice.join("ops")
    await bob.join("ops")
    disk = FullDisk(monkeypatch, cl.servers["A"])
    with pytest.raises(ChatError) as refused:
        await alice.say("ops", "not while the disk is full", client_id="c-1")
    assert refused.value.code == "unavailable", refused.value.frame
    assert "cannot write to its disk (database or disk is full)" in refused.value.frame["message"]
    disk.full = False
    srv = cl.servers["A"]       # (its RCM events may have met the full disk too: their stream resumes first)
    await wait_until(lambda: srv.rcm is not None and srv.rcm_connected.is_set(), "A's RCM connection", timeout=15)
    ack = await alice.say("ops", "not while the disk is full", client_id="c-1")
    await bob.wait_for(is_msg("not while the disk is full"), 10)
    assert ack["msg_id"].startswith("A:")
