"""The ``[chat]`` table of the mission file: chat server limits, validated at start-up.

``contracts.mission`` hands the raw table over untouched; this module owns its keys.
Every refusal names the key (``MissionError("[chat] max_text_bytes = 0 must be
a positive integer")``). The keys and their meaning are listed in
docs/chat-protocol.md ("Server limits").
"""
from __future__ import annotations

import ssl
from dataclasses import dataclass, fields, replace
from typing import Any

from contracts.mission import Mission, MissionError, check_keys, check_scalar
from rcm.server.tls import tls_paths

from .accounts import ROLE_NAME
from .protocol import POSITION_LIFE_MAX


@dataclass(frozen=True, slots=True)
class ChatSettings:
    """Limits and intervals of one chat server (sizes in bytes, times in seconds)."""

    max_frame_bytes: int = 64 * 1024      # larger WebSocket frames close the connection (1009)
    max_text_bytes: int = 8 * 1024        # longer `say` texts get error too_large
    outbound_queue_bytes: int = 1 << 20   # per client; a client further behind is disconnected
    rate_limit_frames: float = 50.0       # sustained client frames per second
    rate_limit_burst: int = 200           # frames a client may send in a burst; beyond: closed (flood)
    login_max_failures: int = 5           # failed logins per user (and per address) in login_window
    login_window: float = 60.0
    login_lockout: float = 60.0           # refusal period once the limit is reached
    kdf_n: int = 1 << 14                  # scrypt cost for new password hashes (power of two)
    session_ttl: float = 7 * 86400.0      # a session token resumes a session within this time
    hello_timeout: float = 30.0           # connections without a successful hello are closed
    history_on_join: int = 50             # messages in a `joined` frame
    history_max: int = 500                # largest `limit` of a `history` request
    resume_max: int = 2000                # messages replayed to a resumed session
    max_rooms_per_user: int = 200
    max_members: int = 500                # members of one private room
    receipt_interval: float = 0.5         # a site batches its receipts over this interval
    compact_payloads: bool = True         # chat messages, rosters, receipts as arrays (payload_arrays.py); false:
                                          # the earlier release's maps and full rosters (a mission mid-upgrade)
    presence_interval: float = 0.5        # presence changes are coalesced over this interval
    close_timeout: float = 5.0            # wait for a WebSocket close handshake
    rcm_retry_max: float = 5.0            # longest back-off between RCM reconnection attempts
    rcm_ack_interval: float = 0.2         # how often processed deliveries are acknowledged to RCM
    rcm_answer_timeout: float = 5.0       # a request RCM leaves unanswered this long: this site shows suspected
    user_rate_limit_frames: float = 100.0  # sustained frames per second of one user over all its connections
    user_rate_limit_burst: int = 400      # burst of one user's frames; beyond: the connection is closed (flood)
    flash_role: str = "flash"             # the role an account needs to send FLASH ("": everyone may; urgent.py)
    immediate_role: str = ""              # the role an account needs to send IMMEDIATE ("": everyone may)
    urgent_per_minute: float = 6.0        # FLASH and IMMEDIATE messages one user may send a minute (all sessions)
    urgent_burst: int = 3                 # ... at once
    max_sessions_per_user: int = 16       # open WebSocket sessions of one user at this site
    max_connections: int = 4096           # open HTTP/WebSocket connections; more are closed at once
    max_connections_per_address: int = 256  # open connections from one client address; more are closed at once
    http_request_timeout: float = 10.0    # TLS handshake + first request headers (slowloris before the upgrade)
    keepalive_timeout: float = 30.0       # an idle keep-alive HTTP connection (no WebSocket) is closed
    ws_heartbeat: float = 30.0            # WebSocket ping interval; no pong within half of it: closed (half-open)
    tls: bool | None = None               # HTTPS/WSS with the site certificate; None: as [rcm] tls
    rooms_created_per_hour: float = 60.0  # new room names one user may bring into being (join of an unknown name)
    rooms_created_burst: int = 20         # ... in a burst
    max_rooms: int = 10_000               # room names this site knows; joining a new one beyond: limit
    rooms_page: int = 500                 # rooms listed per `rooms` reply (the client asks for the next page)
    max_verifying: int = 16               # password checks running or waiting; beyond: try again shortly
    trusted_proxies: str = ""             # comma-separated proxy addresses whose X-Forwarded-For is believed
    allowed_hosts: str = ""               # comma-separated host names clients may use (Host header) besides
                                          # the site's chat address and loopback; DNS-rebinding guard
    health_details_from: str = ""         # comma-separated addresses that see /health's details (besides loopback)
    search_budget: float = 2.0            # seconds one search may run in SQLite; beyond: error limit (too broad)
    # --- the TAK front end (chat_server/tak, docs/tak.md) ---
    tak_rooms: tuple[tuple[str, str], ...] = ()   # [chat.tak_rooms]: "GeoChat chatroom" = "room" (tak/rooms.py)
    position_max_age: float = 600.0       # a position report expires this long after it was accepted (positions.py)

    @property
    def proxies(self) -> frozenset[str]:
        return frozenset(a for a in self.trusted_proxies.split(",") if a)

    @property
    def health_readers(self) -> frozenset[str]:
        return frozenset(a for a in self.health_details_from.split(",") if a)

    @property
    def hosts(self) -> frozenset[str]:
        return frozenset(h.lower() for h in self.allowed_hosts.split(",") if h)


