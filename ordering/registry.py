"""Name -> class of every ordering protocol selectable with ``[rcm] ordering``."""
from __future__ import annotations

from .base import OrderingProtocol
from .lamport import LamportIGO

PROTOCOLS: dict[str, type[OrderingProtocol]] = {
    LamportIGO.name: LamportIGO,
}
