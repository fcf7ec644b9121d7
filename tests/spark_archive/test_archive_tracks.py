"""Tracks and position ages without Spark: the reference's receipts and tables (``local_tracks``), the CSV and
the plot's thinning (``tracks``), the report's positions section, and the generator's position reports."""
from __future__ import annotations

import csv
import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest
from known_positions import BAD_POSITION_LINES, POSITION_AGE, POSITION_LINES, TRACKS

from contracts import journal as J
from spark_archive import local_tracks as lk
from spark_archive import tracks
from spark_archive.generate import POSITIONS, Extensions, generate
from spark_archive.generate_network import MissionPlan, Outage, site_names
from spark_archive.generate_positions import _arrivals
from spark_archive.journals import list_journal_files
from spark_archive.reference import parse_record, read_journals
from spark_archive.report import positions_section, track_plot


def write(root: Path, journals: dict[str, list[str]]) -> Path:
    for site, lines in journals.items():
        path = root / site / "journal" / "0001.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines) + "\n")
    return root


def known_tables(tmp_path: Path) -> tuple[dict, int]:
    j = read_journals(list_journal_files(write(tmp_path, POSITION_LINES)))
    lines = {s: c["position_records"] for s, c in j.site_counts.items()}
    return lk.position_tables(j.positions, j.sites, lines), j.bad_lines


def test_tracks_are_distinct_reports_as_first_received_in_order_of_sending(tmp_path: Path) -> None:
    tables, bad = known_tables(tmp_path)
    assert bad == BAD_POSITION_LINES
    assert [tuple(r[c] for c in tracks.TRACK_COLUMNS) for r in tables["tracks"]] == TRACKS
    assert tables["position_totals"] == [{"reports": 4, "units": 2}]


def test_position_age_and_staleness_per_site(tmp_path: Path) -> None:
    tables, _ = known_tables(tmp_path)
    rows = {r["site"]: tuple(r[c] for c in tracks.POSITION_AGE_COLUMNS[1:]) for r in tables["position_age"]}
    assert rows == {site: pytest.approx(expected) for site, expected in POSITION_AGE.items()}
    summary = tracks.summary_section(tables["position_age"], tables["position_totals"][0])
    assert (summary["lines"], summary["reports"], summary["units"], summary["duplicate_lines"]) == (9, 4, 2, 1)


def test_a_mission_without_positions_has_no_position_rows(tmp_path: Path) -> None:
    assert lk.position_tables({}, ["A", "B"], {}) == {
        "tracks": [], "position_age": [], "position_totals": [{"reports": 0, "units": 0}]}


@pytest.mark.parametrize("change", [{"lat": -90.5}, {"lon": 180.01}, {"lat": float("nan")}, {"alt": float("inf")},
                                    {"sent_at": float("nan")}, {"origin": None}, {"lon": None}, {"sent_at": None},
                                    {"lat": "51.5"}, {"lat": True}])
def test_position_lines_out_of_bounds_or_incomplete_are_bad_lines(change: dict) -> None:
    good = {"kind": "position", "site": "B", "at": 101.0, "origin": "A", "unit": "a1", "lat": 90.0, "lon": -180.0,
            "alt": -20.5, "sent_at": 100.5}
    assert parse_record(json.dumps(good))["unit"] == "a1"
    assert parse_record(json.dumps(good | {"alt": None}))["alt"] is None
    bad = {k: v for k, v in (good | change).items() if v is not None}
    assert parse_record(json.dumps(bad)) is None


def test_the_plot_keeps_evenly_spaced_points_of_a_long_track_and_its_last() -> None:
    thin = tracks.TrackPoints(cap=10)
    for i in range(1001):
        thin.add("u", float(i), 0.0)
    thin.add("v", 1.0, 2.0)
    points = thin.result()
    lons = [p[0] for p in points["u"]]
    assert len(lons) <= 11 and lons[0] == 0.0 and lons[-1] == 1000.0
    steps = {b - a for a, b in zip(lons[:-1], lons[1:-1])}
    assert len(steps) == 1                      # evenly spaced, the last point apart
    assert points["v"] == [(1.0, 2.0)]


def test_tracks_csv_holds_every_row(tmp_path: Path) -> None:
    tables, _ = known_tables(tmp_path / "j")
    points = tracks.write_tracks_csv(tmp_path / "tracks.csv", tables["tracks"])
    with open(tmp_path / "tracks.csv", newline="") as fh:
        rows = list(csv.reader(fh))
    assert tuple(rows[0]) == tracks.TRACK_COLUMNS
    assert rows[3] == ["b1", "0", "101.0", "B", "-5.0", "30.0", "", "B", "101.01", "2"]
    assert points == {"a1": [(20.0, 10.0), (20.1, 10.1)], "b1": [(30.0, -5.0), (30.2, -5.1)]}


