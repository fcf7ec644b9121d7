"""CoT events decoded and encoded (XML and TAK protocol v1), and the TAK stream cut into events: torn reads,
both framings on one stream, oversized events, garbage, hostile XML."""
from __future__ import annotations

import pytak
import pytest
import takproto

from chat_server.tak.cot import (
    MAX_EVENT_BYTES,
    CotError,
    CotEvent,
    GeoChat,
    Point,
    decode_proto,
    decode_xml,
    encode_proto,
    encode_xml,
    format_time,
    parse_time,
    to_tak_message,
)
from chat_server.tak.stream import Broken, Dropped, Frame, StreamReader

T0 = 1_700_000_000.0

GEOCHAT = (b'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
           b'<event version="2.0" uid="GeoChat.ANDROID-1.All Chat Rooms.m-1" type="b-t-f" how="h-g-i-g-o" '
           b'time="2023-11-14T22:13:20.000Z" start="2023-11-14T22:13:20.000Z" stale="2023-11-15T22:13:20.000Z">'
           b'<point lat="51.5" lon="-0.1" hae="12.0" ce="9999999.0" le="9999999.0"/><detail>'
           b'<__chat parent="RootContactGroup" groupOwner="false" messageId="m-1" chatroom="All Chat Rooms" '
           b'id="All Chat Rooms" senderCallsign="alpha"><chatgrp uid0="ANDROID-1" uid1="All Chat Rooms" '
           b'id="All Chat Rooms"/></__chat><link uid="ANDROID-1" type="a-f-G-U-C" relation="p-p"/>'
           b'<remarks source="BAO.F.ATAK.ANDROID-1" to="All Chat Rooms" time="2023-11-14T22:13:20.000Z">'
           b'hello &amp; welcome</remarks></detail></event>')


def pli(callsign: str = "alpha", lat: float = 51.5, lon: float = -0.1) -> bytes:
    return pytak.gen_cot(lat=lat, lon=lon, uid="ANDROID-1", cot_type="a-f-G-U-C", callsign=callsign)


PLI = pli()


def test_a_geochat_from_atak_decodes_to_its_room_sender_and_text() -> None:
    ev = decode_xml(GEOCHAT)
    assert ev.type == "b-t-f" and ev.time == T0
    assert ev.chat == GeoChat("All Chat Rooms", "All Chat Rooms", "alpha", "m-1", "ANDROID-1")
    assert ev.remarks == "hello & welcome" and ev.remarks_time == T0
    assert ev.point == Point(51.5, -0.1, 12.0)


def test_a_pytak_pli_decodes_with_callsign_and_track() -> None:
    ev = decode_xml(pli().replace(b"</detail>", b'<track course="90.5" speed="3"/></detail>'))
    assert (ev.type, ev.uid, ev.callsign, ev.course, ev.speed) == ("a-f-G-U-C", "ANDROID-1", "alpha", 90.5, 3.0)
    assert (ev.point.lat, ev.point.lon) == (51.5, -0.1)


def test_xml_and_protobuf_encodings_decode_to_the_same_event() -> None:
    ev = CotEvent(type="b-t-f", uid="GeoChat.RCM.A.bob.all.A:3", time=T0, start=T0, stale=T0 + 60,
                  point=Point(1.0, 2.0), chat=GeoChat("All Chat Rooms", "All Chat Rooms", "bob", "A:3", "RCM.A.bob"),
                  link_uid="RCM.A.bob", remarks="[FLASH] <contact> & go (late)", remarks_time=T0 - 5,
                  callsign="bob", course=10.0, speed=1.5)
    assert decode_xml(encode_xml(ev)) == ev
    framed = encode_proto(ev)
    assert framed[0] == 0xBF
    assert decode_proto(StreamReader().feed(framed)[0].data) == ev        # type: ignore[union-attr]
    # takproto (not ours) reads our framing, and our reader reads its encoding of our XML
    assert takproto.parse_proto(bytearray(framed)).cotEvent.uid == ev.uid
    theirs = takproto.xml2proto(encode_xml(ev), takproto.TAKProtoVer.STREAM)
    back = decode_proto(StreamReader().feed(bytes(theirs))[0].data)       # type: ignore[union-attr]
    assert back.chat == ev.chat and back.remarks == ev.remarks


