"""Textual pilot tests of what operators expect (issue 21) and precedence alerts (issue 19).

Against the real two-site mission (conftest.py): the directory at login and a join in one
keystroke, search with a private room's canary that must not show and a result that goes to
the message in context (with a gap filled), a mention while offline shown at login, read
markers crossing between the TUI and another session of the same user, FLASH alerts that ring
until acknowledged and the acknowledgement list on the sender's line. On fed frames: a reply to
a late line whose original arrives after the reply.
"""
from __future__ import annotations

import asyncio
import itertools
import os
import time
from pathlib import Path
from typing import Any

import pytest
from testkit import wait_until
from textual.widgets import Input, OptionList, Static
from tui_servers import PASSWORD, TuiSites

from chat_server.client import ChatClient
from chat_tui.app import ChatApp, GapLine, MessageLine
from chat_tui.link import Backoff, LinkStatus

SIZE = (110, 34)
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "tui"
_rooms = itertools.count(1)


@pytest.fixture(autouse=True, scope="module")
def artifacts() -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)


def fresh(prefix: str) -> str:
    return f"{prefix}-{os.getpid()}-{next(_rooms)}"


async def type_line(pilot: Any, text: str) -> None:
    pilot.app.query_one("#input", Input).value = text
    await pilot.press("enter")


def line(app: ChatApp, text: str) -> MessageLine | None:
    return next((w for w in app.query(MessageLine) if w.entry.text == text), None)


def option_index(box: OptionList, option_id: str) -> int:
    return next(i for i in range(box.option_count) if box.get_option_at_index(i).id == option_id)


def screen_text(app: ChatApp) -> str:
    return app.export_screenshot()


def new_app(mission: TuiSites, site: str, user: str, **kw: Any) -> ChatApp:
    app = ChatApp(mission.url(site), user, PASSWORD, backoff=Backoff(initial=0.1, maximum=0.5, jitter=0.0), **kw)
    app.bells = 0                                                    # type: ignore[attr-defined]

    def bell() -> None:
        app.bells += 1                                               # type: ignore[attr-defined]
    app.bell = bell                                                  # type: ignore[method-assign]
    return app


async def client(mission: TuiSites, site: str, user: str) -> ChatClient:
    return await ChatClient.connect(mission.url(site), user, PASSWORD)


async def test_directory_is_shown_at_login_and_enter_joins(mission: TuiSites) -> None:
    room = fresh("dir")
    bob = await client(mission, "B", "bob")
    try:
        await bob.join(room)
        await bob.say(room, "grid ready at 0300")
        app = new_app(mission, "A", "erin")
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(lambda: any(r["room"] == room for r in app.state.directory or []), "the directory",
                             pause=pilot.pause)
            box = app.query_one("#directory", OptionList)
            assert str(app.query_one("#directory-title").render()).startswith("Directory (")
            box.focus()
            box.highlighted = option_index(box, f"dir:{room}")
            await pilot.press("enter")
            await wait_until(lambda: line(app, "grid ready at 0300") is not None, "the room joined and shown",
                             pause=pilot.pause)
            assert app.state.active == room and room in app.state.joined_rooms()
            label = str(box.get_option_at_index(option_index(box, f"dir:{room}")).prompt)
            assert label.startswith("✓ ")
    finally:
        await bob.close()


