"""The Textual client's security labels: the room's classification banners, the label by the input and its
picker (a ``ChatApp`` mixin).

In a labelled mission the room shown wears its floor label in a banner above the room's title
(``#label-top``) and another under the input (``#label-bottom``), in the level's colours (labels.py:
UNCLASSIFIED green, CONFIDENTIAL blue, SECRET red, TOP SECRET orange; text black or white by contrast). Left
of the input, ``#send-label`` shows the label the next line carries, in its colours. F6 opens the picker
(``#label-picker``, above the input): only the labels the user may send in this room (``Scheme.sendable``);
Enter or a click chooses, Escape closes; ``/label LABEL`` does the same by name. The choice goes back to the
floor when another room is shown. In an unlabeled mission all of this stays hidden.

(The app's ``@on`` handler for the picker calls ``label_picked``: Textual collects decorated handlers from
the app's own class only.)
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from .labels import label_style, level_colours
from .safe_text import printable
from .state import ChatState

if TYPE_CHECKING:
    from .state import Change


class LabelBars:
    # Provided by ChatApp (app.py):
    state: ChatState
    if TYPE_CHECKING:
        def run_changes(self, changes: list[Change]) -> None: ...

    @property
    def _app_(self) -> Any:
        return self

    def _show_labels(self) -> None:
        """Draw the banners and the label by the input from the state."""
        app = self._app_
        st = self.state
        room = st.rooms.get(st.active or "")
        floor = room.label if room is not None and st.scheme is not None else None
        for wid in ("#label-top", "#label-bottom"):
            w = app.query_one(wid, Static)
            w.set_class(floor is not None, "on")
            if floor is None:
                continue
            bg, fg = level_colours(floor.level, floor.rank, len(st.scheme.levels) if st.scheme else 0)
            w.styles.background = bg
            w.styles.color = fg
            w.update(Text(printable(str(floor)), style="bold"))
        chip = app.query_one("#send-label", Static)
        label = st.label_to_send(room)
        chip.set_class(label is not None, "on")
        if label is not None:
            many = len(st.choices(room)) > 1
            chip.update(Text.assemble((f" {printable(str(label))} ", label_style(st.scheme, label)),
                                      (" F6" if many else "", "dim")))
        if app.query_one("#label-picker", OptionList).has_class("on"):
            self._fill_picker()

    def _fill_picker(self) -> None:
        picker = self._app_.query_one("#label-picker", OptionList)
        st = self.state
        room = st.rooms.get(st.active or "")
        labels = st.choices(room)
        now = st.label_to_send(room)
        picker.clear_options()
        for i, lb in enumerate(labels):
            picker.add_option(Option(Text(f" {printable(str(lb))} ", style=label_style(st.scheme, lb)), id=str(i)))
        if now in labels:
            picker.highlighted = labels.index(now)

    def action_pick_label(self) -> None:
        """F6: open the picker of the labels one may send here (again: close it)."""
        app = self._app_
        picker = app.query_one("#label-picker", OptionList)
        room = self.state.rooms.get(self.state.active or "")
        if picker.has_class("on") or len(self.state.choices(room)) < 2:
            self.close_label_picker()
            if self.state.scheme is not None and len(self.state.choices(room)) < 2:
                app.notify("no other label to choose here", severity="warning")
            return
        picker.add_class("on")
        picker.border_title = "send at (Enter chooses, Escape closes)"
        self._fill_picker()
        picker.focus()

    def close_label_picker(self) -> bool:
        """Close the picker if it is open (Escape); True when it was."""
        app = self._app_
        picker = app.query_one("#label-picker", OptionList)
        if not picker.has_class("on"):
            return False
        picker.remove_class("on")
        app.query_one("#input").focus()
        return True

    def label_picked(self, event: OptionList.OptionSelected) -> None:
        room = self.state.rooms.get(self.state.active or "")
        labels = self.state.choices(room)
        i = int(event.option.id or -1)
        if 0 <= i < len(labels):
            changes, why = self.state.choose_label(str(labels[i]))
            self.run_changes(changes if why is None else self.state.notice(why, "error"))
        self.close_label_picker()
