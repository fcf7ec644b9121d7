"""The mission report: one self-contained HTML file with tables and embedded plots.

Theory of operation
-------------------
``write_report`` gets what the job already gathered on the driver (the summary,
the small tables, the capped transcript slice, each unit's track points thinned
by ``tracks.TrackPoints``) and writes one HTML file: tables as HTML, plots as
base64 PNG made with matplotlib's Agg backend. A plot without data becomes a
sentence saying so, never an empty figure.
"""
from __future__ import annotations

import base64
import html
import io
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from contracts.precedence import DEFAULT  # noqa: E402
from contracts.status import LinkStatus  # noqa: E402

from .tracks import PLOT_UNITS, POSITION_AGE_COLUMNS  # noqa: E402

STATUS_COLOURS = {LinkStatus.CONNECTED.value: "#2e7d32", LinkStatus.SUSPECTED.value: "#f9a825",
                  LinkStatus.DISCONNECTED.value: "#c62828"}
MAX_PAIRS_PLOTTED = 120


def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _when(t: float | None) -> str:
    if t is None:
        return ""
    return datetime.fromtimestamp(t, tz=UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def latency_plot(latency_time: Sequence[dict[str, Any]], start: float) -> str | None:
    """p95 latency over mission time, per destination (worst origin in each bucket)."""
    if not latency_time:
        return None
    series: dict[str, dict[float, float]] = defaultdict(dict)
    for r in latency_time:
        if r["origin"] == r["destination"]:
            continue
        cur = series[r["destination"]]
        t = (r["bucket_start"] - start) / 60.0
        cur[t] = max(cur.get(t, 0.0), r["p95"])
    if not series:
        return None
    fig, ax = plt.subplots(figsize=(9, 4))
    for dest in sorted(series):
        pts = sorted(series[dest].items())
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=".", linewidth=1, label=dest)
    ax.set_yscale("log")
    ax.set_xlabel("mission time (min)")
    ax.set_ylabel("p95 delivery latency (s), worst origin")
    ax.set_title("Delivery latency over time, by destination site")
    ax.legend(fontsize=7, ncol=2, loc="upper right")
    ax.grid(alpha=0.3)
    return _png(fig)


def latency_matrix_plot(latency_pairs: Sequence[dict[str, Any]]) -> str | None:
    """Heat map of p95 latency per origin/destination pair."""
    if not latency_pairs:
        return None
    origins = sorted({r["origin"] for r in latency_pairs})
    dests = sorted({r["destination"] for r in latency_pairs})
    grid = [[float("nan")] * len(dests) for _ in origins]
    for r in latency_pairs:
        grid[origins.index(r["origin"])][dests.index(r["destination"])] = r["p95"]
    fig, ax = plt.subplots(figsize=(1.2 + 0.6 * len(dests), 1.0 + 0.45 * len(origins)))
    im = ax.imshow(grid, cmap="viridis", aspect="auto")
    ax.set_xticks(range(len(dests)), dests, rotation=60, fontsize=7)
    ax.set_yticks(range(len(origins)), origins, fontsize=7)
    ax.set_xlabel("destination")
    ax.set_ylabel("origin")
    ax.set_title("p95 delivery latency (s)")
    fig.colorbar(im, ax=ax)
    return _png(fig)


def availability_plot(intervals: Sequence[dict[str, Any]], start: float, end: float) -> str | None:
    """Connectivity timeline of each (site, peer) pair, coloured by status."""
    pairs = sorted({(r["site"], r["peer"]) for r in intervals})[:MAX_PAIRS_PLOTTED]
    if not pairs:
        return None
    index = {p: i for i, p in enumerate(pairs)}
    bars: dict[str, list[tuple[float, float, int]]] = defaultdict(list)
    for r in intervals:
        i = index.get((r["site"], r["peer"]))
        if i is not None:
            bars[r["status"]].append(((r["start"] - start) / 60.0, r["seconds"] / 60.0, i))
    fig, ax = plt.subplots(figsize=(10, 1.0 + 0.16 * len(pairs)))
    for status, spans in bars.items():
        for left, width, i in spans:
            ax.broken_barh([(left, width)], (i - 0.4, 0.8), facecolors=STATUS_COLOURS[status],
                           edgecolor="none")
    ax.set_yticks(range(len(pairs)), [f"{s} → {p}" for s, p in pairs], fontsize=6)
    ax.set_ylim(-1, len(pairs))
    ax.set_xlim(0, max((end - start) / 60.0, 1e-6))
    ax.invert_yaxis()
    ax.set_xlabel("mission time (min)")
    ax.set_title("Connectivity as seen by each site (green connected, amber suspected, red disconnected)")
    return _png(fig)


