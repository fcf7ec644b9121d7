"""What the IRC front end's tests share: ``IrcTestClient`` (a raw IRC connection), ``IrcSites`` (sites A,
with an IRC port, and B: chat servers on a fake RCM, in this event loop; conftest.py's ``sites`` fixture
makes and closes them); and, sans-IO, ``_joined_session`` (alice registered at A and in #ops, by hand-written
chat frames) and ``_lines`` (the IRC lines of a session's actions)."""
from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from chat_fake_rcm import FakeNetwork
from chat_missions import FAST_KDF, PASSWORD, add_users

from chat_server.accounts import Clearances
from chat_server.client import ChatClient
from chat_server.config import parse_chat_settings
from chat_server.irc import IrcSession
from chat_server.irc_state import Send
from chat_server.server import ChatServer
from chat_server.store import ChatStore
from contracts.labels import Scheme, join
from contracts.mission import parse_mission


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
                  ssl: Any = None, caps: str = "") -> IrcTestClient:
        """An IRC client at A; with ``nick``, registering (``caps``: the IRCv3 capabilities it asks for first)."""
        r, w = await asyncio.open_connection("127.0.0.1", self.servers["A"].irc_front.port, ssl=ssl)
        c = IrcTestClient(r, w)
        self.clients.append(c)
        if nick is not None:
            if caps:
                for line in ("CAP LS 302", f"CAP REQ :{caps}", "CAP END"):
                    c.send(line)
            if password is not None:
                c.send(f"PASS :{password}")
            c.send(f"NICK {nick}")
            c.send(f"USER {nick} 0 * :{nick} the operator")
        return c

    async def alice_and_bob_in_ops(self) -> tuple[IrcTestClient, ChatClient]:
        """alice over IRC at A, registered and in #ops (its names listed), and bob over WebSocket at B in ops."""
        irc = await self.irc("alice")
        await irc.numeric("376")
        irc.send("JOIN #ops")
        await irc.numeric("366")
        bob = await self.ws("B", "bob")
        await bob.join("ops")
        return irc, bob

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
