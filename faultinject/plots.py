"""PNG plots of a scenario run (matplotlib's object API, no pyplot state), in scenario seconds.

Trials of a sweep are evaluated in worker threads while others still run,
so nothing here touches pyplot's global figure registry.

* ``<trial>/awareness.png`` (the paper's Figure 6): the measured pair's link
  state against the logical status one site reports for the other.
* ``<trial>/delivery.png`` (Figure 8): delivery rate (messages per scenario
  second) and per-message latency at the measured site, down intervals shaded.
* ``reliability.png`` (Figure 7), for sweeps: message copies received / sent
  against outage length, one line per p2p mode.
* ``routing.png``, for a ``[sweep] routing``: the trials side by side, direct
  links against relaying: latency p50/p95 between sites whose direct link
  flaps (while it is down), late share, most deliveries out of place at a
  site, and link bytes per message.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from matplotlib.figure import Figure

from contracts.status import LinkStatus
from faultinject.checkers.history import UP, History, LinkTimeline

if TYPE_CHECKING:
    from faultinject.runner import TrialResult
    from faultinject.scenario import Scenario, Trial

STATUS_Y = {LinkStatus.DISCONNECTED.value: 0, LinkStatus.SUSPECTED.value: 1, LinkStatus.CONNECTED.value: 2}
LINK_Y = {"up": 2, "down": 0, "blackhole": 0}
MODE_STYLE = {"tcp": ("TCP", "tab:red", "s"), "tcp-suspect": ("TCP + Suspected", "tab:orange", "^"),
              "robust": ("Robust P2P", "tab:blue", "o")}


def _steps(tl: Any, t0: float, t1: float, s: float, ymap: dict[str, int]) -> tuple[list[float], list[int]]:
    xs, ys = [0.0], [ymap.get(tl.at(t0), 0)]
    for t, v in tl.changes(t0, t1):
        xs.append((t - t0) / s)
        ys.append(ymap.get(v, 0))
    xs.append((t1 - t0) / s)
    ys.append(ys[-1])
    return xs, ys


def _shade_down(ax: Any, lt: LinkTimeline, pairs: set[tuple[str, str]], t0: float, t1: float, s: float) -> None:
    times = sorted({t0, t1, *(t for p in pairs for t in lt.links[p].times if t0 < t < t1)})
    for a, b in zip(times, times[1:]):
        if not all(lt.links[p].at(a) == UP for p in pairs):
            ax.axvspan((a - t0) / s, (b - t0) / s, color="0.85", lw=0)


def plot_trial(scen: Scenario, trial: Trial, h: History, lt: LinkTimeline, t0: float, t1: float,
               out: Path) -> list[Path]:
    """Figure 6 and Figure 8 style plots of one trial."""
    s = scen.time_scale
    site, peer = scen.measure
    paths = []
    # Figure 6: link availability vs logical connectivity.
    fig = Figure(figsize=(9, 3.2))
    ax = fig.subplots()
    lx, ly = _steps(lt.link(site, peer), t0, t1, s, LINK_Y)
    sx, sy = _steps(h.status_of(site, peer), t0, t1, s, STATUS_Y)
    ax.step(lx, [y + 0.08 for y in ly], where="post", color="0.4", lw=1.5, label=f"link {site}-{peer}")
    ax.step(sx, sy, where="post", color="tab:blue", lw=2, label=f"RCM status of {peer} at {site}")
    ax.set_yticks([0, 1, 2], ["disconnected / down", "suspected", "connected / up"])
    ax.set_ylim(-0.3, 2.4)
    ax.set_xlabel("time (s, scenario)")
    ax.set_title(f"{scen.name} {trial.name}: link availability vs RCM logical connectivity")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    p = out / "awareness.png"
    fig.savefig(p, dpi=110)
    paths.append(p)
    # Figure 8: delivery rate and latency at the measured site.
    send_at = {mid: float(r["at"]) for mid, r in h.sends.items()}
    ds = [d for d in h.deliveries.get(site, []) if d.msg_id in send_at and t0 <= d.at <= t1 + 60 * s]
    fig = Figure(figsize=(9, 5))
    ax1, ax2 = fig.subplots(2, 1, sharex=True)
    pairs = {p for per in trial.periodic for p in per.pairs} or set(lt.links)
    end = max([t1] + [d.at for d in ds])
    for ax in (ax1, ax2):
        _shade_down(ax, lt, pairs, t0, t1, s)
        for f in trial.faults:      # process kills: dashed, red for RCM, purple for chat
            ax.axvline(f.at, color="tab:red" if f.process == "rcm" else "tab:purple", ls="--", lw=0.8)
    nb = max(1, int((end - t0) / s) + 1)
    counts = [0] * nb
    for d in ds:
        counts[min(nb - 1, int((d.at - t0) / s))] += 1
    ax1.step(range(nb), counts, where="post", color="tab:green", lw=1)
    ax1.set_ylabel("msgs / s")
    kills = " (dashed: kill -9 of rcm red, chat purple)" if trial.faults else ""
    ax1.set_title(f"{scen.name} {trial.name}: delivery rate and latency at {site} (grey: links down)"
                  + kills, fontsize=10)
    xs = [(d.at - t0) / s for d in ds]
    ys = [(d.at - send_at[d.msg_id]) / s for d in ds]
    ax2.scatter([x for x, d in zip(xs, ds) if not d.late], [y for y, d in zip(ys, ds) if not d.late],
                s=3, color="tab:blue", label="in order")
    ax2.scatter([x for x, d in zip(xs, ds) if d.late], [y for y, d in zip(ys, ds) if d.late],
                s=5, color="tab:red", label="late")
    ax2.set_ylabel("latency (s)")
    ax2.set_xlabel("time (s, scenario)")
    ax2.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    p = out / "delivery.png"
    fig.savefig(p, dpi=110)
    paths.append(p)
    return paths


def plot_routing(scen: Scenario, results: list[TrialResult], out: Path) -> str:
    """Direct links against relaying, one bar per trial in each panel."""
    fig = Figure(figsize=(11, 3.4))
    axes = fig.subplots(1, 4)
    names = [r.trial for r in results]
    colors = ["tab:red" if r.routing == "direct" else "tab:blue" for r in results]

    def get(r: TrialResult, *keys: str) -> float:
        v: Any = r.metrics
        for k in keys:
            v = v.get(k) if isinstance(v, dict) else None
        return float(v) if v is not None else 0.0
    panels = [
        ("latency, flapping pairs,\nlink down (s): p95 (p50 dark)",
         [get(r, "paths", "flapping_link_down", "p95") for r in results],
         [get(r, "paths", "flapping_link_down", "p50") for r in results]),
        ("late deliveries (%)", [100 * get(r, "paths", "late_share") for r in results], None),
        ("most deliveries out of place\nat one site", [get(r, "paths", "out_of_place_max") for r in results], None),
        ("link bytes per message", [get(r, "bytes_per_message") for r in results], None),
    ]
    for ax, (title, vals, inner) in zip(axes, panels):
        ax.bar(names, vals, color=colors, alpha=0.6 if inner else 0.9)
        if inner:
            ax.bar(names, inner, color=colors)
        ax.set_title(title, fontsize=9)
        ax.tick_params(axis="x", labelsize=8)
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(f"{scen.name}: the paper's direct links (red) against relaying (blue)", fontsize=10)
    fig.tight_layout()
    p = out / "routing.png"
    fig.savefig(p, dpi=110)
    return str(p)


def plot_scenario(scen: Scenario, results: list[TrialResult], out: Path) -> list[str]:
    """Scenario-level plots (Figure 7 for sweeps, direct against relay); returns their paths."""
    paths = []
    if len({r.routing for r in results}) > 1:
        paths.append(plot_routing(scen, results, out))
    outages = [r for r in results if r.outage is not None]
    if not outages:
        return paths
    fig = Figure(figsize=(8, 4.2))
    ax = fig.subplots()
    for mode in dict.fromkeys(r.p2p for r in outages):
        ratios = sorted((r.outage, r.metrics.get("received_ratio")) for r in outages if r.p2p == mode)
        pts = [(x, 100 * y) for x, y in ratios if x is not None and y is not None]
        label, color, marker = MODE_STYLE.get(mode, (mode, None, "o"))
        ax.plot([x for x, _ in pts], [y for _, y in pts], marker=marker, color=color, label=label)
    ax.set_xlabel("duration of link outages (s)")
    ax.set_ylabel("messages received / sent (%)")
    ax.set_ylim(min(60, ax.get_ylim()[0]), 101)
    ax.set_title(f"{scen.name}: reliability during transient link outages")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower left")
    fig.tight_layout()
    p = out / "reliability.png"
    fig.savefig(p, dpi=110)
    return [*paths, str(p)]


__all__ = ["plot_routing", "plot_scenario", "plot_trial"]
