"""Mission file (Contract 1 of DESIGN.md): load, validate, and describe a mission.

Every process of a mission gets the same TOML file plus its own site name. All
validation happens here, at start-up, and every refusal names the offending key
(``MissionError("[rcm] liveness_timeout = 0.5 must be greater than
heartbeat_timeout = 1.0")``) so an operator can fix the file without reading code.

``tls = false`` is refused unless every ``rcm`` and ``dial`` address is
loopback or ``[rcm] insecure_plaintext = true`` says the network is a lab's
(``_check_plaintext``).

Extensions to the contract (documented in docs/rcm.md): optional limits in
``[rcm]`` (``max_frame_bytes``, ``max_payload_bytes``, ``max_buffered_messages``, ``max_buffered_bytes``,
``ack_interval``, ``handshake_timeout``, ``max_handshaking``), local clients
(``client_queue_bytes``, ``replay_log_bytes``), durability (``durable``,
``wal_max_bytes``), repair (``retention``, ``retention_bytes``, ``repair``,
``repair_period``, ``repair_rate``), the clock protocols' announcement window (``announce_delay``,
docs/ordering.md), and a ``[chat]`` table that belongs to the chat server,
which validates it itself.
"""
from __future__ import annotations

import ipaddress
import re
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from .labels import UNLABELED, Label, LabelError, Scheme, clearance_from_table

SITE_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,31}\Z")   # \Z: "$" would let a trailing newline in
ORDERINGS = ("lamport", "sequencer", "hybrid")
P2P_MODES = ("robust", "tcp", "tcp-suspect")
ROUTINGS = ("relay", "direct")
COMPRESSIONS = ("zstd", "none")   # [rcm] compression: offered on inter-site links (rcm.wire.compress)


class MissionError(ValueError):
    """The mission file is unusable; the message names the key."""


@dataclass(frozen=True, slots=True)
class Address:
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class RcmSettings:
    """The ``[rcm]`` table; timeouts in seconds."""

    heartbeat_timeout: float = 1.0
    liveness_timeout: float = 5.0
    silence_timeout: float = 10.0
    suspect_timeout: float = 60.0
    reconnect_period: float = 3.0
    ordering: str = "lamport"
    p2p: str = "robust"
    tls: bool = False
    # Extension (issue 17): reach a peer through connected sites when its direct link is down.
    routing: str = "relay"             # relay | direct (the paper's); direct for the tcp baselines
    max_hops: int = 3                  # longest relay path, in links
    # Plaintext (tls = false) off loopback: a lab on a closed network only (see _check_plaintext).
    insecure_plaintext: bool = False
    # Extensions (limits).
    max_frame_bytes: int = 1 << 20
    max_payload_bytes: int = 256 * 1024
    max_buffered_messages: int = 100_000
    max_buffered_bytes: int = 64 << 20  # and at most this many bytes per peer (sends beyond: back-pressure)
    ack_interval: float = 0.2
    announce_delay: float = 0.0        # hold a clock announcement up to this long (ordering.window); 0: never
    handshake_timeout: float = 5.0
    durable: bool = True               # write-ahead log with group commit (rcm/wal.py)
    wal_max_bytes: int = 64 << 20      # compact the log past this size
    max_handshaking: int = 0           # accepted connections before HELLO; 0: max(32, 4 x peers)
    client_queue_bytes: int = 16 << 20  # queued for one local client past this: it is dropped
    replay_log_bytes: int = 128 << 20  # the local clients' replay log holds at most this
    # Extension (issue 19): on a paced link (``[sites.A.rate]``), urgent messages are written first.
    lanes: bool = True                 # false: one FIFO queue per paced link (the baseline)
    # Extension (issue 18): repair what a site missed (docs/rcm.md, Repair).
    retention: float = 86400.0         # seconds a site keeps delivered messages to repair others
    retention_bytes: int = 256 << 20   # and at most this many payload bytes of them
    repair: bool = True                # fetch messages reported missing from sites that hold them
    repair_period: float = 30.0        # while something is missing: ask connected peers what they hold
    repair_rate: int = 16384           # bytes per second a site serves one peer's repairs, at most
    # Extension (issue 36): streaming compression of each inter-site connection, when both ends offer it
    # in HELLO (rcm.wire.compress; docs/rcm.md, Compression). "none": never offered, the link is as before.
    compression: str = "zstd"
    # Extension (issue 36): on a link paced slower than 64 kbit/s, a cut connection's TLS goes on over the next
    # connection without a handshake (rcm.server.tlscontinue); false: a resumed handshake each time (the baseline).
    tls_continue: bool = True

    @property
    def relaying(self) -> bool:
        """Do sites reach peers through relays (``routing = "relay"`` on robust channels)?"""
        return self.routing == "relay" and self.p2p == "robust"


