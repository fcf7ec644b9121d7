"""Fixtures shared by the RCM tests: the TLS contexts of a small mission's sites (the TLS resumption and
continuation modules both drive TLS over memory BIOs with them)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from rcm_certs import make_ca, write_site

from rcm.server.tls import tls_contexts


class CertMission:
    """As much of a mission as ``tls_contexts`` reads: where each site's ``tls/`` directory is."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.path = None

    def site_dir(self, site: str) -> Path:
        return self.root / site


@pytest.fixture(scope="module")
def contexts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Sites A, B and C of mission "m", certificates from one CA: ``contexts[site]`` is its (server, client)
    contexts, ``contexts["mission"]`` the mission they were made for (to make more)."""
    root = tmp_path_factory.mktemp("tls")
    ca = make_ca("m")
    for s in "ABC":
        write_site(root / s / "tls", ca, s, "m")
    m = CertMission(root)
    return {"mission": m, **{s: tls_contexts(m, s) for s in "ABC"}}   # type: ignore[dict-item, arg-type]
