"""Repair in the stack (rcm/repairing.py): a site cut off past the suspect timeout gets what it missed,
late and repaired, at the original order key, exactly once, also across a restart and over relays."""
from __future__ import annotations

from dataclasses import replace

import pytest
from rcm_harness import Net

from contracts.mission import RcmSettings
from rcm import wire
from rcm.actions import Close
from rcm.durability import records

FAST = RcmSettings(heartbeat_timeout=0.5, liveness_timeout=1.5, silence_timeout=3.0, suspect_timeout=5.0,
                   reconnect_period=1.0, ack_interval=0.2, handshake_timeout=2.0, repair_period=2.0)


def isolate(net: Net, site: str, until: float) -> list[str]:
    """Take down every link of ``site`` and run until ``until``; the other sites."""
    others = [s for s in net.site_names if s != site]
    for o in others:
        net.set_link(site, o, "down")
    net.run(until)
    return others


def cut_off(net: Net, site: str, until: float, sends: int, step: float = 0.25) -> list[str]:
    """Cut ``site`` from every other site past the suspect timeout; the others send meanwhile."""
    others = isolate(net, site, net.now + 7.0)  # suspected, then disconnected
    assert all(net.status(site, o) == "disconnected" for o in others)
    sent = []
    for i in range(sends):
        origin = others[i % len(others)]
        sent.append(net.send(origin, f"{origin}-{i}".encode()).msg_id)
        net.run(net.now + step)
    net.run(until)
    return sent


def keys_at(net: Net, site: str) -> dict[str, tuple]:
    return {f"{d.origin}:{d.seq}": d.key for d in net.logs[site].delivered}


@pytest.mark.parametrize("ordering", ["lamport", "sequencer", "hybrid"])
def test_a_site_cut_off_past_the_suspect_timeout_gets_what_it_missed_late_and_repaired(ordering):
    net = Net(["A", "B", "C"], FAST, ordering=ordering)
    net.run(2.0)
    sent = cut_off(net, "C", 20.0, sends=12)
    assert not net.logs["C"].missing                   # told once a path is back
    for o in ("A", "B"):
        net.set_link("C", o, "up")
    net.run(40.0)
    assert sum(m.count for m in net.logs["C"].missing) == len(sent)
    got = [d for d in net.logs["C"].delivered if f"{d.origin}:{d.seq}" in sent]
    assert sorted(f"{d.origin}:{d.seq}" for d in got) == sorted(sent)       # all of them, once each
    assert all(d.late and d.repaired for d in got)
    # At their original order key (as the origin delivered them).
    for d in got:
        assert d.key == keys_at(net, d.origin)[f"{d.origin}:{d.seq}"]
    stats = net.stacks["C"].stats()
    assert stats["repair"]["repaired"] == len(sent) and stats["repair"]["wanted"] == 0
    assert stats["retention"]["messages"] >= len(sent)
    # The others delivered nothing repaired, and nothing twice.
    for s in ("A", "B", "C"):
        ids = [f"{d.origin}:{d.seq}" for d in net.logs[s].delivered]
        assert len(ids) == len(set(ids))
        assert s == "C" or not any(d.repaired for d in net.logs[s].delivered)


def test_a_restart_in_the_middle_of_repair_delivers_nothing_twice():
    settings = replace(FAST, repair_rate=1024)           # slow serving: the restart falls inside it
    net = Net(["A", "B", "C"], settings, durable=True, tls=True)
    net.run(2.0)
    sent = cut_off(net, "C", 20.0, sends=80, step=0.1)
    for o in ("A", "B"):
        net.set_link("C", o, "up")
    for _ in range(400):
        net.run(net.now + 0.05)
        if any(d.repaired for d in net.logs["C"].delivered):
            break
    repaired_before = sum(d.repaired for d in net.logs["C"].delivered)
    assert 0 < repaired_before < len(sent)
    net.crash("C")
    net.run(net.now + 1.0)
    # What the server's log holds: the stack's records, and a Delivered record per delivery
    # (the server numbers and logs each one before a client sees it; rcm.durability.replay).
    log = [p.record for p in net.persisted["C"]]
    log += [records.Delivered(n, d.origin, d.seq, list(d.key), d.late, d.payload, d.precedence, d.repaired)
            for n, d in enumerate(net.logs["C"].delivered, 1)]
    net.restart("C", log)
    net.run(net.now + 40.0)
    ids = [f"{d.origin}:{d.seq}" for d in net.logs["C"].delivered]
    assert len(ids) == len(set(ids))                     # across the restart too
    assert set(sent) <= set(ids)
    assert net.stacks["C"].stats()["repair"]["wanted"] == 0


