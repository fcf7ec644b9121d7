"""The running lab's control port, and the commands that talk to it (``python -m deploy lab cut A B`` ...).

A running lab (``deploy/lab.py``) writes ``<dir>/lab.json``: its pid, its
control URL and its mission file. Each command reads it and sends one JSON
request; the lab acts, prints what it did on its own console, and answers
``{"said": "..."}``, which the command prints too. Errors are ``{"error":
"..."}`` with status 400 (bad request) or 404 (unknown site or link); the
command prints that one line and exits 1.

Routes, besides faultinject's (``faultinject/control.py``: ``/links``,
``/partition``, ``/heal``, ``/shape/...``, ``/history``, for scripts):

- ``GET  /lab``             the lab: mission file, sites, each site's processes (pid, state, restarts), links
- ``POST /lab/link``        ``{"action": "cut"|"fade"|"heal", "sites"?: [a, b]}`` (heal without sites: every link)
- ``POST /lab/slow``        ``{"sites": [a, b], "delay"?, "jitter"?, "bandwidth_bps"?}`` both directions
- ``POST /lab/partition``   ``{"groups": [[...], ...]}``; one group: it against the rest
- ``POST /lab/site``        ``{"action": "kill"|"restart", "site": s, "roles"?: ["rcm", "chat"]}`` (restart
  without roles: the site's killed servers, or both when none is)

``cut`` resets the link (both ends see their connections drop); ``fade``
blackholes it (connections stay open, nothing crosses, bytes sent meanwhile
are lost, as in a radio fade); ``heal`` brings it up with no delay or rate
limit. ``kill`` is SIGKILL (a crash), and the supervisor keeps the processes
down until ``restart`` (which also restarts running ones, gracefully).
"""
from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiohttp import web
from rich.markup import escape

from chat_server.launcher import ROLES
from contracts.mission import Mission
from faultinject.control import make_app
from faultinject.links import LinkSet
from faultinject.proxy import LinkError
from faultinject.shaping import BlackholePolicy, LinkMode, Shape
from rcm.durability.dirlock import LOCK_NAME, holder

from .supervisor import Supervisor

STATE_FILE = "lab.json"
SHAPE_KEYS = ("delay", "jitter", "bandwidth_bps")
UNPACED_BACKLOG_MIN = 4096      # bytes a link must carry within liveness_timeout for a site that does not pace to it


def unpaced_link_note(mission: Mission, a: str, b: str, bandwidth_bps: float | None) -> str | None:
    """What an operator who slowed the link a-b to ``bandwidth_bps`` should know, or None: a site paces to a
    higher rate than the link now carries (its writes queue in the link, FLASH behind them), or the sites do
    not pace to it (no ``[sites.X.rate]``), so their heartbeats wait behind any backlog in the link, and a
    backlog the link takes longer than ``liveness_timeout`` to carry makes them suspect each other."""
    if not bandwidth_bps:
        return None
    paced = {x: mission.site(x).rate.get(y) for x, y in ((a, b), (b, a))}
    if all(r is not None and r <= bandwidth_bps for r in paced.values()):
        return None
    over = [f"{x} paces to {r:g} bit/s" for x, r in paced.items() if r is not None and r > bandwidth_bps]
    if over:
        return (f"note: {' and '.join(over)}, more than this link carries: what they write beyond it waits in the "
                f"link, where no FLASH can pass it ([sites.X.rate]; docs/operations.md, 'HF links')")
    carried = bandwidth_bps / 8 * mission.rcm.liveness_timeout
    if carried >= UNPACED_BACKLOG_MIN:
        return None
    unpaced = [x for x, r in paced.items() if r is None]
    who = " and ".join(unpaced)
    return (f"note: {who} {'does' if len(unpaced) == 1 else 'do'} not pace to this link ([sites.X.rate]): a "
            f"backlog of more than {carried:,.0f} bytes (liveness_timeout {mission.rcm.liveness_timeout:g} s at "
            f"{bandwidth_bps:g} bit/s, a few chat lines) holds their heartbeats past it and they suspect each "
            f"other; a radio link needs the HF settings (docs/operations.md, 'HF links')")


class LabCommandError(RuntimeError):
    """A lab command failed; the message is the one line to print."""


def running_lab(root: Path) -> dict[str, Any] | None:
    """The state of the lab running from ``root`` (its ``lab.json``), or None when none runs there."""
    try:
        state = json.loads((root / STATE_FILE).read_text())
        os.kill(int(state["pid"]), 0)
    except (OSError, ValueError, KeyError, TypeError):
        return None           # no file, a torn one, or its lab died without removing it
    return state if isinstance(state, dict) else None