async def test_search_never_shows_a_private_room_and_goes_to_a_result_in_context(mission: TuiSites) -> None:
    cell, archive, token = fresh("cell"), fresh("archive"), f"tok{os.getpid()}x{next(_rooms)}"
    alice, bob = await client(mission, "A", "alice"), await client(mission, "B", "bob")
    try:
        await alice.create(cell, ["bob"])
        for _ in range(100):
            try:
                await bob.join(cell)
                break
            except Exception:
                await asyncio.sleep(0.05)                            # the definition is on its way to B
        await bob.say(cell, f"CANARY {token} kept in the cell")
        await alice.join(archive)
        for prefix, n in (("earlier", 30), ("needle", 1), ("filler", 80)):
            for start in range(0, n, 20):
                texts = [f"zebra {token}" if prefix == "needle" else f"{prefix} {i:02d}"
                         for i in range(start, min(n, start + 20))]
                await asyncio.gather(*(alice.say(archive, t) for t in texts))
        app = new_app(mission, "A", "erin")                          # erin is not a member of the cell
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(lambda: app.link_status.state == "connected", "connected", pause=pilot.pause)
            await type_line(pilot, f"/join {archive}")
            await wait_until(lambda: line(app, "filler 79") is not None, "the archive's last page", pause=pilot.pause)
            for query in ("CANARY", "canar*", f"{token} kept"):
                await type_line(pilot, f"/search {query}")
                await wait_until(lambda: app.state.search is not None and app.state.search.status == "done",
                                 f"results for {query}", pause=pilot.pause)
                assert app.state.search.results == []
                assert "in the cell" not in screen_text(app)          # the canary's text, anywhere on screen
            await type_line(pilot, f"/search {token}")
            await wait_until(lambda: app.state.search.status == "done" and app.state.search.results, "a result",
                             pause=pilot.pause)
            assert [m["text"] for m in app.state.search.results] == [f"zebra {token}"]
            results = app.query_one("#results", OptionList)
            assert results.display and "in the cell" not in screen_text(app)
            results.focus()
            results.highlighted = 1
            await pilot.press("enter")
            await wait_until(lambda: line(app, f"zebra {token}") is not None
                             and line(app, f"zebra {token}").has_class("jumped"),
                             "the message, in context", pause=pilot.pause)
            assert line(app, f"zebra {token}").has_class("selected")
            await wait_until(lambda: len(app.query(GapLine)) == 1, "a gap between the page and the last 50",
                             pause=pilot.pause)
            app.query_one(GapLine).scroll_visible(animate=False)
            await pilot.pause()
            await pilot.click(GapLine)
            await wait_until(lambda: len(app.query(GapLine)) == 0, "the gap filled", pause=pilot.pause)
            texts = [w.entry.text for w in app.query(MessageLine)]
            assert texts[texts.index(f"zebra {token}") + 1:] == [f"filler {i:02d}" for i in range(80)]
            await pilot.press("escape")
            assert not app.query_one("#results", OptionList).display
    finally:
        await alice.close()
        await bob.close()


async def test_a_mention_while_away_is_a_badge_at_login_and_read_markers_cross_sessions(mission: TuiSites) -> None:
    first, busy = fresh("0first"), fresh("zmention")
    dora = await client(mission, "B", "dora")
    alice, bob = await client(mission, "A", "alice"), await client(mission, "B", "bob")
    try:
        for room in (first, busy):
            await dora.join(room)
            await alice.join(room)
        await bob.join(busy)
        await dora.close()
        await alice.say(busy, "@dora please confirm the grid")
        await alice.say(busy, "@dora@A is nobody; this one is for everyone")
        await alice.say(busy, "and a plain line")
        await bob.wait_for(lambda f: f.get("text") == "and a plain line", 10)      # delivered at B
        app = new_app(mission, "B", "dora")
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(lambda: busy in app.state.rooms and app.state.rooms[busy].joined
                             and app.state.active == first, "logged in, in the first room", pause=pilot.pause)
            rooms = app.query_one("#rooms", OptionList)
            label = lambda room: str(rooms.get_option_at_index(option_index(rooms, room)).prompt)  # noqa: E731
            await wait_until(lambda: "(3)" in label(busy) and "@1" in label(busy), "the badges at login",
                             pause=pilot.pause)
            live = await alice.say(busy, "@dora and now live")
            await wait_until(lambda: "@2" in label(busy), "the live mention counted", pause=pilot.pause)
            assert app.bells >= 1                                    # type: ignore[attr-defined]
            other = await client(mission, "B", "dora")              # dora's other session (a browser, say)
            try:
                await type_line(pilot, f"/switch {busy}")
                got = await other.wait_for(lambda f: f.get("type") == "read" and f.get("room") == busy, 5)
                assert got["order"] == (await alice.history(busy))["messages"][-1]["order"]
                mention = line(app, "@dora please confirm the grid")
                assert mention.has_class("mention")
                assert not line(app, "@dora@A is nobody; this one is for everyone").has_class("mention")
                assert "(" not in label(busy)
                # The other way: a line in the first room, read in the other session, clears the TUI's badge.
                await alice.say(first, "@dora over here")
                await wait_until(lambda: "(1)" in label(first), "a badge on the first room", pause=pilot.pause)
                msg = await other.wait_for(lambda f: f.get("text") == "@dora over here", 5)
                started = time.monotonic()
                await other.request({"type": "mark_read", "room": first, "order": msg["order"]})
                await wait_until(lambda: "(" not in label(first) and "@" not in label(first), "the badge cleared",
                                 pause=pilot.pause)
                assert time.monotonic() - started < 1.0
            finally:
                await other.close()
            assert live["msg_id"]
    finally:
        await alice.close()
        await bob.close()


