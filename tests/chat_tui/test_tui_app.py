"""Textual pilot tests of the chat app: against real servers (login, send, reconnect) and fed frames (UI logic)."""
from __future__ import annotations

import asyncio
import itertools
import os
import time
from pathlib import Path

from testkit import wait_until
from textual.widgets import Input, Static
from tui_servers import PASSWORD, TuiSites

from chat_server.client import ChatClient
from chat_tui.app import ChatApp, LoginScreen, MessageLine, NoticeLine
from chat_tui.link import Backoff, LinkStatus

SNAPSHOTS = Path(__file__).parent / "snapshots"
SIZE = (100, 30)
_rooms = itertools.count(1)


def fresh_room(prefix: str) -> str:
    return f"{prefix}-{os.getpid()}-{next(_rooms)}"


def lines(app: ChatApp) -> list[str]:
    return [str(w.render()) for w in app.query("#log > *")]


def message(app: ChatApp, text: str) -> MessageLine | None:
    for w in app.query(MessageLine):
        if w.entry.text == text:
            return w
    return None


def site_classes(app: ChatApp, site: str) -> set[str]:
    return set(app.query_one(f"#site-{site}", Static).classes)


async def type_line(pilot, text: str) -> None:
    pilot.app.query_one("#input", Input).value = text
    await pilot.press("enter")


def fast_backoff() -> Backoff:
    return Backoff(initial=0.1, maximum=0.5, jitter=0.0)


# --- against real chat servers -------------------------------------------------------------------------

async def test_login_screen_refuses_a_bad_password_then_logs_in(mission: TuiSites):
    app = ChatApp(mission.url("A"), "carol", backoff=fast_backoff())
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert isinstance(app.screen, LoginScreen)
        assert app.screen.query_one("#login-user", Input).value == "carol"
        await wait_until(lambda: str(app.screen.query_one("#login-site").render()) == "Sign in to site A",
                         "the login screen names the site", pause=pilot.pause)
        await pilot.press(*"wrong", "enter")
        await wait_until(lambda: isinstance(app.screen, LoginScreen)
                         and "unknown user, wrong password" in str(app.screen.query_one("#login-error").render()),
                         "the login screen again, with the refusal", pause=pilot.pause)
        await pilot.press(*PASSWORD, "enter")
        await wait_until(lambda: app.link_status.state == "connected", "connected", pause=pilot.pause)
        assert not isinstance(app.screen, LoginScreen)
        assert "carol@A" in str(app.query_one("#link-state").render())
        await wait_until(lambda: "connected" in site_classes(app, "B"), "site B shown connected", pause=pilot.pause)
        assert "connected" in site_classes(app, "A")


async def test_join_send_and_see_own_echo_with_receipts_from_both_sites(mission: TuiSites):
    room = fresh_room("ops")
    bob = await ChatClient.connect(mission.url("B"), "bob", PASSWORD)
    try:
        await bob.join(room)
        app = ChatApp(mission.url("A"), "alice", PASSWORD, backoff=fast_backoff())
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(lambda: app.link_status.state == "connected", "connected", pause=pilot.pause)
            await type_line(pilot, f"/join {room}")
            await wait_until(lambda: room in str(app.query_one("#room-title").render()), "room title",
                             pause=pilot.pause)
            await type_line(pilot, "hello from the TUI")
            await wait_until(lambda: message(app, "hello from the TUI") is not None, "own echo", pause=pilot.pause)
            await wait_until(lambda: message(app, "hello from the TUI").entry.receipts == {"A", "B"},
                             "receipts from A and B", pause=pilot.pause)
            own = message(app, "hello from the TUI")
            assert own.has_class("own") and own.has_class("everywhere")
            assert "alice@A: hello from the TUI  ✓ 2/2" in str(own.render())
            # Joined: the title no longer offers to join (it did while the /join was under way).
            await wait_until(lambda: "preview" not in str(app.query_one("#room-title").render()), "title of a member",
                             pause=pilot.pause, timeout=5)
            got = await bob.wait_for(lambda f: f.get("type") == "message" and f.get("room") == room, 10)
            assert got["text"] == "hello from the TUI"

            await bob.say(room, "copy that")
            await wait_until(lambda: message(app, "copy that") is not None, "bob's reply", pause=pilot.pause)
            reply = message(app, "copy that")
            assert not reply.has_class("own") and "bob@B: copy that" in str(reply.render())
            assert lines(app)[-2:] == [str(own.render()), str(reply.render())]

            inp = app.query_one("#input", Input)
            await pilot.press("up")
            assert inp.value == "hello from the TUI"
            await pilot.press("up")
            assert inp.value == f"/join {room}"
            await pilot.press("down", "down")
            assert inp.value == ""
    finally:
        await bob.close()


