"""Growth with the number of sites (issue 36 item 6): the simulator at 4 to 64 sites on a partial mesh.

Each size is one simulated mission (``faultinject.sim.scaling``; the real RCM
stacks on a virtual clock): a ring through every site plus as many seeded
chords as sites (mean 4 neighbours, 2 to 7 each; diameter 1 to 6 links), a
quarter of the chords flapping 30 s up / 10 s down (reset; the ring never
flaps, so a path always exists), link delays 5-80 ms plus jitter, the paper's
timeouts (heartbeat 1 s, liveness 5 s, silence 10 s, suspect 60 s, reconnect
3 s), ``routing = "relay"`` (max_hops 8), repair on, and a modest chat load:
every site sends 2 messages a minute (60 bytes, to every site). After 10 s
of warm-up, 60 s are measured, then 10 s drain. Each size also runs *idle*
(no flaps, nobody speaks): what a site pays before anyone speaks, heartbeats
and the link-state refresh alone.

Per size: heartbeat, link-state, ordering and all control bytes a site writes
per minute (mean over sites), bytes per message per link (all bytes on the
links / messages / links), IGO p50 delivery latency (virtual seconds), the
delivered share. The growth is fitted by least squares: log(bytes) against
log(sites) (the exponent: 0 is flat, 1 linear), and every site's own bytes
against log(sites) and log(its neighbours) together. The goal (issue 36): a
site's overhead grows with its neighbours, not with the sites of the
mission. The summary leads with the ratio 64 sites / 4 sites and the exponents.

    .venv/bin/python bench/scaling.py [--sizes 4,8,16,32,64] [--protocols lamport|all] [--measure 60]
    .venv/bin/python bench/scaling.py --quick      # 4, 8 and 16 sites, 20 s measured (a smoke run)

The plot goes to docs/img/scaling.png (``--plot``; a quick run's to the results directory).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import RESULTS, write_result  # noqa: E402
from faultinject.sim.scaling import PAPER, MissionSpec, fit, fit2, measure_mission  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PROTOCOLS = ("lamport", "sequencer", "hybrid")
PER_SITE = ("heartbeat", "linkstate", "ordering", "control", "total")
LABELS = {"heartbeat": "heartbeat", "linkstate": "link-state", "ordering": "ordering",
          "ack": "relayed acks", "control": "all control", "total": "all bytes", "data": "messages"}


def run_one(spec: MissionSpec) -> dict[str, Any]:
    return measure_mission(spec)


def fits(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Growth fits for one protocol's sizes (see the module docstring)."""
    sizes = [r["sites"] for r in rows]
    out: dict[str, Any] = {"per_site_per_minute_vs_sites": {
        k: fit(sizes, [r["per_site_per_minute"][k] for r in rows]) for k in (*PER_SITE, "ack", "data")}}
    out["bytes_per_message_per_link_vs_sites"] = fit(sizes, [r["bytes_per_message_per_link"] for r in rows])
    out["latency_p50_vs_sites"] = fit(sizes, [r["latency_p50_s"] for r in rows])
    out["per_site_vs_sites_and_neighbours"] = {
        k: fit2([(r["sites"], s["neighbours"], s[k]) for r in rows for s in r["per_site"]])
        for k in PER_SITE}
    return out


def fmt(x: Any, spec: str = ".0f") -> str:
    return "-" if x is None else format(x, spec)


def exponent(f: dict[str, float] | None, key: str = "exponent") -> str:
    return "-" if f is None else f"{f[key]:+.2f}"


