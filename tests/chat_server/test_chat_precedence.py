"""A message's precedence through the chat server: one spelling per level, checked once at the edge, carried
once (by RCM).

From clients, ``precedence`` absent or ``"routine"`` both mean routine and nothing else does; the frame
parser (chat_server/protocol.py) refuses every other value by name, and hands on a ``Precedence``. To
clients, ``message`` frames always carry the name. Between chat servers the precedence is RCM's own field,
not a payload copy (test_chat_core.py holds the delivery side).
"""
from __future__ import annotations

import pytest

from chat_server.client import ChatError
from chat_server.journal import journal_files, read_journal
from chat_server.payload import ChatMessage, decode_payload
from chat_server.protocol import FrameError, parse_client_frame
from contracts.precedence import PRECEDENCES, Precedence

pytestmark = pytest.mark.timeout(60)

SAY = '{"type":"say","room":"ops","text":"hi","client_id":"c1"'


@pytest.mark.parametrize("value", ['""', "0", "3", "null", "true", '"FLASH"', '"urgent"', '" routine"', '["flash"]'])
def test_a_precedence_other_than_a_levels_name_is_refused_at_the_edge_by_name(value: str) -> None:
    with pytest.raises(FrameError) as e:
        parse_client_frame(f'{SAY},"precedence":{value}}}', 100)
    assert e.value.code == "bad_field" and "precedence" in e.value.message and e.value.in_reply_to == "c1"


def test_absent_and_routine_are_the_same_say_and_each_level_parses_to_its_enum() -> None:
    absent = parse_client_frame(SAY + "}", 100)
    routine = parse_client_frame(f'{SAY},"precedence":"routine"}}', 100)
    assert absent == routine and absent.fields["precedence"] is Precedence.ROUTINE
    for name in PRECEDENCES:
        assert parse_client_frame(f'{SAY},"precedence":"{name}"}}', 100).fields["precedence"] is Precedence(name)


async def test_routine_said_either_way_is_shown_and_journaled_alike_and_a_bad_one_sends_nothing(cluster_factory):
    cl = await cluster_factory(["A", "B"], users={"A": ["alice"], "B": ["bob"]})
    alice, bob = await cl.client("A", "alice"), await cl.client("B", "bob")
    await alice.join("ops")
    await bob.join("ops")
    for value in ("", 0):
        with pytest.raises(ChatError) as e:
            await alice.request({"type": "say", "room": "ops", "text": f"bad {value!r}", "client_id": f"b{value!r}",
                                 "precedence": value})
        assert e.value.code == "bad_field" and "'precedence'" in e.value.frame["message"] \
            or "flash, immediate, priority, routine" in e.value.frame["message"]
    plain = await alice.request({"type": "say", "room": "ops", "text": "one", "client_id": "c1"})
    named = await alice.request({"type": "say", "room": "ops", "text": "two", "client_id": "c2",
                                 "precedence": "routine"})
    shown = [await bob.wait_for(lambda f, m=m: f.get("msg_id") == m["msg_id"], 5) for m in (plain, named)]
    assert [f["precedence"] for f in shown] == ["routine", "routine"]
    assert not [p for _, p, _ in cl.net.sent_payloads if b"bad" in p]               # refused: not handed to RCM
    sent = [m for o, p, _ in cl.net.sent_payloads if o == "A" for m in (decode_payload(p),)
            if isinstance(m, ChatMessage)]
    assert [m.text for m in sent] == ["one", "two"]
    assert [d.precedence for d in cl.net.sites["B"].log if d.msg_id in (plain["msg_id"], named["msg_id"])] == \
        ["routine", "routine"]
    await cl.settle()
    for site in ("A", "B"):
        records = [r for f in journal_files(cl.mission.site_dir(site) / "journal") for r in read_journal(f)
                   if r.get("msg_id") in (plain["msg_id"], named["msg_id"]) and r["kind"] in ("send", "deliver")]
        assert records and not [r for r in records if "precedence" in r]           # routine: left out, as before
