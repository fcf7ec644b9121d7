"""Missions and accounts for chat server tests (importable by name, unlike conftest)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from chat_server.accounts import Roles, hash_password
from chat_server.store import ChatStore
from contracts.mission import Mission, parse_mission

FAST_KDF = 1024          # scrypt n for test accounts (the minimum [chat] kdf_n accepts)
PASSWORD = "correct horse"

def make_mission(tmp_path: Path, sites: list[str], chat: dict[str, Any] | None = None,
                 rcm: dict[str, Any] | None = None, tak: tuple[str, ...] = ()) -> Mission:
    """A mission in ``tmp_path`` with fixed loopback ports and fast chat timers; the ``tak`` sites have a TAK
    front end (its port in the mission is a placeholder: tests start servers with ``tak_port=0``)."""
    raw: dict[str, Any] = {"mission": {"name": "t", "data_dir": "var"}, "rcm": dict(rcm or {}),
                           "sites": {s: {"rcm": f"127.0.0.1:{20000 + i}", "chat": f"127.0.0.1:{21000 + i}",
                                         **({"tak": f"127.0.0.1:{21800 + i}"} if s in tak else {})}
                                     for i, s in enumerate(sites)},
                           "chat": {"kdf_n": FAST_KDF, "receipt_interval": 0.05, "presence_interval": 0.05,
                                    "rcm_ack_interval": 0.05, **(chat or {})}}
    return parse_mission(raw, tmp_path)


def add_users(mission: Mission, site: str, users: list[str], password: str = PASSWORD,
              roles: tuple[str, ...] = ()) -> None:
    """Accounts straight into the site's database (one hash shared: same password, faster), with ``roles``."""
    store = ChatStore(mission.site_dir(site) / "chat" / "chat.db")
    pw = hash_password(password, FAST_KDF)
    for u in users:
        store.add_user(u, pw)
        Roles(store.db).grant(u, roles)
    store.close()


def grant(mission: Mission, site: str, user: str, *roles: str) -> None:
    """Give an existing account roles (a running server sees them at its next check, as with ``roles --grant``)."""
    store = ChatStore(mission.site_dir(site) / "chat" / "chat.db")
    Roles(store.db).grant(user, roles)
    store.close()
