"""Who may send FLASH and IMMEDIATE, and how often (sans-IO: callers pass ``now``).

Urgent messages overtake everything on a paced link (RCM's lanes, within the
urgent share: docs/rcm.md) and ring every reader until acknowledged, so they
are not for everyone, and not for a flood. Two rules, both per user at this
site, over all the user's sessions (WebSocket and IRC alike):

* a level may need a role (``[chat] flash_role``, default ``flash``;
  ``immediate_role``, default empty: everyone). Roles are the account's
  (``accounts.Roles``), read at each urgent say, so a grant or a revocation
  applies to the next one;
* together, FLASH and IMMEDIATE messages are limited to ``urgent_per_minute``
  a user, ``urgent_burst`` at once (a token bucket).

A say over either rule is refused (``forbidden``, ``rate_limited``), naming
the rule; nothing is sent. PRIORITY and ROUTINE are not limited here.
"""
from __future__ import annotations

import math
from collections.abc import Callable

from contracts.precedence import Precedence

from .limits import TokenBucket
from .protocol import ErrorCode, Refusal

BUCKETS_MAX = 10_000
"""Users whose urgent token bucket is kept; full buckets are forgotten first (they hold nothing)."""


class UrgentPolicy:
    """The two rules of urgent says at one site (module docstring)."""

    def __init__(self, flash_role: str, immediate_role: str, per_minute: float, burst: int,
                 roles_of: Callable[[str], frozenset[str]]) -> None:
        self.needs = {Precedence.FLASH: flash_role, Precedence.IMMEDIATE: immediate_role}
        self.per_minute = per_minute
        self.burst = burst
        self.roles_of = roles_of
        self._buckets: dict[str, TokenBucket] = {}

    def check(self, user: str, precedence: Precedence, now: float) -> None:
        """May ``user`` send a message of ``precedence`` now? ``Refusal`` naming the rule when not; an
        allowed urgent say spends one of the user's tokens."""
        if precedence not in self.needs:
            return
        role = self.needs[precedence]
        if role and role not in self.roles_of(user):
            key = f"{precedence.value}_role"
            raise Refusal(ErrorCode.FORBIDDEN, f"say: sending {precedence.value.upper()} needs the role {role!r} "
                                               f"([chat] {key}), which {user} does not hold; nothing was sent")
        bucket = self._buckets.get(user)
        if bucket is None:
            self._forget_full(now)
            bucket = self._buckets[user] = TokenBucket(self.per_minute / 60.0, self.burst, now)
        if not bucket.take(now):
            wait = math.ceil((1.0 - bucket.tokens) / bucket.rate)
            raise Refusal(ErrorCode.RATE_LIMITED,
                          f"say: at most {self.per_minute:g} FLASH or IMMEDIATE messages a minute per user, "
                          f"{self.burst} at once ([chat] urgent_per_minute, urgent_burst); nothing was sent: "
                          f"try again in {wait} s, or send it as PRIORITY")

    def _forget_full(self, now: float) -> None:
        """Keep the table bounded: past ``BUCKETS_MAX`` users, drop the buckets that have refilled."""
        if len(self._buckets) < BUCKETS_MAX:
            return
        full = [u for u, b in self._buckets.items() if b.tokens + (now - b.refilled) * b.rate >= b.burst]
        for u in full or list(self._buckets)[:len(self._buckets) // 2]:
            del self._buckets[u]
