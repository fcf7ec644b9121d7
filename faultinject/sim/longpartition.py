"""The ``long-partition`` experiment in the simulator: one site cut off from all others, then healed.

Four sites at the paper's timeouts (suspect 60 s), each sending 2 messages a
second to every site; after a warm-up one site is cut off from all the
others for ``outage`` seconds (past the suspect timeout, so what is sent to
it meanwhile is skipped, and what it sends is skipped by the others), then
every link is up again and traffic goes on for ``after`` seconds. With
repair the sites exchange what they missed; without it the messages stay
missing. ``run`` measures, from the records every site kept: the share of
(message, destination) pairs delivered, duplicates, when the last message
sent before the heal was delivered everywhere (seconds after the heal), and
the bytes on the links (all of them, and those of the repair frames).

``time_scale`` multiplies every duration (timeouts, outage, repair period)
for a short version; the workload rate is divided by it, so the number of
messages stays that of the full run.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from contracts.mission import RcmSettings
from faultinject.checkers import summarize
from faultinject.checkers.history import missing_count

from .cluster import SimConfig, Simulation
from .schedule import Episode, compile_schedule

PAPER = RcmSettings(ordering="lamport")


def config(protocol: str = "lamport", repair: bool = True, outage: float = 300.0, warmup: float = 30.0,
           after: float = 120.0, time_scale: float = 1.0) -> SimConfig:
    s = time_scale
    settings = replace(PAPER, heartbeat_timeout=1.0 * s, liveness_timeout=5.0 * s, silence_timeout=10.0 * s,
                       suspect_timeout=60.0 * s, reconnect_period=3.0 * s, handshake_timeout=5.0 * s,
                       ack_interval=0.2 * s, repair_period=30.0 * s, retention=86400.0, repair=repair,
                       repair_rate=max(1024, int(PAPER.repair_rate / s)))
    return SimConfig(protocol=protocol, sites=4, chaos=(warmup + outage) * s, heal=after * s, quiet=10.0 * s,
                     rate=2.0 / s, faults=0, subset_prob=0.0, settings=settings, connect_timeout=1.0 * s,
                     margin=max(4.0 * s, 1.5), settle=max(6.0 * s, 2.5))   # the links keep their delays


def run(protocol: str = "lamport", repair: bool = True, outage: float = 300.0, warmup: float = 30.0,
        after: float = 120.0, time_scale: float = 1.0, seed: int = 18, site: str = "D") -> dict[str, Any]:
    """One run; the figures of docs/experiments.md (module docstring)."""
    cfg = config(protocol, repair, outage, warmup, after, time_scale)
    sim = Simulation(seed, cfg)
    start, heal = warmup * time_scale, (warmup + outage) * time_scale
    cut = tuple((a, b, "down") for a, b in ((min(site, o), max(site, o)) for o in sim.names if o != site))
    sim.episodes = [Episode("partition", start, heal, cut)]
    sim.changes = compile_schedule(sim.episodes, sim.names)
    result = sim.run()
    sends = [r for r in result.records if r["kind"] == "send"]
    got: dict[tuple[str, str], float] = {}
    dups = repaired = 0
    for r in result.records:
        if r["kind"] == "deliver":
            k = (r["site"], r["msg_id"])
            if k in got:
                dups += 1
            got.setdefault(k, r["at"])
            repaired += bool(r.get("repaired"))
    pairs = [(d, r["msg_id"]) for r in sends for d in sim.names]
    delivered = sum(1 for p in pairs if p in got)
    before_heal = [(d, r["msg_id"]) for r in sends if r["at"] < heal for d in sim.names]
    missing_after = [p for p in before_heal if p not in got]
    done = max((got[p] for p in before_heal if p in got), default=heal)
    repair_stats = [s.stack.stats()["repair"] for s in sim.sites.values() if s.stack is not None]
    return {
        "protocol": protocol, "repair": repair, "outage_s": outage, "time_scale": time_scale, "seed": seed,
        "sends": len(sends), "copies": len(pairs), "delivered": delivered,
        "delivered_share": round(delivered / len(pairs), 6) if pairs else None,
        "sent_before_heal_undelivered": len(missing_after),
        "all_delivered_s_after_heal": None if missing_after else round((done - heal) / time_scale, 3),
        "duplicates": dups, "repaired": repaired,
        "missing_reported": missing_count(result.records),
        "link_bytes": result.stats["bytes"],
        "repair_served_bytes": sum(s["served_bytes"] for s in repair_stats if s),
        "violations": summarize(result.violations),
    }