async def test_flash_rings_until_acknowledged_and_the_sender_sees_who_and_when(mission: TuiSites) -> None:
    room = fresh("flash")
    bob = await client(mission, "B", "bob")
    offset = [0.0]
    try:
        await bob.join(room)
        app = new_app(mission, "A", "carol", clock=lambda: time.time() + offset[0])
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(lambda: app.link_status.state == "connected", "connected", pause=pilot.pause)
            await type_line(pilot, f"/join {room}")
            await wait_until(lambda: app.state.active == room and app.state.rooms[room].joined, "joined",
                             pause=pilot.pause)
            flash = await bob.request({"type": "say", "room": room, "text": "MEDEVAC at grid 123", "client_id": "f1",
                                       "precedence": "flash"})
            await wait_until(lambda: line(app, "MEDEVAC at grid 123") is not None, "the FLASH line", pause=pilot.pause)
            bar = app.query_one("#alerts", Static)
            assert bar.display and "FLASH" in str(bar.render()) and "bob@B in " in str(bar.render())
            medevac = line(app, "MEDEVAC at grid 123")
            assert medevac.has_class("alert") and medevac.has_class("flash")
            assert app.bells == 1                                    # type: ignore[attr-defined]
            app.save_screenshot("flash-alert.svg", path=str(ARTIFACTS))
            app.tick()
            offset[0] = 16.0                                         # 16 s later, still not acknowledged: again
            app.tick()
            assert app.bells == 2                                    # type: ignore[attr-defined]
            await pilot.press("f2")
            got = await bob.wait_for(lambda f: f.get("type") == "acknowledged"
                                     and f.get("msg_id") == flash["msg_id"], 10)
            assert (got["user"], got["site"]) == ("carol", "A")
            await wait_until(lambda: not bar.display and not medevac.has_class("alert"), "the alert ended",
                             pause=pilot.pause)
            # carol's own FLASH: bob acknowledges it; her line lists who, where and when.
            await type_line(pilot, "/flash ABORT the run, acknowledge")
            mine = await bob.wait_for(lambda f: f.get("text") == "ABORT the run, acknowledge", 10)
            assert mine["precedence"] == "flash"
            await bob.request({"type": "acknowledge", "msg_id": mine["msg_id"]})
            await wait_until(lambda: line(app, "ABORT the run, acknowledge") is not None
                             and "acknowledged by bob@B" in str(line(app, "ABORT the run, acknowledge").render()),
                             "bob's acknowledgement on carol's line", pause=pilot.pause)
            app.save_screenshot("flash-acknowledged.svg", path=str(ARTIFACTS))
    finally:
        await bob.close()


async def test_the_line_client_alerts_acknowledges_searches_and_shows_replies(mission: TuiSites) -> None:
    from test_tui_plain import LineReader, plain, send
    room, token = fresh("plain"), f"plainword{os.getpid()}"
    alice = await client(mission, "A", "alice")
    proc = plain(mission.url("B"), "dora")
    out = LineReader(proc)
    try:
        await alice.join(room)
        out.expect(r"^connection: connected")
        send(proc, f"/join {room}")
        first = await alice.say(room, f"grid {token} ready")
        await asyncio.to_thread(out.expect, rf"\[{room}\] alice@A: grid {token} ready")
        await alice.request({"type": "say", "room": room, "text": "copy that", "client_id": "r1",
                             "reply_to": first["msg_id"]})
        await asyncio.to_thread(out.expect, rf"\[{room}\] \(re alice@A\) alice@A: copy that")
        flash = await alice.request({"type": "say", "room": room, "text": "ABORT", "client_id": "f1",
                                     "precedence": "flash"})
        await asyncio.to_thread(out.expect, rf"\[{room}\] FLASH alice@A: ABORT")
        await asyncio.to_thread(out.expect, rf"^!! FLASH from alice@A in \[{room}\]: ABORT \(acknowledge: /ack ")
        send(proc, "/ack")
        got = await alice.wait_for(lambda f: f.get("type") == "acknowledged" and f.get("msg_id") == flash["msg_id"], 10)
        assert (got["user"], got["site"]) == ("dora", "B")
        send(proc, f"/search {token}")
        await asyncio.to_thread(out.expect, rf"^search: 1 result for {token}")
        await asyncio.to_thread(out.expect, rf"^   {first['msg_id']} \[{room}\] \S+ alice@A: grid \*{token}\* ready")
    finally:
        out.close()
        await alice.close()


