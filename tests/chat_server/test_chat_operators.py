"""What operators expect (issue 21) and precedence's acknowledgements (issue 19), on the RCM double:
room directory, search, mentions, read markers, replies, acknowledgements."""
from __future__ import annotations

import pytest
from chat_missions import grant

from chat_server.client import ChatError
from chat_server.journal import journal_files, read_journal

pytestmark = pytest.mark.timeout(60)


def is_msg(text: str):
    return lambda f: f["type"] == "message" and f["text"] == text


async def test_the_directory_lists_public_rooms_of_every_site_and_only_ones_own_private_rooms(cluster_factory):
    cl = await cluster_factory(["A", "B"], users={"A": ["alice", "ann"], "B": ["bob"]})
    alice, ann, bob = await cl.client("A", "alice"), await cl.client("A", "ann"), await cl.client("B", "bob")
    await bob.join("ops")
    await bob.say("ops", "grid ready")
    await alice.create("cell", ["bob"])
    await cl.settle()
    rows = {r["room"]: r for r in (await ann.request({"type": "directory"}))["rooms"]}
    assert set(rows) == {"ops"}                                   # ann is not in cell: not listed
    assert rows["ops"]["members"] == 1 and rows["ops"]["last_at"] > 0 and not rows["ops"]["joined"]
    rows = {r["room"]: r for r in (await alice.request({"type": "directory"}))["rooms"]}
    assert rows["cell"]["private"] and rows["cell"]["joined"] and set(rows) == {"ops", "cell"}
    page = await alice.request({"type": "directory", "limit": 1})
    assert [r["room"] for r in page["rooms"]] == ["cell"] and page["more"]


async def test_search_finds_phrases_and_prefixes_and_never_a_private_rooms_line(cluster_factory):
    cl = await cluster_factory(["A", "B"], users={"A": ["alice", "eve"], "B": ["bob"]})
    alice, eve, bob = await cl.client("A", "alice"), await cl.client("A", "eve"), await cl.client("B", "bob")
    for c in (alice, eve, bob):
        await c.join("ops")
    await bob.say("ops", "the grid from 0300 is ready")
    await alice.say("ops", "grid checks later")
    await alice.create("cell", ["bob"])
    await cl.settle()
    await bob.join("cell")
    await bob.say("cell", "CANARY grid from the cell")
    await alice.wait_for(is_msg("CANARY grid from the cell"), 5)
    found = await alice.request({"type": "search", "query": '"grid from"'})
    assert sorted(m["text"] for m in found["messages"]) == ["CANARY grid from the cell", "the grid from 0300 is ready"]
    hit = next(m for m in found["messages"] if m["text"].startswith("the grid"))
    assert [hit["text"][a:b] for a, b in hit["highlights"]] == ["grid from"]
    for query in ('"grid from"', "CANARY", "canar*", "cell", "grid"):
        got = await eve.request({"type": "search", "query": query})
        assert not [m for m in got["messages"] if m["room"] == "cell"], (query, got)
    assert [m["text"] for m in (await eve.request({"type": "search", "query": "gri*",
                                                   "user": "alice"}))["messages"]] == ["grid checks later"]
    with pytest.raises(ChatError) as e:
        await eve.request({"type": "search", "query": "grid", "room": "cell"})
    assert e.value.code == "forbidden"
    import time
    now = time.time()
    assert len((await alice.request({"type": "search", "query": "grid", "from": now - 60}))["messages"]) == 3
    assert (await alice.request({"type": "search", "query": "grid", "from": now + 60}))["messages"] == []
    assert [m["room"] for m in (await alice.request({"type": "search", "query": "grid",
                                                     "room": "cell"}))["messages"]] == ["cell"]
    for odd in ('"', "*", "AND OR NOT", "NEAR(a b)", "col:grid", "^grid"):       # no FTS5 syntax gets through
        await eve.request({"type": "search", "query": odd})


