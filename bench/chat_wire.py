"""Chat payload bytes between chat servers, per payload kind: an idle mission, a modest load, a link flap.

Chat servers talk to each other only through RCM payloads (chat_server/payload.py). This runs four real
chat servers (``chat_server.server.ChatServer``) with real WebSocket clients over the in-process fake RCM
(``tests/chat_server/chat_fake_rcm.py``, whose ``FakeNetwork.sent_payloads`` records every payload a
chat server hands to RCM) on a *virtual* chat clock: the edge's publication timers (rosters, receipts)
are driven by the benchmark every ``--tick`` virtual seconds instead of by wall-clock sleeps, so the
figures are exact and reproducible. It counts payload bytes only (what the chat servers ask RCM to
carry), not RCM's framing, acknowledgements or heartbeats (bench/rcm_wire.py, bench/hf.py measure those
on the links). A payload sent to N other sites is N copies; the figures are per copy.

Scenarios (every site has three users online, all in room ``ops``):

* ``idle``: 60 virtual seconds with nobody speaking (after the mission settled);
* ``load``: 60 virtual seconds, one 60-character line every 5 s per site (48 messages);
* ``presence``: one user logs out and in again at site A (two roster changes);
* ``flap``: the A-B link goes disconnected and comes back (what the reconnection costs).

The summary leads with the ratio after/before (the compact payloads against the earlier release's
msgpack maps, ``[chat] compact_payloads = false``, in the same run), then the table per kind.

    .venv/bin/python bench/chat_wire.py               # both encodings, every scenario
    .venv/bin/python bench/chat_wire.py --quick       # a shorter load (a smoke run)
    .venv/bin/python bench/chat_wire.py --receipt-interval 5    # receipts batched over 5 s (a slow link)
"""
from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from collections import defaultdict
from dataclasses import fields
from pathlib import Path
from typing import Any, cast

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "chat_server"))    # the fake RCM and the test missions

from chat_fake_rcm import FakeNetwork  # noqa: E402
from chat_missions import PASSWORD, add_users, make_mission  # noqa: E402

from bench._common import write_result  # noqa: E402
from chat_server.client import ChatClient  # noqa: E402
from chat_server.config import ChatSettings, parse_chat_settings  # noqa: E402
from chat_server.payload import PayloadError, decode_payload  # noqa: E402
from chat_server.server import ChatServer  # noqa: E402

SITES = ["A", "B", "C", "D"]
USERS = 3
LINE = ("Patrol two at checkpoint bravo, all quiet, moving north now.")[:60].ljust(60, ".")
KIND_NAMES = {"ChatMessage": "m chat message", "RoomDefinition": "d definition", "Roster": "p roster",
              "RosterDelta": "p roster delta", "RosterTip": "p roster tip", "RosterRequest": "p roster request",
              "Receipts": "a receipts", "Barrier": "b barrier", "DefinitionRequest": "q definition request",
              "Acknowledgement": "k acknowledgement"}
HAS_COMPACT = any(f.name == "compact_payloads" for f in fields(ChatSettings))


def kind_of(payload: bytes) -> str:
    try:
        p = decode_payload(payload)
    except PayloadError:
        return "undecodable"
    return KIND_NAMES.get(type(p).__name__, type(p).__name__)


