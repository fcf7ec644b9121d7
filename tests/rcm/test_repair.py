"""Repair, sans-IO (rcm/repair.py, rcm/retention.py): wants, summaries, fetches, serving, on virtual time."""
from __future__ import annotations

import pytest

from contracts.mission import MissionError, parse_rcm_settings
from rcm import wire
from rcm.repair.antientropy import Offer, Repair
from rcm.repair.frames import FETCH_MESSAGES, Repaired, RepairError, parse_fetch, parse_repair, parse_summary
from rcm.repair.retention import ENTRY_OVERHEAD, Retention

SITES = ["A", "B", "C", "D"]
IDX = {s: i for i, s in enumerate(SITES)}


def site(name: str, rate: int = 1 << 20, period: float = 10.0) -> Repair:
    return Repair(name, SITES, Retention(3600.0, 1 << 30), period, rate, 1024, 0.0)


def keep(r: Repair, origin: str, seqs, at: float = 0.0) -> None:
    for s in seqs:
        r.retention.add(origin, s, (s, origin), f"{origin}{s}".encode(), at)


def kinds(offers: list[Offer]) -> list[tuple[str, int]]:
    return [(o.peer, o.kind) for o in offers]


def exchange(a: Repair, b: Repair, offers: list[Offer], now: float) -> list[Repaired]:
    """Run offers between two sites until quiet (both serve at once, nothing in flight)."""
    got: list[Repaired] = []
    queue = [(a.site, o) for o in offers]
    sites = {a.site: a, b.site: b}
    while queue:
        frm, o = queue.pop(0)
        to = sites[o.peer]
        out, rep = to.frame(frm, o.kind, o.body, now)
        if rep is not None:
            got.append(rep)
        out += to.serve(now, {})
        queue += [(to.site, x) for x in out]
    return got


def test_retention_keeps_by_age_and_by_bytes_and_counts_what_leaves():
    r = Retention(100.0, 10 * (ENTRY_OVERHEAD + 2))
    for s in range(1, 13):
        r.add("A", s, (s, "A"), b"xx", at=float(s))
    # Twelve do not fit ten: the two oldest left early.
    assert r.holdings() == {"A": [[3, 12]]} and r.evicted == 2
    assert not r.add("A", 5, (5, "A"), b"xx", 50.0)        # already kept
    assert r.expire(104.5) == 2 and r.holdings() == {"A": [[5, 12]]}
    assert r.next_expiry() == 105.0
    st = r.stats()
    assert (st["messages"], st["expired"], st["evicted"], st["expired_bytes"]) == (8, 2, 2, 8)
    assert [k.seq for k in r.records()] == list(range(5, 13))


def test_a_missing_notice_asks_connected_peers_and_fetches_from_the_origin_first():
    c, a, b = site("C"), site("A"), site("B")
    keep(a, "A", range(1, 11))
    keep(b, "A", range(1, 11))
    assert c.status("A", True, 0.0) == [] and c.status("B", True, 0.0) == []   # nothing wanted yet
    asks = c.missing("A", [[3, 6]], 1.0)
    assert sorted(kinds(asks)) == [("A", wire.SUMMARY), ("B", wire.SUMMARY)]
    # B answers first: C fetches from B, since the origin's holdings are not known yet.
    reply_b, _ = b.frame("C", wire.SUMMARY, asks[1].body, 1.1)
    out, _ = c.frame("B", wire.SUMMARY, reply_b[0].body, 1.2)
    assert kinds(out) == [("B", wire.FETCH)] and out[0].body == [IDX["A"], [[3, 6]]]
    # A's summary: everything is asked already, nothing more goes out.
    reply_a, _ = a.frame("C", wire.SUMMARY, asks[0].body, 1.1)
    assert c.frame("A", wire.SUMMARY, reply_a[0].body, 1.3) == ([], None)
    got = exchange(c, b, out, 1.4)
    assert [(g.origin, g.seq, g.key) for g in got] == [("A", s, (s, "A")) for s in range(3, 7)]
    assert c.wants == {} and c.asked == {} and c.counters["repaired"] == 4


def test_with_every_summary_known_the_origin_is_preferred():
    c, a = site("C"), site("A")
    keep(a, "A", range(1, 5))
    c.status("A", True, 0.0)
    c.status("B", True, 0.0)
    c.holdings = {"A": {"A": [[1, 4]]}, "B": {"A": [[1, 4]]}}
    out = c.missing("A", [[2, 3]], 1.0)
    fetches = [o for o in out if o.kind == wire.FETCH]
    assert [(o.peer, o.body) for o in fetches] == [("A", [IDX["A"], [[2, 3]]])]


def test_a_second_copy_is_dropped_exactly_once_delivered():
    c = site("C")
    c.status("B", True, 0.0)
    c.missing("B", [[1, 1]], 0.0)
    body = [IDX["B"], 1, [1, "B"], b"B1"]
    _, first = c.frame("B", wire.REPAIR, body, 1.0)
    _, again = c.frame("D", wire.REPAIR, body, 1.1)
    assert first == Repaired("B", 1, (1, "B"), b"B1") and again is None
    assert c.counters["duplicates"] == 1
    # A notice for what is held already wants nothing.
    keep(c, "B", [2])
    assert c.missing("B", [[2, 2]], 2.0) == [] and c.wants == {}


