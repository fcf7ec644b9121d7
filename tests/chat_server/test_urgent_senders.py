"""Who may send FLASH and IMMEDIATE, and how often (chat_server/urgent.py): roles on accounts, the
``[chat]`` keys, the ``adduser --role`` and ``roles`` commands, and IRC's ``!flash``."""
from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from chat_missions import grant, make_mission

from chat_server import __main__ as cli
from chat_server.accounts import Roles
from chat_server.client import ChatError
from chat_server.config import parse_chat_settings
from chat_server.irc import IrcSession
from chat_server.irc_commands import precedence_of
from chat_server.irc_state import Request, Send
from chat_server.protocol import Refusal
from chat_server.store import ChatStore
from chat_server.urgent import UrgentPolicy
from contracts.mission import MissionError
from contracts.precedence import Precedence

pytestmark = pytest.mark.timeout(60)


def test_flash_needs_its_role_and_urgent_says_are_limited_per_user() -> None:
    held = {"alice": frozenset({"flash"}), "bob": frozenset()}
    policy = UrgentPolicy("flash", "", 6.0, 3, lambda u: held[u])
    with pytest.raises(Refusal) as e:
        policy.check("bob", Precedence.FLASH, 0.0)
    assert e.value.code == "forbidden" and "role 'flash' ([chat] flash_role)" in e.value.message
    for precedence in (Precedence.ROUTINE, Precedence.PRIORITY):    # never limited here
        for _ in range(10):
            policy.check("bob", precedence, 0.0)
    for _ in range(3):                                              # a burst of 3 (IMMEDIATE needs no role)
        policy.check("bob", Precedence.IMMEDIATE, 0.0)
    with pytest.raises(Refusal) as e:
        policy.check("bob", Precedence.IMMEDIATE, 0.0)
    assert e.value.code == "rate_limited" and "try again in 10 s" in e.value.message
    policy.check("alice", Precedence.FLASH, 0.0)                             # a bucket per user
    policy.check("bob", Precedence.IMMEDIATE, 10.0)                          # then 6 a minute
    with pytest.raises(Refusal):
        policy.check("bob", Precedence.IMMEDIATE, 12.0)
    held["bob"] = frozenset({"flash"})                              # a grant applies to the next say
    policy.check("bob", Precedence.FLASH, 20.0)
    everyone = UrgentPolicy("", "", 6.0, 3, lambda u: frozenset())
    everyone.check("bob", Precedence.FLASH, 0.0)


def test_the_urgent_keys_are_checked_and_a_bad_one_is_named() -> None:
    s = parse_chat_settings({})
    assert (s.flash_role, s.immediate_role, s.urgent_per_minute, s.urgent_burst) == ("flash", "", 6.0, 3)
    s = parse_chat_settings({"flash_role": "", "immediate_role": "ops.lead", "urgent_per_minute": 30})
    assert (s.flash_role, s.immediate_role, s.urgent_per_minute) == ("", "ops.lead", 30.0)
    for raw, words in (({"flash_role": "Flash"}, "[chat] flash_role = 'Flash' must be one role name"),
                       ({"immediate_role": "a,b"}, "[chat] immediate_role = 'a,b' must be one role name"),
                       ({"urgent_per_minute": 0}, "[chat] urgent_per_minute = 0.0 must be greater than 0"),
                       ({"urgent_burst": 0}, "[chat] urgent_burst = 0 must be a positive integer")):
        with pytest.raises(MissionError) as e:
            parse_chat_settings(raw)
        assert words in str(e.value)


async def test_a_say_above_the_users_permission_is_refused_and_nothing_is_sent(cluster_factory) -> None:
    cl = await cluster_factory(["A", "B"], users={"A": ["alice"], "B": ["bob"]})
    alice, bob = await cl.client("A", "alice"), await cl.client("B", "bob")
    await alice.join("ops")
    await bob.join("ops")
    with pytest.raises(ChatError) as e:
        await alice.request({"type": "say", "room": "ops", "text": "FLOOD 1", "client_id": "f1", "precedence": "flash"})
    assert e.value.code == "forbidden" and "needs the role 'flash'" in e.value.frame["message"]
    assert not [p for _, p, _ in cl.net.sent_payloads if b"FLOOD" in p]          # not handed to RCM
    journal = [json.loads(line) for f in sorted((cl.mission.site_dir("A") / "journal").glob("*.jsonl"))
               for line in f.read_text().splitlines()]
    assert not [r for r in journal if r.get("text", "").startswith("FLOOD")]
    await alice.request({"type": "say", "room": "ops", "text": "soon", "client_id": "i1", "precedence": "immediate"})
    await bob.wait_for(lambda f: f.get("text") == "soon" and f.get("precedence") == "immediate", 5)
    grant(cl.mission, "A", "alice", "flash")               # no restart: the next say sees it
    await alice.request({"type": "say", "room": "ops", "text": "MEDEVAC", "client_id": "f2", "precedence": "flash"})
    await bob.wait_for(lambda f: f.get("text") == "MEDEVAC" and f.get("precedence") == "flash", 5)
    # A third urgent say fills the burst of 3; the fourth, from another session of the same user, is refused.
    await alice.request({"type": "say", "room": "ops", "text": "third", "client_id": "f3", "precedence": "flash"})
    again = await cl.client("A", "alice")
    await again.join("ops")
    with pytest.raises(ChatError) as e:
        await again.request({"type": "say", "room": "ops", "text": "FLOOD 4", "client_id": "f4",
                             "precedence": "immediate"})
    assert e.value.code == "rate_limited" and "[chat] urgent_per_minute" in e.value.frame["message"]
    await again.say("ops", "routine still goes")           # and the user is not cut off
    await bob.wait_for(lambda f: f.get("text") == "routine still goes", 5)
    assert not [p for _, p, _ in cl.net.sent_payloads if b"FLOOD" in p]


