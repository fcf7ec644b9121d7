"""Position reports: the payload, the table, the frames, and their way between sites (on the fake RCM)."""
from __future__ import annotations

import json

import msgpack
import pytest

from chat_server import positions
from chat_server.client import ChatError
from chat_server.journal import read_journal
from chat_server.positions import PositionError, PositionTable, Report
from chat_server.protocol import POSITION_LIFE_MAX, FrameError, parse_client_frame
from rcm.wire.latest import MAX_TTL


def report(unit: str = "alpha-1", at: float = 100.0, **kw: object) -> Report:
    fields: dict[str, object] = dict(site="A", unit=unit, user="alice", lat=51.5012345, lon=-0.1412345, at=at,
                                     expires_at=at + 600)
    fields.update(kw)
    return Report(**fields)  # type: ignore[arg-type]


# --- the payload ------------------------------------------------------------------------------------
def test_a_report_travels_in_a_few_dozen_bytes_and_reads_back():
    r = report(alt=123.4, course=271.5, speed=3.25)
    data = positions.encode(r)
    assert len(data) <= 40
    back = positions.decode("A", positions.key(r.unit), data, r.expires_at)
    assert back == r


def test_absent_fields_stay_absent_and_the_frame_leaves_them_out():
    r = report()
    back = positions.decode("A", b"alpha-1", positions.encode(r), r.expires_at)
    assert (back.alt, back.course, back.speed) == (None, None, None)
    assert back.frame() == {"type": "position", "site": "A", "unit": "alpha-1", "user": "alice",
                            "lat": 51.5012345, "lon": -0.1412345, "at": 100.0, "expires_at": 700.0}


@pytest.mark.parametrize("payload", [
    b"\xc1", msgpack.packb([1, 2]), msgpack.packb(["alice", 91 * 10**7, 0, 1.0, None, None, None]),
    msgpack.packb(["alice", 0, 0, float("nan"), None, None, None]),
    msgpack.packb(["al ice", 0, 0, 1.0, None, None, None]), msgpack.packb(["alice", 0.5, 0, 1.0, None, None, None]),
    msgpack.packb(["alice", 0, 0, 1.0, None, 4000, None]), msgpack.packb(["alice", True, 0, 1.0, None, None, None]),
])
def test_a_payload_no_site_could_send_is_refused(payload):
    with pytest.raises(PositionError):
        positions.decode("A", b"alpha-1", payload, 700.0)


def test_a_bad_unit_name_or_site_is_refused():
    data = positions.encode(report())
    for origin, key in (("A", b" lead"), ("A", b"\xff"), ("not a site", b"alpha-1")):
        with pytest.raises(PositionError):
            positions.decode(origin, key, data, 700.0)


# --- the table ---------------------------------------------------------------------------------------
def test_the_table_keeps_the_newest_version_and_recognises_a_replay():
    t = PositionTable()
    assert t.apply(report(at=100), version=5, now=100)
    assert not t.apply(report(at=100), version=5, now=101)            # RCM replayed it
    assert not t.apply(report(at=90), version=4, now=101)             # older
    assert t.apply(report(at=110, lat=1.0), version=6, now=111)
    assert [r.lat for r in t.live(112)] == [1.0]


def test_expired_reports_are_forgotten_and_never_taken():
    t = PositionTable()
    assert not t.apply(report(at=0, expires_at=50), version=1, now=60)
    t.apply(report(unit="a", at=100, expires_at=150), version=2, now=100)
    t.apply(report(unit="b", at=100, expires_at=300), version=3, now=100)
    assert [r.unit for r in t.live(200)] == ["b"]
    assert len(t) == 1


def test_a_full_table_lets_the_oldest_report_go():
    t = PositionTable(most=3)
    for v, unit in enumerate(("a", "b", "c", "d"), start=1):
        t.apply(report(unit=unit), version=v, now=100)
    assert [r.unit for r in t.live(100)] == ["b", "c", "d"]


# --- the client frame -----------------------------------------------------------------------------------
@pytest.mark.parametrize("frame, problem", [
    ({"lat": 91, "lon": 0}, "lat must be"),
    ({"lat": 0, "lon": -180.5}, "lon must be"),
    ({"lat": 0, "lon": 0, "unit": " lead"}, "callsign"),
    ({"lat": 0, "lon": 0, "course": 360}, "course"),
    ({"lat": 0, "lon": 0, "speed": -1}, "speed"),
    ({"lat": 0, "lon": 0, "at": 1e12}, "Unix seconds"),
    ({"lat": "north", "lon": 0}, "must be a number"),
    ({"lon": 0}, "missing field 'lat'"),
    ({"lat": 0, "lon": 0, "expires_in": 0.5}, "expires_in must be seconds from 1 to 3600"),
    ({"lat": 0, "lon": 0, "expires_in": 7200}, "expires_in must be seconds from 1 to 3600"),
])
def test_a_bad_position_frame_gets_a_clear_error(frame, problem):
    with pytest.raises(FrameError, match=problem):
        parse_client_frame(json.dumps({"type": "position", **frame}), 8192)


