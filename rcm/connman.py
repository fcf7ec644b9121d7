"""Connection manager: per remote site, the TCP and logical state machines.

Theory of operation
-------------------
Two state machines per peer, kept as transition tables (printed into
docs/rcm.md by ``python -m rcm.docs``) so that an illegal transition raises
``IllegalTransition`` instead of passing silently.

TCP machine (the paper's Figure 4):

* ``TCP_Connected``: a connection finished its handshake and frames keep arriving.
* ``TCP_Silent``: nothing received for ``liveness_timeout``.
* ``TCP_Disconnected``: socket error, or ``silence_timeout`` spent silent
  (the manager then closes the socket). Redial every ``reconnect_period``
  (on a slow paced link, every ``redial_period``: see below).

Logical machine (the paper's Figure 5), driven by the TCP machine's states:
connected while ``TCP_Connected``; suspected on leaving it; disconnected when
suspected for ``suspect_timeout`` without coming back. Only logical statuses
reach the protocol stack and the client. A peer starts *suspected* when the
server starts: a restart is an outage like any other, and peers get the
suspect timeout to (re)connect before anything sent to them is skipped.

Redialing on slow links (issue 36). On a paced link slower than
``SLOW_LINK_BPS`` a reconnection's handshake is seconds of the link, and the
wait for the next dial after the link returns adds to it. So the pair splits
the roles (``redial_period``): the site whose name sorts first dials every
``SLOW_REDIAL_PERIOD`` (1 s, or ``reconnect_period`` if shorter), so that a
restored link is noticed within a second; the other dials every
``reconnect_period`` plus about one resumed handshake (``dial_yield``), so
that the first site's dial usually makes the one connection and the pair
does not put two handshakes on the radio at once. Its own dials remain for
when the first site cannot dial (it holds its dials, or only one direction
of dialing gets through). It holds a due dial while a connection it accepted
is still in its handshake (``holds_dial``): most often the first site's, made
as the link came back. A dial that goes nowhere while the link is down
costs one SYN on a real radio (docs/rcm.md gives the cost per minute).

A heartbeat goes out when nothing was sent to the peer for
``heartbeat_timeout`` while a connection is up.

Relaying (``[rcm] routing = "relay"``, docs/relay.md): a peer that a path of
connected sites reaches is as good as connected. The stack reports that with
``path_changed(relayed=True)``, and the logical machine is then driven by
the *path*: its ``TCP_Connected`` input means "the direct link is connected
or a relay path is up", so suspected and disconnected mean "no path", with
the same timeouts. The TCP machine still follows the direct link alone, but
a direct link the peer says it does not hear us on (a one-way fade, learnt
from its link-state advert: ``path_changed(deaf=True)``) counts as silent.

A peer that refused this site as incompatible (another protocol version,
other mission terms) is not dialed again (``hold_dials``) until it dials
this site and a handshake completes: an upgraded peer dials everyone when it
starts, so nothing waits, and an old one is never dialed in a loop.

``PeerConnection`` is sans-IO: the site stack calls its event methods with the
current time and executes the returned ``Effect`` list. Deadlines are exact:
at ``last_received + liveness_timeout`` the peer is silent, not a tick later.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

from contracts.mission import RcmSettings
from contracts.status import LinkStatus


class TcpState(enum.Enum):
    CONNECTED = "TCP_Connected"
    SILENT = "TCP_Silent"
    DISCONNECTED = "TCP_Disconnected"


class TcpEvent(enum.Enum):
    HANDSHAKE = "handshake completed"
    RECEIVE = "frame received"
    LIVENESS_TIMEOUT = "liveness timeout"
    SILENCE_TIMEOUT = "silence timeout"
    SOCKET_ERROR = "socket error"


class LogicalEvent(enum.Enum):
    TCP_CONNECTED = "TCP_Connected"
    TCP_SILENT = "TCP_Silent"
    TCP_DISCONNECTED = "TCP_Disconnected"
    SUSPECT_TIMEOUT = "suspect timeout"


T, E = TcpState, TcpEvent
TCP_TRANSITIONS: dict[tuple[TcpState, TcpEvent], TcpState] = {
    (T.DISCONNECTED, E.HANDSHAKE): T.CONNECTED,
    (T.CONNECTED, E.HANDSHAKE): T.CONNECTED,        # a new connection replaced the old one
    (T.CONNECTED, E.RECEIVE): T.CONNECTED,
    (T.CONNECTED, E.LIVENESS_TIMEOUT): T.SILENT,
    (T.CONNECTED, E.SOCKET_ERROR): T.DISCONNECTED,
    (T.SILENT, E.HANDSHAKE): T.CONNECTED,
    (T.SILENT, E.RECEIVE): T.CONNECTED,
    (T.SILENT, E.SILENCE_TIMEOUT): T.DISCONNECTED,
    (T.SILENT, E.SOCKET_ERROR): T.DISCONNECTED,
}

S, L = LinkStatus, LogicalEvent
LOGICAL_TRANSITIONS: dict[tuple[LinkStatus, LogicalEvent], LinkStatus] = {
    (S.DISCONNECTED, L.TCP_CONNECTED): S.CONNECTED,
    (S.DISCONNECTED, L.TCP_DISCONNECTED): S.DISCONNECTED,   # a silent socket closed after the suspect timeout
    (S.CONNECTED, L.TCP_CONNECTED): S.CONNECTED,
    (S.CONNECTED, L.TCP_SILENT): S.SUSPECTED,
    (S.CONNECTED, L.TCP_DISCONNECTED): S.SUSPECTED,
    (S.SUSPECTED, L.TCP_CONNECTED): S.CONNECTED,
    (S.SUSPECTED, L.TCP_DISCONNECTED): S.SUSPECTED,
    (S.SUSPECTED, L.SUSPECT_TIMEOUT): S.DISCONNECTED,
    # Relaying only: a peer that does not hear us is treated as silent while we still hear it.
    (S.SUSPECTED, L.TCP_SILENT): S.SUSPECTED,
    (S.DISCONNECTED, L.TCP_SILENT): S.DISCONNECTED,
}
TCP_TO_LOGICAL = {T.CONNECTED: L.TCP_CONNECTED, T.SILENT: L.TCP_SILENT,
                  T.DISCONNECTED: L.TCP_DISCONNECTED}


class IllegalTransition(Exception):
    """An event arrived that the state machine's table does not allow."""


