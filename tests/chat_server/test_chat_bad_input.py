"""Bad input over a real WebSocket: an error frame naming the problem, the connection stays open,
nobody else is affected; floods and oversized frames close the connection with a reason."""
from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest
from testkit import wait_until

pytestmark = pytest.mark.timeout(60)


async def raw(url: str):
    http = aiohttp.ClientSession()
    ws = await http.ws_connect(url, max_msg_size=0)
    return http, ws


async def next_json(ws) -> dict:
    """The next frame, skipping presence pushes (they come whenever someone logs in or out)."""
    while True:
        msg = await asyncio.wait_for(ws.receive(), 5)
        assert msg.type == aiohttp.WSMsgType.TEXT, msg
        frame = json.loads(msg.data)
        if frame["type"] != "presence":
            return frame


async def login(ws, user="alice"):
    await ws.send_str(json.dumps({"type": "hello", "user": user, "password": "correct horse"}))
    w = await next_json(ws)
    assert w["type"] == "welcome"


BAD_FRAMES = [
    ("{not json", "bad_json", "not valid JSON"),
    ("[1, 2]", "bad_frame", "JSON object"),
    ('{"room": "ops"}', "missing_field", "'type'"),
    ('{"type": 7}', "bad_field", "'type'"),
    ('{"type": "dance"}', "unknown_type", "dance"),
    ('{"type": "join"}', "missing_field", "'room'"),
    ('{"type": "join", "room": 5}', "bad_field", "'room'"),
    ('{"type": "join", "room": "no spaces allowed"}', "bad_field", "room"),
    ('{"type": "join", "room": "ops\\n"}', "bad_field", "room"),              # "$" once let a trailing newline in
    ('{"type": "\\ud800"}', "unknown_type", "unknown frame type"),             # echoed back: a lone surrogate
    ('{"type": "say", "room": "ops", "text": "hi"}', "missing_field", "client_id"),
    ('{"type": "say", "room": "ops", "text": ["hi"], "client_id": "x"}', "bad_field", "'text'"),
    ('{"type": "say", "room": "ops", "text": "  ", "client_id": "x"}', "bad_field", "empty"),
    ('{"type": "history", "room": "ops", "limit": "ten"}', "bad_field", "'limit'"),
    ('{"type": "history", "room": "ops", "limit": 0}', "bad_field", "limit"),
    ('{"type": "history", "room": "ops", "before": "A:999"}', "bad_field", "A:999"),
    ('{"type": "create", "room": "x", "members": ["ok", 3]}', "bad_field", "members"),
    ('{"type": "create", "room": "x", "members": ["bob\\n"]}', "bad_field", "members"),
    ('{"type": "hello", "user": "alice", "password": "correct horse"}', "already_authenticated", "alice"),
    ('{"type": "leave", "room": "never"}', "not_joined", "never"),
    ('{"type": "say", "room": "never", "text": "x", "client_id": "c"}', "not_joined", "never"),
]


async def test_bad_frames_get_named_errors_and_the_connection_stays_open(cluster_factory):
    cl = await cluster_factory(["A"], users={"A": ["alice", "bob"]})
    bob = await cl.client("A", "bob")
    await bob.join("ops")
    http, ws = await raw(cl.url("A"))
    try:
        await login(ws)
        await ws.send_str(json.dumps({"type": "join", "room": "ops"}))
        assert (await next_json(ws))["type"] == "joined"
        for text, code, words in BAD_FRAMES:
            await ws.send_str(text)
            err = await next_json(ws)
            assert err["type"] == "error" and err["code"] == code, (text, err)
            assert words in err["message"], (text, err)
        await ws.send_bytes(b"\x00\x01")
        err = await next_json(ws)
        assert (err["type"], err["code"]) == ("error", "bad_frame")
        # Still open and working, and bob saw nothing of it.
        await ws.send_str(json.dumps({"type": "say", "room": "ops", "text": "still here", "client_id": "c1",
                                      "id": 42}))
        frames = [await next_json(ws)]   # the ack, the message itself and our site's receipt, in any order
        while len(frames) < 3:
            frames.append(await next_json(ws))
        assert sorted(f["type"] for f in frames) == ["ack", "message", "receipt"]
        assert [f["id"] for f in frames if f["type"] == "ack"] == [42]
        m = await bob.next_event(5)
        while m["type"] != "message":
            m = await bob.next_event(5)
        assert m["text"] == "still here"
        assert not [e for e in bob.drain_events() if e["type"] == "error"]
    finally:
        await ws.close()
        await http.close()


