"""The no-leak checker (faultinject.checkers.leaks): planted leaks are found, clean evidence passes."""
from __future__ import annotations

from dataclasses import replace

import msgpack
import pytest

from contracts import journal as J
from faultinject.checkers.leaks import LeakWatch, check_journal_labels, marker, token_of
from faultinject.sim import SIM_SETTINGS, SimConfig, simulate
from rcm import wire

SECRET = {"level": "SECRET", "caveats": []}
SECRET_GBR = {"level": "SECRET", "caveats": ["GBR"]}
UNCLAS = {"level": "UNCLASSIFIED", "caveats": []}


def watch() -> LeakWatch:
    w = LeakWatch()
    w.expect("A-1", "A", {"B"}, "SECRET")       # only A (its origin) and B may hold A-1
    return w


def data_frame(payload: bytes) -> bytes:
    return wire.encode_frame([wire.DATA, 5, 1, [3, "A"], payload])


def test_a_marker_is_found_at_the_head_of_a_payload_only():
    assert token_of(marker("A-12") + b"....") == "A-12"
    assert token_of(b"A-12......") is None
    with pytest.raises(ValueError):
        marker("A 1")


def test_a_data_frame_to_a_destination_is_no_leak_and_to_another_site_is_one():
    w = watch()
    frame = data_frame(marker("A-1").ljust(40, b"."))
    w.written("A", "B", 1, frame, 1.0)
    assert w.violations == []
    # Cut across two writes: the frame is put together before it is scanned.
    w.written("A", "C", 2, frame[:9], 2.0)
    w.written("A", "C", 2, frame[9:] + frame, 2.1)
    assert [(v.kind, v.site, v.ref) for v in w.violations] == [("leak", "C", "A-1")]
    assert "DATA frame from A to C" in w.violations[0].detail and "only A, B may hold" in w.violations[0].detail
    assert w.events == 2        # both copies seen, reported once


def test_a_routed_data_frame_through_an_uncleared_relay_is_a_leak_at_the_relay_and_beyond():
    w = watch()
    routed = wire.encode_frame([wire.ROUTED, 0, "A", 1, ["B", 1], wire.DATA, 1, [3, "A"],
                                marker("A-1").ljust(30, b".")])
    w.written("A", "C", 1, routed, 3.0)     # A hands it to relay C on its way to B
    w.written("C", "B", 2, routed, 3.1)     # C, which should never have held it, passes it on
    assert [(v.site, v.ref) for v in w.violations] == [("C", "A-1")]
    assert "ROUTED DATA frame from A to C" in w.violations[0].detail


def test_a_repair_frame_to_an_uncleared_site_is_a_leak():
    w = watch()
    w.written("B", "D", 7, wire.encode_frame([wire.REPAIR, 3, ["A", 1, [1, "A"], marker("A-1") + b"xx"]]), 4.0)
    assert [(v.site, "REPAIR" in v.detail) for v in w.violations] == [("D", True)]


def test_a_marker_cut_across_two_frag_pieces_is_found():
    w = watch()
    inner = msgpack.packb([wire.DATA, 1, [3, "A"], b"x" * 300 + marker("A-1") + b"y" * 300], use_bin_type=True)
    cut = inner.index(b"<<A-") + 3
    first = wire.encode_frame([wire.FRAG, 0, 0, inner[:cut]])
    last = wire.encode_frame([wire.FRAG, 0, cut, inner[cut:], 9])
    w.written("A", "B", 1, first + last, 5.0)
    assert w.violations == []
    w.written("A", "C", 2, first + last, 5.0)
    assert [(v.site, "FRAG" in v.detail) for v in w.violations] == [("C", True)]


def test_deliveries_and_log_records_at_an_uncleared_site_are_leaks():
    w = watch()
    payload = marker("A-1").ljust(20, b".")
    w.delivered("B", payload, 1.0)
    w.stored("B", msgpack.packb(["R", "A", 1, 1, 1, [3, "A"], payload], use_bin_type=True), 1.0)
    assert w.violations == []
    w.delivered("C", payload, 2.0)
    w.stored("C", msgpack.packb(["R", "A", 1, 1, 1, [3, "A"], payload], use_bin_type=True), 2.0)
    w.delivered("C", marker("Z-9") + b"...", 2.0)       # not a labeled message of this run
    assert sorted(v.detail.split(" holds")[0] for v in w.violations) == ["at 2.000 a delivery",
                                                                         "at 2.000 a log record"]


