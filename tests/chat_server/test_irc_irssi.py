"""A real IRC client: Debian's irssi, in tmux, at site A's IRC front end, and a WebSocket user at site B.

Messages go both ways and show in the same order in both clients (also when users at both sites talk at once);
a message held back by a suspected link reaches irssi marked [LATE +Ns]; a FLASH reaches it marked with its
msg_id, and the irssi user's "!ack" reaches B as an acknowledgement."""
from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from chat_missions import add_users, grant
from irc_testing import IrcSites

TMUX, IRSSI = shutil.which("tmux"), shutil.which("irssi")
pytestmark = [pytest.mark.skipif(TMUX is None or IRSSI is None,
                                 reason="tmux and irssi are installed by deploy/sysdeps.sh"),
              pytest.mark.timeout(90)]


async def tmux(sock: str, *args: str) -> str:
    assert TMUX is not None
    r = await asyncio.to_thread(subprocess.run, [TMUX, "-L", sock, *args], capture_output=True, text=True,
                                timeout=10)
    assert r.returncode == 0, r.stderr
    return r.stdout


async def wait_screen(sock: str, text: str, timeout: float = 30.0) -> str:
    """The pane once ``text`` is on it (polled without blocking the servers in this event loop)."""
    deadline = asyncio.get_running_loop().time() + timeout
    screen = ""
    while asyncio.get_running_loop().time() < deadline:
        screen = await tmux(sock, "capture-pane", "-p", "-t", "irc")
        if text in screen:
            return screen
        await asyncio.sleep(0.1)
    raise AssertionError(f"{text!r} not on the irssi screen after {timeout} s:\n{screen}")


async def type_line(sock: str, text: str) -> None:
    await tmux(sock, "send-keys", "-t", "irc", "-l", text)
    await tmux(sock, "send-keys", "-t", "irc", "Enter")


async def test_irssi_and_a_websocket_user_talk_in_order_and_see_late_lines(tmp_path: Path) -> None:
    sites = IrcSites(tmp_path)
    # irssi builds a /CONNECT command from its options, so its -w password cannot hold a space.
    add_users(sites.mission, "A", ["dave"], password="irssi-pass")
    await sites.start()
    sock = f"rcm-irssi-{os.getpid()}"
    home = tmp_path / "irssi"
    home.mkdir()
    port = sites.servers["A"].irc_front.port
    cmd = (f"{IRSSI} --home={home} -c 127.0.0.1 -p {port} -w irssi-pass -n dave")
    try:
        await tmux(sock, "-f", "/dev/null", "new-session", "-d", "-s", "irc", "-x", "160", "-y", "40",
                   "-e", "TERM=xterm-256color", cmd)
        await wait_screen(sock, "Welcome to the t RCM chat")
        await type_line(sock, "/join #ops")
        await wait_screen(sock, "has joined #ops")
        bob = await sites.ws("B", "bob")
        seen: list[str] = []
        bob.on_frame = lambda f: seen.append(f["text"]) if f.get("type") == "message" else None
        await bob.join("ops")
        await bob.say("ops", "one from bob")
        await wait_screen(sock, "one from bob")
        await type_line(sock, "two from dave in irssi")
        await bob.wait_for(lambda f: f["type"] == "message" and f["text"] == "two from dave in irssi", 15)
        await bob.say("ops", "three from bob")
        screen = await wait_screen(sock, "three from bob")
        # Same order in both clients.
        shown = [t for t in ("one from bob", "two from dave in irssi", "three from bob") if t in screen]
        assert sorted(shown, key=screen.index) == ["one from bob", "two from dave in irssi", "three from bob"]
        assert [t for t in seen if t in shown] == shown
        # Users at both sites talking at once: irssi shows their lines in the global order bob sees.
        carol = await sites.ws("A", "carol")
        await carol.join("ops")
        burst = [f"burst {who} {i}" for i in range(4) for who in ("bob", "carol")]
        talkers = {"bob": bob, "carol": carol}
        await asyncio.gather(*(talkers[t.split()[1]].say("ops", t) for t in burst))
        for t in burst:
            await bob.wait_for(lambda f, t=t: f.get("type") == "message" and f.get("text") == t, 15)
        for t in burst:
            screen = await wait_screen(sock, t)
        on_irssi = sorted(burst, key=screen.index)
        assert [t for t in seen if t in burst] == on_irssi
        # A line held back by a suspected link arrives late, and irssi shows it marked.
        sites.net.set_link("A", "B", "suspected")
        await wait_screen(sock, "site B is suspected")
        await bob.say("ops", "four, held back")
        sites.net.set_link("A", "B", "connected")
        screen = await wait_screen(sock, "four, held back")
        assert "[LATE +" in screen.split("four, held back")[0].splitlines()[-1] + "four, held back"
        # A FLASH: irssi shows it marked, the operator types !ack, bob's site hears of it.
        grant(sites.mission, "B", "bob", "flash")
        flash = await bob.request({"type": "say", "room": "ops", "text": "MEDEVAC grid 123", "client_id": "f1",
                                   "precedence": "flash"})
        await wait_screen(sock, f"[FLASH {flash['msg_id']}] MEDEVAC grid 123")
        await type_line(sock, "!ack")
        got = await bob.wait_for(lambda f: f.get("type") == "acknowledged" and f["msg_id"] == flash["msg_id"], 15)
        assert (got["user"], got["site"]) == ("dave", "A")
        await wait_screen(sock, f"dave@A acknowledged {flash['msg_id']}")
    finally:
        subprocess.run([TMUX or "tmux", "-L", sock, "kill-server"], capture_output=True, timeout=10)
        await sites.close()
