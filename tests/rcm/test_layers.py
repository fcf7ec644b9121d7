"""RCM's own package map: its layers import downward only, and no module imports itself back in a cycle.

Bottom to top (docs/rcm.md, "Layers"):

| tier | packages and modules | may import (within rcm) |
|---|---|---|
| 0 | ``ranges``, ``actions``, ``connman``, ``wire`` (codec, HELLO, local API), | tier 0 |
|   | ``durability`` (records, wal, state, replay) | |
| 1 | ``routing``, ``repair`` (each independent of the other) | tier 0, and itself |
| 2 | ``channels`` | tiers 0-1 |
| 3 | ``stack``, ``latest`` | tiers 0-3 |
| 4 | ``server``, ``client``, ``cli``, ``__main__``, ``docs`` | everything below |

Imports under ``TYPE_CHECKING`` count for the tiers (a type names a dependency too) but not for cycles.
"""
from __future__ import annotations

import ast
from pathlib import Path

RCM = Path(__file__).resolve().parents[2] / "rcm"
TIERS = {"ranges": 0, "actions": 0, "connman": 0, "wire": 0, "durability": 0,
         "routing": 1, "repair": 1, "channels": 2, "stack": 3, "latest": 3,
         "server": 4, "client": 4, "cli": 4, "__main__": 4, "docs": 4, "__init__": 4}


def unit(module: str) -> str:
    """The layer unit of a dotted module under rcm (its subpackage, or the top-level module)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def imports(path: Path) -> list[tuple[str, bool]]:
    """(module, at run time) of every rcm import in a file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    guarded = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            guarded |= {id(n) for n in ast.walk(node)}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "rcm":
            # ``from rcm.x import y``: the module rcm.x.y when y is one, else rcm.x itself.
            names = {f"{node.module}.{a.name}" if _exists(f"{node.module}.{a.name}") else node.module
                     for a in node.names}
            out += [(n, id(node) not in guarded) for n in sorted(names)]
        elif isinstance(node, ast.Import):
            out += [(a.name, id(node) not in guarded) for a in node.names if a.name.split(".")[0] == "rcm"]
    return out


def _exists(module: str) -> bool:
    rel = module.split(".", 1)[1].replace(".", "/") if "." in module else ""
    return bool(rel) and ((RCM / rel).is_dir() or (RCM / (rel + ".py")).exists())


def module_of(path: Path) -> str:
    rel = path.relative_to(RCM.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def test_rcm_layers_import_downward_only():
    bad = []
    for path in sorted(RCM.rglob("*.py")):
        me = unit(module_of(path)) if module_of(path) != "rcm" else "__init__"
        for mod, _ in imports(path):
            other = unit(mod)
            if other == me:
                continue
            if TIERS[other] > TIERS[me] or (TIERS[other] == TIERS[me] and TIERS[me] in (1,)):
                bad.append(f"{path.relative_to(RCM.parent)} ({me}, tier {TIERS[me]}) imports {mod} "
                           f"({other}, tier {TIERS[other]})")
    assert not bad, "\n".join(bad)


def test_no_rcm_module_is_in_an_import_cycle():
    graph: dict[str, set[str]] = {}
    for path in sorted(RCM.rglob("*.py")):
        graph[module_of(path)] = {m for m, runtime in imports(path) if runtime and m != module_of(path)}
    seen: dict[str, int] = {}
    cycles = []

    def visit(m: str, stack: list[str]) -> None:
        seen[m] = 1
        for n in sorted(graph.get(m, ())):
            if n not in graph:
                continue
            if seen.get(n) == 1:
                cycles.append(" -> ".join([*stack[stack.index(n):], n]))
            elif n not in seen:
                visit(n, [*stack, n])
        seen[m] = 2

    for m in sorted(graph):
        if m not in seen:
            visit(m, [m])
    assert not cycles, "\n".join(cycles)


def test_every_rcm_unit_has_a_tier():
    units = {unit(module_of(p)) if module_of(p) != "rcm" else "__init__" for p in RCM.rglob("*.py")}
    assert units <= set(TIERS), units - set(TIERS)
