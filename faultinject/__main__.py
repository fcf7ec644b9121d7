"""Command line: ``python -m faultinject COMMAND ...``.

Commands are registered in ``COMMANDS`` (name -> (add_arguments, run)); adding
one (e.g. ``run SCENARIO``) is one more entry.

``sim``: run seeded simulations of the real RCM stacks and check every
property. A failing seed prints a replay command and leaves its trace (the
injected faults, the violations, and the records) under ``--trace-dir``.

``check DATA_DIR``: run the record checkers (reliability, duplicates, FIFO,
IGO, and in a labeled mission the journals' labels: ``checkers.leaks``) over
a real run's journals; connection awareness and robustness need the
ground-truth link timeline, which only the simulator (or a scenario runner)
has.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from contracts import journal as J

PROTOCOLS = ("lamport", "sequencer", "hybrid")


def _add_sim(p: argparse.ArgumentParser) -> None:
    p.add_argument("--protocol", default="lamport", choices=[*PROTOCOLS, "all"],
                   help="IGO protocol to run (all: each in turn, same seeds)")
    p.add_argument("--seeds", type=int, default=None, metavar="N",
                   help="number of seeds to run (default 100, or 1 with --seed)")
    p.add_argument("--seed", type=int, default=None, metavar="S",
                   help="first seed; alone, replays exactly this seed")
    p.add_argument("--sites", type=int, default=3, help="number of sites (2-8; up to 64 on a partial mesh)")
    p.add_argument("--topology", default="full", choices=["full", "ring-chords"],
                   help="full: every pair of sites linked; ring-chords: a ring plus one seeded chord per site "
                        "(mean 4 neighbours; faultinject.sim.topology), the others never linked, max_hops 8")
    p.add_argument("--faults", type=int, default=4, help="fault episodes per run")
    p.add_argument("--chaos", type=float, default=20.0, help="seconds of faults")
    p.add_argument("--heal", type=float, default=15.0, help="seconds of healed network after")
    p.add_argument("--rate", type=float, default=1.0, help="messages per second per site")
    p.add_argument("--skew", type=float, default=0.01, help="max clock skew of a site, seconds")
    p.add_argument("--durable", action="store_true",
                   help="sites keep a write-ahead log and restart from it (the server's default)")
    p.add_argument("--precedence", action="store_true",
                   help="mixed precedence (5%% flash, 5%% immediate, 15%% priority) on links paced to "
                        "--link-rate (issue 19)")
    p.add_argument("--link-rate", type=int, default=56000, metavar="BPS",
                   help="with --precedence: every site paces every link to this many bits per second")
    p.add_argument("--announce-delay", type=float, default=0.0, metavar="S",
                   help="[rcm] announce_delay: Lamport and hybrid hold a clock announcement up to S seconds "
                        "(docs/ordering.md, 'Announcements on slow links')")
    p.add_argument("--paced-share", type=float, default=1.0, metavar="F",
                   help="with --precedence: pace only this share of the links (drawn per seed), so routes "
                        "mix paced and unpaced hops")
    p.add_argument("--repair-faults", type=int, default=0, metavar="N",
                   help="N more episodes: a site cut off past suspect_timeout, then a crash during the repair")
    p.add_argument("--labels", action="store_true",
                   help="security labels (issue 38): a seeded scheme, a clearance per site and a label per "
                        "message, sent only to the sites cleared for it; the leak checker watches every frame, "
                        "delivery, log record and journal record (faultinject.checkers.leaks)")
    p.add_argument("--trace-dir", default="test-artifacts/sim", help="where failing traces go")
    p.add_argument("--records", action="store_true",
                   help="with --seed: also write the run's records as JSON Lines")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


PRECEDENCE_MIX = {"precedence_mix": (0.05, 0.05, 0.15)}
"""``sim --precedence``: shares of FLASH, IMMEDIATE and PRIORITY sends."""


def _config_args(a: argparse.Namespace) -> str:
    return (f"--sites {a.sites} --faults {a.faults} --chaos {a.chaos:g} --heal {a.heal:g} "
            f"--rate {a.rate:g} --skew {a.skew:g}" + (" --durable" if a.durable else "")
            + (f" --precedence --link-rate {a.link_rate}" if a.precedence else "")
            + (f" --paced-share {a.paced_share:g}" if a.precedence and a.paced_share < 1 else "")
            + (f" --repair-faults {a.repair_faults}" if a.repair_faults else "")
            + (f" --topology {a.topology}" if a.topology != "full" else "")
            + (" --labels" if a.labels else "")
            + (f" --announce-delay {a.announce_delay:g}" if a.announce_delay else ""))


def _run_sim(a: argparse.Namespace) -> int:
    from faultinject.sim import SimConfig, SimError, percentile, simulate

    most = 8 if a.topology == "full" else 64
    if not 2 <= a.sites <= most:
        print(f"faultinject sim: --sites must be between 2 and {most}"
              + (" (up to 64 with --topology ring-chords)" if a.topology == "full" else ""), file=sys.stderr)
        return 2
    if a.seeds is not None and a.seeds < 1:
        print("faultinject sim: --seeds must be at least 1", file=sys.stderr)
        return 2
    if a.link_rate < 1200:
        print("faultinject sim: --link-rate must be at least 1200 bits per second", file=sys.stderr)
        return 2
    if not 0 <= a.paced_share <= 1:
        print("faultinject sim: --paced-share must be between 0 and 1", file=sys.stderr)
        return 2
    if a.chaos <= 0 or a.heal <= 0 or a.rate <= 0 or a.faults < 0 or a.skew < 0 or a.repair_faults < 0:
        print("faultinject sim: --chaos, --heal and --rate must be positive, --faults and "
              "--skew >= 0", file=sys.stderr)
        return 2
    first = a.seed if a.seed is not None else 0
    count = a.seeds if a.seeds is not None else (1 if a.seed is not None else 100)
    protocols = PROTOCOLS if a.protocol == "all" else (a.protocol,)
    trace_dir = Path(a.trace_dir)
    failed = 0
    rows = []
    partial_mesh: dict[str, Any] = {}
    from dataclasses import replace

    from faultinject.sim import SIM_SETTINGS
    if a.topology == "ring-chords":
        from faultinject.sim.topology import ring_with_chords, site_names
        partial_mesh = {"topology": ring_with_chords(site_names(a.sites), a.sites, seed=1),
                        "settings": replace(SIM_SETTINGS, max_hops=8)}
    if a.announce_delay < 0:
        print("faultinject sim: --announce-delay must be 0 or more seconds", file=sys.stderr)
        return 2
    if a.announce_delay:
        partial_mesh["settings"] = replace(partial_mesh.get("settings", SIM_SETTINGS), announce_delay=a.announce_delay)
    for proto in protocols:
        cfg = SimConfig(protocol=proto, sites=a.sites, faults=a.faults, chaos=a.chaos,
                        heal=a.heal, rate=a.rate, skew=a.skew, durable=a.durable, repair_faults=a.repair_faults,
                        labels=a.labels,
                        **partial_mesh,
                        **(PRECEDENCE_MIX | {"link_rate": a.link_rate, "paced_share": a.paced_share}
                           if a.precedence else {}))
        kinds: dict[str, int] = {}
        lat: list[float] = []
        waits: list[float] = []
        late = total = repaired = 0
        bad_seeds: list[int] = []
        t0 = time.monotonic()
        progress = None
        if not a.quiet and count > 1:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
            progress = Progress(TextColumn(f"{proto:9}"), BarColumn(), MofNCompleteColumn(),
                                TextColumn("{task.fields[status]}"), TimeRemainingColumn())
            task = progress.add_task(proto, total=count, status="")
            progress.start()
        try:
            for seed in range(first, first + count):
                try:
                    r = simulate(seed, cfg)
                    violations = r.violations
                except SimError as e:
                    r, violations = None, []
                    err = str(e)
                if r is not None:
                    lat += r.stats["stable_latencies"]
                    waits += r.stats["unstable_waits"]
                    late += r.stats["late"]
                    total += r.stats["deliveries"]
                    repaired += sum(1 for x in r.records if x.get("repaired"))
                if violations or r is None:
                    bad_seeds.append(seed)
                    trace_dir.mkdir(parents=True, exist_ok=True)
                    path = trace_dir / f"{proto}-seed{seed}.json"
                    if r is not None:
                        for v in violations:
                            kinds[v.kind] = kinds.get(v.kind, 0) + 1
                        path.write_text(json.dumps({**r.trace_json(), "records": r.records}))
                        first_v = str(violations[0])
                    else:
                        kinds["sim-error"] = kinds.get("sim-error", 0) + 1
                        path.write_text(json.dumps({"seed": seed, "protocol": proto, "error": err}))
                        first_v = err
                    msg = (f"FAIL {proto} seed {seed}: {first_v}\n"
                           f"  replay: python -m faultinject sim --protocol {proto} --seed {seed} "
                           f"{_config_args(a)}\n  trace:  {path}")
                    if progress is not None:
                        progress.console.print(msg)
                    else:
                        print(msg)
                elif count == 1 and r is not None:
                    print(f"ok {proto} seed {seed}: {r.stats['sends']} sends, "
                          f"{r.stats['deliveries']} deliveries ({r.stats['late']} late), "
                          f"{len(r.trace)} injected faults: {json.dumps(r.trace)}")
                if count == 1 and a.records and r is not None:
                    trace_dir.mkdir(parents=True, exist_ok=True)
                    rp = trace_dir / f"{proto}-seed{seed}.records.jsonl"
                    rp.write_text("".join(J.dumps(x) + "\n" for x in r.records))
                    print(f"records: {rp}")
                if progress is not None:
                    progress.update(task, advance=1, status=f"{len(bad_seeds)} failing")
        finally:
            if progress is not None:
                progress.stop()
        dt = time.monotonic() - t0
        failed += len(bad_seeds)
        held = sum(1 for w in waits if w > 1.0)
        rows.append((proto, count, dt, bad_seeds, kinds, lat, late, total, held, len(waits)))
        print(f"{proto}: {count} seeds in {dt:.1f} s ({count / dt:.1f} seeds/s), "
              f"{len(bad_seeds)} failing{(' ' + json.dumps(kinds)) if kinds else ''}, {repaired} repaired deliveries")
    if count > 1:
        print()
        print("| protocol | seeds | failing | stable p50 (ms) | stable p99 (ms) | late share | "
              "held > 1 s during instability |")
        print("|---|---|---|---|---|---|---|")
        for proto, n, _dt, bad, _kinds, lat, late, total, held, nw in rows:
            print(f"| {proto} | {n} | {len(bad)} | {percentile(lat, 50) * 1000:.0f} | "
                  f"{percentile(lat, 99) * 1000:.0f} | {late / max(total, 1):.2%} | "
                  f"{held / max(nw, 1):.2%} ({held} of {nw}) |")
    return 1 if failed else 0


def _add_check(p: argparse.ArgumentParser) -> None:
    p.add_argument("data_dir", help="a mission's data_dir: DATA_DIR/<site>/journal/*.jsonl")
    p.add_argument("--margin", type=float, default=5.0,
                   help="seconds after a view change before IGO is held to stable rules")
    p.add_argument("--settle", type=float, default=10.0,
                   help="seconds a message may take in a stable period")


def _run_check(a: argparse.Namespace) -> int:
    from faultinject.checkers import History, check_all, check_journal_labels, load_journals, summarize

    root = Path(a.data_dir)
    if not root.is_dir():
        print(f"faultinject check: {root} is not a directory", file=sys.stderr)
        return 2
    records, sites, bad = load_journals(root)
    if not sites:
        print(f"faultinject check: no <site>/journal/ under {root}", file=sys.stderr)
        return 2
    violations = check_all(History(records, sites, infer_repaired=True), margin=a.margin, settle=a.settle)
    violations += check_journal_labels(records)        # labeled missions: no journal holds what it may not
    print(f"{len(records)} records from {len(sites)} sites ({', '.join(sites)}), "
          f"{bad} unreadable lines skipped")
    for v in violations[:50]:
        print(f"  {v}")
    if len(violations) > 50:
        print(f"  ... and {len(violations) - 50} more")
    print(f"{len(violations)} violations {json.dumps(summarize(violations))}" if violations
          else "no violations")
    return 1 if violations else 0


def _runner() -> ModuleType:  # imported on use: the runner pulls in aiohttp, matplotlib, the chat client
    from faultinject import runner_cli
    return runner_cli


COMMANDS: dict[str, tuple[Callable[[argparse.ArgumentParser], None],
                          Callable[[argparse.Namespace], int], str]] = {
    "sim": (_add_sim, _run_sim, "seeded simulations of the RCM stacks, with property checks"),
    "run": (lambda p: _runner().add_arguments(p), lambda a: _runner().main(a),
            "run a scenario file on real processes: faults, workload, checks, plots"),
    "check": (_add_check, _run_check, "check a real run's journals (reliability, FIFO, IGO)"),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m faultinject",
                                     description="Fault injection for the RCM suite.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (add, _, helptext) in COMMANDS.items():
        add(sub.add_parser(name, help=helptext, description=helptext))
    a = parser.parse_args(argv)
    try:
        return COMMANDS[a.command][1](a)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
