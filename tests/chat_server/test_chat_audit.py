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
    ack = await alice.say("ops", "unstorable")
    await alice.say("ops", "next one")
    await bob.wait_for(is_msg("next one"), 5)
    delivers = [r for r in journal(cl, "B") if r["kind"] == "deliver"]
    assert [r["text"] for r in delivers] == ["next one"] and delivers[0]["n"] == 1
    assert [(m, o) for m, o, _ in store.quarantined()] == [(ack["msg_id"], "A")]
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
    cl.net.set_link("A", "C", "disconnected")
    cl.net.set_link("B", "C", "disconnected")
    await eve.join("secret")                       # eve sits in a public room of that name at C, cut off
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


# --- row 6: a resume or a history page bigger than the outbound queue ------------------------------
BIG = {"max_text_bytes": 8000, "max_frame_bytes": 16384, "outbound_queue_bytes": 65536}


async def test_audit6_a_resume_whose_backlog_exceeds_the_outbound_queue_is_paced_not_closed(cluster_factory):
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


async def test_audit6_a_history_page_of_long_messages_fits_the_outbound_queue(cluster_factory):
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


# --- rows 9 and 10: logins ---------------------------------------------------------------------------
async def hello_from(url: str, user: str, local: str, headers: dict | None = None, **fields) -> dict:
    conn = aiohttp.TCPConnector(local_addr=(local, 0))
    async with aiohttp.ClientSession(connector=conn) as http, http.ws_connect(url, headers=headers or {}) as ws:
        await ws.send_json({"type": "hello", "user": user, **fields})
        return await ws.receive_json(timeout=10)


async def test_audit9_failed_passwords_from_one_address_never_lock_the_user_out_elsewhere_or_from_resuming(
        cluster_factory):
    cl = await cluster_factory(["A"], users={"A": ["alice"]}, chat={"login_max_failures": 5})
    alice = await cl.client("A", "alice")
    token = alice.session_token
    for _ in range(8):                                # someone at 127.0.0.3 guesses alice's password
        reply = await hello_from(cl.url("A"), "alice", "127.0.0.3", password="guess")
        assert reply["code"] in ("auth_failed", "rate_limited")
    assert reply["code"] == "rate_limited"             # that address is slowed down ...
    ok = await hello_from(cl.url("A"), "alice", "127.0.0.2", password="correct horse")
    assert ok["type"] == "welcome"                    # ... alice at her own address is not
    ok = await hello_from(cl.url("A"), "alice", "127.0.0.3", session=token)
    assert ok["type"] == "welcome"                    # and a session token resumes even from that address


async def test_audit9_a_trusted_proxy_forwards_the_client_address(cluster_factory):
    cl = await cluster_factory(["A"], users={"A": ["alice"]},
                               chat={"login_max_failures": 2, "trusted_proxies": "127.0.0.4"})
    for i in range(9):                                # 4 x 2 failures make an address wait
        reply = await hello_from(cl.url("A"), f"guess{i}", "127.0.0.4", {"X-Forwarded-For": "10.9.0.1"},
                                 password="x")
    assert reply["code"] == "rate_limited"
    ok = await hello_from(cl.url("A"), "alice", "127.0.0.4", {"X-Forwarded-For": "10.9.0.2"},
                          password="correct horse")
    assert ok["type"] == "welcome"                    # another client behind the same proxy
    # A client that is not the proxy cannot pick its address by the header.
    for i in range(9):
        reply = await hello_from(cl.url("A"), f"guess{i}", "127.0.0.5", {"X-Forwarded-For": f"10.9.1.{i}"},
                                 password="x")
    assert reply["code"] == "rate_limited"


