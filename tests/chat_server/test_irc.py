"""The IRC front end with a raw socket client: registration, every command it serves, the numerics for
bad input, and the translation of chat frames (late messages, site status, private rooms)."""
from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from chat_fake_rcm import FakeNetwork
from chat_missions import FAST_KDF, PASSWORD, add_users
from testkit import wait_until

from chat_server.accounts import Clearances
from chat_server.client import ChatClient
from chat_server.config import parse_chat_settings
from chat_server.irc import IrcSession
from chat_server.irc_state import NickLists, Presence, Request, Send
from chat_server.ircline import format_line, parse_line, split_text
from chat_server.server import ChatServer
from chat_server.store import ChatStore
from contracts.labels import Scheme, join
from contracts.mission import parse_mission

pytestmark = pytest.mark.timeout(60)


class IrcTestClient:
    """A raw IRC connection: send lines, wait for lines matching a predicate."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.lines: list[str] = []

    def send(self, line: str | bytes) -> None:
        self.writer.write((line.encode() if isinstance(line, str) else line) + b"\r\n")

    async def expect(self, pred: Callable[[str], bool], timeout: float = 10.0) -> str:
        """The first line matching ``pred`` (lines read before it stay in ``lines``, and later waits see them)."""
        for i, line in enumerate(self.lines):
            if pred(line):
                del self.lines[i]
                return line

        async def read() -> str:
            while True:
                raw = await self.reader.readline()
                if not raw:
                    raise ConnectionError(f"closed; no line matched (seen: {self.lines[-5:]})")
                line = raw.decode().rstrip("\r\n")
                if pred(line):
                    return line
                self.lines.append(line)
        return await asyncio.wait_for(read(), timeout)

    async def numeric(self, code: str) -> str:
        return await self.expect(lambda l: l.split(" ")[1:2] == [code])

    async def closed(self, timeout: float = 10.0) -> bool:
        async def eof() -> bool:
            while await self.reader.readline():
                pass
            return True
        return await asyncio.wait_for(eof(), timeout)

    def close(self) -> None:
        self.writer.close()


class IrcSites:
    def __init__(self, tmp_path: Path, chat: dict[str, Any] | None = None, rcm: dict[str, Any] | None = None,
                 clocks: dict[str, Callable[[], float]] | None = None, labels: dict[str, Any] | None = None,
                 clearances: dict[str, dict[str, Any]] | None = None) -> None:
        """Sites A (IRC) and B; ``labels``: the mission's ``[labels]`` table, ``clearances``: ``{user: {level,
        caveats}}`` (a site's clearance: its users' join)."""
        self.clocks = clocks or {}
        raw: dict[str, Any] = {
            "mission": {"name": "t", "data_dir": "var"}, "rcm": dict(rcm or {}),
            "sites": {"A": {"rcm": "127.0.0.1:20000", "chat": "127.0.0.1:21000", "irc": "127.0.0.1:21500"},
                      "B": {"rcm": "127.0.0.1:20001", "chat": "127.0.0.1:21001"}},
            "chat": {"kdf_n": FAST_KDF, "receipt_interval": 0.05, "presence_interval": 0.05,
                     "rcm_ack_interval": 0.05, **(chat or {})}}
        users = {"A": ["alice", "carol"], "B": ["bob"]}
        if labels is not None:
            raw["labels"] = labels
            for site, names in users.items():
                held = [Scheme.from_table(labels).from_json(clearances[u]) for u in names if u in (clearances or {})]
                if held:
                    top = join(held)
                    raw["sites"][site]["clearance"] = {"level": top.level, "caveats": sorted(top.caveats)}
        self.mission = parse_mission(raw, tmp_path)
        if self.mission.rcm.tls:
            from deploy import certs
            certs.create(self.mission)
        for site, names in users.items():
            add_users(self.mission, site, names)
        for user, clearance in (clearances or {}).items():
            site = next(site for site, names in users.items() if user in names)
            store = ChatStore(self.mission.site_dir(site) / "chat" / "chat.db")
            Clearances(store.db, self.mission.labels, self.mission.clearance(site)).set(
                user, self.mission.labels.from_json(clearance))
            store.close()
        self.net = FakeNetwork(["A", "B"])
        self.servers: dict[str, ChatServer] = {}
        self.clients: list[Any] = []

    async def start(self) -> None:
        for site in ("A", "B"):
            srv = ChatServer(self.mission, site, parse_chat_settings(self.mission.chat),
                             rcm_connect=self.net.connector(site), host="127.0.0.1", port=0, irc_port=0,
                             **({"clock": self.clocks[site]} if site in self.clocks else {}))
            await srv.start()
            await asyncio.wait_for(srv.rcm_connected.wait(), 5)
            self.servers[site] = srv

    async def restart(self, site: str) -> None:
        """Stop a site's chat server and start a new one on the same data (its IRC port changes)."""
        await self.servers[site].stop()
        srv = ChatServer(self.mission, site, parse_chat_settings(self.mission.chat),
                         rcm_connect=self.net.connector(site), host="127.0.0.1", port=0, irc_port=0)
        await srv.start()
        await asyncio.wait_for(srv.rcm_connected.wait(), 5)
        self.servers[site] = srv

    async def irc(self, nick: str | None = None, password: str | None = PASSWORD,
                  ssl: Any = None) -> IrcTestClient:
        r, w = await asyncio.open_connection("127.0.0.1", self.servers["A"].irc_front.port, ssl=ssl)
        c = IrcTestClient(r, w)
        self.clients.append(c)
        if nick is not None:
            if password is not None:
                c.send(f"PASS :{password}")
            c.send(f"NICK {nick}")
            c.send(f"USER {nick} 0 * :{nick} the operator")
        return c

    async def ws(self, site: str, user: str) -> ChatClient:
        if self.mission.rcm.tls:
            c = await ChatClient.connect(f"wss://127.0.0.1:{self.servers[site].port}/ws", user, PASSWORD,
                                         ca_file=self.mission.site_dir(site) / "tls" / "ca.pem")
        else:
            c = await ChatClient.connect(f"ws://127.0.0.1:{self.servers[site].port}/ws", user, PASSWORD)
        self.clients.append(c)
        return c

    async def close(self) -> None:
        for c in self.clients:
            r = c.close()
            if asyncio.iscoroutine(r):
                await r
        for srv in self.servers.values():
            await srv.stop()