async def test_a_mention_to_an_offline_user_is_counted_and_shown_at_login(cluster_factory):
    cl = await cluster_factory(["A", "B"], users={"A": ["alice"], "B": ["bob"]})
    alice, bob = await cl.client("A", "alice"), await cl.client("B", "bob")
    await alice.join("ops")
    await bob.join("ops")
    await bob.close()
    ack = await alice.say("ops", "@bob please confirm the grid")
    await alice.say("ops", "@bob@A is not you, and neither is @bobby")
    await alice.say("ops", "and a line for everyone")
    msg = await alice.wait_for(lambda f: f.get("msg_id") == ack["msg_id"], 5)
    assert msg["mentions"] == ["bob"]
    await cl.settle()
    bob = await cl.client("B", "bob")
    assert bob.welcome["unread"] == {"ops": 3} and bob.welcome["mentions"] == {"ops": 1}


async def test_a_read_marker_reaches_every_session_of_the_user_and_survives_a_login(cluster_factory):
    cl = await cluster_factory(["A", "B"], users={"A": ["alice", "bob"]})
    alice, bob = await cl.client("A", "alice"), await cl.client("A", "bob")
    tui, browser = await cl.client("A", "alice"), await cl.client("A", "alice")
    for c in (alice, bob):
        await c.join("ops")
    msgs = [await bob.say("ops", f"line {i}") for i in range(3)]
    last = await tui.wait_for(lambda f: f.get("msg_id") == msgs[-1]["msg_id"], 5)
    first = await tui.wait_for(lambda f: f.get("msg_id") == msgs[0]["msg_id"], 5)
    reply = await tui.request({"type": "mark_read", "room": "ops", "order": first["order"]})
    assert reply["type"] == "read" and reply["order"] == first["order"]
    pushed = await browser.wait_for(lambda f: f["type"] == "read", 5)
    assert pushed == {"type": "read", "room": "ops", "order": first["order"]}
    await tui.request({"type": "mark_read", "room": "ops", "order": [0, "A"]})      # never back
    again = await cl.client("A", "alice")
    assert again.welcome["unread"] == {"ops": 2}
    await again.request({"type": "mark_read", "room": "ops", "order": last["order"]})
    assert (await cl.client("A", "alice")).welcome["unread"] == {}
    # A late message placed before the marker, delivered after it was set: not seen yet, so unread.
    from chat_server.payload import ChatMessage, encode_payload
    cl.net.inject("A", "B", encode_payload(ChatMessage("ops", "bob", "late from B", 1.0, "")), [1, "B"], late=True)
    await again.wait_for(is_msg("late from B"), 5)
    assert (await cl.client("A", "alice")).welcome["unread"] == {"ops": 1}
    with pytest.raises(ChatError):
        await again.request({"type": "mark_read", "room": "elsewhere", "order": [1, "A"]})


async def test_a_reply_names_the_line_it_answers_and_history_opens_around_it(cluster_factory):
    cl = await cluster_factory(["A", "B"], users={"A": ["alice"], "B": ["bob"]})
    alice, bob = await cl.client("A", "alice"), await cl.client("B", "bob")
    await alice.join("ops")
    await bob.join("ops")
    sent = [await alice.say("ops", f"line {i}") for i in range(9)]
    target = sent[4]["msg_id"]
    r = await bob.request({"type": "say", "room": "ops", "text": "answering line 4", "client_id": "r1",
                           "reply_to": target})
    got = await alice.wait_for(lambda f: f.get("msg_id") == r["msg_id"], 5)
    assert got["reply_to"] == target
    around = await alice.request({"type": "history", "room": "ops", "around": target, "limit": 5})
    assert [m["text"] for m in around["messages"]] == ["line 2", "line 3", "line 4", "line 5", "line 6"]
    assert around["more_before"] and around["more_after"]
    with pytest.raises(ChatError):
        await alice.request({"type": "say", "room": "ops", "text": "x", "client_id": "r2", "reply_to": "not an id"})


