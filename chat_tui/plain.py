"""The line client (``--plain``): one printed line per event, commands typed or piped in.

On a terminal it reads lines with prompt-toolkit (history on up/down, events
printed above the prompt, nothing redrawn but the prompt line, so it is usable
over a slow SSH link). From a pipe it reads stdin line by line and prints one
line per event to stdout, flushed at once, so scripts can drive it; at the end
of its input it waits until every queued request was answered (``--wait``)
and exits 0, or 1 if some were not.

Line formats (stable; scripts may match them):

    HH:MM:SS [room] user@site: text                    a message (``(you)`` after own ones)
    HH:MM:SS [room] LATE user@site: text               a message delivered late, at its place
    HH:MM:SS [room] [ORDER -62s] user@site: text       its time reads 62 s earlier than the line above it
    HH:MM:SS [room] FLASH (re bob@B) user@site: text   precedence above routine; the line it answers
    HH:MM:SS [room] <SECRET//REL TO GBR> user@site: text   its security label, when above the room's floor
    == [room] CONFIDENTIAL//REL TO GBR ==              the classification of the room shown (labelled missions)
    -- [room] sending at SECRET//REL TO GBR             the label your next lines carry there (/label)
    !! FLASH from user@site in [room]: text ...        an alert to acknowledge (/ack), repeated until then
    -- user@site mentioned you in [room]               a line that names you
    search: ... / directory: ...                       /search results, the rooms you can join
    positions: 2 units / positions: none               /positions, then a line per unit:
       viper2  B  bob  51.50070  -0.12460  12 s          unit, site, user (- for none), lat, lon, age
    accepted A:17 [room]                               our message is durable at our site
    receipt A:17 delivered at B (2/3 sites)            a site delivered our message
    site B suspected | sites: A connected, B connected  site status
    presence B: +bob -carol                            who came online / went offline
    -- [room] text  /  !! [room] text                  news about a room (late, acknowledged) / a warning
    -- text  /  !! text                                command output, news of a site (missing, recovered) / errors
    connection: ...                                    the link to the chat server

Every line goes out through ``safe_text.printable``: a newline, an escape
sequence or a bidi override in a message, a name or a server's error is
printed as a visible escape (``\n``, ``\x1b``, ``\u202e``), so one event is
one line and nothing the server sends is obeyed by the terminal.
"""
from __future__ import annotations

import asyncio
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TextIO

from contracts.precedence import DEFAULT

from .controller import Controller, Logout, Quit
from .link import AUTH_FAILED, CONNECTING, Backoff, ChatLink, LinkStatus
from .marks import runs
from .safe_text import printable, printable_lines
from .state import (
    ACCEPTED,
    DELIVERED,
    Banner,
    Change,
    ChatState,
    Expired,
    Inserted,
    MessageEntry,
    Notice,
    Notify,
    Output,
    Panel,
    PositionsListed,
    PresenceChanged,
    Receipt,
    SendLabel,
    SitesChanged,
    Updated,
)
from .words import count_of, order_mark, plural

ALERT_TICK = 1.0            # seconds between checks for alerts to repeat


def clock_time(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t))


def format_change(change: Change, state: ChatState, timefmt: Callable[[float], str] = clock_time) -> list[str]:
    """The printed lines of one change (most give one, multi-line notices give several), made printable."""
    return [printable(line) for line in _lines_of(change, state, timefmt)]


def format_changes(changes: list[Change], state: ChatState, timefmt: Callable[[float], str] = clock_time) -> list[str]:
    """The printed lines of a batch of changes: news of a site, noted in every room, is printed once."""
    out: list[str] = []
    shown: set[str] = set()
    for c in changes:
        if isinstance(c, Inserted) and isinstance(c.entry, Notice) and c.entry.scope == "all":
            if c.entry.text in shown:
                continue
            shown.add(c.entry.text)
        out += format_change(c, state, timefmt)
    return out