@pytest.fixture
async def sites(tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    made: list[IrcSites] = []

    async def make(**kw: Any) -> IrcSites:
        s = IrcSites(tmp_path, **kw)
        made.append(s)
        await s.start()
        return s
    yield make
    for s in made:
        await s.close()


# --- sans-IO pieces ------------------------------------------------------------------------------

def test_lines_parse_and_format_as_rfc_2812_says() -> None:
    line = parse_line(b"@time=x :nick!u@h PRIVMSG #ops :hello there :)")
    assert (line.prefix, line.command, line.params) == ("nick!u@h", "PRIVMSG", ("#ops", "hello there :)"))
    assert parse_line(b"join #a,#b").params == ("#a,#b",)
    assert format_line("srv", "001", "alice", "Welcome home") == b":srv 001 alice :Welcome home\r\n"
    # A newline inside a parameter can never start a second line (a forged "commander" line).
    assert format_line("bob!bob@B", "PRIVMSG", "#ops", "hi\r\n:commander!c@A PRIVMSG #ops :ABORT").count(b"\r\n") == 1


def test_long_and_multi_line_texts_split_into_lines_within_the_limit() -> None:
    text = "first line\n" + "é" * 500
    parts = split_text(text, 100)
    assert parts[0] == "first line"
    assert all(len(p.encode()) <= 100 for p in parts)
    assert "".join(parts[1:]) == "é" * 500


def test_a_session_floods_out_past_its_burst() -> None:
    s = IrcSession(server_name="A.irc.t", site="A", network="t", rate_frames=1.0, rate_burst=3)
    out = [a for i in range(4) for a in s.receive(b"PING x", 0.0)]
    assert any(isinstance(a, Send) and b"Excess Flood" in a.data for a in out)


def test_registration_sends_hello_once_with_the_password_and_the_nick() -> None:
    s = IrcSession(server_name="A.irc.t", site="A", network="t")
    acts = s.receive(b"PASS secret", 0) + s.receive(b"NICK alice", 0) + s.receive(b"USER alice 0 * :A", 0)
    [req] = [a for a in acts if isinstance(a, Request)]
    assert req.frame["type"] == "hello" and req.frame["user"] == "alice" and req.frame["password"] == "secret"


MEMBERS = {"alice", "bob", "carol", "dave"}       # every room's members in the sans-IO sessions below


def _joined_session(caps: str = "") -> IrcSession:
    """A session registered as alice at A (with the IRCv3 ``caps`` requested) and in #ops, where bob (B), carol
    (A) and dave (C) are online, driven by hand-written chat frames."""
    s = IrcSession(server_name="A.irc.t", site="A", network="t", members_of=lambda room: MEMBERS)
    if caps:
        s.receive(b"CAP LS 302", 0)
        s.receive(f"CAP REQ :{caps}".encode(), 0)
    s.receive(b"PASS secret", 0)
    s.receive(b"NICK alice", 0)
    s.receive(b"USER alice 0 * :A", 0)
    s.receive(b"CAP END", 0)
    s.on_frame({"type": "welcome", "site": "A", "user": "alice", "sites": {"A": "connected"}, "rooms": [],
                "presence": {"A": ["alice", "carol"], "B": ["bob"], "C": ["dave"]}}, 0)
    s.on_frame({"type": "joined", "room": "ops", "history": []}, 0)
    return s


def _lines(actions: list) -> list[str]:
    return [line for a in actions if isinstance(a, Send) for line in a.data.decode().split("\r\n") if line]


def test_repaired_flash_and_immediate_lines_arrive_as_marked_notices() -> None:
    s = _joined_session()
    base = {"type": "message", "room": "ops", "origin": "C", "user": "dave", "sent_at": 1000.0, "order": [5, "C"]}
    now = 1300.0
    assert _lines(s.on_frame(dict(base, msg_id="C:1", text="plain"), now)) == [":dave!dave@C PRIVMSG #ops plain"]
    assert _lines(s.on_frame(dict(base, msg_id="C:2", text="fixed", late=True, repaired=True), now)) == [
        ":dave!dave@C NOTICE #ops :[REPAIRED +300s] fixed"]
    assert _lines(s.on_frame(dict(base, msg_id="C:3", text="now", precedence="flash"), now)) == [
        ":dave!dave@C NOTICE #ops :[FLASH C:3] now"]
    assert _lines(s.on_frame(dict(base, msg_id="C:4", text="soon", precedence="immediate", late=True), now)) == [
        ":dave!dave@C NOTICE #ops :[IMMEDIATE C:4] [LATE +300s] soon"]
    assert _lines(s.on_frame(dict(base, msg_id="C:5", text="routine", precedence="priority"), now)) == [
        ":dave!dave@C PRIVMSG #ops routine"]


def test_site_status_and_missing_notices_reach_every_joined_channel() -> None:
    s = _joined_session()
    s.on_frame({"type": "joined", "room": "intel", "history": []}, 0)
    status = _lines(s.on_frame({"type": "site_status", "site": "C", "status": "disconnected"}, 0))
    assert sorted(status) == [":A.irc.t NOTICE #intel :*** site C is disconnected",
                              ":A.irc.t NOTICE #ops :*** site C is disconnected"]
    odd = _lines(s.on_frame({"type": "site_status", "site": "C", "status": "up\r\nQUIT"}, 0))   # a newer word
    assert ":A.irc.t NOTICE #ops :*** site C is unknown" in odd            # contracts.status, as every client
    missing = _lines(s.on_frame({"type": "missing", "origin": "C", "count": 7}, 0))
    assert len(missing) == 2 and all("up to 7 messages from site C were lost" in m for m in missing)
    revised = _lines(s.on_frame({"type": "missing", "origin": "C", "count": 2, "recovered": 5}, 0))
    assert ":A.irc.t NOTICE #ops :*** recovered 5 messages from site C (up to 2 still missing); shown above as " \
           "[REPAIRED] NOTICEs" in revised


# Text a WebSocket (or TUI) user may send, that IRC clients would obey: CTCP (a DCC offer every client in the
# channel answers), a terminal's ESC sequences (clear the screen, retitle the window), colour and format codes,
# a C1 CSI, a bidi override, DEL, NUL, and a line break that tries to forge a line of another user.
HOSTILE = ("\x01DCC SEND evil 3232235777 6666 1\x01 \x1b[2J\x1b]0;owned\x07 \x0304,12red\x0f \x02bold\x1d "
           "\x16\x1f\x1e\x11 \x9b31m \u202egnp.exe\x7f\x00\r\n:carol!carol@A PRIVMSG #ops :forged")
# ... as IRC clients get it: the control pictures (U+2400 + code, DEL U+2421) and the TUI's escapes, one line
# per line of the text, the second still bob's.
SHOWN = ["\u2401DCC SEND evil 3232235777 6666 1\u2401 \u241b[2J\u241b]0;owned\u2407 \u240304,12red\u240f "
         "\u2402bold\u241d \u2416\u241f\u241e\u2411 \\x9b31m \\u202egnp.exe\u2421\u2400",
         ":carol!carol@A PRIVMSG #ops :forged"]
CONTROLS = {*map(chr, range(0x20)), *map(chr, range(0x7F, 0xA0)), "\u202e", "\u2028", "\u2029"}


def obeyed(line: str) -> set[str]:
    """The characters of an IRC line that a client would act on instead of printing."""
    return set(line) & CONTROLS


def test_another_clients_controls_reach_irc_clients_as_visible_symbols_never_as_codes() -> None:
    s = _joined_session()
    base = {"type": "message", "room": "ops", "origin": "B", "user": "bob", "sent_at": 1000.0, "order": [5, "B"]}
    out = s.on_frame(dict(base, msg_id="B:1", text=HOSTILE), 1000.0)
    raw = b"".join(a.data for a in out if isinstance(a, Send))
    assert raw.count(b"\r\n") == 2 and raw.count(b"\r") == 2 and raw.count(b"\n") == 2    # two lines, both bob's
    assert _lines(out) == [f":bob!bob@B PRIVMSG #ops :{SHOWN[0]}", f":bob!bob@B PRIVMSG #ops :{SHOWN[1]}"]
    # The same in a NOTICE (a flash message) and in the history replayed on join.
    flash = _lines(s.on_frame(dict(base, msg_id="B:2", text=HOSTILE, precedence="flash"), 1000.0))
    assert flash == [f":bob!bob@B NOTICE #ops :[FLASH B:2] {SHOWN[0]}",
                     f":bob!bob@B NOTICE #ops :[FLASH B:2] {SHOWN[1]}"]
    joined = _lines(s.on_frame({"type": "joined", "room": "intel", "history": [dict(base, msg_id="B:1",
                                                                                      text=HOSTILE)]}, 0))
    replayed = [line.split("<bob@B> ", 1)[1] for line in joined if "NOTICE #intel :[history" in line]
    assert replayed == SHOWN and not any(map(obeyed, joined))
    # Any parameter of any line: no control leaves format_line.
    assert not obeyed(format_line("srv", "NOTICE", "#ops", "\x01VERSION\x01 \x1b[2J \x9b").decode().rstrip("\r\n"))


def test_an_irc_users_formatting_is_dropped_and_its_ctcp_is_not_said() -> None:
    s = _joined_session()

    def said(line: bytes) -> list[str]:
        return [a.frame["text"] for a in s.receive(line, 1.0) if isinstance(a, Request)]
    assert said(b"PRIVMSG #ops :\x02tanker\x02 on \x0304,12station\x03 \x1dnow\x0f") == ["tanker on station now"]
    assert said(b"PRIVMSG #ops :\x01ACTION \x02waves\x02\x01") == ["* alice waves"]
    assert said(b"PRIVMSG #ops :\x01VERSION\x01") == []                  # CTCP requests are not chat
    assert said(b"PRIVMSG #ops :\x02\x0304\x0f") == []                     # formatting alone: nothing to say


# --- against chat servers ------------------------------------------------------------------------

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


async def test_irc_and_websocket_users_talk_in_the_same_room(sites) -> None:
    s = await sites()
    irc = await s.irc("alice")
    assert "alice!alice@A" in await irc.numeric("001")
    await irc.numeric("005")
    await irc.numeric("376")
    irc.send("JOIN #ops")
    assert await irc.expect(lambda l: l == ":alice!alice@A JOIN #ops")
    await irc.numeric("366")
    bob = await s.ws("B", "bob")
    await bob.join("ops")
    await bob.say("ops", "bob here")
    assert await irc.expect(lambda l: l == ":bob!bob@B PRIVMSG #ops :bob here")
    irc.send("PRIVMSG #ops :alice here, over IRC")
    got = await bob.wait_for(lambda f: f["type"] == "message" and f["user"] == "alice", 10)
    assert (got["origin"], got["text"]) == ("A", "alice here, over IRC")
    await bob.say("ops", "after yours")
    await irc.expect(lambda l: "after yours" in l)
    assert not [line for line in irc.lines if "alice here" in line]     # the server never echoes your own line


async def test_a_websocket_users_ctcp_and_escapes_reach_irc_clients_shown_not_obeyed(sites) -> None:
    s = await sites()
    irc = await s.irc("alice")
    await irc.numeric("376")
    irc.send("JOIN #ops")
    await irc.numeric("366")
    bob = await s.ws("B", "bob")
    await bob.join("ops")
    await bob.say("ops", HOSTILE)
    assert await irc.expect(lambda l: "DCC SEND" in l) == f":bob!bob@B PRIVMSG #ops :{SHOWN[0]}"
    assert await irc.expect(lambda l: "forged" in l) == f":bob!bob@B PRIVMSG #ops :{SHOWN[1]}"
    # The WebSocket side keeps the text as it was said; IRC users' own formatting never reaches it.
    got = await bob.wait_for(lambda f: f["type"] == "message" and f["text"] == HOSTILE, 10)
    assert got["user"] == "bob"
    irc.send("PRIVMSG #ops :\x02plain\x02 \x0304now\x03")
    got = await bob.wait_for(lambda f: f["type"] == "message" and f["user"] == "alice", 10)
    assert got["text"] == "plain now"


async def test_every_command_answers_with_its_numerics(sites) -> None:
    s = await sites()
    irc = await s.irc("alice")
    await irc.numeric("376")
    irc.send("JOIN #ops,#intel")
    await irc.expect(lambda l: l.endswith("JOIN #intel"))
    irc.send("PING :tok")
    assert (await irc.expect(lambda l: " PONG " in l)).endswith(" tok")
    irc.send("NAMES #ops")
    assert "alice" in await irc.numeric("353")
    await irc.numeric("366")
    irc.send("WHO #ops")
    assert " alice A " in await irc.numeric("352")
    await irc.numeric("315")
    irc.send("TOPIC #ops")
    await irc.numeric("331")
    irc.send("TOPIC #ops :new topic")
    await irc.numeric("482")
    irc.send("MODE #ops")
    assert "+nt" in await irc.numeric("324")
    irc.send("LIST")
    await irc.numeric("321")
    await irc.numeric("323")
    assert {line.split(" ")[3] for line in irc.lines if line.split(" ")[1] == "322"} >= {"#ops", "#intel"}
    irc.send("PART #intel :bye")
    assert await irc.expect(lambda l: l.startswith(":alice!alice@A PART #intel"))
    irc.send("NOTICE #ops :a notice is said too")
    bob = await s.ws("B", "bob")
    await bob.join("ops")
    # Bad input: numerics, and the connection stays open.
    irc.send("FROBNICATE x")
    await irc.numeric("421")
    irc.send("PRIVMSG #ops")
    await irc.numeric("412")
    irc.send("PRIVMSG")
    await irc.numeric("411")
    irc.send("JOIN")
    await irc.numeric("461")
    irc.send("PRIVMSG #nowhere :x")
    await irc.numeric("404")
    irc.send("PRIVMSG nobody :direct")       # (bob, in #ops since above, gets 531 once his roster is here)
    await irc.numeric("401")
    irc.send("JOIN #bad room")
    irc.send("JOIN &local")
    await irc.numeric("403")
    irc.send(b"PRIVMSG #ops :" + b"x" * 10_000)
    await irc.numeric("417")
    irc.send("NICK carol")
    await irc.numeric("432")
    irc.send("PING :still-here")
    await irc.expect(lambda l: l.endswith("still-here"))
    irc.send("QUIT :done")
    await irc.expect(lambda l: l.startswith("ERROR"))
    assert await irc.closed()


async def test_a_private_room_is_invite_only_for_non_members(sites) -> None:
    s = await sites()
    bob = await s.ws("B", "bob")
    await bob.create("secret", ["bob"])
    await bob.wait_for(lambda f: f["type"] == "joined" and f["room"] == "secret", 10)
    await asyncio.sleep(0)
    for _ in range(50):                              # the definition reaches site A through the fake RCM
        if "secret" in s.servers["A"].private:
            break
        await asyncio.sleep(0.02)
    irc = await s.irc("alice")
    await irc.numeric("376")
    irc.send("JOIN #secret")
    assert "+i" in await irc.numeric("473")


async def test_late_messages_and_site_status_reach_irc_users_as_notices(sites) -> None:
    s = await sites()
    irc = await s.irc("alice")
    await irc.numeric("376")
    irc.send("JOIN #ops")
    await irc.numeric("366")
    bob = await s.ws("B", "bob")
    await bob.join("ops")
    s.net.set_link("A", "B", "suspected")
    assert await irc.expect(lambda l: "NOTICE #ops" in l and "site B is suspected" in l)
    await bob.say("ops", "held back by the link")
    s.net.set_link("A", "B", "connected")
    line = await irc.expect(lambda l: "held back by the link" in l)
    assert line.startswith(":bob!bob@B NOTICE #ops :[LATE +")
    assert await irc.expect(lambda l: "site B is connected" in l)


async def test_a_flood_of_lines_closes_only_that_connection(sites) -> None:
    s = await sites(chat={"rate_limit_frames": 5.0, "rate_limit_burst": 20})
    calm = await s.irc("carol")
    await calm.numeric("376")
    flood = await s.irc("alice")
    await flood.numeric("376")
    for _ in range(100):
        flood.send("PING :x")
    assert "Excess Flood" in await flood.expect(lambda l: l.startswith("ERROR"))
    assert await flood.closed()
    calm.send("PING :fine")
    await calm.expect(lambda l: l.endswith("fine"))


def test_the_irc_address_is_checked_like_every_other_address(tmp_path: Path) -> None:
    from contracts.mission import MissionError
    raw = {"mission": {"name": "t"},
           "sites": {"A": {"rcm": "127.0.0.1:7101", "chat": "127.0.0.1:8101", "irc": "127.0.0.1:8101"}}}
    with pytest.raises(MissionError, match=r"sites.A.irc = 127.0.0.1:8101 is already used by sites.A.chat"):
        parse_mission(raw, tmp_path)
    raw["sites"]["A"]["irc"] = "nowhere"
    with pytest.raises(MissionError, match="sites.A.irc"):
        parse_mission(raw, tmp_path)
    raw["sites"]["A"]["irc"] = "127.0.0.1:6601"
    assert parse_mission(raw, tmp_path).site("A").irc.port == 6601


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


async def test_notice_and_action_reach_websocket_users_and_part_and_topic_need_the_channel(sites) -> None:
    s = await sites()
    irc = await s.irc("alice")
    await irc.numeric("376")
    irc.send("JOIN #ops")
    await irc.numeric("366")
    bob = await s.ws("B", "bob")
    await bob.join("ops")
    irc.send("NOTICE #ops :a notice is said too")
    got = await bob.wait_for(lambda f: f["type"] == "message" and f["user"] == "alice", 10)
    assert got["text"] == "a notice is said too"
    irc.send("PRIVMSG #ops :\x01ACTION waves\x01")
    got = await bob.wait_for(lambda f: f["type"] == "message" and "waves" in f["text"], 10)
    assert got["text"] == "* alice waves"
    irc.send("PART #intel")
    await irc.numeric("442")
    irc.send("TOPIC #intel")
    await irc.numeric("442")
    irc.send("JOIN 0")                                # leave every room
    assert await irc.expect(lambda l: l.startswith(":alice!alice@A PART #ops"))


async def test_malformed_lines_get_numerics_and_the_connection_stays_open(sites) -> None:
    s = await sites()
    irc = await s.irc("alice")
    await irc.numeric("376")
    irc.send("JOIN #ops")
    await irc.numeric("366")
    bob = await s.ws("B", "bob")
    await bob.join("ops")
    irc.send(b":alice!alice@A")                       # a prefix and no command
    await irc.numeric("421")
    irc.send(b"PRIV@MSG #ops :x")                     # not a command word
    await irc.numeric("421")
    irc.send(b"\xff\xfe\xfd #ops")                    # not UTF-8, not a command
    await irc.numeric("421")
    irc.send(b"")                                     # an empty line is ignored (RFC 2812 2.3.1)
    irc.send(b"    ")
    # Bytes that are not UTF-8 inside a text are replaced, not fatal; a NUL cannot forge anything.
    irc.send(b"PRIVMSG #ops :caf\xe9 and \x00 nul")
    got = await bob.wait_for(lambda f: f["type"] == "message" and f["user"] == "alice", 10)
    assert got["text"].startswith("caf\ufffd and ")
    # An oversized line split over several writes without a line end: 417 once it ends, the next line served.
    irc.writer.write(b"PRIVMSG #ops :" + b"y" * 3000)
    await irc.writer.drain()
    irc.writer.write(b"y" * 3000)
    irc.send(b"z")
    await irc.numeric("417")
    irc.send("PRIVMSG #ops :after the long one")
    got = await bob.wait_for(lambda f: f["type"] == "message" and f["text"] == "after the long one", 10)
    assert not [f for f in bob.drain_events() if f.get("type") == "message" and "yyy" in f.get("text", "")]
    irc.send("PING :alive")
    await irc.expect(lambda l: l.endswith("alive"))
    assert not [line for line in irc.lines if line.startswith("ERROR")]


async def test_list_shows_every_room_beyond_the_first_page(sites) -> None:
    s = await sites(chat={"rooms_page": 2})
    irc = await s.irc("alice")
    await irc.numeric("376")
    irc.send("JOIN #r1,#r2,#r3,#r4,#r5")
    await irc.expect(lambda l: l.endswith("JOIN #r5"))
    irc.send("LIST")
    await irc.numeric("321")
    await irc.numeric("323")
    listed = {line.split(" ")[3] for line in irc.lines if line.split(" ")[1] == "322"}
    assert listed >= {"#r1", "#r2", "#r3", "#r4", "#r5"}, listed


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


def test_a_throttled_login_is_told_so_not_that_the_password_is_wrong() -> None:
    s = IrcSession(server_name="A.irc.t", site="A", network="t")
    acts = s.receive(b"PASS secret", 0) + s.receive(b"NICK alice", 0) + s.receive(b"USER alice 0 * :A", 0)
    [req] = [a for a in acts if isinstance(a, Request)]
    out = _lines(s.on_frame({"type": "error", "code": "rate_limited", "id": req.frame["id"],
                             "message": "the server is checking many logins at once; try again in a second"}, 0))
    assert out == ["ERROR :Closing Link: Throttled: the server is checking many logins at once; try again in a second"]
    assert not [line for line in out if " 464 " in line]


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


async def test_an_irc_client_cannot_queue_requests_without_bound(sites) -> None:
    """An IRC connection's lines became requests in an unbounded queue: while its says waited on RCM the
    server went on reading it (a WebSocket is not read then: TCP pushes back). The reader now waits."""
    s = await sites(chat={"rate_limit_frames": 5000.0, "rate_limit_burst": 20000,
                          "user_rate_limit_frames": 5000.0, "user_rate_limit_burst": 20000})
    try:
        irc = await s.irc("alice")
        await irc.numeric("001")
        irc.send("JOIN #ops")
        await irc.numeric("366")
        ws = await s.ws("A", "carol")
        await ws.join("ops")
        s.net.gate = asyncio.Event()                 # RCM stops answering sends
        for i in range(3000):
            irc.send(f"PRIVMSG #ops :line {i}")
        await irc.writer.drain()
        await asyncio.sleep(1.0)
        conn = next(iter(s.servers["A"].irc_front.connections))
        from chat_server import irc_server
        assert conn.requests.qsize() <= getattr(irc_server, "IRC_REQUESTS_MAX", 64), conn.requests.qsize()
        s.net.gate.set()                             # RCM answers again: every line is sent, in order
        await ws.wait_for(lambda f: f["type"] == "message" and f["text"] == "line 2999", 30)
        texts = [f["text"] for f in ws.drain_events() if f["type"] == "message"]
        nums = [int(t.split()[1]) for t in texts]
        assert nums == sorted(nums)
    finally:
        s.net.gate = None


# --- acknowledging, direct messages, LIST and NAMES (sans-IO) -------------------------------------------------

def test_ack_acknowledges_the_urgent_lines_waiting_and_acknowledgements_are_shown() -> None:
    s = _joined_session()
    base = {"type": "message", "room": "ops", "origin": "B", "user": "bob", "sent_at": 1000.0, "order": [5, "B"]}
    s.on_frame(dict(base, msg_id="B:1", text="MEDEVAC grid 123", precedence="flash"), 1000.0)
    s.on_frame(dict(base, msg_id="B:2", text="routine", precedence="routine"), 1000.0)
    s.on_frame(dict(base, msg_id="B:3", text="move now", precedence="immediate"), 1000.0)
    acks = [a.frame for a in s.receive(b"PRIVMSG #ops :!ack", 1.0) if isinstance(a, Request)]
    assert [(f["type"], f["msg_id"]) for f in acks] == [("acknowledge", "B:1"), ("acknowledge", "B:3")]
    assert not [a for a in s.receive(b"PRIVMSG #ops :!ACK B:1", 1.0) if isinstance(a, Request)
                and a.frame["type"] == "say"]                 # never said to the room
    assert [a.frame["msg_id"] for a in s.receive(b"ACK B:3", 1.0) if isinstance(a, Request)] == ["B:3"]
    shown = _lines(s.on_frame({"type": "acknowledged", "msg_id": "B:1", "user": "alice", "site": "A",
                               "at": 1001.0}, 1001.0))
    assert shown == [":A.irc.t NOTICE #ops :*** alice@A acknowledged B:1 [re bob: MEDEVAC grid 123]"]
    assert _lines(s.on_frame({"type": "acknowledged", "msg_id": "C:9", "user": "dave", "site": "C", "at": 1.0},
                             1001.0)) == [":A.irc.t NOTICE #ops :*** dave@C acknowledged C:9"]   # a line not seen here
    s.on_frame({"type": "acknowledging", "msg_id": "B:3", "ref": "A:9"}, 1001.0)
    assert _lines(s.receive(b"PRIVMSG #ops :!ack", 2.0)) == [
        ":A.irc.t NOTICE #ops :*** nothing to acknowledge in #ops: no FLASH or IMMEDIATE line waits for yours"]
    refused = [a.frame for a in s.receive(b"ACK B:2", 2.0) if isinstance(a, Request)]
    assert _lines(s.on_frame({"type": "error", "code": "bad_field", "in_reply_to": refused[0]["id"],
                              "message": "acknowledge: only flash and immediate messages ask for acknowledgement"},
                             2.0)) == [":A.irc.t NOTICE alice :*** cannot acknowledge B:2: acknowledge: only flash "
                                       "and immediate messages ask for acknowledgement"]


def test_a_line_for_a_user_says_there_are_rooms_not_private_messages() -> None:
    s = _joined_session()
    [online] = _lines(s.receive(b"PRIVMSG bob :are you there?", 1.0))
    assert online.startswith(":A.irc.t 531 alice bob :Cannot send to user: bob is online at B, but this suite "
                             "has rooms, not private messages: write in a channel you share with bob, or create a "
                             "private room with bob in the web UI or the TUI")
    [nobody] = _lines(s.receive(b"PRIVMSG zed :hello", 1.0))
    assert nobody.startswith(":A.irc.t 401 alice zed :No such nick/channel: zed is not online at any site")
    assert s.receive(b"NOTICE bob :quiet", 1.0) == []                      # never a reply to a NOTICE


def test_list_counts_the_users_in_each_channel_and_names_lists_its_members_online() -> None:
    s = IrcSession(server_name="A.irc.t", site="A", network="t",
                   members_of=lambda room: {"ops": {"alice", "bob", "dave", "erin"}}.get(room, set()))
    for line in (b"PASS secret", b"NICK alice", b"USER alice 0 * :A"):
        s.receive(line, 0)
    s.on_frame({"type": "welcome", "site": "A", "user": "alice", "sites": {}, "rooms": [],
                "presence": {"A": ["alice", "carol"], "B": ["bob"], "C": ["dave"]}}, 0)
    joined = _lines(s.on_frame({"type": "joined", "room": "ops", "history": []}, 0))
    assert ":A.irc.t 353 alice = #ops :alice bob dave" in joined          # not carol (not a member), not erin
    [req] = [a.frame for a in s.receive(b"LIST", 0) if isinstance(a, Request)]
    out = _lines(s.on_frame({"type": "rooms", "id": req["id"], "more": False, "rooms": [
        {"room": "ops", "private": False, "members": 4, "online": 3, "joined": True},
        {"room": "cell", "private": True, "members": 1, "online": 1, "joined": False}]}, 0))
    assert out[1:3] == [":A.irc.t 322 alice #ops 3 :4 members, 3 online, joined",
                        ":A.irc.t 322 alice #cell 1 :1 member, 1 online, private room (+i)"]
    # erin comes online at C: she joins the channel; carol's presence changes nothing in it.
    assert _lines(s.on_frame({"type": "presence", "site": "C", "online": ["erin"], "offline": []}, 0)) == [
        ":erin!erin@C JOIN #ops"]
    assert _lines(s.on_frame({"type": "presence", "site": "A", "online": [], "offline": ["carol"]}, 0)) == []
    # A speaker the channel did not list (a roster not here yet) is in it: a JOIN before the line.
    assert _lines(s.on_frame({"type": "message", "room": "ops", "origin": "B", "user": "frank", "msg_id": "B:1",
                              "text": "hi", "sent_at": 1.0, "order": [1, "B"]}, 1.0)) == [
        ":frank!frank@B JOIN #ops", ":frank!frank@B PRIVMSG #ops hi"]
    assert "alice bob dave erin frank" in _lines(s.receive(b"NAMES #ops", 0))[0]


def test_nick_lists_make_each_change_once_and_forget_beyond_their_bound() -> None:
    lists = NickLists(keep=4)
    base = lists.union(frozenset(), {"alice", "bob"})
    assert base == {"alice", "bob"} and lists.union(frozenset(), ["bob", "alice"]) is base   # made apart, one
    plus = lists.add(base, "carol")
    assert lists.add(base, "carol") is plus and lists.add(plus, "carol") is plus
    assert lists.discard(plus, "carol") == base and lists.discard(base, "zed") is base
    for i in range(10):                                   # more changes than it keeps: still right, not shared
        lists.add(base, f"u{i}")
    again = lists.add(base, "carol")
    assert again == plus and len(lists._changes) <= 4 and len(lists._lists) <= 4


def test_nick_lists_hold_no_list_that_no_session_holds_and_share_every_list_that_one_does() -> None:
    lists = NickLists(keep=4)
    held = [lists.union(frozenset(), {f"u{i}", "x"}) for i in range(20)]   # more lists than ``keep``
    assert all(lists.one(frozenset({f"u{i}", "x"})) is held[i] for i in range(20))   # each found, made apart
    plus = lists.add(held[0], "y")
    del held, plus                                   # no session holds them any more: nothing keeps them
    assert lists._lists == {} and all(old() is None and new() is None for old, new in lists._changes.values())


def test_a_member_who_goes_offline_everywhere_parts_and_sessions_share_one_presence_table() -> None:
    presence, nick_lists = Presence(), NickLists()
    sessions = []
    for nick in ("alice", "carol"):
        s = IrcSession(server_name="A.irc.t", site="A", network="t", presence=presence, nick_lists=nick_lists,
                       members_of=lambda room: {"ops": {"alice", "bob", "carol"}}.get(room, set()))
        for line in (b"PASS secret", f"NICK {nick}".encode(), f"USER {nick} 0 * :A".encode()):
            s.receive(line, 0)
        s.on_frame({"type": "welcome", "site": "A", "user": nick, "sites": {}, "rooms": [],
                    "presence": {"A": ["alice", "carol"], "B": ["bob"], "C": ["bob"]}}, 0)
        s.on_frame({"type": "joined", "room": "ops", "history": []}, 0)
        sessions.append(s)
    # bob leaves C but is still at B: nothing; then B too: he parts, for every session (one shared frame).
    gone_c = {"type": "presence", "site": "C", "online": [], "offline": ["bob"]}
    assert [_lines(s.on_frame(gone_c, 0)) for s in sessions] == [[], []]
    gone_b = {"type": "presence", "site": "B", "online": [], "offline": ["bob"]}
    assert [_lines(s.on_frame(gone_b, 0)) for s in sessions] == [[":bob!bob@B PART #ops offline"]] * 2
    assert presence.sites == {"A": {"alice", "carol"}, "B": set(), "C": set()}
    assert "bob" not in _lines(sessions[0].receive(b"NAMES #ops", 0))[0]
    back = {"type": "presence", "site": "C", "online": ["bob"], "offline": []}
    assert [_lines(s.on_frame(back, 0)) for s in sessions] == [[":bob!bob@C JOIN #ops"]] * 2
    assert _lines(sessions[1].receive(b"WHOIS bob", 0))[0] == ":A.irc.t 311 carol bob bob C * :bob at C"
    # Both sessions told their clients the same: one nick list, not a copy each.
    a, c = (s._channels["ops"].nicks for s in sessions)
    assert a == {"alice", "bob", "carol"} and a is c
    dave = {"type": "message", "room": "ops", "origin": "B", "user": "dave", "msg_id": "B:1", "text": "hi",
            "sent_at": 1.0, "order": [1, "B"]}
    assert [_lines(s.on_frame(dave, 1.0))[0] for s in sessions] == [":dave!dave@B JOIN #ops"] * 2
    a, c = (s._channels["ops"].nicks for s in sessions)
    assert "dave" in a and a is c


# --- IRCv3 and acknowledging against chat servers --------------------------------------------------------------

async def test_sasl_history_batch_echo_and_chathistory_against_a_chat_server(sites) -> None:
    s = await sites()
    bob = await s.ws("B", "bob")
    await bob.join("ops")
    first = await bob.say("ops", "before alice came")
    await bob.wait_for(lambda f: f["type"] == "receipt" and f["msg_id"] == first["msg_id"] and f["site"] == "A", 10)
    irc = await s.irc()
    irc.send("CAP LS 302")
    irc.send("NICK alice")
    irc.send("USER alice 0 * :Alice")
    assert "sasl=PLAIN" in await irc.expect(lambda l: " CAP * LS " in l)
    irc.send("CAP REQ :sasl server-time message-tags batch echo-message")
    await irc.expect(lambda l: " CAP alice ACK " in l)
    irc.send("AUTHENTICATE PLAIN")
    await irc.expect(lambda l: l == "AUTHENTICATE +")
    irc.send(b"AUTHENTICATE " + base64.b64encode(f"\0alice\0{PASSWORD}".encode()))
    await irc.numeric("903")
    irc.send("CAP END")
    await irc.numeric("001")
    irc.send("JOIN #ops")
    start = await irc.expect(lambda l: " BATCH +" in l and l.endswith("chathistory #ops"))
    ref = start.split()[2][1:]
    line = await irc.expect(lambda l: "before alice came" in l)
    assert line.startswith(f"@batch={ref};time=") and f";msgid={first['msg_id']} :bob!bob@B PRIVMSG #ops " in line
    await irc.expect(lambda l: l.endswith(f"BATCH -{ref}"))
    irc.send("PRIVMSG #ops :alice, over IRC")                  # echo-message: her line comes back, with its msgid
    echo = await irc.expect(lambda l: "alice, over IRC" in l)
    assert ";msgid=A:" in echo and ":alice!alice@A PRIVMSG #ops :alice, over IRC" in echo
    irc.send(f"CHATHISTORY LATEST #ops msgid={first['msg_id']} 10")
    await irc.expect(lambda l: " BATCH +" in l)
    assert "alice, over IRC" in await irc.expect(lambda l: "PRIVMSG" in l)


async def test_ack_from_irc_reaches_every_site_as_from_the_web(sites) -> None:
    from chat_missions import grant
    s = await sites()
    grant(s.mission, "B", "bob", "flash")
    irc = await s.irc("alice")
    await irc.numeric("376")
    irc.send("JOIN #ops")
    await irc.numeric("366")
    bob = await s.ws("B", "bob")
    await bob.join("ops")
    ack = await bob.request({"type": "say", "room": "ops", "text": "MEDEVAC grid 123", "client_id": "f1",
                             "precedence": "flash"})
    assert await irc.expect(lambda l: "MEDEVAC" in l) == \
        f":bob!bob@B NOTICE #ops :[FLASH {ack['msg_id']}] MEDEVAC grid 123"
    irc.send("PRIVMSG #ops :!ack")
    got = await bob.wait_for(lambda f: f["type"] == "acknowledged" and f["msg_id"] == ack["msg_id"], 10)
    assert (got["user"], got["site"]) == ("alice", "A")
    assert await irc.expect(lambda l: "acknowledged" in l) == \
        f":A.irc.t NOTICE #ops :*** alice@A acknowledged {ack['msg_id']} [re bob: MEDEVAC grid 123]"
    assert not [line for line in irc.lines if "PRIVMSG #ops :!ack" in line]   # not said to the room


async def test_a_client_that_reconnects_is_replayed_only_what_it_was_not_shown(sites) -> None:
    s = await sites()
    bob = await s.ws("B", "bob")
    await bob.join("ops")
    irc = await s.irc("alice")
    await irc.numeric("376")
    irc.send("JOIN #ops")
    await irc.numeric("366")
    await bob.say("ops", "one")
    await irc.expect(lambda l: l.endswith("PRIVMSG #ops one"))
    irc.send("QUIT")
    await irc.closed()
    second = await bob.say("ops", "two, while alice was away")
    await bob.wait_for(lambda f: f["type"] == "receipt" and f["msg_id"] == second["msg_id"] and f["site"] == "A", 10)
    irc = await s.irc("alice")                                   # ops is joined for her at log-in
    await irc.expect(lambda l: "two, while alice was away" in l)
    await irc.numeric("366")
    irc.send("PING :done")
    await irc.expect(lambda l: l.endswith("done"))
    assert not [line for line in irc.lines if line.endswith("> one")]
    # The chat server restarts: what each client was shown survives it.
    irc.close()
    await s.restart("A")
    irc = await s.irc("alice")
    await irc.numeric("366")
    irc.send("PING :done")
    await irc.expect(lambda l: l.endswith("done"))
    assert not [line for line in irc.lines if "[history" in line]


async def test_a_labeled_mission_over_irc_marks_lines_says_at_a_label_and_refuses_what_the_user_may_not(
        sites) -> None:
    s = await sites(labels={"levels": ["UNCLASSIFIED", "RESTRICTED", "SECRET", "TOP SECRET"],
                            "caveats": ["GBR", "USA"], "default": "UNCLASSIFIED"},
                    clearances={"alice": {"level": "SECRET", "caveats": ["GBR"]}, "carol": {"level": "RESTRICTED"},
                                "bob": {"level": "SECRET", "caveats": ["GBR"]}})
    bob = await s.ws("B", "bob")
    for room, label in (("ops", "RESTRICTED"), ("vault", "SECRET")):
        await bob.request({"type": "create", "room": room, "label": label})
        await bob.wait_for(lambda f, room=room: f["type"] == "joined" and f["room"] == room, 10)
    alice, carol = await s.irc("alice"), await s.irc("carol")
    assert (await alice.expect(lambda l: "Your clearance" in l)).endswith(":- Each line starts with its security "
        "label ([SECRET] text); start yours with one to send it at that label, or none for the channel's (its "
        "topic). Your clearance: SECRET//REL TO GBR.")
    for c in (alice, carol):
        await c.numeric("376")
        c.send("JOIN #ops")
        assert (await c.numeric("332")).split(" :", 1)[1].startswith("[RESTRICTED] the label of this channel")
        await c.numeric("366")
    await bob.request({"type": "say", "room": "ops", "text": "tanker on station", "client_id": "b1",
                       "label": "SECRET//REL TO GBR"})
    await bob.request({"type": "say", "room": "ops", "text": "weather fine", "client_id": "b2"})
    assert await alice.expect(lambda l: "tanker" in l) == \
        ":bob!bob@B PRIVMSG #ops :[SECRET//REL TO GBR] tanker on station"
    assert await alice.expect(lambda l: "weather" in l) == ":bob!bob@B PRIVMSG #ops :[RESTRICTED] weather fine"
    assert await carol.expect(lambda l: "weather" in l) == ":bob!bob@B PRIVMSG #ops :[RESTRICTED] weather fine"
    assert not [line for line in carol.lines if "tanker" in line]         # not cleared: never sent to her
    alice.send("PRIVMSG #ops :[SECRET] !priority contact north")
    got = await bob.wait_for(lambda f: f["type"] == "message" and f["user"] == "alice", 10)
    assert (got["text"], got["label"], got["precedence"]) == (
        "contact north", {"level": "SECRET", "caveats": []}, "priority")
    alice.send("PRIVMSG #ops :[TOP SECRET] too high")
    assert "Cannot send to channel: [TOP SECRET] is above your clearance SECRET//REL TO GBR" in \
        await alice.numeric("404")
    carol.send("PRIVMSG #ops :[SECRET] above carol")                       # her clearance came in the welcome
    assert (await carol.numeric("404")).endswith(":Cannot send to channel: [SECRET] is above your clearance "
                                                 "RESTRICTED; nothing was sent")
    carol.send("JOIN #vault")                                              # the chat server refuses it
    why = "join: room 'vault' is labeled SECRET; your clearance RESTRICTED does not dominate it"
    assert await carol.numeric("473") == f":A.irc.t 473 carol #vault :Cannot join channel: {why}"
    assert await carol.expect(lambda l: " NOTICE carol :" in l) == \
        f":A.irc.t NOTICE carol :*** cannot join #vault: {why}"


def test_a_presence_frame_is_worked_out_once_for_every_session_and_joins_many_in_one_write() -> None:
    """A login storm's presence frame names many users and reaches every session: the room's members are asked
    for once per frame (not once per user per session), every session writes its JOINs in one Send, and sessions
    that listed the same nicks share the new list."""
    presence, nick_lists = Presence(), NickLists()
    members = {"ops": {"alice", "carol"} | {f"u{i}" for i in range(50)}}
    asked: list[str] = []

    def members_of(room: str) -> set[str]:
        asked.append(room)
        return members.get(room, set())

    sessions = []
    for nick in ("alice", "carol"):
        s = IrcSession(server_name="A.irc.t", site="A", network="t", presence=presence, nick_lists=nick_lists,
                       members_of=members_of)
        for line in (b"PASS secret", f"NICK {nick}".encode(), f"USER {nick} 0 * :A".encode()):
            s.receive(line, 0)
        s.on_frame({"type": "welcome", "site": "A", "user": nick, "sites": {}, "rooms": [],
                    "presence": {"A": ["alice", "carol"]}}, 0)
        s.on_frame({"type": "joined", "room": "ops", "history": []}, 0)
        sessions.append(s)
    asked.clear()
    came = {"type": "presence", "site": "A", "online": [f"u{i}" for i in range(60)], "offline": []}
    outs = [s.on_frame(came, 0) for s in sessions]
    assert asked == ["ops"]                                       # once for the frame, not per user or session
    assert [len(out) for out in outs] == [1, 1]                   # one write each
    assert _lines(outs[0]) == [f":u{i}!u{i}@A JOIN #ops" for i in range(50)]      # members only, in order
    assert _lines(outs[1]) == _lines(outs[0])
    a, c = (s._channels["ops"].nicks for s in sessions)
    assert a is c and len(a) == 52
    gone = {"type": "presence", "site": "A", "online": [], "offline": ["u3", "u4", "nobody"]}
    assert [_lines(s.on_frame(gone, 0)) for s in sessions] == [[":u3!u3@A PART #ops offline",
                                                               ":u4!u4@A PART #ops offline"]] * 2
    a, c = (s._channels["ops"].nicks for s in sessions)
    assert a is c and "u3" not in a and len(a) == 50


async def test_a_welcome_names_who_is_online_now_with_one_list_per_change(sites) -> None:
    """A login storm welcomes thousands between two presence ticks: each site's sorted list is made once per
    change of who is online there, and a welcome after a change names the change."""
    s = await sites()
    srv = s.servers["A"]
    await s.ws("A", "alice")
    await wait_until(lambda: "alice" in srv.core.published_online, "alice published online")
    first, again = srv.presence_snapshot(), srv.presence_snapshot()
    assert first["A"] == ["alice"] and again["A"] is first["A"]
    carol = await s.ws("A", "carol")
    await wait_until(lambda: "carol" in srv.core.published_online, "carol published online")
    now = srv.presence_snapshot()
    assert now["A"] == ["alice", "carol"] and now["A"] is not first["A"]     # made again after the change
    assert srv.presence_snapshot()["A"] is now["A"]                          # and once
    assert "alice" in carol.welcome["presence"]["A"]                         # her welcome names who was online
