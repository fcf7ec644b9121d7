"""Reading scenario files: ``load_scenario(path)`` and ``parse_scenario(raw)`` (TOML to :class:`Scenario`).

Every refusal is a :class:`~faultinject.scenario.ScenarioError` whose message
names the key (``[links.periodic][0] up = -1 must be a positive number of
seconds``), raised before anything runs. The model the file becomes, and the
sweep's expansion into trials, are ``faultinject/scenario.py``; the format is
documented in docs/faultinject.md ("Scenario files").
"""
from __future__ import annotations

import itertools
import tomllib
from pathlib import Path
from typing import Any

from contracts.labels import UNLABELED, LabelError, Scheme
from contracts.mission import P2P_MODES, ROUTINGS, SITE_NAME, MissionError, parse_rcm_settings
from contracts.precedence import DEFAULT, PRECEDENCES
from faultinject.scenario import (
    CHECKS,
    OPTIONAL_CHECKS,
    PROCESSES,
    Checks,
    Fault,
    Flapping,
    Links,
    PartitionStep,
    Periodic,
    RandomFaults,
    Scenario,
    ScenarioError,
    Sweep,
    Workload,
)
from faultinject.schedule import cross_pairs, pair
from faultinject.shaping import BlackholePolicy, LinkMode


# -- parsing helpers ------------------------------------------------------------------
def _keys(where: str, table: Any, allowed: set[str], required: tuple[str, ...] = ()) -> dict[str, Any]:
    if not isinstance(table, dict):
        raise ScenarioError(f"{where} must be a table")
    unknown = sorted(set(table) - allowed)
    if unknown:
        name = f"[{unknown[0]}]" if where == "the scenario file" else f"{where}.{unknown[0]}"
        raise ScenarioError(f"unknown key {name} (allowed: {', '.join(sorted(allowed))})")
    for k in required:
        if k not in table:
            raise ScenarioError(f"{where} {k} is required")
    return table


def _num(where: str, key: str, v: Any, *, positive: bool = False, zero_ok: bool = True) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ScenarioError(f"{where} {key} = {v!r} must be a number")
    x = float(v)
    if positive and not (x > 0 or (zero_ok and x == 0)):
        raise ScenarioError(f"{where} {key} = {x!r} must be {'>= 0' if zero_ok else '> 0'}")
    return x


def _int(where: str, key: str, v: Any, minimum: int = 0) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise ScenarioError(f"{where} {key} = {v!r} must be an integer >= {minimum}")
    return v


def _str_list(where: str, key: str, v: Any) -> tuple[str, ...]:
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise ScenarioError(f"{where} {key} = {v!r} must be a list of strings")
    return tuple(v)


def _site(where: str, key: str, v: Any, sites: tuple[str, ...]) -> str:
    if v not in sites:
        raise ScenarioError(f"{where} {key} = {v!r} is not a site of [sites] names")
    site: str = v       # one of the names in sites
    return site


