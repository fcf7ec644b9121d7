"""The checkers on hand-written histories: each property, held and broken."""
from __future__ import annotations

import pytest

from faultinject.checkers import (
    AwarenessBounds,
    Declared,
    History,
    LinkEvent,
    LinkTimeline,
    check_connection_awareness,
    check_fifo,
    check_igo,
    check_no_duplicates,
    check_order_keys,
    check_reliability,
    check_robustness,
    stable_periods,
)

SITES = ["A", "B", "C"]


def status(site, peer, st, at):
    return {"kind": "status", "site": site, "peer": peer, "status": st, "at": at}


def connect_all(at=0.0):
    return [status(a, b, "connected", at) for a in SITES for b in SITES if a != b]


def send(origin, seq, at, dests=None, skipped=()):
    r = {"kind": "send", "site": origin, "origin": origin, "seq": seq, "msg_id": f"{origin}:{seq}",
         "at": at, "skipped": list(skipped)}
    if dests is not None:
        r["dests"] = dests
    return r


def deliver(site, origin, seq, at, key, late=False, inc=1):
    return {"kind": "deliver", "site": site, "msg_id": f"{origin}:{seq}", "origin": origin,
            "seq": seq, "at": at, "order": list(key), "late": late, "inc": inc}


def everywhere(origin, seq, at, key):
    return [deliver(s, origin, seq, at + 0.1, key) for s in SITES]


# -- reliability ---------------------------------------------------------------
def test_reliability_flags_a_lost_message_between_connected_sites():
    recs = connect_all() + [send("A", 1, 1.0)] + [deliver("A", "A", 1, 1.1, (1, "A")),
                                                 deliver("B", "A", 1, 1.1, (1, "A"))]
    v = check_reliability(History(recs, SITES, end=10))
    assert [(x.kind, x.site, x.ref) for x in v] == [("reliability", "C", "A:1")]


def test_reliability_takes_a_stub_journaled_as_control_and_expired_as_arrived():
    stub = [{"kind": "control", "site": "C", "msg_id": "A:1", "origin": "A", "seq": 1, "at": 1.2,
             "order": [1, "A"], "late": False},
            {"kind": "expired", "site": "C", "msg_id": "A:1", "origin": "A", "seq": 1, "at": 1.2}]
    recs = connect_all() + [send("A", 1, 1.0)] + [deliver("A", "A", 1, 1.1, (1, "A")),
                                                 deliver("B", "A", 1, 1.1, (1, "A"))]
    assert check_reliability(History(recs + stub, SITES, end=10)) == []
    assert [x.site for x in check_reliability(History(recs + stub[:1], SITES, end=10))] == ["C"]


def test_reliability_excuses_disconnection_crash_and_skipped_destinations():
    base = connect_all() + [deliver("A", "A", 1, 1.1, (1, "A"))]
    disc = base + [send("A", 1, 1.0), status("C", "A", "disconnected", 5.0),
                   deliver("B", "A", 1, 1.1, (1, "A"))]
    assert check_reliability(History(disc, SITES, end=10)) == []
    crash = base + [send("A", 1, 1.0), {"kind": "crash", "site": "C", "at": 3.0},
                    deliver("B", "A", 1, 1.1, (1, "A"))]
    assert check_reliability(History(crash, SITES, end=10)) == []
    skipped = base + [send("A", 1, 1.0, dests=["B", "C"], skipped=["C"]),
                      deliver("B", "A", 1, 1.1, (1, "A"))]
    assert check_reliability(History(skipped, SITES, end=10)) == []
    subset = base + [send("A", 1, 1.0, dests=["B"]), deliver("B", "A", 1, 1.1, (1, "A"))]
    assert check_reliability(History(subset, SITES, end=10)) == []
    # A disconnection *before* the send, healed since, excuses nothing.
    before = connect_all(2.0) + [status("C", "A", "disconnected", 1.0), send("A", 1, 3.0),
                                 deliver("A", "A", 1, 3.1, (1, "A")),
                                 deliver("B", "A", 1, 3.1, (1, "A"))]
    assert [x.site for x in check_reliability(History(before, SITES, end=10))] == ["C"]