def test_a_stalled_request_goes_to_another_holder_after_the_period():
    c = site("C", period=5.0)
    for p in ("A", "B"):
        c.status(p, True, 0.0)
    c.holdings = {"A": {"D": [[1, 9]]}, "B": {"D": [[1, 9]]}}
    first = [o for o in c.missing("D", [[4, 5]], 1.0) if o.kind == wire.FETCH]
    assert [o.peer for o in first] == ["A"]
    assert c.next_deadline() == 6.0
    assert c.tick(5.9) == []
    again = [o for o in c.tick(6.0) if o.kind == wire.FETCH]
    # The period also asks for fresh summaries; the request goes out again (A is least loaded again).
    assert len(again) == 1 and again[0].body == [IDX["D"], [[4, 5]]] and c.counters["stalls"] == 1
    # A peer that leaves takes its requests along: the wants stay.
    c.status(again[0].peer, False, 7.0)
    assert c.asked == {} and c.wanted_count() == 2


def test_serving_is_rate_limited_and_waits_for_the_channel_window():
    holder = site("A", rate=1024)
    keep(holder, "A", range(1, 101))           # 2-4 byte payloads: about 43 bytes a frame
    holder.frame("C", wire.FETCH, [IDX["A"], [[1, 100]]], 0.0)
    first = holder.serve(0.0, {})
    assert 0 < len(first) <= holder.window == 8
    # The window is full until C acknowledges.
    assert holder.serve(0.5, {"C": holder.window}) == []
    sent = len(first)
    t = 0.5
    while holder.serving:
        t = max(t + 0.1, holder.next_deadline() or t)
        sent += len(holder.serve(t, {"C": 0}))
    assert sent == 100
    # 100 frames of about 43 bytes at 1024 bytes/s, after a one-second burst: about 3 seconds.
    assert 2.0 < t < 5.0
    assert holder.counters["served"] == 100


def test_asked_for_what_is_not_held_any_more_the_holder_answers_with_its_summary():
    holder = site("B")
    keep(holder, "A", [1, 3])
    holder.frame("C", wire.FETCH, [IDX["A"], [[1, 3]]], 0.0)
    out = holder.serve(0.0, {})
    assert [o.kind for o in out] == [wire.REPAIR, wire.REPAIR, wire.SUMMARY]
    reply, held = parse_summary(out[-1].body, SITES)
    assert not reply and held == {"A": [[1, 1], [3, 3]]}


def test_a_fetch_is_cut_to_what_is_held_by_range_arithmetic_not_a_walk(monkeypatch):
    """A FETCH of numbers the holder lacks used to be walked one number at a time, without spending a token:
    ``[[1, 2^53]]`` hung the event loop. Now a request is cut to the held ranges when it arrives."""
    holder = site("B")
    keep(holder, "A", [5, 6, 900])
    looked = []
    real_get = holder.retention.get
    monkeypatch.setattr(holder.retention, "get", lambda o, s: looked.append(s) or real_get(o, s))
    holder.frame("C", wire.FETCH, [IDX["A"], [[1, 1000], [1500, 2547]]], 0.0)
    out = holder.serve(0.0, {})
    assert [o.body[1] for o in out if o.kind == wire.REPAIR] == [5, 6, 900]
    assert sorted(looked) == [5, 6, 900]            # three lookups for 2048 numbers asked
    assert holder.counters["unheld"] == 2048 - 3


@pytest.mark.parametrize("ranges_", [[[1, 2**53]], [[1, FETCH_MESSAGES + 1]], [[1, 2000], [3000, 3100]]])
def test_a_fetch_for_more_than_a_requester_can_have_outstanding_is_refused(ranges_):
    with pytest.raises(RepairError, match="at most 2048"):
        parse_fetch([0, ranges_], SITES)
    holder = site("B")
    with pytest.raises(RepairError):
        holder.frame("C", wire.FETCH, [0, ranges_], 0.0)
    assert not holder.serving


def test_what_is_not_held_is_told_at_most_once_a_period():
    """Each FETCH of unheld numbers answered with a full summary would amplify a peer's frames."""
    holder = site("B", period=10.0)
    keep(holder, "A", [1])
    summaries = 0
    for i in range(20):
        holder.frame("C", wire.FETCH, [IDX["A"], [[2, 2048]]], i * 0.1)
        summaries += sum(o.kind == wire.SUMMARY for o in holder.serve(i * 0.1, {}))
    assert summaries == 1
    assert holder.next_deadline() == 10.0
    assert [o.kind for o in holder.serve(10.0, {})] == [wire.SUMMARY]
    assert not holder.serving


