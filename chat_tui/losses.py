"""Messages lost in a disconnection and brought back by repair, as the operator reads them (a ``ChatState`` mixin).

Theory of operation
-------------------
Recovered replaces lost (docs/chat-protocol.md, ``missing``): each origin has
one notice in every joined room, keyed by origin and room, which every report
replaces (removed, then appended at the bottom, where the operator looks):

* a first report (``missing`` without ``recovered``) adds to what is still
  missing from that origin (one disconnection may come as several frames);
* a revision (``recovered``: how many came back since the last one;
  ``expired``: how many repair answered with an expired stub, messages that
  existed and expired before they reached this site, neither lost nor shown)
  says what is still missing, and what came back or expired adds up;
* the notice reads "up to N messages from site C lost" (warning), then
  "recovered N ...; up to M still missing" (warning), then "recovered N messages
  from site C" (success: everything came back);
* ``welcome``'s ``missing`` (``{origin: count}``, what is still missing after
  repair) reconciles a client that was away when a revision went out: a notice
  of an origin not listed goes, one whose count changed is revised.

``count`` counts RCM messages, control messages included: an upper bound on lost
chat messages, hence "up to".
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .model import Change, Inserted, Notice, Output, Room
from .safe_text import printable
from .words import count_of, plural


class LossState:
    # Provided by ChatState (state.py):
    rooms: dict[str, Room]
    if TYPE_CHECKING:
        def joined_rooms(self) -> list[str]: ...
        def room(self, name: str) -> Room: ...
        def _append(self, room_name: str, entry: Any) -> Inserted: ...
        def _remove(self, entry: Any) -> list[Change]: ...

    def __init__(self) -> None:
        self.losses: dict[str, tuple[int, int, int]] = {}    # origin -> (still missing, recovered, expired so far)

    def _on_missing(self, f: dict[str, Any], now: float) -> list[Change]:
        """Messages from a site lost in a disconnection, or a revision after repair brought some back."""
        origin = str(f.get("origin", "?"))
        count = count_of(f.get("count"))
        lost, back, gone = self.losses.get(origin, (0, 0, 0))
        if "recovered" in f or "expired" in f:
            lost, back, gone = count, back + count_of(f.get("recovered")), gone + count_of(f.get("expired"))
        else:
            if lost == 0:
                back = gone = 0                          # a new loss after everything came back: a new story
            lost += count
        self.losses[origin] = (lost, back, gone)
        return self._show_loss(origin)

    def _reconcile_losses(self, missing: object) -> list[Change]:
        """``welcome``'s ``missing`` after a resume: what is still missing now, per origin."""
        if not isinstance(missing, dict):
            return []
        out: list[Change] = []
        for origin, (lost, back, gone) in list(self.losses.items()):
            count = count_of(missing.get(origin))
            if count == 0:
                del self.losses[origin]
                out += self._drop_loss_notices(origin)
            elif count != lost:
                self.losses[origin] = (count, back, gone)
                out += self._show_loss(origin)
        return out

    def _loss_words(self, origin: str) -> tuple[str, str]:
        lost, back, gone = self.losses[origin]
        site = f"site {printable(origin)}"
        them = "it" if lost == 1 else "them"
        if back and not gone and not lost:
            return f"recovered {plural(back, 'message')} from {site}: shown in place, marked repaired", "success"
        if back or gone:
            parts = [f"recovered {plural(back, 'message')} from {site}, shown in place, marked repaired"] * bool(back)
            if gone:
                parts.append(f"{'' if back else f'from {site}: '}{plural(gone, 'message')} expired before reaching "
                             "this site (not lost, not shown)")
            text = "; ".join(parts)
            if not lost:
                return text, "success"
            return f"{text}; up to {plural(lost, 'message')} still missing", "warning"
        return (f"up to {plural(lost, 'message')} from {site} lost in a disconnection: repair brings {them} back "
                f"in place if another site still holds {them}"), "warning"

    def _drop_loss_notices(self, origin: str) -> list[Change]:
        out: list[Change] = []
        for r in list(self.rooms.values()):
            key = f"missing:{origin}:{r.name}"
            out += [c for x in r.entries if isinstance(x, Notice) and x.key == key for c in self._remove(x)]
        return out

    def _show_loss(self, origin: str) -> list[Change]:
        """The origin's notice, in every joined room, in place of the one before."""
        text, level = self._loss_words(origin)
        out = self._drop_loss_notices(origin)
        rooms = self.joined_rooms()
        if not rooms:
            return out + [Output(text, level)]
        for r in rooms:
            out.append(self._append(r, Notice(f"missing:{origin}:{r}", r, text, level, "all")))
        return out
