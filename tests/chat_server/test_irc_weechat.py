"""A real IRC client: Debian's WeeChat (weechat-headless, driven through its FIFO, read through its logger) at
site A's IRC front end, and a WebSocket user at site B.

One scenario, as WeeChat users meet it: log in by SASL PLAIN, join #ops, see the line said before at its
original time (server-time: B's clock runs an hour behind, so the line is an hour old), say a line, see it
once in WeeChat and at B."""
from __future__ import annotations

import asyncio
import calendar
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from chat_missions import add_users
from irc_testing import IrcSites
from testkit import wait_until

WEECHAT = shutil.which("weechat-headless")
pytestmark = [pytest.mark.skipif(WEECHAT is None, reason="weechat-headless is installed by deploy/sysdeps.sh"),
              pytest.mark.timeout(60)]
HOUR = 3600.0


async def test_weechat_logs_in_by_sasl_sees_history_at_its_time_and_says_a_line(tmp_path: Path) -> None:
    assert WEECHAT is not None
    sites = IrcSites(tmp_path, clocks={"B": lambda: time.time() - HOUR})
    add_users(sites.mission, "A", ["dave"], password="weechat-pass")
    await sites.start()
    home = tmp_path / "weechat"
    home.mkdir()
    proc: asyncio.subprocess.Process | None = None
    try:
        bob = await sites.ws("B", "bob")
        await bob.join("ops")
        early = await bob.say("ops", "said before dave came")
        await bob.wait_for(lambda f: f["type"] == "receipt" and f["msg_id"] == early["msg_id"] and f["site"] == "A")
        port = sites.servers["A"].irc_front.port
        setup = ";".join([
            f"/set fifo.file.path {home}/fifo", "/set logger.file.flush_delay 0", f"/set logger.file.path {home}/logs",
            f"/server add rcm 127.0.0.1/{port} -nicks=dave -sasl_mechanism=plain -sasl_username=dave "
            "-sasl_password=weechat-pass -autojoin=#ops",
            "/connect rcm"])
        proc = await asyncio.create_subprocess_exec(WEECHAT, "--dir", str(home), "-r", setup,
                                                    env={**os.environ, "TZ": "UTC"}, stdin=subprocess.DEVNULL,
                                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        log = home / "logs" / "irc.rcm.#ops.weechatlog"

        def logged(text: str) -> list[list[str]]:
            lines = log.read_text().splitlines() if log.exists() else []
            return [line.split("\t") for line in lines if line.endswith(text)]

        def dead() -> str | None:
            return f"WeeChat exited ({proc.returncode})" if proc is not None and proc.returncode is not None else None

        [[stamp, nick, _]] = await wait_until(lambda: logged("said before dave came"), "the history in #ops",
                                              timeout=20, dead=dead)
        assert nick == "bob"                          # bob's own line, not the server's "[history]" notice
        shown_at = calendar.timegm(time.strptime(stamp, "%Y-%m-%d %H:%M:%S"))
        assert abs(shown_at - (time.time() - HOUR)) < 300, stamp   # at the time it was sent (server-time)
        [conn] = sites.servers["A"].irc_front.connections
        assert {"sasl", "server-time", "message-tags"} <= conn.irc.caps and conn.irc.nick == "dave"

        (home / "fifo").write_text("irc.rcm.#ops *hello from weechat\n")
        got = await bob.wait_for(lambda f: f["type"] == "message" and f["text"] == "hello from weechat", 15)
        assert (got["user"], got["origin"]) == ("dave", "A")
        await bob.say("ops", "seen, dave")                # after dave's line in the global order at A
        await wait_until(lambda: logged("seen, dave"), "bob's answer in #ops", timeout=15, dead=dead)
        [[_, nick, _]] = logged("hello from weechat")     # once: its local echo (or echo-message's copy, not both)
        assert nick == "dave"
    finally:
        if proc is not None and proc.returncode is None:
            proc.terminate()
            await proc.wait()
        await sites.close()
