"""The line client (``--plain``) on fed frames: each request goes out once, each answer is printed once.

A ``PlainClient`` whose link is a recorder: what an input line sends, and the lines printed for the frames
that answer it (the same path as a terminal or a pipe: ``submit`` and ``_on_frame``).
"""
from __future__ import annotations

import io
from typing import Any

from chat_tui.plain import PlainClient

WELCOME = {"type": "welcome", "site": "A", "user": "alice", "rooms": ["intel", "ops"],
           "sites": {"A": "connected", "B": "connected", "C": "connected"}, "presence": {}}


def msg(seq: int, ts: int, origin: str = "B", user: str = "bob", room: str = "ops", **kw: Any) -> dict[str, Any]:
    return {"type": "message", "room": room, "msg_id": f"{origin}:{seq}", "origin": origin, "user": user,
            "text": kw.pop("text", f"message {ts}"), "sent_at": 1000.0 + ts, "order": [ts, origin], "late": False,
            "n": ts, **kw}


class Recorder:
    """The part of ChatLink the client uses, keeping what would go out."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def request(self, frame: dict[str, Any]) -> None:
        self.sent.append(frame)

    def say(self, room: str, text: str, *, precedence: str = "routine", reply_to: str | None = None) -> str:
        self.sent.append({"type": "say", "room": room, "text": text, "precedence": precedence})
        return f"c{len(self.sent)}"


def line_client(*history: dict[str, Any]) -> tuple[PlainClient, io.StringIO, Recorder]:
    out = io.StringIO()
    client = PlainClient("ws://127.0.0.1:1/ws", "alice", "pw", out, timefmt=lambda t: "T")
    link = Recorder()
    client.link = client.controller.link = link       # type: ignore[assignment]
    client._on_frame(WELCOME)
    client._on_frame({"type": "joined", "room": "intel", "history": []})
    client._on_frame({"type": "joined", "room": "ops", "history": list(history)})
    out.seek(0)
    out.truncate()
    return client, out, link


def sent(link: Recorder, kind: str) -> list[dict[str, Any]]:
    return [f for f in link.sent if f["type"] == kind]


def printed(out: io.StringIO) -> list[str]:
    return out.getvalue().splitlines()


def test_search_is_sent_once_and_its_results_printed_once() -> None:
    client, out, link = line_client(msg(1, 1, text="tanker on station"))
    client.submit("/search tanker")
    assert [f["query"] for f in sent(link, "search")] == ["tanker"]
    results = {"type": "results", "query": "tanker", "purpose": sent(link, "search")[0]["purpose"],
               "messages": [dict(msg(1, 1, text="tanker on station"), highlights=[[0, 6]])]}
    client._on_frame(results)
    client._on_frame(results)                            # the same answer again: not printed again
    assert printed(out) == ["search: 1 result for tanker", "   B:1 [ops] T bob@B: *tanker* on station"]


def test_ack_sends_one_acknowledgement_and_prints_what_became_of_it() -> None:
    client, out, link = line_client()
    client._on_frame(msg(5, 5, text="MEDEVAC grid 123", precedence="flash"))
    out.truncate(0)
    out.seek(0)
    client.submit("/ack")
    assert [f["msg_id"] for f in sent(link, "acknowledge")] == ["B:5"]
    client._on_frame({"type": "acknowledging", "msg_id": "B:5", "purpose": sent(link, "acknowledge")[0]["purpose"]})
    client._on_frame({"type": "acknowledged", "msg_id": "B:5", "user": "alice", "site": "A", "at": 1009.0})
    assert printed(out) == ["-- [ops] acknowledged FLASH B:5 from bob@B"]
    client.submit("/ack")
    assert len(sent(link, "acknowledge")) == 1 and printed(out)[-1] == "-- nothing to acknowledge"


def test_missing_and_recovered_print_once_for_the_site_and_room_news_names_its_room() -> None:
    client, out, _ = line_client(msg(1, 1))
    client._on_frame({"type": "missing", "origin": "C", "count": 1, "ranges": [[7, 7]]})
    client._on_frame(msg(7, 0, origin="C", user="dave", late=True, repaired=True, text="back"))
    client._on_frame({"type": "missing", "origin": "C", "count": 0, "ranges": [], "recovered": 1})
    lines = printed(out)
    assert lines[0] == ("!! up to 1 message from site C lost in a disconnection: repair brings it back in place "
                        "if another site still holds it")
    assert lines[1] == "T [ops] LATE REPAIRED dave@C: back"
    assert lines[2].startswith("!! [ops] repaired message C:7 from dave@C: arrived ")
    assert lines[3] == "-- recovered 1 message from site C: shown in place, marked repaired"
    assert len(lines) == 4


def test_a_site_an_own_message_was_not_sent_to_is_named_until_it_gets_it() -> None:
    client, out, link = line_client()
    client.submit("/switch ops")
    client.submit("grid square 4411")
    client._on_frame({"type": "ack", "client_id": "c1", "msg_id": "A:3", "skipped": ["C"]})
    client._on_frame({"type": "receipt", "msg_id": "A:3", "site": "A"})
    client._on_frame({"type": "receipt", "msg_id": "A:3", "site": "C"})
    assert printed(out) == ["accepted A:3 [ops]; not sent to C (disconnected)",
                            "receipt A:3 delivered at A (1/3 sites)",
                            "receipt A:3 delivered at C (2/3 sites) (it was not sent there at first)"]
