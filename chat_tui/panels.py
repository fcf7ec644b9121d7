"""The Textual client's panels (the alert bar, the site bar, who is online, the room directory, the search
results, the units' positions) and the chosen line of the log (a ``ChatApp`` mixin).

FLASH and IMMEDIATE alerts have one home on screen, the alert bar under the
top line: it lists the unacknowledged ones (a line each, the three most urgent)
and never covers the log or the input. They ring the bell when they come and
again while unacknowledged; they never pop up toasts (toasts stacked over the
log and input, one per alert and per reminder). F4 folds the bar to one line
(how many wait, F2 acknowledges) and unfolds it; a new alert unfolds it.

The positions list (``#positions-box``: a title and the ``#positions`` table of
unit, site, user, lat, lon and age, by unit) sits above the log, hidden until
F5 or ``/positions`` shows it (F5 hides it again); while shown it is redrawn as
reports come and, by the app's timer, as they age (``positions.PositionBook``
keeps the reports; the ages are derived from the clock at each drawing).

Each ``_show_*`` draws one panel from the state; selecting a directory row
joins (or shows) the room, selecting a result goes to the message in context
(the app's ``@on`` handlers call ``directory_selected`` / ``result_selected``:
Textual collects decorated handlers from the app's own class only).
Server strings go through ``safe_text.printable`` into ``rich.text.Text``.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import DataTable, Label, OptionList, Static
from textual.widgets.option_list import Option

from contracts.precedence import Precedence

from .link import CONNECTED, RETRYING, LinkStatus
from .marks import runs
from .safe_text import printable
from .state import STATUSES, Change, ChatState, JumpTo, Notify
from .widgets import MessageLine
from .words import plural

if TYPE_CHECKING:
    from .controller import Controller

ALERT_STYLES = {Precedence.FLASH.value: "bold white on red", Precedence.IMMEDIATE.value: "bold black on dark_orange"}


class Panels:
    # Provided by ChatApp (app.py):
    state: ChatState
    controller: Controller | None
    timefmt: Callable[[float], str]
    clock: Callable[[], float]
    _selected: MessageLine | None
    alerts_folded: bool
    _site_widgets: dict[str, Static]
    _directory_drawn: float
    link_status: LinkStatus
    user: str
    if TYPE_CHECKING:
        def run_changes(self, changes: list[Change]) -> None: ...

    @property
    def _app(self) -> Any:
        """This object as the Textual app it is part of (query_one, notify)."""
        return self

    # --- the chosen line ----------------------------------------------------------------------------------
    def action_select_line(self, step: int) -> None:
        """Choose the previous/next message of the log (for /reply, F2, F3)."""
        lines = [w for w in self._app.query(MessageLine) if w.entry.msg_id and w.entry.state == "delivered"]
        if not lines:
            return
        i = lines.index(self._selected) if self._selected in lines else len(lines)
        self.select(lines[max(0, min(len(lines) - 1, i + step))])

    def action_let_go(self) -> None:
        if self._app.close_label_picker():
            return
        if self.state.search is not None:
            self._app.show(self.state.close_search())
        self.select(None)
        self._app.query_one("#input").focus()

    def select(self, line: MessageLine | None, jumped: bool = False) -> None:
        if self._selected is not None:
            self._selected.remove_class("selected", "jumped")
        self._selected = line
        self.state.selected = line.entry.msg_id if line is not None else None
        if line is not None:
            line.add_class("selected")
            line.set_class(jumped, "jumped")
            self._app.query_one("#log", VerticalScroll).scroll_to_widget(line, animate=False, center=jumped)

    def _jump_to(self, jump: JumpTo) -> None:
        """Choose and show the message of a jump (after the log was drawn)."""
        w = self._app._lines.get(jump.msg_id)
        if isinstance(w, MessageLine) and self.state.active == jump.room:
            self.select(w, jumped=True)


    def announce(self, c: Notify) -> None:
        """A toast for a line naming the operator; an alert (the bell rang) shows in the alert bar only."""
        e = c.entry
        if c.kind == "mention":
            who = f"{printable(e.user)}@{printable(e.origin)}"
            self._app.notify(f"{who} mentioned you in {printable(e.room)}: {printable(e.text[:120])}",
                             markup=False, title="Mention")
        elif not c.repeat and self.alerts_folded:
            self.alerts_folded = False             # a new alert unfolds the bar; a reminder only rings
            self._show_alerts()

    def action_fold_alerts(self) -> None:
        """F4: fold the alert bar to one line, or unfold it."""
        self.alerts_folded = not self.alerts_folded
        self._show_alerts()

    def _show_alerts(self) -> None:
        bar = self._app.query_one("#alerts", Static)
        alerts = self.state.alert_list()
        bar.display = bool(alerts)
        bar.set_class(bool(alerts) and alerts[0].precedence == Precedence.IMMEDIATE.value, Precedence.IMMEDIATE.value)
        bar.set_class(self.alerts_folded, "folded")
        text = Text()
        if alerts and self.alerts_folded:
            first = alerts[0]
            text.append(f" {first.precedence.upper()} ", style=ALERT_STYLES[first.precedence])
            text.append(f" {plural(len(alerts), 'message')} to acknowledge", style="bold")
            text.append("  F2 acknowledges the first · F4 shows them", style="italic")
            bar.update(text)
            return
        for a in alerts[:3]:
            e = a.entry
            if text:
                text.append("\n")
            text.append(f" {a.precedence.upper()} ", style=ALERT_STYLES[a.precedence])
            text.append(f" {printable(e.user)}@{printable(e.origin)} in {printable(e.room)}: ", style="bold")
            text.append(printable(e.text if len(e.text) <= 120 else e.text[:120] + "…"))
            if a.acking:
                text.append("  acknowledging…", style="italic")
        if alerts:
            more = f"and {len(alerts) - 3} more · /ack all acknowledges every one · " if len(alerts) > 3 else ""
            text.append(f"\n {more}F2 or /ack acknowledges the first · F4 folds this bar", style="italic")
        bar.update(text)

    def _show_rooms(self) -> None:
        rooms = self._app.query_one("#rooms", OptionList)
        names = self.state.joined_rooms()
        rooms.clear_options()
        for name in names:
            r = self.state.rooms[name]
            label = Text(f"# {printable(name)} ")
            if r.unread:
                label.append(f"({r.unread})", style="bold")
            if r.mentions:
                label.append(f" @{r.mentions}", style="bold reverse")
            rooms.add_option(Option(label, id=name))
        if self.state.active in names:
            rooms.highlighted = names.index(self.state.active)

    def _show_link_state(self) -> None:
        s = self.link_status
        w = self._app.query_one("#link-state", Static)
        for cls in ("connecting", "connected", "retrying", "auth_failed", "logged_out", "closed"):
            w.set_class(s.state == cls, cls)
        if s.state == CONNECTED:
            text = f"● {self.user}@{self.state.site or '?'}"
        elif s.state == RETRYING:
            text = f"○ reconnecting: {s.detail}; retry {s.attempt} in {s.retry_in:.1f} s (Ctrl+R now)"
        else:
            text = f"○ {s.describe()}"
        w.update(Text(printable(text)))

    def _show_sites(self) -> None:
        bar = self._app.query_one("#sites", Horizontal)
        for site, status in sorted(self.state.sites.items()):
            w = self._site_widgets.get(site)
            if w is None:
                w = self._site_widgets[site] = Static(id=f"site-{_css_id(site)}", classes="site")
                bar.mount(w)
            for cls in STATUSES:
                w.set_class(status == cls, cls)
            w.set_class(site in self.state.chat_down, "chat-down")
            here = "*" if site == self.state.site else ""
            w.update(Text(f" {printable(site)}{here} {printable(self.state.site_words(site))} "))

    def _show_presence(self) -> None:
        lines = Text()
        for site in sorted(self.state.presence):
            users = sorted(self.state.presence[site])
            lines.append(f"{printable(site)} ", style="bold")
            lines.append(f"({printable(self.state.site_words(site))})\n", style="dim")
            for u in users:
                lines.append(f"  {printable(u)}\n")
        self._app.query_one("#presence", Static).update(lines)

    def _show_directory(self) -> None:
        box = self._app.query_one("#directory", OptionList)
        rows = self.state.directory or []
        title = self._app.query_one("#directory-title")
        title.update(f"Directory ({len(rows)})" if self.state.directory is not None else "Directory")
        highlighted = box.highlighted
        box.clear_options()
        now = self._directory_drawn = self.clock()
        for r in rows:
            joined = bool(r.get("joined"))
            label = Text(f"{'✓' if joined else '+'} {printable(r['room'])}", style="" if joined else "bold")
            last = r.get("last_at")
            ago = "" if not isinstance(last, (int, float)) else f"·{_short_ago(now - last)}"
            label.append(f" {'p·' if r.get('private') else ''}{printable(r.get('members', 0))}{ago}", style="dim")
            box.add_option(Option(label, id=f"dir:{r['room']}"))
        if highlighted is not None and rows:             # a redraw (live counts, ages) keeps the operator's place
            box.highlighted = min(highlighted, len(rows) - 1)

    def action_toggle_positions(self, show: bool | None = None) -> None:
        """F5: show the positions list, or hide it (``show``: True shows it whatever it was)."""
        box = self._app.query_one("#positions-box", Vertical)
        box.display = (not box.display) if show is None else show
        if box.display:
            self._show_positions()

    def _show_positions(self) -> None:
        """Draw the positions list (when shown): the title with the count, a row per unit, the ages now."""
        box = self._app.query_one("#positions-box", Vertical)
        if not box.display:
            return
        st = self.state
        rows = st.positions.rows(self.clock())
        title = f"Positions ({plural(len(rows), 'unit')})"
        if st.positions.refused:
            title += f" · {plural(st.positions.refused, 'bad report')} ignored"
        if st.positions_unavailable is not None:
            title += f" · not available from this server: {st.positions_unavailable}"
        title += " · F5 hides"
        self._app.query_one("#positions-title", Label).update(Text(printable(title)))
        table = self._app.query_one("#positions", DataTable)
        if not table.columns:
            for head in ("Unit", "Site", "User"):
                table.add_column(head, key=head.lower())
            for head in ("Lat", "Lon", "Age"):
                table.add_column(Text(head, justify="right"), key=head.lower())
        keys = [f"{r.position.site}\x00{r.position.unit}" for r in rows]
        cells = [{"unit": Text(r.unit, style="bold"), "site": Text(r.site), "user": Text(r.user),
                  "lat": Text(r.lat, justify="right"), "lon": Text(r.lon, justify="right"),
                  "age": Text(r.age, justify="right")} for r in rows]     # Text: a DataTable reads a str as markup
        if keys == [k.value for k in table.rows]:
            for key, row in zip(keys, cells):   # the same units in the same order: new cells in place (the
                for column, cell in row.items():  # operator's place and scroll stay), the ages at each tick
                    if str(table.get_cell(key, column)) != str(cell):
                        table.update_cell(key, column, cell, update_width=True)
            return
        cursor = table.cursor_row
        table.clear()
        for key, row in zip(keys, cells):
            table.add_row(*row.values(), key=key)
        if rows:
            table.move_cursor(row=min(cursor, len(rows) - 1), animate=False)

    def _show_results(self) -> None:
        box = self._app.query_one("#results", OptionList)
        q = self.state.search
        box.display = q is not None
        box.clear_options()
        if q is None:
            return
        head = (f"searching for {q.text}…" if q.status == "searching" else f"search failed: {q.error}"
                if q.status == "error" else f"{plural(len(q.results), 'result')} for {q.text} "
                "(Enter goes to one; Escape closes)")
        box.add_option(Option(Text(printable(head), style="bold"), id="head", disabled=True))
        for i, m in enumerate(q.results):
            sent = m.get("sent_at")
            label = Text(f"[{printable(m['room'])}] ", style="bold")
            label.append(self.timefmt(float(sent)) if isinstance(sent, (int, float)) else "--:--:--", style="dim")
            label.append(f" {printable(m.get('user'))}@{printable(m.get('origin'))}: ", style="bold")
            if m.get("late"):
                label.append("[LATE] ", style="black on yellow")
            marks = runs(m["text"], user=self.state.user, site=self.state.site, highlights=m.get("highlights") or ())
            for run in marks:
                label.append(printable(run.text), style="bold black on yellow" if run.hit else "")
            box.add_option(Option(label, id=f"res:{i}"))

    def directory_selected(self, event: OptionList.OptionSelected) -> None:
        """A directory row: join the room (or show it, if joined)."""
        room = (event.option.id or "")[4:]
        if not room or self.controller is None:
            return
        r = self.state.rooms.get(room)
        self.run_changes(self.controller.submit(f"/switch {room}" if r is not None and r.joined else f"/join {room}"))
        self._app.query_one("#input").focus()

    def result_selected(self, event: OptionList.OptionSelected) -> None:
        """A search result: go to the message, in context."""
        q = self.state.search
        if q is None or not (event.option.id or "").startswith("res:"):
            return
        m = q.results[int((event.option.id or "")[4:])]
        self.run_changes(self.state.jump(m["room"], m["msg_id"]))


def _css_id(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "-" for c in name)


def _short_ago(seconds: float) -> str:
    if seconds < 90:
        return "now"
    if seconds < 5400:
        return f"{seconds / 60:.0f}m"
    if seconds < 129600:
        return f"{seconds / 3600:.0f}h"
    return f"{seconds / 86400:.0f}d"