def test_a_report_lives_its_expires_in_but_never_past_position_max_age():
    fields = parse_client_frame(json.dumps({"type": "position", "lat": 1, "lon": 2, "expires_in": 120}), 8192).fields
    assert positions.from_request("A", "alice", fields, now=1000.0, max_age=600.0).expires_at == 1120.0
    assert positions.from_request("A", "alice", fields, now=1000.0, max_age=60.0).expires_at == 1060.0
    fields = parse_client_frame(json.dumps({"type": "position", "lat": 1, "lon": 2}), 8192).fields
    assert positions.from_request("A", "alice", fields, now=1000.0, max_age=600.0).expires_at == 1600.0
    assert POSITION_LIFE_MAX == MAX_TTL          # the chat's bound is RCM's (one value, two packages)


def test_a_callsign_may_hold_inner_spaces():
    req = parse_client_frame(json.dumps({"type": "position", "lat": 1, "lon": 2, "unit": "Bravo 2-1"}), 8192)
    assert req.fields["unit"] == "Bravo 2-1"


# --- between sites (fake RCM) -------------------------------------------------------------------------
async def test_reports_reach_every_site_and_a_site_that_comes_back_gets_the_newest_only(cluster_factory):
    cl = await cluster_factory(["A", "B", "C"], users={"A": ["alice"], "B": ["bob"], "C": ["carol"]})
    alice, bob = await cl.client("A", "alice"), await cl.client("B", "bob")
    carol = await cl.client("C", "carol")
    assert await bob.positions() == []
    await carol.positions()
    cl.net.set_link("A", "C", "disconnected")
    reply = await alice.report_position(51.5, -0.14, alt=30.0)
    assert (reply["type"], reply["site"], reply["unit"], reply["user"]) == ("position", "A", "alice", "alice")
    shown = await bob.wait_for(lambda f: f.get("type") == "position")
    assert (shown["site"], shown["unit"], shown["lat"], shown["alt"]) == ("A", "alice", 51.5, 30.0)
    await alice.report_position(51.6, -0.15)
    await bob.wait_for(lambda f: f.get("type") == "position" and f["lat"] == 51.6)
    cl.net.set_link("A", "C", "connected")
    got = await carol.wait_for(lambda f: f.get("type") == "position")
    assert got["lat"] == 51.6                           # the superseded report never reached C
    units = await (await cl.client("C", "carol")).positions()
    assert [(u["site"], u["unit"], u["lat"]) for u in units] == [("A", "alice", 51.6)]
    for site in ("A", "B", "C"):
        await cl.servers[site].journal.sync()
    recs = {site: [r for p in sorted((cl.mission.site_dir(site) / "journal").glob("*.jsonl"))
                   for r in read_journal(p) if r["kind"] == "position"] for site in ("A", "B", "C")}
    assert [r["lat"] for r in recs["A"]] == [51.5, 51.6] == [r["lat"] for r in recs["B"]]
    assert [r["lat"] for r in recs["C"]] == [51.6]
    assert {(r["origin"], r["unit"], r["alt"] if "alt" in r else None) for r in recs["B"]} == {
        ("A", "alice", 30.0), ("A", "alice", None)}


async def test_an_rcm_reconnection_replays_reports_without_showing_or_journaling_them_twice(cluster_factory):
    cl = await cluster_factory(["A", "B"], users={"A": ["alice"], "B": ["bob"]})
    alice, bob = await cl.client("A", "alice"), await cl.client("B", "bob")
    await bob.positions()
    await alice.report_position(10.0, 20.0, unit="truck-7")
    await bob.wait_for(lambda f: f.get("type") == "position")
    cl.net.drop_clients("B")
    await cl.servers["B"].rcm_connected.wait()
    await alice.report_position(10.5, 20.0, unit="truck-7")
    await bob.wait_for(lambda f: f.get("type") == "position" and f["lat"] == 10.5)
    assert [f for f in bob.drain_events() if f.get("type") == "position"] == []
    await cl.servers["B"].journal.sync()
    recs = [r for p in (cl.mission.site_dir("B") / "journal").glob("*.jsonl") for r in read_journal(p)
            if r["kind"] == "position"]
    assert [r["lat"] for r in recs] == [10.0, 10.5]


async def test_a_user_cannot_report_for_another_user_and_unsubscribed_sessions_hear_nothing(cluster_factory):
    cl = await cluster_factory(["A"], users={"A": ["alice", "bob"]})
    alice, bob = await cl.client("A", "alice"), await cl.client("A", "bob")
    with pytest.raises(ChatError) as e:
        await alice.report_position(1.0, 2.0, unit="bob")
    assert e.value.frame["code"] == "forbidden"
    await alice.report_position(1.0, 2.0, unit="Recon 1")
    await alice.positions()
    await alice.report_position(1.5, 2.0, unit="Recon 1")
    await alice.wait_for(lambda f: f.get("type") == "position" and f["lat"] == 1.5)
    assert [f for f in bob.drain_events() if f.get("type") == "position"] == []
    assert cl.net.published and all(origin == "A" for origin, _, _ in cl.net.published)
