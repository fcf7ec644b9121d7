"""Another site's claim that a room is private (a roster's entry, a held message's tag) closes the room only
while its definition is fetched: bounded in time and in count (chat_server/rooms.py, "claims")."""
from __future__ import annotations

import pytest
from test_chat_core import Site, msg
from testkit import wait_until

from chat_server.actions import JournalRecord, SendPayload
from chat_server.client import ChatError
from chat_server.payload import MAX_INT, DefinitionRequest, RoomDefinition, Roster, encode_payload
from chat_server.protocol import Refusal
from chat_server.rooms import CLAIM_TIMEOUT, CLAIMS_PER_SITE

pytestmark = pytest.mark.timeout(60)


def closed(a: Site, user: str, room: str) -> bool:
    try:
        a.core.rooms.check_access(user, room, "join")
    except Refusal as e:
        assert e.code == "forbidden"
        return True
    return False


def test_a_rosters_claim_with_a_definition_that_never_comes_closes_the_room_only_for_a_while(tmp_path):
    a = Site(tmp_path)
    a.step(a.core.rcm_connected({"B": "connected", "C": "connected"}))
    a.step(a.core.join("alice", "ops", 0.0)[0])                            # a public room in use here
    out = a.deliver("B", 1, Roster(3, ("bob",), {"ops": ("bob",)}, {"ops": "B:999"}), t=4, now=100.0)
    assert SendPayload(DefinitionRequest("ops"), ("B",)) in out            # fetched from the claimer
    assert closed(a, "alice", "ops") and closed(a, "carol", "ops")
    assert a.core.expire_claims(100.0 + CLAIM_TIMEOUT - 1) == []
    assert closed(a, "alice", "ops")
    [(room, claim)] = a.core.expire_claims(100.0 + CLAIM_TIMEOUT)
    assert (room, claim.site, claim.def_id) == ("ops", "B", "B:999")
    # The definition never came: the room is public again for everyone here, as at the sites that never
    # heard the claim.
    assert not closed(a, "alice", "ops") and not closed(a, "carol", "ops")
    assert a.core.check_say("alice", "ops") is None
    assert "ops" in [r["room"] for r in a.core.room_list("carol", [], "", 10)["rooms"]]
    assert "ops" not in a.core.rooms.hidden_from("carol")
    # The same claimer saying it again, under any definition id, closes nothing and asks nothing.
    out = a.deliver("B", 2, Roster(4, ("bob",), {"ops": ("bob",)}, {"ops": "B:999"}), t=5, now=200.0)
    out += a.deliver("B", 3, Roster(5, ("bob",), {"ops": ("bob",)}, {"ops": "B:1000"}), t=6, now=300.0)
    assert not closed(a, "alice", "ops")
    assert not [x for x in out if isinstance(x, SendPayload)]
    # A real definition still makes it private, whoever sends it and whenever.
    a.deliver("C", 1, RoomDefinition("ops", "carol", ("carol",)), t=7, now=400.0)
    assert closed(a, "alice", "ops") and not closed(a, "carol", "ops")


def test_a_definition_that_arrives_in_time_ends_the_claim(tmp_path):
    a = Site(tmp_path)
    a.deliver("B", 1, Roster(3, ("bob",), {"cell": ("bob",)}, {"cell": "B:7"}), t=4, now=100.0)
    assert closed(a, "alice", "cell")
    a.deliver("B", 7, RoomDefinition("cell", "bob", ("bob", "alice")), t=2, now=101.0)
    assert a.core.rooms.pending == {} and a.core.rooms.claims_of == {}
    assert not closed(a, "alice", "cell") and closed(a, "eve", "cell")
    assert a.core.expire_claims(1e9) == [] and closed(a, "eve", "cell")    # nothing left to expire


def test_one_sites_claims_close_a_bounded_number_of_rooms(tmp_path):
    a = Site(tmp_path)
    names = [f"r{i}" for i in range(CLAIMS_PER_SITE + 5)]
    a.deliver("B", 1, Roster(3, (), {}, {r: f"B:{i + 100}" for i, r in enumerate(names)}), t=4, now=0.0)
    assert len(a.core.rooms.pending) == CLAIMS_PER_SITE
    assert sum(closed(a, "alice", r) for r in names) == CLAIMS_PER_SITE
    a.deliver("C", 1, Roster(3, (), {}, {"other": "C:9"}), t=5, now=0.0)      # another claimer has its own
    assert closed(a, "alice", "other")
    a.core.expire_claims(CLAIM_TIMEOUT)
    assert a.core.rooms.pending == {} and a.core.rooms.claims_of == {}
    assert not any(closed(a, "alice", r) for r in names + ["other"])


def test_a_held_messages_tag_closes_the_room_for_a_while_and_the_message_stays_held(tmp_path):
    a = Site(tmp_path)
    a.step(a.core.join("alice", "ops", 0.0)[0])
    tag = dict(definition="B:50", definition_order=(3, "B"))
    out = a.deliver("B", 1, msg("ops", "bob", "classified", **tag), t=10, now=100.0)
    assert SendPayload(DefinitionRequest("ops"), ("B",)) in out and len(a.store.held()) == 1
    assert closed(a, "alice", "ops")
    a.core.expire_claims(100.0 + CLAIM_TIMEOUT)
    assert not closed(a, "alice", "ops")
    # Open again, but what was held is never shown without its definition, nor what comes tagged later.
    a.deliver("B", 2, msg("ops", "bob", "more", **tag), t=11, now=100.0 + CLAIM_TIMEOUT + 1)
    assert not closed(a, "alice", "ops") and len(a.store.held()) == 2
    assert a.store.history("ops", 10)[0] == []
    assert not [r for r in a.records() if r["kind"] == "deliver"]
    # When the definition comes after all, the room is private and its members get the held messages.
    out = a.deliver("B", 50, RoomDefinition("ops", "bob", ("bob", "carol")), t=3, now=1000.0)
    shown = [x.fields["text"] for x in out if isinstance(x, JournalRecord) and x.kind == "deliver"]
    assert shown == ["classified", "more"] and closed(a, "alice", "ops") and not closed(a, "carol", "ops")


async def test_a_public_room_claimed_private_by_a_roster_opens_again_at_the_other_sites(cluster_factory):
    now = [1_800_000_000.0]
    cl = await cluster_factory(["A", "B"], users={"A": ["alice"], "B": ["bob"]}, clock=lambda: now[0])
    alice, bob = await cl.client("A", "alice"), await cl.client("B", "bob")
    await alice.join("ops")
    await bob.join("ops")
    # B's roster says "ops" is private under a definition that exists nowhere (a bug, or forged).
    cl.net.inject("A", "B", encode_payload(Roster(MAX_INT, ("bob",), {"ops": ("bob",)}, {"ops": "B:424242"})),
                  [10**6, "B"])
    await wait_until(lambda: "ops" in cl.servers["A"].core.rooms.pending, "the claim applied at A")
    with pytest.raises(ChatError) as e:
        await alice.say("ops", "locked out?")
    assert e.value.code == "forbidden"
    now[0] += CLAIM_TIMEOUT
    await cl.settle()                         # the edge's timer ends the claim
    await alice.say("ops", "open again")
    await bob.wait_for(lambda f: f["type"] == "message" and f["text"] == "open again", 5)