# --- fed frames ------------------------------------------------------------------------------------------

T0 = 1_767_268_800.0


def utc(t: float) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(t))


def msg(seq: int, ts: int, origin: str = "B", user: str = "bob", room: str = "ops", **kw: Any) -> dict[str, Any]:
    return {"type": "message", "room": room, "msg_id": f"{origin}:{seq}", "origin": origin, "user": user,
            "text": kw.pop("text", f"message {ts}"), "sent_at": T0 + ts, "order": [ts, origin], "late": False,
            "n": ts, **kw}


class FakeLink:
    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def request(self, frame: dict[str, Any]) -> None:
        self.sent.append(frame)

    def say(self, room: str, text: str, *, precedence: str | None = None, reply_to: str | None = None) -> str:
        self.sent.append({"type": "say", "room": room, "text": text, "precedence": precedence, "reply_to": reply_to})
        return f"c{len(self.sent)}"

    async def close(self) -> None:
        pass


async def test_a_reply_to_a_late_line_quotes_it_once_it_arrives_and_goes_to_it() -> None:
    from chat_tui.controller import Controller
    app = ChatApp("ws://127.0.0.1:1/ws", "alice", clock=lambda: T0 + 120, timefmt=utc, connect=False)
    async with app.run_test(size=SIZE) as pilot:
        app.apply_frame({"type": "welcome", "site": "A", "user": "alice", "rooms": ["ops"],
                         "sites": {"A": "connected", "B": "connected", "C": "connected"}, "presence": {}})
        app.post_message(ChatApp.LinkChanged(LinkStatus("connected", "to A as alice")))
        app.apply_frame({"type": "joined", "room": "ops", "history": [msg(1, 10, text="Tanker on station")]})
        app.apply_frame(msg(2, 40, text="Copy, moving to the tanker", reply_to="C:7"))
        app.apply_frame({"type": "error", "code": "bad_field", "message": "history: no message 'C:7'",
                         "purpose": {"kind": "original", "room": "ops", "msg_id": "C:7"}})
        await pilot.pause()
        reply = line(app, "Copy, moving to the tanker")
        assert "in reply to C:7, not at this site yet" in str(reply.render())
        app.apply_frame(msg(7, 30, origin="C", user="dave", late=True, text="Viper 2 fuel state bingo +10"))
        await pilot.pause()
        assert "↩ dave@C [LATE] Viper 2 fuel state bingo +10" in str(reply.render())
        link = FakeLink()
        app.link, app.controller = link, Controller(app.state, link, app.clock)        # type: ignore[assignment]
        await pilot.press("alt+up", "alt+up")                       # choose the late line (second from the end)
        assert app.state.selected == "C:7"
        await type_line(pilot, "/reply roger, divert to Hawk")
        assert [f for f in link.sent if f["type"] == "say"] == [
            {"type": "say", "room": "ops", "text": "roger, divert to Hawk", "precedence": "routine", "reply_to": "C:7"}]
        await pilot.press("escape")
        app.select(reply)
        await pilot.press("f3")                                      # to the line the chosen reply answers
        await pilot.pause()
        assert line(app, "Viper 2 fuel state bingo +10").has_class("jumped")
        app.save_screenshot("reply-to-late.svg", path=str(ARTIFACTS))



