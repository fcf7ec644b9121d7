"""Partial meshes in the simulator: topologies, periodic flaps, the traffic tally and the scaling measure."""
from __future__ import annotations

import math
from dataclasses import replace

import pytest

from faultinject.checkers.history import DOWN, pair
from faultinject.sim import SIM_SETTINGS, SimConfig, Simulation
from faultinject.sim.scaling import MissionSpec, fit, fit2, measure_mission, mesh
from faultinject.sim.schedule import compile_schedule
from faultinject.sim.topology import (
    degrees,
    hop_counts,
    periodic_flaps,
    ring_pairs,
    ring_with_chords,
    site_names,
)
from faultinject.sim.traffic import Tally, classify
from rcm import wire


def test_site_names_are_letters_up_to_eight_then_numbered_and_sorted():
    assert site_names(3) == ["A", "B", "C"]
    assert site_names(8)[-1] == "H"
    big = site_names(64)
    assert big[0] == "S00" and big[-1] == "S63" and big == sorted(big) and len(set(big)) == 64
    with pytest.raises(ValueError):
        site_names(1)


def test_ring_with_chords_is_seeded_connected_and_averages_four_neighbours():
    names = site_names(16)
    links = ring_with_chords(names, 16, seed=1)
    assert links == ring_with_chords(names, 16, seed=1)
    assert links != ring_with_chords(names, 16, seed=2)
    assert ring_pairs(names) <= set(links) and len(links) == 32
    assert all(a < b for a, b in links)
    deg = degrees(names, links)
    assert sum(deg.values()) / 16 == 4.0 and min(deg.values()) >= 2
    hops = hop_counts(names, links)
    assert len(hops) == 16 * 15 // 2          # every pair reached
    assert max(hops.values()) <= 8
    # Four sites: the ring and both diagonals (no more chords exist).
    assert len(ring_with_chords(site_names(4), 4, seed=1)) == 6


def test_periodic_flaps_go_down_for_down_seconds_after_every_up():
    eps = periodic_flaps([("B", "A")], up=30.0, down=10.0, until=200.0, seed=3)
    assert len(eps) == 1 and eps[0].links == (("A", "B", DOWN),)
    phases = eps[0].phases
    assert all(t1 - t0 == pytest.approx(10.0) for t0, t1, _ in phases[:-1])
    assert all(b[0] - a[0] == pytest.approx(40.0) for a, b in zip(phases, phases[1:]))
    changes = compile_schedule(list(eps), ["A", "B"])
    assert [c[4] for c in changes[:4]] == [DOWN, "up", DOWN, "up"]


def test_tally_counts_frames_by_kind_across_split_writes_only_while_active():
    t = Tally()
    hb = wire.encode_frame([wire.HEARTBEAT, 3])
    links = wire.encode_frame([wire.LINKS, 0, 1, 2, [1, 2]])
    routed_ack = wire.encode_frame([wire.ROUTED, 1, 0, 5, [2, 9], wire.ACK, 0])
    t("A", 1, hb)                            # before the window: parsed, not counted
    t.active = True
    both = links + routed_ack
    t("A", 1, both[:3])
    t("A", 1, both[3:])
    t("B", 1, hb)
    t.active = False
    t("A", 1, hb)
    assert t.count("A", "linkstate") == len(links) and t.count("A", "ack") == len(routed_ack)
    assert t.count("A", "heartbeat") == 0 and t.count("B", "heartbeat") == len(hb)
    assert classify([wire.ROUTED, 1, 0, 5, [2, 9], wire.DATA, 1, None, b""]) == "data"
    assert classify([wire.ANNOUNCE, 0, [1]]) == "ordering"


def test_tally_stops_parsing_a_stream_that_is_not_frames():
    t = Tally()
    t.active = True
    t("A", 1, b"\x00\x00garbage")
    t("A", 1, b"more")
    assert t.count("A", "unparsed") == 13


def test_absent_links_carry_nothing_and_relays_deliver_everything_on_a_ring():
    names = site_names(6)
    ring = tuple(sorted(ring_pairs(names)))
    # Every send to every site: a subset send is confined to its sites and waits for a path within them
    # (docs/relay.md, Confinement), which a bare ring often lacks (faultinject.checkers.confined).
    cfg = SimConfig(sites=6, chaos=6.0, heal=6.0, quiet=3.0, rate=1.0, faults=0, subset_prob=0.0,
                    settings=replace(SIM_SETTINGS, max_hops=4), topology=ring)
    sim = Simulation(5, cfg)
    result = sim.run()
    assert result.ok, result.violations[:3]
    used = {pair(a, b) for (a, b), n in sim.net.bytes_sent.items() if n}
    assert used == set(ring)
    sends = [r for r in result.records if r["kind"] == "send"]
    remote = [r for r in result.records if r["kind"] == "deliver" and r["site"] != r["origin"]]
    assert sends and len(remote) == sum(len(s["dests"]) for s in sends)


def test_measure_mission_reports_per_site_figures_for_every_kind():
    spec = MissionSpec(4, warm=3.0, measure=12.0, drain=4.0, rate=0.5, up=4.0, down=2.0,
                       settings=replace(SIM_SETTINGS, max_hops=8))
    names, links, flapping = mesh(spec)
    assert len(links) == 6 and len(flapping) == 1
    r = measure_mission(spec)
    assert r["violations"] == 0 and r["delivered_share"] == 1.0
    per = r["per_site_per_minute"]
    assert per["heartbeat"] > 0 and per["linkstate"] > 0 and per["data"] > 0
    assert per["total"] == pytest.approx(sum(row["total"] for row in r["per_site"]) / 4)
    assert r["latency_p50_s"] > 0 and r["bytes_per_message_per_link"] > 0


def test_fits_recover_exponents():
    xs = [4, 8, 16, 32, 64]
    f = fit(xs, [3.0 * x ** 1.5 for x in xs])
    assert f is not None and f["exponent"] == pytest.approx(1.5) and f["factor"] == pytest.approx(3.0)
    rows = [(n, d, 2.0 * n ** 0.25 * d ** 1.0) for n in xs for d in (2, 3, 5)]
    g = fit2(rows)
    assert g is not None
    assert g["sites_exponent"] == pytest.approx(0.25) and g["neighbours_exponent"] == pytest.approx(1.0)
    assert fit([4], [1.0]) is None and math.isclose(fit([1, 2], [5.0, 5.0])["exponent"], 0.0, abs_tol=1e-12)


def test_the_command_line_runs_a_partial_mesh_past_eight_sites_and_refuses_it_on_a_full_one(capsys, tmp_path):
    from faultinject.__main__ import main

    code = main(["sim", "--topology", "ring-chords", "--sites", "9", "--seed", "3", "--faults", "1",
                 "--chaos", "3", "--heal", "6", "--quiet", "--trace-dir", str(tmp_path)])
    assert code == 0 and "ok lamport seed 3" in capsys.readouterr().out
    assert main(["sim", "--sites", "10", "--seed", "3", "--quiet"]) == 2
    assert "up to 64 with --topology ring-chords" in capsys.readouterr().err
