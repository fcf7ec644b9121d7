"""Server processes of a mission's sites on this machine, as tests, benchmarks and the runner name them.

The launcher itself is ``chat_server.launcher`` (deploy's supervisor uses it too, and production
code imports no test tool): these are its names, not copies. ``LocalRcm`` runs RCM servers (ready
when the client socket answers), ``LocalChat`` chat servers (ready when the HTTP port answers), each
logging to ``data_dir/<site>/logs/<role>.log``; ``kill`` is a crash (SIGKILL), ``stop`` a graceful
stop; ``add_users`` makes accounts with ``python -m chat_server adduser``; ``chat_endpoint`` is where
a site's chat server answers; ``wait_connected`` waits until every site sees every other connected
(``wait_clients_connected``: every site's RCM client does, for runs of RCM alone).
"""
from __future__ import annotations

from chat_server.launcher import (
    LocalChat,
    LocalRcm,
    SiteProcesses,
    add_users,
    chat_endpoint,
    wait_clients_connected,
    wait_connected,
)

__all__ = ["LocalChat", "LocalRcm", "SiteProcesses", "add_users", "chat_endpoint", "wait_clients_connected",
           "wait_connected"]