async def test_alerts_share_one_bar_that_folds_and_never_pop_up_and_a_reply_holds_its_quote() -> None:
    from chat_tui.controller import Controller
    now = [T0 + 120]
    app = ChatApp("ws://127.0.0.1:1/ws", "alice", clock=lambda: now[0], timefmt=utc, connect=False)
    async with app.run_test(size=SIZE) as pilot:
        link = FakeLink()
        app.link, app.controller = link, Controller(app.state, link, app.clock)        # type: ignore[assignment]
        app.apply_frame({"type": "welcome", "site": "A", "user": "alice", "rooms": ["ops"],
                         "sites": {"A": "connected", "B": "connected"}, "presence": {}})
        app.apply_frame({"type": "joined", "room": "ops", "history": [msg(1, 10, text="Tanker on station")]})
        app.apply_frame(msg(2, 40, text="Copy, moving to the tanker", reply_to="B:1"))
        for seq, text in ((5, "MEDEVAC at grid 123"), (6, "SAM launch, grid NK 12")):
            app.apply_frame(msg(seq, seq * 10 + 50, text=text, precedence="flash"))
        for _ in range(3):                                          # 45 s of reminders: the bell, nothing else
            now[0] += 15
            app.tick()
        await pilot.pause()
        assert not app._notifications                                 # no toast over the log and the input
        bar = app.query_one("#alerts", Static)
        assert bar.display and str(bar.render()).count("FLASH") == 2
        await pilot.press("f4")                                     # fold the bar to one line
        assert str(bar.render()).splitlines() == [" FLASH  2 messages to acknowledge  F2 acknowledges the first "
                                                  "· F4 shows them"]
        app.apply_frame(msg(7, 90, text="IMMEDIATE: tanker off station", precedence="immediate"))
        await pilot.pause()
        assert "IMMEDIATE" in str(bar.render()) and not app.alerts_folded   # a new alert unfolds it
        await pilot.press("f2")
        assert [f["msg_id"] for f in link.sent if f["type"] == "acknowledge"] == ["B:5"]     # once
        await type_line(pilot, "/search tanker")
        assert [f["query"] for f in link.sent if f["type"] == "search"] == ["tanker"]       # once
        reply = str(line(app, "Copy, moving to the tanker").render()).splitlines()
        assert reply == ["12:00:40 bob@B: ↩ bob@B Tanker on station", " " * 16 + "Copy, moving to the tanker"]


async def test_snapshot_operators_screen() -> None:
    """Every feature on one screen (docs/img/tui-operators.png is this snapshot): directory, badges, a mention,
    a reply quoting a late line, a FLASH alert and the acknowledgement list of an own FLASH, search results."""
    from test_tui_app import check_snapshot
    app = ChatApp("ws://127.0.0.1:1/ws", "alice", clock=lambda: T0 + 120, timefmt=utc, connect=False)
    async with app.run_test(size=(110, 30)) as pilot:
        app.apply_frame({"type": "welcome", "site": "A", "user": "alice", "rooms": ["intel", "ops"],
                         "sites": {"A": "connected", "B": "connected", "C": "connected"},
                         "presence": {"A": ["alice"], "B": ["bob"], "C": ["dave"]},
                         "unread": {"intel": 2}, "mentions": {"intel": 1}})
        app.post_message(ChatApp.LinkChanged(LinkStatus("connected", "to A as alice")))
        app.apply_frame({"type": "directory", "rooms": [
            {"room": "intel", "private": False, "members": 4, "last_at": T0 + 50, "joined": True},
            {"room": "logistics", "private": False, "members": 7, "last_at": T0 - 600, "joined": False},
            {"room": "ops", "private": False, "members": 12, "last_at": T0 + 60, "joined": True},
            {"room": "weather", "private": False, "members": 3, "last_at": None, "joined": False}]})
        app.apply_frame({"type": "joined", "room": "intel", "history": []})
        app.apply_frame({"type": "joined", "room": "ops", "history": [
            msg(1, 0, text="Tanker AR-7 on station, track 4411"),
            msg(5, 12, origin="A", user="alice", text="FLASH: SAM launch reported, grid NK 12", precedence="flash",
                acknowledgements=[{"user": "bob", "site": "B", "at": T0 + 20},
                                  {"user": "dave", "site": "C", "at": T0 + 31}]),
        ]})
        app.show(app.state.set_active("ops"))
        app.apply_frame(msg(3, 20, origin="C", user="dave", late=True, text="Viper 2 fuel state bingo +10"))
        app.apply_frame(msg(6, 40, text="@alice copy, Viper 2 diverts to Hawk", reply_to="C:3", mentions=["alice"]))
        app.apply_frame(msg(8, 60, text="MEDEVAC at grid 123, two casualties", precedence="flash"))
        app.show(app.state.start_search("tanker"))
        app.apply_frame({"type": "results", "query": "tanker", "purpose": {"kind": "search", "seq": 1},
                         "messages": [dict(msg(1, 0, text="Tanker AR-7 on station, track 4411"), highlights=[[0, 6]])]})
        app.query_one("#input", Input).cursor_blink = False
        await pilot.pause()
        await pilot.pause()
        app.save_screenshot("operators.svg", path=str(ARTIFACTS))
        own = str(line(app, "FLASH: SAM launch reported, grid NK 12").render())
        assert "acknowledged by bob@B 12:00:20, dave@C 12:00:31" in own
        assert "FLASH" in str(app.query_one("#alerts", Static).render())
        check_snapshot("operators_screen", app.export_screenshot(title="RCM chat"))
