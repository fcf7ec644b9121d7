"""Security labels in the chat core, sans-IO: floors, clearances, what each user sees, and each message's reach.

The mission is ``labeled_mission``'s: A and B SECRET//REL TO GBR, USA; C CONFIDENTIAL//REL TO GBR; P (a
partner) the default label, UNCLASSIFIED. Each test drives site A's (or C's) core over a real database.
"""
from __future__ import annotations

import pytest
from labeled_mission import LabeledSite, labeled_mission

from chat_server.actions import JournalRecord, SendPayload, StoreMessage, ToDirectoryReaders, ToRoom, ToUser
from chat_server.labeling import UNREADABLE, LabelPolicy, json_of_text
from chat_server.payload import ChatMessage, RoomDefinition, RoomFloor, decode_payload, encode_payload
from chat_server.protocol import Refusal
from contracts.labels import UNLABELED

pytestmark = pytest.mark.timeout(30)
SECRET_GU = "SECRET//REL TO GBR, USA"
CONF_G = "CONFIDENTIAL//REL TO GBR"


def msg(room: str, user: str, text: str, label: str = "") -> ChatMessage:
    return ChatMessage(room, user, text, 1.0, "", label=label)


@pytest.fixture
def mission(tmp_path):
    return labeled_mission(tmp_path / "m")


@pytest.fixture
def a(tmp_path, mission):
    site = LabeledSite(tmp_path, mission, "A")
    site.user("alice", SECRET_GU)
    site.user("ann")                        # made before labels: the default label
    site.user("cat", CONF_G)
    return site


def test_reach_is_the_cleared_sites_and_for_a_private_room_those_hosting_a_member(mission):
    a = LabelPolicy.of(mission, "A")
    s = mission.labels.parse
    assert a.reach(s("UNCLASSIFIED")) is None                          # every site: as an unlabeled mission
    assert a.reach(s(CONF_G)) == ("B", "C")
    assert a.reach(s("SECRET//REL TO USA")) == ("B",)
    assert a.reach(s(CONF_G), hosts={"A", "C"}) == ("C",)
    assert LabelPolicy.of(mission, "C").reach(s(CONF_G), hosts={"C"}) == ("C",)   # none other: itself only
    unlabeled = LabelPolicy.unlabeled("A", ["B"])
    assert unlabeled.reach(UNLABELED.default, hosts={"A"}) is None     # nothing changes without [labels]
    assert a.stored("TOP SECRET") is UNREADABLE and not a.holdable(UNREADABLE)
    assert json_of_text(SECRET_GU) == {"level": "SECRET", "caveats": ["GBR", "USA"]}
    assert json_of_text("SECRET") == {"level": "SECRET", "caveats": []}


def test_a_say_must_dominate_the_floor_and_be_dominated_by_the_clearance(a):
    a.join("alice", "town")
    a.join("ann", "town")
    say = a.core.check_message("alice", "town", SECRET_GU)
    assert str(say.label) == SECRET_GU and say.dests == ("B",)
    say = a.core.check_message("alice", "town", {"level": "CONFIDENTIAL", "caveats": ["GBR"]})
    assert say.dests == ("B", "C")
    assert a.core.check_message("ann", "town").dests is None          # the floor, the default: every site
    with pytest.raises(Refusal, match="above your clearance UNCLASSIFIED") as e:
        a.core.check_message("ann", "town", CONF_G)
    assert e.value.code == "forbidden"
    with pytest.raises(Refusal, match="unknown level") as e:
        a.core.check_message("alice", "town", "COSMIC")
    assert e.value.code == "bad_field"
    # A labeled public room: its floor is the least a message there may carry.
    a.deliver("A", 1, RoomFloor("ops", "alice", CONF_G), t=1)
    assert "ops" in a.core.rooms.rooms_of("alice")                    # its creator joined it here
    with pytest.raises(Refusal, match="below room 'ops'.s floor CONFIDENTIAL//REL TO GBR"):
        a.core.check_message("alice", "ops", "UNCLASSIFIED")
    assert str(a.core.check_message("alice", "ops").label) == CONF_G


