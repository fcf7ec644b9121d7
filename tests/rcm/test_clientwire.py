"""The local client API's codec (rcm/clientwire.py), shared by rcm.client and rcm.server."""
from __future__ import annotations

import subprocess
import sys

import pytest

from rcm import wire
from rcm.wire import local as cw


def frames(data: bytes) -> list:
    return cw.decoder().feed(data)


def test_requests_round_trip():
    assert cw.decode_request(frames(cw.hello("chat", (7, 12)))[0]) == cw.Hello("chat", 7, 12)
    assert cw.decode_request(frames(cw.hello("x" * 100, None))[0]) == cw.Hello("x" * 64, None, None)
    assert cw.decode_request(frames(cw.send(3, b"p", ["B"]))[0]) == cw.Send(3, b"p", ["B"])
    assert cw.decode_request(frames(cw.ack(9))[0]) == cw.Ack(9)
    assert cw.decode_request(frames(cw.stats_request(4))[0]) == cw.Stats(4)


@pytest.mark.parametrize("frame", [["send", 1, "text", None], ["nonsense"], ["ack", "x"], ["hello", "a"]])
def test_bad_requests_raise(frame):
    with pytest.raises((ValueError, TypeError)):
        cw.decode_request(frame)


def test_status_carries_via_only_when_relayed():
    assert frames(cw.status("C", "connected")) == [["status", "C", "connected"]]
    assert cw.decode_event(frames(cw.status("C", "connected", "B"))[0]) == cw.StatusChange("C", "connected", "B")
    assert cw.decode_event(["status", "C", "suspected"]) == cw.StatusChange("C", "suspected", None)


def test_welcome_lists_next_hops_and_old_welcomes_still_read():
    w = cw.decode_event(frames(cw.welcome("A", ["A", "B", "C"], 5, {"B": "connected", "C": "connected"},
                                          "lamport", 1, 0, {"B": None, "C": "B"}))[0])
    assert w.via == {"B": None, "C": "B"} and w.statuses["C"] == "connected"
    old = cw.decode_event(["welcome", "A", ["A", "B"], 5, {"B": "connected"}, "lamport", 1, 0])
    assert old.via == {"B": None}


def test_server_frames_decode_into_the_client_api_types():
    d = cw.decode_event(frames(wire.encode_frame(cw.delivery_frame(4, "B", 2, (3, "B"), True, b"x")))[0])
    assert d == cw.Delivery(4, "B", 2, "B:2", [3, "B"], True, b"x")
    assert cw.decode_event(frames(cw.refused(2, "backpressure", "full"))[0]) == cw.Reply(2, cw.Refusal(
        "backpressure", "full"))
    assert cw.decode_event(frames(cw.missing("B", [[1, 3]]))[0]) == cw.Missing("B", ((1, 3),))
    assert cw.decode_event(["something new"]) is None


def test_the_client_library_does_not_import_the_server():
    code = "import sys, rcm.client; print('rcm.server' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_precedence_and_repair_ride_in_optional_fields_and_old_frames_still_read():
    req = cw.decode_request(frames(cw.send(1, b"x", None, "flash"))[0])
    assert req == cw.Send(1, b"x", None, "flash")
    assert frames(cw.send(1, b"x", None))[0] == ["send", 1, b"x", None]          # routine: the old frame
    assert cw.decode_request(["send", 1, b"x", ["B"]]).precedence == "routine"
    with pytest.raises(ValueError, match="flash, immediate, priority, routine"):
        cw.decode_request(["send", 1, b"x", None, "urgent"])
    with pytest.raises(TypeError):
        cw.decode_request(["send", 1, b"x", None, 3])
    frame = cw.delivery_frame(4, "B", 2, (3, "B"), True, b"x", "immediate", repaired=True)
    d = cw.decode_event(frames(wire.encode_frame(frame))[0])
    assert (d.precedence, d.repaired, d.late) == ("immediate", True, True)
    assert cw.delivery_frame(4, "B", 2, (3, "B"), False, b"x") == ["d", 4, "B", 2, [3, "B"], False, b"x"]
    odd = cw.decode_event(["d", 4, "B", 2, [3, "B"], False, b"x", {"precedence": "bogus", "new": 1}])
    assert (odd.precedence, odd.repaired) == ("routine", False)


def test_the_local_socket_decoder_refuses_bombs_too():
    dec = cw.decoder()
    for body in (b"\xdd\xff\xff\xff\xff\xa4send", b"\x91" * 100_000, b"\xc1"):
        with pytest.raises(wire.FrameError):
            cw.decoder().feed(wire.encode_varint(len(body)) + body)
    with pytest.raises(wire.FrameError):
        dec.feed(wire.encode_varint(cw.CLIENT_MAX_FRAME + 1))


def test_publish_and_latest_frames_round_trip_within_the_bounds():
    assert cw.decode_request(frames(cw.publish(b"unit-7", b"pos", 100.5))[0]) == cw.Publish(b"unit-7", b"pos", 100.5)
    ev = cw.decode_event(frames(cw.latest("B", b"unit-7", 42, 100.5, b"pos", 1))[0])
    assert ev == cw.Latest("B", b"unit-7", 42, 100.5, b"pos", 1)
    for key, payload, at in ((b"", b"p", 1.0), (b"k" * 65, b"p", 1.0), (b"k", b"p" * 1025, 1.0),
                             ("k", b"p", 1.0), (b"k", b"p", float("nan")), (b"k", b"p", "soon")):
        with pytest.raises(ValueError):
            cw.publish(key, payload, at)                          # the client library refuses it
        with pytest.raises(ValueError):
            cw.decode_request(["publish", key, payload, at])      # and so does the server
    with pytest.raises(ValueError):
        cw.decode_request(["publish", b"k", b"p"])
