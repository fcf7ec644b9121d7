"""Issue 23 item 1: the attack review beyond the audit of issue 25, one test per question (chat server side).

Each test would fail if the hole it names existed; those named ``*_hole_*`` failed on the code before
their fix (docs/security.md, "Issue 23 review", gives the commit). The RCM side is in
tests/rcm/test_rcm_review23.py, the socket and wire ones in tests/rcm/test_rcm_review23_local.py.
"""
from __future__ import annotations

import asyncio
import base64
import json
import os
import struct

import aiohttp
import msgpack
import pytest

from chat_server.journal import journal_files, read_journal
from chat_server.payload import PayloadError, Receipts, decode_payload, encode_payload

pytestmark = pytest.mark.timeout(60)


def journal(cl, site: str) -> list[dict]:
    srv = cl.servers[site]
    return [r for path in journal_files(srv.journal.directory) for r in read_journal(path)]


def is_msg(text: str):
    return lambda f: f["type"] == "message" and f["text"] == text


# --- impersonation through RCM: the origin is the delivery's, never a field --------------------------
async def test_review23_a_payload_naming_another_site_is_shown_as_its_real_origin(cluster_factory):
    """B's chat server (or any process on B's RCM socket) sends a chat payload dressed up as A's: extra
    ``origin``/``msg_id``/``site`` fields and a user of A. Every site shows, stores and journals it as B's."""
    cl = await cluster_factory(["A", "B", "C"], users={"A": ["alice"], "C": ["carol"]})
    alice, carol = await cl.client("A", "alice"), await cl.client("C", "carol")
    await alice.join("ops")
    await carol.join("ops")
    forged = msgpack.packb({"k": "m", "r": "ops", "u": "alice", "t": "forged order", "s": 1.0, "c": "x",
                            "o": "A", "origin": "A", "site": "A", "msg_id": "A:1", "i": "A:1"}, use_bin_type=True)
    cl.net.send("B", forged, None)
    for c, site in ((alice, "A"), (carol, "C")):
        f = await c.wait_for(is_msg("forged order"), 5)
        assert f["origin"] == "B" and f["msg_id"].startswith("B:"), f      # shown as alice@B, never alice@A
        rec = [r for r in journal(cl, site) if r["kind"] == "deliver" and r["text"] == "forged order"]
        assert len(rec) == 1 and rec[0]["origin"] == "B" and rec[0]["msg_id"].startswith("B:"), site


async def test_review23_receipts_are_counted_for_the_delivering_site_and_only_for_our_own_messages(
        cluster_factory):
    """A site cannot claim a receipt on behalf of another site, nor for messages of a third site."""
    cl = await cluster_factory(["A", "B", "C"], users={"A": ["alice"], "C": ["carol"]})
    alice, carol = await cl.client("A", "alice"), await cl.client("C", "carol")
    await alice.join("ops")
    await carol.join("ops")
    ack = await alice.say("ops", "mine")
    cmsg = await carol.say("ops", "carol's")
    await cl.settle()
    alice.drain_events()
    carol.drain_events()
    cl.net.send("B", encode_payload(Receipts((ack["msg_id"], cmsg["msg_id"]))), ["A", "C"])
    cl.net.send("B", msgpack.packb({"k": "a", "ids": [ack["msg_id"]], "site": "C", "o": "C"}, use_bin_type=True),
                ["A"])
    await cl.settle()
    got = [f for f in alice.drain_events() if f["type"] == "receipt"]
    assert {(f["msg_id"], f["site"]) for f in got} <= {(ack["msg_id"], "B")}, got
    assert not [f for f in carol.drain_events() if f["type"] == "receipt" and f["site"] == "B"]


def test_review23_the_chat_payload_has_no_field_for_its_origin():
    """The decoded payload types carry no origin or message id a sender could choose."""
    from dataclasses import fields

    from chat_server import payload as PL
    for t in (PL.ChatMessage, PL.RoomDefinition, PL.Roster, PL.Receipts, PL.Barrier, PL.DefinitionRequest):
        names = {f.name for f in fields(t)}
        assert not names & {"origin", "site", "msg_id", "seq", "order", "n"}, (t.__name__, names)