def servers_running(root: Path) -> str | None:
    """Which servers run from the sites' directories under ``root`` (each holds its directory's lock,
    ``rcm.durability.dirlock``), in one phrase, or None when none does."""
    running = []
    for lock in sorted(root.glob(f"*/*/{LOCK_NAME}")):
        pid = holder(lock.parent)
        if pid is not None and lock.parent.name in ("rcm", "chat"):
            server = "RCM server" if lock.parent.name == "rcm" else "chat server"
            running.append(f"site {lock.parent.parent.name}'s {server}" + (f" (process {pid})" if pid else ""))
    return None if not running else ", ".join(running) + (" runs" if len(running) == 1 else " run")


class LabControl:
    """The control application of one running lab: its links and its supervisor."""

    def __init__(self, links: LinkSet, sup: Supervisor, say: Callable[[str], None],
                 base: dict[str, Any] | None = None) -> None:
        """``base``: the shape every link returns to on a heal (an hf lab's radio), else none."""
        self.links, self.sup, self.say = links, sup, say
        self.base = base
        self.app = make_app(links)
        self.app.router.add_get("/lab", self.get_lab)
        self.app.router.add_post("/lab/link", self.post_link)
        self.app.router.add_post("/lab/slow", self.post_slow)
        self.app.router.add_post("/lab/partition", self.post_partition)
        self.app.router.add_post("/lab/site", self.post_site)
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def start(self, host: str, port: int) -> None:
        runner = web.AppRunner(self.app, access_log=None)
        await runner.setup()
        try:
            await web.TCPSite(runner, host, port).start()
        except OSError as e:
            await runner.cleanup()
            raise LinkError(f"lab control port: cannot listen on {host}:{port}: {e.strerror or e}") from None
        self._runner, self.url = runner, f"http://{host}:{port}"

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # -- routes ------------------------------------------------------------------------------
    async def get_lab(self, request: web.Request) -> web.Response:
        snap = self.sup.snapshot()
        return web.json_response({"mission": str(self.sup.mission_path), "sites": self.sup.sites,
                                  "processes": {s: snap[s]["processes"] for s in self.sup.sites},
                                  "links": self.links.describe()["links"]})

    async def post_link(self, request: web.Request) -> web.Response:
        body = await _body(request)
        action = body.get("action")
        if action == "heal" and not body.get("sites"):
            await self.links.heal()
            for a, b in self.links.pairs():
                self.shape_base(a, b)
            return self._done(f"heal: every link up, {self._base_words()}")
        a, b = self._pair(body)
        if action == "cut":
            await self.links.cut(a, b, LinkMode.RESET)
            return self._done(f"cut {a}-{b}: connections reset, new ones refused")
        if action == "fade":
            await self.links.set_link(a, b, LinkMode.BLACKHOLE, policy=BlackholePolicy.DISCARD)
            return self._done(f"fade {a}-{b}: connections stay open, nothing crosses")
        if action == "heal":
            await self.links.restore(a, b)
            self.shape_base(a, b)
            return self._done(f"heal {a}-{b}: up, {self._base_words()}")
        raise _bad(400, f"action {action!r} must be cut, fade or heal")

    async def post_slow(self, request: web.Request) -> web.Response:
        body = await _body(request)
        a, b = self._pair(body)
        changes = {k: body[k] for k in SHAPE_KEYS if k in body}
        if not changes:
            raise _bad(400, f"slow needs at least one of {', '.join(SHAPE_KEYS)}")
        try:
            shapes = [(x, y, self.links.shape(x, y).updated(changes)) for x, y in ((a, b), (b, a))]
        except (ValueError, TypeError) as e:
            raise _bad(400, str(e)) from None
        for x, y, shape in shapes:
            self.links.set_shape(x, y, shape)
        s = shapes[0][2]
        rate = f"{s.bandwidth_bps:g} bit/s" if s.bandwidth_bps else "no rate limit"
        note = unpaced_link_note(self.sup.mission, a, b, s.bandwidth_bps)
        return self._done(f"slow {a}-{b}: {s.delay:g} s delay + up to {s.jitter:g} s jitter, {rate}, each way"
                          + (f"\n{note}" if note else ""))

    async def post_partition(self, request: web.Request) -> web.Response:
        body = await _body(request)
        groups = body.get("groups")
        if (not isinstance(groups, list) or not groups
                or not all(isinstance(g, list) and g and all(isinstance(s, str) for s in g) for g in groups)):
            raise _bad(400, "groups must be a list of non-empty lists of site names")
        for g in groups:
            for s in g:
                self._site(s)
        named = {s for g in groups for s in g}
        rest = [s for s in self.sup.sites if s not in named]
        if rest:
            groups = [*groups, rest]
        if len(groups) < 2:
            raise _bad(400, "a partition needs two groups: name the sites of one side (the rest form the other)")
        try:
            await self.links.partition(*groups, mode=LinkMode.RESET)
        except LinkError as e:
            raise _bad(400, str(e)) from None
        return self._done("partition " + " | ".join(",".join(g) for g in groups)
                          + ": links between groups cut, links within up")

    async def post_site(self, request: web.Request) -> web.Response:
        body = await _body(request)
        site = self._site(body.get("site"))
        roles = body.get("roles")
        if roles is None:       # restart: the held ones if any (after `kill --role chat`, only it), else both
            held = [r for r in ROLES if (site, r) in self.sup.held]
            roles = held if body.get("action") == "restart" and held else list(ROLES)
        if not isinstance(roles, list) or not roles or any(r not in ROLES for r in roles):
            raise _bad(400, f"roles must be a list of {' and '.join(ROLES)}")
        chosen = tuple(r for r in ROLES if r in roles)
        what = " and ".join({"rcm": "RCM server", "chat": "chat server"}[r] for r in chosen)
        if body.get("action") == "kill":
            await self.sup.kill(site, chosen)
            return self._done(f"kill {site}: {what} killed (SIGKILL), kept down until `restart {site}`")
        if body.get("action") == "restart":
            await self.sup.restart(site, chosen)
            return self._done(f"restart {site}: {what} starting")
        raise _bad(400, f"action {body.get('action')!r} must be kill or restart")

    # -- helpers ------------------------------------------------------------------------------
    def _site(self, name: Any) -> str:
        if not isinstance(name, str) or name not in self.sup.sites:
            raise _bad(404, f"no site {name!r} in the lab (sites: {', '.join(self.sup.sites)})")
        return name

    def _pair(self, body: dict[str, Any]) -> tuple[str, str]:
        sites = body.get("sites")
        if not isinstance(sites, list) or len(sites) != 2:
            raise _bad(400, "name the link by its two sites, e.g. [\"ground1\", \"awacs\"]")
        a, b = self._site(sites[0]), self._site(sites[1])
        if a == b:
            raise _bad(400, f"a link joins two different sites, not {a} and {a}")
        return a, b

    def shape_base(self, a: str, b: str) -> None:
        """Both directions of a-b as the lab's links are when nothing is done to them (``base``)."""
        for x, y in ((a, b), (b, a)):
            shape = Shape(queue_bytes=self.links.shape(x, y).queue_bytes)
            self.links.set_shape(x, y, shape.updated(self.base) if self.base else shape)

    def _base_words(self) -> str:
        if not self.base:
            return "no delay or rate limit"
        return f"the lab's radio link ({self.base['bandwidth_bps']:g} bit/s, {self.base['delay']:g} s each way)"

    def _done(self, said: str) -> web.Response:
        self.say(f"[bold]lab: {escape(said)}[/]")
        return web.json_response({"said": said})


