"""A million hostile inputs of every kind against a real site: bounded work, bounded memory, the honest served.

Two halves, run side by side by default:

* RCM: ``faultinject.adversary.probe`` (site A, honest peer C, hostile peer B sending what
  ``faultinject.adversary.rcm_frames`` draws: every frame kind and every kind a ROUTED frame carries,
  numbers at and around 0, 2^31, 2^53, 2^63, 2^64 - 1, negative, NaN and the honest ceiling). Per kind:
  frames, how many closed B's link, violations (an exception escaping, more Python calls than the budget
  linear in the frame's size, a frame running for seconds, C not served, memory past its bound), the most
  calls one frame made, time per frame and peak memory.
* chat (kinds ``chat/...``): ``faultinject.adversary.chat_probe`` (a chat server over a history of
  ``--history`` messages; a signed-in hostile user and a hostile peer site sending what
  ``faultinject.adversary.chat_requests`` draws: every client frame, every payload a peer chat server
  sends through RCM, the RCM events a peer causes; the honest user alice in a room of her own). Per kind
  as above, with how many were refused (an error frame, a payload ignored) and the most SQLite pages,
  journal bytes, search VM steps and search thread time one input cost. The kinds ``chat/irc/...`` and
  ``chat/tak/...`` are the same site's IRC and TAK front ends, their own reader code fed without sockets
  (``faultinject.adversary.chat_fronts``): a hostile client's writes (``irc_lines``: every command, the
  line's limits and bytes; ``tak_events``: CoT XML, parser attacks, TAK protocol v1, the stream framing)
  while alice is also on both front ends and must stay served there.

Each half's kinds run in chunks of fresh sites across worker processes. The report leads with ratios
measured in the same run: the most calls any hostile input made against an honest one's (an honest DATA
frame from C; an honest ``say``, sent, delivered back and shown). A hostile input may cost more (a large
frame, a page of history, a search) but never by a number inside it.

    .venv/bin/python bench/fuzz_bounds.py                       # 1,000,000 inputs per kind, both halves, 2 workers
    .venv/bin/python bench/fuzz_bounds.py --frames 20000 --kinds chat       # one half (rcm or chat)
    .venv/bin/python bench/fuzz_bounds.py --frames 50000 --kinds FETCH,MISSED,chat/search,chat/rcm/missing
    .venv/bin/python bench/fuzz_bounds.py --frames 20000 --kinds chat/irc,chat/tak --jobs 1    # the front ends
    .venv/bin/python bench/fuzz_bounds.py --quick               # 200 RCM frames and 50 chat inputs per kind
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
from faultinject.adversary import chat_probe, chat_site, measure, probe  # noqa: E402
from faultinject.adversary.chat_probe import KINDS as CHAT_KINDS  # noqa: E402
from faultinject.adversary.rcm_frames import KINDS as RCM_KINDS  # noqa: E402

CHAT = "chat/"
KINDS = [*RCM_KINDS, *(CHAT + k for k in CHAT_KINDS)]
CHUNK = 50_000          # RCM frames per fresh site (a worker's unit of work)
CHAT_CHUNK = 20_000     # chat inputs per fresh site
SUMMED = ("count", "turned_away", "violations", "served", "micros_sum")
MAXED = ("peak_rss_mib", "p99_us", "max_us", "max_pages", "max_journal", "max_search_steps", "max_search_ms")


def _chunk(kind: str, count: int, seed: int, history: int) -> dict[str, Any]:
    """One fresh site taking ``count`` inputs of ``kind``: its summary, in the fields both halves share."""
    if kind.startswith(CHAT):
        chat = chat_probe.run_kind(kind[len(CHAT):], count, seed, history)
        s, micros = chat.summary(), chat.micros
        s["count"], s["turned_away"] = s.pop("inputs"), s.pop("refused")
    else:
        rcm = probe.run_kind(kind, count, seed)
        s, micros = rcm.summary(), rcm.micros
        s["count"], s["turned_away"] = s.pop("frames"), s.pop("closed")
    s["kind"] = kind
    s["micros_sum"] = sum(micros)
    return s


def _honest_calls() -> float:
    """Python calls for an honest DATA frame from C (the same site and hook as the hostile ones)."""
    import sys as _sys

    from rcm import wire

    p = probe.RcmProbe(1)
    p.warm()
    s = p.stack
    c = s.peers["C"]
    counter = measure.Calls()
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


def _work(kinds: list[str], frames: int, chat_inputs: int, seed: int, history: int) -> list[tuple[str, int, int, int]]:
    work = []
    for kind in kinds:
        chat = kind.startswith(CHAT)
        left, i = chat_inputs if chat else frames, 0
        while left > 0:
            n = min(CHAT_CHUNK if chat else CHUNK, left)
            work.append((kind, n, seed * 1_000_003 + sum(map(ord, kind)) * 1009 + i, history))
            left -= n
            i += 1
    return work


def _table(title: str, rows: list[dict[str, Any]], chat: bool) -> None:
    away = "refused" if chat else "closed"
    extra = f" {'pages':>7} {'journal':>9} {'srch ms':>7}" if chat else ""
    print(f"\n{title}\n{'kind':28} {'inputs':>10} {away:>7} {'viol.':>5} {'max calls':>9} {'(bytes)':>9} "
          f"{'mean us':>8} {'p99 us':>8} {'max us':>9} {'RSS MiB':>7}{extra}")
    for r in rows:
        mean = r["micros_sum"] / max(1, r["count"])
        more = f" {r['max_pages']:>7} {r['max_journal']:>9} {r['max_search_ms']:>7.1f}" if chat else ""
        print(f"{r['kind']:28} {r['count']:>10,} {r['turned_away'] / max(1, r['count']):>6.0%} {r['violations']:>5} "
              f"{r['max_calls']:>9} {r['max_calls_bytes']:>9} {mean:>8.0f} {r['p99_us']:>8.0f} {r['max_us']:>9.0f} "
              f"{r['peak_rss_mib']:>7.1f}{more}")
        for v in r["first_violations"][:3]:
            print(f"    {v}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", type=int, default=1_000_000, help="hostile inputs per kind (default 1,000,000)")
    ap.add_argument("--kinds", default="", help="comma-separated kinds, 'rcm' / 'chat' for a half, or a prefix of "
                                                 "kinds ('chat/irc', 'chat/peer'; default: all): " + ", ".join(KINDS))
    ap.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--history", type=int, default=chat_site.HISTORY,
                    help=f"messages in the chat site's history (default {chat_site.HISTORY})")
    ap.add_argument("--quick", action="store_true", help="200 RCM frames and 50 chat inputs per kind, one worker")
    args = ap.parse_args()
    chat_inputs = args.frames
    if args.quick:
        args.frames, chat_inputs, args.jobs = 200, 50, 1
    halves = {"rcm": list(RCM_KINDS), "chat": [k for k in KINDS if k.startswith(CHAT)]}
    kinds = [k for name in args.kinds.split(",") if name
             for k in halves.get(name, [k for k in KINDS if k.startswith(name + "/")] or [name])] or KINDS
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        ap.error(f"unknown kind {unknown[0]!r} (known: rcm, chat, a prefix of kinds, {', '.join(KINDS)})")
    work = _work(kinds, args.frames, chat_inputs, args.seed, args.history)
    started = time.time()
    honest = {"rcm": _honest_calls() if any(not k.startswith(CHAT) for k in kinds) else 0.0,
              "chat": chat_probe.honest_say_calls(history=args.history) if any(k.startswith(CHAT) for k in kinds)
              else 0.0}
    totals: dict[str, dict[str, Any]] = {}
    done = 0
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        futures = [pool.submit(_chunk, *w) for w in work]
        for f in as_completed(futures):
            s = f.result()
            t = totals.setdefault(s["kind"], {"kind": s["kind"], "max_calls": 0, "max_calls_bytes": 0,
                                              "first_violations": [], **dict.fromkeys(SUMMED, 0),
                                              **dict.fromkeys(MAXED, 0)})
            for k in SUMMED:
                t[k] += s[k]
            if s["max_calls"] > t["max_calls"]:
                t["max_calls"], t["max_calls_bytes"] = s["max_calls"], s["max_calls_bytes"]
            for k in MAXED:
                t[k] = max(t[k], s.get(k, 0))
            t["first_violations"] = (t["first_violations"] + s["first_violations"])[:10]
            done += 1
            print(f"  {done}/{len(work)} chunks ({time.time() - started:.0f} s)", file=sys.stderr, flush=True)
    rows = [totals[k] for k in kinds]
    inputs = sum(r["count"] for r in rows)
    violations = sum(r["violations"] for r in rows)
    print(f"fuzz_bounds: {inputs:,} hostile inputs, {violations} violations; {time.time() - started:.0f} s")
    ratios: dict[str, float] = {}
    for half, yardstick in (("rcm", "an honest DATA frame"), ("chat", "an honest say")):
        mine = [r for r in rows if r["kind"].startswith(CHAT) == (half == "chat")]
        if not mine:
            continue
        worst = max(mine, key=lambda r: r["max_calls"])
        ratios[half] = worst["max_calls"] / honest[half]
        print(f"  {half}: the costliest input made {ratios[half]:.1f}x the calls of {yardstick} ({worst['kind']}: "
              f"{worst['max_calls']} calls for an input of {worst['max_calls_bytes']} bytes; honest: "
              f"{honest[half]:.0f})")
    for half, title in (("rcm", "RCM (a hostile peer's frames)"),
                        ("chat", f"chat (a hostile user and peer site; history of {args.history} messages)")):
        mine = [r for r in rows if r["kind"].startswith(CHAT) == (half == "chat")]
        if mine:
            _table(title, mine, half == "chat")
    write_result("fuzz_bounds", {"inputs_per_kind": {"rcm": args.frames, "chat": chat_inputs},
                                 "history": args.history, "honest_calls": honest, "worst_ratio": ratios,
                                 "violations": violations,
                                 "kinds": [{k: v for k, v in r.items() if k != "micros_sum"} for r in rows]})
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
