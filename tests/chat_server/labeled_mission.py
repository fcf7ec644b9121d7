"""A small labeled (coalition) mission for tests, and a sans-IO chat core over it (importable by name).

``labeled_mission(tmp_path)`` is ``chat_missions.make_mission`` with a ``[labels]`` table and a clearance per
site: by default four sites, A (SECRET//REL TO GBR, USA), B (SECRET//REL TO GBR, USA), C (CONFIDENTIAL//REL TO
GBR) and P, a partner site holding the default label only (UNCLASSIFIED). ``set_clearance`` gives an account a
clearance as ``python -m chat_server clearance`` does. ``LabeledSite`` is a ``ChatCore`` of one site over a real
database and journal (no sockets, no clock), with the site's label policy and its accounts' clearances, and
``step``/``deliver`` that apply actions the way the server does (``actions.write``).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from chat_missions import RcmDelivery, make_mission

from chat_server.accounts import Clearances
from chat_server.actions import QueueReceipt, write
from chat_server.core import ChatCore
from chat_server.history import History
from chat_server.journal import Journal, read_journal
from chat_server.labeling import LabelPolicy
from chat_server.payload import Payload, encode_payload
from chat_server.store import ChatStore
from contracts.mission import Mission, parse_mission
from contracts.mission_writer import mission_tables

LABELS = {"levels": ["UNCLASSIFIED", "CONFIDENTIAL", "SECRET"], "caveats": ["GBR", "USA"],
          "default": "UNCLASSIFIED"}
CLEARANCES: dict[str, dict[str, Any] | None] = {
    "A": {"level": "SECRET", "caveats": ["GBR", "USA"]},
    "B": {"level": "SECRET", "caveats": ["GBR", "USA"]},
    "C": {"level": "CONFIDENTIAL", "caveats": ["GBR"]},
    "P": None,                                          # a partner: the default label only
}


def labeled_mission(tmp_path: Path, clearances: dict[str, dict[str, Any] | None] | None = None,
                    labels: dict[str, Any] | None = None, **kw: Any) -> Mission:
    """A labeled mission (``make_mission``'s ports and timers) with ``clearances`` per site (None: absent)."""
    clearances = CLEARANCES if clearances is None else clearances
    raw = mission_tables(make_mission(tmp_path, list(clearances), **kw))   # the same file, plus labels
    raw["labels"] = dict(labels or LABELS)
    for site, c in clearances.items():
        raw["sites"][site].pop("clearance", None)
        if c is not None:
            raw["sites"][site]["clearance"] = dict(c)
    return parse_mission(raw, tmp_path)


def set_clearance(mission: Mission, site: str, user: str, text: str) -> None:
    """Give an existing account a clearance (a running server sees it at its next check)."""
    store = ChatStore(mission.site_dir(site) / "chat" / "chat.db")
    try:
        Clearances(store.db, mission.labels, mission.clearance(site)).set(user, mission.labels.parse(text))
    finally:
        store.close()


class LabeledSite:
    """One site's chat core over a real database and journal, with the mission's labels and its clearances."""

    def __init__(self, tmp: Path, mission: Mission, site: str = "A") -> None:
        self.mission = mission
        self.site = site
        self.store = ChatStore(tmp / site / "chat.db")
        self.journal = Journal(tmp / site / "journal", site, clock=lambda: 0.0)
        self.labels = LabelPolicy.of(mission, site)
        self.clearances = Clearances(self.store.db, mission.labels, mission.clearance(site))
        self.core = ChatCore(site, mission.peers_of(site), self.store, journal_n=0, roster_gen=1,
                             history=History(self.store, on_join=50, most=500, page_bytes=1 << 19),
                             max_rooms_per_user=200, max_rooms=10_000, rooms_created_per_hour=3600.0,
                             rooms_created_burst=100, rooms_page=500, labels=self.labels,
                             clearance_of=self.clearances.of)
        self.n = 0

    def user(self, name: str, clearance: str | None = None) -> None:
        """An account of this site (no password: the core never reads one), cleared for ``clearance``."""
        self.store.add_user(name, "x")
        if clearance is not None:
            self.clearances.set(name, self.mission.labels.parse(clearance))

    def step(self, actions: list[Any]) -> list[Any]:
        self.store.begin()
        after, _ = write(actions, self.store, self.journal)
        self.store.commit()
        for a in after:
            if isinstance(a, QueueReceipt):
                self.core.queue_receipt(a.origin, a.msg_id)
        return actions

    def deliver(self, origin: str, seq: int, payload: Payload | bytes, t: int, now: float = 0.0) -> list[Any]:
        self.n += 1
        data = payload if isinstance(payload, bytes) else encode_payload(payload, compact=True)
        d = RcmDelivery(self.n, origin, seq, f"{origin}:{seq}", [t, origin], False, data)
        return self.step(self.core.delivery(d, self.core.decode(d), now))

    def join(self, user: str, room: str) -> dict[str, Any]:
        actions, frame = self.core.join(user, room, 0.0)
        self.step(actions)
        return frame

    def records(self) -> list[dict[str, Any]]:
        return list(read_journal(self.journal.path))
