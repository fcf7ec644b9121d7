"""Link-state and routes (rcm/linkstate.py), pure."""
from __future__ import annotations

import pytest

from rcm import wire
from rcm.actions import ProtocolViolation
from rcm.routing.linkstate import Advert, LinkState, Route

SITES = ["A", "B", "C", "D", "E"]


def ls(max_hops: int = 3) -> LinkState:
    s = LinkState("A", SITES, boot=1, max_hops=max_hops)
    return s


def ad(origin: str, n: int, *neighbours: str, boot: int = 1) -> Advert:
    return Advert(origin, (boot, n), frozenset(neighbours))


def test_fewest_hops_and_ties_broken_by_name():
    s = ls()
    for a in (ad("B", 1, "A", "C", "D"), ad("C", 1, "A", "B", "D"), ad("D", 1, "B", "C", "E"), ad("E", 1, "D")):
        assert s.take(a)
    routes = s.routes({"B", "C"})
    assert routes["B"] == Route("B", 1) and routes["C"] == Route("C", 1)
    assert routes["D"] == Route("B", 2)          # via B or C: the smaller name
    assert routes["E"] == Route("B", 3)
    assert "E" not in ls(max_hops=2).routes({"B"})


def test_a_route_names_its_slowest_paced_link_after_the_first_hop():
    # A-B paced (A's first hop: its own pacer's business), B-D at 56k, D-E at 9.6k, C-D unpaced.
    s = LinkState("A", SITES, boot=1, max_hops=3,
                  rates={"A": {"B": 1_000}, "B": {"D": 56_000}, "D": {"E": 9_600, "B": 1}})
    for a in (ad("B", 1, "A", "D"), ad("C", 1, "A", "D"), ad("D", 1, "B", "C", "E"), ad("E", 1, "D")):
        s.take(a)
    routes = s.routes({"B", "C"})
    assert routes["B"] == Route("B", 1, None) and routes["C"] == Route("C", 1, None)
    assert routes["D"] == Route("B", 2, 56_000)          # B's rate to D (D's to B is the other way)
    assert routes["E"] == Route("B", 3, 9_600)           # the slower of B-D and D-E
    assert LinkState("A", SITES, boot=1, max_hops=3).routes({"B"}) == {"B": Route("B", 1)}


def test_a_link_counts_only_when_both_ends_advertise_it():
    s = ls()
    s.take(ad("B", 1, "A", "C"))
    s.take(ad("C", 1, "D"))                      # C does not hear B: B-C is one-way
    assert "C" not in s.routes({"B"})
    s.take(ad("C", 2, "B", "D"))
    assert s.routes({"B"})["C"] == Route("B", 2)


def test_newer_versions_win_across_restarts():
    s = ls()
    assert s.take(ad("B", 5, "A", "C"))
    assert not s.take(ad("B", 4, "A"))            # older
    assert s.take(ad("B", 1, "A", boot=2))        # restarted: a newer boot wins whatever n
    assert s.db["B"].neighbours == {"A"}


def test_own_advert_moves_on_only_when_links_change_or_refresh():
    s = ls()
    first = s.set_own({"B"})
    assert first is not None and first.version == (1, 1)
    assert s.set_own({"B"}) is None
    assert s.set_own({"B"}, refresh=True).version == (1, 2)
    assert s.set_own({"B", "C"}).version == (1, 3)


def test_routes_go_beyond_a_neighbour_only_once_its_advert_came_on_our_connection():
    s = ls()
    s.take(ad("B", 1, "A", "C"))
    s.take(ad("C", 1, "A", "B", "D"))
    s.take(ad("D", 1, "C"))
    # B just reconnected (maybe restarted): its advert in the database may be old.
    routes = s.routes({"B", "C"}, fresh={"C"})
    assert routes["B"] == Route("B", 1) and routes["D"] == Route("C", 2)
    assert s.routes({"B"}, fresh=set()) == {"B": Route("B", 1)}