# -- duplicates, FIFO, keys ------------------------------------------------------
def test_duplicates_counted_per_incarnation():
    recs = [deliver("B", "A", 1, 1.0, (1, "A")), deliver("B", "A", 1, 2.0, (1, "A"), inc=2)]
    assert check_no_duplicates(History(recs, SITES)) == []
    recs.append(deliver("B", "A", 1, 3.0, (1, "A"), inc=2))
    assert [x.kind for x in check_no_duplicates(History(recs, SITES))] == ["duplicate"]


def test_fifo_per_origin():
    ok = [deliver("B", "A", 1, 1.0, (1, "A")), deliver("B", "C", 9, 1.1, (2, "C")),
          deliver("B", "A", 3, 1.2, (3, "A"))]
    assert check_fifo(History(ok, SITES)) == []
    bad = ok + [deliver("B", "A", 2, 1.3, (4, "A"))]
    v = check_fifo(History(bad, SITES))
    assert [(x.kind, x.ref) for x in v] == [("fifo", "A:2")]


def test_order_keys_in_order_and_late():
    ok = [deliver("B", "A", 1, 1.0, (2, "A")), deliver("B", "C", 1, 1.1, (1, "C"), late=True),
          deliver("B", "A", 2, 1.2, (3, "A"))]
    assert check_order_keys(History(ok, SITES)) == []
    backwards = ok + [deliver("B", "C", 2, 1.3, (3, "A"))]
    assert [x.kind for x in check_order_keys(History(backwards, SITES))] == ["igo-order"]
    not_late = ok + [deliver("B", "C", 2, 1.3, (9, "C"), late=True)]
    assert [x.kind for x in check_order_keys(History(not_late, SITES))] == ["igo-late"]
    first_late = [deliver("B", "C", 1, 1.1, (1, "C"), late=True)]
    assert [x.kind for x in check_order_keys(History(first_late, SITES))] == ["igo-late"]


# -- stable periods and IGO ------------------------------------------------------------
def test_stable_periods_follow_the_papers_definition():
    recs = connect_all() + [status("A", "C", "suspected", 5.0), status("C", "A", "suspected", 5.1),
                            status("A", "C", "disconnected", 8.0), status("C", "A", "disconnected", 8.2)]
    periods = stable_periods(History(recs, SITES, end=20))
    assert [(sorted(p.sites), p.start, p.end) for p in periods] == [(SITES, 0.0, 5.0)]
    # A-B, B-C connected, A-C disconnected: intransitive, nothing is stable ...
    # ... until B too sees C disconnected: then {A, B} is.
    recs += [status("B", "C", "suspected", 10.0), status("B", "C", "disconnected", 12.0),
             status("C", "B", "suspected", 10.0), status("C", "B", "disconnected", 12.0)]
    periods = stable_periods(History(recs, SITES, end=20))
    assert [(sorted(p.sites), p.start, p.end) for p in periods] == [(SITES, 0.0, 5.0),
                                                                      (["A", "B"], 12.0, 20)]


def test_stable_period_needs_real_links_when_given():
    recs = connect_all()
    links = LinkTimeline([LinkEvent(4.0, "A", "B", "blackhole"), LinkEvent(4.5, "A", "B", "up")], SITES)
    periods = stable_periods(History(recs, SITES, end=10), links)
    assert [(p.start, p.end) for p in periods] == [(0.0, 4.0), (4.5, 10)]


