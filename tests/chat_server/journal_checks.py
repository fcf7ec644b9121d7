"""TEST HELPER: the chat journals of a real mission, checked (FIFO per origin, global order, no duplicates).

The servers themselves are started by ``faultinject.procs`` (the one local launcher) and
their links are ``faultinject.links.LinkSet``'s proxies.
"""
from __future__ import annotations

from typing import Any

from chat_server.journal import journal_files, read_journal
from contracts import journal as J
from contracts.mission import Mission
from rcm import ranges


def missing_by_origin(recs: list[dict[str, Any]]) -> dict[str, list[list[int]]]:
    """Origin -> the canonical seq ranges the ``missing`` records name (never expanded: a range may be huge)."""
    out: dict[str, list[list[int]]] = {}
    for r in recs:
        if r["kind"] == J.MISSING:
            out[r["origin"]] = ranges.normalize(out.get(r["origin"], []) + [list(p) for p in J.missing_of(r)])
    return out


def site_journal(mission: Mission, site: str) -> list[dict[str, Any]]:
    """Every record of a site's journal files, in order."""
    return [r for f in journal_files(mission.site_dir(site) / "journal") for r in read_journal(f)]


def check_journals(mission: Mission) -> dict[str, Any]:
    """FIFO per origin, global order of non-late deliveries, no duplicates; returns a summary.

    Raises AssertionError naming the first violation.
    """
    summary: dict[str, Any] = {}
    for site in mission.sites:
        recs = site_journal(mission, site)
        delivers = [r for r in recs if r["kind"] == J.DELIVER]
        ids = [r["msg_id"] for r in delivers]
        assert len(ids) == len(set(ids)), f"{site}: duplicate deliveries {sorted({i for i in ids if ids.count(i) > 1})}"
        ns = [r["n"] for r in delivers]
        assert ns == list(range(1, len(ns) + 1)), f"{site}: n is not 1..{len(ns)}: {ns}"
        last_seq: dict[str, int] = {}
        for r in delivers:
            if r.get("held") or r.get("repaired"):      # the documented exceptions to FIFO
                continue
            assert r["seq"] > last_seq.get(r["origin"], 0), f"{site}: FIFO broken from {r['origin']} at {r['msg_id']}"
            last_seq[r["origin"]] = r["seq"]
        sent_at_index = {r["msg_id"]: i for i, r in enumerate(recs) if r["kind"] == J.SEND}
        for i, r in enumerate(recs):
            if r["kind"] == J.DELIVER and r["origin"] == site:
                assert sent_at_index.get(r["msg_id"], i) < i, f"{site}: {r['msg_id']} delivered before its send record"
        ordered = [tuple(r["order"]) for r in delivers if not r["late"]]
        for a, b in zip(ordered, ordered[1:]):
            assert a < b, f"{site}: global order broken: {list(a)} delivered before {list(b)}"
        summary[site] = {"delivered": set(ids), "sent": {r["msg_id"] for r in recs if r["kind"] == J.SEND},
                         "expired": {r["msg_id"] for r in recs if r["kind"] == J.EXPIRED},
                         "missing": missing_by_origin(recs),
                         "late": {r["msg_id"] for r in delivers if r["late"]},
                         "status": [(r["peer"], r["status"]) for r in recs if r["kind"] == J.STATUS]}
    return summary
