"""Hostile values both generators draw from: numbers at and around every bound, and values of the wrong type.

``rcm_frames.Frames`` (msgpack fields) and ``chat_requests.ChatInputs`` (JSON fields) differ only in
what a wrong-typed value is (``ODD``) and how wide a random integer goes (``WIDE``): msgpack carries
integers up to 2^64 - 1, JSON any. The draws are the same for a seed whatever the subclass.
"""
from __future__ import annotations

import random
from typing import Any, ClassVar

from ordering import KEY_INT_MAX

BOUNDS: tuple[int, ...] = (0, 1, 2, 127, 128, 2**16 - 1, 2**16, 2**31 - 1, 2**31, 2**32, 2**43, 2**43 + 1,
                           KEY_INT_MAX - 1, KEY_INT_MAX, KEY_INT_MAX + 1, 2**63 - 1, 2**63, 2**64 - 1,
                           -1, -2, -2**31, -2**63)
"""Integers at and around every bound a number from a peer meets (2^43: the honest ceiling at t < 2020)."""


class Draws:
    """Values for one generator: a good value most of the time, a bound, or something of the wrong type."""

    ODD: ClassVar[tuple[Any, ...]] = ()
    """Values of the wrong type for almost any field (the subclass's encoding decides which exist)."""
    WIDE: ClassVar[tuple[int, int]] = (0, 2**64)
    """The range of a random integer (``randrange``'s bounds)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def num(self, good: int | None = None) -> Any:
        """A number: the good one, a bound, small, random in ``WIDE``, or now and then not a number."""
        r = self.rng.random()
        if good is not None and r < 0.35:
            return good
        if r < 0.75:
            return self.rng.choice(BOUNDS)
        if r < 0.85:
            return self.rng.randrange(0, 64)
        if r < 0.93:
            return self.rng.randrange(*self.WIDE)
        return self.odd()

    def odd(self) -> Any:
        """A value of the wrong type."""
        return self.rng.choice(self.ODD)

    def maybe(self, good: Any, p_odd: float = 0.08) -> Any:
        """``good``, or now and then a value of the wrong type."""
        return self.odd() if self.rng.random() < p_odd else good
