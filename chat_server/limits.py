"""Rate limits of the chat server, sans-IO (callers pass ``now``; tests drive them on a virtual clock).

``TokenBucket`` is the one token bucket: a client's frames, a user's frames over
all its connections, an IRC client's lines, a user's new room names. The
failed-login limiter lives with the passwords (accounts.py).
"""
from __future__ import annotations


class TokenBucket:
    """``rate`` tokens a second, at most ``burst`` saved; ``take`` spends one if there is one."""

    __slots__ = ("rate", "burst", "tokens", "refilled")

    def __init__(self, rate: float, burst: float, now: float) -> None:
        self.rate = rate
        self.burst = float(burst)
        self.tokens = float(burst)
        self.refilled = now

    def take(self, now: float) -> bool:
        """Spend one token; False (nothing spent) when the bucket is empty."""
        self.tokens = min(self.burst, self.tokens + max(0.0, now - self.refilled) * self.rate)
        self.refilled = now
        if self.tokens < 1.0:
            return False
        self.tokens -= 1.0
        return True
