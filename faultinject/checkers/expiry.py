"""Expiry as a property over journal records (rcm.wire.envelope, docs/rcm.md "Expiry").

Theory of operation
-------------------
A message may carry ``expires_at`` (the ``send`` record's, absolute, by its
origin's clock). After it, the message's content is no longer sent, relayed,
repaired or replayed anywhere; every site still learns that it existed. A
site that gets the *stub* journals the delivery as usual (so reliability, no
duplicates, FIFO and the global order count it like any: a stub is neither
lost nor a duplicate) and an ``expired`` record beside it. So, per delivery
of a message that expires:

* content after the expiry: a delivery without an ``expired`` record later
  than ``expires_at + skew`` is a violation (its content reached the site,
  or was shown there, after it expired);
* expired too early: an ``expired`` record earlier than ``expires_at - skew``
  is a violation (a site dropped content still live).

``skew`` bounds the clocks' disagreement (the sites' skew and the origin's:
``expires_at`` is the origin's clock, ``at`` the simulator's). A message
written in time, then held by the ordering protocol past its expiry, is
delivered as a stub too (the stack checks at delivery), so the first rule
holds whatever the order waited for.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from contracts import journal as J

from .history import Violation


def check_expiry(records: Iterable[dict[str, Any]], skew: float) -> list[Violation]:
    """Violations of expiry: content delivered after it, or a stub before it (see the module docstring)."""
    recs = list(records)
    expires = {r["msg_id"]: float(r["expires_at"]) for r in recs
               if r.get("kind") == J.SEND and r.get("expires_at") is not None}
    if not expires:
        return []
    stubs = {(r["site"], r["msg_id"]) for r in recs if r.get("kind") == J.EXPIRED}
    out: list[Violation] = []
    for r in recs:
        kind = r.get("kind")
        if kind not in (J.DELIVER, J.EXPIRED) or r.get("msg_id") not in expires:
            continue
        t, at, site, mid = expires[r["msg_id"]], float(r["at"]), r["site"], r["msg_id"]
        if kind == J.DELIVER and (site, mid) not in stubs and at > t + skew:
            out.append(Violation("expiry", site, mid, f"delivered with its content at {at:.3f}, after it expired "
                                                      f"at {t:.3f}"))
        elif kind == J.EXPIRED and at < t - skew:
            out.append(Violation("expiry", site, mid, f"delivered as a stub at {at:.3f}, before it expired at "
                                                      f"{t:.3f}"))
    return out