AUTO_WHEN_ZERO = frozenset({"max_handshaking"})   # int settings where 0 picks a value from the mission
NONE_WHEN_ZERO = frozenset({"announce_delay"})    # float settings where 0 turns the feature off

TIME_KEYS: tuple[str, ...] = tuple(f.name for f in fields(RcmSettings) if f.type in (float, "float"))
"""The ``[rcm]`` keys that are durations in seconds (every float setting is one)."""


def scaled_rcm_table(raw: dict[str, Any], factor: float) -> dict[str, Any]:
    """An ``[rcm]`` table with every duration (given or default) multiplied by ``factor``.

    Fault-injection runs compress time this way (``faultinject.scenario``);
    the result is validated like any mission's table.
    """
    defaults = RcmSettings()
    out = dict(raw)
    for k in TIME_KEYS:
        out[k] = round(float(raw.get(k, getattr(defaults, k))) * factor, 6)
    parse_rcm_settings(out)
    return out


@dataclass(frozen=True, slots=True)
class SiteConfig:
    name: str
    rcm: Address
    chat: Address
    dial: dict[str, Address] = field(default_factory=dict)
    irc: Address | None = None          # the chat server's IRC front end (Contract 1 extension), if any
    tak: Address | None = None          # the chat server's TAK front end (CoT over TCP; second round), if any
    rate: dict[str, int] = field(default_factory=dict)   # peer -> bits per second this site paces to
    clearance: Label | None = None      # what the site may hold ([sites.X.clearance]; None: the default label)

    def dial_address(self, peer: SiteConfig) -> Address:
        """Where this site dials to reach ``peer`` (a link proxy, or the peer itself)."""
        return self.dial.get(peer.name, peer.rcm)


@dataclass(frozen=True, slots=True)
class Mission:
    name: str
    path: Path | None
    data_dir: Path
    rcm: RcmSettings
    sites: dict[str, SiteConfig]
    chat: dict[str, Any] = field(default_factory=dict)
    labels: Scheme = UNLABELED          # [labels] (contracts.labels); UNLABELED when the mission has none

    def site(self, name: str) -> SiteConfig:
        try:
            return self.sites[name]
        except KeyError:
            raise MissionError(
                f"site {name!r} is not in the mission (sites: {', '.join(self.sites)})") from None

    def site_dir(self, name: str) -> Path:
        """Where site ``name`` keeps its files: ``data_dir/<name>/``."""
        self.site(name)
        return self.data_dir / name

    def peers_of(self, name: str) -> list[str]:
        return [s for s in self.sites if s != name]

    def clearance(self, name: str) -> Label:
        """What site ``name`` may hold: its ``[sites.X.clearance]``, else the mission's default label."""
        c = self.site(name).clearance
        return c if c is not None else self.labels.default

    def clearances(self) -> dict[str, Label]:
        """Every site's clearance (``clearance``), by site name."""
        return {name: self.clearance(name) for name in self.sites}


def _address(key: str, value: Any) -> Address:
    if not isinstance(value, str) or ":" not in value:
        raise MissionError(f"{key} = {value!r} must be \"host:port\"")
    host, _, port_text = value.rpartition(":")
    host = host.strip("[]")
    if not host:
        raise MissionError(f"{key} = {value!r} has no host")
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise MissionError(f"{key} = {value!r}: port must be 1-65535")
    try:
        ipaddress.ip_address(host)
    except ValueError:
        if not re.fullmatch(r"[A-Za-z0-9.-]+", host):
            raise MissionError(f"{key} = {value!r}: {host!r} is not a host name or IP address") from None
    return Address(host, int(port_text))


def check_keys(table: str, got: dict[str, Any], allowed: set[str]) -> None:
    """``MissionError`` naming the first key of ``got`` outside ``allowed`` (the mission file's tables)."""
    unknown = sorted(set(got) - allowed)
    if unknown:
        raise MissionError(f"unknown key {table}.{unknown[0]} (allowed: {', '.join(sorted(allowed))})")