def _lines_of(change: Change, state: ChatState, timefmt: Callable[[float], str]) -> list[str]:
    if isinstance(change, Inserted):
        e = change.entry
        if isinstance(e, Notice):
            mark = "!!" if e.level in ("warning", "error") else "--"
            where = f"[{e.room}] " if e.scope == "room" else ""
            return [f"{mark} {where}{line}" for line in printable_lines(e.text)]
        if not isinstance(e, MessageEntry) or e.state != DELIVERED:
            return []
        late = (f"[{order_mark(e.out_of_time)}] " if e.out_of_time else "") + ("LATE " if e.late else "") + \
            ("REPAIRED " if e.repaired else "") + ("EXPIRED " if e.expired else "")
        you = " (you)" if e.own else ""
        level = f"{e.precedence.upper()} " if e.precedence != DEFAULT else ""
        q = state.quote_for(e)
        re_ = "" if q is None else f"(re {q.user}@{q.origin}) " if q.state == "loaded" else f"(re {q.msg_id}) "
        expires = f" (expires {timefmt(e.expires_at)})" if e.expires_at is not None and not e.expired else ""
        floor = state.rooms[e.room].label if e.room in state.rooms else None
        label = f"<{e.label}> " if e.label is not None and e.label != floor else ""
        return [f"{timefmt(e.sent_at)} [{e.room}] {late}{level}{label}{re_}{e.user}@{e.origin}{you}: {e.text}{expires}"]
    if isinstance(change, Banner):
        return [f"== [{change.room}] {change.label} =="]
    if isinstance(change, SendLabel):
        return [f"-- [{change.room}] sending at {change.label}"]
    if isinstance(change, Notify):
        e = change.entry
        if change.kind == "mention":
            return [f"-- {e.user}@{e.origin} mentioned you in [{e.room}]"]
        again = "still not acknowledged: " if change.repeat else ""
        return [f"!! {again}{change.kind.upper()} from {e.user}@{e.origin} in [{e.room}]: {e.text} "
                f"(acknowledge: /ack {e.msg_id})"]
    if isinstance(change, Panel) and change.name == "search" and state.search is not None:
        return _search_lines(state, timefmt)
    if isinstance(change, PositionsListed):
        return position_lines(state, change.at)
    if isinstance(change, Expired):
        e = change.entry
        if isinstance(e, MessageEntry):
            return [f"-- [{e.room}] message {e.msg_id} from {e.user}@{e.origin} expired"]
        return []
    if isinstance(change, Updated):
        e = change.entry
        if isinstance(e, MessageEntry) and e.state == ACCEPTED and not e.receipts:
            skipped = f"; not sent to {', '.join(e.skipped)} (disconnected)" if e.skipped else ""
            return [f"accepted {e.msg_id} [{e.room}]{skipped}"]
        return []
    if isinstance(change, Receipt):
        e = change.entry
        late = " (it was not sent there at first)" if change.site in e.skipped else ""
        return [f"receipt {e.msg_id} delivered at {change.site} ({len(e.receipts)}/{state.site_count()} sites){late}"]
    if isinstance(change, SitesChanged):
        if change.site is None:
            return ["sites: " + ", ".join(f"{s} {state.site_words(s)}" for s in sorted(state.sites))]
        return [f"site {change.site} {state.site_words(change.site)}"]
    if isinstance(change, PresenceChanged):
        parts = [f"+{u}" for u in change.online] + [f"-{u}" for u in change.offline]
        return [f"presence {change.site}: {' '.join(parts)}"] if parts else []
    if isinstance(change, Output):
        mark = "!!" if change.level in ("warning", "error") else "--"
        return [f"{mark} {line}" for line in printable_lines(change.text)]
    return []