def tcp_next(state: TcpState, event: TcpEvent) -> TcpState:
    try:
        return TCP_TRANSITIONS[(state, event)]
    except KeyError:
        raise IllegalTransition(f"TCP machine: no transition from {state.value} on {event.value}") from None


def logical_next(status: LinkStatus, event: LogicalEvent) -> LinkStatus:
    try:
        return LOGICAL_TRANSITIONS[(status, event)]
    except KeyError:
        raise IllegalTransition(
            f"logical machine: no transition from {status.value} on {event.value}") from None


# -- effects ---------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class StatusChange:
    status: LinkStatus


@dataclass(frozen=True, slots=True)
class TcpChange:
    state: TcpState


@dataclass(frozen=True, slots=True)
class SendHeartbeat:
    pass


@dataclass(frozen=True, slots=True)
class DialPeer:
    pass


@dataclass(frozen=True, slots=True)
class CloseSocket:
    reason: str


Effect = StatusChange | TcpChange | SendHeartbeat | DialPeer | CloseSocket


SLOW_LINK_BPS = 64_000
"""Below this rate a reconnection's handshakes are seconds of the link: the pair should make one at a time."""
RESUMED_HANDSHAKE_BYTES = 800
"""About what a resumed TLS 1.3 reconnection and both HELLOs put on the link (bench/cut_restore.py --hf)."""


def slow_link(rate_bps: int | None) -> bool:
    """Is a link paced at ``rate_bps`` (None: unpaced) slower than ``SLOW_LINK_BPS``? There the pair makes one
    handshake at a time (``dial_yield``), redials fast (``redial_period``) and a cut connection's TLS is continued
    rather than made again (``rcm.server.tlscontinue``)."""
    return rate_bps is not None and rate_bps < SLOW_LINK_BPS


SLOW_REDIAL_PERIOD = 1.0
"""Seconds between the dials of the site that dials first on a slow link, while the pair is apart."""


