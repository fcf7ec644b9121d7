"""The web client's pure modules under Node.js: ``node --test web_ui/tests/`` (reducer, store, order keys).

No npm packages and no build step: Node's own test runner loads the same ES
modules the browser does. Skipped only when ``node`` is not installed.
"""
from __future__ import annotations

import shutil
import subprocess

import pytest
from web_harness import REPO


def test_web_client_modules_under_node() -> None:
    node = shutil.which("node")
    if node is None:
        pytest.skip("Node.js is not installed: the reducer tests in web_ui/tests/ need `node` (20 or later)")
    r = subprocess.run([node, "--test", "web_ui/tests/"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"node --test web_ui/tests/ failed:\n{r.stdout[-6000:]}\n{r.stderr[-2000:]}"
    assert "# fail 0" in r.stdout and "# pass 0" not in r.stdout, r.stdout[-2000:]