def _fail(key: str, value: Any, why: str) -> MissionError:
    return MissionError(f"[chat] {key} = {value!r} {why}")


def parse_chat_settings(raw: dict[str, Any], max_payload_bytes: int | None = None) -> ChatSettings:
    """Validate the raw ``[chat]`` table; unknown keys and bad values raise MissionError."""
    check_keys("[chat]", raw, {f.name for f in fields(ChatSettings)})
    defaults = ChatSettings()
    values: dict[str, Any] = {}
    for f in fields(ChatSettings):
        if f.name not in raw:
            continue
        if f.name == "tak_rooms":             # the TAK front end's table (tak/rooms.py checks it)
            from .tak.rooms import parse_tak_rooms
            values[f.name] = parse_tak_rooms(raw[f.name])
            continue
        v = raw[f.name]
        if isinstance(getattr(defaults, f.name), str):
            if not isinstance(v, str) or not all(part.strip() for part in v.split(",")) and v != "":
                raise _fail(f.name, v, "must be a string of comma-separated names")
            v = ",".join(part.strip() for part in v.split(",")) if v else ""
        else:       # (tls: None means "as [rcm] tls", given: true or false)
            v = check_scalar("[chat]", f.name, v, False if f.name == "tls" else getattr(defaults, f.name))
        values[f.name] = v
    s = ChatSettings(**values)
    if s.kdf_n < 1024 or s.kdf_n > 1 << 20 or s.kdf_n & (s.kdf_n - 1):
        raise _fail("kdf_n", s.kdf_n, "must be a power of two from 1024 to 1048576")
    if s.max_text_bytes + 1024 > s.max_frame_bytes:
        raise _fail("max_text_bytes", s.max_text_bytes,
                    f"must leave 1024 bytes of headroom below max_frame_bytes = {s.max_frame_bytes}")
    if max_payload_bytes is not None and s.max_text_bytes + 2048 > max_payload_bytes:
        raise _fail("max_text_bytes", s.max_text_bytes,
                    f"must leave 2048 bytes of headroom below [rcm] max_payload_bytes = {max_payload_bytes}")
    if s.history_on_join > s.history_max:
        raise _fail("history_on_join", s.history_on_join, f"must not exceed history_max = {s.history_max}")
    if s.rate_limit_burst < s.rate_limit_frames:
        raise _fail("rate_limit_burst", s.rate_limit_burst,
                    f"must be at least rate_limit_frames = {s.rate_limit_frames}")
    if s.user_rate_limit_burst < s.user_rate_limit_frames:
        raise _fail("user_rate_limit_burst", s.user_rate_limit_burst,
                    f"must be at least user_rate_limit_frames = {s.user_rate_limit_frames}")
    for key in ("flash_role", "immediate_role"):
        role = getattr(s, key)
        if role and not ROLE_NAME.match(role):
            raise _fail(key, role, "must be one role name (a lowercase letter, then lowercase letters, digits, "
                                   "'_', '.', '-'), or empty: everyone may")
    if not 1.0 <= s.position_max_age <= POSITION_LIFE_MAX:
        raise _fail("position_max_age", s.position_max_age, f"must be from 1 to {POSITION_LIFE_MAX:g} seconds (RCM "
                                                            "keeps reports at most an hour)")
    if s.outbound_queue_bytes < s.max_frame_bytes:
        raise _fail("outbound_queue_bytes", s.outbound_queue_bytes,
                    f"must be at least max_frame_bytes = {s.max_frame_bytes}")
    return s


def chat_settings(mission: Mission) -> ChatSettings:
    """The validated ``[chat]`` settings of a mission (``tls`` resolved from ``[rcm] tls`` when absent)."""
    s = parse_chat_settings(mission.chat, getattr(mission.rcm, "max_payload_bytes", None))
    return resolve_tls(s, mission)


def resolve_tls(s: ChatSettings, mission: Mission) -> ChatSettings:
    """``tls`` absent from ``[chat]`` follows ``[rcm] tls``."""
    if s.tls is None:
        return replace(s, tls=bool(getattr(mission.rcm, "tls", False)))
    return s


def server_ssl_context(mission: Mission, site: str) -> ssl.SSLContext:
    """TLS 1.2+ server context with the site certificate; MissionError naming a missing or bad file."""
    paths = tls_paths(mission, site)
    for key in ("cert", "key"):
        if not paths[key].exists():
            raise MissionError(f"[chat] tls is on but {paths[key]} is missing (create certificates with "
                               f"`python -m deploy certs --mission {mission.path or 'FILE'}`)")
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(str(paths["cert"]), str(paths["key"]))
    except (ssl.SSLError, OSError) as e:
        raise MissionError(f"[chat] tls: cannot load {paths['cert']} / {paths['key']}: {e}") from None
    return ctx
