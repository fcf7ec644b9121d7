"""IRC lines and the text in them: lines parse and format as RFC 2812 says, long and multi-line texts split
within the limit, another client's control characters reach IRC clients as visible symbols (never as codes),
and an IRC user's formatting and CTCP are not said."""
from __future__ import annotations

import pytest
from irc_testing import _joined_session, _lines

from chat_server.irc_state import Request, Send
from chat_server.ircline import format_line, parse_line, split_text

pytestmark = pytest.mark.timeout(60)


def test_lines_parse_and_format_as_rfc_2812_says() -> None:
    line = parse_line(b"@time=x :nick!u@h PRIVMSG #ops :hello there :)")
    assert (line.prefix, line.command, line.params) == ("nick!u@h", "PRIVMSG", ("#ops", "hello there :)"))
    assert parse_line(b"join #a,#b").params == ("#a,#b",)
    assert format_line("srv", "001", "alice", "Welcome home") == b":srv 001 alice :Welcome home\r\n"
    # A newline inside a parameter can never start a second line (a forged "commander" line).
    assert format_line("bob!bob@B", "PRIVMSG", "#ops", "hi\r\n:commander!c@A PRIVMSG #ops :ABORT").count(b"\r\n") == 1


def test_long_and_multi_line_texts_split_into_lines_within_the_limit() -> None:
    text = "first line\n" + "é" * 500
    parts = split_text(text, 100)
    assert parts[0] == "first line"
    assert all(len(p.encode()) <= 100 for p in parts)
    assert "".join(parts[1:]) == "é" * 500


# Text a WebSocket (or TUI) user may send, that IRC clients would obey: CTCP (a DCC offer every client in the
# channel answers), a terminal's ESC sequences (clear the screen, retitle the window), colour and format codes,
# a C1 CSI, a bidi override, DEL, NUL, and a line break that tries to forge a line of another user.
HOSTILE = ("\x01DCC SEND evil 3232235777 6666 1\x01 \x1b[2J\x1b]0;owned\x07 \x0304,12red\x0f \x02bold\x1d "
           "\x16\x1f\x1e\x11 \x9b31m \u202egnp.exe\x7f\x00\r\n:carol!carol@A PRIVMSG #ops :forged")


# ... as IRC clients get it: the control pictures (U+2400 + code, DEL U+2421) and the TUI's escapes, one line
# per line of the text, the second still bob's.
SHOWN = ["\u2401DCC SEND evil 3232235777 6666 1\u2401 \u241b[2J\u241b]0;owned\u2407 \u240304,12red\u240f "
         "\u2402bold\u241d \u2416\u241f\u241e\u2411 \\x9b31m \\u202egnp.exe\u2421\u2400",
         ":carol!carol@A PRIVMSG #ops :forged"]


CONTROLS = {*map(chr, range(0x20)), *map(chr, range(0x7F, 0xA0)), "\u202e", "\u2028", "\u2029"}


def obeyed(line: str) -> set[str]:
    """The characters of an IRC line that a client would act on instead of printing."""
    return set(line) & CONTROLS


def test_another_clients_controls_reach_irc_clients_as_visible_symbols_never_as_codes() -> None:
    s = _joined_session()
    base = {"type": "message", "room": "ops", "origin": "B", "user": "bob", "sent_at": 1000.0, "order": [5, "B"]}
    out = s.on_frame(dict(base, msg_id="B:1", text=HOSTILE), 1000.0)
    raw = b"".join(a.data for a in out if isinstance(a, Send))
    assert raw.count(b"\r\n") == 2 and raw.count(b"\r") == 2 and raw.count(b"\n") == 2    # two lines, both bob's
    assert _lines(out) == [f":bob!bob@B PRIVMSG #ops :{SHOWN[0]}", f":bob!bob@B PRIVMSG #ops :{SHOWN[1]}"]
    # The same in a NOTICE (a flash message) and in the history replayed on join.
    flash = _lines(s.on_frame(dict(base, msg_id="B:2", text=HOSTILE, precedence="flash"), 1000.0))
    assert flash == [f":bob!bob@B NOTICE #ops :[FLASH B:2] {SHOWN[0]}",
                     f":bob!bob@B NOTICE #ops :[FLASH B:2] {SHOWN[1]}"]
    joined = _lines(s.on_frame({"type": "joined", "room": "intel", "history": [dict(base, msg_id="B:1",
                                                                                      text=HOSTILE)]}, 0))
    replayed = [line.split("<bob@B> ", 1)[1] for line in joined if "NOTICE #intel :[history" in line]
    assert replayed == SHOWN and not any(map(obeyed, joined))
    # Any parameter of any line: no control leaves format_line.
    assert not obeyed(format_line("srv", "NOTICE", "#ops", "\x01VERSION\x01 \x1b[2J \x9b").decode().rstrip("\r\n"))


