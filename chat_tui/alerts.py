"""Precedence and acknowledgements (issue 19), as part of the client's state (sans-IO, a ``ChatState`` mixin).

Theory of operation
-------------------
Every message has a precedence, ``flash > immediate > priority > routine``. A
flash or immediate message of someone else, in a room the user is in, that
the user has not acknowledged is an *alert*: kept in ``alerts`` (msg_id ->
``Alert``), drawn in the alert bar and on its line, and announced with a
``Notify`` change (the front end rings the bell): at once when it arrives
live; at the next ``due_alerts`` call when it came in a page of history (a
login after it was sent); then again every ``REPEAT[precedence]`` seconds
until acknowledged. The front end calls ``due_alerts(now)`` about once a
second.

``acknowledge`` returns the ``acknowledge {msg_id}`` request; the server's
``acknowledging`` ends the alert here; every site then tells the room
``acknowledged {msg_id, user, site, at}``, which is added to the message's
acknowledgement list (who, at which site, when: shown to the sender as to
everyone) and ends the alert in the user's other sessions. History pages carry
the list as ``acknowledgements``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from contracts.precedence import PRECEDENCES, Precedence
from contracts.precedence import URGENT as ASKS_ACK

from .model import Change, MessageEntry, Notify, Panel, Request, Room, Updated, precedence_name
from .safe_text import printable

REPEAT = {Precedence.FLASH.value: 15.0, Precedence.IMMEDIATE.value: 60.0}   # seconds between reminders until acked


@dataclass(slots=True)
class Alert:
    entry: MessageEntry
    notified_at: float | None = None    # None: not announced yet (it came in a page of history)
    acking: bool = False

    @property
    def precedence(self) -> str:
        return self.entry.precedence


class AlertState:
    # Provided by ChatState (state.py):
    user: str
    site: str | None
    by_msg_id: dict[str, MessageEntry]
    if TYPE_CHECKING:
        def notice(self, text: str, level: str = "info", room: str | None = None, scope: str = "") -> list[Change]: ...

    def __init__(self) -> None:
        self.alerts: dict[str, Alert] = {}
        self.acks: dict[str, list[tuple[str, str, float]]] = {}      # msg_id -> (user, site, at), in time order

    def alert_list(self) -> list[Alert]:
        """Outstanding alerts, flash first, oldest first within a level."""
        return sorted(self.alerts.values(), key=lambda a: (PRECEDENCES.index(a.precedence), a.entry.sent_at))

    def _add_acks(self, msg_id: str, acks: list[Any]) -> list[tuple[str, str, float]]:
        known = self.acks.setdefault(msg_id, [])
        seen = {(u, s) for u, s, _ in known}
        for a in acks:
            if not isinstance(a, dict) or not isinstance(a.get("user"), str) or not isinstance(a.get("site"), str):
                continue
            if (a["user"], a["site"]) not in seen:
                seen.add((a["user"], a["site"]))
                at = a.get("at")
                known.append((a["user"], a["site"], float(at) if isinstance(at, (int, float)) else 0.0))
        known.sort(key=lambda k: k[2])
        return known

    def _acked_by_me(self, msg_id: str) -> bool:
        return any(u == self.user and s == self.site for u, s, _ in self.acks.get(msg_id, ()))

    def _precedence_fields(self, e: MessageEntry, f: dict[str, Any]) -> None:
        e.precedence = precedence_name(f.get("precedence"))
        if e.precedence in ASKS_ACK and e.msg_id:
            e.acks = self._add_acks(e.msg_id, f.get("acknowledgements") or [])
            e.alert = not e.own and not self._acked_by_me(e.msg_id)

    def _alert_for(self, room: Room, e: MessageEntry, live: bool) -> list[Change]:
        """A message was added: start its alert if it is one (``live``: announce it now)."""
        if not e.alert or not room.joined or not e.msg_id or e.msg_id in self.alerts:
            return []
        self.alerts[e.msg_id] = Alert(e, notified_at=None)
        out: list[Change] = [Panel("alerts")]
        if live:
            self.alerts[e.msg_id].notified_at = -1.0       # stamped with the time at the next due_alerts
            out.append(Notify(e.precedence, e))
        return out

    def due_alerts(self, now: float) -> list[Change]:
        """About once a second: announce the alerts not announced yet, and remind of those due again."""
        out: list[Change] = []
        for a in self.alert_list():
            if a.acking:
                continue
            if a.notified_at is None:
                a.notified_at = now
                out.append(Notify(a.precedence, a.entry))
            elif a.notified_at < 0:
                a.notified_at = now
            elif now - a.notified_at >= REPEAT[a.precedence]:
                a.notified_at = now
                out.append(Notify(a.precedence, a.entry, repeat=True))
        return out

    def acknowledge(self, msg_id: str | None = None, everything: bool = False) -> list[Change]:
        """Acknowledge one alert (``msg_id``; default: the most urgent), or every one."""
        open_ = [a for a in self.alert_list() if not a.acking]
        if msg_id is not None:
            open_ = [a for a in open_ if a.entry.msg_id == msg_id]
        if not open_:
            return self.notice("nothing to acknowledge" if msg_id is None else f"{printable(msg_id)} is not an alert")
        out: list[Change] = [Panel("alerts")]
        for a in open_ if everything else open_[:1]:
            a.acking = a.entry.acking = True
            mid = a.entry.msg_id or ""
            out += [Updated(a.entry.room, a.entry),
                    Request({"type": "acknowledge", "msg_id": mid, "purpose": {"kind": "acknowledge", "msg_id": mid}})]
        return out

    def _acknowledge_failed(self, msg_id: str, why: str) -> list[Change]:
        a = self.alerts.get(msg_id)
        out: list[Change] = [Panel("alerts")]
        if a is not None:
            a.acking = a.entry.acking = False
            a.notified_at = None                          # alert again at once
            out.append(Updated(a.entry.room, a.entry))
        return out + self.notice(f"cannot acknowledge {printable(msg_id)}: {why}", "error")

    def _end_alert(self, msg_id: str) -> list[Change]:
        a = self.alerts.pop(msg_id, None)
        e = a.entry if a is not None else self.by_msg_id.get(msg_id)
        out: list[Change] = [Panel("alerts")]
        if e is not None:
            e.alert = e.acking = False
            out.append(Updated(e.room, e))
        return out

    def _forget_alerts(self, room: str) -> list[Change]:
        """Left a room: its alerts go."""
        gone = [m for m, a in self.alerts.items() if a.entry.room == room]
        for m in gone:
            del self.alerts[m]
        return [Panel("alerts")] if gone else []

    def _on_acknowledging(self, f: dict[str, Any], now: float) -> list[Change]:
        """The server took our acknowledgement (sent once): the alert ends, and the operator reads that it did."""
        msg_id = f.get("msg_id")
        if not isinstance(msg_id, str):
            return []
        e = self.alerts[msg_id].entry if msg_id in self.alerts else self.by_msg_id.get(msg_id)
        out = self._end_alert(msg_id)
        if e is None:
            return out + self.notice(f"acknowledged {printable(msg_id)}")
        return out + self.notice(f"acknowledged {e.precedence.upper()} {printable(msg_id)} from "
                                 f"{printable(e.user)}@{printable(e.origin)}", room=e.room, scope="room")

    def _on_acknowledged(self, f: dict[str, Any], now: float) -> list[Change]:
        msg_id, user, site = f.get("msg_id"), f.get("user"), f.get("site")
        if not isinstance(msg_id, str) or not isinstance(user, str) or not isinstance(site, str):
            return []
        acks = self._add_acks(msg_id, [f])
        out: list[Change] = []
        e = self.by_msg_id.get(msg_id)
        if e is not None:
            e.acks = acks
            out.append(Updated(e.room, e))
        if user == self.user and site == self.site:
            out += self._end_alert(msg_id)
        elif e is not None and e.own:
            out += self.notice(f"{printable(user)}@{printable(site)} acknowledged your {e.precedence.upper()} "
                               f"message {printable(msg_id)}", room=e.room, scope="room")
        return out