@pytest.mark.parametrize("data, why", [
    (b"<event", "not well-formed"),
    (b'<foo uid="x"/>', "not <event>"),
    (pli().replace(b'lat="51.5"', b'lat="91"'), "out of range"),
    (pli().replace(b'lat="51.5"', b'lat="nan"'), "out of range"),
    (pli().replace(b'type="a-f-G-U-C"', b'type="' + b"a" * 100 + b'"'), "the limit is"),
    (pli().replace(b'time="', b'time="yesterday'), "not a time"),
    (b'<!DOCTYPE e [<!ENTITY x "xxxxxxxx">]><event uid="u" type="a"><point lat="0" lon="0"/></event>', "refused"),
    (pli().replace(b"<point", b"<pt"), "no <point>"),
])
def test_bad_events_are_refused_naming_the_problem(data: bytes, why: str) -> None:
    with pytest.raises(CotError, match=why):
        decode_xml(data)


def test_a_text_with_characters_xml_cannot_carry_is_still_a_well_formed_event() -> None:
    """A chat text may hold a bell, ESC, NUL or U+FFFE (any user's, any site's): written raw into CoT XML, the
    event was not well-formed and every XML TAK client in the room lost the message (the probe's tak kinds)."""
    text = "bell\x07 esc\x1b[31m nul\x00 tab\tnewline\nnot\ufffe"
    ev = CotEvent(type="b-t-f", uid="GeoChat.RCM.A.bob.All Chat Rooms.A:7", time=T0, start=T0, stale=T0 + 60,
                  point=Point(0.0, 0.0), chat=GeoChat("All Chat Rooms", "All Chat Rooms", "bob\x01", "A:7"),
                  remarks=text)
    want = "bell\u2407 esc\u241b[31m nul\u2400 tab\tnewline\nnot\ufffd"
    assert decode_xml(encode_xml(ev)).remarks == want
    frame = StreamReader().feed(encode_proto(ev))[0]
    assert isinstance(frame, Frame)
    got = decode_proto(frame.data)
    assert got.remarks == want and got.chat is not None and got.chat.sender_callsign == "bob\u2401"


def test_bad_protobuf_is_refused() -> None:
    with pytest.raises(CotError):
        decode_proto(b"\xff\xff\xff")


def test_times_round_trip() -> None:
    assert parse_time(format_time(T0 + 0.25), "t") == T0 + 0.25
    assert parse_time("2023-11-14T22:13:20Z", "t") == T0


# --- the stream -------------------------------------------------------------------------------------------

def frames(items: list) -> list[tuple[bytes, bool]]:
    return [(i.data, i.proto) for i in items if isinstance(i, Frame)]


def test_events_torn_at_every_byte_come_out_whole_in_both_framings() -> None:
    xml, proto = PLI, encode_proto(decode_xml(GEOCHAT))
    stream = xml + b"\n" + proto + b"  " + GEOCHAT
    r = StreamReader()
    out = []
    for i in range(len(stream)):
        out += r.feed(stream[i:i + 1])
    body = decode_xml(GEOCHAT)
    assert frames(out) == [(xml, False), (proto[-len(to_tak_message(body).SerializeToString()):], True),
                           (GEOCHAT, False)]
    assert not [i for i in out if not isinstance(i, Frame)]


def test_an_oversized_xml_event_is_skipped_and_the_next_one_read() -> None:
    big = b"<event>" + b"x" * (MAX_EVENT_BYTES + 10) + b"</event>"
    r = StreamReader()
    out = []
    for i in range(0, len(big), 4096):
        out += r.feed(big[i:i + 4096])
    out += r.feed(PLI)
    assert sum(isinstance(i, Dropped) for i in out) == 1
    assert frames(out) == [(PLI, False)]
    assert len(r._buf) == 0


def test_an_oversized_protobuf_event_is_skipped_by_its_length() -> None:
    from rcm.wire import encode_varint as varint
    body = b"\x00" * (MAX_EVENT_BYTES + 1)
    r = StreamReader()
    out = r.feed(b"\xbf" + varint(len(body)) + body[:1000]) + r.feed(body[1000:]) + r.feed(PLI)
    assert [type(i) for i in out] == [Dropped, Frame] and frames(out) == [(PLI, False)]


def test_garbage_is_skipped_to_the_next_event() -> None:
    r = StreamReader()
    out = r.feed(b"GET / HTTP/1.1\r\n\r\n" + PLI)
    assert isinstance(out[0], Dropped) and frames(out) == [(PLI, False)]


def test_a_length_that_never_ends_breaks_the_stream() -> None:
    r = StreamReader()
    out = r.feed(b"\xbf" + b"\xff" * 11)
    assert isinstance(out[-1], Broken)
    assert r.feed(PLI) == []
