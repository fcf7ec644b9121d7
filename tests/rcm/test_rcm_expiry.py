"""Message expiry (rcm/wire/envelope.py, docs/rcm.md "Expiry"): a message written after its expires_at goes as a
stub (same header marked, no payload), delivered expired at its order key; never its content."""
from __future__ import annotations

import math
from dataclasses import replace

import pytest
from rcm_harness import Net

from contracts.mission import RcmSettings
from rcm import wire
from rcm.actions import Delivery, ProtocolViolation, SendRefused
from rcm.channels import lanes
from rcm.channels.forwarding import _stub
from rcm.durability import records
from rcm.durability.replay import DeliveryLog
from rcm.routing import relay
from rcm.routing.linkstate import LinkState
from rcm.stack import frames
from rcm.wire import envelope
from rcm.wire import local as cw

FAST = RcmSettings(heartbeat_timeout=0.5, liveness_timeout=1.5, silence_timeout=3.0, suspect_timeout=5.0,
                   reconnect_period=1.0, ack_interval=0.2, handshake_timeout=2.0, repair_period=2.0)
SECRET = b"SECRET-CONTENT-" * 4


def received_bytes(net: Net, site: str) -> list[bytes]:
    """Every byte string ``site`` receives from now on (to show content never reached it)."""
    got: list[bytes] = []
    recv = net._recv

    def spy(s, cid, data):
        if s == site:
            got.append(data)
        recv(s, cid, data)

    net._recv = spy
    return got


def delivery(net: Net, site: str, msg_id: str) -> Delivery:
    (d,) = [d for d in net.logs[site].delivered if f"{d.origin}:{d.seq}" == msg_id]
    return d


def keys(net: Net, site: str) -> list[tuple]:
    return [d.key for d in net.logs[site].delivered]


# -- the wrapper -----------------------------------------------------------------------------------
def test_the_header_wrapper_carries_expiry_and_stub_mark_and_old_headers_still_read():
    assert envelope.wrap(7) == 7 and envelope.open_(7) == envelope.Envelope(7)
    assert envelope.open_({"p": 0, "h": [1, "A"]}) == envelope.Envelope([1, "A"], "flash")    # version 10's
    w = envelope.wrap([3, "A"], "routine", 1700000000.0)
    assert w == {"x": 1700000000, "h": [3, "A"]}         # integral: an int on the wire (five bytes)
    env = envelope.open_(w)
    assert (env.header, env.precedence, env.expires_at, env.expired) == ([3, "A"], "routine", 1.7e9, False)
    s = envelope.open_(envelope.stub(envelope.wrap(5, "flash", 12.5)))
    assert (s.header, s.precedence, s.expires_at, s.expired) == (5, "flash", 12.5, True)
    assert envelope.expiring(w, 1.7e9) and not envelope.expiring(w, 1.7e9 - 1)
    assert not envelope.expiring(envelope.stub(w), 2e9)         # a stub is one already
    assert lanes.unwrap(w) == ([3, "A"], "routine")
    for bad in ({"x": math.nan, "h": 1}, {"x": math.inf, "h": 1}, {"x": -1.0, "h": 1}, {"x": 2.0 ** 40, "h": 1},
                {"x": "soon", "h": 1}, {"e": 1, "h": 1}, {"x": 1.0, "e": 0, "h": 1}, {"x": 1.0, "e": True, "h": 1},
                {"h": 1}, {"x": 1.0}):
        with pytest.raises(envelope.EnvelopeError):
            envelope.open_(bad)


def decoder() -> frames.FrameDecoder:
    return frames.FrameDecoder("A", ["A", "B", "C"], LinkState("A", ["A", "B", "C"], 1, 3), 1024, True)


def test_a_hostile_expiry_or_a_stub_with_payload_is_the_peers_protocol_violation():
    d = decoder()
    ok = d.decode([wire.DATA, 0, 1, {"x": 5.0, "e": 1, "h": 7}, b""], 1.0)
    assert isinstance(ok, frames.Data) and ok.message.expired and ok.message.payload == b""
    for header, payload in [({"x": 5.0, "e": 1, "h": 7}, b"content"), ({"x": math.nan, "h": 7}, b"x"),
                            ({"x": 1e300, "h": 7}, b"x"), ({"x": [1], "h": 7}, b"x")]:
        with pytest.raises(ProtocolViolation):
            d.decode([wire.DATA, 0, 1, header, payload], 1.0)
        with pytest.raises(ProtocolViolation):          # relayed to us too
            d.decode(relay.encode(relay.Routed(1, "B", 0, (("A", 1),), wire.DATA, (1, header, payload)),
                                  {"A": 0, "B": 1, "C": 2}), 1.0)
    with pytest.raises(ProtocolViolation):
        d.decode([wire.REPAIR, 0, [1, 2, [3, "B"], b"p", 3, 5.0, 1]], 1.0)