def check_scalar(table: str, key: str, value: Any, default: Any, *, zero_ok: bool = False,
                 number: str = "positive number") -> Any:
    """``value`` of ``table``'s ``key`` checked against the type of its ``default``: true or false, a
    positive integer (``zero_ok``: or 0, the automatic value), a positive number (``number`` names
    it in the error; returned as a float), or a string. ``MissionError`` names the key and value."""
    where = f"{table} {key} = {value!r}"
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise MissionError(f"{where} must be true or false")
    elif isinstance(default, int):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0 or (value == 0 and not zero_ok):
            raise MissionError(f"{where} must be a positive integer"
                               + (", or 0 for the automatic value" if zero_ok else ""))
    elif isinstance(default, float):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise MissionError(f"{where} must be a {number}")
        value = float(value)
        if not (value > 0 or (zero_ok and value == 0)):
            raise MissionError(f"{table} {key} = {value!r} must be greater than 0" + (" or 0" if zero_ok else ""))
    elif isinstance(default, str) and not isinstance(value, str):
        raise MissionError(f"{where} must be a string")
    return value


def parse_rcm_settings(raw: dict[str, Any]) -> RcmSettings:
    """Validate an ``[rcm]`` table; ``MissionError`` names the offending key."""
    defaults = RcmSettings()
    allowed = {f.name for f in fields(RcmSettings)}
    check_keys("[rcm]", raw, allowed)
    values: dict[str, Any] = {}
    if "routing" not in raw and raw.get("p2p", "robust") != "robust":
        values["routing"] = "direct"   # the paper's baselines had no relays
    for f in fields(RcmSettings):
        if f.name in raw:
            values[f.name] = check_scalar("[rcm]", f.name, raw[f.name], getattr(defaults, f.name),
                                          zero_ok=f.name in AUTO_WHEN_ZERO | NONE_WHEN_ZERO,
                                          number="number of seconds")
    s = RcmSettings(**values)
    if s.ordering not in ORDERINGS:
        raise MissionError(f"[rcm] ordering = {s.ordering!r} must be one of {', '.join(ORDERINGS)}")
    if s.p2p not in P2P_MODES:
        raise MissionError(f"[rcm] p2p = {s.p2p!r} must be one of {', '.join(P2P_MODES)}")
    if s.compression not in COMPRESSIONS:
        raise MissionError(f"[rcm] compression = {s.compression!r} must be one of {', '.join(COMPRESSIONS)}")
    if s.routing not in ROUTINGS:
        raise MissionError(f"[rcm] routing = {s.routing!r} must be one of {', '.join(ROUTINGS)}")
    if s.routing == "relay" and s.p2p != "robust":
        raise MissionError(f"[rcm] routing = 'relay' needs p2p = 'robust' (p2p = {s.p2p!r} is one of the "
                           "paper's baselines, which only use direct links): set routing = 'direct'")
    if s.liveness_timeout <= s.heartbeat_timeout:
        raise MissionError(f"[rcm] liveness_timeout = {s.liveness_timeout} must be greater than "
                           f"heartbeat_timeout = {s.heartbeat_timeout}")
    if s.announce_delay >= s.liveness_timeout:
        raise MissionError(f"[rcm] announce_delay = {s.announce_delay} must be below "
                           f"liveness_timeout = {s.liveness_timeout}")
    if s.ack_interval >= s.liveness_timeout:
        raise MissionError(f"[rcm] ack_interval = {s.ack_interval} must be below "
                           f"liveness_timeout = {s.liveness_timeout}")
    least = max(4 << 20, 4 * s.max_frame_bytes)
    if s.client_queue_bytes < least:
        raise MissionError(f"[rcm] client_queue_bytes = {s.client_queue_bytes} must be at least {least} "
                           "(4 MiB, and 4 x max_frame_bytes)")
    if s.replay_log_bytes < s.max_frame_bytes:
        raise MissionError(f"[rcm] replay_log_bytes = {s.replay_log_bytes} must be at least "
                           f"max_frame_bytes = {s.max_frame_bytes}")
    if s.retention < s.suspect_timeout:
        raise MissionError(f"[rcm] retention = {s.retention} must be at least suspect_timeout = "
                           f"{s.suspect_timeout}: messages are reported missing only after it, so a "
                           "shorter retention could never repair anything")
    if s.max_buffered_bytes < s.max_payload_bytes:
        raise MissionError(f"[rcm] max_buffered_bytes = {s.max_buffered_bytes} must be at least "
                           f"max_payload_bytes = {s.max_payload_bytes} (room for one message)")
    if s.retention_bytes < s.max_payload_bytes:
        raise MissionError(f"[rcm] retention_bytes = {s.retention_bytes} must be at least "
                           f"max_payload_bytes = {s.max_payload_bytes} (room for one message)")
    if s.repair_rate < 1024:
        raise MissionError(f"[rcm] repair_rate = {s.repair_rate} must be at least 1024 bytes per second")
    if s.max_payload_bytes + 1024 > s.max_frame_bytes:
        raise MissionError(f"[rcm] max_payload_bytes = {s.max_payload_bytes} must leave 1024 bytes "
                           f"of headroom below max_frame_bytes = {s.max_frame_bytes}")
    return s