def test_an_uncleared_user_may_not_join_read_search_or_list_a_labeled_room(a):
    out = a.deliver("A", 1, RoomFloor("ops", "alice", SECRET_GU), t=1)
    assert [type(x).__name__ for x in out][:2] == ["StoreRoomFloor", "StoreMembership"]
    joined = next(x.frame for x in out if isinstance(x, ToUser) and x.frame["type"] == "joined")
    assert joined["label"] == {"level": "SECRET", "caveats": ["GBR", "USA"]}
    for who in ("ann", "cat"):
        with pytest.raises(Refusal, match="labeled SECRET//REL TO GBR, USA; your clearance") as e:
            a.core.join(who, "ops", 0.0)
        assert e.value.code == "forbidden"
        for what in ("history", "search", "mark_read"):      # (the handlers' check, before anything is read)
            with pytest.raises(Refusal, match=f"{what}: room 'ops' is labeled"):
                a.core.rooms.check_access(who, "ops", what)
        assert "ops" in a.core.rooms.hidden_from(who)
        assert [r["room"] for r in a.core.directory(who, "", 50)["rooms"]] == []
        assert a.core.room_list(who, [], "", 50)["rooms"] == []
    pushed = [x for x in a.core.take_directory() if isinstance(x, ToDirectoryReaders)]   # (pushes: cleared only)
    assert [(x.frame["rooms"][0]["room"], str(x.label)) for x in pushed] == [("ops", SECRET_GU)]
    entry = a.core.directory("alice", "", 50)["rooms"][0]
    assert entry["room"] == "ops" and entry["label"]["level"] == "SECRET" and entry["joined"]
    assert a.core.room_list("alice", [], "", 50)["rooms"][0]["label"]["caveats"] == ["GBR", "USA"]
    # A create above the creator's clearance is refused; so is a name taken by a labeled room.
    with pytest.raises(Refusal, match="above your clearance"):
        a.core.check_create("cat", "new", None, 50, 0.0, SECRET_GU)
    with pytest.raises(Refusal, match="already exists"):
        a.core.check_create("alice", "ops", None, 50, 0.0, CONF_G)


def test_a_cleared_and_an_uncleared_user_in_one_room_see_different_messages(a):
    a.join("alice", "town")
    a.join("ann", "town")
    a.deliver("B", 1, msg("town", "bob", "for everyone"), t=1)
    out = a.deliver("B", 2, msg("town", "bob", "secret plan @ann @alice", SECRET_GU), t=2)
    stored = next(x.message for x in out if isinstance(x, StoreMessage))
    assert stored.label == SECRET_GU and stored.mentions == ("alice",)      # ann is not told she was named
    shown = next(x for x in out if isinstance(x, ToRoom))
    assert shown.label is not None and str(shown.label) == SECRET_GU        # fan-out: its readers only
    assert shown.frame["label"] == {"level": "SECRET", "caveats": ["GBR", "USA"]}
    deliver = next(x for x in out if isinstance(x, JournalRecord) and x.kind == "deliver")
    assert deliver.fields["label"] == {"level": "SECRET", "caveats": ["GBR", "USA"]}
    texts = {u: [m["text"] for m in a.core.joined_frame("town", u)["history"]] for u in ("alice", "ann")}
    assert texts == {"alice": ["for everyone", "secret plan @ann @alice"], "ann": ["for everyone"]}
    page = a.core.history.page("town", 10, may_read=a.core.reader("ann"))
    assert [m["text"] for m in page["messages"]] == ["for everyone"]
    with pytest.raises(Refusal, match="no message"):
        a.core.history.page("town", 10, around="B:2", may_read=a.core.reader("ann"))
    assert a.store.unread("ann", ["town"], a.core.reader("ann")) == ({"town": 1}, {})        # counts too
    assert a.store.unread("alice", ["town"], a.core.reader("alice")) == ({"town": 2}, {"town": 1})
    # A clearance raised by an admin applies to the next request.
    a.clearances.set("ann", a.mission.labels.parse(SECRET_GU))
    assert len(a.core.joined_frame("town", "ann")["history"]) == 2


def test_a_message_above_the_sites_clearance_is_dropped_and_journaled_as_control_only(tmp_path, mission):
    c = LabeledSite(tmp_path, mission, "C")
    c.user("carol", CONF_G)
    c.join("carol", "town")
    out = c.deliver("A", 1, msg("town", "alice", "must not land here", SECRET_GU), t=1)
    assert not any(isinstance(x, (StoreMessage, ToRoom)) for x in out)
    assert [r["kind"] for r in c.records()] == ["control"]
    assert not c.store.has_message("A:1")
    # Below the room's floor: dropped at every site alike.
    c.deliver("C", 1, RoomFloor("ops", "carol", CONF_G), t=2)
    c.deliver("A", 2, msg("ops", "alice", "too low"), t=3)
    assert not c.store.has_message("A:2")
    # A labeled room's definition this site may not hold is ignored.
    c.deliver("A", 3, RoomFloor("vault", "alice", SECRET_GU), t=4)
    assert "vault" not in c.core.rooms.floors


