"""A TAK user at site A (the pytak client library, no one here wrote it) and a web user at site C, with the A-C
link cut, so that real ``python -m rcm`` processes (``routing = "relay"``) carry everything through B: GeoChat
and chat both ways (with TAK's delivered receipt from C), C's positions as PLIs on the TAK client, and the TAK
client's PLI at C. The chat servers of A and C run in this process on the RCM servers' local sockets (B needs
none: its RCM relays); only the A-C link has a link proxy, cut (reset) once A and C have met directly."""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from chat_missions import FAST_KDF, PASSWORD, add_users
from tak_clients import PytakClient, geochat, logged_in, pli
from testkit import wait_until

from chat_server.client import ChatClient
from chat_server.config import parse_chat_settings
from chat_server.server import ChatServer
from contracts.mission import Mission, load_mission
from contracts.mission_writer import write_mission_file
from faultinject.checkers.journal import load_journals
from faultinject.links import LinkSet
from faultinject.missions import free_ports
from faultinject.procs import LocalRcm

pytestmark = [pytest.mark.slow, pytest.mark.timeout(60)]

SITES = ["A", "B", "C"]
# Peers are suspected after a missed heartbeat_timeout: 1 s (as in the RCM relay tests) so that a process short
# of the CPU for a moment is not; the cut itself is a reset, noticed at once.
RCM = {"routing": "relay", "heartbeat_timeout": 1.0, "liveness_timeout": 2.0, "silence_timeout": 3.0,
       "suspect_timeout": 30.0, "reconnect_period": 0.3, "ack_interval": 0.05}
CHAT = {"kdf_n": FAST_KDF, "receipt_interval": 0.05, "presence_interval": 0.05, "rcm_ack_interval": 0.05}


@dataclass
class Sites:
    mission: Mission
    links: LinkSet
    chat: dict[str, ChatServer]


def write_sites(path: Path) -> Path:
    """Three sites on free loopback ports; A has a TAK port (a placeholder: the server binds port 0); A and C
    dial each other through a link proxy of their own, every other pair directly."""
    ports = free_ports(3 * 2 + 3)
    sites: dict[str, dict[str, Any]] = {s: {"rcm": f"127.0.0.1:{ports[2 * i]}", "chat": f"127.0.0.1:{ports[2 * i + 1]}"}
                                        for i, s in enumerate(SITES)}
    sites["A"]["tak"] = f"127.0.0.1:{ports[6]}"
    sites["A"]["dial"] = {"C": f"127.0.0.1:{ports[7]}"}
    sites["C"]["dial"] = {"A": f"127.0.0.1:{ports[8]}"}
    return write_mission_file(path, {"mission": {"name": "taksites", "data_dir": "var"}, "rcm": RCM, "chat": CHAT,
                                     "sites": sites})


@pytest.fixture
async def sites(tmp_path: Path) -> AsyncIterator[Sites]:
    path = write_sites(tmp_path / "mission.toml")
    mission = load_mission(path)
    add_users(mission, "A", ["alpha"])
    add_users(mission, "C", ["carol"])
    links = LinkSet(mission)
    rcm = LocalRcm(path)
    chat: dict[str, ChatServer] = {}
    await links.start()
    try:
        await asyncio.to_thread(rcm.start_all)
        for s, tak in (("A", 0), ("C", None)):
            chat[s] = ChatServer(mission, s, parse_chat_settings(mission.chat), host="127.0.0.1", port=0,
                                 tak_port=tak)
            await chat[s].start()
        yield Sites(mission, links, chat)
    finally:
        for srv in chat.values():
            await srv.stop()
        await asyncio.to_thread(rcm.stop_all)
        await links.close()


def reached(srv: ChatServer, peer: str, via: str | None) -> bool:
    return srv.core.status.get(peer) == "connected" and srv.core.via.get(peer) == via


async def test_a_tak_user_and_a_web_user_across_a_cut_link_chat_and_see_positions_through_the_relay(sites) -> None:
    a, c = sites.chat["A"], sites.chat["C"]
    await wait_until(lambda: reached(a, "C", None) and reached(c, "A", None) and reached(a, "B", None)
                     and reached(c, "B", None), "A and C connected directly, and to B", timeout=20)
    await sites.links.cut("A", "C")
    await wait_until(lambda: reached(a, "C", "B") and reached(c, "A", "B"), "A and C reach each other via B",
                     timeout=20)
    tak = PytakClient(f"tcp://127.0.0.1:{a.tak_front.port}")
    await tak.start()
    carol = await ChatClient.connect(f"ws://127.0.0.1:{c.port}/ws", "carol", PASSWORD)
    try:
        assert carol.welcome["sites"]["A"] == "connected" and carol.welcome["via"] == {"A": "B"}
        await carol.join("all")
        await tak.send(pli("alpha", "ANDROID-alpha", lat=48.8566, lon=2.3522))      # ATAK's first event: log-in
        await asyncio.wait_for(logged_in(a, "alpha"), 10)
        units = await carol.positions()     # from now on new reports come as position events

        # GeoChat from A reaches the web user at C, and C's delivery comes back to A as TAK's delivered receipt.
        data, mid = geochat("alpha", "ANDROID-alpha", "contact north, over")
        await tak.send(data)
        got = await carol.wait_for(lambda f: f.get("type") == "message" and f.get("user") == "alpha", 10)
        assert (got["room"], got["origin"], got["text"]) == ("all", "A", "contact north, over")
        delivered = await tak.expect(lambda e: e.type == "b-t-f-d")
        assert delivered.chat is not None and delivered.chat.message_id == mid

        # The web user's answer reaches the TAK user as GeoChat.
        await carol.say("all", "copy, moving to you")
        ev = await tak.expect(lambda e: e.type == "b-t-f" and e.chat is not None and e.chat.sender_callsign == "carol")
        assert ev.chat is not None and ev.chat.chatroom == "All Chat Rooms" and ev.remarks == "copy, moving to you"

        # C's position reaches the TAK user as a PLI of the unit.
        await carol.report_position(-33.8688, 151.2093)
        pos = await tak.expect(lambda e: e.type.startswith("a-") and e.callsign == "carol")
        assert (pos.uid, pos.point.lat, pos.point.lon) == ("RCM.C.carol", -33.8688, 151.2093)

        # The TAK user's PLI is a position of unit alpha at C (in the snapshot, or as an event after it).
        alpha = next((u for u in units if u.get("unit") == "alpha"), None) or await carol.wait_for(
            lambda f: f.get("type") == "position" and f.get("unit") == "alpha", 10)
        assert (alpha["site"], alpha["user"], alpha["lat"], alpha["lon"]) == ("A", "alpha", 48.8566, 2.3522)
    finally:
        await carol.close()
        await tak.close()
    # The relay carried it: C journaled the GeoChat's delivery as come through B, and A and C never met again.
    records, _, _ = load_journals(sites.mission.data_dir)
    [deliver] = [r for r in records if r.get("kind") == "deliver" and r.get("site") == "C" and r["msg_id"] ==
                 got["msg_id"]]
    assert deliver["via"] == ["B"]
    assert reached(a, "C", "B") and reached(c, "A", "B")
