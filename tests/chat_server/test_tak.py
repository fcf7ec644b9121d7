"""The TAK front end driven by pytak (a TAK client library no one here wrote): a TAK user chats with a web user
of the same site both ways and gets a delivered receipt; over mutual TLS with a user certificate from the
mission CA; TAK protocol v1 (protobuf) answered in kind; bad input dropped with the connection kept, and counted
against the flood limit; label marks both ways in a labeled mission."""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytak
import pytest
from chat_fake_rcm import FakeNetwork
from chat_missions import FAST_KDF, PASSWORD, add_users, make_mission
from tak_clients import PytakClient, geochat, logged_in, pli

from chat_server.accounts import Clearances
from chat_server.client import ChatClient
from chat_server.config import parse_chat_settings
from chat_server.server import ChatServer
from chat_server.store import ChatStore
from chat_server.tak.cot import CotEvent, GeoChat, Point, decode_proto, decode_xml, encode_proto, encode_xml
from chat_server.tak.stream import Frame, StreamReader
from contracts.mission import Mission, parse_mission

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def tak_site(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[tuple[Mission, ChatServer]]:
    tls = getattr(request, "param", False)
    mission = make_mission(tmp_path, ["A"], {"tak_rooms": {"Team Blue": "blue"}}, rcm={"tls": tls}, tak=("A",))
    if tls:
        from deploy import certs
        certs.create(mission)
    add_users(mission, "A", ["alice", "alpha"])
    srv = ChatServer(mission, "A", parse_chat_settings(mission.chat), rcm_connect=FakeNetwork(["A"]).connector("A"),
                     host="127.0.0.1", port=0, tak_port=0)
    await srv.start()
    await asyncio.wait_for(srv.rcm_connected.wait(), 5)
    yield mission, srv
    await srv.stop()


@pytest.fixture
async def labeled_tak_site(tmp_path: Path) -> AsyncIterator[ChatServer]:
    """Site A, cleared SECRET, with a TAK front end; alice (web) cleared SECRET, alpha (TAK) RESTRICTED."""
    raw = {"mission": {"name": "t", "data_dir": "var"}, "chat": {"kdf_n": FAST_KDF, "receipt_interval": 0.05},
           "labels": {"levels": ["UNCLASSIFIED", "RESTRICTED", "SECRET"], "default": "UNCLASSIFIED"},
           "sites": {"A": {"rcm": "127.0.0.1:20000", "chat": "127.0.0.1:21000", "tak": "127.0.0.1:21800",
                           "clearance": {"level": "SECRET"}}}}
    mission = parse_mission(raw, tmp_path)
    add_users(mission, "A", ["alice", "alpha"])
    store = ChatStore(mission.site_dir("A") / "chat" / "chat.db")
    clearances = Clearances(store.db, mission.labels, mission.clearance("A"))
    clearances.set("alice", mission.labels.parse("SECRET"))
    clearances.set("alpha", mission.labels.parse("RESTRICTED"))
    store.close()
    srv = ChatServer(mission, "A", parse_chat_settings(mission.chat), rcm_connect=FakeNetwork(["A"]).connector("A"),
                     host="127.0.0.1", port=0, tak_port=0)
    await srv.start()
    await asyncio.wait_for(srv.rcm_connected.wait(), 5)
    yield srv
    await srv.stop()


async def chat_both_ways(srv: ChatServer, tak: PytakClient, web: ChatClient) -> None:
    await tak.send(pli("alpha", "ANDROID-alpha"))
    await web.join("all")
    await asyncio.wait_for(logged_in(srv, "alpha"), 10)
    data, mid = geochat("alpha", "ANDROID-alpha", "contact north, over")
    await tak.send(data)
    got = await web.wait_for(lambda f: f.get("type") == "message" and f.get("user") == "alpha", 10)
    assert got["room"] == "all" and got["text"] == "contact north, over"
    delivered = await tak.expect(lambda e: e.type == "b-t-f-d")
    assert delivered.chat is not None and delivered.chat.message_id == mid
    await web.say("all", "copy, moving")
    ev = await tak.expect(lambda e: e.type == "b-t-f")
    assert ev.chat is not None and (ev.chat.sender_callsign, ev.chat.chatroom) == ("alice", "All Chat Rooms")
    assert ev.remarks == "copy, moving"


async def test_a_pytak_user_and_a_web_user_chat_both_ways_with_a_receipt(tak_site) -> None:
    mission, srv = tak_site
    tak = PytakClient(f"tcp://127.0.0.1:{srv.tak_front.port}")
    await tak.start()
    web = await ChatClient.connect(f"ws://127.0.0.1:{srv.port}/ws", "alice", PASSWORD)
    try:
        await chat_both_ways(srv, tak, web)
        # a mapped chatroom, joined on the way
        data, _ = geochat("alpha", "ANDROID-alpha", "blue team up", "Team Blue")
        await tak.send(data)
        await web.join("blue")
        msg = await web.wait_for(lambda f: f.get("type") == "message" and f.get("room") == "blue", 10)
        assert msg["text"] == "blue team up"
        # garbage, a bad event and an unknown type: dropped, the connection serves on
        await tak.send(b"<event uid='x'><point lat='99' lon='0'/></event>")
        await tak.send(b"not cot at all ")
        await tak.send(pytak.gen_cot(uid="m1", cot_type="b-m-p-s-m", lat=1, lon=1))
        await web.say("all", "still there?")
        ev = await tak.expect(lambda e: e.type == "b-t-f" and e.remarks == "still there?")
        assert ev.chat is not None
    finally:
        await web.close()
        await tak.close()


async def test_an_unknown_callsign_is_told_and_closed(tak_site) -> None:
    mission, srv = tak_site
    r, w = await asyncio.open_connection("127.0.0.1", srv.tak_front.port)
    w.write(pli("mallory", "ANDROID-m"))
    data = b""
    while chunk := await asyncio.wait_for(r.read(65536), 10):
        data += chunk
    events = [decode_xml(f.data) for f in StreamReader().feed(data) if isinstance(f, Frame)]
    assert any("mallory is no account" in (e.remarks or "") for e in events)
    w.close()


async def test_events_that_fail_to_decode_count_against_the_flood_limit(tak_site) -> None:
    """One write of "</event>" ten thousand times was ten thousand decodings and log lines, none of them a frame
    for the rate limits (the probe's tak/dtd kind): a bad event counts as a good one, and a flood of them closes
    the connection; the events before it were served."""
    mission, srv = tak_site
    r, w = await asyncio.open_connection("127.0.0.1", srv.tak_front.port)
    w.write(pli("alpha", "ANDROID-alpha"))
    await asyncio.wait_for(logged_in(srv, "alpha"), 10)
    # Five bursts' worth: the bucket refills while the server works through them (a log line each), and on a
    # loaded machine ten over the burst was refilled before it ran dry (the connection stayed open).
    w.write(b"</event>" * (srv.settings.rate_limit_burst * 5))
    while await asyncio.wait_for(r.read(65536), 10):      # until the server closes the connection
        pass
    assert not srv.tak_front.connections
    w.close()


async def test_a_protobuf_client_is_answered_in_protobuf(tak_site) -> None:
    mission, srv = tak_site
    r, w = await asyncio.open_connection("127.0.0.1", srv.tak_front.port)
    now = srv.clock()
    w.write(encode_proto(CotEvent(type="a-f-G-U-C", uid="ANDROID-p", time=now, start=now, stale=now + 60,
                                  point=Point(1.0, 2.0), callsign="alpha")))
    w.write(encode_proto(CotEvent(type="t-x-c-t", uid="ping", time=now, start=now, stale=now + 60,
                                  point=Point(0.0, 0.0))))
    reader = StreamReader()
    pong = None
    while pong is None:
        for f in reader.feed(await asyncio.wait_for(r.read(65536), 10)):
            assert isinstance(f, Frame)
            ev = decode_proto(f.data) if f.proto else decode_xml(f.data)
            if ev.type == "t-x-c-t-r":
                assert f.proto
                pong = ev
    w.close()


@pytest.mark.parametrize("tak_site", [True], indirect=True)
@pytest.mark.filterwarnings("ignore:ssl.OP_NO:DeprecationWarning", "ignore:Disabled TLS:UserWarning")   # pytak's
async def test_mutual_tls_logs_the_certificate_in(tak_site, tmp_path: Path) -> None:
    from deploy.user_certs import write_user_cert
    mission, srv = tak_site
    write_user_cert(mission, "alpha", tmp_path / "certs")
    ca = mission.site_dir("A") / "tls" / "ca.pem"
    tak = PytakClient(f"tls://127.0.0.1:{srv.tak_front.port}", PYTAK_TLS_CLIENT_CERT=str(tmp_path / "certs/alpha.pem"),
                      PYTAK_TLS_CLIENT_KEY=str(tmp_path / "certs/alpha-key.pem"), PYTAK_TLS_CLIENT_CAFILE=str(ca),
                      PYTAK_TLS_DONT_CHECK_HOSTNAME="1")
    await tak.start()
    web = await ChatClient.connect(f"wss://127.0.0.1:{srv.port}/ws", "alice", PASSWORD, ca_file=ca)
    try:
        # the certificate says alpha: the callsign the client shows is its own business
        await tak.send(pli("Alpha One", "ANDROID-alpha"))
        await asyncio.wait_for(logged_in(srv, "alpha"), 10)
        data, _ = geochat("Alpha One", "ANDROID-alpha", "over TLS")
        await tak.send(data)
        await web.join("all")
        got = await web.wait_for(lambda f: f.get("type") == "message" and f.get("text") == "over TLS", 10)
        assert got["user"] == "alpha"
    finally:
        await web.close()
        await tak.close()
    # a site's certificate (the same CA) is no user's
    import ssl
    ctx = ssl.create_default_context(cafile=str(ca))
    ctx.check_hostname = False
    ctx.load_cert_chain(mission.site_dir("A") / "tls" / "cert.pem", mission.site_dir("A") / "tls" / "key.pem")
    r, w = await asyncio.open_connection("127.0.0.1", srv.tak_front.port, ssl=ctx)
    assert await asyncio.wait_for(r.read(), 10) == b""
    w.close()
    assert not any(c.user for c in srv.tak_front.connections if c.tak.account == "A")


def test_geochat_helper_round_trips() -> None:
    data, mid = geochat("alpha", "U", "hi")
    ev = decode_xml(data)
    assert ev.chat == GeoChat("All Chat Rooms", "All Chat Rooms", "alpha", mid, "U") and ev.remarks == "hi"
    assert decode_xml(encode_xml(ev)).chat == ev.chat


async def test_positions_travel_both_ways_between_tak_and_web(tak_site) -> None:
    mission, srv = tak_site
    tak = PytakClient(f"tcp://127.0.0.1:{srv.tak_front.port}")
    await tak.start()
    web = await ChatClient.connect(f"ws://127.0.0.1:{srv.port}/ws", "alice", PASSWORD)
    try:
        await tak.send(pli("alpha", "ANDROID-alpha", stale=90))
        await asyncio.wait_for(logged_in(srv, "alpha"), 10)
        await web.report_position(10.5, 20.25, unit="Bravo 2")
        ev = await tak.expect(lambda e: e.type.startswith("a-") and e.callsign == "Bravo 2")
        assert (ev.uid, ev.point.lat, ev.point.lon) == ("RCM.A.Bravo 2", 10.5, 20.25) and ev.stale > srv.clock()

        async def alpha_reported() -> list[dict[str, Any]]:
            while not (units := [p for p in await web.positions() if p.get("unit") == "alpha"]):
                await asyncio.sleep(0.02)
            return units
        [alpha] = await asyncio.wait_for(alpha_reported(), 10)
        assert (alpha["site"], alpha["lat"], alpha["lon"]) == ("A", 51.5, -0.1)
        assert 90 <= alpha["expires_at"] - alpha["at"] < 100      # the PLI's stale time, not position_max_age
    finally:
        await web.close()
        await tak.close()


async def test_a_tak_user_in_a_labeled_mission_reads_and_writes_label_marks(labeled_tak_site) -> None:
    srv = labeled_tak_site
    tak = PytakClient(f"tcp://127.0.0.1:{srv.tak_front.port}")
    await tak.start()
    web = await ChatClient.connect(f"ws://127.0.0.1:{srv.port}/ws", "alice", PASSWORD)
    try:
        await tak.send(pli("alpha", "ANDROID-alpha"))
        await web.join("all")
        await asyncio.wait_for(logged_in(srv, "alpha"), 10)
        await web.request({"type": "say", "room": "all", "text": "above alpha", "client_id": "w1",
                           "label": "SECRET"})
        await web.request({"type": "say", "room": "all", "text": "copy", "client_id": "w2", "label": "RESTRICTED"})
        ev = await tak.expect(lambda e: e.type == "b-t-f" and e.chat is not None and e.chat.sender_callsign == "alice")
        assert ev.remarks == "[RESTRICTED] copy"                  # the SECRET line before it never came
        for text in ("[RESTRICTED] moving", "at the floor"):
            await tak.send(geochat("alpha", "ANDROID-alpha", text)[0])
        for label, text in (("RESTRICTED", "moving"), ("UNCLASSIFIED", "at the floor")):
            got = await web.wait_for(lambda f: f.get("type") == "message" and f.get("user") == "alpha", 10)
            assert (got["text"], got["label"]) == (text, {"level": label, "caveats": []})
        await tak.send(geochat("alpha", "ANDROID-alpha", "[SECRET] too high")[0])
        told = await tak.expect(lambda e: e.type == "b-t-f" and "was not sent" in (e.remarks or ""))
        assert told.remarks == ("your message to All Chat Rooms was not sent: [SECRET] is above your clearance "
                                "RESTRICTED; nothing was sent")
        assert not [e for e in tak.seen if "above alpha" in (e.remarks or "")]
    finally:
        await web.close()
        await tak.close()
