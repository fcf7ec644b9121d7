"""Audit finding 11: text from the server is shown, never obeyed, by both terminal clients.

A newline in a message forged whole lines (``commander@A: ABORT``) in the line
client, escape sequences reached the terminal, and in the Textual client a site
name, a close reason or a server's error message was parsed as markup
(``[@click=app.quit]`` became a live action).
"""
from __future__ import annotations

import io
import re

from textual.widgets import Static

from chat_tui.app import ChatApp, LoginScreen, MessageLine, NoticeLine
from chat_tui.link import RETRYING, LinkStatus
from chat_tui.plain import PlainClient
from chat_tui.safe_text import printable, printable_lines

FORGED = "all clear\ncommander@A: ABORT"
NASTY = FORGED + "\r\x1b[2J\x1b]0;pwned\x07\x9b31m\x7f\u202eevil\u2066x\u2069\u2028y\ud800"
UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
MARKUP = "[bold red]X[/] [@click=app.quit]quit[/]"
T0 = 1_767_268_800.0


def test_printable_escapes_controls_newlines_and_bidi() -> None:
    assert printable("a\nb\r\tc") == "a\\nb\\r\\tc"
    assert printable("\x1b[2J\x07\x00") == "\\x1b[2J\\x07\\x00"
    assert printable("\x7f\x85\x9b") == "\\x7f\\x85\\x9b"
    assert printable("\u202a\u202b\u202c\u202d\u202e") == "\\u202a\\u202b\\u202c\\u202d\\u202e"
    assert printable("\u2066\u2067\u2068\u2069\u200e\u200f\u061c") == \
        "\\u2066\\u2067\\u2068\\u2069\\u200e\\u200f\\u061c"
    assert printable("\u2028\u2029\ud800") == "\\u2028\\u2029\\ud800"
    for code in list(range(0x20)) + list(range(0x7f, 0xa0)):
        out = printable(chr(code))
        assert not UNSAFE.search(out) and out.startswith("\\"), hex(code)
    # What people write stays as it is: accents, other scripts, emoji, brackets, backslashes.
    for text in ("Überflug über Köln", "شمال", "東京", "tanker ✈ on station 👍", "[LATE] C:\\temp", MARKUP):
        assert printable(text) == text
    assert printable(printable(NASTY)) == printable(NASTY)            # idempotent
    assert printable(42) == "42"
    assert printable_lines("rooms:\n  a\x1bb\n  c") == ["rooms:", "  a\\x1bb", "  c"]


def welcome(**kw: object) -> dict:
    return {"type": "welcome", "site": "A", "user": "alice", "sites": {"A": "connected", "B": "connected"},
            "rooms": [], "presence": {"A": ["alice"], "B": []}, **kw}


def message(text: str, *, user: str = "bob", room: str = "ops", origin: str = "B", seq: int = 1) -> dict:
    return {"type": "message", "room": room, "msg_id": f"{origin}:{seq}", "origin": origin, "user": user,
            "text": text, "sent_at": T0 + seq, "order": [seq, origin], "late": False, "n": seq}


