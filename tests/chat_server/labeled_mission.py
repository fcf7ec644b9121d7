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

from chat_missions import make_mission
from test_chat_core import Site

from chat_server.accounts import Clearances
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


class LabeledSite(Site):
    """One site's chat core over a real database and journal (test_chat_core.Site), with the mission's labels
    and its clearances."""

    def __init__(self, tmp: Path, mission: Mission, site: str = "A") -> None:
        self.mission = mission
        self.site = site
        self.labels = LabelPolicy.of(mission, site)
        super().__init__(tmp, site, tuple(mission.peers_of(site)), rooms_created_per_hour=3600.0,
                         rooms_created_burst=100, labels=self.labels,
                         clearance_of=lambda user: self.clearances.of(user))
        self.clearances = Clearances(self.store.db, mission.labels, mission.clearance(site))

    def user(self, name: str, clearance: str | None = None) -> None:
        """An account of this site (no password: the core never reads one), cleared for ``clearance``."""
        self.store.add_user(name, "x")
        if clearance is not None:
            self.clearances.set(name, self.mission.labels.parse(clearance))

    def deliver(self, origin: str, seq: int, payload: Payload | bytes, t: int, now: float = 0.0,  # type: ignore[override]
                **kw: Any) -> list[Any]:
        """Another site's payload delivered here (compact, as every server of a labeled mission writes them)."""
        data = payload if isinstance(payload, bytes) else encode_payload(payload, compact=True)
        return super().deliver(origin, seq, data, t, now, **kw)

    def join(self, user: str, room: str) -> dict[str, Any]:
        actions, frame = self.core.join(user, room, 0.0)
        self.step(actions)
        return frame
