"""The chat server's label policy, sans-IO: what a site may hold, what a message may carry, where it may go.

Theory of operation
-------------------
Labels themselves live in ``contracts.labels`` (one home: ``Label``,
``Scheme``, dominance); this module applies them to one site's chat traffic
(DESIGN.md "Labels", docs/labels.md, docs/security.md). A ``LabelPolicy`` is
built once from the mission (``LabelPolicy.of``) and is pure:

* ``stored`` reads a label as a payload or the database carries it (the
  people's spelling, ``str(label)``; "" is the mission's default label). A
  spelling the scheme no longer knows (a mission file changed under stored
  messages, a forged payload) reads as ``UNREADABLE``: a label nobody's
  clearance dominates, so the message is shown to nobody rather than to the
  wrong people;
* ``check_say`` is the rule of a message: its label dominates the room's floor
  and is dominated by the sender's clearance, else ``Refusal forbidden`` naming
  why;
* ``reach`` is need-to-know routing: the sites whose clearance dominates a
  label, for a private room only those hosting a member, minus this site; None
  (every site, as an unlabeled mission sends) only when that is every other
  site. RCM carries a subset send only among its destinations (DESIGN.md), so
  the content never reaches another site;
* ``to_json`` is a label as frames and the journal carry it, None in an
  unlabeled mission (nothing carries a label there).

The chat core (core.py, rooms.py) and the edge (handlers.py, server.py) ask
it; accounts' clearances are accounts.py's (``Clearances``).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from contracts.labels import ABOVE_CLEARANCE, BELOW_FLOOR, REL_TO, UNLABELED, Label, LabelError, Scheme, say_problem

from .protocol import ErrorCode as E
from .protocol import Refusal

UNREADABLE = Label("UNREADABLE", 1 << 30, frozenset({"UNREADABLE"}))
"""What a stored or received label the scheme cannot read stands for: no clearance dominates it."""
PARSED_MAX = 4096             # distinct label spellings remembered (a mission has few)


@dataclass(frozen=True, slots=True)
class LabelPolicy:
    """One site's view of the mission's labels: the scheme, this site, every site's clearance."""

    scheme: Scheme
    site: str
    clearances: Mapping[str, Label]                  # every site of the mission -> its clearance
    _parsed: dict[str, Label] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def of(cls, mission: Any, site: str) -> LabelPolicy:
        """The policy of ``site`` in ``mission`` (a ``contracts.mission.Mission``)."""
        return cls(mission.labels, site, dict(mission.clearances()))

    @classmethod
    def unlabeled(cls, site: str, sites: Iterable[str] = ()) -> LabelPolicy:
        """The policy of a mission without ``[labels]`` (every site holds the one label)."""
        return cls(UNLABELED, site, {s: UNLABELED.default for s in {site, *sites}})

    @property
    def enabled(self) -> bool:
        return self.scheme.enabled

    @property
    def default(self) -> Label:
        return self.scheme.default

    @property
    def site_clearance(self) -> Label:
        """What this site may hold."""
        return self.clearances.get(self.site, self.scheme.default)

    # --- spellings ---------------------------------------------------------------------------------------
    def stored(self, text: str) -> Label:
        """A label as payloads and the database carry it ("": the default); ``UNREADABLE`` if the scheme
        cannot read it."""
        if not text:
            return self.scheme.default
        got = self._parsed.get(text)
        if got is None:
            try:
                got = self.scheme.parse(text)
            except LabelError:
                got = UNREADABLE
            if len(self._parsed) >= PARSED_MAX:
                self._parsed.clear()
            self._parsed[text] = got
        return got

    def text(self, label: Label) -> str:
        """A label as payloads and the database carry it ("" in an unlabeled mission)."""
        return str(label) if self.enabled else ""

    def to_json(self, label: Label) -> dict[str, Any] | None:
        """A label as frames and the journal carry it; None in an unlabeled mission."""
        return label.to_json() if self.enabled else None

    def from_request(self, value: Any, what: str) -> Label:
        """A label a client sent (JSON or the people's text): ``Refusal bad_field`` naming the problem."""
        try:
            return self.scheme.from_json(value)
        except LabelError as e:
            raise Refusal(E.BAD_FIELD, f"{what}: {e}") from None

    def scheme_json(self) -> dict[str, Any]:
        """The ``labels`` field of ``welcome``: levels (lowest first), caveats, the default label."""
        return {"levels": list(self.scheme.levels), "caveats": list(self.scheme.caveats),
                "default": self.scheme.default.to_json()}

    # --- rules -------------------------------------------------------------------------------------------
    def check_say(self, label: Label, floor: Label, clearance: Label, room: str) -> None:
        """May a user of ``clearance`` put ``label`` on a message of ``room`` (floor ``floor``)?"""
        problem = say_problem(label, floor, clearance)
        if problem == ABOVE_CLEARANCE:
            raise Refusal(E.FORBIDDEN, f"say: label {label} is above your clearance {clearance}")
        if problem == BELOW_FLOOR:
            raise Refusal(E.FORBIDDEN, f"say: label {label} is below room {room!r}'s floor {floor}")

    def holdable(self, label: Label) -> bool:
        """May this site hold content labeled ``label``?"""
        return self.site_clearance.dominates(label)

    def cleared_sites(self, label: Label) -> frozenset[str]:
        """The sites whose clearance dominates ``label``."""
        return self.scheme.cleared(label, self.clearances)

    def reach(self, label: Label, hosts: Iterable[str] | None = None) -> tuple[str, ...] | None:
        """The destinations of content labeled ``label`` (``hosts``: a private room's hosting sites, None
        for a public room): cleared sites (among the hosts), this site left out, sorted (``(site,)``, this
        site alone, when no other is cleared); None when that is every other site of the mission. In an
        unlabeled mission, always None (nothing changes)."""
        if not self.enabled:
            return None
        sites = self.cleared_sites(label)
        if hosts is not None:
            sites = sites & frozenset(hosts)
        others = sorted(sites - {self.site})
        if len(others) == len(self.clearances) - 1 and self.site in self.clearances:
            return None
        return tuple(others) or (self.site,)        # (no other site: this one only, as a barrier is sent)


def json_of_text(text: str) -> dict[str, Any]:
    """The JSON form of a label stored as ``str(label)`` (the canonical people's spelling this server writes:
    ``LEVEL`` or ``LEVEL//REL TO A, B``), without the scheme: what a ``message`` frame carries."""
    level, _, rest = text.partition("//")
    caveats = rest[len(REL_TO):].split(",") if rest.startswith(REL_TO) else []
    return {"level": level, "caveats": sorted(c.strip() for c in caveats if c.strip())}