def _search_lines(state: ChatState, timefmt: Callable[[float], str]) -> list[str]:
    """The results of a search, once they are in: matched words between *stars*."""
    q = state.search
    assert q is not None
    if q.status == "searching":
        return []
    if q.status == "error":
        return [f"!! search for {q.text} failed: {q.error}"]
    out = [f"search: {plural(len(q.results), 'result')} for {q.text}"]
    for m in q.results:
        marked = runs(m["text"], highlights=m.get("highlights") or ())
        text = "".join(f"*{r.text}*" if r.hit else r.text for r in marked)
        sent = m.get("sent_at")
        when = timefmt(float(sent)) if isinstance(sent, (int, float)) else "--:--:--"
        out.append(f"   {m['msg_id']} [{m['room']}] {when} {m.get('user')}@{m.get('origin')}: {text}")
    return out


def position_lines(state: ChatState, now: float) -> list[str]:
    """``/positions``: a head line, then one line per unit in columns (names already made printable)."""
    rows = state.positions.rows(now)
    if state.positions_unavailable is not None and not rows:
        return [f"!! positions: not available from this server ({state.positions_unavailable})"]
    refused = state.positions.refused
    head = f"positions: {plural(len(rows), 'unit')}" if rows else "positions: none"
    out = [head + (f" ({plural(refused, 'bad report')} ignored)" if refused else "")]
    cells = [(r.unit, r.site, r.user or "-", r.lat, r.lon, r.age) for r in rows]
    widths = [max((len(c[i]) for c in cells), default=0) for i in range(6)]
    for c in cells:
        left = "  ".join(c[i].ljust(widths[i]) for i in range(3))
        right = "  ".join(c[i].rjust(widths[i]) for i in range(3, 6))
        out.append(f"   {left}  {right}")
    return out


