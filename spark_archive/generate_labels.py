"""Security labels for the synthetic generator (``generate.py --labels``).

Theory of operation
-------------------
A labeled mission (DESIGN.md, "Labels") has the levels and caveats of
``LEVELS`` and ``CAVEATS`` (``contracts.labels``' ``Scheme``). ``plan_labels``
draws, from a stream of its own: each site's clearance (RESTRICTED to SECRET,
each caveat held with a chance of 0.6), and each chat message's label, one its
origin may send (a level at most the origin's, caveats among the origin's).
A message is *addressed* to the sites whose clearance dominates its label:
need-to-know routing (RCM's subset multicast) never brings it anywhere else,
so the generator journals no delivery, no loss and no ``missing`` record of it
at other sites, and relays it only through addressed sites. Control messages
carry no label and go everywhere.

Each site journals a ``clearance`` record at the mission's start (as a chat
server does at every start); each send and deliver line of a chat message
carries its label (``line_text``: the line's fragment, written through the
journal schema's formats, ``contracts.journal``).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from contracts import journal as J
from contracts.labels import Label, Scheme

LEVELS = ("UNCLASSIFIED", "RESTRICTED", "CONFIDENTIAL", "SECRET")
CAVEATS = ("AUS", "CAN", "GBR", "NZL", "USA")
SCHEME = Scheme.build(LEVELS, CAVEATS)
_FRAGMENT = J.fragment_format(J.DELIVER, "label")
assert _FRAGMENT == J.fragment_format(J.SEND, "label")


@dataclass
class LabelPlan:
    """Clearances per site, labels per item (None: a control message) and who each item is addressed to."""

    clearances: list[Label]
    labels: list[Label | None]
    addressed: np.ndarray                    # bool [items, sites]
    texts: list[str]                         # each item's label fragment ("" for control messages)
    traffic: Counter[str] = field(default_factory=Counter)     # deliveries per label (people's spelling)

    def line_text(self, item: int) -> str:
        return self.texts[item]


def _caveats(rng: np.random.Generator, among: tuple[str, ...] | list[str], chance: float) -> frozenset[str]:
    return frozenset(c for c, keep in zip(among, rng.random(len(among)) < chance) if keep)


def plan_labels(rng: np.random.Generator, sites: int, origins: np.ndarray, is_ctl: np.ndarray) -> LabelPlan:
    """Draw the clearances and labels (see the module doc)."""
    clearances = []
    for _ in range(sites):
        rank = int(rng.integers(1, len(LEVELS)))
        clearances.append(Label(LEVELS[rank], rank, _caveats(rng, CAVEATS, 0.6)))
    labels: list[Label | None] = []
    texts = []
    addressed = np.ones((len(origins), sites), dtype=bool)
    for i, (o, ctl) in enumerate(zip(origins.tolist(), is_ctl.tolist())):
        if ctl:
            labels.append(None)
            texts.append("")
            continue
        held = clearances[o]
        rank = int(rng.integers(0, held.rank + 1))
        label = Label(LEVELS[rank], rank, _caveats(rng, sorted(held.caveats), 0.3))
        labels.append(label)
        texts.append(_FRAGMENT % J.value_text(label.to_json()))
        addressed[i] = [c.dominates(label) for c in clearances]
    return LabelPlan(clearances, labels, addressed, texts)


def clearance_line(site: str, at: float, clearance: Label) -> str:
    """The ``clearance`` record a site's chat server journals when it starts."""
    return J.dumps(J.record(J.CLEARANCE, site=site, at=at, clearance=clearance.to_json(), levels=list(LEVELS),
                            caveats=list(CAVEATS)))


def summary(plan: LabelPlan, messages_of: Counter[str]) -> dict[str, Any]:
    """The generator's account of its labels: each site's clearance, messages and deliveries per label."""
    return {"clearances": [str(c) for c in plan.clearances],
            "labels": {name: {"messages": messages_of[name], "deliveries": plan.traffic[name]}
                       for name in sorted(messages_of)}}
