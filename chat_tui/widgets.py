"""The widgets of the Textual client: message, notice and gap lines, the input line, the login screen.

Nothing from the server is ever parsed as markup: every string goes through
``safe_text.printable`` and into a ``rich.text.Text`` (or ``markup=False``).
"""
from __future__ import annotations

from collections.abc import Callable

from rich.text import Text
from textual import events, on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Button, Input, Label, Static

from contracts.precedence import DEFAULT, URGENT, Precedence

from .labels import label_style
from .link import site_of
from .marks import runs
from .safe_text import printable, printable_lines
from .state import ACCEPTED, DELIVERED, FAILED, PENDING, ChatState, Gap, MessageEntry, Notice
from .words import late_mark, order_mark

PRECEDENCE_STYLES = {Precedence.FLASH.value: "bold white on red",           # the levels above routine: their marks,
                     Precedence.IMMEDIATE.value: "bold black on dark_orange",    # and their CSS classes
                     Precedence.PRIORITY.value: "bold blue"}


class MessageLine(Static):
    """One chat message: time, user@site, text; own ones distinct; late ones marked; receipts on own ones.

    A reply's first line is its own head (time, marks, ``user@site:``) followed by a quote of the line it
    answers (a click there goes to it), its text under it, aligned after the head: the quote belongs to
    the reply, never reads as the line above continuing. A FLASH or IMMEDIATE message ends with its
    acknowledgement list. Mentions of the operator are marked."""

    class Clicked(Message):
        def __init__(self, line: MessageLine, on_quote: bool) -> None:
            super().__init__()
            self.line = line
            self.on_quote = on_quote

    def __init__(self, entry: MessageEntry, app_state: ChatState, timefmt: Callable[[float], str]) -> None:
        super().__init__(classes="message")
        self.entry = entry
        self.app_state = app_state
        self.timefmt = timefmt
        self.refresh_entry()

    def receipt_text(self) -> str:
        e = self.entry
        if e.state == PENDING:
            return "… sending"
        if e.state == FAILED:
            return "✗ not sent"
        n, total = len(e.receipts), self.app_state.site_count()
        if e.state not in (ACCEPTED, DELIVERED):
            return ""
        missed = e.not_sent_to()         # until repair brings it there: then its receipt takes the name off
        return f"✓ {n}/{total}" + (f" · not sent to {', '.join(printable(s) for s in missed)} (disconnected)"
                                   if missed else "")

    def quote_text(self) -> Text | None:
        """``↩ bob@B [LATE] text of the line answered`` (one line, cut), or why it cannot be shown."""
        q = self.app_state.quote_for(self.entry)
        if q is None:
            return None
        line = Text("↩ ", style="dim")
        if q.state != "loaded":
            why = "not at this site yet (it may come late)" if q.state == "missing" else "loading…"
            line.append(f"in reply to {printable(q.msg_id)}, {why}", style="dim italic")
            return line
        line.append(f"{printable(q.user)}@{printable(q.origin)} ", style="dim bold")
        if q.late:
            line.append("[LATE] ", style="dim")
        text = q.text if len(q.text) <= 60 else q.text[:60] + "…"
        line.append(printable(text), style="dim italic")
        return line

    def acks_text(self) -> Text | None:
        e = self.entry
        if e.precedence not in URGENT or e.state != DELIVERED:
            return None
        line = Text("  ")
        if e.alert:
            line.append("acknowledging…" if e.acking else "F2 or /ack: acknowledge", style="bold reverse")
            line.append("  ")
        if e.acks:
            line.append("acknowledged by ", style="green")
            line.append(", ".join(f"{printable(u)}@{printable(s)} {self.timefmt(at)}" for u, s, at in e.acks),
                        style="bold green")
        else:
            line.append("not acknowledged yet", style="yellow")
        return line

    def refresh_entry(self) -> None:
        e = self.entry
        self.set_class(e.own, "own")
        self.set_class(e.late, "late")
        self.set_class(e.state != DELIVERED, "unconfirmed")
        delivered_all = e.own and e.state == DELIVERED and len(e.receipts) >= self.app_state.site_count()
        self.set_class(delivered_all, "everywhere")
        for level in PRECEDENCE_STYLES:
            self.set_class(e.precedence == level, level)
        self.set_class(e.alert, "alert")
        self.set_class(e.mentions_me, "mention")
        self.set_class(e.reply_to is not None, "reply")
        self.set_class(e.expired, "expired")
        out = Text()
        out.append(self.timefmt(e.sent_at), style="dim")
        out.append(" ")
        if e.out_of_time:                # placed by the global order, after a line written later (F1 says why)
            out.append(f"[{order_mark(e.out_of_time)}]", style="dim")
            out.append(" ")
        if e.late:
            out.append(f"[{late_mark(e.late_by)}]", style="bold black on yellow")
            out.append(" ")
        if e.repaired:
            out.append("[REPAIRED]", style="bold black on yellow")
            out.append(" ")
        if e.precedence != DEFAULT:
            out.append(f"[{e.precedence.upper()}]", style=PRECEDENCE_STYLES[e.precedence])
            out.append(" ")
        room = self.app_state.rooms.get(e.room)
        if e.label is not None and (room is None or e.label != room.label):    # (the banners show the floor)
            out.append(f" {printable(str(e.label))} ", style=label_style(self.app_state.scheme, e.label))
            out.append(" ")
        if e.expires_at is not None:     # (expiry.py: an expired line stays readable, dimmed)
            out.append("[EXPIRED]" if e.expired else f"[expires {self.timefmt(e.expires_at)}]",
                       style="bold" if e.expired else "dim")
            out.append(" ")
        out.append(f"{printable(e.user)}@{printable(e.origin)}", style="bold")
        out.append(": ")
        quote = self.quote_text()
        self._quote_at: int | None = None
        if quote is not None:            # the head, then the quote on the same line, the text under it
            indent = self._quote_at = out.cell_len
            out.append_text(quote)
            out.append("\n" + " " * min(indent, 40))
        for run in runs(e.text, user=self.app_state.user, site=self.app_state.site):
            out.append(printable(run.text), style="bold reverse" if run.mention == "me" else
                       "bold" if run.mention else "")
        if e.own:
            out.append("  ")
            out.append(self.receipt_text(), style="bold")
        acks = self.acks_text()
        if acks is not None:
            out.append("\n")
            out.append_text(acks)
        self.update(out)

    def on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        on_quote = (self._quote_at is not None and offset is not None and offset.y == 0
                    and offset.x >= self._quote_at)
        self.post_message(self.Clicked(self, on_quote))