def test_igo_agreement_and_lateness_in_a_stable_period():
    recs = connect_all() + [send("A", 1, 2.0), send("B", 1, 2.0)]
    same = recs + everywhere("A", 1, 2.0, (1, "A")) + everywhere("B", 1, 2.1, (1, "B"))
    assert check_igo(History(same, SITES, end=10), margin=1.0, settle=2.0) == []
    swapped = recs + [deliver("A", "A", 1, 2.1, (1, "A")), deliver("A", "B", 1, 2.2, (1, "B")),
                      deliver("B", "A", 1, 2.1, (1, "A")), deliver("B", "B", 1, 2.2, (1, "B")),
                      deliver("C", "B", 1, 2.1, (1, "B")), deliver("C", "A", 1, 2.2, (2, "A"))]
    kinds = [v.kind for v in check_igo(History(swapped, SITES, end=10), margin=1.0, settle=2.0)]
    assert "igo-agreement" in kinds
    late = recs + everywhere("A", 1, 2.0, (1, "A")) + [
        deliver("A", "B", 1, 2.2, (0, "B"), late=True), deliver("B", "B", 1, 2.2, (0, "B"), late=True),
        deliver("C", "B", 1, 2.2, (0, "B"), late=True)]
    kinds = [v.kind for v in check_igo(History(late, SITES, end=10), margin=1.0, settle=2.0)]
    assert kinds.count("igo-late-stable") == 3
    slow = recs + everywhere("A", 1, 2.0, (1, "A")) + [deliver(s, "B", 1, 6.0, (2, "B")) for s in SITES]
    kinds = [v.kind for v in check_igo(History(slow, SITES, end=10), margin=1.0, settle=2.0)]
    assert kinds.count("igo-stall") == 3
    # Sent within the margin after the period began: not held to the stable rules.
    early = connect_all(1.5) + [send("B", 1, 2.0)] + [deliver(s, "B", 1, 6.0, (2, "B")) for s in SITES]
    assert check_igo(History(early, SITES, end=10), margin=1.0, settle=2.0) == []


# -- connection awareness and robustness ---------------------------------------------------
BOUNDS = AwarenessBounds(t_up=2.0, t_down=2.0, suspect=5.0)


def test_awareness_follows_the_link_within_bounds():
    links = LinkTimeline([LinkEvent(10.0, "A", "B", "down"), LinkEvent(30.0, "A", "B", "up")], SITES)
    good = connect_all(1.0) + [status("A", "B", "suspected", 11.0), status("B", "A", "suspected", 10.5),
                               status("A", "B", "disconnected", 16.5),
                               status("B", "A", "disconnected", 16.0),
                               status("A", "B", "connected", 31.0), status("B", "A", "connected", 31.0)]
    h = History(good, SITES, end=40)
    assert check_connection_awareness(h, links, BOUNDS) == []
    assert check_robustness(h, links, BOUNDS) == []
    slow = [r for r in good if not (r["site"] == "A" and r["at"] == 11.0)]
    slow.insert(0, status("A", "B", "suspected", 13.0))
    v = check_connection_awareness(History(slow, SITES, end=40), links, BOUNDS)
    assert any(x.kind == "awareness" and x.site == "A" and "connected at" in x.detail for x in v)
    hasty = [r for r in good if not (r["site"] == "B" and r["at"] == 16.0)]
    hasty.append(status("B", "A", "disconnected", 12.0))
    v = check_connection_awareness(History(hasty, SITES, end=40), links, BOUNDS)
    assert any("suspect_timeout" in x.detail for x in v)
    never_back = [r for r in good if r["at"] != 31.0]
    v = check_connection_awareness(History(never_back, SITES, end=40), links, BOUNDS)
    assert {x.site for x in v} == {"A", "B"}


def test_robustness_wants_disconnected_over_long_failures():
    links = LinkTimeline([LinkEvent(10.0, "A", "B", "blackhole")], SITES)
    stuck = connect_all(1.0) + [status("A", "B", "suspected", 11.0), status("B", "A", "suspected", 11.0)]
    v = check_robustness(History(stuck, SITES, end=40), links, BOUNDS)
    assert {(x.kind, x.site, x.ref) for x in v} == {("robustness", "A", "B"), ("robustness", "B", "A")}
    fine = stuck + [status("A", "B", "disconnected", 16.5), status("B", "A", "disconnected", 16.5)]
    assert check_robustness(History(fine, SITES, end=40), links, BOUNDS) == []