def _bad(status: int, message: str) -> web.HTTPException:
    kind = web.HTTPNotFound if status == 404 else web.HTTPBadRequest
    return kind(text=json.dumps({"error": message}), content_type="application/json")


async def _body(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except (ValueError, UnicodeDecodeError):
        raise _bad(400, "body is not valid JSON") from None
    if not isinstance(body, dict):
        raise _bad(400, "body must be a JSON object")
    return body


# -- the commands' side ------------------------------------------------------------------------
def lab_state(root: Path) -> dict[str, Any]:
    """The running lab's state, or LabCommandError saying how to start one."""
    state = running_lab(root)
    if state is None:
        from .lab import DEFAULT_DIR
        where = "" if root == DEFAULT_DIR.resolve() else f" --dir {root}"
        raise LabCommandError(f"no lab is running from {root} (start one with `python -m deploy lab{where}`)")
    return state


def lab_request(root: Path, path: str, body: dict[str, Any] | None = None, timeout: float = 30.0) -> dict[str, Any]:
    """Send one request to the lab running from ``root``: GET without ``body``, POST with it."""
    url = lab_state(root)["control"] + path
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method="GET" if body is None else "POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            answer = json.loads(r.read())
    except urllib.error.HTTPError as e:
        try:
            message = json.loads(e.read()).get("error") or str(e)
        except (ValueError, AttributeError):
            message = str(e)
        raise LabCommandError(message) from None
    except (urllib.error.URLError, OSError, ValueError) as e:
        raise LabCommandError(f"the lab's control port {url} does not answer: {e}") from None
    if not isinstance(answer, dict):
        raise LabCommandError(f"unexpected answer from {url}: {answer!r}")
    return answer
