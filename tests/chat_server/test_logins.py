"""Logins (on the RCM double): the failure limiter (sans-IO on a virtual clock, then through the server:
per user at one address, per address, behind a declared proxy, counted before the hash, its table
bounded), and replies that never tell an unknown user from a wrong password. IRC's login replies:
test_irc_registration.py."""
from __future__ import annotations

import asyncio

import aiohttp
import pytest
from testkit import wait_until

from chat_server.accounts import LoginLimiter
from chat_server.client import ChatClient, ChatError

pytestmark = pytest.mark.timeout(60)


async def hello_from(url: str, user: str, local: str, headers: dict | None = None, **fields) -> dict:
    """The reply to a ``hello`` sent from the local address ``local`` (127.0.0.0/8 is all loopback)."""
    conn = aiohttp.TCPConnector(local_addr=(local, 0))
    async with aiohttp.ClientSession(connector=conn) as http, http.ws_connect(url, headers=headers or {}) as ws:
        await ws.send_json({"type": "hello", "user": user, **fields})
        return await ws.receive_json(timeout=10)


# --- the limiter alone ------------------------------------------------------------------------------
def test_login_limiter_on_a_virtual_clock():
    lim = LoginLimiter(max_failures=3, window=10.0, lockout=30.0)
    for t in (0.0, 5.0):
        lim.failed("user:a", t)
    assert lim.retry_after("user:a", 6.0) == 0.0
    lim.failed("user:a", 11.0)                          # the first failure left the window
    assert lim.retry_after("user:a", 11.0) == 0.0
    lim.failed("user:a", 12.0)                          # the third in the window: wait 1 s
    assert lim.retry_after("user:a", 12.0) == 1.0
    assert lim.retry_after("user:b", 12.0) == 0.0
    assert lim.retry_after("user:a", 12.9) == pytest.approx(0.1)
    assert lim.retry_after("user:a", 13.0) == 0.0
    for t, wait in ((13.0, 2.0), (13.1, 4.0), (13.2, 8.0), (13.3, 16.0), (13.4, 30.0), (13.5, 30.0)):
        lim.failed("user:a", t)                         # each further failure doubles the wait, up to lockout
        assert lim.retry_after("user:a", t) == pytest.approx(wait)
    lim.succeeded("user:a")
    assert lim.retry_after("user:a", 21.0) == 0.0
    lim.failed("user:a", 44.0)
    lim.failed("user:a", 44.0)
    assert lim.retry_after("user:a", 44.0) == 0.0
    lim.failed("user:a", 44.0)                          # counted before the check ...
    lim.forgive("user:a")                               # ... and taken back when the password was right
    lim.failed("user:a", 44.0)
    assert lim.retry_after("user:a", 44.0) == 1.0


def test_the_login_limiter_keeps_at_most_max_keys_waits():
    """Failures were capped at ``max_keys`` keys, the waits they cause were not: a guess spread over many
    user names (any name, known or not, is a key) grew the table for as long as the waits lasted."""
    lim = LoginLimiter(max_failures=1, window=60.0, lockout=3600.0, max_keys=100)
    for i in range(1000):                                  # a burst within one second: no wait has ended
        for _ in range(3):
            lim.failed(f"user{i}", i / 1000)
    assert len(lim._failures) <= 100 + 1 and len(lim._blocked_until) <= 100 + 1, len(lim._blocked_until)
    assert lim.retry_after("user999", 1.0) > 0             # the newest waits are kept


# --- through the server -------------------------------------------------------------------------------
async def test_login_failures_are_rate_limited(cluster_factory):
    now = [1000.0]
    cl = await cluster_factory(["A"], users={"A": ["alice"]},
                               chat={"login_max_failures": 3, "login_window": 60, "login_lockout": 30},
                               monotonic=lambda: now[0])
    c = await ChatClient.connect(cl.url("A"), "alice", "correct horse")
    await c.close()
    for _ in range(3):
        with pytest.raises(ChatError) as e:
            await ChatClient.connect(cl.url("A"), "alice", "wrong")
        assert e.value.code == "auth_failed"
    with pytest.raises(ChatError) as e:        # even the right password is refused while locked
        await ChatClient.connect(cl.url("A"), "alice", "correct horse")
    assert e.value.code == "rate_limited"
    with pytest.raises(ChatError) as e:        # unknown users look the same as wrong passwords
        await ChatClient.connect(cl.url("A"), "mallory", "x")
    assert e.value.code == "auth_failed"
    now[0] += 31
    c = await ChatClient.connect(cl.url("A"), "alice", "correct horse")
    await c.close()


async def test_failed_logins_from_one_address_are_limited_too(cluster_factory):
    now = [0.0]
    cl = await cluster_factory(["A"], users={"A": ["alice"]},
                               chat={"login_max_failures": 2, "login_window": 60, "login_lockout": 30},
                               monotonic=lambda: now[0])
    # 4 x 2 failures from this address, spread over users that each stay under their own limit.
    for i in range(8):
        with pytest.raises(ChatError) as e:
            await ChatClient.connect(cl.url("A"), f"guess{i}", "x")
        assert e.value.code == "auth_failed"
    with pytest.raises(ChatError) as e:
        await ChatClient.connect(cl.url("A"), "alice", "correct horse")
    assert e.value.code == "rate_limited"
    now[0] = 31.0
    c = await ChatClient.connect(cl.url("A"), "alice", "correct horse")
    await c.close()


async def test_failed_passwords_from_one_address_never_lock_the_user_out_elsewhere_or_from_resuming(
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


async def test_a_trusted_proxy_forwards_the_client_address(cluster_factory):
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


async def test_password_checks_run_beside_the_journal_and_a_burst_is_counted_before_hashing(
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
    await wait_until(lambda: len(calls) >= 2, "two password checks in their pool", timeout=10)
    ack = await asyncio.wait_for(bob.say("ops", "acked while logins are checked"), 10)   # fsync not queued behind
    assert ack["msg_id"]
    release.set()
    codes = [(await t).get("code") for t in burst]
    # Counted before hashing: once alice@127.0.0.6 had 5 failures in flight, the rest waited without a hash.
    assert len(calls) <= 5 and codes.count("rate_limited") >= 35, (len(calls), codes)


# --- what the replies tell ----------------------------------------------------------------------------
async def test_login_replies_do_not_enumerate_users(cluster_factory):
    cl = await cluster_factory(["A"], users={"A": ["alice"]}, chat={"login_max_failures": 3})

    async def hello(user: str, **f) -> dict:
        async with aiohttp.ClientSession() as http, http.ws_connect(cl.url("A")) as ws:
            await ws.send_json({"type": "hello", "user": user, "id": "h", **f})
            return await ws.receive_json(timeout=10)

    for fields in ({"password": "wrong"}, {"session": "x" * 43}, {"session": "x" * 43, "last_n": 5}):
        a, b = await hello("alice", **fields), await hello("nobody", **fields)
        assert a == b, (fields, a, b)
    for _ in range(4):                                 # rate-limited alike too
        a, b = await hello("alice", password="w"), await hello("nobody", password="w")
    assert a["code"] == b["code"] == "rate_limited" and a["message"] == b["message"]