def table(rows: list[dict[str, Any]]) -> list[str]:
    out = ["| protocol | sites | links | neighbours (mean, min-max) | diameter | heartbeat B/site/min | "
           "link-state B/site/min | ordering B/site/min | all control B/site/min | all B/site/min | "
           "B/message/link | IGO p50 (s) | delivered | violations | wall (s) |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        p = r["per_site_per_minute"]
        out.append(f"| {r['protocol']} | {r['sites']} | {r['links']} | {r['mean_neighbours']:.1f} "
                   f"({r['min_neighbours']}-{r['max_neighbours']}) | {r['diameter']} | {p['heartbeat']:.0f} | "
                   f"{p['linkstate']:.0f} | {p['ordering']:.0f} | {p['control']:.0f} | {p['total']:.0f} | "
                   f"{fmt(r['bytes_per_message_per_link'])} | {fmt(r['latency_p50_s'], '.3f')} | "
                   f"{fmt(100 * r['delivered_share'] if r['delivered_share'] is not None else None, '.1f')}% | "
                   f"{r['violations'] if r['checked'] else 'not checked'} | {r['wall_s']:.1f} |")
    return out


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(12, 8.5))
    (ax_site, ax_msg), (ax_lat, ax_deg) = axes
    colours = {"heartbeat": "tab:blue", "linkstate": "tab:orange", "ordering": "tab:red", "control": "black",
               "ack": "tab:purple"}
    styles = {"lamport": "-", "sequencer": "--", "hybrid": ":"}
    first = next(iter(result["runs"]))
    isizes = [r["sites"] for r in result["idle"]]
    for k in ("heartbeat", "linkstate"):
        g = result["idle_fits"][k]
        label = f"{LABELS[k]} (idle): N^{g['exponent']:.2f}" if g else f"{LABELS[k]} (idle)"
        ax_site.plot(isizes, [r["per_site_per_minute"][k] for r in result["idle"]], "-.", marker="s", alpha=0.6,
                     color=colours[k], label=label)
    for proto, rows in result["runs"].items():
        sizes = [r["sites"] for r in rows]
        f = result["fits"][proto]
        for k in ("heartbeat", "linkstate", "ordering", "ack", "control") if proto == first else ("ordering",):
            ys = [r["per_site_per_minute"][k] for r in rows]
            g = f["per_site_per_minute_vs_sites"][k]
            label = f"{LABELS[k]} ({proto}): N^{g['exponent']:.2f}" if g else f"{LABELS[k]} ({proto})"
            ax_site.plot(sizes, ys, styles[proto], marker="o", color=colours[k], label=label)
        ys = [r["bytes_per_message_per_link"] for r in rows]
        g = f["bytes_per_message_per_link_vs_sites"]
        ax_msg.plot(sizes, ys, styles[proto], marker="o", label=f"{proto}: N^{g['exponent']:.2f}" if g else proto)
        ys = [r["latency_p50_s"] for r in rows]
        g = f["latency_p50_vs_sites"]
        ax_lat.plot(sizes, ys, styles[proto], marker="o", label=f"{proto}: N^{g['exponent']:.2f}" if g else proto)
        for r in rows:
            if r["delivered_share"] is not None and r["delivered_share"] < 0.99 and r["latency_p50_s"]:
                ax_lat.annotate(f"{proto}: {r['delivered_share']:.0%} delivered", (r["sites"], r["latency_p50_s"]),
                                textcoords="offset points", xytext=(-110, -4), fontsize=7)
        if proto == first:
            for r in rows:
                degs = [s["neighbours"] for s in r["per_site"]]
                hb_ls = [s["heartbeat"] + s["linkstate"] for s in r["per_site"]]
                ax_deg.scatter(degs, hb_ls, s=14, label=f"{r['sites']} sites")
    ax_site.set(xscale="log", yscale="log", xlabel="sites", ylabel="bytes a site writes per minute",
                title="Per-site control traffic (a partial mesh, mean 4 neighbours)")
    ax_msg.set(xscale="log", xlabel="sites", ylabel="bytes per message per link",
               title="All link bytes / messages / links")
    ax_lat.set(xscale="log", yscale="log", xlabel="sites", ylabel="IGO p50 latency (virtual s)",
               title="Delivery latency (messages sent in the measured minute)")
    g2 = result["fits"][first]["per_site_vs_sites_and_neighbours"]
    hb, ls = g2["heartbeat"], g2["linkstate"]
    ax_deg.set(xlabel="the site's neighbours (d)", ylabel="heartbeat + link-state bytes per minute",
               title=f"Each site against its neighbours ({first}, under load)")
    ax_deg.text(0.02, 0.97, f"fits over every site: heartbeat N^{exponent(hb, 'sites_exponent')} "
                            f"d^{exponent(hb, 'neighbours_exponent')}\nlink-state N^{exponent(ls, 'sites_exponent')} "
                            f"d^{exponent(ls, 'neighbours_exponent')}",
                transform=ax_deg.transAxes, va="top", fontsize=8)
    for ax in (ax_site, ax_msg, ax_lat):
        ax.set_xticks(sorted({r["sites"] for rows in result["runs"].values() for r in rows}))
        ax.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
        ax.get_xaxis().set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.grid(True, which="both", alpha=0.3)
    ax_deg.grid(True, alpha=0.3)
    ax_site.legend(fontsize=6, loc="upper left")
    for ax in (ax_msg, ax_lat):
        ax.legend(fontsize=7)
    ax_deg.legend(fontsize=7, loc="lower right")
    fig.suptitle(f"Growth with the number of sites: {result['measure_s']:.0f} s measured, "
                 f"{result['rate_per_site_per_minute']:g} messages/site/minute, relay and repair on")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="4,8,16,32,64", help="numbers of sites, comma-separated")
    ap.add_argument("--protocols", default="lamport", help="comma-separated, or all")
    ap.add_argument("--warm", type=float, default=10.0, help="virtual seconds before measuring")
    ap.add_argument("--measure", type=float, default=60.0, help="virtual seconds measured")
    ap.add_argument("--drain", type=float, default=10.0, help="virtual seconds after (no sends, no flaps)")
    ap.add_argument("--rate", type=float, default=2.0, help="messages per site per minute")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--check-up-to", type=int, default=16, metavar="N",
                    help="run the simulator's checkers on missions of at most N sites (they cost time)")
    ap.add_argument("--jobs", type=int, default=2, help="missions simulated at once (processes)")
    ap.add_argument("--plot", type=Path, default=None, help="default docs/img/scaling.png")
    ap.add_argument("--quick", action="store_true", help="4, 8 and 16 sites, 20 s measured (a smoke run)")
    ap.add_argument("--from-json", type=Path, default=None, metavar="PATH",
                    help="no simulation: plot and summarise a earlier run's result file")
    a = ap.parse_args()
    if a.from_json is not None:
        result: dict[str, Any] = json.loads(a.from_json.read_text())
        plot(result, a.plot or ROOT / "docs" / "img" / "scaling.png")
        summarise(result, a.from_json)
        return
    up, down = 30.0, 10.0
    if a.quick:
        a.sizes, a.warm, a.measure, a.drain = "4,8,16", 6.0, 20.0, 6.0
        up, down = 10.0, 5.0
    sizes = [int(x) for x in a.sizes.split(",")]
    protocols = list(PROTOCOLS) if a.protocols == "all" else a.protocols.split(",")
    if any(n < 2 for n in sizes) or not set(protocols) <= set(PROTOCOLS):
        ap.error(f"sizes must be at least 2 and protocols among {', '.join(PROTOCOLS)}")
    if a.plot is None:
        a.plot = RESULTS / "scaling_quick.png" if a.quick else ROOT / "docs" / "img" / "scaling.png"
    specs = [MissionSpec(n, protocol=p, seed=a.seed, warm=a.warm, measure=a.measure, drain=a.drain,
                         rate=a.rate / 60.0, up=up, down=down, settings=replace(PAPER), check=n <= a.check_up_to)
             for p in protocols for n in sizes]
    idle = [replace(MissionSpec(n, protocol=protocols[0], seed=a.seed, warm=a.warm, measure=a.measure,
                                drain=a.drain, settings=replace(PAPER), check=n <= a.check_up_to),
                    rate=0.0, flap_share=0.0) for n in sizes]
    t0 = time.monotonic()
    order = sorted([*specs, *idle], key=lambda s: -s.sites * (1 + s.rate))   # the longest first
    with ProcessPoolExecutor(max(1, a.jobs)) as pool:
        done = dict(zip(order, pool.map(run_one, order)))
    wall = time.monotonic() - t0
    runs = {p: [done[s] for s in specs if s.protocol == p] for p in protocols}
    idle_runs = [done[s] for s in idle]
    result = {
        "sizes": sizes, "protocols": protocols, "seed": a.seed, "warm_s": a.warm, "measure_s": a.measure,
        "drain_s": a.drain, "rate_per_site_per_minute": a.rate, "payload_bytes": 60, "flap_up_s": up,
        "flap_down_s": down, "topology": "ring plus one seeded chord per site (mean 4 neighbours); a quarter of "
        "the chords flap", "settings": {"heartbeat_timeout": PAPER.heartbeat_timeout,
                                        "liveness_timeout": PAPER.liveness_timeout,
                                        "silence_timeout": PAPER.silence_timeout,
                                        "suspect_timeout": PAPER.suspect_timeout,
                                        "reconnect_period": PAPER.reconnect_period, "routing": PAPER.routing,
                                        "max_hops": PAPER.max_hops, "repair": PAPER.repair},
        "wall_s": wall, "runs": runs, "fits": {p: fits(rows) for p, rows in runs.items()},
        "idle": idle_runs, "idle_fits": {k: fit(sizes, [r["per_site_per_minute"][k] for r in idle_runs])
                                         for k in ("heartbeat", "linkstate", "control")}}
    plot(result, a.plot)
    result["plot"] = str(a.plot)
    summarise(result, write_result("scaling_quick" if a.quick else "scaling", result))


