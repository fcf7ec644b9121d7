"""The routing layer alone (rcm/routing/router.py): paths, adverts and timers, no stack, no sockets."""
from __future__ import annotations

from contracts.mission import RcmSettings
from contracts.status import LinkStatus
from rcm import wire
from rcm.routing.linkstate import Advert
from rcm.routing.relay import Direct, Relay
from rcm.routing.router import ADVERT_REFRESH_HEARTBEATS, Neighbour, Router, advert_refresh

SITES = ["A", "B", "C"]
SETTINGS = RcmSettings()


def router(now: float = 0.0) -> Router:
    return Router("A", SITES, ["B", "C"], 1, SETTINGS, None, now)


def frames_of(writes) -> list[list]:
    return [wire.FrameDecoder().feed(w.data)[0] for w in writes]


def triangle(r: Router, cut: bool = False) -> list:
    """A hears B and C; B and C advertise each other (and A unless ``cut``)."""
    r.adopted("B", "b")
    r.adopted("C", "c")
    for origin, ns in (("B", {"A", "C"}), ("C", {"B"} if cut else {"A", "B"})):
        r.advert(Advert(origin, (1, 1), frozenset(ns)), origin.lower(), origin, ["b", "c"], 0.0)
    _, updates = r.update({"B": Neighbour("b", True), "C": Neighbour("c", True)}, ["b", "c"])
    return updates


def test_a_new_neighbour_gets_the_whole_database_and_others_get_our_advert():
    r = router()
    r.adopted("B", "b")
    writes, updates = r.update({"B": Neighbour("b", True), "C": Neighbour(None, False)}, ["b"])
    assert [(w.conn, f[0], f[1]) for w, f in zip(writes, frames_of(writes))] == [("b", wire.LINKS, 0)]
    assert [(u.peer, u.path, u.switched) for u in updates] == [("B", Direct("b"), False), ("C", None, False)]
    assert r.advert_bytes == sum(len(w.data) for w in writes)


def test_a_peer_that_says_it_does_not_hear_us_is_reached_through_the_third_site():
    r = router()
    updates = triangle(r, cut=True)           # C's advert on our link lists only B: it does not hear us
    c = next(u for u in updates if u.peer == "C")
    assert c.path == Relay("B") and c.switched and c.deaf
    assert r.via("C", LinkStatus.CONNECTED) == "B" and r.via("C", LinkStatus.SUSPECTED) is None
    assert r.next_hop("C") == "B"


def test_a_direct_link_that_has_a_relay_behind_it_is_relayed_not_an_outage():
    updates = triangle(router())
    assert all(u.relayed and isinstance(u.path, Direct) for u in updates)


def test_status_reports_only_on_change():
    r = router()
    assert r.report("B", LinkStatus.CONNECTED) is not None
    assert r.report("B", LinkStatus.CONNECTED) is None
    assert r.report("B", LinkStatus.CONNECTED, force=True) is not None


def test_the_refresh_floods_our_advert_on_its_timer():
    r = router()
    r.adopted("B", "b")
    r.update({"B": Neighbour("b", True), "C": Neighbour(None, False)}, ["b"])
    due = ADVERT_REFRESH_HEARTBEATS * SETTINGS.heartbeat_timeout
    assert r.next_deadline() == due
    assert r.tick(["b"], due - 0.01) == []
    writes = r.tick(["b"], due)
    assert [f[1] for f in frames_of(writes)] == [0] and r.next_deadline() == 2 * due


def test_the_refresh_period_grows_with_a_large_mission_so_link_state_bytes_per_site_stay_flat():
    assert advert_refresh(1.0, 4) == advert_refresh(1.0, 8) == ADVERT_REFRESH_HEARTBEATS
    assert advert_refresh(1.0, 64) == 8 * ADVERT_REFRESH_HEARTBEATS
    assert advert_refresh(5.0, 16) == 2 * 5 * ADVERT_REFRESH_HEARTBEATS


def test_an_advert_taken_is_flooded_on_but_not_back():
    r = router()
    r.adopted("B", "b")
    r.adopted("C", "c")
    writes, _ = r.advert(Advert("C", (1, 1), frozenset({"A"})), "c", "C", ["b", "c"], 0.0)
    assert [w.conn for w in writes] == ["b"] and r.dirty
    writes, _ = r.advert(Advert("C", (1, 1), frozenset({"A"})), "b", "B", ["b", "c"], 0.0)
    assert writes == []                       # the same version again: nothing new