# --- input on the WebSocket ---------------------------------------------------------------------------
async def raw_ws(port: int):
    """A WebSocket opened by hand, to send frames no library would (invalid UTF-8)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    key = base64.b64encode(os.urandom(16)).decode()
    writer.write((f"GET /ws HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                  f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
    head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 101"), head
    return reader, writer


def masked(opcode: int, data: bytes) -> bytes:
    key = os.urandom(4)
    n = len(data)
    head = bytes([0x80 | opcode]) + (bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + struct.pack("!H", n))
    return head + key + bytes(b ^ key[i % 4] for i, b in enumerate(data))


async def read_frame(reader) -> tuple[int, bytes]:
    b0, b1 = await reader.readexactly(2)
    n = b1 & 0x7F
    if n == 126:
        n = struct.unpack("!H", await reader.readexactly(2))[0]
    elif n == 127:
        n = struct.unpack("!Q", await reader.readexactly(8))[0]
    return b0 & 0x0F, await reader.readexactly(n)


async def test_review23_invalid_utf8_in_a_text_frame_closes_that_connection_only(cluster_factory):
    cl = await cluster_factory(["A"], users={"A": ["alice", "bob"]})
    bob = await cl.client("A", "bob")
    await bob.join("ops")
    reader, writer = await raw_ws(cl.servers["A"].port)
    writer.write(masked(0x1, b'{"type": "hello", "user": "alice", "password": "\xff\xfe"}'))
    opcode, data = await asyncio.wait_for(read_frame(reader), 5)
    while opcode != 0x8:                   # past any text frame, the close frame
        opcode, data = await asyncio.wait_for(read_frame(reader), 5)
    assert struct.unpack("!H", data[:2])[0] == 1007, data        # "invalid frame payload data"
    writer.close()
    await bob.say("ops", "still served")
    await bob.wait_for(is_msg("still served"), 5)


@pytest.mark.parametrize("frame, code", [
    ("[" * 30_000 + "]" * 30_000, "bad_json"),                                        # deep nesting
    ('{"type": "history", "room": "ops", "limit": ' + "9" * 5000 + "}", "bad_json"),   # past int digits limit
    ('{"type": "history", "room": "ops", "limit": 1e999}', "bad_field"),                # a float infinity
    ('{"type": "history", "room": "ops", "limit": ' + "9" * 40 + "}", "bad_field"),     # beyond 63 bits
    ('{"type": "hello", "user": "alice", "session": "x", "last_n": -' + "9" * 30 + "}", "bad_field"),
    ('{"type": "history", "room": "ops", "before": [' + "[" * 5000 + "]" * 5000 + "]}", "bad_json"),
])
async def test_review23_deep_nesting_and_huge_numbers_get_a_named_error(cluster_factory, frame, code):
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


@pytest.mark.parametrize("name", ["аlice", "ali\u200bce", "alice\u202e", "ali ce", "\u0430lice", "alice\n"])
async def test_review23_lookalike_and_invisible_characters_are_refused_in_user_names(cluster_factory, name):
    """Spoofing ``alice`` with Cyrillic ``а`` or a zero-width space: names are ASCII-only, at the login
    and in every payload from another site."""
    cl = await cluster_factory(["A", "B"], users={"A": ["alice"]})
    async with aiohttp.ClientSession() as http, http.ws_connect(cl.url("A")) as ws:
        await ws.send_json({"type": "hello", "user": name, "password": "x"})
        reply = await ws.receive_json(timeout=5)
        assert reply["type"] == "error" and reply["code"] == "bad_field", reply
    with pytest.raises(PayloadError):
        decode_payload(msgpack.packb({"k": "m", "r": "ops", "u": name, "t": "x", "s": 1.0, "c": ""}))
    with pytest.raises(PayloadError):
        decode_payload(msgpack.packb({"k": "m", "r": "ops\u200b", "u": "bob", "t": "x", "s": 1.0, "c": ""}))


# --- msgpack bombs in chat payloads (RCM delivers them to every site) ------------------------------
def payload_bombs(cap: int) -> dict[str, bytes]:
    n = cap - 16
    return {
        "array length beyond the data": b"\x82\xa1k\xa1p\xa2on\xdd\xff\xff\xff\xff\xa1a",
        "map length beyond the data": b"\xdf\xff\xff\xff\xff\xa1k\xa1m",
        "str length beyond the data": b"\x82\xa1k\xa1m\xa1t\xdb\xff\xff\xff\xff",
        "bin length beyond the data": b"\x82\xa1k\xa1m\xa1t\xc6\xff\xff\xff\xff",
        "nesting deeper than the stack": b"\x81\xa1k" + b"\x91" * n,
        "ext types": msgpack.packb({"k": "m", "r": msgpack.ExtType(5, b"x" * 8), "u": msgpack.Timestamp(7, 0),
                                    "t": "x", "s": 1.0}),
        "ext type as a map key": b"\x81\xd4\x05\x00\xa1m",
        "a timestamp as sent_at": msgpack.packb({"k": "m", "r": "ops", "u": "bob", "t": "x", "c": "",
                                                 "s": msgpack.Timestamp(1, 0)}, datetime=False),
        "a million empty arrays": b"\x82\xa1k\xa1a\xa3ids\xdd" + struct.pack("!I", n) + b"\x90" * n,
    }


def test_review23_msgpack_bombs_in_chat_payloads_are_refused_in_bounded_time_and_memory():
    import time
    import tracemalloc
    cap = 256 * 1024                                                # [rcm] max_payload_bytes default
    # Time at the cap; memory on 32 KiB payloads (the amplification is per byte; tracemalloc is slow).
    for size, traced in ((cap, False), (32 * 1024, True)):
        for name, data in payload_bombs(size).items():
            assert len(data) <= size, name
            if traced:
                tracemalloc.start()
            t0 = time.perf_counter()
            try:
                decode_payload(data)
            except PayloadError:
                pass
            else:
                raise AssertionError(f"{name}: accepted")
            elapsed = time.perf_counter() - t0
            if traced:
                _, peak = tracemalloc.get_traced_memory()
                tracemalloc.stop()
                # Python objects cost up to ~80 bytes per one-byte msgpack value: bounded and transient.
                assert peak < 100 * size, (name, peak)
            assert elapsed < 5.0, (name, elapsed)


# --- names never reach a path ----------------------------------------------------------------------
def test_review23_no_accepted_site_or_room_name_can_leave_its_directory(tmp_path):
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from chat_server.protocol import ROOM_NAME, USER_NAME
    from contracts.mission import SITE_NAME, MissionError, parse_mission

    def safe_component(name: str) -> bool:
        return "/" not in name and "\\" not in name and "\0" not in name and name not in (".", "..") \
            and not name.startswith(".")

    @settings(max_examples=300, deadline=None)
    @given(st.from_regex(SITE_NAME, fullmatch=True) | st.from_regex(ROOM_NAME, fullmatch=True)
           | st.from_regex(USER_NAME, fullmatch=True))
    def accepted_names_are_one_plain_component(name: str) -> None:
        assert safe_component(name), name

    accepted_names_are_one_plain_component()
    for bad in ["..", "../x", "a/b", "A\n", ".hidden", "A\0", "/abs", "a\\b"]:
        assert not SITE_NAME.match(bad) and not ROOM_NAME.match(bad), bad
        raw = {"mission": {"name": "t", "data_dir": "var"},
               "sites": {bad: {"rcm": "127.0.0.1:20001", "chat": "127.0.0.1:21001"},
                         "B": {"rcm": "127.0.0.1:20002", "chat": "127.0.0.1:21002"}}}
        with pytest.raises(MissionError):
            parse_mission(raw, tmp_path)
    for bad in ["../etc", "a/b", "..", ".x"]:
        with pytest.raises(PayloadError):
            decode_payload(msgpack.packb({"k": "m", "r": bad, "u": "bob", "t": "x", "s": 1.0, "c": ""}))


# --- web: headers on every response, the origin check behind a proxy, /health ------------------------
async def test_review23_hole_every_http_response_carries_the_csp_and_nosniff_headers(cluster_factory):
    """aiohttp's responses had them (errors too); the admission gate's own 503 to a connection over a cap
    had neither."""
    cl = await cluster_factory(["A"], users={"A": ["alice"]}, chat={"max_connections_per_address": 3})
    port = cl.servers["A"].port
    base = f"http://127.0.0.1:{port}"
    seen: dict[str, int] = {}
    async with aiohttp.ClientSession() as http:
        for method, path, headers in [("GET", "/", {}), ("GET", "/static/js/app.js", {}), ("GET", "/health", {}),
                                      ("GET", "/no-such-page", {}), ("POST", "/", {}),
                                      ("GET", "/static/../../etc/passwd", {}),
                                      ("GET", "/", {"Host": "evil.example"}),
                                      ("GET", "/ws", {"Origin": "http://evil.example", "Upgrade": "websocket",
                                                      "Connection": "Upgrade", "Sec-WebSocket-Version": "13",
                                                      "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="})]:
            async with http.request(method, base + path, headers=headers) as r:
                seen[f"{method} {path} {headers.get('Host', '')}"] = r.status
                assert "default-src 'self'" in r.headers.get("Content-Security-Policy", ""), (method, path, r.status)
                assert "frame-ancestors 'none'" in r.headers["Content-Security-Policy"]
                assert r.headers.get("X-Content-Type-Options") == "nosniff", (method, path, r.status)
                if path.startswith("/static/.."):
                    assert r.status in (403, 404)
    assert {403, 404, 405, 421, 200} <= set(seen.values()), seen
    # A connection over the per-address cap is answered by the gate itself, before aiohttp.
    held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(3)]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
    head = (await asyncio.wait_for(reader.read(), 5)).split(b"\r\n\r\n")[0].decode().lower()
    assert head.startswith("http/1.1 503"), head
    assert "content-security-policy: default-src 'self'" in head and "x-content-type-options: nosniff" in head, head
    for _, w in held + [(reader, writer)]:
        w.close()


async def ws_status(url: str, headers: dict, local: str = "127.0.0.1") -> int:
    conn = aiohttp.TCPConnector(local_addr=(local, 0))
    async with aiohttp.ClientSession(connector=conn) as http:
        try:
            async with http.ws_connect(url, headers=headers) as ws:
                await ws.close()
                return 101
        except aiohttp.WSServerHandshakeError as e:
            return e.status


async def test_review23_hole_the_origin_check_works_behind_a_tls_terminating_proxy(cluster_factory):
    """docs/operations.md puts the chat port behind a TLS-terminating reverse proxy. The browser's Origin is
    then https://chat.example while the chat server sees http: every browser WebSocket was refused (403).
    A declared proxy's X-Forwarded-Proto/-Host now name the origin the browser saw; anyone else's are ignored."""
    cl = await cluster_factory(["A"], users={"A": ["alice"]},
                               chat={"trusted_proxies": "127.0.0.7", "allowed_hosts": "chat.example"})
    url = cl.url("A")
    via_proxy = {"Host": "chat.example", "Origin": "https://chat.example", "X-Forwarded-Proto": "https",
                 "X-Forwarded-Host": "chat.example", "X-Forwarded-For": "10.0.0.9"}
    assert await ws_status(url, via_proxy, "127.0.0.7") == 101
    # nginx's default Host is the upstream's address: X-Forwarded-Host still names the browser's origin.
    assert await ws_status(url, {**via_proxy, "Host": url.split("/")[2]}, "127.0.0.7") == 101
    # A page of another origin, through the same proxy: refused.
    assert await ws_status(url, {**via_proxy, "Origin": "https://evil.example"}, "127.0.0.7") == 403
    # Not the proxy: its forwarding headers are not believed.
    assert await ws_status(url, via_proxy, "127.0.0.8") == 403
    assert await ws_status(url, {"Origin": "http://evil.example", "X-Forwarded-Host": "evil.example",
                                 "X-Forwarded-Proto": "http"}, "127.0.0.8") == 403
    # Direct, as before: the page's own origin.
    assert await ws_status(url, {"Origin": f"http://{url.split('/')[2]}"}) == 101


async def test_review23_hole_health_details_are_not_shown_to_clients_behind_a_proxy_on_this_host(
        cluster_factory):
    """A reverse proxy on the chat server's host makes every client's request come from loopback: /health
    showed them its counts, incarnation and refusal reasons. A forwarded request is judged by the client
    address it was forwarded for (a declared proxy), or is not this host's tool (an undeclared one)."""
    cl = await cluster_factory(["A"], users={"A": ["alice"]}, chat={"trusted_proxies": "127.0.0.1"})
    port = cl.servers["A"].port
    async with aiohttp.ClientSession() as http:
        async with http.get(f"http://127.0.0.1:{port}/health") as r:
            assert "clients" in await r.json()                       # this host's tools: details
        async with http.get(f"http://127.0.0.1:{port}/health", headers={"X-Forwarded-For": "10.1.2.3"}) as r:
            assert await r.json() == {"site": "A", "status": "ok"}  # a client through the declared proxy
    cl2 = await cluster_factory(["B"], users={"B": ["bob"]})           # no proxy declared, one runs anyway
    port = cl2.servers["B"].port
    async with aiohttp.ClientSession() as http:
        for h in ({"X-Forwarded-For": "10.1.2.3"}, {"Forwarded": "for=10.1.2.3"}, {"X-Real-IP": "10.1.2.3"}):
            async with http.get(f"http://127.0.0.1:{port}/health", headers=h) as r:
                assert await r.json() == {"site": "B", "status": "ok"}, h