def track_plot(points: Mapping[str, Sequence[tuple[float, float]]]) -> str | None:
    """Each unit's track as a line of (longitude, latitude), one colour a unit, labelled at its last report
    (the first ``PLOT_UNITS`` units by name)."""
    units = sorted(points)[:PLOT_UNITS]
    if not units:
        return None
    fig, ax = plt.subplots(figsize=(9, 7))
    colours = plt.get_cmap("tab20")
    lats = []
    for i, unit in enumerate(units):
        lons, unit_lats = [p[0] for p in points[unit]], [p[1] for p in points[unit]]
        lats += unit_lats
        colour = colours(i % 20)
        ax.plot(lons, unit_lats, linewidth=1, color=colour, label=unit, marker="." if len(lons) < 60 else None,
                markersize=3)
        ax.plot(lons[:1], unit_lats[:1], marker="o", color=colour, markersize=4)
        ax.annotate(unit, (lons[-1], unit_lats[-1]), fontsize=7, color=colour, xytext=(3, 3),
                    textcoords="offset points")
    # A degree of longitude is cos(latitude) of a degree of latitude: keep the map's shape.
    middle = math.radians(sum(lats) / len(lats))
    ax.set_aspect(1.0 / max(math.cos(middle), 0.1), adjustable="datalim")
    ax.set_xlabel("longitude (°)")
    ax.set_ylabel("latitude (°)")
    ax.set_title("Unit tracks: reports in the order sent (circle: first report; label: last)")
    if len(units) <= 20:
        ax.legend(fontsize=7, ncol=2, loc="best")
    ax.grid(alpha=0.3)
    return _png(fig)


def positions_section(summary: Mapping[str, Any], points: Mapping[str, Sequence[tuple[float, float]]]) -> list[str]:
    """The report's positions section: the track plot and the position-age table, or a sentence."""
    pos = summary["positions"]
    parts = ["<h2>Positions</h2>"]
    if not pos["reports"]:
        return parts + ["<p>No position reports were journaled in this mission: there are no tracks and no "
                        "position ages.</p>"]
    parts += [f"<p>{pos['reports']} distinct position reports of {pos['units']} units ({pos['lines']} position "
              f"lines journaled across the sites, {pos['duplicate_lines']} of them duplicates). Each point is "
              "a report as first received anywhere; every point is in tracks/ and tracks.csv.</p>",
              _img(track_plot(points), "unit tracks")]
    if len(points) > PLOT_UNITS:
        parts.append(f"<p class='note'>Only the first {PLOT_UNITS} of {len(points)} units (by name) are "
                     "plotted.</p>")
    parts += ["<h3>Position age per site</h3>",
              "<p>Age of a report when it reached the site (<code>at − sent_at</code>), over the reports of "
              "other sites (<em>remote</em>). At the end of the mission: <em>units_behind</em> is how many of "
              "the units the site had reports of had a newer report at another site, by at most "
              "<em>behind_max</em> seconds; <em>units_unseen</em>, how many units reported somewhere never "
              "reached it.</p>",
              _table(pos["per_site"], POSITION_AGE_COLUMNS)]
    return parts


