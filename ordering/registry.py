"""Name -> class of every ordering protocol selectable with ``[rcm] ordering``."""
from __future__ import annotations

from .base import OrderingProtocol
from .hybrid import HybridIGO
from .lamport import LamportIGO
from .sequencer import SequencerIGO

PROTOCOLS: dict[str, type[OrderingProtocol]] = {
    LamportIGO.name: LamportIGO,
    SequencerIGO.name: SequencerIGO,
    HybridIGO.name: HybridIGO,
}