def is_loopback(host: str) -> bool:
    """Is ``host`` this machine only (127.0.0.0/8, ::1, localhost)?"""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _check_plaintext(s: RcmSettings, sites: dict[str, SiteConfig]) -> None:
    """Refuse ``tls = false`` where another host could reach an RCM port (audit finding 4).

    Without TLS nothing authenticates a HELLO: anyone who reaches a site's RCM
    port can claim to be any site, replace the genuine peer's connection, make
    the site discard what it buffered for that peer, and have forged messages
    delivered as that site's. That is acceptable where only this machine can
    connect (every ``rcm`` and ``dial`` address is loopback), or on a lab
    network that the mission file explicitly declares (``insecure_plaintext``).
    """
    if s.tls:
        if s.insecure_plaintext:
            raise MissionError("[rcm] insecure_plaintext = true contradicts tls = true: remove one of them")
        return
    if s.insecure_plaintext:
        return
    for sname, sc in sites.items():
        named = [(f"sites.{sname}.rcm", sc.rcm)] + [(f"sites.{sname}.dial.{peer}", a) for peer, a in sc.dial.items()]
        for key, a in named:
            if not is_loopback(a.host):
                raise MissionError(
                    f"[rcm] tls = false but {key} = {a} is not a loopback address: without TLS anyone who "
                    "reaches an RCM port can claim to be any site. Set tls = true (mutual TLS with the mission "
                    "CA: python -m deploy certs), or, on a closed lab network only, [rcm] insecure_plaintext = true")


MIN_RATE = 1200
"""Slowest link rate accepted, in bits per second (a heartbeat must not take seconds)."""


def _rates(sname: str, raw: Any, s: RcmSettings) -> dict[str, int]:
    """``[sites.NAME.rate]``: peer -> bits per second, each a whole number of at least ``MIN_RATE``."""
    if not isinstance(raw, dict):
        raise MissionError(f"[sites.{sname}.rate] must be a table of peer = bits per second")
    out: dict[str, int] = {}
    for peer, v in raw.items():
        if isinstance(v, bool) or not isinstance(v, int) or v < MIN_RATE:
            raise MissionError(f"sites.{sname}.rate.{peer} = {v!r} must be a whole number of bits per second, "
                               f"at least {MIN_RATE}")
        out[peer] = v
    if out and s.p2p != "robust":
        raise MissionError(f"[sites.{sname}.rate] paces robust channels only (p2p = {s.p2p!r} is one of the "
                           "paper's baselines): remove the table or set p2p = 'robust'")
    return out


def _clearance(sname: str, s: dict[str, Any], scheme: Scheme) -> Label | None:
    """``[sites.X.clearance]`` read against the mission's labels (absent: None, the default label)."""
    if "clearance" not in s:
        return None
    if not scheme.enabled:
        raise MissionError(f"[sites.{sname}.clearance] needs a [labels] table declaring the levels and caveats")
    try:
        return clearance_from_table(scheme, f"[sites.{sname}.clearance]", s["clearance"])
    except LabelError as e:
        raise MissionError(str(e)) from None


