"""Four real ``python -m rcm`` processes on loopback, links through proxies.

A link is cut for longer than the liveness timeout and restored: every message
arrives exactly once, in FIFO order per origin; the sites that never lost a
link deliver one identical sequence in order-key order; the two sites that
suspected each other get each other's outage messages late, at their proper
place; nobody is ever declared disconnected. The paper's direct links
(``routing = "direct"``); the same cut with relaying: test_rcm_relay_processes.py.
"""
from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from testkit import wait_quiet, wait_until

from faultinject.links import LinkSet
from faultinject.missions import write_mission
from faultinject.procs import LocalRcm
from rcm.client import Delivery, RcmClient, StatusChange, socket_path

SITES = ["A", "B", "C", "D"]
# Short enough for a quick test, long enough that a CPU stall on a loaded
# 2-core machine is not mistaken for an outage (which would make C and D see
# late messages too).
FAST = dict(heartbeat_timeout=0.3, liveness_timeout=2.0, silence_timeout=3.0,
            suspect_timeout=30.0, reconnect_period=0.5, routing="direct")


@pytest.mark.timeout(90)
@pytest.mark.parametrize("tls", [False, True], ids=["plaintext", "tls"])
async def test_four_sites_link_cut_and_restore(tmp_path: Path, tls: bool):
    mp = write_mission(tmp_path / "m.toml", "itest", SITES, rcm={**FAST, "tls": tls}, proxies=True)
    rcm = LocalRcm(mp)
    if tls:
        from rcm_certs import make_ca, write_site
        ca = make_ca("itest")
        for s in SITES:
            write_site(rcm.mission.site_dir(s) / "tls", ca, s, "itest")
    links = LinkSet(rcm.mission)
    await links.start()
    clients: dict[str, RcmClient] = {}
    readers = []
    try:
        await asyncio.to_thread(rcm.start_all)
        clients = {s: await RcmClient.connect(socket_path(rcm.mission, s), name="itest") for s in SITES}
        delivered: dict[str, list[Delivery]] = {s: [] for s in SITES}
        statuses: dict[str, list[tuple[str, str]]] = {s: [] for s in SITES}

        async def read(site: str) -> None:
            async for ev in clients[site].events():
                if isinstance(ev, Delivery):
                    delivered[site].append(ev)
                elif isinstance(ev, StatusChange):
                    statuses[site].append((ev.site, ev.status))

        readers = [asyncio.create_task(read(s)) for s in SITES]
        await wait_until(lambda: all(v == "connected" for c in clients.values()
                                     for v in c.statuses.values()), "all sites connected", timeout=20)
        # The start-up's changes can still be on their way: once a second passes without one, only the
        # outage's count (so that C's and D's sequences below are compared on every unloaded run).
        await wait_quiet(lambda: sum(len(v) for v in statuses.values()))
        for s in SITES:
            statuses[s].clear()     # from here on, only changes caused by the outage

        sent: dict[str, list[str]] = {s: [] for s in SITES}

        async def sender(site: str, n: int) -> None:
            for i in range(n):
                acc = await clients[site].send(f"{site}-{i}".encode())
                assert acc.skipped == ()
                sent[site].append(acc.msg_id)
                await asyncio.sleep(0.05)

        senders = [asyncio.create_task(sender(s, 120)) for s in SITES]
        await asyncio.sleep(1.0)
        await links.cut("A", "B")                       # reset both directions
        await wait_until(lambda: ("B", "suspected") in statuses["A"] and ("A", "suspected") in statuses["B"],
                         "A and B suspect each other", timeout=10)
        # B's frames that A held but B had not heard acknowledged when the link went.
        unacked_at_cut = ((await clients["A"].stats())["peers"]["B"]["frontier"]
                          - (await clients["B"].stats())["peers"]["A"]["acked_upto"])
        await asyncio.sleep(1.0)
        await links.restore("A", "B")
        await asyncio.gather(*senders)
        total = sum(len(v) for v in sent.values())
        await wait_until(lambda: all(len(delivered[s]) >= total for s in SITES), "every message delivered everywhere",
                         timeout=30)
        await asyncio.sleep(0.3)   # anything extra (a duplicate) would show up now

        for s in SITES:
            ids = [d.msg_id for d in delivered[s]]
            assert len(ids) == len(set(ids)) == total, f"{s}: lost or duplicated"
            for origin in SITES:
                seqs = [d.seq for d in delivered[s] if d.origin == origin]
                assert seqs == sorted(seqs), f"{s}: FIFO broken for {origin}"
            in_order = [tuple(d.order) for d in delivered[s] if not d.late]
            assert in_order == sorted(in_order), f"{s}: non-late deliveries out of order"
            highest: tuple = ()
            for d in delivered[s]:
                if d.late:
                    assert tuple(d.order) < highest, f"{s}: late message without an earlier place"
                else:
                    highest = tuple(d.order)
            assert "disconnected" not in {st for _, st in statuses[s]}, s
        # C and D never lost a link: one identical sequence, nothing late. Unless the machine stalled one of
        # the four servers past the liveness timeout (CI saw it once, on a run 20% slower than usual): then C
        # or D suspected a peer, and late messages there are right; every check above still holds.
        if not any(st == "suspected" for _, st in statuses["C"] + statuses["D"]):
            assert [d.msg_id for d in delivered["C"]] == [d.msg_id for d in delivered["D"]]
            assert not any(d.late for d in delivered["C"] + delivered["D"])
        # A and B suspected each other; what the other sent in the outage came late.
        assert any(d.late and d.origin == "B" for d in delivered["A"])
        assert any(d.late and d.origin == "A" for d in delivered["B"])
        assert ("B", "connected") in statuses["A"][statuses["A"].index(("B", "suspected")):]
        # With TLS only what was really lost is resent: the frontier in HELLO spares the overlap of
        # the paper's protocol, and when both ends dial at once the side that replaces a connection
        # waits for the peer's first acknowledgement on the kept one (its HELLO may be older than
        # frames it took on the other: tests/rcm/test_resume.py). Without TLS nothing proves the
        # frontier (audit finding 4): the stream resumes after the last acknowledged frame, so at
        # most what was received but not yet acknowledged at the cut comes twice, dropped here.
        dups = (await clients["A"].stats())["peers"]["B"]["duplicates"]
        assert (dups == 0) if tls else (0 <= dups <= unacked_at_cut), (dups, unacked_at_cut)
    finally:
        for t in readers:
            t.cancel()
        for c in clients.values():
            await c.close()
        await asyncio.to_thread(rcm.stop_all)
        await links.close()