# --- passwords: no reply tells an unknown user from a wrong password -------------------------------
async def test_review23_login_replies_do_not_enumerate_users(cluster_factory):
    cl = await cluster_factory(["A"], users={"A": ["alice"]}, chat={"login_max_failures": 3})

    async def hello(user: str, **f) -> dict:
        async with aiohttp.ClientSession() as http, http.ws_connect(cl.url("A")) as ws:
            await ws.send_json({"type": "hello", "user": user, "id": "h", **f})
            return await ws.receive_json(timeout=10)

    for fields in ({"password": "wrong"}, {"session": "x" * 43}, {"session": "x" * 43, "last_n": 5}):
        a, b = await hello("alice", **fields), await hello("nobody", **fields)
        assert a == b, (fields, a, b)
    for _ in range(4):                                 # rate-limited alike too
        a, b = await hello("alice", password="w"), await hello("nobody", password="w")
    assert a["code"] == b["code"] == "rate_limited" and a["message"] == b["message"]


async def test_review23_irc_login_replies_do_not_enumerate_users(tmp_path):
    from test_irc import IrcSites

    s = IrcSites(tmp_path)
    await s.start()
    try:
        replies = {}
        for nick in ("alice", "nobody"):
            irc = await s.irc(nick, password="wrong")
            lines = []
            while raw := await asyncio.wait_for(irc.reader.readline(), 10):
                lines.append(raw.decode().rstrip("\r\n"))
            replies[nick] = [" ".join(line.split(" ")[1:]).replace(nick, "NICK") for line in lines]
        assert replies["alice"] == replies["nobody"] and replies["alice"], replies
    finally:
        await s.close()
