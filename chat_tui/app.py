"""The Textual terminal client: rooms, message log in global order, receipts, site status, presence.

Theory of operation
-------------------
The app holds a ``ChatState`` (state.py) and a ``ChatLink`` (link.py). The
link runs in a Textual worker (``run_link``) and never touches a widget: it
posts ``ChatApp.FrameReceived`` and ``ChatApp.LinkChanged`` messages, which
the UI handles on its own message loop. A frame goes through
``ChatState.apply`` and the resulting changes are turned into widget updates
by ``show``: a message is mounted next to its neighbour in order (so a late
message lands at its place), a receipt refreshes the line of the message it
counts, a status change recolours the site bar. Input lines go through the
same ``Controller`` as the line client.

The operators' features (issues 21 and 19) show as: the room directory in
the sidebar (``#directory``: Enter or a click joins), search results above the
log (``#results``: Enter or a click goes to the message, in context), unread
and mention counts on the rooms, FLASH/IMMEDIATE alerts in a bar under the
top line (``#alerts``) and on their lines, rung on the bell when they come and
every 15 s (FLASH) or 60 s (IMMEDIATE) until acknowledged (F2 or ``/ack``), and
the bell for a line naming the operator. Alt+Up/Alt+Down (or a click) choose a
line of the log: ``/reply`` answers it, F3 goes to the line a reply answers (a
click on the quote too), Escape lets go. The room shown is read while the log
is scrolled to its end: its counts go and ``mark_read`` tells the server (and
so the operator's other sessions).

Units' positions (issue 39): the link asks ``positions {}`` at every
connection; the list (``#positions-box``, panels.py) is shown by F5 or
``/positions``, and the once-a-second ``tick`` drops expired reports and
redraws the ages while it is shown. ``/pos LAT LON [UNIT]`` reports one.

Widget ids (stable, tests and the stylesheet use them): ``#link-state``,
``#sites`` (children ``.site`` with a status class), ``#alerts``, ``#rooms``,
``#directory``, ``#presence``, ``#room-title``, ``#positions-box`` (with
``#positions-title`` and the ``#positions`` table), ``#results``, ``#log``
(children ``.message``/``.notice``/``.gap``), ``#input``; the login screen
has ``#login-user``, ``#login-password``, ``#login-error``.

Nothing from the server is ever parsed as markup: widgets get ``rich.text.Text``
objects (or ``markup=False``), and every name, text and error message goes
through ``safe_text.printable`` first, so neither ``[@click=...]`` nor a newline
or an escape sequence in a message can act or forge a line.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.text import Text
from textual import on, work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.widgets import DataTable, Footer, Input, Label, OptionList, Static

from .controller import Controller, Logout, Quit
from .label_bar import LabelBars
from .link import AUTH_FAILED, LOGGED_OUT, Backoff, ChatLink, LinkStatus
from .panels import Panels
from .plain import clock_time
from .safe_text import printable, printable_lines
from .state import (
    Banner,
    Change,
    ChatState,
    Entry,
    Gap,
    Inserted,
    JumpTo,
    MessageEntry,
    Notify,
    Output,
    Panel,
    PositionsListed,
    PresenceChanged,
    Receipt,
    Removed,
    Request,
    RoomsChanged,
    SendLabel,
    SitesChanged,
    Updated,
)
from .widgets import GapLine, HistoryInput, LoginScreen, MessageLine, NoticeLine

__all__ = ["ChatApp", "GapLine", "HistoryInput", "LoginScreen", "MessageLine", "NoticeLine"]

CSS_PATH = Path(__file__).with_name("chat_tui.tcss")


class ChatApp(Panels, LabelBars, App[int]):
    """The operator's chat client."""

    CSS_PATH = CSS_PATH
    TITLE = "RCM chat"
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (72, "-wide")]
    BINDINGS = [
        Binding("ctrl+n", "next_room", "Next room"),
        Binding("ctrl+p", "prev_room", "Prev room"),
        Binding("ctrl+b", "toggle_sidebar", "Sidebar"),
        Binding("ctrl+r", "reconnect", "Reconnect now"),
        Binding("f1", "help", "Help"),
        Binding("f2", "acknowledge", "Acknowledge"),
        Binding("f3", "goto_original", "Go to original", show=False),
        Binding("f4", "fold_alerts", "Fold alerts", show=False),
        Binding("f5", "toggle_positions", "Positions", show=False),
        Binding("f6", "pick_label", "Label", show=False),
        Binding("alt+up", "select_line(-1)", "Choose line", show=False),
        Binding("alt+down", "select_line(1)", "Choose line", show=False),
        Binding("escape", "let_go", "Let go", show=False),
        Binding("pageup", "scroll_log(-1)", "Scroll up", show=False),
        Binding("pagedown", "scroll_log(1)", "Scroll down", show=False),
        Binding("ctrl+q", "quit", "Quit"),
    ]
    READ_CHECK = 1.0            # seconds between checks whether the room shown is read (and alerts are due)
    AGES_EVERY = 30.0           # seconds between redrawing the directory's "last message" ages

    class FrameReceived(Message):
        """A frame from the chat server (or one the link made up: client_lost, client_notice)."""

        def __init__(self, frame: dict[str, Any]) -> None:
            super().__init__()
            self.frame = frame

    class LinkChanged(Message):
        def __init__(self, status: LinkStatus) -> None:
            super().__init__()
            self.status = status

    def __init__(self, url: str, user: str, password: str | None = None, *,
                 clock: Callable[[], float] = time.time, timefmt: Callable[[float], str] = clock_time,
                 backoff: Backoff | None = None, connect: bool = True, ssl: object = None) -> None:
        super().__init__()
        self.url = url
        self.ssl = ssl
        self.user = user
        self.password = password
        self.clock = clock
        self.timefmt = timefmt
        self.backoff = backoff
        self.connect_on_start = connect
        self.state = ChatState(user)
        self.link: ChatLink | None = None
        self.controller: Controller | None = None
        self.link_status = LinkStatus("connecting", url)
        self._shown_room: str | None = None
        self._lines: dict[str, Static] = {}
        self._site_widgets: dict[str, Static] = {}
        self._selected: MessageLine | None = None
        self.alerts_folded = False       # F4: the alert bar folded to one line (panels.py)
        self._directory_drawn = 0.0      # when the directory was last drawn (its ages are relative to then)

    # --- layout -------------------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        with Horizontal(id="topbar"):
            yield Static("", id="link-state", classes="connecting")
            yield Horizontal(id="sites")
        yield Static("", id="alerts")
        with Horizontal(id="body"):
            with Vertical(id="sidebar"):
                yield Label("Rooms", classes="panel-title")
                yield OptionList(id="rooms")
                yield Label("Directory", classes="panel-title", id="directory-title")
                yield OptionList(id="directory")
                yield Label("Online", classes="panel-title")
                yield Static("", id="presence")
            with Vertical(id="main"):
                yield Static("", id="label-top", classes="label-banner")
                yield Static("no room: /join ROOM", id="room-title")
                with Vertical(id="positions-box"):
                    yield Label("Positions", id="positions-title", classes="panel-title")
                    yield DataTable(id="positions", cursor_type="row", zebra_stripes=True)
                yield OptionList(id="results")
                yield VerticalScroll(id="log")
                yield OptionList(id="label-picker")
                with Horizontal(id="compose-row"):
                    yield Static("", id="send-label")
                    yield HistoryInput(placeholder="message, or /help", id="input")
                yield Static("", id="label-bottom", classes="label-banner")
        yield Footer()

    def on_mount(self) -> None:
        self._show_link_state()
        self._show_alerts()
        self._show_results()
        self.set_interval(self.READ_CHECK, self.tick)
        self.query_one("#input", HistoryInput).focus()
        if not self.connect_on_start:
            return
        if self.password:
            self.start_link(self.user, self.password)
        else:
            self.ask_login("")

    def ask_login(self, error: str) -> None:
        def done(result: tuple[str, str] | None) -> None:
            if result is not None:
                self.start_link(*result)
        self.push_screen(LoginScreen(self.url, self.user, error, site=self.state.site, ssl=self.ssl), done)

    def start_link(self, user: str, password: str) -> None:
        if user != self.user:
            self.user = user
            self.state = ChatState(user)
            self._rebuild_all()
        def on_frame(frame: dict[str, Any]) -> None:
            self.post_message(self.FrameReceived(frame))

        def on_status(status: LinkStatus) -> None:
            self.post_message(self.LinkChanged(status))
        self.link = ChatLink(self.url, user, password, on_frame=on_frame, on_status=on_status, backoff=self.backoff,
                             ssl=self.ssl)
        self.controller = Controller(self.state, self.link, self.clock)
        self.run_link(self.link)

    @work(exclusive=True, group="link")
    async def run_link(self, link: ChatLink) -> None:
        """The network side: keeps the link up and posts what happens as messages."""
        status = await link.run()
        if status.state == AUTH_FAILED:
            self.call_later(self.ask_login, status.detail)
        elif status.state == LOGGED_OUT:
            self.call_later(self.ask_login, f"signed out: {status.detail}")

    @work(exclusive=True, group="logout")
    async def log_out(self, everywhere: bool) -> None:
        """``/logout``: end the session at the server, then leave, saying how it went."""
        assert self.link is not None
        outcome = await self.link.logout(everywhere)
        self.exit(0, message=Text(f"logged out: {printable(outcome)}"))

    async def on_unmount(self) -> None:
        if self.link is not None:
            await self.link.close()

    # --- messages from the link ---------------------------------------------------------------------
    # The link keeps posting until on_unmount closes it, and Textual prunes the screens before
    # that: a frame that lands while the app shuts down still updates the state, but there are
    # no widgets left to show it in (query_one would raise NoMatches and crash the exit).
    def on_chat_app_frame_received(self, message: FrameReceived) -> None:
        changes = self.state.apply(message.frame, self.clock())
        if self.link is not None:
            for c in changes:
                if isinstance(c, Request):
                    self.link.request(c.frame)
        if self.is_running:
            self.show(changes)

    def on_chat_app_link_changed(self, message: LinkChanged) -> None:
        self.link_status = message.status
        if self.is_running:
            self._show_link_state()

    def apply_frame(self, frame: dict[str, Any]) -> None:
        """Apply one frame as if the link had posted it (used by tests and tools)."""
        self.show(self.state.apply(frame, self.clock()))

    # --- input ----------------------------------------------------------------------------------------
    @on(Input.Submitted, "#input")
    def _submitted(self, event: Input.Submitted) -> None:
        inp = self.query_one("#input", HistoryInput)
        line = event.value
        inp.remember(line)
        inp.value = ""
        if self.controller is None:
            self.show(self.state.notice("not logged in yet", "error"))
            return
        try:
            self.show(self.controller.send_requests(self.controller.submit(line)))
        except Logout as request:
            self.show(self.state.notice("logging out…"))
            self.log_out(request.everywhere)
        except Quit:
            self.exit(0)

    @on(OptionList.OptionSelected, "#rooms")
    def _room_selected(self, event: OptionList.OptionSelected) -> None:
        if event.option.id and event.option.id != self.state.active:
            self.show(self.state.set_active(event.option.id))
        self.query_one("#input").focus()

    def action_next_room(self, step: int = 1) -> None:
        rooms = self.state.joined_rooms()
        if not rooms:
            return
        i = rooms.index(self.state.active) if self.state.active in rooms else -1
        self.show(self.state.set_active(rooms[(i + step) % len(rooms)]))

    def action_prev_room(self) -> None:
        self.action_next_room(-1)

    def action_toggle_sidebar(self) -> None:
        self.query_one("#sidebar").toggle_class("hidden")

    def action_reconnect(self) -> None:
        if self.link is not None:
            self.link.retry_now()

    def action_help(self) -> None:
        if self.controller is not None:
            self.show(self.controller.submit("/help"))

    def run_changes(self, changes: list[Change]) -> None:
        """Send what the changes ask for, and show them."""
        if self.controller is not None:
            self.controller.send_requests(changes)
        self.show(changes)

    def tick(self) -> None:
        """Once a second: alerts due again, whether the room shown is being read; the directory's ages; expired
        positions go and the positions' ages are redrawn; lines past their expiry are marked."""
        now = self.clock()
        self.run_changes(self.state.due_alerts(now))
        self.run_changes(self.state.expire_positions(now))
        self.run_changes(self.state.expire_messages(now))
        self.check_read()
        if self.is_running and now - self._directory_drawn >= self.AGES_EVERY:
            self._show_directory()
        if self.is_running and self.state.positions.units:
            self._show_positions()

    def check_read(self) -> None:
        """The room shown, scrolled to its end, is read: its counts go and the server is told."""
        if not self.is_running or self.link is None or self.state.active != self._shown_room:
            return
        log = self.query_one("#log", VerticalScroll)
        if log.is_vertical_scroll_end or log.max_scroll_y == 0:
            self.run_changes(self.state.read_now(self.state.active))

    def action_acknowledge(self) -> None:
        if self.controller is not None:
            self.run_changes(self.controller.submit("/ack"))

    def action_goto_original(self) -> None:
        if self.controller is not None:
            self.run_changes(self.controller.submit("/goto"))

    @on(OptionList.OptionSelected, "#directory")
    def _directory_selected(self, event: OptionList.OptionSelected) -> None:
        self.directory_selected(event)

    @on(OptionList.OptionSelected, "#label-picker")
    def _label_picked(self, event: OptionList.OptionSelected) -> None:
        self.label_picked(event)

    @on(OptionList.OptionSelected, "#results")
    def _result_selected(self, event: OptionList.OptionSelected) -> None:
        self.result_selected(event)

    @on(MessageLine.Clicked)
    def _line_clicked(self, event: MessageLine.Clicked) -> None:
        self.select(event.line)
        if event.on_quote and event.line.entry.reply_to:
            self.run_changes(self.state.jump(event.line.entry.room, event.line.entry.reply_to))

    @on(GapLine.Clicked)
    def _gap_clicked(self, event: GapLine.Clicked) -> None:
        self.run_changes(self.state.fill_gap(event.gap.room, event.gap.before))

    def action_scroll_log(self, pages: int) -> None:
        log = self.query_one("#log", VerticalScroll)
        (log.scroll_page_down if pages > 0 else log.scroll_page_up)(animate=False)

    # --- rendering --------------------------------------------------------------------------------------
    def show(self, changes: list[Change]) -> None:
        """Turn state changes into widget updates."""
        rooms_dirty = sites_dirty = presence_dirty = labels_dirty = title_dirty = False
        panels: set[str] = set()
        jump: JumpTo | None = None
        for c in changes:
            if isinstance(c, Inserted):
                if c.room == self.state.active and c.room == self._shown_room:
                    self._mount_entry(c.room, c.entry)
                rooms_dirty = rooms_dirty or c.room != self.state.active
            elif isinstance(c, (Updated, Receipt)):
                w = self._lines.get(c.entry.key)
                if isinstance(w, (MessageLine, GapLine)):
                    w.refresh_entry()
            elif isinstance(c, Removed):
                w = self._lines.pop(c.entry.key, None)
                if w is not None:
                    w.remove()
            elif isinstance(c, RoomsChanged):
                rooms_dirty = title_dirty = True       # (a line in another room changes the list, not the title)
            elif isinstance(c, SitesChanged):
                sites_dirty = True
            elif isinstance(c, PresenceChanged):
                presence_dirty = True
            elif isinstance(c, Output):
                self.notify("\n".join(printable_lines(c.text)), markup=False,
                            severity="error" if c.level == "error" else
                            "warning" if c.level == "warning" else "information")
            elif isinstance(c, Notify):
                self.bell()
                self.announce(c)
            elif isinstance(c, Panel):
                panels.add(c.name)
            elif isinstance(c, PositionsListed):
                self.action_toggle_positions(show=True)
            elif isinstance(c, JumpTo):
                jump = c
            elif isinstance(c, (Banner, SendLabel)):
                labels_dirty = True
        if self.state.active != self._shown_room:
            self._rebuild_log()
            rooms_dirty = labels_dirty = True
        if labels_dirty:
            self._show_labels()
        if "alerts" in panels:
            self._show_alerts()
        if "directory" in panels:
            self._show_directory()
        if "search" in panels:
            self._show_results()
        if "positions" in panels:
            self._show_positions()
        if jump is not None:
            self.call_after_refresh(self._jump_to, jump)
        if changes:
            self.call_after_refresh(self.check_read)
        if rooms_dirty:
            self._show_rooms()
        if title_dirty:
            self._show_title()
        if sites_dirty:
            self._show_sites()
            for w in self._lines.values():     # the receipt denominator is the number of sites
                if isinstance(w, MessageLine) and w.entry.own:
                    w.refresh_entry()
        if presence_dirty or sites_dirty:     # the panel shows each site's status too
            self._show_presence()

    def _widget_for(self, entry: Entry) -> Static:
        if isinstance(entry, MessageEntry):
            return MessageLine(entry, self.state, self.timefmt)
        if isinstance(entry, Gap):
            return GapLine(entry)
        return NoticeLine(entry)

    def _mount_entry(self, room_name: str, entry: Entry) -> None:
        log = self.query_one("#log", VerticalScroll)
        entries = self.state.rooms[room_name].entries
        follow = log.is_vertical_scroll_end or log.max_scroll_y == 0
        w = self._widget_for(entry)
        old = self._lines.pop(entry.key, None)
        if old is not None:
            old.remove()
        self._lines[entry.key] = w
        before: Static | None = None
        i = entries.index(entry)
        for nxt in entries[i + 1:]:
            before = self._lines.get(nxt.key)
            if before is not None:
                break
        if before is not None:
            log.mount(w, before=before)
        else:
            log.mount(w)
        if follow:
            log.call_after_refresh(log.scroll_end, animate=False)

    def _show_title(self) -> None:
        """The shown room's name, and whether it is only a preview (a ``/join`` under way, a public room not
        joined) or has older messages to fetch: both change without another room being shown."""
        title = self.query_one("#room-title", Static)
        room = self.state.active
        r = self.state.rooms.get(room) if room is not None else None
        if r is None:
            title.update("no room: /join ROOM")
            return
        title.update(Text.assemble(("# ", "dim"), (printable(r.name), "bold"),
                                   ("   preview: /join to write here" if not r.joined else "", "bold"),
                                   ("   older messages: /history" if r.more else "", "dim")))

    def _rebuild_log(self) -> None:
        log = self.query_one("#log", VerticalScroll)
        log.remove_children()
        self._lines.clear()
        room = self.state.active
        self._shown_room = room
        self._show_title()
        if room is None or room not in self.state.rooms:
            return
        r = self.state.rooms[room]
        self._selected = None
        widgets = [self._widget_for(e) for e in r.entries]
        for e, w in zip(r.entries, widgets):
            self._lines[e.key] = w
        if widgets:
            log.mount_all(widgets)
        log.call_after_refresh(log.scroll_end, animate=False)

    def _rebuild_all(self) -> None:
        self._shown_room = object()  # type: ignore[assignment]   # force a rebuild
        self.show([RoomsChanged(), SitesChanged(None, None)])