async def test_reconnects_after_the_chat_server_restarts_and_catches_up(mission: TuiSites):
    room = fresh_room("restart")
    app = ChatApp(mission.url("A"), "alice", PASSWORD, backoff=fast_backoff())
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(lambda: app.link_status.state == "connected", "connected", pause=pilot.pause)
        await type_line(pilot, f"/join {room}")
        await type_line(pilot, "before the restart")
        await wait_until(lambda: message(app, "before the restart") is not None
                         and message(app, "before the restart").entry.receipts == {"A", "B"},
                         "first message", pause=pilot.pause)
        bob = await ChatClient.connect(mission.url("B"), "bob", PASSWORD)
        try:
            await bob.join(room)
            mission.stop_chat("A")
            await wait_until(lambda: app.link_status.state == "retrying", "retrying state", pause=pilot.pause)
            state = app.query_one("#link-state")
            assert state.has_class("retrying") and "reconnecting" in str(state.render())
            assert "unknown" in site_classes(app, "B")
            await bob.say(room, "while you were away")
            mission.start_chat("A")
            await wait_until(lambda: app.link_status.state == "connected", "connected again", timeout=30,
                             pause=pilot.pause)
            assert app.query_one("#link-state").has_class("connected")
            await wait_until(lambda: message(app, "while you were away") is not None,
                             "the message sent while the server was down", pause=pilot.pause)
            await type_line(pilot, "after the restart")
            await wait_until(lambda: message(app, "after the restart") is not None
                             and message(app, "after the restart").entry.receipts == {"A", "B"},
                             "message after the restart, delivered at both sites", pause=pilot.pause)
            texts = [w.entry.text for w in app.query(MessageLine)]
            assert texts == ["before the restart", "while you were away", "after the restart"]
        finally:
            await bob.close()
            if not mission.chat_running("A"):
                mission.start_chat("A")
            mission.wait_chat("A")


# --- UI logic on fed frames ----------------------------------------------------------------------------

def utc(t: float) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(t))


T0 = 1_767_268_800.0          # 2026-01-01 12:00:00 UTC


def offline_app() -> ChatApp:
    return ChatApp("ws://127.0.0.1:8101/ws", "alice", clock=lambda: T0 + 120, timefmt=utc, connect=False)


def msg(seq, ts, origin="B", user="bob", room="ops", late=False, text="", receipts=()):
    return {"type": "message", "room": room, "msg_id": f"{origin}:{seq}", "origin": origin, "user": user,
            "text": text or f"message {ts}", "sent_at": T0 + ts, "order": [ts, origin], "late": late, "n": ts,
            "receipts": list(receipts)}


WELCOME = {"type": "welcome", "site": "A", "user": "alice", "rooms": [],
           "sites": {"A": "connected", "B": "connected", "C": "connected"},
           "presence": {"A": ["alice", "carol"], "B": ["bob"], "C": ["dave"]}}


async def test_late_message_is_inserted_at_its_place_with_a_notice():
    app = offline_app()
    async with app.run_test(size=SIZE) as pilot:
        app.apply_frame(WELCOME)
        app.apply_frame({"type": "joined", "room": "ops", "history": [msg(1, 10), msg(2, 20)]})
        app.apply_frame(msg(3, 30, text="third"))
        app.apply_frame(msg(4, 40, text="fourth"))
        await pilot.pause()
        app.apply_frame(msg(7, 25, origin="C", user="dave", late=True, text="sent at 25 s, arrived late"))
        await pilot.pause()
        texts = [w.entry.text for w in app.query(MessageLine)]
        assert texts == ["message 10", "message 20", "sent at 25 s, arrived late", "third", "fourth"]
        late = message(app, "sent at 25 s, arrived late")
        assert late.has_class("late") and "[LATE +95s] dave@C" in str(late.render())
        last = list(app.query("#log > *"))[-1]
        assert isinstance(last, NoticeLine) and last.has_class("warning")
        assert str(last.render()) == ("late message C:7 from dave@C: arrived 95 s after it was sent, "
                                      "placed 2 messages up")


async def test_site_status_bar_follows_status_changes():
    app = offline_app()
    async with app.run_test(size=SIZE) as pilot:
        app.apply_frame(WELCOME)
        await pilot.pause()
        assert "connected" in site_classes(app, "B")
        for status in ("suspected", "disconnected", "connected"):
            app.apply_frame({"type": "site_status", "site": "B", "status": status})
            await pilot.pause()
            assert status in site_classes(app, "B")
            assert {"connected", "suspected", "disconnected"} - {status} <= {"connected", "suspected",
                                                                              "disconnected"} - site_classes(app, "B")
            assert f"B {status}" in str(app.query_one("#site-B").render())
            assert "connected" in site_classes(app, "C")
        app.apply_frame({"type": "presence", "site": "B", "online": ["erin"], "offline": ["bob"]})
        await pilot.pause()
        presence = str(app.query_one("#presence").render())
        assert "erin" in presence and "bob" not in presence
        # RCM reaches B, its chat server is gone (its will came): said on the bar, until a site_status without it.
        app.apply_frame({"type": "site_status", "site": "B", "status": "connected", "chat_down": True})
        await pilot.pause()
        assert {"connected", "chat-down"} <= site_classes(app, "B")
        assert "B connected, chat server down" in str(app.query_one("#site-B").render())
        app.apply_frame({"type": "site_status", "site": "B", "status": "connected"})
        await pilot.pause()
        assert "chat-down" not in site_classes(app, "B")
        assert "chat server down" not in str(app.query_one("#site-B").render())