async def test_a_flash_message_is_acknowledged_and_every_site_sees_who_and_when(cluster_factory):
    cl = await cluster_factory(["A", "B"], users={"A": ["alice"], "B": ["bob", "bill"]})
    grant(cl.mission, "A", "alice", "flash")            # [chat] flash_role (urgent.py)
    alice, bob, bill = await cl.client("A", "alice"), await cl.client("B", "bob"), await cl.client("B", "bill")
    for c in (alice, bob, bill):
        await c.join("ops")
    flash = await alice.request({"type": "say", "room": "ops", "text": "MEDEVAC grid 123", "client_id": "f1",
                                 "precedence": "flash"})
    seen = await bob.wait_for(lambda f: f.get("msg_id") == flash["msg_id"], 5)
    assert seen["precedence"] == "flash"
    # The chat server handed it to RCM as FLASH (paced links write it first, sites deliver it on arrival).
    assert [d.precedence for d in cl.net.sites["B"].log if d.msg_id == flash["msg_id"]] == ["flash"]
    await bob.request({"type": "acknowledge", "msg_id": flash["msg_id"]})
    for c in (alice, bob, bill):
        ack = await c.wait_for(lambda f: f["type"] == "acknowledged", 5)
        assert (ack["msg_id"], ack["user"], ack["site"]) == (flash["msg_id"], "bob", "B")
    page = await alice.history("ops")
    assert [(a["user"], a["site"]) for a in page["messages"][-1]["acknowledgements"]] == [("bob", "B")]
    records = [r for f in journal_files(cl.mission.site_dir("B") / "journal") for r in read_journal(f)]
    assert [(r["msg_id"], r["user"]) for r in records if r["kind"] == "acknowledge"] == [(flash["msg_id"], "bob")]
    assert [r["precedence"] for r in records if r["kind"] == "deliver" and r["msg_id"] == flash["msg_id"]] == ["flash"]
    routine = await alice.say("ops", "routine chatter")
    with pytest.raises(ChatError) as e:
        await bob.request({"type": "acknowledge", "msg_id": routine["msg_id"]})
    assert e.value.code == "bad_field"


async def test_what_the_clients_asked_for_markers_in_welcome_not_found_and_replies_in_their_room(cluster_factory):
    cl = await cluster_factory(["A"], users={"A": ["alice", "bob"]})
    alice, bob = await cl.client("A", "alice"), await cl.client("A", "bob")
    await alice.join("ops")
    await alice.join("intel")
    await bob.join("ops")
    first = await alice.say("ops", "one")
    got = await alice.wait_for(lambda f: f.get("msg_id") == first["msg_id"], 5)
    await alice.request({"type": "mark_read", "room": "ops", "order": got["order"]})
    again = await cl.client("A", "alice")
    assert again.welcome["read"]["ops"] == got["order"]
    with pytest.raises(ChatError) as e:
        await alice.request({"type": "history", "room": "ops", "around": "B:99"})
    assert e.value.code == "not_found"
    with pytest.raises(ChatError) as e:
        await alice.request({"type": "say", "room": "intel", "text": "x", "client_id": "c1",
                             "reply_to": first["msg_id"]})
    assert e.value.code == "bad_field" and "another room" in e.value.frame["message"]


async def test_a_site_reached_through_a_relay_is_shown_connected_via_the_next_hop(cluster_factory):
    """Issue 17 item 4, chat side: RCM's StatusChange.via reaches clients and the journal."""
    cl = await cluster_factory(["A", "B", "C"], users={"A": ["alice"], "C": ["carol"]})
    alice, carol = await cl.client("A", "alice"), await cl.client("C", "carol")
    await alice.join("ops")
    await carol.join("ops")
    cl.net.set_link("A", "C", "connected", via="B")          # A-C's own link is down; B relays
    ev = await alice.wait_for(lambda f: f["type"] == "site_status" and f["site"] == "C", 5)
    assert ev == {"type": "site_status", "site": "C", "status": "connected", "via": "B"}
    assert (await cl.client("A", "alice")).welcome["via"] == {"C": "B"}
    await carol.say("ops", "through B")
    await alice.wait_for(is_msg("through B"), 5)
    records = [r for f in journal_files(cl.mission.site_dir("A") / "journal") for r in read_journal(f)]
    assert [r["via"] for r in records if r["kind"] == "deliver" and r["text"] == "through B"] == [["B"]]
    cl.net.set_link("A", "C", "connected")                    # the direct link is back
    ev = await alice.wait_for(lambda f: f["type"] == "site_status" and f["site"] == "C", 5)
    assert "via" not in ev and ev["status"] == "connected"
