"""Labels through running chat servers on a fake RCM (in-process): welcome fields, forbidden says, per-user fan-out,
need-to-know destinations, the journal's labels and clearance record.

Three sites of ``labeled_mission``: A (SECRET//REL TO GBR, USA), C (CONFIDENTIAL//REL TO GBR), P (UNCLASSIFIED).
"""
from __future__ import annotations

import pytest
from chat_cluster import Cluster
from chat_fake_rcm import FakeNetwork
from chat_missions import add_users
from labeled_mission import labeled_mission, set_clearance

from chat_server.client import ChatError
from chat_server.journal import journal_files, read_journal
from chat_server.payload import decode_payload

pytestmark = pytest.mark.timeout(60)
SECRET_GU = "SECRET//REL TO GBR, USA"
CONF_G = "CONFIDENTIAL//REL TO GBR"
CLEARANCES = {"A": {"level": "SECRET", "caveats": ["GBR", "USA"]}, "C": {"level": "CONFIDENTIAL", "caveats": ["GBR"]},
              "P": None}


def journal(cl: Cluster, site: str) -> list[dict]:
    return [r for f in journal_files(cl.mission.site_dir(site) / "journal") for r in read_journal(f)]


async def test_labeled_messages_reach_only_cleared_sites_and_users(tmp_path):
    mission = labeled_mission(tmp_path, CLEARANCES)
    add_users(mission, "A", ["alice", "ann"])
    add_users(mission, "C", ["carol"])
    add_users(mission, "P", ["pat"])
    set_clearance(mission, "A", "alice", SECRET_GU)
    net = FakeNetwork(list(CLEARANCES))
    cl = Cluster(mission, net)
    try:
        for site in CLEARANCES:
            await cl.start(site)
        alice, ann = await cl.client("A", "alice"), await cl.client("A", "ann")
        carol, pat = await cl.client("C", "carol"), await cl.client("P", "pat")
        assert alice.welcome["clearance"] == {"level": "SECRET", "caveats": ["GBR", "USA"]}
        assert ann.welcome["clearance"] == {"level": "UNCLASSIFIED", "caveats": []}
        assert alice.welcome["labels"] == {"levels": ["UNCLASSIFIED", "CONFIDENTIAL", "SECRET"],
                                           "caveats": ["GBR", "USA"],
                                           "default": {"level": "UNCLASSIFIED", "caveats": []}}
        for c in (alice, ann, carol, pat):
            joined = await c.join("town")
            assert joined["label"] == {"level": "UNCLASSIFIED", "caveats": []}
        with pytest.raises(ChatError) as e:
            await ann.say("town", "above me", label=CONF_G)
        assert e.value.code == "forbidden" and "above your clearance UNCLASSIFIED" in str(e.value)
        await alice.say("town", "for all", label="UNCLASSIFIED")
        await alice.say("town", "for A and C", label={"level": "CONFIDENTIAL", "caveats": ["GBR"]})
        await alice.say("town", "for A only", label=SECRET_GU)
        await alice.say("town", "last")
        got = await alice.wait_for(lambda f: f.get("type") == "message" and f["text"] == "last")
        assert got["label"] == {"level": "UNCLASSIFIED", "caveats": []}
        # RCM was asked to carry each message only to the sites cleared for it.
        dests = [(decode_payload(p).text, d) for o, p, d in net.sent_payloads          # type: ignore[union-attr]
                 if o == "A" and type(decode_payload(p)).__name__ == "ChatMessage"]
        assert dests == [("for all", None), ("for A and C", ("C",)), ("for A only", ("A",)), ("last", None)]
        # Fan-out and history: each user reads what its clearance dominates.
        await ann.wait_for(lambda f: f.get("type") == "message" and f["text"] == "last")
        live_ann = [f["text"] for f in ann.drain_events() if f.get("type") == "message"]
        assert "for all" in live_ann and "for A and C" not in live_ann and "for A only" not in live_ann
        shown_ann = [m["text"] for m in (await ann.history("town"))["messages"]]
        assert shown_ann == ["for all", "last"]
        await carol.wait_for(lambda f: f.get("type") == "message" and f["text"] == "last")
        assert [m["text"] for m in (await carol.history("town"))["messages"]] == ["for all", "last"]
        set_clearance(mission, "C", "carol", CONF_G)            # an admin raises it: the next request sees it
        assert [m["text"] for m in (await carol.history("town"))["messages"]] == ["for all", "for A and C", "last"]
        await pat.wait_for(lambda f: f.get("type") == "message" and f["text"] == "last")
        # P never held them: not in its database, not in its journal.
        texts_p = [r.get("text") for r in journal(cl, "P")]
        assert "for A and C" not in texts_p and "for A only" not in texts_p and "last" in texts_p
        records = journal(cl, "A")
        assert records[0]["kind"] == "clearance" and records[0]["clearance"] == CLEARANCES["A"]
        assert [r["clearance"] for r in journal(cl, "P") if r["kind"] == "clearance"] == [
            {"level": "UNCLASSIFIED", "caveats": []}]
        sends = {r["text"]: r["label"] for r in records if r["kind"] == "send"}
        assert sends["for A only"] == {"level": "SECRET", "caveats": ["GBR", "USA"]}
        delivers = {r["text"]: r["label"] for r in journal(cl, "C") if r["kind"] == "deliver"}
        assert delivers == {"for all": {"level": "UNCLASSIFIED", "caveats": []},
                            "for A and C": {"level": "CONFIDENTIAL", "caveats": ["GBR"]},
                            "last": {"level": "UNCLASSIFIED", "caveats": []}}
        # Search finds only what the searcher may read.
        found = await ann.request({"type": "search", "query": "for"})
        assert [m["text"] for m in found["messages"]] == ["for all"]
        found = await alice.request({"type": "search", "query": "for"})
        assert sorted(m["text"] for m in found["messages"]) == ["for A and C", "for A only", "for all"]
        # An acknowledgement goes where its message went, no wider.
        ack = await alice.request({"type": "say", "room": "town", "text": "urgent", "client_id": "u1",
                                   "precedence": "immediate", "label": CONF_G})
        await alice.wait_for(lambda f: f.get("type") == "message" and f["text"] == "urgent")
        await alice.request({"type": "acknowledge", "msg_id": ack["msg_id"]})
        kinds = [(type(decode_payload(p)).__name__, d) for o, p, d in net.sent_payloads if o == "A"]
        assert kinds[-1] == ("Acknowledgement", ("C",))
        with pytest.raises(ChatError) as e:
            await ann.request({"type": "acknowledge", "msg_id": ack["msg_id"]})
        assert e.value.code == "bad_field" and "no message" in str(e.value)     # as one that is not here
        # A labeled public room: created, listed with its label, closed to the uncleared.
        created = await alice.create("ops", None, label=CONF_G)
        assert created["label"] == {"level": "CONFIDENTIAL", "caveats": ["GBR"]} and created["members"] == []
        await alice.wait_for(lambda f: f.get("type") == "joined" and f["room"] == "ops")
        with pytest.raises(ChatError) as e:
            await ann.join("ops")
        assert e.value.code == "forbidden"
        assert [r["room"] for r in await ann.rooms()] == ["town"]
        assert {r["room"]: r["label"]["level"] for r in await alice.rooms()} == {"ops": "CONFIDENTIAL",
                                                                               "town": "UNCLASSIFIED"}
        # How far RCM may carry each (its confinement): labeled content only among its destinations, a
        # labeled room's definition among the sites cleared for it, control data anywhere (so that a roster
        # owed to one peer never waits for the direct link).
        within = {(type(decode_payload(p)).__name__, getattr(decode_payload(p), "text", None)): w
                  for o, p, d, w in net.withins if o == "A" and d is not None}
        assert within[("ChatMessage", "for A and C")] is True and within[("Acknowledgement", None)] is True
        assert within[("RoomFloor", None)] == ("C",)      # CONFIDENTIAL//REL TO GBR: C alone, as "for A and C"
        assert all(w is False for (kind, _), w in within.items() if kind.startswith(("Roster", "Receipt")))
    finally:
        await cl.close()
