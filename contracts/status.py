"""A site's connection status, the one home of its names (the RCM paper's three, and ``unknown``).

RCM reports each peer ``connected``, ``suspected`` or ``disconnected`` (DESIGN.md,
"RCM semantics"; ``rcm.connman`` holds the machines that decide). Clients show
``unknown`` for a site whose status they have not been told yet (before the
chat server's ``welcome`` or its first ``site_status``), the same way everywhere.
"""
from __future__ import annotations

import enum


class LinkStatus(enum.Enum):
    """A peer's logical status as RCM reports it, or ``UNKNOWN`` where nothing has been reported."""

    CONNECTED = "connected"
    SUSPECTED = "suspected"
    DISCONNECTED = "disconnected"
    UNKNOWN = "unknown"

    @classmethod
    def parse(cls, value: object) -> LinkStatus:
        """The status a name names; anything else (an older or newer peer's word) is ``UNKNOWN``."""
        try:
            return cls(value)
        except ValueError:
            return cls.UNKNOWN


REPORTED: tuple[str, ...] = (LinkStatus.CONNECTED.value, LinkStatus.SUSPECTED.value, LinkStatus.DISCONNECTED.value)
"""The statuses RCM reports (``UNKNOWN`` is the clients' own)."""