def test_private_rooms_record_their_hosting_sites_and_their_content_goes_only_there(a):
    # Rosters tell where names are known: bob at B, pat at P.
    from chat_server.payload import Roster
    a.deliver("B", 1, Roster(5, ("bob",), {}), t=1)
    a.deliver("P", 1, Roster(5, ("pat",), {}), t=2)
    d = a.core.check_create("alice", "cell", ["bob", "carol@C"], 50, 0.0, CONF_G, lambda n: n == "alice")
    assert isinstance(d, RoomDefinition) and d.sites == ("A", "B", "C") and d.label == CONF_G
    assert d.members == ("alice", "bob", "carol")
    assert a.core.definition_dests(a.labels.stored(d.label), d.sites, ("B", "C", "P")) == ("B", "C")
    d2 = a.core.check_create("alice", "cell2", ["bob"], 50, 0.0, SECRET_GU, lambda n: False)
    assert d2.sites == ("A", "B")
    # A name known nowhere: every cleared site. Known only at an uncleared site, or written so: refused.
    assert a.core.check_create("alice", "c3", ["zed"], 50, 0.0, CONF_G).sites == ("A", "B", "C")
    with pytest.raises(Refusal, match="pat is known only at sites not cleared for .* write pat@SITE"):
        a.core.check_create("alice", "c4", ["pat"], 50, 0.0, CONF_G)
    with pytest.raises(Refusal, match="site P is not cleared"):
        a.core.check_create("alice", "c5", ["pat@P"], 50, 0.0, CONF_G)
    with pytest.raises(Refusal, match="names no site"):
        a.core.check_create("alice", "c6", ["pat@Q"], 50, 0.0, CONF_G)
    # Delivered back: the room's label and sites are kept; says go to its cleared hosts only.
    data = decode_payload(encode_payload(d))
    assert data == d
    a.deliver("A", 1, d, t=3)
    assert a.core.rooms.private["cell"].sites == ("A", "B", "C")
    assert a.core.check_message("alice", "cell").dests == ("B", "C")
    assert a.core.check_message("alice", "cell", SECRET_GU).dests == ("B",)
    # Re-sent definitions go only to the sites the room reaches; rosters leave the room out.
    assert [x.dests for x in a.core.definitions_for("P")] == []
    assert [x.dests for x in a.core.definitions_for("C") if isinstance(x, SendPayload)] == [("C",)]
    a.core.rcm_up = True
    a.core.journaled_status = {"B": "connected", "C": "connected", "P": "connected"}
    _, roster = a.core.publish_roster(frozenset({"alice"}))
    assert roster is not None and "cell" not in roster.payload.rooms     # type: ignore[union-attr]


def test_payloads_carry_labels_in_both_layouts():
    m = ChatMessage("town", "alice", "x", 1.0, "", label=SECRET_GU)
    assert decode_payload(encode_payload(m, compact=True)).label == SECRET_GU       # type: ignore[union-attr]
    assert decode_payload(encode_payload(m, compact=False)).label == SECRET_GU      # type: ignore[union-attr]
    f = RoomFloor("ops", "alice", CONF_G, "A:3", (3, "A"))
    assert decode_payload(encode_payload(f)) == f


def test_an_unlabeled_mission_is_unchanged(tmp_path):
    from chat_missions import make_mission
    mission = make_mission(tmp_path / "m", ["A", "B"])
    a = LabeledSite(tmp_path, mission, "A")
    a.user("alice")
    a.join("alice", "town")
    say = a.core.check_message("alice", "town")
    assert say.label is None and say.dests is None
    with pytest.raises(Refusal, match="no labels"):
        a.core.check_message("alice", "town", "SECRET")
    with pytest.raises(Refusal, match="missing field 'members'"):
        a.core.check_create("alice", "ops", None, 50, 0.0)
    out = a.deliver("B", 1, msg("town", "bob", "hi"), t=1)
    shown = next(x for x in out if isinstance(x, ToRoom))
    assert shown.label is None and "label" not in shown.frame
    assert "label" not in a.records()[0] and "label" not in a.core.joined_frame("town", "alice")
    d = a.core.check_create("alice", "cell", ["bob@B"], 50, 0.0)
    assert d.sites == () and d.label == "" and "st" not in str(encode_payload(d))     # type: ignore[union-attr]
