"""Property tests (hypothesis): the chat protocol parser, the payload decoder, and the WebSocket
handler under random frames. The parser returns a valid request or a FrameError with a known code;
the handler answers each hostile frame with an error frame or closes that connection with a reason,
never crashes, and another user's session is unaffected. (The long coverage-guided run is
bench/fuzz_chat.py.)"""
from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import msgpack
import pytest
from chat_fake_rcm import FakeNetwork
from chat_missions import PASSWORD, add_users, make_mission
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chat_server import protocol as P
from chat_server.client import ChatClient
from chat_server.config import parse_chat_settings
from chat_server.payload import PayloadError, decode_payload
from chat_server.server import ChatServer

pytestmark = pytest.mark.timeout(120)



CODES = {v for k, v in vars(P.ErrorCode).items() if not k.startswith("_")}
FIELDS = ["type", "id", "user", "password", "session", "last_n", "room", "text", "client_id", "before",
          "after_n", "limit", "members"]
scalars = (st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False)
           | st.text(max_size=80) | st.sampled_from(["ops", "alice", "A:1", "#x", " ", "\ud800", "x" * 70]))
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=5)
                           | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=12)
frame_objects = st.fixed_dictionaries(
    {"type": st.sampled_from(list(P.CLIENT_TYPES) + ["welcome", "", "SAY"]) | json_values},
    optional={name: json_values for name in FIELDS[1:]})


def frame_texts() -> st.SearchStrategy[str]:
    def dumps(obj: Any) -> str:
        try:
            return json.dumps(obj)
        except (ValueError, UnicodeEncodeError):
            return json.dumps(obj, ensure_ascii=True)
    return st.one_of(st.text(max_size=300), frame_objects.map(dumps),
                     json_values.map(lambda v: json.dumps(v, ensure_ascii=True)))


def check_request(req: P.Request, max_text: int, max_members: int) -> None:
    f = req.fields
    assert req.type in P.CLIENT_TYPES
    if "room" in f:
        assert P.ROOM_NAME.match(f["room"])
    if req.type == "say":
        assert f["text"].strip() and len(f["text"].encode("utf-8")) <= max_text
        assert 0 < len(f["client_id"]) <= P.MAX_CLIENT_ID
    if req.type == "hello":
        assert P.USER_NAME.match(f["user"]) and ("password" in f) != ("session" in f)
    if req.type == "create":
        assert len(f["members"]) <= max_members and all(P.USER_NAME.match(m) for m in f["members"])
    assert all(not isinstance(v, (bool, float, dict)) for v in f.values())


@settings(max_examples=600, deadline=None)
@given(frame_texts())
def test_parser_returns_a_valid_request_or_a_named_error(text: str) -> None:
    try:
        req = P.parse_client_frame(text, 200, 4)
    except P.FrameError as e:
        assert e.code in CODES and e.message
        json.loads(P.encode(P.error(e.code, e.message, e.in_reply_to)))
    else:
        check_request(req, 200, 4)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.binary(max_size=200),
                 st.recursive(st.none() | st.booleans() | st.integers(-2**63, 2**64 - 1) | st.floats()
                              | st.text(max_size=20) | st.binary(max_size=20),
                              lambda inner: st.lists(inner, max_size=4)
                              | st.dictionaries(st.sampled_from(["k", "r", "u", "t", "s", "c", "o", "m", "g",
                                                                 "on", "rm", "ids", "b"]) | st.text(max_size=3),
                                                inner, max_size=6), max_leaves=15)
                 .map(lambda v: msgpack.packb(v, use_bin_type=True))))
def test_payload_decoder_returns_a_payload_or_payload_error(data: bytes) -> None:
    try:
        decode_payload(data)
    except PayloadError:
        pass


