"""The IRC front end's registration: PASS, NICK and USER (and pipelined commands) log in once with the password,
wrong or missing passwords and unknown accounts are refused alike and enumerate no one, a throttled login is told
so, registration commands answer their numerics, and the IRC port speaks TLS when the mission does."""
from __future__ import annotations

import asyncio
import base64

import pytest
from chat_missions import PASSWORD
from irc_testing import _lines

from chat_server.irc import IrcSession
from chat_server.irc_state import Request

pytestmark = pytest.mark.timeout(60)


def test_registration_sends_hello_once_with_the_password_and_the_nick() -> None:
    s = IrcSession(server_name="A.irc.t", site="A", network="t")
    acts = s.receive(b"PASS secret", 0) + s.receive(b"NICK alice", 0) + s.receive(b"USER alice 0 * :A", 0)
    [req] = [a for a in acts if isinstance(a, Request)]
    assert req.frame["type"] == "hello" and req.frame["user"] == "alice" and req.frame["password"] == "secret"


def test_a_throttled_login_is_told_so_not_that_the_password_is_wrong() -> None:
    s = IrcSession(server_name="A.irc.t", site="A", network="t")
    acts = s.receive(b"PASS secret", 0) + s.receive(b"NICK alice", 0) + s.receive(b"USER alice 0 * :A", 0)
    [req] = [a for a in acts if isinstance(a, Request)]
    out = _lines(s.on_frame({"type": "error", "code": "rate_limited", "id": req.frame["id"],
                             "message": "the server is checking many logins at once; try again in a second"}, 0))
    assert out == ["ERROR :Closing Link: Throttled: the server is checking many logins at once; try again in a second"]
    assert not [line for line in out if " 464 " in line]


async def test_registration_needs_a_password_and_the_right_one(sites) -> None:
    s = await sites()
    c = await s.irc("alice", password=None)
    assert "Password required" in await c.numeric("464")
    assert await c.closed()
    c = await s.irc("alice", password="wrong")
    await c.numeric("464")
    assert "ERROR" in await c.expect(lambda l: l.startswith("ERROR"))
    assert await c.closed()
    c = await s.irc()
    c.send("JOIN #ops")
    await c.numeric("451")                            # not registered
    c.send("NICK bad!nick")
    await c.numeric("432")


async def test_a_client_that_pipelines_join_after_user_is_served_once_registered(sites) -> None:
    """Lines sent before the password check ends run after it, on the same flood clock (not the wall clock)."""
    s = await sites()
    irc = await s.irc()
    irc.send(f"PASS :{PASSWORD}\r\nNICK alice\r\nUSER alice 0 * :a\r\nJOIN #ops")
    await irc.numeric("001")
    assert await irc.expect(lambda l: l == ":alice!alice@A JOIN #ops")
    for i in range(30):
        irc.send(f"PING :p{i}")
    await irc.expect(lambda l: l.endswith(" p29"))
    assert not [line for line in irc.lines if line.startswith("ERROR")]


async def test_an_unknown_account_is_refused_like_a_wrong_password(sites) -> None:
    s = await sites()
    c = await s.irc("mallory", password=PASSWORD)
    assert "Password incorrect" in await c.numeric("464")
    assert await c.closed()


async def test_registration_commands_answer_their_numerics(sites) -> None:
    s = await sites()
    c = await s.irc()
    c.send("PING")
    await c.numeric("409")                            # no origin
    c.send("NICK")
    await c.numeric("431")                            # no nickname given
    c.send("USER alice")
    await c.numeric("461")                            # USER needs four parameters
    c.send(f"PASS :{PASSWORD}")
    c.send("NICK alice")
    c.send("USER alice 0 * :Alice")
    await c.numeric("001")
    c.send(f"PASS :{PASSWORD}")
    await c.numeric("462")                            # may not reregister
    c.send("USER alice 0 * :Alice")
    await c.numeric("462")


async def test_irc_login_replies_do_not_enumerate_users(sites) -> None:
    s = await sites()
    replies = {}
    for nick in ("alice", "nobody"):
        irc = await s.irc(nick, password="wrong")
        lines = []
        while raw := await asyncio.wait_for(irc.reader.readline(), 10):
            lines.append(raw.decode().rstrip("\r\n"))
        replies[nick] = [" ".join(line.split(" ")[1:]).replace(nick, "NICK") for line in lines]
    assert replies["alice"] == replies["nobody"] and replies["alice"], replies
    for account in ("alice", "nobody"):             # by SASL too: the same 904 for both
        irc = await s.irc()
        for line in ("CAP REQ :sasl", "NICK guest", "USER guest 0 * :g", "AUTHENTICATE PLAIN"):
            irc.send(line)
        await irc.expect(lambda l: l == "AUTHENTICATE +")
        irc.send(b"AUTHENTICATE " + base64.b64encode(f"\0{account}\0wrong".encode()))
        replies[account] = await irc.numeric("904")
        irc.close()
    assert replies["alice"] == replies["nobody"] == ":A.irc.t 904 guest :SASL authentication failed", replies


async def test_the_irc_port_speaks_tls_with_the_site_certificate_when_the_mission_uses_tls(sites) -> None:
    """Build item 1: over TLS when the mission uses TLS; a plaintext client gets no IRC, others carry on."""
    import ssl as ssl_module

    from chat_server.client import client_ssl_context
    s = await sites(rcm={"tls": True})
    ca = s.mission.site_dir("A") / "tls" / "ca.pem"
    irc = await s.irc("alice", ssl=client_ssl_context(ca))
    assert "alice!alice@A" in await irc.numeric("001")
    irc.send("JOIN #ops")
    await irc.numeric("366")
    plain = await s.irc("carol")                     # plaintext to the TLS port: no line of IRC comes back
    try:
        data = await asyncio.wait_for(plain.reader.read(4096), 3)
    except (TimeoutError, ConnectionError):
        data = b""
    assert not data.startswith((b":", b"ERROR")), data     # at most a TLS alert, never IRC in the clear
    with pytest.raises(ssl_module.SSLCertVerificationError):   # the system trust store does not know the mission CA
        await asyncio.open_connection("127.0.0.1", s.servers["A"].irc_front.port,
                                      ssl=ssl_module.create_default_context())
    bob = await s.ws("B", "bob")                     # WebSocket over TLS at B, with the same mission CA
    await bob.join("ops")
    await bob.say("ops", "over TLS both ways")
    assert await irc.expect(lambda l: l == ":bob!bob@B PRIVMSG #ops :over TLS both ways")
