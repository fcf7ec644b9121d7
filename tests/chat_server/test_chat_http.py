"""The chat server's HTTP side (on the RCM double): the Host header (DNS rebinding), the Origin check also
behind a TLS-terminating proxy, the CSP and ``nosniff`` headers on every response (the admission gate's
own too), and what ``/health`` tells to whom (details, with the size of every bounded structure, only to
this host's tools)."""
from __future__ import annotations

import asyncio
import contextlib
import logging

import aiohttp
import pytest

from chat_server.web import ChatWebSocket

pytestmark = pytest.mark.timeout(60)


async def ws_status(url: str, headers: dict, local: str = "127.0.0.1") -> int:
    """The HTTP status a WebSocket upgrade from ``local`` with ``headers`` gets (101: accepted)."""
    conn = aiohttp.TCPConnector(local_addr=(local, 0))
    async with aiohttp.ClientSession(connector=conn) as http:
        try:
            async with http.ws_connect(url, headers=headers) as ws:
                await ws.close()
                return 101
        except aiohttp.WSServerHandshakeError as e:
            return e.status


async def test_a_rebound_host_name_is_refused_and_health_details_stay_on_the_host(cluster_factory, monkeypatch):
    cl = await cluster_factory(["A"], users={"A": ["alice"]}, chat={"allowed_hosts": "chat.a.example"})
    port = cl.servers["A"].port
    async with aiohttp.ClientSession() as http:
        # DNS rebinding: evil.example now points at us; the browser sends its own name as Host and Origin.
        async with http.get(f"http://127.0.0.1:{port}/", headers={"Host": f"evil.example:{port}"}) as r:
            assert r.status == 421
        with pytest.raises(aiohttp.WSServerHandshakeError):
            await http.ws_connect(f"http://127.0.0.1:{port}/ws", headers={
                "Host": f"evil.example:{port}", "Origin": f"http://evil.example:{port}"})
        async with http.get(f"http://127.0.0.1:{port}/", headers={"Host": f"chat.a.example:{port}"}) as r:
            assert r.status == 200                     # a configured name
        async with http.get(f"http://127.0.0.1:{port}/health") as r:
            full = await r.json()
        assert {"sites", "n", "clients", "refusals"} <= set(full)
        import chat_server.web as web_module
        monkeypatch.setattr(web_module, "is_loopback", lambda address: False)
        async with http.get(f"http://127.0.0.1:{port}/health") as r:
            assert await r.json() == {"site": "A", "status": "ok"}


async def test_every_http_response_carries_the_csp_and_nosniff_headers(cluster_factory):
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


async def test_the_origin_check_works_behind_a_tls_terminating_proxy(cluster_factory):
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


async def test_health_details_are_not_shown_to_clients_behind_a_proxy_on_this_host(cluster_factory):
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


async def test_health_shows_the_size_of_every_bounded_structure(cluster_factory):
    """The metric of each bound (docs/security.md lists them) in /health's details, for this host's tools."""
    cl = await cluster_factory(["A", "B"], users={"A": ["alice"]})
    alice = await cl.client("A", "alice")
    await alice.join("ops")
    async with aiohttp.ClientSession() as http:
        async with http.get(f"http://127.0.0.1:{cl.servers['A'].port}/health") as r:
            body = await r.json()
    mem = body["memory"]
    for key in ("sessions", "connections_per_address", "user_rate_buckets", "room_rate_buckets", "rooms",
                "private_rooms", "pending_private_rooms", "known_definitions", "roster_rooms",
                "pending_receipts", "definition_requests", "login_failure_keys", "login_blocked_keys",
                "says_in_flight", "irc_requests_queued"):
        assert isinstance(mem.get(key), int), key
    assert mem["sessions"] == 1 and mem["rooms"] >= 1


async def test_a_client_that_leaves_during_its_upgrade_is_no_error(cluster_factory, caplog, monkeypatch):
    """aiohttp raises ConnectionResetError when the client is gone by the time the upgrade's headers are
    written (62 times in one lab run of 112 clients opening at once): no ERROR, and the next is served."""
    cl = await cluster_factory(["A"], users={"A": ["alice"]})
    real = ChatWebSocket.prepare
    left: list[bool] = []

    async def client_gone(self, request):
        if not left:
            left.append(True)
            raise aiohttp.ClientConnectionResetError("Cannot write to closing transport")
        return await real(self, request)
    monkeypatch.setattr(ChatWebSocket, "prepare", client_gone)
    with caplog.at_level(logging.WARNING):
        async with aiohttp.ClientSession() as http:
            with contextlib.suppress(aiohttp.ClientError, ConnectionError):     # (what the client sees varies)
                async with http.ws_connect(cl.url("A")) as ws:
                    await ws.receive(timeout=5)
        alice = await cl.client("A", "alice")
        await alice.join("ops")
    assert left and not [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
