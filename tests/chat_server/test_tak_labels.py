"""The TAK session in a labeled mission, sans-IO: room messages reach TAK users led by their label, a GeoChat goes
at its room's label or at the label it starts with, one the user may not send is dropped with a log line and a
GeoChat saying why, a room the user is not cleared for is only logged, and an unlabeled mission is unchanged."""
from __future__ import annotations

from typing import Any

from chat_server.front_end_labels import LabelView
from chat_server.tak.cot import CotEvent, GeoChat, Point
from chat_server.tak.session import Emit, Login, Note, Request, TakSession
from contracts.labels import Scheme

T0 = 1_700_000_000.0
SCHEME = Scheme.build(["UNCLASSIFIED", "RESTRICTED", "SECRET", "TOP SECRET"], ["GBR", "NZL", "USA"])


def geochat(text: str, chatroom: str = "All Chat Rooms", mid: str = "m-1") -> CotEvent:
    return CotEvent(type="b-t-f", uid="ANDROID-1", time=T0, start=T0, stale=T0 + 60, point=Point(51.5, -0.1),
                    chat=GeoChat(chatroom, chatroom, "alpha", mid, "ANDROID-1"), remarks=text)


def logged_in(labels: LabelView | None = None) -> TakSession:
    """alpha at A, cleared SECRET//REL TO GBR, in ``all`` (labeled RESTRICTED)."""
    s = TakSession(site="A", labels=LabelView(SCHEME) if labels is None else labels)
    login = next(a for a in s.on_event(CotEvent(type="a-f-G-U-C", uid="ANDROID-1", time=T0, start=T0,
                                                stale=T0 + 60, point=Point(1.0, 2.0), callsign="alpha"), T0)
                 if isinstance(a, Login))
    out = s.on_frame({"type": "welcome", "id": login.rid, "user": "alpha", "rooms": ["all"], "sites": {"A": "up"},
                      "clearance": {"level": "SECRET", "caveats": ["GBR"]}}, T0)
    assert [a.frame["type"] for a in out if isinstance(a, Request)] == ["positions", "position"]
    s.on_frame({"type": "joined", "room": "all", "label": {"level": "RESTRICTED", "caveats": []}}, T0)
    return s


def says(out: list[Any]) -> list[dict[str, Any]]:
    return [a.frame for a in out if isinstance(a, Request) and a.frame["type"] == "say"]


def told(out: list[Any]) -> list[str]:
    return [a.event.remarks or "" for a in out if isinstance(a, Emit)]


def test_room_messages_reach_tak_users_led_by_their_label() -> None:
    s = logged_in()
    out = s.on_frame({"type": "message", "msg_id": "C:3", "room": "all", "origin": "C", "user": "bob", "text": "go",
                      "sent_at": T0, "order": [5, "C"], "late": True, "precedence": "flash",
                      "label": {"level": "SECRET", "caveats": ["GBR"]}}, T0)
    assert told(out) == ["[SECRET//REL TO GBR] [FLASH] go (late)"]


def test_a_geochat_goes_at_its_rooms_label_or_at_the_label_it_starts_with() -> None:
    s = logged_in()
    [plain] = says(s.on_event(geochat("contact north"), T0))
    assert "label" not in plain and plain["text"] == "contact north"          # the room's label: the server's
    [marked] = says(s.on_event(geochat("[SECRET//REL TO GBR] [FLASH] contact east", mid="m-2"), T0))
    assert (marked["label"], marked["precedence"], marked["text"]) == (
        {"level": "SECRET", "caveats": ["GBR"]}, "flash", "contact east")
    [first] = says(s.on_event(geochat("[IMMEDIATE] [secret] contact west", mid="m-3"), T0))
    assert (first["label"], first["precedence"], first["text"]) == (
        {"level": "SECRET", "caveats": []}, "immediate", "contact west")


def test_a_geochat_the_user_may_not_send_is_dropped_logged_and_explained() -> None:
    s = logged_in()
    for text, why in (("[TOP SECRET] x", "[TOP SECRET] is above your clearance SECRET//REL TO GBR"),
                      ("[SECRET//REL TO USA] x", "above your clearance"),
                      ("[UNCLASSIFIED] x", "is below the label of All Chat Rooms, RESTRICTED"),
                      ("[SECERT] x", "[SECERT] is not a label of this mission")):
        out = s.on_event(geochat(text, mid=text), T0)
        assert not [a for a in out if isinstance(a, Request)]
        assert [type(a) for a in out] == [Note, Emit] and why in out[0].text          # type: ignore[union-attr]
        assert told(out)[0].startswith("your message to All Chat Rooms was not sent: ") and why in told(out)[0]
    # The chat server's refusal of a room the user is not cleared for: the join is logged once, the say explained.
    out = s.on_event(geochat("hello", "vault", mid="m-9"), T0)
    join, say = (a.frame for a in out if isinstance(a, Request))
    refusal = {"type": "error", "code": "forbidden", "message": "room 'vault' is TOP SECRET, above your clearance"}
    assert s.on_frame({**refusal, "in_reply_to": join["id"]}, T0) == [
        Note("cannot join vault: room 'vault' is TOP SECRET, above your clearance")]
    out = s.on_frame({**refusal, "in_reply_to": say["id"]}, T0)
    assert [type(a) for a in out] == [Note, Emit]
    assert told(out) == ["your message to vault was not sent: room 'vault' is TOP SECRET, above your clearance"]


def test_an_unlabeled_mission_sends_a_bracket_as_text_and_shows_no_label() -> None:
    s = logged_in(LabelView())
    [say] = says(s.on_event(geochat("[SECRET] as typed"), T0))
    assert say["text"] == "[SECRET] as typed" and "label" not in say
    out = s.on_frame({"type": "message", "msg_id": "C:3", "room": "all", "origin": "C", "user": "bob", "text": "go",
                      "sent_at": T0, "order": [5, "C"], "label": "SECRET"}, T0)
    assert told(out) == ["go"]
