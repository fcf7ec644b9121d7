"""TEST HELPER: a TAK client driven by pytak (a TAK client library no one here wrote), and the CoT events an
ATAK user sends, built with pytak's own helpers; shared by the TAK tests (test_tak.py, test_tak_sites.py).

``PytakClient`` runs pytak's CLITool on one connection: its TX worker sends what ``send`` queues, its RX worker
queues what the server writes, and ``expect`` waits for the first event (decoded by the front end's own CoT
decoder) that matches. ``pli`` is a position report, ``geochat`` a GeoChat in a chatroom, as ATAK writes them.
``logged_in`` waits until a chat server's TAK front end has logged a user in and joined it to ``all``.
"""
from __future__ import annotations

import asyncio
import configparser
import uuid
from typing import Any

import pytak

from chat_server.server import ChatServer
from chat_server.tak.cot import CotEvent, decode_xml


def pli(callsign: str, uid: str, lat: float = 51.5, lon: float = -0.1, stale: float | None = None) -> bytes:
    """A position report as pytak writes it (stale: seconds it holds; pytak's default is 120)."""
    return pytak.gen_cot(lat=lat, lon=lon, uid=uid, cot_type="a-f-G-U-C", callsign=callsign, stale=stale)


def geochat(callsign: str, uid: str, text: str, chatroom: str = "All Chat Rooms") -> tuple[bytes, str]:
    """A GeoChat as ATAK writes it (built with pytak's CoT helpers)."""
    mid = str(uuid.uuid4())
    detail = pytak.cot_detail(flow_tag=False)
    chat = pytak.functions.ET.SubElement(detail, "__chat", {
        "parent": "RootContactGroup", "groupOwner": "false", "messageId": mid, "chatroom": chatroom,
        "id": chatroom, "senderCallsign": callsign})
    pytak.functions.ET.SubElement(chat, "chatgrp", {"uid0": uid, "uid1": chatroom, "id": chatroom})
    pytak.functions.ET.SubElement(detail, "link", {"uid": uid, "type": "a-f-G-U-C", "relation": "p-p"})
    pytak.add_remarks(detail, [text])
    ev = pytak.cot_event(uid=f"GeoChat.{uid}.{chatroom}.{mid}", cot_type="b-t-f", how="h-g-i-g-o", detail=detail,
                         lat=51.5, lon=-0.1)
    return pytak.serialize_cot(ev), mid


class PytakClient:
    """pytak's CLITool on one connection: its TX worker sends what we queue, its RX worker queues what comes."""

    def __init__(self, url: str, **tls: str) -> None:
        cp = configparser.ConfigParser()
        cp["tak"] = {"COT_URL": url, **tls}
        self.tool = pytak.CLITool(cp["tak"])
        self.seen: list[CotEvent] = []

    async def start(self) -> None:
        await self.tool.setup()
        for task in self.tool.tasks:
            self.tool.run_task(task)

    async def send(self, data: bytes) -> None:
        await self.tool.tx_queue.put(data)

    async def expect(self, pred: Any, timeout: float = 10.0) -> CotEvent:
        for ev in self.seen:
            if pred(ev):
                self.seen.remove(ev)
                return ev

        async def read() -> CotEvent:
            while True:
                ev = decode_xml(await self.tool.rx_queue.get())
                if pred(ev):
                    return ev
                self.seen.append(ev)
        return await asyncio.wait_for(read(), timeout)

    async def close(self) -> None:
        for t in self.tool.running_tasks:
            t.cancel()
        await asyncio.gather(*self.tool.running_tasks, return_exceptions=True)
        for worker in self.tool.tasks:
            if isinstance(worker, pytak.TXWorker):
                worker.writer.close()


async def logged_in(srv: ChatServer, user: str) -> None:
    """Until ``srv``'s TAK front end has ``user`` logged in and in the room ``all``."""
    while not srv.tak_front or not any(c.user == user and c.tak.joined >= {"all"} for c in srv.tak_front.connections):
        await asyncio.sleep(0.01)
