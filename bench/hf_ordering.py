"""The ordering protocols on HF links under the paper's flaps, in the simulator: writes, bytes, latency, late marks.

Theory of operation
-------------------
Four sites, every pair linked (as ``bench/hf.py``), the HF profile's timeouts
(``deploy/examples/hf-4site.toml``: heartbeats every 5 s, liveness 20 s,
silence 40 s, suspect 120 s; relaying and repair on), every link paced to
2,400 bit/s, A-B and C-D following the paper's schedule, 30 s up / 10 s down
(seeded phases; the connections are reset). Each site sends a 60-byte line
every 5 s on average (exponential gaps) to every other site. The real RCM
stacks run in the seeded simulator (``faultinject.sim``) on a virtual clock:
nothing here depends on the machine's load, so every figure is exact and
repeatable.

Protocols (one mission each, same seed, same flaps, same sends):
``lamport`` (the paper's; ``announce_delay`` 0), ``lamport+window`` (the HF
profile: ``announce_delay`` 2.5 s), ``hybrid+window`` (2.5 s) and
``sequencer``. Per protocol, over the measured window (after a warm-up, before
a drain with no flaps and no sends):

* writes (each a TLS record and a packet on a real radio) and bytes per message
  copy, all frames and the ordering's own (ANNOUNCE, CTRL and their relayed
  forms: ``faultinject.sim.traffic``); with 40 B of IP/TCP and 22 B of TLS
  per write, the bytes a radio would carry;
* delivery latency at the other sites (virtual seconds, p50 and p95), the
  late share, the delivered share and the simulator's checkers' violations.

The first line printed is the ratio of the writes and of the radio bytes per
message copy, ``lamport`` over ``lamport+window``.

    .venv/bin/python bench/hf_ordering.py [--measure 300] [--seed 1]
    .venv/bin/python bench/hf_ordering.py --quick      # 60 s measured
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import write_result  # noqa: E402
from contracts.mission import RcmSettings  # noqa: E402
from faultinject.sim.cluster import SimConfig, Simulation  # noqa: E402
from faultinject.sim.measure import percentile  # noqa: E402
from faultinject.sim.topology import periodic_flaps  # noqa: E402
from faultinject.sim.traffic import Tally  # noqa: E402

HF = RcmSettings(heartbeat_timeout=5.0, liveness_timeout=20.0, silence_timeout=40.0, suspect_timeout=120.0,
                 reconnect_period=3.0, handshake_timeout=30.0, routing="relay", repair=True)
"""The HF example's [rcm] timeouts (deploy/examples/hf-4site.toml), without TLS (the simulator has none)."""
MODES: dict[str, tuple[str, float]] = {"lamport": ("lamport", 0.0), "lamport+window": ("lamport", 2.5),
                                       "hybrid+window": ("hybrid", 2.5), "sequencer": ("sequencer", 0.0)}
TLS_RECORD = 22
IP_TCP = 40
RATE_BPS = 2400
LINE = 60


class WriteTally(Tally):
    """A ``Tally`` that also counts the writes (packets, TLS records) made while active."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def __call__(self, site: str, conn: int, data: bytes) -> None:
        if self.active:
            self.writes += 1
        super().__call__(site, conn, data)


def run(mode: str, measure: float, seed: int, warm: float = 30.0, drain: float = 30.0) -> dict[str, Any]:
    protocol, delay = MODES[mode]
    end_load = warm + measure
    flaps = periodic_flaps([("A", "B"), ("C", "D")], 30.0, 10.0, end_load, seed)
    config = SimConfig(protocol=protocol, sites=4, chaos=end_load, heal=drain, quiet=drain, rate=1 / 5.0,
                       faults=0, subset_prob=0.0, payload=(LINE, LINE), link_rate=RATE_BPS,
                       settings=replace(HF, announce_delay=delay), episodes=flaps)
    sim = Simulation(seed, config)
    tally = WriteTally()
    sim.net.tap = tally
    sim.loop.at(warm, lambda: setattr(tally, "active", True))
    sim.loop.at(end_load, lambda: setattr(tally, "active", False))
    result = sim.run()
    names = sorted(sim.sites)
    sends = {r["msg_id"]: float(r["at"]) for r in result.records if r["kind"] == "send"}
    window = {m for m, at in sends.items() if warm <= at < end_load}
    lat: list[float] = []
    late = remote = 0
    for r in result.records:
        if r["kind"] == "deliver" and r["site"] != r["origin"]:
            remote += 1
            if r["msg_id"] in window:
                lat.append(float(r["at"]) - sends[r["msg_id"]])
                late += bool(r.get("late"))
    copies = len(window) * (len(names) - 1)
    total = sum(tally.site_total(s) for s in names)
    ordering = sum(tally.count(s, "ordering") for s in names)
    return {"mode": mode, "protocol": protocol, "announce_delay": delay, "messages": len(window),
            "writes_per_copy": tally.writes / copies, "bytes_per_copy": total / copies,
            "ordering_bytes_per_copy": ordering / copies,
            "radio_bytes_per_copy": (total + tally.writes * (TLS_RECORD + IP_TCP)) / copies,
            "latency_p50_s": percentile(lat, 50), "latency_p95_s": percentile(lat, 95),
            "late_share": late / len(lat) if lat else None,
            "delivered_share": remote / (len(sends) * (len(names) - 1)) if sends else None,
            "violations": len(result.violations), "violation_examples": [str(v) for v in result.violations[:3]]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--measure", type=float, default=300.0, help="seconds of traffic measured (virtual)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="60 s measured")
    a = ap.parse_args()
    if a.quick:
        a.measure = 60.0
    rows = [run(m, a.measure, a.seed) for m in MODES]
    by = {r["mode"]: r for r in rows}
    base, win = by["lamport"], by["lamport+window"]
    print(f"hf_ordering: lamport / lamport+window: {base['writes_per_copy'] / win['writes_per_copy']:.2f}x the "
          f"writes and {base['radio_bytes_per_copy'] / win['radio_bytes_per_copy']:.2f}x the radio bytes per "
          f"message copy; routine p95 {base['latency_p95_s']:.2f} -> {win['latency_p95_s']:.2f} s (virtual)")
    print(f"  {'mode':<16}{'writes':>8}{'B/copy':>8}{'ordering':>10}{'radio B':>9}{'p50 s':>7}{'p95 s':>7}"
          f"{'late':>7}{'deliv':>7}{'viol':>6}   (per message copy; radio: + 62 B of TLS and IP/TCP a write)")
    for r in rows:
        print(f"  {r['mode']:<16}{r['writes_per_copy']:>8.2f}{r['bytes_per_copy']:>8.1f}"
              f"{r['ordering_bytes_per_copy']:>10.1f}{r['radio_bytes_per_copy']:>9.1f}{r['latency_p50_s']:>7.2f}"
              f"{r['latency_p95_s']:>7.2f}{r['late_share']:>7.1%}{r['delivered_share']:>7.1%}{r['violations']:>6}")
    path = write_result("hf_ordering" + ("_quick" if a.quick else ""),
                        {"measure_s": a.measure, "seed": a.seed, "rate_bps": RATE_BPS, "flaps": "A-B, C-D 30 s up / "
                         "10 s down", "modes": rows})
    print(f"hf_ordering: -> {path}")


if __name__ == "__main__":
    main()