def clearance(site: str, level: str, caveats: list[str], at: float = 0.0) -> dict:
    return {"kind": J.CLEARANCE, "site": site, "at": at, "clearance": {"level": level, "caveats": caveats},
            "levels": ["UNCLASSIFIED", "CONFIDENTIAL", "SECRET"], "caveats": ["GBR", "USA"]}


def send(site: str, seq: int, label: dict | None) -> dict:
    return J.record(J.SEND, site=site, at=1.0, msg_id=f"{site}:{seq}", origin=site, seq=seq, sent_at=1.0,
                    order=[seq, site], label=label)


def deliver(site: str, origin: str, seq: int, label: dict | None, at: float = 2.0) -> dict:
    return J.record(J.DELIVER, site=site, n=seq, at=at, msg_id=f"{origin}:{seq}", origin=origin, seq=seq,
                    order=[seq, origin], late=False, label=label)


def test_journals_of_cleared_sites_pass():
    records = [clearance("A", "SECRET", ["GBR"]), clearance("B", "SECRET", ["GBR", "USA"]),
               send("A", 1, SECRET_GBR), deliver("B", "A", 1, SECRET_GBR), send("B", 1, UNCLAS),
               deliver("A", "B", 1, UNCLAS)]
    assert check_journal_labels(records) == []
    assert check_journal_labels([send("A", 1, None)]) == []     # an unlabeled mission


def test_a_delivery_above_the_sites_clearance_is_a_leak_in_a_journal():
    records = [deliver("C", "A", 1, SECRET_GBR),        # before C's clearance record: the first one holds
               clearance("A", "SECRET", ["GBR"]), clearance("C", "SECRET", []), send("A", 1, SECRET_GBR),
               deliver("C", "A", 2, SECRET)]
    got = check_journal_labels(records)
    assert [(v.kind, v.site, v.ref) for v in got] == [("leak", "C", "A:1")]
    assert "SECRET//REL TO GBR message at a site cleared for SECRET" in got[0].detail


def test_the_clearance_in_force_is_the_latest_one_so_far():
    records = [clearance("B", "SECRET", []), deliver("B", "A", 1, SECRET, at=1.0),
               clearance("B", "CONFIDENTIAL", [], at=5.0), deliver("B", "A", 2, SECRET, at=6.0)]
    assert [(v.kind, v.ref) for v in check_journal_labels(records)] == [("leak", "A:2")]


def test_unlabeled_relabeled_unreadable_and_unjudged_records_are_reported():
    records = [clearance("A", "SECRET", ["GBR", "USA"]), clearance("B", "SECRET", ["GBR", "USA"]),
               send("A", 1, SECRET), deliver("B", "A", 1, UNCLAS), send("A", 2, None),
               deliver("B", "A", 3, {"level": "TOP SECRET", "caveats": []}), deliver("C", "A", 1, SECRET),
               deliver("C", "A", 4, SECRET)]
    got = [(v.kind, v.site, v.ref) for v in check_journal_labels(records)]
    assert got == [("relabeled", "B", "A:1"), ("unlabeled", "A", "A:2"), ("leak", "B", "A:3"),
                   ("no-clearance", "C", "A:1")]


def test_a_labeled_run_on_direct_links_is_clean_and_labels_its_journal():
    """Without relays a message travels only from its origin to its destinations (and repair among
    them), so a labeled run has no leak whatever RCM's relays do."""
    config = SimConfig(labels=True, chaos=8.0, heal=6.0, quiet=2.0, rate=2.0, faults=2,
                       settings=replace(SIM_SETTINGS, routing="direct"))
    confined = 0
    for seed in (0, 1):
        r = simulate(seed, config)
        assert r.violations == [], r.violations[:3]
        sends = [x for x in r.records if x["kind"] == J.SEND]
        assert sends and all("label" in x for x in sends)
        assert all("label" in x for x in r.records if x["kind"] == J.DELIVER)
        assert {x["site"] for x in r.records if x["kind"] == J.CLEARANCE} == {"A", "B", "C"}
        confined += sum(1 for x in sends if len(x["dests"]) < 2)
    assert confined > 0


def test_a_malformed_label_is_reported_not_raised():
    records = [clearance("B", "SECRET", []), deliver("B", "A", 1, SECRET)]
    records[1]["label"] = ["SECRET"]
    records.append(deliver("B", "A", 2, None))
    records[2]["label"] = {"level": "SECRET", "caveats": "GBR"}
    got = check_journal_labels(records)
    assert [(v.kind, v.ref) for v in got] == [("leak", "A:1"), ("leak", "A:2")]
    assert all("cannot read" in v.detail for v in got)
