"""HTTP control endpoint for a :class:`LinkSet` (aiohttp), so other processes can steer links.

Every answer is JSON; errors are ``{"error": "..."}`` with status 400 (bad
request) or 404 (unknown site or link). Routes (documented in docs/faultinject.md):

- ``GET  /links``                 every pair, its mode and its proxies (addresses, shapes, counters)
- ``POST /links/{a}/{b}``         ``{"mode": "up"|"reset"|"blackhole", "policy"?: "discard"|"buffer"}``
- ``POST /partition``             ``{"groups": [["A","B"],["C","D"]], "mode"?: "reset"|"blackhole"}``
- ``POST /heal``                  every link up
- ``GET  /shape/{src}/{dst}``     the shape of bytes src sends to dst
- ``PUT  /shape/{src}/{dst}``     ``{"delay"?, "jitter"?, "bandwidth_bps"?, "queue_bytes"?, "segment_bytes"?}``
- ``GET  /history``               ``{"links": [pair events], "proxies": [proxy events]}``
"""
from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from faultinject.links import LinkSet
from faultinject.proxy import LinkError
from faultinject.shaping import BlackholePolicy, LinkMode

LINKSET_KEY = web.AppKey("linkset", LinkSet)


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


async def _body(request: web.Request) -> dict[str, Any]:
    if not request.can_read_body:
        return {}
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise web.HTTPBadRequest(text=json.dumps({"error": "body is not valid JSON"}),
                                 content_type="application/json") from None
    if not isinstance(body, dict):
        raise web.HTTPBadRequest(text=json.dumps({"error": "body must be a JSON object"}),
                                 content_type="application/json")
    return body


def _enum(kind: type[LinkMode] | type[BlackholePolicy], value: Any, key: str) -> Any:
    try:
        return kind(value)
    except ValueError:
        allowed = ", ".join(m.value for m in kind)
        raise web.HTTPBadRequest(text=json.dumps({"error": f"{key} = {value!r} must be one of {allowed}"}),
                                 content_type="application/json") from None


def _site(links: LinkSet, name: str) -> str:
    if name not in links.mission.sites:
        raise web.HTTPNotFound(text=json.dumps({"error": f"no site {name!r} in the mission"}),
                               content_type="application/json")
    return name


async def get_links(request: web.Request) -> web.Response:
    return web.json_response(request.app[LINKSET_KEY].describe())


async def post_link(request: web.Request) -> web.Response:
    links = request.app[LINKSET_KEY]
    a = _site(links, request.match_info["a"])
    b = _site(links, request.match_info["b"])
    body = await _body(request)
    if "mode" not in body:
        return _error(400, "body needs \"mode\": up, reset or blackhole")
    mode = _enum(LinkMode, body["mode"], "mode")
    policy = _enum(BlackholePolicy, body["policy"], "policy") if body.get("policy") is not None else None
    try:
        await links.set_link(a, b, mode, policy=policy)
    except (LinkError, ValueError) as e:
        return _error(404 if isinstance(e, LinkError) else 400, str(e))
    return web.json_response({"pair": f"{min(a, b)}-{max(a, b)}", "mode": links.mode(a, b).value})


async def post_partition(request: web.Request) -> web.Response:
    links = request.app[LINKSET_KEY]
    body = await _body(request)
    groups = body.get("groups")
    if (not isinstance(groups, list) or len(groups) < 2
            or not all(isinstance(g, list) and all(isinstance(s, str) for s in g) for g in groups)):
        return _error(400, "body needs \"groups\": a list of two or more lists of site names")
    mode = _enum(LinkMode, body.get("mode", "reset"), "mode")
    try:
        await links.partition(*groups, mode=mode)
    except LinkError as e:
        return _error(400, str(e))
    return web.json_response(links.describe())


async def post_heal(request: web.Request) -> web.Response:
    links = request.app[LINKSET_KEY]
    await links.heal()
    return web.json_response(links.describe())


async def get_shape(request: web.Request) -> web.Response:
    links = request.app[LINKSET_KEY]
    src = _site(links, request.match_info["src"])
    dst = _site(links, request.match_info["dst"])
    try:
        return web.json_response(links.shape(src, dst).as_dict())
    except LinkError as e:
        return _error(404, str(e))


async def put_shape(request: web.Request) -> web.Response:
    links = request.app[LINKSET_KEY]
    src = _site(links, request.match_info["src"])
    dst = _site(links, request.match_info["dst"])
    body = await _body(request)
    try:
        shape = links.shape(src, dst).updated(body)
    except LinkError as e:
        return _error(404, str(e))
    except (ValueError, TypeError) as e:
        return _error(400, str(e))
    links.set_shape(src, dst, shape)
    return web.json_response(shape.as_dict())


async def get_history(request: web.Request) -> web.Response:
    links = request.app[LINKSET_KEY]
    return web.json_response({"links": [e.as_dict() for e in links.history],
                              "proxies": [e.as_dict() for e in links.proxy_history()]})


def make_app(links: LinkSet) -> web.Application:
    """The control application for ``links`` (which the caller starts and closes)."""
    app = web.Application()
    app[LINKSET_KEY] = links
    app.router.add_get("/links", get_links)
    app.router.add_post("/links/{a}/{b}", post_link)
    app.router.add_post("/partition", post_partition)
    app.router.add_post("/heal", post_heal)
    app.router.add_get("/shape/{src}/{dst}", get_shape)
    app.router.add_put("/shape/{src}/{dst}", put_shape)
    app.router.add_get("/history", get_history)
    return app


class ControlServer:
    """The control app served on ``host:port`` (port 0 picks one; see :attr:`url`)."""

    def __init__(self, links: LinkSet, host: str = "127.0.0.1", port: int = 0) -> None:
        self._runner = web.AppRunner(make_app(links), access_log=None)
        self._host = host
        self._port = port
        self._site: web.TCPSite | None = None
        self.address: tuple[str, int] | None = None

    async def start(self) -> None:
        await self._runner.setup()
        self._site = web.TCPSite(self._runner, self._host, self._port)
        try:
            await self._site.start()
        except OSError as e:
            await self._runner.cleanup()
            raise LinkError(f"control endpoint: cannot listen on {self._host}:{self._port}: "
                            f"{e.strerror or e}") from None
        name = self._runner.addresses[0]
        self.address = (name[0], name[1])

    @property
    def url(self) -> str:
        if self.address is None:
            raise LinkError("control endpoint is not started")
        return f"http://{self.address[0]}:{self.address[1]}"

    async def close(self) -> None:
        await self._runner.cleanup()

    async def __aenter__(self) -> ControlServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
