"""The package map of DESIGN.md, enforced: no package imports one it may not (no arrow points upward).

| package | owns | may import (ours) |
|---|---|---|
| contracts | precedence, connection status, the journal record and writer, the mission file | nothing |
| ordering | IGO ordering and the global order key (sans-IO) | `contracts` |
| rcm | the wire, channels, routing, repair, durability, the stack, server and client library | `ordering` |
| chat_server | accounts, rooms, history, journal, WebSocket and IRC fronts, the chat client library | `rcm` |
| chat_tui | the Textual and line clients | `chat_server.protocol`, `chat_server.client`, `contracts` |
| web_ui | the browser client (static files) | nothing |
| faultinject | link proxies, scenarios, the simulator, property checkers | `rcm`, `chat_server`, `ordering` |
| spark_archive | the archive job and the journal generator | `ordering`, `contracts` |
| deploy | mission examples, the supervisor, certificates, the demo and lab | everything |

A package may import what the packages it may import may import (chat_server
may use ordering's order key directly: the arrow still points down). Every
import counts, at module level or inside a function. The table is the map
``MAY`` below (a test compares them). Finer maps beside this one: rcm's layers
(tests/rcm/test_layers.py) and deploy's production modules, which import no
test tool (tests/deploy/test_deploy_production_imports.py).
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OURS = ("contracts", "ordering", "rcm", "chat_server", "chat_tui", "web_ui", "faultinject", "spark_archive", "deploy")
MAY = {
    "contracts": set(),
    "ordering": {"contracts"},
    "rcm": {"ordering"},
    "chat_server": {"rcm"},
    "chat_tui": {"chat_server.protocol", "chat_server.client", "contracts"},
    "web_ui": set(),
    "faultinject": {"rcm", "chat_server", "ordering"},
    "spark_archive": {"ordering", "contracts"},
    "deploy": set(OURS),
}


def allowed(package: str) -> set[str]:
    """What ``package`` may import: its own modules, its allowances, and theirs in turn."""
    out = {package}
    todo = list(MAY[package])
    while todo:
        name = todo.pop()
        if name in out:
            continue
        out.add(name)
        top = name.split(".")[0]
        if name == top:
            todo += list(MAY[top])
    return out


def imports_of(path: Path, root: Path = REPO) -> list[tuple[int, str]]:
    """(line, module) of every import of one of our packages in a file (relative imports resolved)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    parts = path.relative_to(root).with_suffix("").parts
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = parts[:len(parts) - node.level]
                module = ".".join(base + ((node.module,) if node.module else ()))
            else:
                module = node.module or ""
            names = [f"{module}.{a.name}" for a in node.names] if node.level and not node.module else [module]
            out += [(node.lineno, m) for m in names]
    return [(line, m) for line, m in out if m.split(".")[0] in OURS]


def permitted(module: str, may: set[str]) -> bool:
    return any(module == m or module.startswith(m + ".") for m in may)


def test_no_package_imports_one_it_may_not() -> None:
    bad = []
    for package in OURS:
        may = allowed(package)
        for path in sorted((REPO / package).rglob("*.py")):
            for line, module in imports_of(path):
                if not permitted(module, may):
                    bad.append(f"{path.relative_to(REPO)}:{line} imports {module}")
    assert not bad, "imports against the package map of DESIGN.md:\n" + "\n".join(bad)


def test_the_checker_sees_a_forbidden_import(tmp_path: Path) -> None:
    """The test above can fail: an rcm module importing the chat server is reported."""
    probe = tmp_path / "rcm" / "probe.py"
    probe.parent.mkdir()
    probe.write_text("from chat_server import protocol\nfrom . import config\nimport ordering.keys\n")
    found = [m for _, m in imports_of(probe, tmp_path) if not permitted(m, allowed("rcm"))]
    assert found == ["chat_server"]


def test_the_table_above_is_the_map_enforced() -> None:
    """The docstring's table and ``MAY`` say the same: a reader of the table knows what the test checks."""
    rows = [line.split("|")[1:-1] for line in (__doc__ or "").splitlines()
            if line.startswith("| ") and "---" not in line]
    table = {}
    for package, _owns, may in (map(str.strip, r) for r in rows[1:]):
        table[package] = set(OURS) if may == "everything" else set(re.findall(r"`([a-z_.]+)`", may))
    assert table == MAY