def label_plot(rows: Sequence[dict[str, Any]]) -> str | None:
    """Messages and deliveries per label, lowest level first (``labels.py``); None without a labeled message."""
    if not any(r["level"] is not None for r in rows):
        return None
    names = [r["label"] for r in rows]
    fig, ax = plt.subplots(figsize=(9, 0.5 * len(names) + 1.2))
    y = list(range(len(names)))
    ax.barh([i - 0.2 for i in y], [r["messages"] for r in rows], height=0.4, label="messages")
    ax.barh([i + 0.2 for i in y], [r["deliveries"] for r in rows], height=0.4, label="deliveries")
    ax.set_yticks(y, names, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("count")
    ax.set_title("Traffic per security label")
    ax.legend(fontsize=8)
    ax.grid(axis="x", alpha=0.3)
    return _png(fig)


def labels_section(summary: Mapping[str, Any], tables: Mapping[str, Sequence[dict[str, Any]]]) -> list[str]:
    """The report's labels section: the leak check's verdict (the first leaks listed), traffic per label."""
    leaks = summary["leaks"]
    parts = ["<h2>Security labels</h2>"]
    if leaks:
        parts += [f"<p class='note'><b>Leak check: {leaks} leak(s)</b>: content journaled at a site whose latest "
                  "clearance does not dominate its label (or that journaled no clearance). The first "
                  f"{len(summary['leaks_listed'])}, by site:</p>",
                  _table(summary["leaks_listed"], ("site", "msg_id", "kinds", "label", "clearance", "reason"))]
    else:
        parts.append("<p>Leak check: 0 leaks: every site's journal holds only content its latest clearance "
                     "dominates.</p>")
    rows = tables.get("labels", [])
    if not any(r["level"] is not None for r in rows):
        return parts + ["<p>No labeled message was journaled: every message is unlabeled.</p>",
                        _table(rows, ("label", "messages", "deliveries"))]
    return parts + [f"<p>{summary['withheld']} message × site pairs were withheld by need-to-know routing (the "
                    "site's clearance does not dominate the message's label): counted in <em>never_arrived</em> "
                    "above, never lost.</p>",
                    "<p>Messages (distinct, sent or delivered) and deliveries (distinct site and message) per "
                    "label, lowest level first.</p>",
                    _img(label_plot(rows), "traffic per label"), _table(rows, ("label", "messages", "deliveries"))]


def _table(rows: Sequence[dict[str, Any]], columns: Sequence[str], fmt: dict[str, Any] | None = None) -> str:
    fmt = fmt or {}
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = []
    for r in rows:
        cells = []
        for c in columns:
            v = r.get(c)
            if c in fmt and v is not None:
                v = fmt[c](v)
            elif isinstance(v, float):
                v = f"{v:.4g}"
            elif isinstance(v, (list, tuple)):
                v = ", ".join(map(str, v))
            cells.append(f"<td>{html.escape('' if v is None else str(v))}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _img(b64: str | None, alt: str) -> str:
    if b64 is None:
        return f"<p><em>No data for {html.escape(alt)}.</em></p>"
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{b64}">'


def write_report(path: Path, summary: dict[str, Any], shown: Sequence[dict[str, Any]], cap: int,
                 tables: Mapping[str, Any]) -> None:
    """Write ``report.html`` from the summary and the small tables (``job.analysis_frames``)."""
    start = summary["mission_start"] or 0.0
    end = summary["mission_end"] or start
    latency_pairs, latency_time = tables["latency_pairs"], tables["latency_over_time"]
    intervals, availability_rows = tables["connectivity"], tables["availability"]
    counts = [{"what": k, "value": summary[k]} for k in (
        "files", "lines", "records", "bad_lines", "files_with_bad_lines", "empty_files",
        "messages", "deliveries", "late_deliveries", "never_arrived", "duplicate_lines",
        "redeliveries", "resends", "duplicate_status_lines", "missing_reported_unseen",
        "messages_without_order", "control_deliveries", "control_late", "late_unexplained",
        "late_unflagged", "repaired_deliveries", "relayed_deliveries", "acknowledge_records", "leaks")]
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>Mission archive</title>",
        "<style>body{font-family:sans-serif;margin:1.5em;max-width:1400px}"
        "table{border-collapse:collapse;font-size:12px;margin:.5em 0 1.5em}"
        "td,th{border:1px solid #ccc;padding:2px 6px;text-align:left;vertical-align:top}"
        "th{background:#eee}tr.late td{background:#fff3e0}.note{color:#a15c00}</style></head><body>",
        "<h1>Mission archive</h1>",
        f"<p>Journals: <code>{html.escape(summary['journals'])}</code>. Mission from "
        f"{_when(summary['mission_start'])} to {_when(summary['mission_end'])} UTC, "
        f"sites: {html.escape(', '.join(summary['sites']))}. Never connected: "
        f"{html.escape(', '.join(summary['sites_never_connected']) or 'none')}; no journal records: "
        f"{html.escape(', '.join(summary['sites_without_records']) or 'none')}.</p>",
        "<h2>Summary</h2>", _table(counts, ("what", "value")),
        "<h2>Per site: divergence from the transcript</h2>",
        "<p>Displacement of a delivery: |rank in the site's delivery order − rank in the "
        "transcript restricted to the messages the site delivered|.</p>",
        _table(summary["per_site"], ("site", "deliveries", "late", "out_of_place", "order_breaks",
                                      "max_displacement", "mean_displacement", "never_arrived",
                                      "never_arrived_reported", "duplicate_lines", "redeliveries")),
        "<h3>Ordering checks</h3>",
        "<p>Every ordered delivery counts, chat and control (RCM deliveries of rosters and "
        "receipts). A site's <em>frontier</em> is the furthest message in the global order it had "
        "delivered in order (flash and immediate messages, delivered on arrival, do not move it): a "
        "late delivery at or beyond it is unexplained, one behind it without the late flag is "
        "unflagged. Repaired deliveries are late by design and never lost.</p>",
        _table(summary["per_site"], ("site", "deliveries", "control_deliveries", "control_late",
                                      "late", "late_unexplained", "late_unflagged", "repaired")),
        "<h2>Delivery latency</h2>", _img(latency_matrix_plot(latency_pairs), "latency per pair"),
        _img(latency_plot(latency_time, start), "latency over time"),
        _table(latency_pairs, ("origin", "destination", "deliveries", "late", "relayed", "repaired",
                               "p50", "p95", "p99", "max", "mean")),
        "<h3>By precedence (deliveries to other sites)</h3>",
        _table(tables["latency_precedence"], ("precedence", "deliveries", "late", "p50", "p95", "p99",
                                              "max", "mean")),
        "<h3>Direct and relayed (deliveries to other sites)</h3>",
        _table(tables["latency_route"], ("route", "deliveries", "share", "late", "p50", "p95", "p99",
                                         "max", "mean"), {"share": lambda v: f"{100 * v:.1f}%"}),
        "<h2>Repairs</h2>",
        "<p>Repaired deliveries per pair; the delay runs from the destination's own "
        "<code>missing</code> report of the message to its repaired delivery (reported: how many "
        "had such a report).</p>",
        _table(tables["repairs"], ("origin", "destination", "repaired", "reported", "delay_p50",
                                   "delay_p95", "delay_max", "delay_mean", "latency_mean")),
        "<h2>Acknowledgements of flash and immediate messages</h2>",
        _table(summary["acknowledgement_levels"], ("precedence", "messages", "acknowledged",
                                                   "acknowledgements", "first_p50", "first_p95",
                                                   "first_max", "first_mean")),
        _acknowledgement_table(tables["acknowledgements_shown"], cap),
        "<h2>Connectivity and availability</h2>",
        _img(availability_plot(intervals, start, end), "availability"),
    ]
    if len({(r["site"], r["peer"]) for r in intervals}) > MAX_PAIRS_PLOTTED:
        parts.append(f"<p class='note'>Only the first {MAX_PAIRS_PLOTTED} pairs are plotted; "
                     "see connectivity.csv for all.</p>")
    parts.append(_table(availability_rows, AVAILABILITY_SHOWN,
                        {"availability": lambda v: f"{100 * v:.1f}%"}))
    parts += positions_section(summary, tables.get("track_points", {}))
    parts += labels_section(summary, tables)
    parts.append("<h2>Transcript</h2>")
    by_room: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for r in shown:
        by_room[r["room"]].append(r)
    for room, total in summary["rooms"].items():
        rows = by_room.get(None if room == "None" else room, [])
        parts.append(f"<h3>Room {html.escape(room)} ({total} messages)</h3>")
        if total > cap:
            parts.append(f"<p class='note'>Showing the first {cap} of {total} messages; the full "
                         "transcript is in transcript/ (Parquet) and transcript_json/.</p>")
        parts.append(_transcript_table(rows))
    parts.append("</body></html>")
    path.write_text("\n".join(parts), encoding="utf-8")


def _acknowledgement_table(rows: Sequence[dict[str, Any]], cap: int) -> str:
    rows = sorted(rows, key=lambda r: r["position"])
    note = (f"<p class='note'>The first {cap} messages of the transcript's order are shown; "
            "acknowledgements/ holds them all.</p>") if len(rows) >= cap > 0 else ""
    return note + _table(rows, ("position", "msg_id", "precedence", "room", "origin", "acknowledgements",
                                "first_seconds", "last_seconds", "acknowledged_by"))


AVAILABILITY_SHOWN = ("site", "peer", "connected_seconds", "suspected_seconds",
                      "disconnected_seconds", "availability")


def _transcript_table(rows: Sequence[dict[str, Any]]) -> str:
    head = ("<tr><th>#</th><th>order</th><th>sent (UTC)</th><th>origin</th><th>user</th>"
            "<th>text</th><th>late at</th><th>never at</th>"
            "<th>delivered (s after sending; R repaired, ^n relayed over n hops)</th></tr>")
    body = []
    for r in rows:
        sent = r["sent_at"]

        def marks(d: dict[str, Any]) -> str:
            return ("R" if d.get("repaired") else "") + (f"^{d['hops']}" if d.get("hops") else "")
        delivered = ", ".join(
            (f"{d['site']}+{d['at'] - sent:.2f}" if sent is not None else d["site"]) + marks(d)
            for d in r["deliveries"])
        cls = " class='late'" if r["late_sites"] else ""
        level = r.get("precedence") or DEFAULT
        origin = html.escape(str(r["origin"])) + ("" if level == DEFAULT else f" <b>{level.upper()}</b>")
        body.append(
            f"<tr{cls}><td>{r['room_position']}</td><td>{html.escape(str(r['order']))}</td>"
            f"<td>{_when(sent)}</td><td>{origin}</td>"
            f"<td>{html.escape(str(r['user']))}</td><td>{html.escape(str(r['text']))}</td>"
            f"<td>{html.escape(', '.join(r['late_sites']))}</td>"
            f"<td>{html.escape(', '.join(r['never_arrived']))}</td>"
            f"<td>{html.escape(delivered)}</td></tr>")
    return f"<table><thead>{head}</thead><tbody>{''.join(body)}</tbody></table>"