def test_a_send_already_expired_or_not_finite_is_refused():
    net = Net(["A", "B"], FAST)
    net.run(2.0)
    for bad in (net.now, net.now - 1, math.nan, math.inf):
        with pytest.raises(SendRefused):
            net.send("A", b"x", expires_at=bad)
    assert net.stacks["A"].msg_seq == 0


# -- what crosses a link --------------------------------------------------------------------------
def test_an_unexpired_message_is_untouched_and_carries_its_expiry():
    net = Net(["A", "B"], FAST)
    net.run(2.0)
    mid = net.send("A", b"hello", expires_at=net.now + 60).msg_id
    net.run(4.0)
    for site in ("A", "B"):
        d = delivery(net, site, mid)
        assert (d.payload, d.expired, d.expires_at) == (b"hello", False, 2.0 + 60)


def test_a_message_expiring_while_its_paced_link_is_busy_goes_as_a_stub_at_its_order_key():
    net = Net(["A", "B"], FAST, rates={"A": {"B": 2400}, "B": {"A": 2400}})
    net.run(2.0)
    spy = received_bytes(net, "B")
    before = [net.send("A", b"backlog-%d" % i + b"." * 200).msg_id for i in range(8)]   # ~7 s of link
    stub = net.send("A", SECRET, expires_at=net.now + 2.0).msg_id
    after = net.send("A", b"after").msg_id
    net.run(30.0)
    d = delivery(net, "B", stub)
    assert d.expired and d.payload == b"" and d.expires_at == pytest.approx(4.0)
    assert not any(SECRET in b for b in spy)
    assert net.stacks["A"].peers["B"].out.stats.stubbed == 1
    # The global order is unchanged: the same messages at the same keys at both sites, the stub among them.
    assert keys(net, "A") == keys(net, "B") == sorted(keys(net, "B"))
    assert [f"{x.origin}:{x.seq}" for x in net.logs["B"].delivered] == [*before, stub, after]
    assert delivery(net, "A", stub).expired          # the origin's own copy too: it was delivered after it


def test_a_message_expiring_while_the_link_is_down_is_resent_as_a_stub_after_the_reconnection():
    net = Net(["A", "B"], FAST)
    net.run(2.0)
    net.set_link("A", "B", "down")
    net.run(2.5)
    spy = received_bytes(net, "B")
    mid = net.send("A", SECRET, expires_at=net.now + 1.0).msg_id
    net.run(4.0)                              # expired: still suspected (not past suspect_timeout)
    assert net.status("A", "B") == "suspected"
    net.set_link("A", "B", "up")
    net.run(12.0)
    d = delivery(net, "B", mid)
    assert d.expired and d.payload == b"" and not d.repaired
    assert not any(SECRET in b for b in spy)
    assert not net.logs["B"].missing


def test_a_disconnected_site_learns_of_an_expired_message_through_missed_and_repair_as_a_stub():
    net = Net(["A", "B", "C"], FAST)
    net.run(2.0)
    for o in ("A", "B"):
        net.set_link("C", o, "down")
    net.run(10.0)
    assert net.status("A", "C") == "disconnected"
    mid = net.send("A", SECRET, expires_at=net.now + 3.0).msg_id
    live = net.send("B", b"still-live", expires_at=net.now + 600.0).msg_id
    net.run(20.0)                             # expired at A and B (each held it, with its payload, until then)
    assert net.stacks["B"].retention.get("A", 1).expired           # the holder dropped the payload
    spy = received_bytes(net, "C")
    for o in ("A", "B"):
        net.set_link("C", o, "up")
    net.run(40.0)
    d = delivery(net, "C", mid)
    assert d.expired and d.repaired and d.late and d.payload == b""
    assert d.key == delivery(net, "A", mid).key
    assert delivery(net, "C", live).payload == b"still-live"      # an unexpired one is repaired whole
    assert not any(SECRET in b for b in spy)


def test_a_relayed_message_that_expired_on_its_way_goes_on_from_the_relay_as_a_stub():
    net = Net(["A", "B", "C"], FAST)
    net.set_link("A", "C", "down")            # A reaches C through B
    net.run(6.0)
    assert net.stacks["A"].vias()["C"] == "B"
    spy = received_bytes(net, "C")
    net.set_link("A", "B", "blackhole")       # the copy waits on the A-B link past its expiry
    mid = net.send("A", SECRET, dests=["C"], within=False, expires_at=net.now + 0.2).msg_id
    net.run(net.now + 0.5)
    net.set_link("A", "B", "up")
    net.run(20.0)
    d = delivery(net, "C", mid)
    assert d.expired and d.payload == b""
    assert not any(SECRET in b for b in spy)
    assert net.stacks["B"].channels.forwarding.stubbed >= 1