def test_the_report_plots_tracks_or_says_there_are_none(tmp_path: Path) -> None:
    tables, _ = known_tables(tmp_path)
    summary = {"positions": tracks.summary_section(tables["position_age"], tables["position_totals"][0])}
    points = {"a1": [(20.0, 10.0), (20.1, 10.1)], "b1": [(30.0, -5.0), (30.2, -5.1)]}
    html = "\n".join(positions_section(summary, points))
    assert html.count("data:image/png;base64,") == 1 and "Position age per site" in html
    assert "<td>units_unseen</td>" not in html and "<th>units_unseen</th>" in html
    empty = {"positions": tracks.summary_section([], {})}
    html = "\n".join(positions_section(empty, {}))
    assert "No position reports were journaled" in html and "<img" not in html
    assert track_plot({}) is None


def generated_lines(root: Path) -> list[str]:
    return [line for p in sorted(root.rglob("*.jsonl")) for line in p.read_text().split("\n") if line]


def test_reports_made_during_an_outage_are_superseded_by_the_last_of_them() -> None:
    mission = MissionPlan(["A", "B"], 0.0, 200.0, outages={(0, 1): [Outage(20.0, 50.0, False)]})
    times = np.arange(1.0, 100.0, 5.0)                 # 1, 6, ..., 96: 21 to 46 in the outage
    arrive = _arrivals(np.random.default_rng(1), mission, 0, 1, times)
    inside = (times >= 20.0) & (times < 50.0)
    assert np.isnan(arrive[inside][:-1]).all()         # superseded: journaled nowhere but at A
    assert 50.2 <= arrive[inside][-1] <= 53.0          # 46: sent when the link is back
    delays = arrive[~inside] - times[~inside]
    assert (delays > 0.05).all() and (delays < 5.0).all()


def test_generated_position_reports(tmp_path: Path) -> None:
    """Every site journals its own units' reports as the journal's writer writes them, and others' as they
    arrive; a site that never connects gets none and sends none."""
    info = generate(tmp_path, sites=4, messages=100, seed=7, duration=1800.0, outages_per_hour=8.0, restart_prob=0.0,
                    torn_prob=0.0, extensions=Extensions(positions=2))
    lines = [line for line in generated_lines(tmp_path) if '"kind":"position"' in line]
    positions = [json.loads(line) for line in lines]
    assert len(positions) == info["position_lines"] and info["units"] == 8
    assert all(J.dumps(r) == line and J.problems(r, chat=True) == [] for r, line in zip(positions, lines))
    sent = {(r["unit"], r["sent_at"]) for r in positions if r["site"] == r["origin"]}
    assert len(sent) == info["position_reports"]
    assert {(r["unit"], r["sent_at"]) for r in positions} == sent            # nothing but what was reported
    isolated, = info["isolated"]
    assert all(r["origin"] == isolated for r in positions if r["site"] == isolated)
    assert not any(r["origin"] == isolated for r in positions if r["site"] != isolated)
    remote = sum(1 for r in positions if r["site"] != r["origin"])
    assert 0 < remote < 2 * len(sent)                  # two other sites each, but for the superseded


def test_positions_leave_the_chat_of_a_seed_unchanged(tmp_path: Path) -> None:
    kwargs = dict(sites=4, messages=120, seed=9, duration=900.0, restart_prob=0.0, torn_prob=0.0)
    generate(tmp_path / "without", **kwargs)
    generate(tmp_path / "with", **kwargs, extensions=dataclasses.replace(Extensions(), positions=1))
    chat = [[line for line in generated_lines(tmp_path / name) if '"kind":"position"' not in line]
            for name in ("without", "with")]
    assert chat[0] == chat[1]
    assert POSITIONS.positions > 0 and sorted({line.split('"site":"')[1].split('"')[0]
                                               for line in generated_lines(tmp_path / "with")}) == site_names(4)


def test_generated_coordinates_stay_in_bounds(tmp_path: Path) -> None:
    generate(tmp_path, sites=3, messages=10, seed=2, duration=6 * 3600.0, restart_prob=0.0, torn_prob=0.0,
             extensions=Extensions(positions=1))
    for line in generated_lines(tmp_path):
        if '"kind":"position"' in line:
            r = json.loads(line)
            assert tracks.usable(r["origin"], r["unit"], r["lat"], r["lon"], r.get("alt"), r["sent_at"])
            assert math.isfinite(r["at"])