def _pairs(where: str, t: dict[str, Any], sites: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """``pairs = [["A","B"]]`` or ``"all"``, or ``groups = [["A","B"],["C","D"]]`` (pairs between)."""
    if ("pairs" in t) == ("groups" in t):
        raise ScenarioError(f"{where} needs exactly one of pairs or groups")
    if "groups" in t:
        groups = _groups(where, t["groups"], sites, whole=False)
        try:
            return tuple(cross_pairs(groups))
        except ValueError as e:
            raise ScenarioError(f"{where} groups: {e}") from None
    v = t["pairs"]
    if v == "all":
        return tuple(pair(a, b) for a, b in itertools.combinations(sites, 2))
    if not isinstance(v, list) or not v:
        raise ScenarioError(f"{where} pairs = {v!r} must be \"all\" or a list of [site, site]")
    out = set()
    for p in v:
        if not (isinstance(p, list) and len(p) == 2):
            raise ScenarioError(f"{where} pairs entry {p!r} must be [site, site]")
        a, b = (_site(where, "pairs", s, sites) for s in p)
        if a == b:
            raise ScenarioError(f"{where} pairs entry {p!r} joins a site to itself")
        out.add(pair(a, b))
    return tuple(sorted(out))


def _groups(where: str, v: Any, sites: tuple[str, ...], whole: bool) -> list[list[str]]:
    if not isinstance(v, list) or len(v) < 2 or not all(isinstance(g, list) and g for g in v):
        raise ScenarioError(f"{where} groups = {v!r} must be two or more non-empty lists of sites")
    seen: set[str] = set()
    for g in v:
        for s in g:
            _site(where, "groups", s, sites)
            if s in seen:
                raise ScenarioError(f"{where} groups: site {s!r} is in two groups")
            seen.add(s)
    if whole and seen != set(sites):
        missing = sorted(set(sites) - seen)
        raise ScenarioError(f"{where} groups leave site {missing[0]!r} in no group")
    return [list(g) for g in v]


# -- the loader ------------------------------------------------------------------------
TOP = {"scenario", "sites", "rcm", "chat", "links", "faults", "random_faults", "workload", "sweep", "checks",
       "labels"}


def load_scenario(path: str | Path) -> Scenario:
    """Parse and validate a scenario file."""
    p = Path(path)
    try:
        raw = tomllib.loads(p.read_text())
    except FileNotFoundError:
        raise ScenarioError(f"{p}: no such file") from None
    except tomllib.TOMLDecodeError as e:
        raise ScenarioError(f"{p}: not valid TOML: {e}") from None
    return parse_scenario(raw, p)


def parse_scenario(raw: dict[str, Any], path: Path | None = None) -> Scenario:
    _keys("the scenario file", raw, TOP)
    for table in ("scenario", "sites"):
        if table not in raw:
            raise ScenarioError(f"[{table}] is required")
    sc = _keys("[scenario]", raw["scenario"],
               {"name", "description", "duration", "drain", "time_scale", "seed", "measure"}, ("name",))
    name = sc["name"]
    if not isinstance(name, str) or not SITE_NAME.match(name):
        raise ScenarioError(f"[scenario] name = {name!r} must be letters, digits, '_', '.', '-'")
    description = sc.get("description", "")
    if not isinstance(description, str):
        raise ScenarioError("[scenario] description must be a string")
    duration = _num("[scenario]", "duration", sc["duration"], positive=True, zero_ok=False) \
        if "duration" in sc else None
    time_scale = _num("[scenario]", "time_scale", sc.get("time_scale", 1.0), positive=True, zero_ok=False)
    if time_scale > 10:
        raise ScenarioError(f"[scenario] time_scale = {time_scale!r} must be at most 10")
    seed = _int("[scenario]", "seed", sc.get("seed", 1))

    st = _keys("[sites]", raw["sites"], {"names", "clearance"}, ("names",))
    sites = _str_list("[sites]", "names", st["names"])
    if len(sites) < 2 or len(set(sites)) != len(sites):
        raise ScenarioError(f"[sites] names = {list(sites)!r} must be two or more different sites")
    for s in sites:
        if not SITE_NAME.match(s):
            raise ScenarioError(f"[sites] names: {s!r} is not a valid site name")

    measure_raw = sc.get("measure", [sites[0], sites[-1]])
    m = _str_list("[scenario]", "measure", measure_raw)
    if len(m) != 2 or m[0] == m[1]:
        raise ScenarioError(f"[scenario] measure = {measure_raw!r} must be [site, peer]")
    measure = (_site("[scenario]", "measure", m[0], sites), _site("[scenario]", "measure", m[1], sites))

    rcm = dict(raw.get("rcm", {}))
    if not isinstance(raw.get("rcm", {}), dict):
        raise ScenarioError("[rcm] must be a table")
    try:
        parse_rcm_settings(rcm)
    except MissionError as e:
        raise ScenarioError(str(e)) from None
    chat = raw.get("chat", {})
    if not isinstance(chat, dict):
        raise ScenarioError("[chat] must be a table")
    try:
        from chat_server.config import parse_chat_settings
        parse_chat_settings(chat)
    except MissionError as e:
        raise ScenarioError(str(e)) from None

    scheme, clearances = _labels(raw.get("labels"), st.get("clearance"), sites)
    links = _links(raw.get("links", {}), sites, seed)
    faults = _faults(raw.get("faults", []), sites)
    random_faults = _random_faults(raw["random_faults"], sites, seed) if "random_faults" in raw else None
    workload = _workload(raw.get("workload", {}), sites, scheme)
    sweep = _sweep(raw.get("sweep", {}))
    if sweep.outage and not links.periodic:
        raise ScenarioError("[sweep] outage needs at least one [[links.periodic]] (its down is swept)")
    checks = _checks(raw.get("checks", {}))
    drain = _num("[scenario]", "drain", sc.get("drain", 10.0), positive=True)

    scen = Scenario(name=name, path=path, description=description, sites=sites, duration=duration,
                    drain=drain, time_scale=time_scale, seed=seed, measure=measure, rcm=rcm, chat=dict(chat),
                    links=links, faults=faults, random_faults=random_faults, workload=workload,
                    sweep=sweep, checks=checks, raw=raw, labels=dict(raw.get("labels") or {}),
                    clearances=clearances)
    for t in scen.trials():      # durations, schedules and faults must all be buildable
        if scen.workload.stop is not None and scen.workload.stop > t.duration:
            raise ScenarioError(f"[workload] stop = {scen.workload.stop} is after the duration {t.duration:g}")
        for f in t.faults:
            if f.at >= t.duration:
                raise ScenarioError(f"[[faults]] at = {f.at:g} ({f.site} {f.process}) is not before "
                                    f"the duration {t.duration:g}")
    return scen


def _links(t: Any, sites: tuple[str, ...], seed: int) -> Links:
    _keys("[links]", t, {"delay", "jitter", "bandwidth_bps", "down_mode", "policy", "periodic",
                         "partition", "flapping", "pace"})
    pace = t.get("pace", False)
    if not isinstance(pace, bool):
        raise ScenarioError(f"[links] pace = {pace!r} must be true or false")
    if pace and t.get("bandwidth_bps", 56_000) == 0:
        raise ScenarioError("[links] pace = true needs a bandwidth_bps to pace to")
    bw = t.get("bandwidth_bps", 56_000)
    bandwidth = None if bw == 0 else _num("[links]", "bandwidth_bps", bw, positive=True)
    try:
        down_mode = LinkMode(t.get("down_mode", "blackhole"))
    except ValueError:
        raise ScenarioError(f"[links] down_mode = {t.get('down_mode')!r} must be reset or blackhole") from None
    if down_mode is LinkMode.UP:
        raise ScenarioError("[links] down_mode = 'up' must be reset or blackhole")
    try:
        policy = BlackholePolicy(t.get("policy", "buffer"))
    except ValueError:
        raise ScenarioError(f"[links] policy = {t.get('policy')!r} must be buffer or discard") from None
    pers = []
    for i, p in enumerate(_table_list("[[links.periodic]]", t.get("periodic", []))):
        w = f"[links.periodic][{i}]"
        _keys(w, p, {"pairs", "groups", "up", "down", "start", "cycles", "until"}, ("up", "down"))
        cycles = _int(w, "cycles", p["cycles"], 1) if "cycles" in p else None
        until = _num(w, "until", p["until"], positive=True) if "until" in p else None
        if cycles is not None and until is not None:
            raise ScenarioError(f"{w} give at most one of cycles and until")
        pers.append(Periodic(_pairs(w, p, sites), _num(w, "up", p["up"], positive=True, zero_ok=False),
                             _num(w, "down", p["down"], positive=True),
                             _num(w, "start", p.get("start", 0.0), positive=True), cycles, until))
    steps = []
    for i, p in enumerate(_table_list("[[links.partition]]", t.get("partition", []))):
        w = f"[links.partition][{i}]"
        _keys(w, p, {"at", "groups", "heal"}, ("at",))
        at = _num(w, "at", p["at"], positive=True)
        if p.get("heal", False) is True:
            if "groups" in p:
                raise ScenarioError(f"{w} give groups or heal = true, not both")
            steps.append(PartitionStep(at, None))
        else:
            if "groups" not in p:
                raise ScenarioError(f"{w} groups is required (or heal = true)")
            steps.append(PartitionStep(at, tuple(tuple(g) for g in _groups(w, p["groups"], sites, True))))
    flaps = []
    for i, p in enumerate(_table_list("[[links.flapping]]", t.get("flapping", []))):
        w = f"[links.flapping][{i}]"
        _keys(w, p, {"pairs", "groups", "mean_up", "mean_down", "seed", "min_interval", "start", "until"},
              ("mean_up", "mean_down"))
        if "pairs" not in p and "groups" not in p:
            p = {**p, "pairs": "all"}
        flaps.append(Flapping(_pairs(w, p, sites), _num(w, "mean_up", p["mean_up"], positive=True, zero_ok=False),
                              _num(w, "mean_down", p["mean_down"], positive=True, zero_ok=False),
                              _int(w, "seed", p.get("seed", seed)),
                              _num(w, "min_interval", p.get("min_interval", 0.0), positive=True),
                              _num(w, "start", p.get("start", 0.0), positive=True),
                              _num(w, "until", p["until"], positive=True) if "until" in p else None))
    return Links(_num("[links]", "delay", t.get("delay", 0.0), positive=True),
                 _num("[links]", "jitter", t.get("jitter", 0.0), positive=True),
                 bandwidth, down_mode, policy, tuple(pers), tuple(steps), tuple(flaps), pace)


def _table_list(where: str, v: Any) -> list[dict[str, Any]]:
    if not isinstance(v, list) or not all(isinstance(x, dict) for x in v):
        raise ScenarioError(f"{where} must be an array of tables")
    return v


def _faults(v: Any, sites: tuple[str, ...]) -> tuple[Fault, ...]:
    out = []
    for i, f in enumerate(_table_list("[[faults]]", v)):
        w = f"[faults][{i}]"
        _keys(w, f, {"at", "site", "process", "restart_after"}, ("at", "site", "process"))
        if f["process"] not in PROCESSES:
            raise ScenarioError(f"{w} process = {f['process']!r} must be rcm or chat")
        out.append(Fault(_num(w, "at", f["at"], positive=True), _site(w, "site", f["site"], sites),
                         f["process"], _num(w, "restart_after", f.get("restart_after", 5.0),
                                            positive=True, zero_ok=False)))
    return tuple(out)


def _random_faults(t: Any, sites: tuple[str, ...], seed: int) -> RandomFaults:
    w = "[random_faults]"
    _keys(w, t, {"count", "processes", "sites", "window", "restart_after", "seed"}, ("count", "window"))
    procs = _str_list(w, "processes", t.get("processes", list(PROCESSES)))
    for p in procs:
        if p not in PROCESSES:
            raise ScenarioError(f"{w} processes: {p!r} must be rcm or chat")
    fs = _str_list(w, "sites", t.get("sites", list(sites)))
    for s in fs:
        _site(w, "sites", s, sites)

    def span(key: str, v: Any) -> tuple[float, float]:
        if not isinstance(v, list) or len(v) != 2:
            raise ScenarioError(f"{w} {key} = {v!r} must be [low, high]")
        lo, hi = (_num(w, key, x, positive=True) for x in v)
        if hi < lo:
            raise ScenarioError(f"{w} {key} = {v!r}: high is below low")
        return lo, hi
    ra = span("restart_after", t.get("restart_after", [2.0, 8.0]))
    if ra[0] <= 0:
        raise ScenarioError(f"{w} restart_after must be > 0")
    return RandomFaults(_int(w, "count", t["count"]), procs, fs, span("window", t["window"]), ra,
                        _int(w, "seed", t.get("seed", seed)))


def _labels(table: Any, clearance: Any, sites: tuple[str, ...]) -> tuple[Scheme, dict[str, str]]:
    """``[labels]`` (as in a mission file) and ``[sites] clearance = {A = "SECRET//REL TO GBR"}``."""
    if table is None:
        if clearance is not None:
            raise ScenarioError("[sites] clearance needs a [labels] table declaring the levels and caveats")
        return UNLABELED, {}
    try:
        scheme = Scheme.from_table(table)
    except LabelError as e:
        raise ScenarioError(str(e)) from None
    if clearance is None:
        clearance = {}
    if not isinstance(clearance, dict):
        raise ScenarioError("[sites] clearance must be a table of site = \"LABEL\"")
    out = {}
    for site, text in clearance.items():
        _site("[sites] clearance", site, site, sites)
        try:
            out[site] = str(scheme.parse(text))
        except LabelError as e:
            raise ScenarioError(f"[sites] clearance {site}: {e}") from None
    return scheme, out


def _workload(t: Any, sites: tuple[str, ...], scheme: Scheme = UNLABELED) -> Workload:
    w = "[workload]"
    _keys(w, t, {"senders_per_site", "rate", "rooms", "size", "sites", "start", "stop", "precedence", "labels"})
    rooms = _str_list(w, "rooms", t.get("rooms", ["ops"]))
    if not rooms:
        raise ScenarioError(f"{w} rooms must name at least one room")
    senders = tuple(_site(w, "sites", s, sites) for s in _str_list(w, "sites", t.get("sites", list(sites))))
    size = _int(w, "size", t.get("size", 100), 16)
    if size > 4000:
        raise ScenarioError(f"{w} size = {size} must be at most 4000 bytes")
    return Workload(_int(w, "senders_per_site", t.get("senders_per_site", 1), 1),
                    _num(w, "rate", t.get("rate", 2.0), positive=True), rooms, size, senders,
                    _num(w, "start", t.get("start", 0.0), positive=True),
                    _num(w, "stop", t["stop"], positive=True) if "stop" in t else None,
                    _precedence_mix(t.get("precedence", {})), _label_mix(t.get("labels", {}), scheme))


def _label_mix(t: Any, scheme: Scheme) -> tuple[tuple[str, float], ...]:
    """``[workload] labels = {"SECRET" = 0.2, ...}``: shares of sends at those labels (the rest at the room's floor)."""
    w = "[workload] labels"
    if not isinstance(t, dict):
        raise ScenarioError(f"{w} must be a table of \"LABEL\" = share")
    if t and not scheme.enabled:
        raise ScenarioError(f"{w} needs a [labels] table")
    mix = []
    for text, share in t.items():
        try:
            label = str(scheme.parse(text))
        except LabelError as e:
            raise ScenarioError(f"{w}: {e}") from None
        mix.append((label, _num(w, text, share, positive=True)))
    if sum(share for _, share in mix) > 1.0:
        raise ScenarioError(f"{w}: the shares add up to more than 1")
    return tuple(mix)


def _precedence_mix(t: Any) -> tuple[tuple[str, float], ...]:
    """``[workload] precedence = {flash = 0.05, ...}``: shares of sends above routine."""
    w = "[workload] precedence"
    if not isinstance(t, dict):
        raise ScenarioError(f"{w} must be a table of level = share")
    raised = tuple(p for p in PRECEDENCES if p != DEFAULT)      # contracts.precedence's levels above routine
    _keys(w, t, set(raised))
    mix = tuple((level, _num(w, level, t[level], positive=True)) for level in raised if level in t)
    if sum(share for _, share in mix) > 1.0:
        raise ScenarioError(f"{w}: the shares add up to more than 1")
    return mix


def _sweep(t: Any) -> Sweep:
    w = "[sweep]"
    _keys(w, t, {"p2p", "outage", "parallel", "routing", "repair"})
    repairs = t.get("repair", [])
    if not isinstance(repairs, list) or not all(isinstance(x, bool) for x in repairs):
        raise ScenarioError(f"{w} repair = {repairs!r} must be a list of true/false")
    modes = _str_list(w, "p2p", t.get("p2p", []))
    for m in modes:
        if m not in P2P_MODES:
            raise ScenarioError(f"{w} p2p: {m!r} must be one of {', '.join(P2P_MODES)}")
    routings = _str_list(w, "routing", t.get("routing", []))
    for r in routings:
        if r not in ROUTINGS:
            raise ScenarioError(f"{w} routing: {r!r} must be one of {', '.join(ROUTINGS)}")
    if "relay" in routings and any(m != "robust" for m in modes):
        raise ScenarioError(f"{w} routing 'relay' needs p2p 'robust' (the baselines use direct links only)")
    outs = t.get("outage", [])
    if not isinstance(outs, list):
        raise ScenarioError(f"{w} outage = {outs!r} must be a list of seconds")
    return Sweep(modes, tuple(_num(w, "outage", x, positive=True) for x in outs),
                 routing=tuple(routings), parallel=_int(w, "parallel", t.get("parallel", 1), 1),
                 repair=tuple(repairs))


def _checks(t: Any) -> Checks:
    w = "[checks]"
    _keys(w, t, {"enabled", "informational", "slack"})
    en = _str_list(w, "enabled", t.get("enabled", list(CHECKS)))
    inf = _str_list(w, "informational", t.get("informational", []))
    for c in (*en, *inf):
        if c not in CHECKS + OPTIONAL_CHECKS:
            raise ScenarioError(f"{w} check {c!r} must be one of {', '.join(CHECKS + OPTIONAL_CHECKS)}")
    return Checks(en, inf, _num(w, "slack", t.get("slack", 0.3), positive=True))


__all__ = ["load_scenario", "parse_scenario"]