def test_plain_client_prints_server_text_as_one_escaped_line() -> None:
    out = io.StringIO()
    client = PlainClient("ws://127.0.0.1:9/ws", "alice", "pw", out, timefmt=lambda t: "12:00:00")
    client._on_frame(welcome(sites={"A": "connected", "B\x1b[2J": "suspected\nsite A disconnected"}))
    client._on_frame({"type": "joined", "room": "ops", "history": [], "more": False})
    client._on_frame(message(NASTY))
    client._on_frame(message("hi", user="eve\ncommander@A", seq=2))
    client._on_frame({"type": "presence", "site": "B", "online": ["mallory\ncommander@A: ABORT"], "offline": []})
    client._on_frame({"type": "error", "code": "bad_field", "message": "no such room 'x\ncommander@A: ABORT'"})
    client._on_frame({"type": "rooms", "rooms": [{"room": "ops\ncommander@A: ABORT", "members": 2, "online": 1}]})
    client._on_frame({"type": "left", "room": "ops", "reason": "kicked\ncommander@A: ABORT"})
    client._on_frame({"type": "missing", "origin": "C\ncommander@A: ABORT", "count": 1})
    client._on_status(LinkStatus(RETRYING, "lost: bye\ncommander@A: ABORT\x1b[2J", 1, 0.5))
    lines = out.getvalue().split("\n")
    assert lines[-1] == ""
    lines = lines[:-1]
    bad = [line for line in lines if UNSAFE.search(line) or line.startswith("commander@A")]
    assert bad == [], lines
    assert "12:00:00 [ops] bob@B: all clear\\ncommander@A: ABORT\\r\\x1b[2J\\x1b]0;pwned\\x07\\x9b31m\\x7f" \
           "\\u202eevil\\u2066x\\u2069\\u2028y\\ud800" in lines
    assert "12:00:00 [ops] eve\\ncommander@A@B: hi" in lines
    assert "sites: A connected, B\\x1b[2J unknown" in lines       # not a status's name: unknown (contracts.status)
    assert "connection: unreachable (lost: bye\\ncommander@A: ABORT\\x1b[2J); retry 1 in 0.5 s" in lines
    # One line each: the message, presence, error, rooms listing, left, missing and connection lines.
    assert sum("ABORT" in line for line in lines) == 7


async def test_tui_message_text_is_neither_markup_nor_line_breaks() -> None:
    app = ChatApp("ws://127.0.0.1:9/ws", "alice", clock=lambda: T0 + 60, timefmt=lambda t: "12:00:00",
                  connect=False)
    async with app.run_test(size=(100, 30)) as pilot:
        app.apply_frame(welcome())
        app.apply_frame({"type": "joined", "room": "ops", "history": [], "more": False})
        await pilot.pause()
        app.apply_frame(message(MARKUP + " " + NASTY))
        app.apply_frame({"type": "error", "code": "bad_field", "message": "bad 'x\ncommander@A: ABORT\x1b[2J'"})
        await pilot.pause()
        line = str(app.query_one(MessageLine).render())
        assert line == "12:00:00 bob@B: " + MARKUP + " " + printable(NASTY)
        notice = str(list(app.query(NoticeLine))[-1].render())
        assert notice == "error bad_field: bad 'x\\ncommander@A: ABORT\\x1b[2J'"
        assert not UNSAFE.search(app.export_screenshot().replace("\n", ""))


async def test_tui_server_strings_are_never_markup() -> None:
    app = ChatApp("ws://127.0.0.1:9/ws", "alice", clock=lambda: T0 + 60, connect=False)
    async with app.run_test(size=(100, 30)) as pilot:
        # A site name and a status from the server; a close reason in the link state.
        app.apply_frame(welcome(site="[@click=app.quit]A[/]", sites={"[@click=app.quit]A[/]": "connected"}))
        app.post_message(ChatApp.LinkChanged(LinkStatus(RETRYING, f"lost: {MARKUP}\nx", 1, 2.0)))
        # An error with no room open becomes a notification.
        app.apply_frame({"type": "error", "code": "bad_field", "message": MARKUP + "\x1b[2J"})
        await pilot.pause()
        site = app.query(".site").last()
        assert "[@click=app.quit]A[/]" in str(site.render())
        state = str(app.query_one("#link-state", Static).render())
        assert MARKUP + "\\nx" in state
        note = list(app._notifications)[-1]
        assert not note.markup and note.message == f"error bad_field: {MARKUP}\\x1b[2J"
        # The login screen's error (the server's refusal) too.
        app.push_screen(LoginScreen("ws://127.0.0.1:9/ws", "alice", f"refused: {MARKUP}\x1b[2J"))
        await pilot.pause()
        error = app.screen.query_one("#login-error", Static)
        assert str(error.render()) == f"refused: {MARKUP}\\x1b[2J"
