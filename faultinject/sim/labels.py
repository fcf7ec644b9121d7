"""Seeded security labels for simulated missions (``SimConfig.labels``, ``sim --labels``).

Theory of operation
-------------------
A labeled run draws, from its own seeded stream (``random.Random(f"labels-{seed}")``,
so the links, faults and workload times of a seed stay what they are without
labels), a *label plan*: a scheme of the three ``LEVELS`` and two or three of
``CAVEATS`` (``contracts.labels.Scheme.build``; the default label is the lowest
level with no caveats) and a clearance per site (a level and each caveat held
with probability ``CAVEAT_HELD``). Then each send of the workload, in workload
order, draws a label its origin's clearance dominates: the default with
probability ``DEFAULT_SHARE``, else one of ``Scheme.sendable(clearance,
default)`` at random, so a message is often above some sites' clearances.

The message goes where the chat server would send it (DESIGN.md, Labels):
to the sites other than the origin whose clearance dominates its label
(``dests``); when that is every other site the send is a plain multicast
(``dests = None``), and when it is none the message is not sent at all.

Each payload is the message's *marker* (``checkers.leaks.marker``: ``<<A-12>>``,
the origin and its workload number) padded as before, so the leak checker can
find the content in any frame, delivery or log record and name the message.
The plan remembers each message's label by its marker (for the ``send`` and
``deliver`` journal records) and tells the checker (``LeakWatch.expect``)
which sites may hold it: its destinations and its origin.

A site journals a ``clearance`` record at every start (as a chat server does),
so the journal-level leak check (``checkers.leaks.check_journal_labels``) reads
the simulator's journals exactly as it reads real ones.
"""
from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from contracts import journal as J
from contracts.labels import Label, Scheme
from faultinject.checkers.leaks import LeakWatch, marker, token_of

LEVELS = ("UNCLASSIFIED", "CONFIDENTIAL", "SECRET")
CAVEATS = ("AUS", "CAN", "GBR", "NZL", "USA")
CAVEAT_HELD = 0.6       # a site holds each of the scheme's caveats with this probability
DEFAULT_SHARE = 0.5     # a message carries the default label with this probability


@dataclass
class LabelPlan:
    """A run's scheme, its sites' clearances, and every message's label (see the module docstring)."""

    scheme: Scheme
    clearances: Mapping[str, Label]
    labels: dict[str, Label] = field(default_factory=dict)      # marker token -> the message's label

    @classmethod
    def draw(cls, rng: random.Random, names: Sequence[str]) -> LabelPlan:
        """A scheme of ``LEVELS`` and 2-3 caveats and a clearance per site, drawn from ``rng``."""
        caveats = sorted(rng.sample(CAVEATS, rng.randint(2, 3)))
        scheme = Scheme.build(LEVELS, caveats)
        clearances = {}
        for name in names:
            level = rng.choice(LEVELS)
            held = [c for c in caveats if rng.random() < CAVEAT_HELD]
            clearances[name] = scheme.label(level, held)
        return cls(scheme, clearances)

    def draw_label(self, rng: random.Random, origin: str) -> Label:
        """A label ``origin``'s clearance dominates: often the default, else any it may send."""
        if rng.random() < DEFAULT_SHARE:
            return self.scheme.default
        return rng.choice(self.scheme.sendable(self.clearances[origin], self.scheme.default))

    def reach(self, label: Label, origin: str) -> list[str]:
        """The sites other than ``origin`` cleared for ``label``, sorted: the message's destinations."""
        return sorted(s for s in self.scheme.cleared(label, self.clearances) if s != origin)

    def message(self, rng: random.Random, origin: str, number: int, size: int,
                others: Sequence[str]) -> tuple[list[str] | None, bytes] | None:
        """A labeled send: its destinations (None: every other site) and its marked payload of at least
        ``size`` bytes; None when no other site is cleared for the label drawn (the message is not sent)."""
        label = self.draw_label(rng, origin)
        dests = self.reach(label, origin)
        if not dests:
            return None
        token = f"{origin}-{number}"
        self.labels[token] = label
        return (None if len(dests) == len(others) else dests), marker(token).ljust(size, b".")

    def label_of(self, payload: bytes) -> Label | None:
        """The label of the message whose payload this is (None: not one of the plan's)."""
        token = token_of(payload)
        return self.labels.get(token) if token is not None else None

    def expect(self, watch: LeakWatch, payload: bytes, origin: str, dests: Sequence[str] | None) -> None:
        """Tell the leak checker where this sent message may be held: its destinations and its origin."""
        token = token_of(payload)
        label = self.labels.get(token) if token is not None else None
        if token is None or label is None:
            return
        allowed = frozenset(dests if dests is not None else self.clearances) | {origin}
        watch.expect(token, origin, allowed, str(label))

    def clearance_record(self, site: str, at: float) -> dict[str, Any]:
        """The ``clearance`` journal record a chat server writes at start."""
        return J.record(J.CLEARANCE, site=site, at=at, clearance=self.clearances[site].to_json(),
                        levels=list(self.scheme.levels), caveats=list(self.scheme.caveats))


__all__ = ["CAVEATS", "CAVEAT_HELD", "DEFAULT_SHARE", "LEVELS", "LabelPlan"]