async def test_audit10_password_checks_run_beside_the_journal_and_a_burst_is_counted_before_hashing(
        cluster_factory, monkeypatch):
    import threading

    import chat_server.accounts as accounts_module
    cl = await cluster_factory(["A"], users={"A": ["alice", "bob"]},
                               chat={"login_max_failures": 5, "rate_limit_burst": 1000, "rate_limit_frames": 1000})
    bob = await cl.client("A", "bob")
    await bob.join("ops")
    release, calls = threading.Event(), []
    real = accounts_module.verify_password

    def slow_verify(password, stored):
        calls.append(password)
        release.wait(20)
        return real(password, stored)
    monkeypatch.setattr(accounts_module, "verify_password", slow_verify)
    burst = [asyncio.ensure_future(hello_from(cl.url("A"), "alice", "127.0.0.6", password="guess"))
             for _ in range(40)]
    for _ in range(200):
        if len(calls) >= 2:
            break
        await asyncio.sleep(0.02)
    ack = await asyncio.wait_for(bob.say("ops", "acked while logins are checked"), 10)   # fsync not queued behind
    assert ack["msg_id"]
    release.set()
    codes = [(await t).get("code") for t in burst]
    # Counted before hashing: once alice@127.0.0.6 had 5 failures in flight, the rest waited without a hash.
    assert len(calls) <= 5 and codes.count("rate_limited") >= 35, (len(calls), codes)


# --- row 12: room names ------------------------------------------------------------------------------
async def test_audit12_a_join_say_leave_loop_cannot_grow_the_rooms_without_bound(cluster_factory):
    cl = await cluster_factory(["A"], users={"A": ["alice", "bob"]},
                               chat={"rooms_created_burst": 3, "rooms_page": 2})
    alice = await cl.client("A", "alice")
    for i in range(3):
        await alice.join(f"r{i}")
        await alice.say(f"r{i}", "x")
        await alice.leave(f"r{i}")
    with pytest.raises(ChatError) as e:
        await alice.join("r3")
    assert e.value.code == "limit" and "rooms_created_per_hour" in e.value.frame["message"]
    await alice.join("r0")                            # an existing room is always open
    bob = await cl.client("A", "bob")
    first = await bob.request({"type": "rooms"})
    assert [r["room"] for r in first["rooms"]] == ["r0", "r1"] and first["more"]
    rest = await bob.request({"type": "rooms", "after": "r1"})
    assert [r["room"] for r in rest["rooms"]] == ["r2"] and not rest["more"]


# --- row 14: logout and password changes -------------------------------------------------------------
async def test_audit14_logout_revokes_the_session_token(cluster_factory):
    cl = await cluster_factory(["A"], users={"A": ["alice"]})
    alice = await cl.client("A", "alice")
    other_tab = await cl.client("A", "alice", password=None, session=alice.session_token)   # the same login
    elsewhere = await cl.client("A", "alice")          # a login of its own
    token = alice.session_token
    reply = await alice.request({"type": "logout"})
    assert reply["type"] == "logged_out" and reply["all"] is False
    for _ in range(100):
        if alice.close_code is not None and other_tab.close_code is not None:
            break
        await asyncio.sleep(0.02)
    assert (alice.close_code, alice.close_reason) == (1000, "logged out")
    assert other_tab.close_code == 1000                # the same login in another tab ends too
    assert elsewhere.close_code is None
    with pytest.raises(ChatError) as e:
        await cl.client("A", "alice", password=None, session=token)
    assert e.value.code == "auth_failed"
    await cl.client("A", "alice", password=None, session=elsewhere.session_token)
    reply = await elsewhere.request({"type": "logout", "all": True})
    assert reply["all"] is True
    with pytest.raises(ChatError):
        await cl.client("A", "alice", password=None, session=elsewhere.session_token)


async def test_audit14_a_new_password_revokes_the_old_sessions(cluster_factory):
    from chat_server.accounts import hash_password
    cl = await cluster_factory(["A"], users={"A": ["alice"]})
    alice = await cl.client("A", "alice")
    cl.servers["A"].store.add_user("alice", hash_password("new password", 1024), replace=True)
    with pytest.raises(ChatError) as e:
        await cl.client("A", "alice", password=None, session=alice.session_token)
    assert e.value.code == "auth_failed"
    await cl.client("A", "alice", password="new password")


