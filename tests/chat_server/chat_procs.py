"""TEST HELPER: real chat server processes and cuttable links for integration tests and benchmarks.

``CuttableLink`` is a minimal TCP proxy for one directed inter-site link (it
listens on a site's ``[sites.X.dial] Y`` address): ``cut()`` resets every live
connection and refuses new ones until ``restore()``.
``ChatProcess`` runs ``python -m chat_server`` for one site and waits for its
``/health``.
"""
from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp

from chat_server.journal import journal_files, read_journal
from rcm.config import Mission


class CuttableLink:
    def __init__(self, listen: tuple[str, int], target: tuple[str, int]) -> None:
        self.listen, self.target = listen, target
        self.up = True
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, *self.listen)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self.up:
            writer.transport.abort()
            return
        try:
            t_reader, t_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        self._writers |= {writer, t_writer}
        pumps = [asyncio.ensure_future(self._pump(reader, t_writer)),
                 asyncio.ensure_future(self._pump(t_reader, writer))]
        self._tasks.update(pumps)
        await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        for w in (writer, t_writer):
            w.transport.abort()
            self._writers.discard(w)
        for p in pumps:
            p.cancel()
            self._tasks.discard(p)

    @staticmethod
    async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (OSError, asyncio.CancelledError):
            pass

    def cut(self) -> None:
        self.up = False
        for w in list(self._writers):
            w.transport.abort()
        self._writers.clear()

    def restore(self) -> None:
        self.up = True

    async def close(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


async def start_links(mission: Mission) -> dict[tuple[str, str], CuttableLink]:
    """A link proxy on every ``dial`` address of the mission: (dialler, peer) -> link."""
    links = {}
    for name, sc in mission.sites.items():
        for peer, addr in sc.dial.items():
            target = mission.sites[peer].rcm
            link = CuttableLink((addr.host, addr.port), (target.host, target.port))
            await link.start()
            links[(name, peer)] = link
    return links


class ChatProcess:
    """``python -m chat_server --mission FILE --site NAME`` as a subprocess."""

    def __init__(self, mission_path: Path, mission: Mission, site: str) -> None:
        self.mission_path, self.mission, self.site = mission_path, mission, site
        self.proc: subprocess.Popen | None = None
        chat = mission.site(site).chat
        self.http = f"http://{chat.host}:{chat.port}"
        self.ws = f"ws://{chat.host}:{chat.port}/ws"
        self.log_path = mission.site_dir(site) / "logs" / "chat.log"

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "chat_server", "--mission", str(self.mission_path),
                                          "--site", self.site], stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env={**os.environ, "PYTHONUNBUFFERED": "1"})

    async def wait_healthy(self, timeout: float = 20.0, peers_connected: bool = True) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        async with aiohttp.ClientSession() as http:
            while time.monotonic() < deadline:
                assert self.proc is not None
                if self.proc.poll() is not None:
                    raise RuntimeError(f"chat {self.site} exited with {self.proc.returncode}: {self.log_tail()}")
                try:
                    async with http.get(self.http + "/health") as r:
                        body = await r.json()
                        if r.status == 200 and (not peers_connected or
                                                set(body["sites"].values()) == {"connected"}):
                            return body
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.1)
        raise TimeoutError(f"chat {self.site} not healthy after {timeout} s: {self.log_tail()}")

    def stop(self, timeout: float = 15.0) -> int:
        """SIGTERM and wait; the exit status."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"


def site_journal(mission: Mission, site: str) -> list[dict[str, Any]]:
    """Every record of a site's journal files, in order."""
    return [r for f in journal_files(mission.site_dir(site) / "journal") for r in read_journal(f)]


def check_journals(mission: Mission) -> dict[str, Any]:
    """FIFO per origin, global order of non-late deliveries, no duplicates; returns a summary.

    Raises AssertionError naming the first violation.
    """
    summary: dict[str, Any] = {}
    for site in mission.sites:
        recs = site_journal(mission, site)
        delivers = [r for r in recs if r["kind"] == "deliver"]
        ids = [r["msg_id"] for r in delivers]
        assert len(ids) == len(set(ids)), f"{site}: duplicate deliveries {sorted({i for i in ids if ids.count(i) > 1})}"
        ns = [r["n"] for r in delivers]
        assert ns == list(range(1, len(ns) + 1)), f"{site}: n is not 1..{len(ns)}: {ns}"
        last_seq: dict[str, int] = {}
        for r in delivers:
            if r.get("held") or r.get("repaired"):      # the documented exceptions to FIFO
                continue
            assert r["seq"] > last_seq.get(r["origin"], 0), f"{site}: FIFO broken from {r['origin']} at {r['msg_id']}"
            last_seq[r["origin"]] = r["seq"]
        sent_at_index = {r["msg_id"]: i for i, r in enumerate(recs) if r["kind"] == "send"}
        for i, r in enumerate(recs):
            if r["kind"] == "deliver" and r["origin"] == site:
                assert sent_at_index.get(r["msg_id"], i) < i, f"{site}: {r['msg_id']} delivered before its send record"
        ordered = [tuple(r["order"]) for r in delivers if not r["late"]]
        for a, b in zip(ordered, ordered[1:]):
            assert a < b, f"{site}: global order broken: {list(a)} delivered before {list(b)}"
        summary[site] = {"delivered": set(ids), "sent": {r["msg_id"] for r in recs if r["kind"] == "send"},
                         "missing": {(r["origin"], s) for r in recs if r["kind"] == "missing" for s in r["seqs"]},
                         "late": {r["msg_id"] for r in delivers if r["late"]},
                         "status": [(r["peer"], r["status"]) for r in recs if r["kind"] == "status"]}
    return summary


def dump(obj: Any) -> str:
    return json.dumps(obj, default=sorted, indent=1)