# --- the WebSocket handler under random frames -------------------------------------------------
class ServerThread:
    """One chat server (fake RCM) in its own thread and event loop, shared by the examples."""

    def __init__(self, tmp: Path) -> None:
        self.mission = make_mission(tmp, ["A"], {"rate_limit_frames": 10_000, "rate_limit_burst": 10_000,
                                                 "user_rate_limit_frames": 10_000, "user_rate_limit_burst": 10_000,
                                                 "max_frame_bytes": 4096, "max_text_bytes": 1024,
                                                 "max_sessions_per_user": 1000})
        add_users(self.mission, "A", ["mallory", "victim"])
        self.ready = threading.Event()
        self.port = 0
        self.loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self.thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)

    async def _main(self) -> None:
        self.loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        srv = ChatServer(self.mission, "A", parse_chat_settings(self.mission.chat),
                         rcm_connect=FakeNetwork(["A"]).connector("A"), host="127.0.0.1", port=0)
        await srv.start()
        await srv.rcm_connected.wait()
        self.server, self.port = srv, srv.port
        self.ready.set()
        await self._stop.wait()
        await srv.stop()

    def __enter__(self) -> ServerThread:
        self.thread.start()
        assert self.ready.wait(20)
        return self

    def __exit__(self, *exc: Any) -> None:
        assert self.loop is not None and self._stop is not None
        self.loop.call_soon_threadsafe(self._stop.set)
        self.thread.join(20)


class ErrorLog(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    errors = ErrorLog()
    logging.getLogger("chat_server").addHandler(errors)
    try:
        with ServerThread(tmp_path_factory.mktemp("fuzzws")) as s:
            s.errors = errors            # type: ignore[attr-defined]
            yield s
    finally:
        logging.getLogger("chat_server").removeHandler(errors)


ws_frames = st.lists(st.one_of(frame_texts().map(lambda t: ("text", t)),
                               st.binary(max_size=64).map(lambda b: ("binary", b)),
                               st.integers(4097, 9000).map(lambda n: ("text", "x" * n))),
                     min_size=1, max_size=12)


async def attack(port: int, login: bool, frames: list[tuple[str, Any]]) -> None:
    url = f"ws://127.0.0.1:{port}/ws"
    victim = await ChatClient.connect(url, "victim", PASSWORD)
    http = aiohttp.ClientSession()
    try:
        await victim.join("ops")
        ws = await http.ws_connect(url, max_msg_size=0)
        if login:
            await ws.send_str(json.dumps({"type": "hello", "user": "mallory", "password": PASSWORD}))
        closed: aiohttp.WSMessage | None = None
        for kind, data in frames:
            if ws.closed:
                break
            await (ws.send_str(data) if kind == "text" else ws.send_bytes(data))
            await ws.send_str(json.dumps({"type": "rooms", "id": "sync"}))   # answered after every reply
            while closed is None:
                msg = await asyncio.wait_for(ws.receive(), 10)
                if msg.type != aiohttp.WSMsgType.TEXT:
                    closed = msg
                    break
                frame = json.loads(msg.data)
                assert "type" in frame
                if frame["type"] == "error":
                    assert frame["code"] in CODES and frame["code"] != "internal", frame
                if frame.get("id") == "sync" or frame.get("in_reply_to") == "sync":
                    break
            if closed is not None:
                break
        if closed is not None:          # only the documented closes: oversized frame, with a reason
            assert closed.type == aiohttp.WSMsgType.CLOSE and closed.data in (1008, 1009) and closed.extra, closed
        await ws.close()
        ack = await victim.say("ops", "still fine")                   # the other user is unaffected
        assert ack["type"] == "ack"
        await victim.wait_for(lambda f: f["type"] == "message" and f["msg_id"] == ack["msg_id"], 10)
    finally:
        await http.close()
        await victim.close()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(login=st.booleans(), frames=ws_frames)
def test_websocket_handler_survives_random_frames(server: ServerThread, login: bool,
                                                  frames: list[tuple[str, Any]]) -> None:
    asyncio.run(attack(server.port, login, frames))
    assert not server.errors.records, [r.getMessage() for r in server.errors.records]  # type: ignore[attr-defined]