class Run:
    """Four chat servers on a fake RCM with a virtual clock; the benchmark drives their timers."""

    def __init__(self, tmp: Path, compact: bool, tick: float, receipt_interval: float) -> None:
        chat: dict[str, Any] = {"receipt_interval": 3600.0, "presence_interval": 3600.0}
        if HAS_COMPACT:
            chat["compact_payloads"] = compact
        self.mission = make_mission(tmp, SITES, chat)
        self.net = FakeNetwork(SITES)
        self.now = 1_780_000_000.0
        self.tick = tick
        self.receipt_interval = receipt_interval
        self.servers: dict[str, ChatServer] = {}
        self.clients: dict[tuple[str, str], ChatClient] = {}

    def clock(self) -> float:
        return self.now

    async def start(self) -> None:
        for site in SITES:
            add_users(self.mission, site, [f"{site.lower()}user{i}" for i in range(USERS)])
        for site in SITES:
            srv = ChatServer(self.mission, site, parse_chat_settings(self.mission.chat),
                             rcm_connect=self.net.connector(site), host="127.0.0.1", port=0, clock=self.clock,
                             monotonic=self.clock)
            await srv.start()
            await asyncio.wait_for(srv.rcm_connected.wait(), 5)
            self.servers[site] = srv
        for site in SITES:
            for i in range(USERS):
                await self.login(site, f"{site.lower()}user{i}")
        await self.advance(10.0)                    # the first rosters, joins and receipts settle

    async def login(self, site: str, user: str) -> None:
        c = await ChatClient.connect(f"ws://127.0.0.1:{self.servers[site].port}/ws", user, PASSWORD)
        await c.join("ops")
        self.clients[(site, user)] = c

    async def logout(self, site: str, user: str) -> None:
        await self.clients.pop((site, user)).close()
        srv = self.servers[site]
        for _ in range(1000):
            if user not in srv.sessions.online():
                return
            await asyncio.sleep(0.002)

    async def drain(self) -> None:
        """Until every delivery the fake RCM queued has been applied (and what it caused sent)."""
        quiet = 0
        while quiet < 3:
            await asyncio.sleep(0.001)
            busy = any(not c._queue.empty() for s in self.net.sites.values() for c in s.clients)
            busy = busy or any(srv.pipeline.in_flight for srv in self.servers.values())
            quiet = 0 if busy else quiet + 1

    async def step(self) -> None:
        """One publication tick at every site: rosters, then the receipts that waited three quarters of the
        receipt interval without a chat message to ride in (the edge looks four times per interval; here, at
        every tick)."""
        for srv in self.servers.values():
            await srv.flush_roster()
        await self.drain()
        for srv in self.servers.values():
            await srv.flush_receipts(wait=0.75 * self.receipt_interval - 1e-9)
        await self.drain()

    async def advance(self, seconds: float, says: dict[float, str] | None = None) -> None:
        """Advance the virtual clock ``seconds`` in ticks; ``says``: offset -> site whose first user speaks."""
        start, t = self.now, 0.0
        pending = sorted((says or {}).items())
        while t < seconds - 1e-9:
            t = round(t + self.tick, 6)
            self.now = start + t
            while pending and pending[0][0] <= t + 1e-9:
                _, site = pending.pop(0)
                await self.clients[(site, f"{site.lower()}user0")].say("ops", LINE)
            await self.drain()
            await self.step()

    def mark(self) -> int:
        return len(self.net.sent_payloads)

    def since(self, mark: int) -> list[tuple[str, bytes, tuple[str, ...] | None]]:
        return cast(list[tuple[str, bytes, tuple[str, ...] | None]], self.net.sent_payloads[mark:])

    async def close(self) -> None:
        for c in self.clients.values():
            await c.close()
        for srv in self.servers.values():
            await srv.stop()


def tally(sent: list[tuple[str, bytes, tuple[str, ...] | None]]) -> dict[str, dict[str, float]]:
    """Per kind: payloads, copies (one per other site addressed) and bytes over those copies."""
    out: dict[str, dict[str, float]] = defaultdict(lambda: {"payloads": 0, "copies": 0, "bytes": 0})
    for origin, payload, dests in sent:
        copies = len([d for d in (dests if dests is not None else SITES) if d != origin])
        row = out[kind_of(payload)]
        row["payloads"] += 1
        row["copies"] += copies
        row["bytes"] += copies * len(payload)
    return dict(sorted(out.items()))


def total(t: dict[str, dict[str, float]]) -> dict[str, float]:
    return {k: sum(r[k] for r in t.values()) for k in ("payloads", "copies", "bytes")}