async def test_frames_that_land_while_the_app_shuts_down_do_not_crash_it():
    # The link posts until on_unmount closes it, but Textual prunes the screens first: a presence
    # frame (a user logging off as the operator quits) once crashed the exit with NoMatches.
    app = offline_app()
    async with app.run_test(size=SIZE) as pilot:
        app.apply_frame(WELCOME)
        await pilot.pause()
    assert not app.is_running
    app.on_chat_app_frame_received(ChatApp.FrameReceived(
        {"type": "presence", "site": "B", "online": [], "offline": ["bob"]}))
    app.on_chat_app_link_changed(ChatApp.LinkChanged(LinkStatus("closed", "bye")))
    assert app.state.presence["B"] == set()
    assert app.link_status.state == "closed"


async def build_main_screen(app: ChatApp, pilot) -> None:
    """A representative screen: two rooms, own messages with receipts, a late message, sites in every state."""
    app.apply_frame(WELCOME)
    app.post_message(ChatApp.LinkChanged(LinkStatus("connected", "to A as alice")))
    app.apply_frame({"type": "joined", "room": "ops", "history": [
        msg(1, 0, text="Tanker AR-7 on station, track 4411"),
        msg(5, 12, origin="A", user="alice", text="Copy, re-tasking Viper 2 to AR-7", receipts=("A", "B", "C")),
    ]})
    app.apply_frame({"type": "joined", "room": "intel", "history": []})
    app.apply_frame(msg(6, 30, text="Weather at divert field below minimums"))
    app.apply_frame(msg(2, 40, origin="C", user="dave", room="intel", text="SAM site active grid NK 12"))
    app.apply_frame(msg(3, 20, origin="C", user="dave", late=True, text="Viper 2 fuel state bingo +10"))
    app.controller = None
    app.state.echo("ops", "Roger, divert to Hawk field", "c1", T0 + 60)
    app.apply_frame({"type": "ack", "client_id": "c1", "msg_id": "A:9"})
    app.apply_frame(msg(9, 60, origin="A", user="alice", text="Roger, divert to Hawk field"))
    app.apply_frame({"type": "receipt", "msg_id": "A:9", "site": "A"})
    app.apply_frame({"type": "receipt", "msg_id": "A:9", "site": "B"})
    app.apply_frame({"type": "site_status", "site": "C", "status": "suspected"})
    app.apply_frame({"type": "missing", "origin": "C", "count": 2, "seqs": [4, 5]})
    app.apply_frame({"type": "site_status", "site": "C", "status": "disconnected"})
    app.query_one("#input", Input).cursor_blink = False
    await pilot.pause()
    await pilot.pause()


def check_snapshot(name: str, svg: str) -> None:
    path = SNAPSHOTS / f"{name}.svg"
    if os.environ.get("TUI_SNAPSHOT_UPDATE") == "1" or not path.exists():
        SNAPSHOTS.mkdir(exist_ok=True)
        path.write_text(svg)
        if os.environ.get("TUI_SNAPSHOT_UPDATE") != "1":
            raise AssertionError(f"no snapshot {path.name} yet: written, check it and run again")
        return
    expected = path.read_text()
    if svg != expected:
        actual = path.with_suffix(".actual.svg")
        actual.write_text(svg)
        raise AssertionError(f"screen differs from snapshot {path}; see {actual} "
                             "(TUI_SNAPSHOT_UPDATE=1 accepts the new screen)")


async def test_snapshot_main_screen():
    app = offline_app()
    async with app.run_test(size=(100, 24)) as pilot:
        await build_main_screen(app, pilot)
        screen = str(app.query_one("#log").render()) + "".join(lines(app))
        assert "Roger, divert to Hawk field  ✓ 2/3" in screen
        check_snapshot("main_screen", app.export_screenshot(title="RCM chat"))


async def test_snapshot_main_screen_narrow_hides_the_sidebar():
    app = offline_app()
    async with app.run_test(size=(60, 20)) as pilot:
        await build_main_screen(app, pilot)
        assert not app.query_one("#sidebar").display
        check_snapshot("main_screen_narrow", app.export_screenshot(title="RCM chat"))


async def test_unreachable_server_shows_the_retry_state():
    import socket
    with socket.socket() as s:          # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    app = ChatApp(f"ws://127.0.0.1:{port}/ws", "alice", "pw", backoff=Backoff(5.0, 5.0, jitter=0.0))
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(lambda: app.link_status.state == "retrying", "retrying", pause=pilot.pause)
        text = str(app.query_one("#link-state").render())
        assert "reconnecting: cannot connect" in text and "retry 1 in 5.0 s" in text
    await asyncio.sleep(0)