def summarise(result: dict[str, Any], path: Path) -> None:
    """The summary lines (ratio and exponents first), then the tables."""
    runs, idle_runs, sizes = result["runs"], result["idle"], result["sizes"]
    for p, rows in runs.items():
        lo, hi = rows[0], rows[-1]
        f = result["fits"][p]
        ps = f["per_site_per_minute_vs_sites"]

        def ratio(k: str, lo: dict[str, Any] = lo, hi: dict[str, Any] = hi) -> str:
            a_, b_ = lo["per_site_per_minute"][k], hi["per_site_per_minute"][k]
            return f"{b_ / a_:.1f}x" if a_ else "-"
        g2 = f["per_site_vs_sites_and_neighbours"]
        print(f"scaling: {p} {lo['sites']}->{hi['sites']} sites: per-site control bytes/min {ratio('control')} "
              f"(N^{exponent(ps['control'])}), heartbeat {ratio('heartbeat')} (N^{exponent(ps['heartbeat'])}), "
              f"link-state {ratio('linkstate')} (N^{exponent(ps['linkstate'])}), ordering {ratio('ordering')} "
              f"(N^{exponent(ps['ordering'])}); per site against sites and neighbours: link-state "
              f"N^{exponent(g2['linkstate'], 'sites_exponent')} d^{exponent(g2['linkstate'], 'neighbours_exponent')}, "
              f"heartbeat N^{exponent(g2['heartbeat'], 'sites_exponent')} "
              f"d^{exponent(g2['heartbeat'], 'neighbours_exponent')}; bytes/message/link "
              f"N^{exponent(f['bytes_per_message_per_link_vs_sites'])}; IGO p50 "
              f"{fmt(lo['latency_p50_s'], '.2f')} -> {fmt(hi['latency_p50_s'], '.2f')} s; delivered "
              f"{min(r['delivered_share'] or 0 for r in rows):.1%} (least); "
              f"{sum(r['violations'] for r in rows)} violations in the checked runs")
    fi = result["idle_fits"]
    lo, hi = idle_runs[0]["per_site_per_minute"], idle_runs[-1]["per_site_per_minute"]
    print(f"scaling: idle {sizes[0]}->{sizes[-1]} sites: heartbeat {lo['heartbeat']:.0f} -> {hi['heartbeat']:.0f} "
          f"B/site/min (N^{exponent(fi['heartbeat'])}), link-state {lo['linkstate']:.0f} -> {hi['linkstate']:.0f} "
          f"(N^{exponent(fi['linkstate'])})")
    print()
    print("\n".join(table([r for rows in runs.values() for r in rows])))
    print()
    print("Idle (no flaps, nobody speaks):")
    print("\n".join(table(idle_runs)))
    print(f"\n{sum(map(len, runs.values())) + len(idle_runs)} missions in {result['wall_s']:.0f} s -> {path} "
          f"(plot: {result['plot']})")


if __name__ == "__main__":
    main()
