"""Messages RCM reports lost (chat_server/losses.py) and their ``missing`` journal records
(chat_server/journal.py): ranges end to end, whatever number of messages the ranges name."""
from __future__ import annotations

import sys
import time
import tracemalloc
from pathlib import Path

import pytest

from chat_server.actions import Broadcast, JournalRecord, StoreLosses
from chat_server.journal import (
    MISSING_RANGES_PER_RECORD,
    Journal,
    missing_batches,
    read_journal,
)
from chat_server.losses import MISSING_RANGES_KEPT, Losses
from contracts import journal as J
from contracts.journal import MISSING_SEQS_MAX


def journaled(tmp_path: Path, actions: list) -> list[dict]:
    """The ``missing`` records the actions write, as a reader sees them."""
    j = Journal(tmp_path / "journal", "A", clock=lambda: 7.0)
    for a in actions:
        if isinstance(a, JournalRecord):
            getattr(j, a.kind)(**a.fields)
    return [r for r in read_journal(j.path) if r["kind"] == "missing"]


@pytest.mark.parametrize("last", [10**6, 2**53], ids=["a-million", "2^53"])
def test_a_huge_range_is_journaled_as_one_ranges_record_in_bounded_memory(tmp_path: Path, last: int) -> None:
    tracemalloc.start()
    try:
        t0 = time.process_time()
        out = Losses().reported("B", ((1, last),))
        records = journaled(tmp_path, out)
        took = time.process_time() - t0
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2 << 20 and took < 5.0, (peak, took)     # the old code: 77 MB and 3.6 s for a million
    assert [{k: r[k] for k in r if k not in ("at", "site")} for r in records] == [
        {"kind": "missing", "origin": "B", "ranges": [[1, last]], "count": last}]     # no `seqs`
    notice = out[-1]
    assert isinstance(notice, Broadcast) and notice.frame["count"] == last and notice.frame["ranges"] == [[1, last]]


def test_records_list_seqs_up_to_ten_thousand_messages_and_ranges_always(tmp_path: Path) -> None:
    reported = ((1, 4_000), (5_001, 11_000), (20_000, 20_000), (30_000, 50_000), (60_000, 60_000))
    records = journaled(tmp_path, Losses().reported("B", reported))
    assert [(r["ranges"], r["count"], "seqs" in r) for r in records] == [
        ([[1, 4_000], [5_001, 11_000]], 10_000, True),     # 10,000 messages: listed as seqs too
        ([[20_000, 20_000]], 1, False),                    # one more would have made 10,001: a new record, and
        ([[30_000, 50_000]], 20_001, False),               # the report listed 10,000 already; longer than
        ([[60_000, 60_000]], 1, False),                    # 10,000: ranges only, never cut
    ]
    assert records[0]["seqs"] == [*range(1, 4_001), *range(5_001, 11_001)]
    assert sum(r["count"] for r in records) == sum(b - a + 1 for a, b in reported)


def test_a_report_of_many_ranges_is_split_at_a_thousand_ranges_a_record() -> None:
    every_other = [[s, s] for s in range(1, 2 * 2_500, 2)]                   # 2,500 single messages
    assert [len(b) for b in missing_batches(every_other)] == [1000, 1000, 500]
    wide = [[s, s + MISSING_SEQS_MAX] for s in range(1, 2_500 * 2 * MISSING_SEQS_MAX, 2 * MISSING_SEQS_MAX)]
    batches = list(missing_batches(wide))
    assert [len(b) for b in batches] == [MISSING_RANGES_PER_RECORD, MISSING_RANGES_PER_RECORD, 500]
    assert [r for b in batches for r in b] == wide