def test_a_compacted_log_keeps_retained_messages_and_wants():
    net = Net(["A", "B", "C"], FAST, durable=True)
    net.run(2.0)
    cut_off(net, "C", 20.0, sends=6)
    for o in ("A", "B"):
        net.set_link("C", o, "up")
    net.run(20.3)                                        # the notices are in, the repairs not all
    c = net.stacks["C"]
    snap = c.snapshot_records()
    kept = [r for r in snap if isinstance(r, records.Kept)]
    wanted = [r for r in snap if isinstance(r, records.Wanted)]
    assert len(kept) == len(c.retention) and sum(r.seq > 0 for r in kept) == len(kept)
    assert sum(sum(b - a + 1 for a, b in w.ranges) for w in wanted) == c.repair.wanted_count()


def test_a_site_fetches_over_relays_when_its_direct_link_to_the_origin_stays_down():
    net = Net(["A", "B", "C"], FAST)
    net.run(2.0)
    isolate(net, "C", 9.0)
    sent = [net.send("A", f"A-{i}".encode()).msg_id for i in range(5)]
    net.run(12.0)
    net.set_link("C", "B", "up")                         # A-C stays down: A and C meet through B
    net.run(40.0)
    assert net.stacks["C"].vias()["A"] == "B"
    got = [d for d in net.logs["C"].delivered if f"{d.origin}:{d.seq}" in sent]
    assert sorted(f"{d.origin}:{d.seq}" for d in got) == sorted(sent) and all(d.repaired for d in got)


def test_with_repair_off_what_was_missed_stays_missing():
    net = Net(["A", "B", "C"], replace(FAST, repair=False))
    net.run(2.0)
    sent = cut_off(net, "C", 20.0, sends=6)
    for o in ("A", "B"):
        net.set_link("C", o, "up")
    net.run(40.0)
    got = {f"{d.origin}:{d.seq}" for d in net.logs["C"].delivered}
    assert not got & set(sent) and net.stacks["C"].stats()["repair"] is None


def test_a_malformed_repair_frame_closes_only_that_connection():
    net = Net(["A", "B", "C"], FAST)
    net.run(2.0)
    b = net.stacks["B"]
    conn = b.peers["A"].conn
    c = b.conns[conn]
    bad = wire.encode_frame([wire.REPAIR, b.peers["A"].inb.expected % wire.CHECK_MOD, [0, 1, [], b"x"]])
    acts = b.data_received(conn, bad, net.now)
    closes = [a for a in acts if isinstance(a, Close)]
    assert len(closes) == 1 and "REPAIR order key" in closes[0].reason and c.id not in b.conns
    assert b.peers["C"].conn is not None


def test_a_site_with_repair_off_takes_and_ignores_its_peers_repair_frames():
    net = Net(["A", "B", "C"], FAST)
    net.stacks["C"].repairs.repair = None           # as with [rcm] repair = false at C only
    net.run(2.0)
    isolate(net, "C", 9.0)
    mine = [net.send("C", f"C-{i}".encode()).msg_id for i in range(3)]
    net.run(12.0)
    net.set_link("C", "A", "up")
    net.set_link("C", "B", "up")
    net.run(40.0)
    # A and B want C's messages; only C holds them and it does not serve: they stay missing,
    # and every link stays up (no protocol error).
    for s in ("A", "B"):
        assert not {f"{d.origin}:{d.seq}" for d in net.logs[s].delivered} & set(mine)
        assert net.stacks[s].stats()["repair"]["wanted"] == 3
        assert net.status(s, "C") == "connected"
    assert not any("protocol error" in line for s in net.logs for line in net.logs[s].logs)


def test_a_repaired_flash_is_delivered_as_a_flash_also_from_a_compacted_log():
    net = Net(["A", "B", "C"], FAST, durable=True)
    net.run(2.0)
    isolate(net, "C", net.now + 7.0)
    flash = net.send("A", b"medevac", precedence="flash").msg_id
    routine = net.send("B", b"chatter").msg_id
    net.run(net.now + 1.0)
    # B's log compacted with both retained: its Kept records carry the precedence.
    kept = {f"{r.origin}:{r.seq}": r.precedence for r in net.stacks["B"].snapshot_records()
            if isinstance(r, records.Kept)}
    assert kept[flash] == "flash" and kept[routine] == "routine"
    net.set_link("C", "B", "up")                          # C is back through B only (A by relay)
    net.run(net.now + 20.0)
    got = {f"{d.origin}:{d.seq}": d for d in net.logs["C"].delivered}
    assert got[flash].repaired and got[flash].precedence == "flash"
    assert got[routine].repaired and got[routine].precedence == "routine"
