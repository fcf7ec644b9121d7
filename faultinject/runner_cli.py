"""``python -m faultinject run SCENARIO``: the command line of the scenario runner.

``add_arguments`` declares the options, ``scenario_from_args`` reads the
scenario (a file, or a name in ``faultinject/scenarios/``) and applies the
overrides (``--time-scale``, ``--duration``, ``--p2p``, ``--outages``,
``--routing``, ``--parallel``, ``--seed``) to it, ``main`` runs it with
``faultinject.runner.run_scenario`` and ``print_summary`` prints one line per
trial (its failed checks below). The run itself is ``faultinject/runner.py``.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

from faultinject.runner import run_scenario
from faultinject.scenario import Scenario, ScenarioError
from faultinject.scenario_file import load_scenario, parse_scenario


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("scenario", metavar="SCENARIO", help="scenario file (TOML), or a name in faultinject/scenarios/")
    p.add_argument("--out", default=None, metavar="DIR",
                   help="output directory (default var/faultinject/<scenario>-<timestamp>/)")
    p.add_argument("--time-scale", type=float, default=None, metavar="F",
                   help="override [scenario] time_scale (0.1: ten times faster)")
    p.add_argument("--p2p", default=None, metavar="MODES", help="override [sweep] p2p, e.g. robust,tcp")
    p.add_argument("--outages", default=None, metavar="SECONDS", help="override [sweep] outage, e.g. 0,10,30")
    p.add_argument("--routing", default=None, metavar="MODES", help="override [sweep] routing, e.g. direct,relay")
    p.add_argument("--duration", type=float, default=None, metavar="S", help="override [scenario] duration")
    p.add_argument("--parallel", type=int, default=None, metavar="N", help="override [sweep] parallel")
    p.add_argument("--seed", type=int, default=None, metavar="N",
                   help="override [scenario] seed (random link flaps, process kills and link jitter follow it)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def resolve(name: str) -> Path:
    p = Path(name)
    if p.exists() or p.suffix == ".toml":
        return p
    return Path(__file__).parent / "scenarios" / f"{name}.toml"


def scenario_from_args(a: argparse.Namespace) -> Scenario:
    path = resolve(a.scenario)
    scen = load_scenario(path)
    raw = json.loads(json.dumps(scen.raw))
    changed = False
    if a.time_scale is not None:
        raw["scenario"]["time_scale"] = a.time_scale
        changed = True
    if a.duration is not None:
        raw["scenario"]["duration"] = a.duration
        changed = True
    overrides = (("p2p", a.p2p, str), ("outage", a.outages, float), ("routing", getattr(a, "routing", None), str))
    for key, val, conv in overrides:
        if val is not None:
            try:
                raw.setdefault("sweep", {})[key] = [conv(x) for x in val.split(",") if x.strip()]
            except ValueError:
                raise ScenarioError(f"--{'outages' if key == 'outage' else key} = {val!r} is not a list") from None
            changed = True
    if a.parallel is not None:
        raw.setdefault("sweep", {})["parallel"] = a.parallel
        changed = True
    if a.seed is not None:
        raw["scenario"]["seed"] = a.seed
        changed = True
    return parse_scenario(raw, path) if changed else scen


def print_summary(doc: dict[str, Any], out: Path) -> None:
    for t in doc["trials"]:
        fails = {k: v for k, v in t["checks"].items() if not v["passed"]}
        state = "ok" if (t["error"] is None and all(v["informational"] for v in fails.values())) else "FAIL"
        r = t["metrics"].get("received_ratio")
        aw = t["metrics"]["awareness"]
        print(f"{state:4} {t['trial']}: received/sent {('%.1f%%' % (100 * r)) if r is not None else '-'}, "
              f"suspicion {aw['suspicion_s'].get('mean', '-')} s, "
              f"restoration {aw['restoration_s'].get('mean', '-')} s, "
              f"logical connectivity {100 * aw['logical_connectivity']:.1f}% "
              f"(links up {100 * aw['link_up_share']:.1f}%)")
        if t["error"]:
            print(f"     error: {t['error']}")
        for name, c in fails.items():
            tag = " (informational)" if c["informational"] else ""
            print(f"     {name}{tag}: {c['count']} violations")
            if not c["informational"]:
                for v in c["violations"][:5]:
                    print(f"       {v}")
        m = t["metrics"].get("machine")
        if fails and m:         # a real-time bound broken on a starved machine reads differently
            share = m["cpu_pressure_share"]
            print(f"     machine: harness loop stalled {len(m['loop_stalls'])} times (longest "
                  f"{m['loop_lag_max_s']:.2f} s), CPU pressure "
                  f"{'-' if share is None else f'{100 * share:.0f}%'} of the run")
    print(f"results: {out / 'results.json'}")


def main(a: argparse.Namespace) -> int:
    try:
        scen = scenario_from_args(a)
    except ScenarioError as e:
        print(f"python -m faultinject run: error: {e}", file=sys.stderr)
        return 2
    out = Path(a.out) if a.out else Path("var/faultinject") / f"{scen.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    if out.exists() and any(out.iterdir()):
        print(f"python -m faultinject run: error: --out {out} is not empty", file=sys.stderr)
        return 2
    doc = asyncio.run(run_scenario(scen, out, quiet=a.quiet))
    print_summary(doc, out)
    return 0 if doc["passed"] else 1


__all__ = ["add_arguments", "main", "print_summary", "resolve", "scenario_from_args"]
