"""The TAK session, sans-IO: log-in by callsign or certificate, GeoChat to say and message to GeoChat with its
marks, receipts both ways, PLI to position and position to PLI, pings, protocol negotiation, errors."""
from __future__ import annotations

from typing import Any

from chat_server.tak.cot import CotEvent, GeoChat, Point
from chat_server.tak.rooms import RoomMap, parse_tak_rooms
from chat_server.tak.session import Close, Emit, Login, Note, Request, TakSession, UseProto

T0 = 1_700_000_000.0


def event(kind: str, **kw: Any) -> CotEvent:
    return CotEvent(type=kind, uid=kw.pop("uid", "ANDROID-1"), time=T0, start=T0, stale=kw.pop("stale", T0 + 60),
                    point=kw.pop("point", Point(51.5, -0.1)), **kw)


def geochat(text: str, chatroom: str = "All Chat Rooms", mid: str = "m-1") -> CotEvent:
    return event("b-t-f", chat=GeoChat(chatroom, chatroom, "alpha", mid, "ANDROID-1"), remarks=text)


def requests(out: list) -> list[dict[str, Any]]:
    return [a.frame for a in out if isinstance(a, Request)]


def emitted(out: list) -> list[CotEvent]:
    return [a.event for a in out if isinstance(a, Emit)]


def logged_in(rooms: RoomMap | None = None, sites: tuple[str, ...] = ("A", "B")) -> TakSession:
    s = TakSession(site="A", rooms=rooms or RoomMap())
    out = s.on_event(event("a-f-G-U-C", callsign="alpha"), T0)
    login = next(a for a in out if isinstance(a, Login))
    assert login.account == "alpha"
    out = s.on_frame({"type": "welcome", "id": login.rid, "user": "alpha", "rooms": ["ops"],
                      "sites": {x: "up" for x in sites}}, T0)
    frames = requests(out)
    assert [f["type"] for f in frames] == ["join", "positions", "position"]        # the held PLI after both
    assert frames[0]["room"] == "all"
    s.on_frame({"type": "joined", "id": frames[0]["id"], "room": "all"}, T0)
    return s


def test_the_first_callsign_logs_in_and_held_events_follow_the_welcome() -> None:
    s = logged_in()
    assert s.user == "alpha" and s.joined == {"ops", "all"} and s.client_uid == "ANDROID-1"


def test_a_certificate_account_logs_in_at_start_and_a_bad_callsign_is_refused() -> None:
    out = TakSession(site="A", account="carol").start(T0)
    assert emitted(out)[0].tak_support == 1 and [a.account for a in out if isinstance(a, Login)] == ["carol"]
    s = TakSession(site="A")
    out = s.on_event(event("a-f-G-U-C", callsign="9 lives"), T0)
    assert isinstance(out[-1], Close) and "not an account name" in emitted(out)[0].remarks  # type: ignore[operator]
    assert s.on_event(geochat("hi"), T0) == []


def test_a_refused_hello_tells_the_user_and_closes() -> None:
    s = TakSession(site="A")
    login = next(a for a in s.on_event(event("a-f-G-U-C", callsign="alpha"), T0) if isinstance(a, Login))
    out = s.on_frame({"type": "error", "code": "limit", "message": "too many sessions", "in_reply_to": login.rid}, T0)
    assert "too many sessions" in (emitted(out)[0].remarks or "") and isinstance(out[-1], Close)


def test_geochat_becomes_a_say_in_the_mapped_room_joining_it_first() -> None:
    s = logged_in(RoomMap(parse_tak_rooms({"Team Blue": "blue"})))
    [say] = requests(s.on_event(geochat("[FLASH] contact north", "All Chat Rooms"), T0))
    assert say == {"type": "say", "room": "all", "text": "contact north", "client_id": "m-1", "precedence": "flash",
                   "id": say["id"]}
    frames = requests(s.on_event(geochat("moving", "Team Blue", "m-2"), T0))
    assert [(f["type"], f["room"]) for f in frames] == [("join", "blue"), ("say", "blue")]
    out = s.on_event(geochat("x", "no room!"), T0)
    assert not requests(out) and "no room here" in (emitted(out)[0].remarks or "")


def test_room_messages_go_out_as_geochat_with_marks_and_own_messages_are_not_echoed() -> None:
    s = logged_in()
    say = requests(s.on_event(geochat("mine"), T0))[0]
    s.on_frame({"type": "message", "msg_id": "A:7", "room": "all", "origin": "A", "user": "alpha", "text": "mine",
                "sent_at": T0, "order": [7, "A"], "late": False}, T0)          # before its ack: held
    assert s.on_frame({"type": "ack", "id": say["id"], "client_id": "m-1", "msg_id": "A:7"}, T0) == []
    out = s.on_frame({"type": "message", "msg_id": "C:3", "room": "ops", "origin": "C", "user": "bob",
                      "text": "hello", "sent_at": T0 - 90, "order": [5, "C"], "late": True, "repaired": True,
                      "precedence": "immediate"}, T0)
    [ev] = emitted(out)
    assert ev.type == "b-t-f" and ev.uid == "GeoChat.RCM.C.bob.ops.C:3"
    assert ev.chat == GeoChat("ops", "ops", "bob", "C:3", "RCM.C.bob")
    assert ev.remarks == "[IMMEDIATE] hello (late) (repaired)" and ev.remarks_time == T0 - 90 and ev.stale > T0
    # its read receipt: mark_read up to it, and the acknowledgement it asks for
    receipt = event("b-t-f-r", uid="C:3", chat=GeoChat("ops", "ops", "alpha", "C:3", "ANDROID-1"))
    assert [(f["type"], f.get("order")) for f in requests(s.on_event(receipt, T0))] == [
        ("mark_read", [5, "C"]), ("acknowledge", None)]


