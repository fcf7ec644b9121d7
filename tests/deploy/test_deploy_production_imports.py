"""deploy's production modules (the supervisor, ``deploy up``/``status``/``netns``/``certs``) import no test tool.

The launcher they share with the tests is ``chat_server.launcher``; ``faultinject`` (link proxies, the
scenario runner, ``faultinject.procs``) is for tests, benchmarks and the demo only.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
PRODUCTION = ["__main__.py", "supervisor.py", "up.py", "netns.py", "certs.py"]


def imported_modules(path: Path) -> list[str]:
    """Every absolute module a file imports, at module level or inside a function."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            out.append(node.module)
    return out


@pytest.mark.parametrize("name", PRODUCTION)
def test_a_production_deploy_module_imports_no_test_tool(name: str) -> None:
    tools = [m for m in imported_modules(DEPLOY / name) if m.split(".")[0] in ("faultinject", "tests", "bench")]
    assert tools == [], f"deploy/{name} imports {tools}"
