"""A million hostile frames of every kind against a real site stack: bounded work, bounded memory, C served.

Runs ``faultinject.adversary.probe`` (site A, honest peer C, hostile peer B sending what
``faultinject.adversary.rcm_frames`` draws: every frame kind and every kind a ROUTED frame carries, numbers
at and around 0, 2^31, 2^53, 2^63, 2^64 - 1, negative, NaN and the honest ceiling) in chunks of fresh sites
across worker processes, and reports per kind: frames, how many closed B's link, violations (an exception
escaping, more Python calls than the budget linear in the frame's size, a frame running for seconds, C not
served, memory past its bound), the most calls one frame made, time per frame and peak memory.

It leads with a ratio measured in the same run: the most calls any hostile frame made against an honest
DATA frame's calls (C's 60-byte messages, handled by the same site with the same hook). A hostile frame may
cost more (a large frame, a FETCH that starts serving a window of repairs) but never by a number inside it.

    .venv/bin/python bench/fuzz_bounds.py                       # 1,000,000 frames per kind, 2 workers
    .venv/bin/python bench/fuzz_bounds.py --frames 50000 --kinds FETCH,MISSED
    .venv/bin/python bench/fuzz_bounds.py --quick               # 200 frames per kind, one worker
"""
from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import write_result  # noqa: E402
from faultinject.adversary import probe  # noqa: E402
from faultinject.adversary.rcm_frames import KINDS  # noqa: E402

CHUNK = 50_000          # frames per fresh site (a worker's unit of work)


def _chunk(kind: str, frames: int, seed: int) -> dict[str, Any]:
    report = probe.run_kind(kind, frames, seed)
    s = report.summary()
    s["micros_sum"] = sum(report.micros)
    return s


def _honest_calls() -> float:
    """Python calls for an honest DATA frame from C (the same site and hook as the hostile ones)."""
    import sys as _sys

    from rcm import wire

    p = probe.RcmProbe(1)
    p.warm()
    s = p.stack
    c = s.peers["C"]
    counter = probe._Calls()
    n = 2000
    for i in range(n):
        frame = [wire.DATA, c.inb.expected % wire.CHECK_MOD, 1, s.ordering.clock + 1, b"x" * 60]   # type: ignore[attr-defined]
        data = wire.encode_frame(frame)
        p.now += probe.TICK
        _sys.setprofile(counter)
        s.data_received(p.c, data, p.now)
        _sys.setprofile(None)
        if i % 100 == 0:
            s.data_received(p.c, wire.encode_frame([wire.ANNOUNCE, 0, s.ordering.clock]), p.now)  # type: ignore[attr-defined]
    return counter.n / n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", type=int, default=1_000_000, help="hostile frames per kind (default 1,000,000)")
    ap.add_argument("--kinds", default="", help="comma-separated kinds (default: all): " + ", ".join(KINDS))
    ap.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="200 frames per kind, one worker")
    args = ap.parse_args()
    if args.quick:
        args.frames, args.jobs = 200, 1
    kinds = [k for k in args.kinds.split(",") if k] or list(KINDS)
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        ap.error(f"unknown kind {unknown[0]!r} (known: {', '.join(KINDS)})")
    work = []
    for kind in kinds:
        left, i = args.frames, 0
        while left > 0:
            n = min(CHUNK, left)
            work.append((kind, n, args.seed * 1_000_003 + sum(map(ord, kind)) * 1009 + i))
            left -= n
            i += 1
    started = time.time()
    honest = _honest_calls()
    totals: dict[str, dict[str, Any]] = {}
    done = 0
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        futures = [pool.submit(_chunk, *w) for w in work]
        for f in as_completed(futures):
            s = f.result()
            t = totals.setdefault(s["kind"], {"kind": s["kind"], "frames": 0, "closed": 0, "violations": 0,
                                              "max_calls": 0, "max_calls_bytes": 0, "served": 0, "peak_rss_mib": 0.0,
                                              "p99_us": 0.0, "max_us": 0.0, "micros_sum": 0.0,
                                              "first_violations": []})
            for k in ("frames", "closed", "violations", "served", "micros_sum"):
                t[k] += s[k]
            if s["max_calls"] > t["max_calls"]:
                t["max_calls"], t["max_calls_bytes"] = s["max_calls"], s["max_calls_bytes"]
            for k in ("peak_rss_mib", "p99_us", "max_us"):
                t[k] = max(t[k], s[k])
            t["first_violations"] = (t["first_violations"] + s["first_violations"])[:10]
            done += 1
            print(f"  {done}/{len(work)} chunks ({time.time() - started:.0f} s)", file=sys.stderr, flush=True)
    rows = [totals[k] for k in kinds]
    worst = max(rows, key=lambda r: r["max_calls"])
    ratio = worst["max_calls"] / honest
    frames = sum(r["frames"] for r in rows)
    violations = sum(r["violations"] for r in rows)
    print(f"fuzz_bounds: {frames:,} hostile frames, {violations} violations; the costliest made {ratio:.1f}x the "
          f"calls of an honest DATA frame ({worst['kind']}: {worst['max_calls']} calls for a frame of "
          f"{worst['max_calls_bytes']} bytes; honest: {honest:.0f}); {time.time() - started:.0f} s")
    print(f"{'kind':16} {'frames':>10} {'closed':>7} {'viol.':>5} {'max calls':>9} {'(bytes)':>9} "
          f"{'mean us':>8} {'p99 us':>8} {'max us':>9} {'RSS MiB':>7}")
    for r in rows:
        mean = r["micros_sum"] / max(1, r["frames"])
        print(f"{r['kind']:16} {r['frames']:>10,} {r['closed'] / max(1, r['frames']):>6.0%} {r['violations']:>5} "
              f"{r['max_calls']:>9} {r['max_calls_bytes']:>9} {mean:>8.0f} {r['p99_us']:>8.0f} {r['max_us']:>9.0f} "
              f"{r['peak_rss_mib']:>7.1f}")
        for v in r["first_violations"][:3]:
            print(f"    {v}")
    write_result("fuzz_bounds", {"frames_per_kind": args.frames, "honest_calls": honest,
                                 "worst_ratio": ratio, "violations": violations,
                                 "kinds": [{k: v for k, v in r.items() if k != "micros_sum"} for r in rows]})
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
