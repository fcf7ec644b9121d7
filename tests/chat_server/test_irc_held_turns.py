"""The IRC edge's fan-out in held turns, against a real chat server: when deliveries wait behind one another
(``Sessions.hold_turn``), a turn's room frames are fanned out at its end as runs (``IrcConnection.write_run``),
and a session in step takes a chain of lines at once (irc_fanout.py ``FanRun``). Every IRC client still gets
every line, once, in order, in its own rendering. The sans-IO chains are tested in test_fanout_irc.py; this
is the edge, where a held run of in-step lines was once dropped whole (``Session.write_all``)."""
from __future__ import annotations

import asyncio

import pytest
from irc_testing import IrcTestClient

from chat_server import protocol as P
from chat_server.irc_server import _read_fanout
from chat_server.payload import ChatMessage, encode_payload
from chat_server.sessions import ws_text_frame

pytestmark = pytest.mark.timeout(60)

BURST = 40                  # lines delivered at once: the first finds the rest waiting, so the turn holds


async def _in_ops(sites, nick: str, caps: str = "") -> IrcTestClient:
    c = await sites.irc(nick, caps=caps)
    await c.numeric("376")
    c.send("JOIN #ops")
    await c.numeric("366")
    return c


def _burst(sites, lines: list[tuple[str, str]]) -> None:
    """Lines (author, text) delivered at A all at once (the fake RCM queues them in one go): bob's from B,
    carol's from A (sent from another of her clients: her IRC session shows it as her own, out of step)."""
    for i, (user, text) in enumerate(lines):
        site = "A" if user == "carol" else "B"
        sites.net.send(site, encode_payload(ChatMessage("ops", user, text, 1000.0 + i, f"c{text}")), None)


async def _lines_of(c: IrcTestClient, texts: list[str]) -> list[str]:
    """The PRIVMSG lines ``c`` is shown until the last of ``texts``."""
    got: list[str] = []
    while not got or not got[-1].endswith(texts[-1]):
        got.append(await c.expect(lambda line: " PRIVMSG #ops " in line))
    return got


async def test_every_irc_client_gets_every_line_of_a_held_burst_once_and_in_order(sites) -> None:
    sites = await sites()
    clients = {
        "plain": await _in_ops(sites, "alice"),
        "plain, second session": await _in_ops(sites, "alice"),
        "tagged": await _in_ops(sites, "carol", "message-tags server-time"),
    }
    bob = await sites.ws("B", "bob")
    await bob.join("ops")
    held_before = sites.servers["A"].sessions._held_turn
    for burst in range(3):                  # in step after each burst: the next one's lines chain again
        lines = [("carol" if burst == 1 and i == BURST // 2 else "bob", f"burst{burst}-line{i:02d}")
                 for i in range(BURST)]     # the second burst breaks its chain with one of carol's lines
        _burst(sites, lines)
        texts = [text for _, text in lines]
        for name, c in clients.items():
            got = await asyncio.wait_for(_lines_of(c, texts), 20)
            assert [line.rsplit(" ", 1)[-1] for line in got] == texts, name
            prefixes = [line.split(" PRIVMSG", 1)[0].rsplit(":", 1)[-1] for line in got]
            assert prefixes == [f"{user}!{user}@{'A' if user == 'carol' else 'B'}" for user, _ in lines], name
            if name == "tagged":
                assert all(line.startswith("@") and "time=" in line for line in got), got[:2]
            else:
                assert not any(line.startswith("@") for line in got), got[:2]
    assert sites.servers["A"].sessions._held_turn > held_before    # the bursts were fanned out as held runs


def test_a_held_run_read_through_a_list_of_its_own_is_the_same_lines() -> None:
    """A held turn's run goes to most sessions as one list and to a session that takes it ahead of the others
    (``Sessions.fan_held_to``) as a list of its own: each frame's bytes are read once whatever list brings them,
    so every session sees the same lines, chained in the room. (Read again, a run's lines were new objects, and
    every session whose last line was the old one fell out of step: ten times the full path at 5,000 clients.)"""
    frames = [ws_text_frame(P.encode({"type": "message", "room": "heldrun", "origin": "B", "user": "bob",
                                      "msg_id": f"B:{i}", "n": i, "sent_at": 1000.0 + i, "text": f"line {i}"}))
              for i in range(1, 6)]
    clock = iter(range(100)).__next__
    ahead = [_read_fanout(data, clock) for data in frames[:3]]      # one session takes what was held so far
    shared = [_read_fanout(data, clock) for data in frames]         # at the turn's end, the others: the whole run
    assert [id(r) for r in shared[:3]] == [id(r) for r in ahead]     # the same reading: frame, time and line
    lines = [r[3] for r in shared]
    assert all(line.prev is before for before, line in zip(lines, lines[1:]))
    assert [r[2] for r in shared] == [0, 1, 2, 3, 4]                  # each read once, when it first came