def test_a_report_costs_what_its_own_ranges_cost_not_what_is_kept() -> None:
    """A peer filled the kept ranges (10,000) with three MISSED frames; then each MISSED frame of one range
    re-sorted and rewrote them all: 20,000 Python calls and a 260 KB state write for 20 bytes, which a peer
    may send as fast as its link goes (found by faultinject.adversary's chat probe). Now a report merges its
    own ranges, and what is kept is stored at most once a receipt tick."""
    losses = Losses()
    losses.reported("B", tuple((4 * i + 1, 4 * i + 2) for i in range(MISSING_RANGES_KEPT)))
    assert len(losses.lost["B"]) == MISSING_RANGES_KEPT
    losses.revisions()                              # (the receipt tick)
    calls = [0]

    def count(frame, event, arg):
        calls[0] += event in ("call", "c_call")
    sys.setprofile(count)
    try:
        out = losses.reported("B", ((10**9, 10**9 + 5),))
        again = losses.recovered("B", 5)
    finally:
        sys.setprofile(None)
    assert calls[0] < 300, calls[0]                 # was 20,000 and more
    assert not any(isinstance(a, StoreLosses) for a in out + again)
    stored = [a for a in losses.revisions() if isinstance(a, StoreLosses)]
    kept = stored[0].lost["B"]                      # the new range widened the last one (the cap) ...
    assert len(stored) == 1 and len(kept) == MISSING_RANGES_KEPT
    assert kept[-1] == [4 * MISSING_RANGES_KEPT - 3, 10**9 + 5]
    assert kept[1] == [6, 6]                        # ... and the repaired message is no longer missing
    assert not any(isinstance(a, StoreLosses) for a in losses.revisions())      # stored once


def test_a_report_lists_ten_thousand_seqs_at_most_whatever_its_ranges(tmp_path: Path) -> None:
    """Each record listed up to 10,000 seqs, so a report of ranges of 10,000 each listed them all: a peer's
    MISSED frame of 4,096 such ranges (74 KB) wrote 41 million numbers to the journal (found by
    faultinject.adversary's chat probe). Here 100 such ranges: one million before, 10,000 now."""
    reported = tuple((s, s + MISSING_SEQS_MAX - 1) for s in range(1, 200 * MISSING_SEQS_MAX, 2 * MISSING_SEQS_MAX))
    records = journaled(tmp_path, Losses().reported("B", reported))
    assert sum(len(r.get("seqs", ())) for r in records) == MISSING_SEQS_MAX
    assert sum(r["count"] for r in records) == 100 * MISSING_SEQS_MAX and len(records) == 100
    assert sorted(r for rec in records for r in J.missing_of(rec)) == [tuple(r) for r in reported]


async def test_a_missing_notice_for_a_long_outage_is_a_count_and_ranges_not_a_list(cluster_factory) -> None:
    """Through a chat server on the RCM double: the client's ``missing`` frame and the journal's records."""
    from journal_checks import site_journal

    from rcm import ranges as rcm_ranges
    from rcm.client import Missing
    cl = await cluster_factory(["A", "B"], users={"B": ["bob"]})
    bob = await cl.client("B", "bob")
    await bob.join("ops")
    seqs = [s for s in range(1, 400_001) if s % 1000]          # 399,600 lost, in 400 ranges
    cl.net._emit("B", Missing.from_seqs("A", seqs))
    miss = await bob.wait_for(lambda f: f["type"] == "missing", 10)
    assert miss["count"] == len(seqs) and len(miss["ranges"]) == 400 and not miss["more"]
    assert miss["ranges"][0] == [1, 999] and "seqs" not in miss
    await bob.say("ops", "still connected")
    recs = [r for r in site_journal(cl.mission, "B") if r["kind"] == "missing"]
    # Ranges in the journal (a whole report lists at most 10,000 seqs as well).
    assert rcm_ranges.normalize([p for r in recs for p in J.missing_of(r)]) == rcm_ranges.of_seqs(seqs)
    assert sum(len(r.get("seqs", ())) for r in recs) <= 10_000
    assert [q for r in recs for q in r["ranges"]] == miss["ranges"] and sum(r["count"] for r in recs) == len(seqs)