# --- row 15: file modes ------------------------------------------------------------------------------
async def test_audit15_the_chat_server_writes_owner_only_files(cluster_factory):
    import os
    import stat
    cl = await cluster_factory(["A"], users={"A": ["alice"]})
    alice = await cl.client("A", "alice")
    await alice.join("ops")
    await alice.say("ops", "private data")
    site = cl.mission.site_dir("A")
    paths = [site, *[p for sub in ("chat", "journal") for p in [site / sub, *(site / sub).rglob("*")]]]
    modes = {str(p.relative_to(site.parent)): stat.S_IMODE(os.stat(p).st_mode) for p in paths}
    bad = {p: oct(m) for p, m in modes.items() if m & 0o077}
    assert not bad, bad
    assert any(p.endswith(".jsonl") for p in modes) and any(p.endswith("chat.db") for p in modes)


# --- row 17: Host header and /health -----------------------------------------------------------------
async def test_audit17_a_rebound_host_name_is_refused_and_health_details_stay_on_the_host(cluster_factory,
                                                                                          monkeypatch):
    cl = await cluster_factory(["A"], users={"A": ["alice"]}, chat={"allowed_hosts": "chat.a.example"})
    port = cl.servers["A"].port
    async with aiohttp.ClientSession() as http:
        # DNS rebinding: evil.example now points at us; the browser sends its own name as Host and Origin.
        async with http.get(f"http://127.0.0.1:{port}/", headers={"Host": f"evil.example:{port}"}) as r:
            assert r.status == 421
        with pytest.raises(aiohttp.WSServerHandshakeError):
            await http.ws_connect(f"http://127.0.0.1:{port}/ws", headers={
                "Host": f"evil.example:{port}", "Origin": f"http://evil.example:{port}"})
        async with http.get(f"http://127.0.0.1:{port}/", headers={"Host": f"chat.a.example:{port}"}) as r:
            assert r.status == 200                     # a configured name
        async with http.get(f"http://127.0.0.1:{port}/health") as r:
            full = await r.json()
        assert {"sites", "n", "clients", "refusals"} <= set(full)
        import chat_server.web as web_module
        monkeypatch.setattr(web_module, "is_loopback", lambda address: False)
        async with http.get(f"http://127.0.0.1:{port}/health") as r:
            assert await r.json() == {"site": "A", "status": "ok"}


# --- row 5 (chat side): a long disconnection's missing notice ---------------------------------------
async def test_audit5_a_missing_notice_for_a_long_outage_is_a_count_and_ranges_not_a_list(cluster_factory):
    from rcm.client import Missing
    cl = await cluster_factory(["A", "B"], users={"B": ["bob"]})
    bob = await cl.client("B", "bob")
    await bob.join("ops")
    seqs = [s for s in range(1, 400_001) if s % 1000]          # 399,600 lost, in 400 ranges
    cl.net._emit("B", Missing.from_seqs("A", seqs))
    miss = await bob.wait_for(lambda f: f["type"] == "missing", 10)
    assert miss["count"] == len(seqs) and len(miss["ranges"]) == 400 and not miss["more"]
    assert miss["ranges"][0] == [1, 999] and "seqs" not in miss
    await bob.say("ops", "still connected")
    recs = [r for r in journal(cl, "B") if r["kind"] == "missing"]
    # Ranges in the journal since the second round (a whole report lists at most 10,000 seqs as well).
    from chat_server.journal import missing_ranges
    from rcm import ranges as rcm_ranges
    assert rcm_ranges.normalize([p for r in recs for p in missing_ranges(r)]) == rcm_ranges.of_seqs(seqs)
    assert sum(len(r.get("seqs", ())) for r in recs) <= 10_000
    assert [q for r in recs for q in r["ranges"]] == miss["ranges"] and sum(r["count"] for r in recs) == len(seqs)