def dial_yield(site: str, peer: str, rate_bps: int | None) -> float:
    """Seconds ``site`` adds to its redial period towards ``peer`` (after a loss and between failed dials): on a
    paced link slower than ``SLOW_LINK_BPS``, the site whose name sorts after its peer's waits about one resumed
    handshake (plus a second of round trips) longer, so that the peer's dial, every ``reconnect_period``,
    usually comes first once the link is back and the pair does not make two handshakes at once on the radio
    (at 2.4 kbit/s they took 9.9 s together, against 3.7 s for one: docs/rcm.md). If the peer's dial does not
    come, this site still dials; a connection from the peer meanwhile makes its dial moot."""
    if not slow_link(rate_bps) or site < peer:
        return 0.0
    assert rate_bps is not None
    return RESUMED_HANDSHAKE_BYTES * 8 / rate_bps + 1.0


def holds_dial(site: str, peer: str, rate_bps: int | None, inbound_handshakes: int) -> bool:
    """Does ``site`` hold a due dial of ``peer`` (as if it had failed: the next one comes a redial period later)?
    Only the site that dials second on a slow link does (``dial_yield``), and only while a connection it
    accepted is still in its handshake (TLS or HELLO): that may be the peer's own dial, which makes this one
    moot, and two handshakes at once share the radio (a restore in four at 2.4 kbit/s made both before, 4.2 s
    and 1,448 bytes against 3.6 s and 761: ``bench/cut_restore.py --hf``). Whose connection it is shows only
    once its handshake is done, so a held dial may have waited for another peer's: it is a fallback, and comes
    one redial period later."""
    return inbound_handshakes > 0 and dial_yield(site, peer, rate_bps) > 0


def redial_period(site: str, peer: str, rate_bps: int | None, reconnect_period: float) -> float:
    """Seconds between ``site``'s dials of ``peer`` while it has no connection to it (after a loss and after a
    failed dial): ``reconnect_period``, except on a paced link slower than ``SLOW_LINK_BPS``, where the site
    whose name sorts first dials every ``SLOW_REDIAL_PERIOD`` (at most ``reconnect_period``) so that a restored
    link is noticed within a second, and the other one ``dial_yield`` later than ``reconnect_period``."""
    if not slow_link(rate_bps):
        return reconnect_period
    if site < peer:
        return min(reconnect_period, SLOW_REDIAL_PERIOD)
    return reconnect_period + dial_yield(site, peer, rate_bps)


