"""The edge: the RCM server process on real sockets and timers (``process``), its local clients
(``localclients``) and mutual TLS between sites (``tls``). Everything below it is sans-IO."""
from rcm.server.process import RcmServer, serve

__all__ = ["RcmServer", "serve"]
