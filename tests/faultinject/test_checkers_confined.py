"""Confined channels (faultinject.checkers.confined) on hand-written histories, and what the checkers excuse."""
from __future__ import annotations

from faultinject.checkers import (
    AwarenessBounds,
    Confinement,
    History,
    LinkEvent,
    LinkTimeline,
    StablePeriod,
    allowed_sites,
    check_igo,
    check_reliability,
)

SITES = ["A", "B", "C"]


def connect_all(at=0.0):
    return [{"kind": "status", "site": a, "peer": b, "status": "connected", "at": at}
            for a in SITES for b in SITES if a != b]


def send(origin, seq, at, dests):
    return {"kind": "send", "site": origin, "origin": origin, "seq": seq, "msg_id": f"{origin}:{seq}",
            "at": at, "skipped": [], "dests": dests}


def deliver(site, origin, seq, at, key):
    return {"kind": "deliver", "site": site, "msg_id": f"{origin}:{seq}", "origin": origin, "seq": seq,
            "at": at, "order": list(key), "late": False}


def relaying(events):
    """A-C down over ``events``' span: A and C stay joined through B, but not within {A, C}."""
    return LinkTimeline(events, SITES, max_hops=3)


A_C_DOWN = [LinkEvent(2.0, "A", "C", "down"), LinkEvent(6.0, "A", "C", "up")]


def test_only_a_send_that_leaves_out_a_site_is_confined():
    h = History(connect_all(), SITES, end=10)
    assert allowed_sites(h, send("A", 1, 1.0, ["C"])) == {"A", "C"}
    assert allowed_sites(h, send("A", 1, 1.0, ["B", "C"])) is None
    assert allowed_sites(h, {"origin": "A", "msg_id": "A:1", "at": 1.0}) is None      # a real journal's send


def test_a_confined_message_blocks_its_channel_until_a_path_within_its_sites_comes_back():
    recs = connect_all() + [send("A", 1, 3.0, ["C"]), deliver("A", "A", 1, 3.0, (1, "A")),
                            deliver("C", "A", 1, 6.2, (1, "A"))]
    c = Confinement(History(recs, SITES, end=10), relaying(A_C_DOWN))
    assert c.blocked == {("A", "C"): [(3.0, 6.0)]}
    assert c.stranded() == []
    # The paper's direct links: the path is the link whatever the channel holds; nothing to add.
    assert Confinement(History(recs, SITES, end=10), LinkTimeline(A_C_DOWN, SITES)).blocked == {}


def test_the_checkers_confinement_counts_a_path_once_it_had_the_awareness_bounds_time_to_connect():
    recs = connect_all() + [send("A", 1, 3.0, ["C"]), deliver("A", "A", 1, 3.0, (1, "A")),
                            deliver("C", "A", 1, 6.2, (1, "A"))]
    h = History(recs, SITES, end=10)
    bounds = AwarenessBounds(t_up=1.5, t_down=2.0, suspect=60.0, relay=0.25)
    # Only relaying sites confine anything.
    assert Confinement.for_checks(h, None, bounds) is None
    assert Confinement.for_checks(h, LinkTimeline(A_C_DOWN, SITES), bounds) is None
    # A-C is back at 6.0; the channel waits until the path had t_up + relay to connect.
    assert Confinement.for_checks(h, relaying(A_C_DOWN), bounds).blocked == {("A", "C"): [(3.0, 7.75)]}
    assert Confinement.for_checks(h, relaying(A_C_DOWN), None).blocked == {("A", "C"): [(3.0, 6.0)]}


def test_the_channel_waits_for_a_path_within_the_meet_of_what_it_holds():
    recs = connect_all() + [send("A", 1, 3.0, ["B", "C"]), send("A", 2, 3.5, ["C"])]
    c = Confinement(History(recs, SITES, end=10), relaying(A_C_DOWN))
    assert c.blocked == {("A", "C"): [(3.5, 6.0)]}     # A:1 alone could go through B; with A:2 it cannot


def test_a_blocked_channel_cuts_a_stable_period():
    recs = connect_all() + [send("A", 1, 3.0, ["C"]), deliver("C", "A", 1, 6.2, (1, "A"))]
    c = Confinement(History(recs, SITES, end=10), relaying(A_C_DOWN))
    period = StablePeriod(frozenset(SITES), 0.0, 10.0)
    assert c.unblocked(period) == [StablePeriod(period.sites, 0.0, 3.0), StablePeriod(period.sites, 6.0, 10.0)]
    assert c.unblocked(StablePeriod(frozenset({"A", "B"}), 0.0, 10.0)) == [StablePeriod(frozenset({"A", "B"}),
                                                                                          0.0, 10.0)]


def test_igo_does_not_hold_a_message_to_settle_while_a_channel_of_the_period_is_blocked():
    # B's message waits at C behind A's confined one (C's total order needs A's clock): delivered at 6.3.
    recs = connect_all() + [send("A", 1, 3.0, ["C"]), send("B", 1, 3.2, ["A", "C"])]
    recs += [deliver("A", "A", 1, 3.0, (1, "A")), deliver("C", "A", 1, 6.2, (1, "A")),
             deliver("A", "B", 1, 3.3, (2, "B")), deliver("B", "B", 1, 3.2, (2, "B")),
             deliver("C", "B", 1, 6.3, (2, "B"))]
    h = History(recs, SITES, end=10)
    links = relaying(A_C_DOWN)
    assert [v.kind for v in check_igo(h, 0.5, 1.0, links)] == ["igo-stall", "igo-stall"]
    assert check_igo(h, 0.5, 1.0, links, Confinement(h, links)) == []


def test_a_stranded_channel_excuses_its_destination_and_its_origins_later_sends():
    down = [LinkEvent(2.0, "A", "C", "down")]      # never up again: A:1 waits for ever
    recs = connect_all() + [send("B", 1, 1.0, ["A", "C"]), send("A", 1, 3.0, ["C"]), send("A", 2, 4.0, ["B", "C"]),
                            send("B", 2, 5.0, ["A", "C"])]
    recs += [deliver("A", "B", 1, 1.1, (1, "B")), deliver("C", "B", 1, 1.1, (1, "B")),
             deliver("A", "A", 1, 3.0, (2, "A")), deliver("A", "A", 2, 4.0, (3, "A")),
             deliver("B", "A", 2, 4.1, (3, "A")), deliver("A", "B", 2, 5.1, (4, "B")),
             deliver("B", "B", 1, 1.0, (1, "B")), deliver("B", "B", 2, 5.0, (4, "B"))]
    h = History(recs, SITES, end=10)
    c = Confinement(h, relaying(down))
    assert c.stranded() == [("A", "C")]
    assert {(v.site, v.ref) for v in check_reliability(h)} == {("C", "A:1"), ("C", "A:2"), ("C", "B:2")}
    assert check_reliability(h, confinement=c) == []
    # A loss elsewhere is still one.
    h2 = History([r for r in recs if not (r["kind"] == "deliver" and r["site"] == "A" and r["msg_id"] == "B:2")],
                 SITES, end=10)
    assert [(v.site, v.ref) for v in check_reliability(h2, confinement=Confinement(h2, relaying(down)))] == [
        ("A", "B:2")]