class PlainClient:
    """State + link + controller, printing lines to ``out``."""

    def __init__(self, url: str, user: str, password: str, out: TextIO, *, backoff: Backoff | None = None,
                 timefmt: Callable[[float], str] = clock_time, ssl: object = None) -> None:
        self.out = out
        self.timefmt = timefmt
        self.state = ChatState(user)
        self.link = ChatLink(url, user, password, on_frame=self._on_frame, on_status=self._on_status,
                             backoff=backoff, ssl=ssl)
        self.controller = Controller(self.state, self.link)
        self._print_lock = threading.Lock()
        self._welcomed = asyncio.Event()
        self._hinted = False
        self.bell = False                # ring the terminal bell on mentions and alerts (interactive only)

    def emit(self, line: str) -> None:
        """Print one line; whatever it holds, it stays one line of plain characters."""
        with self._print_lock:
            print(printable(line), file=self.out, flush=True)

    def show(self, changes: list[Change]) -> None:
        self.controller.send_requests(changes)
        for c in changes:
            if isinstance(c, Notify) and self.bell:
                self.out.write("\a")
            if isinstance(c, Panel) and c.name == "directory":
                self._directory_hint()
        for line in format_changes(changes, self.state, self.timefmt):
            self.emit(line)

    def _directory_hint(self) -> None:
        """At the first login without rooms: the rooms one can join."""
        if self._hinted or self.state.directory is None:
            return
        self._hinted = True
        if not self.state.joined_rooms() and self.state.directory:
            rows = ", ".join(f"{r['room']} ({plural(count_of(r.get('members')), 'member')})"
                             for r in self.state.directory[:20])
            self.emit(f"-- directory: {rows}; /join ROOM, /directory for more")

    def _on_frame(self, frame: dict[str, Any]) -> None:
        self.show(self.state.apply(frame, time.time()))
        self.show(self.state.read_now(self.state.active))      # what is printed is read
        if frame.get("type") == "welcome":
            self._welcomed.set()

    async def _alert_ticks(self) -> None:
        """Repeat FLASH/IMMEDIATE alerts until they are acknowledged; mark lines that expire."""
        while True:
            await asyncio.sleep(ALERT_TICK)
            self.show(self.state.due_alerts(time.time()))
            self.show(self.state.expire_messages(time.time()))

    def _on_status(self, status: LinkStatus) -> None:
        if status.state == CONNECTING and status.attempt > 0:
            return                       # the retry line already said we are trying again
        self.emit(f"connection: {status.describe()}")

    def submit(self, line: str) -> None:
        self.show(self.controller.submit(line))
        self.show(self.state.read_now(self.state.active))

    async def logout(self, request: Logout) -> int:
        """End the session at the server (``/logout``), say how that went; the exit status."""
        self.emit(f"-- logged out: {await self.link.logout(request.everywhere)}")
        return 0

    async def run_pipe(self, stdin: TextIO, wait: float) -> int:
        """Drive the client from lines of ``stdin`` until its end (or /quit)."""
        lines: asyncio.Queue[str | None] = asyncio.Queue()
        loop = asyncio.get_running_loop()

        def reader() -> None:           # a daemon thread: a blocked read must not keep the process alive
            for line in stdin:
                loop.call_soon_threadsafe(lines.put_nowait, line)
            loop.call_soon_threadsafe(lines.put_nowait, None)

        threading.Thread(target=reader, name="stdin", daemon=True).start()
        link_task = asyncio.ensure_future(self.link.run())
        ticks = asyncio.ensure_future(self._alert_ticks())
        # Commands wait for the first login (at most ``wait`` s), so that a script's /who sees the sites.
        first = asyncio.ensure_future(self._welcomed.wait())
        await asyncio.wait({link_task, first}, timeout=wait, return_when=asyncio.FIRST_COMPLETED)
        first.cancel()
        await asyncio.gather(first, return_exceptions=True)
        next_line = asyncio.ensure_future(lines.get())
        try:
            while True:
                done, _ = await asyncio.wait({link_task, next_line}, return_when=asyncio.FIRST_COMPLETED)
                if link_task in done:
                    return 1 if self.link.status.state == AUTH_FAILED else 0
                line = next_line.result()
                if line is None:
                    break
                try:
                    self.submit(line)
                except Logout as request:
                    return await self.logout(request)
                except Quit:
                    return 0
                next_line = asyncio.ensure_future(lines.get())
            ok = await self.link.drained(wait)
            if not ok:
                self.emit(f"!! end of input: some requests got no reply within {wait:g} s")
            return 0 if ok else 1
        finally:
            next_line.cancel()
            ticks.cancel()
            await self.link.close()
            await asyncio.gather(link_task, next_line, ticks, return_exceptions=True)

    async def run_terminal(self) -> int:
        """Interactive: prompt-toolkit prompt with history; events printed above it."""
        from prompt_toolkit import PromptSession
        from prompt_toolkit.history import InMemoryHistory
        from prompt_toolkit.patch_stdout import patch_stdout

        session: PromptSession[str] = PromptSession(history=InMemoryHistory())
        link_task = asyncio.ensure_future(self.link.run())
        ticks = asyncio.ensure_future(self._alert_ticks())
        self.bell = True
        try:
            with patch_stdout(raw=True):
                self.out = sys.stdout
                self.emit("-- type /help for commands, Ctrl-D to quit")
                while True:
                    prompt = asyncio.ensure_future(
                        session.prompt_async(lambda: f"[{printable(self.state.active or '-')}] "))
                    done, _ = await asyncio.wait({link_task, prompt}, return_when=asyncio.FIRST_COMPLETED)
                    if link_task in done:
                        prompt.cancel()
                        await asyncio.gather(prompt, return_exceptions=True)
                        return 1 if self.link.status.state == AUTH_FAILED else 0
                    try:
                        line = prompt.result()
                    except (EOFError, KeyboardInterrupt):
                        return 0
                    try:
                        self.submit(line)
                    except Logout as request:
                        return await self.logout(request)
                    except Quit:
                        return 0
        finally:
            ticks.cancel()
            await self.link.close()
            await asyncio.gather(link_task, ticks, return_exceptions=True)
