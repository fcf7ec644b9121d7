"""Chaos: kill -9 random RCM and chat server processes of three sites during traffic.

Real processes (``python -m rcm`` and ``python -m chat_server`` per site, RCM
durable), one user per site saying numbered messages through ``ChatClient``
(reconnecting; a refused or unanswered ``say`` is retried with the same
``client_id``, as a client must). A seeded schedule kills one process at a
time with SIGKILL and restarts it well within the suspect timeout. At the end
every site's journal is loaded with faultinject's loader and judged by its
checkers (reliability, duplicates, FIFO, order keys) with no crash records:
a durable restart inside the suspect timeout excuses nothing. And directly:
every acknowledged message is in a ``deliver`` record at every site exactly
once, has its ``send`` record at its origin, and no ``say`` (user,
client_id) was delivered under two ``msg_id``s.
"""
from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path
from typing import Any

import pytest

from chat_server.accounts import hash_password
from chat_server.client import ChatClient, ChatClosed, ChatError
from chat_server.journal import journal_files, read_journal
from chat_server.store import ChatStore
from faultinject.checkers import (
    History,
    check_fifo,
    check_no_duplicates,
    check_order_keys,
    check_reliability,
    load_journals,
)
from faultinject.missions import write_mission
from faultinject.procs import LocalChat, LocalRcm

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]

SITES = ["A", "B", "C"]
PW = "pw-chaos"
SEED = 20041031
RCM = {"heartbeat_timeout": 0.2, "liveness_timeout": 1.0, "silence_timeout": 2.0, "suspect_timeout": 30.0,
       "reconnect_period": 0.3, "ack_interval": 0.05}
CHAT = {"kdf_n": 1024, "receipt_interval": 0.2, "presence_interval": 0.2, "rcm_ack_interval": 0.1,
        "rcm_retry_max": 0.3}
TRAFFIC_SECONDS = 14.0
SAY_INTERVAL = 0.08         # per user
FAULTS = 7                  # kill -9 then restart, one process at a time
RETRY_CODES = {"unavailable", "try_again", "internal"}


def _site_records(mission: Any, site: str) -> list[dict[str, Any]]:
    return [r for f in journal_files(mission.site_dir(site) / "journal") for r in read_journal(f)]


class Chaos:
    def __init__(self, path: Path, seed: int) -> None:
        self.rng = random.Random(seed)
        self.rcm = LocalRcm(path)
        self.chat = LocalChat(path)
        self.mission = self.rcm.mission
        self.acked: dict[str, tuple[str, str]] = {}        # msg_id -> (user, client_id)
        self.acks_of: dict[tuple[str, str], set[str]] = {}   # (user, client_id) -> msg_ids it was acked with
        self.faults: list[str] = []
        self.retries = 0
        self.stop = asyncio.Event()

    async def user(self, site: str, user: str) -> None:
        c = await ChatClient.connect(self.chat.url(site), user, PW, reconnect=True, reconnect_delay=0.1)
        try:
            await self._until_ok(lambda: c.join("ops"))
            i = 0
            while not self.stop.is_set():
                cid = f"{user}-{i}"
                ack = await self._until_ok(lambda i=i, cid=cid: c.say("ops", f"{user} #{i}", client_id=cid))
                self.acked[ack["msg_id"]] = (user, cid)
                self.acks_of.setdefault((user, cid), set()).add(ack["msg_id"])
                if i % 7 == 3:      # the client repeats an acked say: same msg_id, nothing sent again
                    again = await self._until_ok(lambda i=i, cid=cid: c.say("ops", f"{user} #{i}", client_id=cid))
                    self.acks_of[(user, cid)].add(again["msg_id"])
                i += 1
                await asyncio.sleep(SAY_INTERVAL)
        finally:
            await c.close()

    async def _until_ok(self, request: Any) -> dict[str, Any]:
        while True:
            try:
                return await asyncio.wait_for(request(), 8.0)
            except ChatError as e:
                if e.code not in RETRY_CODES:
                    raise
            except (TimeoutError, ChatClosed):
                pass
            self.retries += 1
            await asyncio.sleep(0.1)

    async def faults_loop(self) -> None:
        await asyncio.sleep(1.0)
        for _ in range(FAULTS):
            site = self.rng.choice(SITES)
            process = self.rng.choice(["rcm", "chat"])
            down = self.rng.uniform(0.1, 1.5)
            gap = self.rng.uniform(0.3, 1.2)
            t = time.monotonic()
            if process == "rcm":
                await asyncio.to_thread(self.rcm.kill, site)
                await asyncio.sleep(down)
                self.rcm.start(site)
                await asyncio.to_thread(self.rcm.wait_ready, site, 30.0)
            else:
                await asyncio.to_thread(self.chat.kill, site)
                await asyncio.sleep(down)
                self.chat.start(site)
                await asyncio.to_thread(self.chat.wait_ready, site, 30.0)
            self.faults.append(f"kill -9 {process} {site}, back after {time.monotonic() - t:.1f} s")
            await asyncio.sleep(gap)

    async def drained(self, timeout: float = 30.0) -> dict[str, set[str]]:
        """Wait until every acked message is journaled as delivered at every site."""
        deadline = time.monotonic() + timeout
        while True:
            got = {s: {r["msg_id"] for r in _site_records(self.mission, s) if r["kind"] == "deliver"}
                   for s in SITES}
            if all(set(self.acked) <= got[s] for s in SITES) or time.monotonic() > deadline:
                return got
            await asyncio.sleep(0.25)

    def tails(self) -> str:
        return "\n".join(f"--- {kind} {s}\n{tail(s)}" for s in SITES
                         for kind, tail in (("rcm", self.rcm.log_tail), ("chat", self.chat.log_tail)))