def test_an_irc_users_formatting_is_dropped_and_its_ctcp_is_not_said() -> None:
    s = _joined_session()

    def said(line: bytes) -> list[str]:
        return [a.frame["text"] for a in s.receive(line, 1.0) if isinstance(a, Request)]
    assert said(b"PRIVMSG #ops :\x02tanker\x02 on \x0304,12station\x03 \x1dnow\x0f") == ["tanker on station now"]
    assert said(b"PRIVMSG #ops :\x01ACTION \x02waves\x02\x01") == ["* alice waves"]
    assert said(b"PRIVMSG #ops :\x01VERSION\x01") == []                  # CTCP requests are not chat
    assert said(b"PRIVMSG #ops :\x02\x0304\x0f") == []                     # formatting alone: nothing to say


def test_an_action_said_as_its_author_reaches_irc_clients_as_an_action_and_its_text_never_as_codes() -> None:
    s = _joined_session()
    base = {"type": "message", "room": "ops", "origin": "B", "user": "bob", "sent_at": 1000.0, "order": [5, "B"]}

    def shown(n: int, text: str, **more: object) -> list[str]:
        return _lines(s.on_frame(dict(base, msg_id=f"B:{n}", text=text, **more), 1000.0))
    assert shown(1, "* bob waves") == [":bob!bob@B PRIVMSG #ops :\x01ACTION waves\x01"]
    # Only the two delimiters are controls: a CTCP inside the text is shown, not obeyed.
    line = shown(2, "* bob \x01DCC SEND evil 1 2 3\x01 \x1b[2J")[0]
    assert line == ":bob!bob@B PRIVMSG #ops :\x01ACTION \u2401DCC SEND evil 1 2 3\u2401 \u241b[2J\x01"
    assert obeyed(line.removeprefix(":bob!bob@B PRIVMSG #ops :\x01ACTION ").removesuffix("\x01")) == set()
    # Not an action: another nick's, a text of several lines, the bare mark; an alert stays a marked NOTICE.
    assert shown(3, "* carol waves") == [":bob!bob@B PRIVMSG #ops :* carol waves"]
    assert shown(4, "* bob waves\nand leaves") == [":bob!bob@B PRIVMSG #ops :* bob waves",
                                                     ":bob!bob@B PRIVMSG #ops :and leaves"]
    assert shown(5, "* bob ") == [":bob!bob@B PRIVMSG #ops :* bob "]
    assert shown(6, "* bob waves", precedence="flash") == [":bob!bob@B NOTICE #ops :[FLASH B:6] * bob waves"]
    # With message-tags the action keeps its tags.
    tagged = _joined_session("message-tags")
    assert _lines(tagged.on_frame(dict(base, msg_id="B:7", text="* bob waves"), 1000.0)) == [
        "@msgid=B:7 :bob!bob@B PRIVMSG #ops :\x01ACTION waves\x01"]


async def test_a_websocket_users_ctcp_and_escapes_reach_irc_clients_shown_not_obeyed(sites) -> None:
    s = await sites()
    irc, bob = await s.alice_and_bob_in_ops()
    await bob.say("ops", HOSTILE)
    assert await irc.expect(lambda l: "DCC SEND" in l) == f":bob!bob@B PRIVMSG #ops :{SHOWN[0]}"
    assert await irc.expect(lambda l: "forged" in l) == f":bob!bob@B PRIVMSG #ops :{SHOWN[1]}"
    # The WebSocket side keeps the text as it was said; IRC users' own formatting never reaches it.
    got = await bob.wait_for(lambda f: f["type"] == "message" and f["text"] == HOSTILE, 10)
    assert got["user"] == "bob"
    irc.send("PRIVMSG #ops :\x02plain\x02 \x0304now\x03")
    got = await bob.wait_for(lambda f: f["type"] == "message" and f["user"] == "alice", 10)
    assert got["text"] == "plain now"
