"""The simulated clients' sends, and the links paced for precedence runs.

Theory of operation
-------------------
``make_workload`` draws every client send of a run from the workload's own
seeded stream (``random.Random(f"work-{seed}")``): per site, exponential gaps
at ``rate`` until ``quiet`` seconds before the end; per send a share
``subset_prob`` to a random subset of the other sites, a payload of a random
size (its site and number first, ``A-12....``), a precedence drawn from
``precedence_mix`` and an expiry drawn with ``expiry_share``. A draw is made only
when its option asks for one, so older seeds keep their workloads.

With a label plan (``labels.LabelPlan``, ``sim --labels``) the same draws are
made, so the send times stay those of the unlabeled run, and then each send's
label is drawn from the plan's own stream: its destinations become the sites
cleared for it (a send no other site is cleared for is dropped) and its payload
starts with the message's marker (``checkers.leaks.marker``).
"""
from __future__ import annotations

import random
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

from contracts.precedence import DEFAULT, PRECEDENCES

if TYPE_CHECKING:
    from .cluster import SimConfig
    from .labels import LabelPlan


class Send(NamedTuple):
    """One client send: time, site, destinations (None: all), payload, precedence, seconds to its expiry."""

    at: float
    site: str
    dests: list[str] | None
    payload: bytes
    precedence: str
    ttl: float | None


def make_workload(rng: random.Random, names: Sequence[str], end: float, c: SimConfig,
                  labels: LabelPlan | None = None, label_rng: random.Random | None = None) -> list[Send]:
    """Every client send of the run (see the module docstring)."""
    out = []
    lrng = label_rng or random.Random(0)
    for name in names:
        others = [n for n in names if n != name]
        t = 0.0
        k = 0
        while True:
            t += rng.expovariate(c.rate)
            if t >= end - c.quiet:
                break
            k += 1
            dests = None
            if rng.random() < c.subset_prob:
                dests = sorted(rng.sample(others, rng.randint(1, len(others))))
            size = rng.randint(*c.payload)
            payload = f"{name}-{k}".encode().ljust(size, b".")
            ttl = None
            if c.expiry_share and rng.random() < c.expiry_share:
                ttl = rng.uniform(*c.expiry_ttl)
            precedence = precedence_draw(rng, c.precedence_mix)
            if labels is not None:
                labeled = labels.message(lrng, name, k, size, others)
                if labeled is None:
                    continue
                dests, payload = labeled
            out.append(Send(t, name, dests, payload, precedence, ttl))
    return out


def precedence_draw(rng: random.Random, mix: tuple[float, float, float]) -> str:
    """A send's precedence drawn from ``mix`` (no draw at all without one: old seeds keep their runs)."""
    if not any(mix):
        return DEFAULT
    x = rng.random()
    for level, share in zip(PRECEDENCES, mix):          # flash, immediate, priority (highest first)
        if x < share:
            return level
        x -= share
    return DEFAULT


def paced_links(rng: random.Random, names: Sequence[str], rate: int, share: float
                ) -> dict[str, dict[str, int]] | None:
    """The mission's ``[sites.X.rate]`` tables: each pair of sites paced both ways at ``rate`` with
    probability ``share`` (None: no rate, nothing paced)."""
    if not rate:
        return None
    out: dict[str, dict[str, int]] = {n: {} for n in names}
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            if share >= 1.0 or rng.random() < share:
                out[a][b] = out[b][a] = rate
    return out


__all__ = ["Send", "make_workload", "paced_links", "precedence_draw"]
