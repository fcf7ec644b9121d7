"""Pure IGO ordering protocols (no I/O, no clock reads) and the global order key."""
from .base import (
                   CONNECTED,
                   DISCONNECTED,
                   KEY_INT_MAX,
                   STATUSES,
                   SUSPECTED,
                   ClockExhausted,
                   Deliver,
                   OrderingError,
                   OrderingProtocol,
                   OrderKey,
                   PeerInputError,
                   SendControl,
                   honest_ceiling,
                   key_int,
                   make_protocol,
                   peer_int,
)

__all__ = ["CONNECTED", "DISCONNECTED", "KEY_INT_MAX", "STATUSES", "SUSPECTED", "ClockExhausted", "Deliver",
           "OrderingError", "OrderingProtocol", "OrderKey", "PeerInputError", "SendControl", "honest_ceiling",
           "key_int", "make_protocol", "peer_int"]