def test_a_crashed_peer_counts_as_a_down_link_and_restart_resets_statuses():
    links = LinkTimeline([], SITES)
    recs = connect_all(1.0) + [{"kind": "crash", "site": "C", "at": 10.0},
                               status("A", "C", "suspected", 10.2), status("B", "C", "suspected", 11.0),
                               {"kind": "start", "site": "C", "at": 12.0, "inc": 2},
                               status("A", "C", "connected", 12.5), status("B", "C", "connected", 12.5),
                               status("C", "A", "connected", 12.5), status("C", "B", "connected", 12.5)]
    h = History(recs, SITES, end=30)
    assert h.status_of("C", "A").at(12.1) == "suspected"     # a restarted RCM gives peers the suspect timeout
    assert check_connection_awareness(h, links, BOUNDS) == []
    assert check_robustness(h, links, BOUNDS) == []


# -- repair (issue 18) -----------------------------------------------------------
def _missed_then_repaired(flag: bool, named: dict | None = None):
    """C missed A:1 (skipped while disconnected), was told (``named``: the missing record's
    seqs or ranges), and got it later by repair."""
    recs = connect_all() + [status("A", "C", "disconnected", 0.5), status("C", "A", "disconnected", 0.5),
                            send("A", 1, 1.0, skipped=["C"]), send("A", 2, 1.5)]
    recs += [deliver(s, "A", 1, 1.1, (1, "A")) for s in ("A", "B")]
    recs += everywhere("A", 2, 1.5, (2, "A"))
    recs += [status("C", "A", "connected", 3.0),
             {"kind": "missing", "site": "C", "origin": "A", "at": 3.1, **(named or {"seqs": [1]})}]
    late = deliver("C", "A", 1, 4.0, (1, "A"), late=True)
    if flag:
        late["repaired"] = True
    return recs + [late]


def test_a_message_reported_missing_then_repaired_counts_as_repaired_not_lost():
    h = History(_missed_then_repaired(True), SITES, end=10)
    assert check_reliability(h) == [] and check_fifo(h) == [] and check_order_keys(h) == []
    # Without the journal's flag it reads as a broken promise, unless the reader infers it.
    bare = History(_missed_then_repaired(False), SITES, end=10)
    assert [v.kind for v in check_reliability(bare)] == ["reliability"] and check_fifo(bare)
    inferred = History(_missed_then_repaired(False), SITES, end=10, infer_repaired=True)
    assert check_reliability(inferred) == [] and check_fifo(inferred) == []


@pytest.mark.parametrize("named", [{"ranges": [[1, 1]], "count": 1, "seqs": [1]},
                                   {"ranges": [[1, 1], [3, 2**53]], "count": 2**53 - 1}],
                         ids=["ranges-and-seqs", "ranges-only-2^53"])
def test_a_missing_record_names_its_messages_by_ranges_however_many(named):
    """A record naming its messages only as ranges (a huge one too: A:3 on) excuses the repaired
    delivery like a list of seqs, looked up in the ranges, not listed."""
    inferred = History(_missed_then_repaired(False, named), SITES, end=10, infer_repaired=True)
    assert check_reliability(inferred) == [] and check_fifo(inferred) == []
    assert inferred.deliveries["C"][-1].repaired
    bare = History(_missed_then_repaired(False, named), SITES, end=10)
    assert [(v.kind, v.ref) for v in check_reliability(bare)] == [("reliability", "A:1")]   # declared, delivered


def test_a_message_counts_as_declared_missing_from_the_earliest_record_naming_it():
    declared = Declared([
        {"kind": "missing", "site": "C", "origin": "A", "at": 5.0, "ranges": [[1, 10]], "count": 10},
        {"kind": "missing", "site": "C", "origin": "A", "at": 3.0, "ranges": [[5, 2**53]], "count": 2**53 - 4},
        {"kind": "missing", "site": "C", "origin": "A", "at": 4.0, "seqs": [2]},
    ])
    seqs = (0, 1, 2, 4, 5, 10, 11, 2**53, 2**53 + 1)
    assert [declared.first_at("C", "A", s) for s in seqs] == [None, 5.0, 4.0, 5.0, 3.0, 3.0, 3.0, 3.0, None]
    assert declared.first_at("B", "A", 5) is None and declared.first_at("C", "B", 5) is None