class PeerConnection:
    """Both state machines and all five timers for one remote site."""

    def __init__(self, peer: str, settings: RcmSettings, now: float, dial: bool = True,
                 first_dial: float | None = None, initial: LinkStatus = LinkStatus.SUSPECTED,
                 redial: float | None = None) -> None:
        """``redial``: seconds between dials while the peer is apart (``redial_period``; None:
        ``settings.reconnect_period``)."""
        self.peer = peer
        self.redial = settings.reconnect_period if redial is None else redial
        self.settings = settings
        self.tcp = TcpState.DISCONNECTED
        # A site that starts (or restarts) gives every peer the suspect timeout
        # to connect, as for any outage: messages sent meanwhile are buffered,
        # not skipped, and a peer is disconnected only after suspect_timeout.
        self.status = initial
        self.dial = dial
        self.last_received = now
        self.last_sent = now
        self.silent_since: float | None = None
        self.suspected_since: float | None = now if initial is LinkStatus.SUSPECTED else None
        # First dial at once; then every ``redial`` seconds while disconnected.
        self.next_dial: float | None = (now if first_dial is None else first_dial) if dial else None
        self.dialing = False
        self.relayed = False          # a relay path reaches the peer (relay routing only)
        self.deaf = False             # the peer does not hear us on our direct link (relay routing only)
        self.dials_held = False       # the peer refused us as incompatible: wait until it dials

    # -- internal -------------------------------------------------------------
    def _tcp(self, event: TcpEvent, now: float, out: list[Effect]) -> None:
        new = tcp_next(self.tcp, event)
        if new is self.tcp:
            return
        self.tcp = new
        out.append(TcpChange(new))
        if new is TcpState.SILENT:
            self.silent_since = now
        else:
            self.silent_since = None
        if new is TcpState.DISCONNECTED and self.dial:
            self.dialing = False
            self.next_dial = now + self.redial
        elif new is not TcpState.DISCONNECTED:
            self.next_dial = None
        self._logical(self._logical_input(), now, out)

    def _logical_input(self) -> LogicalEvent:
        """What drives the logical machine: the direct link, or any path when relayed."""
        if self.relayed:
            return LogicalEvent.TCP_CONNECTED
        if self.deaf and self.tcp is TcpState.CONNECTED:
            return LogicalEvent.TCP_SILENT
        return TCP_TO_LOGICAL[self.tcp]

    def _logical(self, event: LogicalEvent, now: float, out: list[Effect]) -> None:
        new = logical_next(self.status, event)
        if new is self.status:
            return
        self.status = new
        out.append(StatusChange(new))
        self.suspected_since = now if new is LinkStatus.SUSPECTED else None

    # -- events ---------------------------------------------------------------
    def path_changed(self, relayed: bool, now: float, deaf: bool = False) -> list[Effect]:
        """A relay path to the peer appeared (True) or is gone (False); ``deaf``: it does not hear us."""
        if relayed == self.relayed and deaf == self.deaf:
            return []
        self.relayed, self.deaf = relayed, deaf
        out: list[Effect] = []
        self._logical(self._logical_input(), now, out)
        return out

    def hold_dials(self) -> None:
        """The peer is incompatible: do not dial it until it dials us."""
        self.dials_held = True
        self.dialing = False

    def handshake_completed(self, now: float) -> list[Effect]:
        out: list[Effect] = []
        self.dials_held = False
        self.dialing = False
        self.last_received = now
        self.last_sent = now
        self._tcp(TcpEvent.HANDSHAKE, now, out)
        return out

    def frame_received(self, now: float) -> list[Effect]:
        self.last_received = now
        if self.tcp is TcpState.SILENT:
            out: list[Effect] = []
            self._tcp(TcpEvent.RECEIVE, now, out)
            return out
        return []

    def frame_sent(self, now: float) -> None:
        self.last_sent = now

    def socket_error(self, now: float) -> list[Effect]:
        out: list[Effect] = []
        if self.tcp is not TcpState.DISCONNECTED:
            self._tcp(TcpEvent.SOCKET_ERROR, now, out)
        return out

    def dial_ended(self) -> None:
        """Our dial reached the peer but its connection was not kept (the pair keeps another one)."""
        self.dialing = False

    def dial_failed(self, now: float) -> None:
        self.dialing = False
        if self.tcp is TcpState.DISCONNECTED and self.dial:
            self.next_dial = now + self.redial

    def next_deadline(self) -> float | None:
        s = self.settings
        candidates: list[float] = []
        if self.tcp is TcpState.CONNECTED:
            candidates.append(self.last_received + s.liveness_timeout)
        elif self.tcp is TcpState.SILENT and self.silent_since is not None:
            candidates.append(self.silent_since + s.silence_timeout)
        if self.tcp is not TcpState.DISCONNECTED:
            candidates.append(self.last_sent + s.heartbeat_timeout)
        if self.status is LinkStatus.SUSPECTED and self.suspected_since is not None:
            candidates.append(self.suspected_since + s.suspect_timeout)
        if (self.tcp is TcpState.DISCONNECTED and self.next_dial is not None and not self.dialing
                and not self.dials_held):
            candidates.append(self.next_dial)
        return min(candidates) if candidates else None

    def tick(self, now: float) -> list[Effect]:
        """Fire every timer whose deadline is at or before ``now``."""
        s = self.settings
        out: list[Effect] = []
        if self.tcp is TcpState.CONNECTED and now >= self.last_received + s.liveness_timeout:
            self._tcp(TcpEvent.LIVENESS_TIMEOUT, now, out)
        if (self.tcp is TcpState.SILENT and self.silent_since is not None
                and now >= self.silent_since + s.silence_timeout):
            out.append(CloseSocket(f"silent for {s.silence_timeout:g} s"))
            self._tcp(TcpEvent.SILENCE_TIMEOUT, now, out)
        if (self.status is LinkStatus.SUSPECTED and self.suspected_since is not None
                and now >= self.suspected_since + s.suspect_timeout):
            self._logical(LogicalEvent.SUSPECT_TIMEOUT, now, out)
        if self.tcp is not TcpState.DISCONNECTED and now >= self.last_sent + s.heartbeat_timeout:
            out.append(SendHeartbeat())
            self.last_sent = now
        if (self.tcp is TcpState.DISCONNECTED and self.dial and not self.dialing and not self.dials_held
                and self.next_dial is not None and now >= self.next_dial):
            self.dialing = True
            self.next_dial = now + self.redial
            out.append(DialPeer())
        return out