def _run(argv: list[str], stdin: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
         ) -> tuple[int, str, str]:
    monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    try:
        code = cli.main(argv)
    except SystemExit as e:
        code = int(e.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_roles_are_given_by_adduser_and_changed_by_the_roles_command(tmp_path: Path, monkeypatch, capsys) -> None:
    mission = make_mission(tmp_path, ["A"])
    path = tmp_path / "mission.toml"
    path.write_text('[mission]\nname = "t"\ndata_dir = "var"\n[chat]\nkdf_n = 1024\n'
                    '[sites.A]\nrcm = "127.0.0.1:20000"\nchat = "127.0.0.1:21000"\n')
    base = ["--mission", str(path), "--site", "A"]
    code, out, _ = _run(["adduser", *base, "--role", "flash", "--role", "ops,flash", "alice"], "pw\n",
                        monkeypatch, capsys)
    assert code == 0 and "with role flash, ops" in out
    assert _run(["adduser", *base, "bob"], "pw\n", monkeypatch, capsys)[0] == 0
    code, _, err = _run(["adduser", *base, "--role", "Bad Role", "carol"], "pw\n", monkeypatch, capsys)
    assert code == 2 and "--role: role 'Bad Role' must match" in err
    code, out, _ = _run(["roles", *base, "bob", "--grant", "flash"], "", monkeypatch, capsys)
    assert code == 0 and out == "bob: flash\n"
    code, out, _ = _run(["roles", *base, "alice", "--revoke", "ops"], "", monkeypatch, capsys)
    assert code == 0 and out == "alice: flash\n"
    assert _run(["roles", *base], "", monkeypatch, capsys)[1] == "alice: flash\nbob: flash\n"
    code, _, err = _run(["roles", *base, "nobody", "--grant", "flash"], "", monkeypatch, capsys)
    assert code == 1 and "no user 'nobody' at site A" in err
    code, _, err = _run(["roles", *base, "--grant", "flash"], "", monkeypatch, capsys)
    assert code == 2 and "need the USER" in err
    store = ChatStore(mission.site_dir("A") / "chat" / "chat.db")
    assert Roles(store.db).of("alice") == {"flash"} and Roles(store.db).of("carol") == frozenset()
    store.close()


def _joined_irc() -> IrcSession:
    s = IrcSession(server_name="A.irc.t", site="A", network="t")
    for line in (b"PASS secret", b"NICK alice", b"USER alice 0 * :A"):
        s.receive(line, 0)
    s.on_frame({"type": "welcome", "site": "A", "user": "alice", "sites": {"A": "connected"}, "rooms": []}, 0)
    s.on_frame({"type": "joined", "room": "ops", "history": []}, 0)
    return s


def test_irc_says_flash_with_a_prefix_and_hears_a_refusal_as_a_numeric() -> None:
    assert precedence_of("!flash MEDEVAC grid 123") == ("MEDEVAC grid 123", "flash")
    assert precedence_of("!IMMEDIATE abort") == ("abort", "immediate")
    assert precedence_of("!flash") == ("!flash", "routine") and precedence_of("!routine x") == ("!routine x", "routine")
    assert precedence_of("not !flash") == ("not !flash", "routine")
    s = _joined_irc()
    [req] = [a for a in s.receive(b"PRIVMSG #ops :!flash MEDEVAC grid 123", 1.0) if isinstance(a, Request)]
    assert (req.frame["text"], req.frame["precedence"]) == ("MEDEVAC grid 123", "flash")
    [plain] = [a for a in s.receive(b"PRIVMSG #ops :hello", 1.0) if isinstance(a, Request)]
    assert plain.frame["precedence"] == "routine"                 # one spelling: the name, as any client's
    refusal = {"type": "error", "code": "forbidden", "in_reply_to": req.frame["id"],
               "message": "say: sending FLASH needs the role 'flash' ([chat] flash_role), which alice does not hold"}
    lines = [a.data.decode() for a in s.on_frame(refusal, 1.0) if isinstance(a, Send)]
    assert lines == [":A.irc.t 404 alice #ops :Cannot send to channel: say: sending FLASH needs the role 'flash' "
                     "([chat] flash_role), which alice does not hold\r\n"]