async def test_errors_name_the_request_they_answer(cluster_factory):
    cl = await cluster_factory(["A"], users={"A": ["alice"]})
    http, ws = await raw(cl.url("A"))
    try:
        await login(ws)
        await ws.send_str(json.dumps({"type": "join", "room": "bad room", "id": "j1"}))
        assert (await next_json(ws))["in_reply_to"] == "j1"
        await ws.send_str(json.dumps({"type": "say", "room": "nope", "text": "t", "client_id": "cid-9"}))
        assert (await next_json(ws))["in_reply_to"] == "cid-9"
        await ws.send_str(json.dumps({"type": "rooms", "id": {"nested": 1}}))
        err = await next_json(ws)
        assert err["code"] == "bad_field" and "'id'" in err["message"]
        # An id with a lone surrogate (valid JSON, not encodable as UTF-8) comes back as the same string.
        await ws.send_str('{"type": "rooms", "id": "r\\ud800"}')
        reply = await next_json(ws)
        assert reply["type"] == "rooms" and reply["id"] == "r\ud800"
    finally:
        await ws.close()
        await http.close()


async def test_commands_before_hello_are_refused(cluster_factory):
    cl = await cluster_factory(["A"], users={"A": ["alice"]})
    http, ws = await raw(cl.url("A"))
    try:
        for frame in ({"type": "join", "room": "ops"}, {"type": "rooms"},
                      {"type": "say", "room": "ops", "text": "x", "client_id": "1"}):
            await ws.send_str(json.dumps(frame))
            err = await next_json(ws)
            assert err["code"] == "not_authenticated" and frame["type"] in err["message"]
        await ws.send_str(json.dumps({"type": "hello", "user": "alice"}))
        assert (await next_json(ws))["code"] == "missing_field"
        await ws.send_str(json.dumps({"type": "hello", "user": "alice", "password": "nope"}))
        assert (await next_json(ws))["code"] == "auth_failed"
        await login(ws)   # the same connection can still log in
    finally:
        await ws.close()
        await http.close()


async def test_too_long_text_is_refused_but_oversized_frame_closes(cluster_factory):
    cl = await cluster_factory(["A"], users={"A": ["alice", "bob"]},
                               chat={"max_text_bytes": 1000, "max_frame_bytes": 4096,
                                     "outbound_queue_bytes": 65536})
    bob = await cl.client("A", "bob")
    http, ws = await raw(cl.url("A"))
    try:
        await login(ws)
        await ws.send_str(json.dumps({"type": "join", "room": "ops"}))
        await next_json(ws)
        await ws.send_str(json.dumps({"type": "say", "room": "ops", "text": "é" * 501, "client_id": "c"}))
        err = await next_json(ws)
        assert err["code"] == "too_large" and "1002 bytes" in err["message"] and "1000" in err["message"]
        await ws.send_str(json.dumps({"type": "say", "room": "ops", "text": "x" * 5000, "client_id": "c"}))
        msg = await asyncio.wait_for(ws.receive(), 5)
        assert msg.type == aiohttp.WSMsgType.CLOSE and msg.data == 1009
        assert "4096" in msg.extra or "size" in msg.extra.lower()
    finally:
        await ws.close()
        await http.close()
    assert (await bob.rooms()) is not None     # others are unaffected


