"""Mission file (Contract 1 of DESIGN.md): the one writer, beside its reader ``contracts.mission``.

``write_mission_file`` writes what ``load_mission`` reads: from a ``Mission`` (the file
reads back as the same ``Mission``: ``deploy netns`` derives one per run), or from raw
tables (``faultinject.missions.write_mission``: tests write files the reader must refuse,
so raw tables are written as given, never validated here). A separate module from the
reader because the reader grows with every extension of the contract; this one only
learns a new ``SiteConfig`` or ``Mission`` field when its value is not a plain one
(the round-trip test in tests/contracts/test_mission_file.py names any it misses).
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

from .labels import Label, Scheme
from .mission import Address, Mission, RcmSettings

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+\Z")
# The order of a mission file's top-level tables, as DESIGN.md shows them; other tables follow.
_FIRST = ("mission", "rcm", "chat", "sites")


def toml_value(v: Any) -> str:
    """A TOML literal for a bool, number, string, or list of them."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)        # repr of a float reads back exactly (also inf and nan, which TOML spells so)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, Address):
        v = address_text(v)
    if not isinstance(v, str):
        raise TypeError(f"no TOML literal for {type(v).__name__} {v!r}")
    return '"' + "".join(_escape(c) for c in v) + '"'


def _escape(c: str) -> str:
    if c in '"\\':
        return "\\" + c
    if c < " " or c == "\x7f":         # control characters are not allowed raw in a basic string
        return f"\\u{ord(c):04x}"
    return c


def toml_key(k: str) -> str:
    """A key as TOML writes it: bare when it can be (site names may hold a '.', which must be quoted)."""
    return k if _BARE_KEY.match(k) else toml_value(k)


def address_text(a: Address) -> str:
    """``host:port``, an IPv6 host in brackets (the reader strips them)."""
    return f"[{a.host}]:{a.port}" if ":" in a.host else f"{a.host}:{a.port}"


def _plain(v: Any) -> Any:
    """A value of the decoded mission as the file spells it (addresses as text, tables as dicts)."""
    if isinstance(v, Address):
        return address_text(v)
    if isinstance(v, Label):        # a clearance: [sites.X.clearance]
        return v.to_json()
    if isinstance(v, Scheme):       # [labels]; an unlabeled mission has none
        return {"levels": list(v.levels), "caveats": list(v.caveats), "default": str(v.default)} if v.enabled else {}
    if isinstance(v, Mapping):
        return {k: _plain(x) for k, x in v.items()}
    return v


def mission_tables(m: Mission) -> dict[str, Any]:
    """The tables of a mission file that ``parse_mission`` reads back as ``m`` (but its ``path``).

    ``[rcm]`` holds only the keys that differ from their defaults (what a person would write);
    empty tables and absent optional addresses are left out.
    """
    defaults = RcmSettings()
    rcm = {f.name: getattr(m.rcm, f.name) for f in fields(RcmSettings)
           if getattr(m.rcm, f.name) != getattr(defaults, f.name)}
    sites: dict[str, Any] = {}
    for name, sc in m.sites.items():
        table: dict[str, Any] = {}
        for f in fields(sc):
            v = getattr(sc, f.name)
            if f.name != "name" and v is not None and v != {}:
                table[f.name] = _plain(v)
        sites[name] = table
    out: dict[str, Any] = {"mission": {"name": m.name, "data_dir": str(m.data_dir)}, "rcm": rcm}
    for f in fields(m):
        if f.name not in ("name", "path", "data_dir", "rcm", "sites"):
            v = _plain(getattr(m, f.name))
            if v:
                out[f.name] = v
    out["sites"] = sites
    return out


def mission_text(tables: Mapping[str, Any], header: Iterable[str] = ()) -> str:
    """TOML text of a mission file's tables (``header`` lines become comments at the top)."""
    lines = [f"# {h}" for h in header]
    order = [k for k in _FIRST if k in tables] + [k for k in tables if k not in _FIRST]
    for k in order:
        _table(lines, [k], tables[k])
    return "\n".join(lines).lstrip("\n") + "\n"


def _table(lines: list[str], path: list[str], table: Mapping[str, Any]) -> None:
    """``[a.b]`` with its scalar keys, then its sub-tables; a header only where it holds keys (or is empty)."""
    scalars = {k: v for k, v in table.items() if not isinstance(v, Mapping)}
    subs = {k: v for k, v in table.items() if isinstance(v, Mapping)}
    if scalars or not subs:
        lines += ["", "[" + ".".join(toml_key(p) for p in path) + "]"]
        lines += [f"{toml_key(k)} = {toml_value(v)}" for k, v in scalars.items()]
    for k, v in subs.items():
        _table(lines, path + [k], v)


def write_mission_file(path: Path, mission: Mission | Mapping[str, Any], header: Iterable[str] = ()) -> Path:
    """Write a mission file at ``path`` from a ``Mission`` or from raw tables (written as given)."""
    tables = mission_tables(mission) if isinstance(mission, Mission) else mission
    path.write_text(mission_text(tables, header), encoding="utf-8")
    return path
