"""The edge: the RCM server process on real sockets and timers (``process``), its local clients
(``localclients``; what their requests do: ``localapi``) and mutual TLS between sites (``tls``).
Everything below it is sans-IO.

``RcmServer`` and ``serve`` are loaded on first use, so that a process needing only ``tls`` (the chat
server, for its certificates) does not import the whole RCM stack: about 10 MiB of a chat server's memory."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rcm.server.process import RcmServer, serve

__all__ = ["RcmServer", "serve"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from rcm.server import process
        return getattr(process, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