class GapLine(Static):
    """Messages missing between two loaded stretches of the log; a click (or /history) fetches them."""

    class Clicked(Message):
        def __init__(self, gap: Gap) -> None:
            super().__init__()
            self.gap = gap

    def __init__(self, gap: Gap) -> None:
        super().__init__(classes="gap")
        self.gap = gap
        self.refresh_entry()

    def refresh_entry(self) -> None:
        self.update(Text("··· loading the messages missing here ···" if self.gap.loading else
                         "··· messages missing here: click, or /history ···"))

    def on_click(self, event: events.Click) -> None:
        self.post_message(self.Clicked(self.gap))


class NoticeLine(Static):
    def __init__(self, notice: Notice) -> None:
        super().__init__(Text("\n".join(printable_lines(notice.text))), classes=f"notice {notice.level}")
        self.notice = notice


class HistoryInput(Input):
    """The input line; up/down walk through what was typed before."""

    BINDINGS = [Binding("up", "older", "Previous line", show=False),
                Binding("down", "newer", "Next line", show=False)]

    def __init__(self, **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self.lines: list[str] = []
        self._pos = 0
        self._draft = ""

    def remember(self, line: str) -> None:
        if line and (not self.lines or self.lines[-1] != line):
            self.lines.append(line)
        self._pos = len(self.lines)
        self._draft = ""

    def action_older(self) -> None:
        if self._pos == len(self.lines):
            self._draft = self.value
        if self._pos > 0:
            self._pos -= 1
            self.value = self.lines[self._pos]
            self.cursor_position = len(self.value)

    def action_newer(self) -> None:
        if self._pos < len(self.lines):
            self._pos += 1
            self.value = self.lines[self._pos] if self._pos < len(self.lines) else self._draft
            self.cursor_position = len(self.value)


class LoginScreen(Screen[tuple[str, str]]):
    """User name and password; dismissed with both. It names the site one signs in to (``#login-site``):
    the one the app knows, else the one the chat server's ``/health`` names."""

    def __init__(self, url: str, user: str, error: str = "", *, site: str | None = None, ssl: object = None) -> None:
        super().__init__()
        self.url, self.user, self.error, self.site, self.ssl = url, user, error, site, ssl

    def compose(self) -> ComposeResult:
        with Vertical(id="login-box"):
            yield Label("RCM chat", id="login-title")
            yield Label(self._site_words(), id="login-site")
            yield Label(Text(printable(self.url)), id="login-url")
            yield Input(self.user, placeholder="user", id="login-user")
            yield Input(placeholder="password", password=True, id="login-password")
            yield Button("Log in", id="login-button", variant="primary")
            yield Static(Text(printable(self.error)), id="login-error")

    def on_mount(self) -> None:
        self.query_one("#login-password" if self.user else "#login-user", Input).focus()
        if self.site is None:
            self.run_worker(self._ask_site(), exclusive=True, group="login-site")

    def _site_words(self) -> Text:
        if self.site is None:
            return Text("Sign in to the site at:", style="dim")
        return Text.assemble("Sign in to site ", (printable(self.site), "bold"))

    async def _ask_site(self) -> None:
        site = await site_of(self.url, ssl=self.ssl)
        if site is not None and self.is_mounted:
            self.site = site
            self.query_one("#login-site", Label).update(self._site_words())

    @on(Input.Submitted, "#login-user")
    def _next_field(self) -> None:
        self.query_one("#login-password", Input).focus()

    @on(Input.Submitted, "#login-password")
    @on(Button.Pressed, "#login-button")
    def _submit(self) -> None:
        user = self.query_one("#login-user", Input).value.strip()
        password = self.query_one("#login-password", Input).value
        if not user or not password:
            self.query_one("#login-error", Static).update("user name and password are both needed")
            return
        self.dismiss((user, password))