def test_a_relayed_frame_expiring_in_the_relays_queue_is_written_as_its_stub():
    r = relay.Routed(2, "A", 1, (("C", 4),), wire.DATA, (4, envelope.wrap(7, "routine", 10.0), SECRET))
    index = {"A": 0, "B": 1, "C": 2}
    q = lanes.ForwardQueue()
    stub = wire.encode_frame(relay.encode(_stub(r), index))
    data = wire.encode_frame(relay.encode(r, index))
    assert q.push("A", lanes.ORDERED_LANE, data, 1, (10.0, lambda: stub))
    assert q.push("A", lanes.ORDERED_LANE, data, 1, (10.0, lambda: stub))
    assert q.pop(now=9.9) == (data, 1)                 # not yet
    assert q.pop(now=10.0) == (stub, 1) and SECRET not in stub and q.bytes == 0
    f = decoder().decode(wire.FrameDecoder().feed(stub)[0], 11.0)
    assert f.frame.body[2] == b"" and envelope.open_(f.frame.body[1]).expired


def test_a_paced_frame_expiring_between_its_fragments_goes_whole_as_its_stub():
    net = Net(["A", "B"], FAST, rates={"A": {"B": 9600}, "B": {"A": 9600}})
    net.run(2.0)
    spy = received_bytes(net, "B")
    big = SECRET * 40                         # ~2.4 KB: cut into pieces of 300 bytes
    mid = net.send("A", big, expires_at=net.now + 0.6).msg_id
    net.run(12.0)
    d = delivery(net, "B", mid)
    assert d.expired and d.payload == b""
    assert not any(big[:600] in b for b in spy)
    assert net.stacks["A"].peers["B"].fragments_out >= 1      # some pieces went before it expired


# -- durability and the local replay --------------------------------------------------------------
def test_logs_replay_the_expiry_and_old_records_still_read():
    old = records.decode(["D", 1, "A", 1, [1, "A"], False, b"x"])
    assert isinstance(old, records.Delivered) and old.expires_at is None and not old.expired
    for r in (records.Delivered(2, "A", 2, [2, "A"], False, b"", "flash", True, 9.5, True),
              records.Delivered(3, "A", 3, [3, "A"], True, b"y", "routine", False, 9.5),
              records.Kept("A", 2, [2, "A"], 1.0, b"", "routine", 9.5, True),
              records.Kept("A", 3, [3, "A"], 1.0, b"z")):
        assert records.decode(records.encode(r)) == r
    assert records.decode(["T", "A", 1, [1, "A"], 1.0, b"z"]).expires_at is None


def test_a_durable_site_restarted_after_expiry_serves_and_replays_stubs():
    net = Net(["A", "B"], FAST, durable=True)
    net.run(2.0)
    mid = net.send("A", SECRET, expires_at=net.now + 5.0).msg_id
    net.run(4.0)
    assert delivery(net, "B", mid).payload == SECRET
    log = [p.record for p in net.persisted["B"]]
    log += [DeliveryLog(1 << 20).add(d)[1] for d in net.logs["B"].delivered]
    net.crash("B")
    net.run(10.0)
    net.restart("B", log)
    held = net.stacks["B"].retention.get("A", 1)
    assert held is not None and held.expires_at == pytest.approx(7.0)
    net.run(12.0)
    assert net.stacks["B"].retention.get("A", 1).expired and net.stacks["B"].retention.get("A", 1).payload == b""
    replay = DeliveryLog(1 << 20)
    replay.recover(log)
    frames_ = list(replay.window(1, now=12.0))
    ev = cw.decode_event(frames_[-1])
    assert ev.expired and ev.payload == b"" and ev.expires_at == pytest.approx(7.0)


def test_the_local_api_carries_expires_at_and_old_send_frames_still_read():
    req = cw.decode_request(wire.FrameDecoder(tag=str).feed(cw.send(1, b"p", None, "routine", 99.5))[0])
    assert req == cw.Send(1, b"p", None, "routine", 99.5)
    assert cw.decode_request(["send", 2, b"p", None]) == cw.Send(2, b"p", None)
    with pytest.raises(ValueError):
        cw.decode_request(["send", 2, b"p", None, "routine", math.nan])
    with pytest.raises(ValueError):
        cw.send(1, b"p", None, "routine", math.inf)
    frame = cw.delivery_frame(1, "A", 1, [1, "A"], False, b"", expires_at=5.0, expired=True)
    assert frame[7] == {"expires_at": 5.0, "expired": True}
    ev = cw.decode_event(frame)
    assert ev.expired and ev.expires_at == 5.0
    plain = cw.decode_event(cw.delivery_frame(2, "A", 2, [2, "A"], False, b"q"))
    assert plain.expires_at is None and not plain.expired
    assert replace(plain, payload=b"q") == plain
