"""An IRC fan-out (irc_fanout.py ``FanLine``): one message frame shown to many sessions is formatted once per rendering
(the same bytes object for sessions that render it alike), and every session still keeps its own state: what it
was shown, the line above for the next ORDER mark, the urgent lines it must acknowledge, its own line unshared."""
from __future__ import annotations

from chat_server.irc import IrcSession
from chat_server.irc_messages import Quotes
from chat_server.irc_state import NickLists, Presence, Send

MEMBERS = {"alice", "bob", "carol", "dave", "erin", "gwen", "hank", "ivan"}


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


def _mission_run(in_step: bool, monkeypatch, runs: bool = False,
                 chains: list[int] | None = None) -> tuple[list[list[str]], list[dict], list[dict], int]:
    """One scripted stretch of a busy channel for eight sessions: what each was sent, its delivery marks, the
    line above per room once settled, and how many lines were shown in step. ``runs``: the frames fanned out
    between two other steps go to each session in turn as a run, all of them to the first session, then all
    to the next (as a held turn fans them out: sessions.Sessions.fan_held), rather than each frame to every
    session before the next frame. ``chains`` (with ``runs``): each session is first asked for the lines
    chained from where it stands in the run at once, as the IRC edge does (irc_server.py
    ``IrcConnection.write_run``, ``IrcSession.in_step_run``); the lines shown so are counted in it."""
    import chat_server.irc as irc
    from chat_server.irc_fanout import FanRun, fanout_line
    hits = [0]
    real = irc.IrcSession.in_step

    def counted(self, line):
        out = real(self, line) if in_step else None
        hits[0] += out is not None
        return out
    monkeypatch.setattr(irc.IrcSession, "in_step", counted)
    shared = (Quotes(), Presence(), NickLists())
    sessions = [_session("alice", "", *shared), _session("carol", "", *shared),
                _session("dave", "message-tags server-time", *shared), _session("erin", "server-time", *shared),
                _session("bob", "", *shared), _session("gwen", "", *shared),
                _session("hank", "message-tags server-time", *shared), _session("ivan", "", *shared)]
    sent: list[list[str]] = [[] for _ in sessions]

    def record(i: int, actions: list) -> None:
        sent[i] += [a.data.decode() if isinstance(a, Send) else repr(a) for a in actions]

    pending: list[tuple[dict, float]] = []

    def flush() -> None:
        run = FanRun([fanout_line(f) if f["type"] == "message" else None for f, _ in pending]) \
            if chains is not None else None
        for i, s in enumerate(sessions):
            k = 0
            while k < len(pending):
                f, after = pending[k]
                if run is not None and run.ends[k] > k + 1 and (got := s.in_step_run(run, k)) is not None:
                    sent[i].append(got[0].decode())
                    chains[0] += got[1] - k
                    k = got[1]
                    continue
                record(i, s.on_frame(f, f.get("sent_at", 2000.0) + after))
                k += 1
        pending.clear()

    def fan(f: dict, after: float = 0.5) -> None:
        pending.append((f, after))
        if not runs:
            flush()

    def at(i: int, step) -> None:
        flush()
        record(i, step(sessions[i]))

    def line(n: int, user: str = "bob", sent: float | None = None, **more) -> dict:
        f = {"type": "message", "room": "ops", "origin": "A", "user": user, "msg_id": f"A:{n}", "n": n,
             "text": f"line {n}", "precedence": "routine", **more}
        if sent is not None:
            f["sent_at"] = sent
        return f
    for n in range(1, 5):
        fan(line(n, sent=1000.0 + n))
    fan(line(5, user="zed", sent=1005.0))              # a speaker no nick list had: JOIN, then its line
    fan(line(6, sent=1006.0))
    fan(line(7, sent=1003.0))                          # older than the line above: an ORDER mark
    fan(line(8, sent=1008.0))
    at(1, lambda s: s.receive(b"CAP REQ :server-time", 0))     # carol's rendering changes mid-stream
    fan(line(9, sent=1009.0))
    fan(line(10, sent=1010.0))
    fan(line(11, user="alice", sent=1011.0))           # alice's own line (no say open: shown, unshared)
    fan(line(12, sent=1012.0))
    fan(line(13, sent=1013.0, precedence="flash"))     # urgent: each session notes it for !ack
    fan(line(14, sent=1014.0))
    fan(line(15))                                      # no sent_at
    fan(line(16, sent=1016.0))
    fan({"type": "presence", "site": "B", "online": ["frank"], "offline": []})
    fan(line(17, user="frank", sent=1017.0))
    fan(line(18, sent=1018.0, reply_to="A:17"))        # a reply: quotes line 17
    for i in (0, 7):                                   # alice and ivan (the first and last to read) leave
        at(i, lambda s: s.receive(b"PART #ops", 0))
        at(i, lambda s: s.on_frame({"type": "left", "room": "ops", "id": "irc3"}, 0))
    for n in range(19, 22):
        fan(line(n, sent=1000.0 + n))
    for i in (0, 7):                                   # and come back
        at(i, lambda s: s.receive(b"JOIN #ops", 0))
        at(i, lambda s: s.on_frame({"type": "joined", "room": "ops", "id": "irc4", "history": [
            line(n, sent=1000.0 + n) for n in range(17, 21)]}, 2022.0))     # (line 21 not in its history)
    fan(line(22, sent=1020.5))          # alice reads first: no ORDER mark below line 20, one below 21 for the rest
    fan(line(23, sent=1023.0))
    at(0, lambda s: s.receive(b"NAMES #ops", 0))               # a command between lines
    fan(line(24, sent=1024.0))
    fan(line(25, sent=1025.0))
    fan(line(26, user="frank", sent=1026.0))           # listed since the presence frame, but not by ivan: JOIN
    fan(line(27, sent=1027.0, late=True), after=90.0)  # late: marked for all but its author (bob)
    at(4, lambda s: s.receive(b"NAMES #ops", 0))
    fan(line(28, sent=1028.0))
    fan(line(29, user="gwen", sent=1029.0, late=True), after=90.0)     # gwen's own late line, between
    fan(line(30, sent=1030.0))                                         # two others, read after alice's
    flush()
    marks = [dict(s.shown) for s in sessions]
    for s in sessions:
        s._settle()
    return sent, marks, [dict(s._above) for s in sessions], hits[0]