def test_requests_are_bounded_per_peer():
    c = site("C")
    c.status("B", True, 0.0)
    c.holdings = {"B": {"B": [[1, 100_000]]}}
    out = c.missing("B", [[1, 100_000]], 0.0)
    fetch = [o for o in out if o.kind == wire.FETCH]
    assert len(fetch) == 1 and fetch[0].body == [IDX["B"], [[1, FETCH_MESSAGES]]]


@pytest.mark.parametrize("parse, body", [
    (parse_summary, [2, []]),
    (parse_summary, [1, [[9, [[1, 2]]]]]),
    (parse_summary, [1, [[0, [[1, 2]]], [0, [[4, 4]]]]]),
    (parse_summary, [0, [[0, [[3, 2]]]]]),
    (parse_summary, [0, [[0, [[1, 2]]]] * 5]),
    (parse_fetch, [0, [[1, 2 ** 60]]]),
    (parse_fetch, [0, [[1, 2], [3, 4]]]),      # adjacent: not canonical
    (parse_fetch, "x"),
    (parse_repair, [0, 0, [1, "A"], b"x"]),
    (parse_repair, [0, 1, [], b"x"]),
    (parse_repair, [0, 1, [2 ** 54, "A"], b"x"]),
    (parse_repair, [0, 1, [1, "A" * 65], b"x"]),
    (parse_repair, [0, 1, [1, "A"], "text"]),
    (parse_repair, [0, 1, [1, "A"], b"x" * 2000]),
    (parse_repair, [0, 1, [1, "A"], b"x", 4]),         # precedence ranks are 0 (flash) to 3
    (parse_repair, [0, 1, [1, "A"], b"x", "flash"]),
    (parse_repair, [0, 1, [1, "A"], b"x", 0, 0.0, 1, 0]),    # at most 7 fields
    (parse_repair, [0, 1, [1, "A"], b"x", 0, float("nan")]),  # an expiry is a finite time
    (parse_repair, [0, 1, [1, "A"], b"x", 0, float("inf")]),
    (parse_repair, [0, 1, [1, "A"], b"x", 0, -1.0]),
    (parse_repair, [0, 1, [1, "A"], b"x", 0, 2.0 ** 40]),
    (parse_repair, [0, 1, [1, "A"], b"x", 0, "soon"]),
    (parse_repair, [0, 1, [1, "A"], b"x", 0, 5.0, 1]),       # a stub carries no payload
    (parse_repair, [0, 1, [1, "A"], b"", 0, 5.0, 2]),        # the stub mark is 1
    (parse_repair, [0, 1, [1, "A"], b"", 0, 5.0, True]),
])
def test_malformed_frames_are_refused_before_anything_changes(parse, body):
    with pytest.raises(RepairError):
        if parse is parse_repair:
            parse(body, SITES, 1024)
        else:
            parse(body, SITES)
    c = site("C")
    c.status("B", True, 0.0)
    c.missing("A", [[1, 1]], 0.0)
    before = (dict(c.wants), dict(c.holdings), dict(c.serving))
    kind = {parse_summary: wire.SUMMARY, parse_fetch: wire.FETCH, parse_repair: wire.REPAIR}[parse]
    with pytest.raises(RepairError):
        c.frame("B", kind, body, 1.0)
    assert (dict(c.wants), dict(c.holdings), dict(c.serving)) == before


@pytest.mark.parametrize("table, words", [
    ({"retention": 30.0}, "retention = 30.0 must be at least suspect_timeout"),
    ({"retention_bytes": 1000}, "retention_bytes = 1000 must be at least max_payload_bytes"),
    ({"repair_rate": 10}, "repair_rate = 10 must be at least 1024"),
    ({"repair": "yes"}, "repair = 'yes' must be true or false"),
    ({"repair_period": 0}, "repair_period = 0.0 must be greater than 0"),
])
def test_repair_settings_are_validated_naming_the_key(table, words):
    with pytest.raises(MissionError, match=words):
        parse_rcm_settings(table)
    s = parse_rcm_settings({"retention": 3600, "retention_bytes": 1 << 20, "repair": False})
    assert (s.retention, s.retention_bytes, s.repair) == (3600.0, 1 << 20, False)


def test_a_repair_frame_carries_a_precedence_other_than_routine():
    """Issue 19 with issue 18: a FLASH repaired to a site that missed it is a FLASH there."""
    assert parse_repair([0, 1, [1, "A"], b"x"], SITES, 1024).precedence == "routine"
    assert parse_repair([0, 1, [1, "A"], b"x", 0], SITES, 1024).precedence == "flash"
    a = site("A")
    a.retention.add("A", 1, (1, "A"), b"medevac", 0.0, precedence="flash")
    a.retention.add("A", 2, (2, "A"), b"chatter", 0.0)
    a.frame("C", wire.FETCH, [0, [[1, 2]]], 1.0)
    bodies = [o.body for o in a.serve(1.0, {})]
    assert bodies == [[0, 1, [1, "A"], b"medevac", 0], [0, 2, [2, "A"], b"chatter"]]
