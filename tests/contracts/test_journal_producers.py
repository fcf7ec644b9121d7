"""The three producers of journal records (the chat server, the simulator, the synthetic generator) write one
record as one line: each generated line is written again by the chat server's ``Journal`` and, where the
simulator journals the kind, built again by the simulator, and the lines are compared byte for byte."""
from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from chat_server.journal import Journal
from contracts import journal as J
from contracts.precedence import Precedence
from faultinject.sim.cluster import SimConfig, Simulation
from rcm.actions import Delivery, Missing, StatusChange
from spark_archive.generate import POSITIONS, generate


def generated(tmp_path: Path) -> list[dict[str, Any]]:
    """The records of a small mission with every extension, losses and repairs."""
    root = tmp_path / "generated"
    generate(root, sites=4, messages=150, seed=8, duration=1800.0, outages_per_hour=6.0, restart_prob=0.0,
             torn_prob=0.0, extensions=POSITIONS)
    return [json.loads(line) for path in sorted(root.rglob("*.jsonl")) for line in path.read_text().splitlines()]


def by_the_chat_server(tmp_path: Path, recs: list[dict[str, Any]]) -> list[str]:
    """The lines the chat server's journal writes for ``recs`` (its clock gives each record's ``at``)."""
    times = iter([r["at"] for r in recs])
    journal = Journal(tmp_path / "journal", recs[0]["site"], clock=lambda: next(times))
    for r in recs:
        f = {k: v for k, v in r.items() if k not in ("kind", "site", "at")}
        if r["kind"] in (J.SEND, J.DELIVER) and "precedence" in f:
            f["precedence"] = Precedence(f["precedence"])
        if r["kind"] == J.SEND:
            journal.send(**f)
        elif r["kind"] == J.MISSING:
            journal.missing(origin=f["origin"], ranges=f["ranges"], listed="seqs" in f)
        else:
            getattr(journal, r["kind"])(**f)
    asyncio.run(journal.close())
    return journal.path.read_text().splitlines()


def by_the_simulator(rec: dict[str, Any]) -> dict[str, Any]:
    """The record the simulator journals for what ``rec`` reports, at its site A (the tool field ``inc`` left
    out)."""
    sim = Simulation(1, SimConfig(sites=2))
    site = sim.sites["A"]
    sim.loop.now = rec["at"]
    if rec["kind"] == J.STATUS:
        action: Any = StatusChange(rec["peer"], rec["status"])
    elif rec["kind"] == J.MISSING:
        action = Missing(rec["origin"], tuple((a, b) for a, b in rec["ranges"]))
    else:
        site.n = rec["n"] - 1
        action = Delivery(rec["origin"], rec["seq"], tuple(rec["order"]), rec["late"], b"",
                          rec.get("precedence", "routine"), rec.get("repaired", False))
    sim._actions(site, [action])
    out, = [r for r in sim.records if r["kind"] == rec["kind"]]
    return {k: v for k, v in out.items() if k != "inc"}


def test_the_chat_server_writes_every_generated_line_as_the_generator_did(tmp_path: Path) -> None:
    recs = [r for r in generated(tmp_path) if r["site"] == "AWACS"]
    kinds = {r["kind"] for r in recs}
    assert kinds == {"send", "deliver", "status", "missing", "control", "acknowledge", "position"}
    written = by_the_chat_server(tmp_path, recs)
    for rec, line in zip(recs, written, strict=True):
        if rec["kind"] == J.SEND:                   # a chat server lists the sites it skipped, none here
            rec = J.record(**rec, skipped=[])
        assert line == J.dumps(rec)


def test_the_simulator_builds_the_generated_records_it_journals(tmp_path: Path) -> None:
    recs = generated(tmp_path)
    for kind in (J.STATUS, J.MISSING):
        for rec in [r for r in recs if r["kind"] == kind][:5]:
            assert J.dumps(by_the_simulator(rec)) == J.dumps({**rec, "site": "A"})
    content = J.KINDS[J.DELIVER].content | {"sent_at", "via"}   # the simulator's messages are opaque bytes
    delivered = [r for r in recs if r["kind"] == J.DELIVER]
    for rec in [r for r in delivered if r.get("repaired")][:3] + [r for r in delivered if r.get("late")][:3]:
        assert J.dumps(by_the_simulator(rec)) == J.dumps({k: v for k, v in rec.items() if k not in content}
                                                         | {"site": "A"})
