"""An IRC fan-out (irc.py ``_Line``): one message frame shown to many sessions is formatted once per rendering
(the same bytes object for sessions that render it alike), and every session still keeps its own state: what it
was shown, the line above for the next ORDER mark, the urgent lines it must acknowledge, its own line unshared."""
from __future__ import annotations

from chat_server.irc import IrcSession
from chat_server.irc_messages import Quotes
from chat_server.irc_state import NickLists, Presence, Send

MEMBERS = {"alice", "bob", "carol", "dave"}


def _session(nick: str, caps: str, quotes: Quotes, presence: Presence, nick_lists: NickLists) -> IrcSession:
    s = IrcSession(server_name="A.irc.t", site="A", network="t", members_of=lambda room: MEMBERS, quotes=quotes,
                   presence=presence, nick_lists=nick_lists)
    if caps:
        s.receive(b"CAP LS 302", 0)
        s.receive(f"CAP REQ :{caps}".encode(), 0)
    for line in (b"PASS secret", f"NICK {nick}".encode(), f"USER {nick} 0 * :A".encode(), b"CAP END"):
        s.receive(line, 0)
    s.on_frame({"type": "welcome", "site": "A", "user": nick, "sites": {"A": "connected"}, "rooms": [],
                "presence": {"A": sorted(MEMBERS)}}, 0)
    s.on_frame({"type": "joined", "room": "ops", "history": []}, 0)
    return s


def _sends(actions: list) -> list[bytes]:
    return [a.data for a in actions if isinstance(a, Send)]


def test_a_fanout_line_is_formatted_once_per_rendering_and_each_session_keeps_its_own_state() -> None:
    shared = (Quotes(), Presence(), NickLists())
    plain_a, plain_b = _session("alice", "", *shared), _session("carol", "", *shared)
    tagged = _session("dave", "message-tags server-time", *shared)
    author = _session("bob", "", *shared)
    f = {"type": "message", "room": "ops", "origin": "A", "user": "bob", "msg_id": "A:7", "n": 7, "sent_at": 1000.0,
         "text": "move now", "precedence": "flash", "acknowledgements": [{"user": "carol"}]}
    a, b, t = (_sends(s.on_frame(f, 1000.5)) for s in (plain_a, plain_b, tagged))
    assert a == b and a[0] is b[0]                     # one rendering, one bytes object for both
    assert t[0] is not a[0] and b"msgid=A:7" in t[0] and b"msgid" not in a[0]
    assert b"PRIVMSG #ops" in a[0] or b"NOTICE #ops" in a[0]
    for s in (plain_a, plain_b, tagged):
        assert s.shown["ops"] == 7 and s._above["ops"] == 1000.0
    assert "A:7" in plain_a._urgent and "A:7" in tagged._urgent
    assert "A:7" not in plain_b._urgent               # carol acknowledged it already
    assert shared[0].room_of("A:7") == "ops"           # the front end's quotes remember it (once)
    # The author's own session (echo-message off, no say open): shown, marked as its own, never a shared line.
    author._says_in_flight = 0
    own = _sends(author.on_frame(f, 1000.5))
    assert own and own[0] is not a[0] and author.shown["ops"] == 7 and "A:7" not in author._urgent
    # The next line's rendering depends on the line above (per session): a new frame, new shared bytes.
    g = dict(f, msg_id="A:8", n=8, sent_at=1001.0, precedence="routine", acknowledgements=[])
    a2, b2 = (_sends(s.on_frame(g, 1001.5)) for s in (plain_a, plain_b))
    assert a2[0] is b2[0] and a2[0] != a[0] and plain_a.shown["ops"] == 8
    # Acknowledgements as a frame may carry them, odd entries included: only a user's name counts.
    h = dict(f, msg_id="A:9", n=9, sent_at=1002.0, acknowledgements=[{"user": ["alice"]}, "alice", {"user": "carol"}])
    for s in (plain_a, plain_b):
        s.on_frame(h, 1002.5)
    assert "A:9" in plain_a._urgent and "A:9" not in plain_b._urgent