async def test_flood_closes_with_a_reason(cluster_factory):
    cl = await cluster_factory(["A"], users={"A": ["alice", "bob"]},
                               chat={"rate_limit_frames": 5, "rate_limit_burst": 10})
    bob = await cl.client("A", "bob")
    http, ws = await raw(cl.url("A"))
    try:
        await login(ws)
        for _ in range(30):
            if ws.closed:
                break
            await ws.send_str(json.dumps({"type": "rooms"}))
        while True:
            msg = await asyncio.wait_for(ws.receive(), 5)
            if msg.type != aiohttp.WSMsgType.TEXT:
                break
        assert msg.type == aiohttp.WSMsgType.CLOSE and msg.data == 1008 and "flood" in msg.extra
    finally:
        await ws.close()
        await http.close()
    await bob.join("ops")                      # others are unaffected


async def test_hello_timeout_closes_idle_connections(cluster_factory):
    cl = await cluster_factory(["A"], chat={"hello_timeout": 0.2})
    http, ws = await raw(cl.url("A"))
    try:
        msg = await asyncio.wait_for(ws.receive(), 5)
        assert msg.type == aiohttp.WSMsgType.CLOSE and "hello" in msg.extra
    finally:
        await ws.close()
        await http.close()


async def test_slow_client_is_disconnected_and_never_stalls_the_room(cluster_factory):
    cl = await cluster_factory(["A"], users={"A": ["alice", "slow", "fast"]},
                               chat={"max_text_bytes": 8000, "max_frame_bytes": 16384,
                                     "outbound_queue_bytes": 65536, "rate_limit_frames": 10000,
                                     "rate_limit_burst": 10000})
    srv = cl.servers["A"]
    # The slow client: a raw socket with a tiny receive buffer that never reads after login.
    import socket
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", srv.port))
    sock.setblocking(False)
    reader, writer = await asyncio.open_connection(sock=sock)
    writer.write(b"GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                 b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
    await reader.readuntil(b"\r\n\r\n")

    def masked(obj):
        data = json.dumps(obj).encode()
        mask = b"\x01\x02\x03\x04"
        body = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
        return bytes([0x81, 0x80 | 126]) + len(data).to_bytes(2, "big") + mask + body
    writer.write(masked({"type": "hello", "user": "slow", "password": "correct horse"}))
    writer.write(masked({"type": "join", "room": "ops"}))
    await writer.drain()
    await wait_until(lambda: "slow" in srv.user_sessions and srv.room_sessions.get("ops"),
                     "the slow client logged in and in the room", interval=0.02)
    fast = await cl.client("A", "fast")
    await fast.join("ops")
    alice = await cl.client("A", "alice")
    await alice.join("ops")
    slow_session = next(iter(srv.user_sessions["slow"]))
    sent = 0
    while not slow_session.closed and sent < 2000:
        await alice.say("ops", f"{sent} " + "x" * 7000)
        sent += 1
    assert slow_session.closed and "slow consumer" in slow_session.close_reason
    assert sent < 2000
    # The fast member got every message, in order.
    got = []
    while len(got) < sent:
        ev = await fast.next_event(5)
        if ev["type"] == "message":
            got.append(int(ev["text"].split()[0]))
    assert got == list(range(sent))
    writer.close()


async def test_integers_beyond_63_bits_get_a_named_error_not_an_internal_one(cluster_factory):
    cl = await cluster_factory(["A"], users={"A": ["alice"]}, chat={"max_sessions_per_user": 1})
    alice = await cl.client("A", "alice")
    await alice.join("ops")
    for frame in ({"type": "history", "room": "ops", "after_n": 1 << 63},
                  {"type": "history", "room": "ops", "limit": 1 << 64},
                  {"type": "history", "room": "ops", "before": [1 << 63, "A"]}):
        with pytest.raises(Exception) as e:
            await alice.request(frame)
        assert getattr(e.value, "code", None) == "bad_field", frame
    # A hello with a huge last_n is refused before it authenticates: it holds no session slot.
    async with aiohttp.ClientSession() as http, http.ws_connect(cl.url("A")) as ws:
        await ws.send_json({"type": "hello", "user": "alice", "session": alice.session_token, "last_n": 1 << 63})
        reply = await ws.receive_json(timeout=5)
        assert reply["type"] == "error" and reply["code"] == "bad_field", reply
    await alice.close()
    again = await cl.client("A", "alice")       # max_sessions_per_user = 1: the refused hello took no slot
    assert again.welcome["user"] == "alice"


@pytest.mark.parametrize("frame, code", [
    ("[" * 30_000 + "]" * 30_000, "bad_json"),                                        # deep nesting
    ('{"type": "history", "room": "ops", "limit": ' + "9" * 5000 + "}", "bad_json"),   # past int digits limit
    ('{"type": "history", "room": "ops", "limit": 1e999}', "bad_field"),                # a float infinity
    ('{"type": "history", "room": "ops", "limit": ' + "9" * 40 + "}", "bad_field"),     # beyond 63 bits
    ('{"type": "hello", "user": "alice", "session": "x", "last_n": -' + "9" * 30 + "}", "bad_field"),
    ('{"type": "history", "room": "ops", "before": [' + "[" * 5000 + "]" * 5000 + "]}", "bad_json"),
])
async def test_deep_nesting_and_huge_numbers_get_a_named_error(cluster_factory, frame, code):
    cl = await cluster_factory(["A"], users={"A": ["alice"]})
    alice = await cl.client("A", "alice")
    assert len(frame.encode()) < cl.servers["A"].settings.max_frame_bytes
    if "hello" in frame:                           # a second hello: checked before anything else is
        code = "already_authenticated" if code != "bad_field" else code
    await alice.send_raw(frame)
    err = await alice.wait_for(lambda f: f["type"] == "error", 5)
    assert err["code"] == code, err
    assert len(json.dumps(err)) < 2000                  # the reply does not echo the input back
    await alice.join("ops")


async def raw_ws(port: int):
    """A WebSocket opened by hand, to send frames no library would (invalid UTF-8)."""
    import base64
    import os
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    key = base64.b64encode(os.urandom(16)).decode()
    writer.write((f"GET /ws HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                  f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
    head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 101"), head
    return reader, writer


def masked_frame(opcode: int, data: bytes) -> bytes:
    """A client's (masked) WebSocket frame of ``data``, whatever it holds."""
    import os
    import struct
    key = os.urandom(4)
    n = len(data)
    head = bytes([0x80 | opcode]) + (bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + struct.pack("!H", n))
    return head + key + bytes(b ^ key[i % 4] for i, b in enumerate(data))


async def read_frame(reader) -> tuple[int, bytes]:
    """The next server frame: its opcode and payload."""
    import struct
    b0, b1 = await reader.readexactly(2)
    n = b1 & 0x7F
    if n == 126:
        n = struct.unpack("!H", await reader.readexactly(2))[0]
    elif n == 127:
        n = struct.unpack("!Q", await reader.readexactly(8))[0]
    return b0 & 0x0F, await reader.readexactly(n)


async def test_invalid_utf8_in_a_text_frame_closes_that_connection_only(cluster_factory):
    import struct
    cl = await cluster_factory(["A"], users={"A": ["alice", "bob"]})
    bob = await cl.client("A", "bob")
    await bob.join("ops")
    reader, writer = await raw_ws(cl.servers["A"].port)
    writer.write(masked_frame(0x1, b'{"type": "hello", "user": "alice", "password": "\xff\xfe"}'))
    opcode, data = await asyncio.wait_for(read_frame(reader), 5)
    while opcode != 0x8:                   # past any text frame, the close frame
        opcode, data = await asyncio.wait_for(read_frame(reader), 5)
    assert struct.unpack("!H", data[:2])[0] == 1007, data        # "invalid frame payload data"
    writer.close()
    await bob.say("ops", "still served")
    await bob.wait_for(lambda f: f["type"] == "message" and f["text"] == "still served", 5)