def test_sessions_in_step_show_and_note_exactly_what_the_full_path_would(monkeypatch) -> None:
    """The in-step path (irc.py ``IrcSession.in_step``) is a shortcut, never a difference: a scripted stretch of a busy
    channel (unlisted speakers, an ORDER mark, a capability change, an own line, an urgent line, a line
    without a time, presence, a reply, a part and a rejoin with history) sends every session the same bytes,
    leaves it the same delivery marks and the same line above as the full path alone, and most lines go in
    step."""
    sent, marks, above, hits = _mission_run(True, monkeypatch)
    sent_full, marks_full, above_full, none = _mission_run(False, monkeypatch)
    assert none == 0 and hits >= 30, hits
    for i, (got, want) in enumerate(zip(sent, sent_full)):
        assert got == want, i
    assert marks == marks_full and above == above_full
    assert marks[1]["ops"] == 30 and above[1]["ops"] == 1030.0


def test_runs_of_lines_to_each_session_in_turn_show_what_lines_to_every_session_in_turn_would(monkeypatch) -> None:
    """A held turn hands each session a run of lines before the next session (sessions.Sessions.fan_held): the
    lines' shared readings are kept for the run (irc.py ``fanout_line``), so sessions still go in step, and
    each session is sent the same bytes and left the same marks as when every line went to all in turn."""
    sent, marks, above, hits = _mission_run(True, monkeypatch, runs=True)
    sent_full, marks_full, above_full, _ = _mission_run(False, monkeypatch)
    assert hits >= 30, hits
    for i, (got, want) in enumerate(zip(sent, sent_full)):
        assert got == want, i
    assert marks == marks_full and above == above_full


def test_a_session_in_step_takes_the_lines_chained_in_a_run_at_once_as_it_would_one_by_one(monkeypatch) -> None:
    """The IRC edge asks a session in step for every line chained from where it stands in a held turn's run at
    once (irc_fanout.py ``FanRun``, ``IrcSession.in_step_run``): each session is sent the same bytes, in the
    same order, and left the same marks and line above as when each line went to it alone; and the chains
    carry most of the lines."""
    chained = [0]
    sent, marks, above, _ = _mission_run(True, monkeypatch, runs=True, chains=chained)
    sent_full, marks_full, above_full, _ = _mission_run(False, monkeypatch)
    for i, (got, want) in enumerate(zip(sent, sent_full)):
        assert "".join(got) == "".join(want), i
    assert marks == marks_full and above == above_full
    assert chained[0] >= 25, chained            # 30 of the lines to the 8 sessions went in chains


def test_a_run_chains_the_lines_following_one_another_in_their_room_and_joins_their_bytes_once_all_have_them() -> None:
    from chat_server.irc_fanout import FANNED_KEPT, FanLine, FanRun

    def ln(n: int, user: str = "bob") -> FanLine:
        return FanLine({"type": "message", "room": "ops", "user": user, "msg_id": f"A:{n}", "n": n,
                        "sent_at": 1000.0 + n})
    a, b, c, d, e = ln(1), ln(2, "carol"), ln(3), ln(4), ln(5)
    b.prev, c.prev, e.prev = a, b, d          # d follows nothing of this run (another server's line, say)
    run = FanRun([a, b, c, d, e, None])
    assert run.ends == [3, 3, 3, 5, 5, 6]
    assert run.users(0) == {"bob", "carol"} and run.users(3) == {"bob"} and run.top(0) == 3 and run.top(5) is None
    key = ("plain", None)
    a.stepped[key], b.stepped[key] = b"1\r\n", b"2\r\n"
    assert run.joined(0, key) is None         # line 3 has no in-step bytes yet: nothing joined, nothing kept
    c.stepped[key] = b"3\r\n"
    assert run.joined(0, key) == b"1\r\n2\r\n3\r\n" and run.joined(1, key) == b"2\r\n3\r\n"
    assert run.joined(0, ("tagged", None)) is None
    long = [ln(n) for n in range(FANNED_KEPT + 1)]
    for x, y in zip(long, long[1:]):
        y.prev = x
    assert FanRun(long).ends == list(range(1, len(long) + 1))     # longer than the lines kept: no chains