def test_the_first_receipt_from_another_site_is_a_delivered_receipt() -> None:
    s = logged_in()
    say = requests(s.on_event(geochat("mine", mid="m-9"), T0))[0]
    s.on_frame({"type": "ack", "id": say["id"], "client_id": "m-9", "msg_id": "A:8"}, T0)
    assert s.on_frame({"type": "receipt", "msg_id": "A:8", "site": "A"}, T0) == []
    [ev] = emitted(s.on_frame({"type": "receipt", "msg_id": "A:8", "site": "B"}, T0))
    assert ev.type == "b-t-f-d" and ev.uid == "m-9" and ev.chat is not None and ev.chat.message_id == "m-9"
    assert s.on_frame({"type": "receipt", "msg_id": "A:8", "site": "C"}, T0) == []
    lone = logged_in(sites=("A",))
    say = requests(lone.on_event(geochat("mine", mid="m-1"), T0))[0]
    lone.on_frame({"type": "ack", "id": say["id"], "client_id": "m-1", "msg_id": "A:1"}, T0)
    assert emitted(lone.on_frame({"type": "receipt", "msg_id": "A:1", "site": "A"}, T0))


def test_plis_become_positions_and_positions_plis_but_for_our_own_units() -> None:
    s = logged_in()
    pli = event("a-f-G-U-C", callsign="alpha", course=370.0, speed=2.0, point=Point(1.0, 2.0, 30.0))
    [f] = requests(s.on_event(pli, T0))
    assert f == {"type": "position", "unit": "alpha", "lat": 1.0, "lon": 2.0, "alt": 30.0, "course": 10.0,
                 "speed": 2.0, "at": T0, "expires_in": 60.0, "id": f["id"]}
    mine = {"type": "position", "site": "A", "unit": "alpha", "lat": 1.0, "lon": 2.0, "at": T0,
            "expires_at": T0 + 600}
    assert s.on_frame(mine, T0) == []
    theirs = {**mine, "site": "C", "unit": "Charlie 1", "user": "carl", "alt": 5.0}
    [ev] = emitted(s.on_frame({"type": "positions", "units": [theirs, {**theirs, "expires_at": T0 - 1}]}, T0))
    assert (ev.type, ev.uid, ev.callsign, ev.stale, ev.point.hae) == (
        "a-f-G-U-C", "RCM.C.Charlie 1", "Charlie 1", T0 + 600, 5.0)
    assert "carl@C" in (ev.remarks or "")


def test_a_pli_lives_as_long_as_its_stale_time_says_and_one_stale_when_sent_is_dropped() -> None:
    """ATAK's stale time is the sender's word on how long its position holds: the report lives that long
    (the server still caps it at position_max_age), counted from the event's own time, so the client's clock
    offset does not matter; one already stale goes nowhere, with a note."""
    s = logged_in()
    [f] = requests(s.on_event(CotEvent(type="a-f-G-U-C", uid="ANDROID-1", time=T0 - 500, start=T0 - 500,
                                       stale=T0 - 380, point=Point(1.0, 2.0), callsign="alpha"), T0))
    assert f["expires_in"] == 120.0                    # a client clock 500 s behind: still 2 minutes
    [f] = requests(s.on_event(event("a-f-G-U-C", callsign="alpha", stale=T0 + 86_400), T0))
    assert f["expires_in"] == 3600.0                   # RCM keeps none longer
    out = s.on_event(event("a-f-G-U-C", callsign="alpha", stale=T0), T0)
    assert requests(out) == [] and [a.text for a in out if isinstance(a, Note)] == [
        "dropped a PLI of alpha stale when sent (stale +0.0 s after its time)"]


def test_pings_negotiation_unknown_types_and_errors() -> None:
    s = logged_in()
    assert emitted(s.on_event(event("t-x-c-t"), T0))[0].type == "t-x-c-t-r"
    out = s.on_event(event("t-x-takp-q", tak_request=1), T0)
    assert emitted(out)[0].tak_response is True and isinstance(out[-1], UseProto) and s.proto
    assert [type(a) for a in s.on_event(event("b-m-p-s-m"), T0)] == [Note]
    assert s.on_event(event("b-m-p-s-m"), T0) == []                      # noted once per type
    say = requests(s.on_event(geochat("x" * 10, mid="m-5"), T0))[0]
    out = s.on_frame({"type": "error", "code": "forbidden", "message": "not allowed", "in_reply_to": say["id"]}, T0)
    assert "was not sent: not allowed" in (emitted(out)[0].remarks or "")