async def measure(compact: bool, load_seconds: float, tick: float, receipt_interval: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="chatwire-") as d:
        run = Run(Path(d), compact, tick, receipt_interval)
        await run.start()
        try:
            res: dict[str, Any] = {}
            m = run.mark()
            await run.advance(60.0)
            idle = tally(run.since(m))
            res["idle"] = {"kinds": idle, "bytes_per_site_per_minute": total(idle)["bytes"] / len(SITES),
                           "payloads_per_site_per_minute": total(idle)["payloads"] / len(SITES)}

            m = run.mark()
            says = {round(k * 5.0 + i * 1.25, 6) + tick: s for k in range(int(load_seconds // 5))
                    for i, s in enumerate(SITES)}
            await run.advance(load_seconds + 5.0, says)
            load = tally(run.since(m))
            msgs = load.get(KIND_NAMES["ChatMessage"], {"payloads": 0, "copies": 0, "bytes": 0})
            n = msgs["payloads"]
            res["load"] = {"messages": n, "kinds": load,
                           "chat_message_bytes_per_copy": msgs["bytes"] / max(1, msgs["copies"]),
                           "all_payload_bytes_per_message_copy": total(load)["bytes"] / max(1, msgs["copies"]),
                           "payloads_per_message": total(load)["payloads"] / max(1, n),
                           "bytes_per_site_per_minute": total(load)["bytes"] / len(SITES) * 60 / load_seconds}

            m = run.mark()
            await run.logout("A", "auser2")
            await run.advance(2.0)
            await run.login("A", "auser2")
            await run.advance(2.0)
            pres = tally(run.since(m))
            res["presence"] = {"kinds": pres, "bytes_per_change": total(pres)["bytes"] / 2}

            m = run.mark()
            run.net.set_link("A", "B", "disconnected")
            await run.advance(5.0)
            run.net.set_link("A", "B", "connected")
            await run.advance(5.0)
            flap = tally(run.since(m))
            res["flap"] = {"kinds": flap, "bytes": total(flap)["bytes"], "payloads": total(flap)["payloads"]}
            return res
        finally:
            await run.close()


def table(name: str, res: dict[str, Any]) -> None:
    for scenario in ("idle", "load", "presence", "flap"):
        print(f"  {name} {scenario}:")
        for kind, row in res[scenario]["kinds"].items():
            print(f"    {kind:24s} payloads {row['payloads']:5.0f}  copies {row['copies']:5.0f}  "
                  f"bytes {row['bytes']:8.0f}  ({row['bytes'] / max(1, row['copies']):6.1f} B/copy)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="20 s of load instead of 60")
    ap.add_argument("--tick", type=float, default=0.5, help="virtual seconds between the edge's timer ticks "
                                                            "(the default receipt and presence intervals)")
    ap.add_argument("--receipt-interval", type=float, default=0.5,
                    help="virtual seconds a receipt may wait for a chat message to ride in ([chat] "
                         "receipt_interval)")
    ap.add_argument("--only", choices=("compact", "maps"), help="run one encoding only")
    args = ap.parse_args()
    load_seconds = 20.0 if args.quick else 60.0
    modes = [args.only == "compact"] if args.only else ([False, True] if HAS_COMPACT else [False])
    results = {("compact" if c else "maps"): asyncio.run(measure(c, load_seconds, args.tick, args.receipt_interval))
               for c in modes}
    if "compact" in results and "maps" in results:
        a, b = results["compact"], results["maps"]
        ratios = []
        for label, scenario, key in (("chat message bytes per copy", "load", "chat_message_bytes_per_copy"),
                                     ("all payload bytes per message copy", "load",
                                      "all_payload_bytes_per_message_copy"),
                                     ("payload bytes per presence change", "presence", "bytes_per_change"),
                                     ("payload bytes per link flap", "flap", "bytes")):
            x, y = a[scenario][key], b[scenario][key]
            ratios.append(f"{label} {x:.1f} / {y:.1f} = {x / y if y else float('nan'):.2f}")
        print("chat_wire: after/before (compact / maps): " + "; ".join(ratios)
              + f"; idle bytes per site per minute {a['idle']['bytes_per_site_per_minute']:.0f} / "
              f"{b['idle']['bytes_per_site_per_minute']:.0f}")
    for name, res in results.items():
        print(f"{name}: a 60-character line: {res['load']['chat_message_bytes_per_copy']:.1f} B per copy; "
              f"all payloads under load {res['load']['all_payload_bytes_per_message_copy']:.1f} B per message copy, "
              f"{res['load']['payloads_per_message']:.2f} payloads per message; idle "
              f"{res['idle']['bytes_per_site_per_minute']:.0f} B and {res['idle']['payloads_per_site_per_minute']:.1f} "
              f"payloads per site per minute; a presence change {res['presence']['bytes_per_change']:.0f} B; "
              f"a link flap {res['flap']['bytes']:.0f} B in {res['flap']['payloads']:.0f} payloads")
        table(name, res)
    path = write_result("chat_wire_quick" if args.quick else "chat_wire",
                        {"sites": len(SITES), "users_per_site": USERS, "line_chars": len(LINE),
                         "load_seconds": load_seconds, "tick": args.tick,
                         "receipt_interval": args.receipt_interval, **results})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