def test_stale_adverts_do_not_make_a_dead_site_reachable():
    """D crashed while A's news could not reach us: both their adverts still claim A-D."""
    s = LinkState("E", SITES, boot=1, max_hops=3)
    s.take(ad("B", 1, "E", "C"))
    s.take(ad("C", 1, "B", "D"))
    s.take(ad("D", 1, "C"))
    s.unreachable({"B", "C", "D"})                # reached ...
    s.unreachable({"B"})                          # ... then C and D cut off from us for a while: stale
    assert {a.origin for a in s.adverts()} == {"E", "B"}   # only what we vouch for is handed on
    # C may end a path (B, whose advert we trust, hears it), but its claims lead nowhere.
    assert s.routes({"B"})["C"] == Route("B", 2) and "D" not in s.routes({"B"})
    assert s.take(ad("C", 1, "B", "D"))           # the same advert, from a site that reaches C: confirmed
    assert s.routes({"B"})["D"] == Route("B", 3)


def test_links_frames_round_trip_and_bad_ones_are_violations():
    s = ls()
    a = ad("C", 7, "A", "E")
    assert s.decode(s.encode(a), 0.0) == a
    assert s.encode(a)[0] == wire.LINKS
    bads = ([wire.LINKS, 9, 1, 1, []], [wire.LINKS, 0, 1, 1, [7]], [wire.LINKS, 0, 1, 1], [wire.LINKS, 0, -1, 1, []],
            [wire.LINKS, 0, 1, 1, [0] * 6])
    for bad in bads:
        with pytest.raises(ProtocolViolation):
            s.decode(bad, 0.0)


@pytest.mark.parametrize("boot, n", [(2**64 - 1, 2**64 - 1), (1, 2**53), (2**43 + 1, 0), (1, 2**43 + 1)])
def test_a_version_beyond_the_honest_ceiling_is_a_violation(boot, n):
    """(2^64-1, 2^64-1) once went into the database and was flooded everywhere."""
    with pytest.raises(ProtocolViolation, match="beyond what any honest site"):
        ls().decode([wire.LINKS, 2, boot, n, [0]], 1.0)


def test_only_the_origin_raises_its_own_version():
    """An advert "from A" with a version A never said used to make A go past it: A then encoded
    versions msgpack could not hold, and every advert it sent failed. Now it is refused and counted."""
    s = ls()
    own = s.set_own({"B"})
    assert own is not None and own.version == (1, 1)
    assert not s.take(ad("A", 2**40, "C", boot=2**40))
    assert s.own.version == (1, 1) and s.forged_own == 1
    assert s.set_own({"B", "C"}).version == (1, 2)
    assert wire.encode_frame(s.encode(s.own))


def test_a_forged_version_ages_out_and_the_origin_is_heard_again():
    """Others cannot tell a forged advert of C from C's own: it wins while renewed, and ages out after ttl
    once the forger stops; C's next refresh is taken again."""
    s = LinkState("A", SITES, boot=1, max_hops=3, ttl=120.0)
    assert s.take(ad("C", 5, "A", "B"), now=0.0)
    assert s.take(ad("C", 2**40, boot=2**40), now=10.0)        # forged: C has no links
    assert not s.take(ad("C", 6, "A", "B"), now=30.0)            # C's refresh: lower than the forgery
    assert s.lists("C", "B") is False
    assert s.next_deadline() == 130.0
    assert s.expire(129.9) is False and s.expire(130.0) is True
    assert s.lists("C", "B") is None and s.expired == 1
    assert s.take(ad("C", 7, "A", "B"), now=60.0 + 90.0)          # C's next refresh is heard
    assert s.lists("C", "B") is True


def test_floods_of_one_origin_are_paced_and_the_newest_goes_when_its_turn_comes():
    s = LinkState("A", SITES, boot=1, max_hops=3, pace=0.5)
    flooded = []
    for i in range(1, 101):                                       # 100 adverts of B in a tenth of a second
        t = i * 0.001
        assert s.take(ad("B", i, "A"), now=t)
        got = s.release("B", t)
        if got is not None:
            flooded.append(got.version)
    assert flooded == [(1, 1)] and s.deferred == 1
    assert s.due(0.4) == [] and s.next_deadline() == pytest.approx(0.501)
    assert [a.version for a in s.due(0.501)] == [(1, 100)]        # only the newest, once
    assert s.due(2.0) == []