def parse_mission(raw: dict[str, Any], base_dir: Path, path: Path | None = None) -> Mission:
    """Validate a decoded mission table; relative paths resolve against ``base_dir``."""
    check_keys("top level", raw, {"mission", "rcm", "sites", "chat", "labels"})
    m = raw.get("mission")
    if not isinstance(m, dict):
        raise MissionError("missing [mission] table")
    check_keys("[mission]", m, {"name", "data_dir"})
    name = m.get("name")
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", name):
        raise MissionError(f"[mission] name = {name!r} must be 1-64 letters, digits, '_', '.', '-'")
    data_dir_raw = m.get("data_dir", f"var/{name}")
    if not isinstance(data_dir_raw, str) or not data_dir_raw:
        raise MissionError(f"[mission] data_dir = {data_dir_raw!r} must be a path")
    data_dir = (base_dir / data_dir_raw).resolve()

    rcm_raw = raw.get("rcm", {})
    if not isinstance(rcm_raw, dict):
        raise MissionError("[rcm] must be a table")
    settings = parse_rcm_settings(rcm_raw)
    try:
        scheme = Scheme.from_table(raw["labels"]) if "labels" in raw else UNLABELED
    except LabelError as e:
        raise MissionError(str(e)) from None

    sites_raw = raw.get("sites")
    if not isinstance(sites_raw, dict) or not sites_raw:
        raise MissionError("missing [sites.NAME] tables: a mission needs at least one site")
    sites: dict[str, SiteConfig] = {}
    for sname, s in sites_raw.items():
        if not SITE_NAME.match(sname):
            raise MissionError(f"[sites.{sname}]: site names must match {SITE_NAME.pattern}")
        if not isinstance(s, dict):
            raise MissionError(f"[sites.{sname}] must be a table")
        check_keys(f"[sites.{sname}]", s, {"rcm", "chat", "dial", "irc", "tak", "rate", "clearance"})
        for key in ("rcm", "chat"):
            if key not in s:
                raise MissionError(f"missing sites.{sname}.{key}")
        dial_raw = s.get("dial", {})
        if not isinstance(dial_raw, dict):
            raise MissionError(f"[sites.{sname}.dial] must be a table")
        sites[sname] = SiteConfig(
            name=sname,
            rcm=_address(f"sites.{sname}.rcm", s["rcm"]),
            chat=_address(f"sites.{sname}.chat", s["chat"]),
            dial={peer: _address(f"sites.{sname}.dial.{peer}", a) for peer, a in dial_raw.items()},
            irc=_address(f"sites.{sname}.irc", s["irc"]) if "irc" in s else None,
            tak=_address(f"sites.{sname}.tak", s["tak"]) if "tak" in s else None,
            rate=_rates(sname, s.get("rate", {}), settings),
            clearance=_clearance(sname, s, scheme),
        )
    for sname, sc in sites.items():
        for peer in sc.dial:
            if peer not in sites:
                raise MissionError(f"sites.{sname}.dial.{peer}: no site named {peer!r}")
            if peer == sname:
                raise MissionError(f"sites.{sname}.dial.{peer}: a site does not dial itself")
        for peer in sc.rate:
            if peer not in sites:
                raise MissionError(f"sites.{sname}.rate.{peer}: no site named {peer!r}")
            if peer == sname:
                raise MissionError(f"sites.{sname}.rate.{peer}: a site does not send to itself")
    seen: dict[tuple[str, int], str] = {}
    for sname, sc in sites.items():
        for key in ("rcm", "chat", "irc", "tak"):
            a: Address | None = getattr(sc, key)
            if a is None:
                continue
            where = f"sites.{sname}.{key}"
            if (a.host, a.port) in seen:
                raise MissionError(f"{where} = {a} is already used by {seen[(a.host, a.port)]}")
            seen[(a.host, a.port)] = where
    _check_plaintext(settings, sites)
    chat = raw.get("chat", {})
    if not isinstance(chat, dict):
        raise MissionError("[chat] must be a table")
    return Mission(name=name, path=path, data_dir=data_dir, rcm=settings, sites=sites, chat=chat, labels=scheme)


def load_mission(path: str | Path) -> Mission:
    """Read and validate a mission file."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise MissionError(f"mission file {str(p)!r} not found") from None
    except OSError as e:
        raise MissionError(f"cannot read mission file {str(p)!r}: {e.strerror}") from None
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise MissionError(f"{p}: not valid TOML: {e}") from None
    return parse_mission(raw, p.resolve().parent, p.resolve())