async def test_kill9_rcm_and_chat_during_traffic(tmp_path: Path) -> None:
    path = write_mission(tmp_path / "mission.toml", "chaos", SITES, rcm=RCM, chat=CHAT)
    chaos = Chaos(path, SEED)
    users = {s: f"u{s.lower()}" for s in SITES}
    for site, u in users.items():
        store = ChatStore(chaos.mission.site_dir(site) / "chat" / "chat.db")
        store.add_user(u, hash_password(PW, 1024))
        store.close()
    await asyncio.to_thread(chaos.rcm.start_all)
    try:
        for s in SITES:
            chaos.chat.start(s)
        for s in SITES:
            await asyncio.to_thread(chaos.chat.wait_ready, s, 30.0)
        workers = [asyncio.ensure_future(chaos.user(s, u)) for s, u in users.items()]
        faults = asyncio.ensure_future(chaos.faults_loop())
        await asyncio.sleep(TRAFFIC_SECONDS)
        await faults                      # the last restart completes before the traffic stops
        chaos.stop.set()
        await asyncio.gather(*workers)
        got = await chaos.drained()
    finally:
        chaos.chat.stop_all()
        chaos.rcm.stop_all()

    context = f"seed {SEED}; faults: {chaos.faults}\n{chaos.tails()}"
    print(f"chaos seed {SEED}: {len(chaos.acked)} acked, {chaos.retries} retries; faults: {chaos.faults}")
    assert len(chaos.faults) == FAULTS
    assert len(chaos.acked) > 100, context

    # faultinject's journal loader and checkers: the source of truth for lost, duplicate, FIFO, order.
    records, sites, torn = load_journals(chaos.mission.data_dir)
    assert sorted(sites) == SITES
    h = History(records, SITES)
    violations = (check_reliability(h) + check_no_duplicates(h) + check_fifo(h) + check_order_keys(h))
    assert not violations, "\n".join(map(str, violations[:20])) + "\n" + context

    # Directly: every acked message delivered once at every site, send record at its origin.
    for msg_id, (user, cid) in chaos.acked.items():
        for s in SITES:
            assert msg_id in got[s], f"acked {msg_id} ({user} {cid}) never delivered at {s}; {context}"
    for s in SITES:
        delivers = [r for r in records if r["kind"] == "deliver" and r["site"] == s]
        ids = [r["msg_id"] for r in delivers]
        assert len(ids) == len(set(ids)), f"{s}: a msg_id journaled twice; {context}"
        texts = [r["text"] for r in delivers]
        dup_texts = {t for t in texts if texts.count(t) > 1}
        assert not dup_texts, f"{s}: one say delivered under two msg_ids: {sorted(dup_texts)[:5]}; {context}"
        assert [r["n"] for r in delivers] == list(range(1, len(delivers) + 1)), s
    sends = {r["msg_id"] for r in records if r["kind"] == "send"}
    assert set(chaos.acked) <= sends, f"acked without a send record: {sorted(set(chaos.acked) - sends)[:5]}"
    for key, ids in chaos.acks_of.items():
        assert len(ids) == 1, f"{key} acked with several msg_ids {ids}"
