"""chat_server.client.ChatClient and logouts, against the real in-process chat server.

A ``logout {all}`` from one session makes the server close every session of the
user with 1000 'logged out'. A client with ``reconnect=True`` must not log in
again with its remembered password (that would undo the logout): it ends as
closed, forgets its token and password, and fails what was still pending."""
from __future__ import annotations

import asyncio

import pytest
from testkit import wait_until

from chat_server.client import ChatClient, ChatClosed

pytestmark = pytest.mark.timeout(30)


async def test_a_reconnecting_client_stays_out_after_a_logout_of_all_sessions_elsewhere(cluster_factory) -> None:
    cl = await cluster_factory(["A"], {"A": ["alice", "bob"]})
    kept = await cl.client("A", "alice", reconnect=True, reconnect_delay=0.05)
    await kept.join("ops")
    other = await cl.client("A", "alice")
    reply = await other.logout(everywhere=True)
    assert reply["type"] == "logged_out" and reply["all"] is True
    # The kept session is closed by the server and does not come back.
    await wait_until(lambda: kept.closed, "the kept session closed by the server", interval=0.02)
    assert kept.closed and kept.logged_out
    assert (kept.close_code, kept.close_reason) == (1000, "logged out")
    await asyncio.sleep(0.3)                          # several reconnect delays: no new login happened
    assert kept.reconnects == 0
    assert kept.session_token is None
    with pytest.raises(ChatClosed):
        await kept.say("ops", "after the logout")
    kept.drain_events()                               # what came before the close can still be read...
    with pytest.raises(ChatClosed):                   # ...and then the events end
        await kept.next_event(timeout=1)
    # The server sees no session of alice any more: bob is the only one online in ops.
    bob = await cl.client("A", "bob")
    await bob.join("ops")
    await cl.settle()
    [ops] = [r for r in await bob.rooms() if r["room"] == "ops"]
    assert ops["online"] == 1, ops


async def test_a_client_that_logs_itself_out_does_not_reconnect(cluster_factory) -> None:
    cl = await cluster_factory(["A"], {"A": ["alice"]})
    c = await cl.client("A", "alice", reconnect=True, reconnect_delay=0.05)
    token = c.session_token
    assert token
    reply = await c.logout()
    assert reply["type"] == "logged_out"
    await wait_until(lambda: c.closed, "the client closed", interval=0.02)
    assert c.closed and c.logged_out and c.reconnects == 0
    # The token it held no longer resumes a session.
    with pytest.raises(Exception) as refused:
        await ChatClient.connect(cl.url("A"), "alice", session=token, timeout=5)
    assert getattr(refused.value, "code", None) == "auth_failed"


async def test_other_closes_still_reconnect(cluster_factory) -> None:
    """Only 'logged out' stops a reconnecting client: a server that goes away and comes back is resumed."""
    cl = await cluster_factory(["A"], {"A": ["alice"]})
    c = await cl.client("A", "alice", reconnect=True, reconnect_delay=0.05)
    await c.join("ops")
    assert c._ws is not None
    await c._ws.close(code=1001, message=b"going away")   # the link drops for a reason other than a logout
    await wait_until(lambda: c.reconnects, "the client reconnected", interval=0.02)
    assert c.reconnects == 1 and not c.closed and not c.logged_out
    ack = await c.say("ops", "still here")
    assert ack["type"] == "ack"


async def test_rooms_follows_every_page(cluster_factory) -> None:
    cl = await cluster_factory(["A"], {"A": ["alice"]}, chat={"rooms_page": 2})
    c = await cl.client("A", "alice")
    for r in ("r1", "r2", "r3", "r4", "r5"):
        await c.join(r)
    first = await c.request({"type": "rooms"})
    assert len(first["rooms"]) == 2 and first["more"] is True       # the server pages
    assert [r["room"] for r in await c.rooms()] == ["r1", "r2", "r3", "r4", "r5"]


async def test_logout_revokes_the_session_token(cluster_factory) -> None:
    from chat_server.client import ChatError
    cl = await cluster_factory(["A"], users={"A": ["alice"]})
    alice = await cl.client("A", "alice")
    other_tab = await cl.client("A", "alice", password=None, session=alice.session_token)   # the same login
    elsewhere = await cl.client("A", "alice")          # a login of its own
    token = alice.session_token
    reply = await alice.request({"type": "logout"})
    assert reply["type"] == "logged_out" and reply["all"] is False
    await wait_until(lambda: alice.close_code is not None and other_tab.close_code is not None,
                     "both sessions of the login closed", timeout=5)
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


async def test_a_new_password_revokes_the_old_sessions(cluster_factory) -> None:
    from chat_server.accounts import hash_password
    from chat_server.client import ChatError
    cl = await cluster_factory(["A"], users={"A": ["alice"]})
    alice = await cl.client("A", "alice")
    cl.servers["A"].store.add_user("alice", hash_password("new password", 1024), replace=True)
    with pytest.raises(ChatError) as e:
        await cl.client("A", "alice", password=None, session=alice.session_token)
    assert e.value.code == "auth_failed"
    await cl.client("A", "alice", password="new password")
