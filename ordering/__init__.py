"""Pure IGO ordering protocols (no I/O, no clock reads) and the global order key."""
from .base import (CONNECTED, DISCONNECTED, STATUSES, SUSPECTED, Deliver, OrderingError,
                   OrderingProtocol, OrderKey, SendControl, make_protocol)

__all__ = ["CONNECTED", "DISCONNECTED", "STATUSES", "SUSPECTED", "Deliver", "OrderingError",
           "OrderingProtocol", "OrderKey", "SendControl", "make_protocol"]
