"""Connection manager: every transition of both tables, at exact timeout boundaries."""
from __future__ import annotations

import pytest

from contracts.mission import RcmSettings
from contracts.status import LinkStatus
from rcm.connman import (
    LOGICAL_TRANSITIONS,
    SLOW_REDIAL_PERIOD,
    TCP_TRANSITIONS,
    CloseSocket,
    DialPeer,
    IllegalTransition,
    LogicalEvent,
    PeerConnection,
    SendHeartbeat,
    StatusChange,
    TcpEvent,
    TcpState,
    dial_yield,
    holds_dial,
    logical_next,
    redial_period,
    tcp_next,
)

S = RcmSettings(heartbeat_timeout=1.0, liveness_timeout=5.0, silence_timeout=10.0,
                suspect_timeout=60.0, reconnect_period=3.0)


def connected(now=0.0) -> PeerConnection:
    pc = PeerConnection("B", S, now)
    pc.handshake_completed(now)
    return pc


def statuses(effects):
    return [e.status for e in effects if isinstance(e, StatusChange)]


def test_starts_suspected_and_disconnects_if_the_peer_never_comes():
    pc = PeerConnection("B", S, 10.0)
    assert pc.status is LinkStatus.SUSPECTED and pc.tcp is TcpState.DISCONNECTED
    pc.dialing = True
    assert statuses(pc.tick(69.9999)) == []
    assert statuses(pc.tick(70.0)) == [LinkStatus.DISCONNECTED]


def test_first_dial_at_once_then_every_reconnect_period():
    pc = PeerConnection("B", S, 10.0)
    assert pc.next_deadline() == 10.0
    assert DialPeer() in pc.tick(10.0)
    assert pc.next_deadline() == 70.0          # a dial is in flight: only the suspect timer
    pc.dial_failed(10.5)
    assert pc.next_deadline() == 13.5
    assert pc.tick(13.4999) == []
    assert DialPeer() in pc.tick(13.5)


def test_on_a_slow_link_the_later_site_holds_a_dial_while_an_accepted_connection_is_in_its_handshake():
    assert holds_dial("B", "A", 2400, 1)                  # perhaps A's own dial: B's would make a second handshake
    assert not holds_dial("B", "A", 2400, 0)              # nothing coming in: the fallback dial goes
    assert not holds_dial("A", "B", 2400, 3)              # the site that dials first never holds
    assert not holds_dial("B", "A", None, 1) and not holds_dial("B", "A", 64_000, 1)   # fast links: as ever


def test_on_a_slow_link_the_later_site_redials_less_often_than_its_peer():
    assert dial_yield("A", "B", 2400) == 0.0                       # A sorts first: it dials as ever
    assert dial_yield("B", "A", 2400) == pytest.approx(800 * 8 / 2400 + 1.0)
    assert dial_yield("B", "A", None) == 0.0 and dial_yield("B", "A", 64_000) == 0.0
    pc = PeerConnection("A", S, 0.0, redial=6.0)
    pc.handshake_completed(0.0)
    pc.socket_error(20.0)
    assert pc.next_deadline() == 26.0                  # the redial period after the loss
    assert DialPeer() not in pc.tick(25.99)
    assert DialPeer() in pc.tick(26.0)
    pc.dial_failed(26.5)
    assert pc.next_deadline() == 32.5                  # and between failed dials


def test_on_a_slow_link_the_first_site_redials_every_second_and_its_peer_a_handshake_later():
    assert redial_period("A", "B", 2400, 3.0) == SLOW_REDIAL_PERIOD == 1.0
    assert redial_period("B", "A", 2400, 3.0) == pytest.approx(3.0 + dial_yield("B", "A", 2400))
    assert redial_period("A", "B", 2400, 0.5) == 0.5           # never slower than reconnect_period
    # Links at 64 kbit/s and faster, or not paced: reconnect_period for both, as before.
    for rate in (None, 64_000, 10**9):
        assert redial_period("A", "B", rate, 3.0) == redial_period("B", "A", rate, 3.0) == 3.0
    pc = PeerConnection("B", S, 0.0, redial=redial_period("A", "B", 2400, S.reconnect_period))
    pc.handshake_completed(0.0)
    pc.socket_error(20.0)
    assert pc.next_deadline() == 21.0
    assert DialPeer() in pc.tick(21.0)
    pc.dial_failed(21.0)                               # the link is still down: the SYN was refused
    assert pc.next_deadline() == 22.0


def test_handshake_connects():
    pc = PeerConnection("B", S, 0.0)
    eff = pc.handshake_completed(1.0)
    assert pc.tcp is TcpState.CONNECTED and statuses(eff) == [LinkStatus.CONNECTED]


def test_liveness_boundary_connected_to_silent_is_suspected():
    pc = connected(0.0)
    pc.frame_received(2.0)
    assert statuses(pc.tick(6.9999)) == []
    assert pc.tcp is TcpState.CONNECTED
    eff = pc.tick(7.0)
    assert pc.tcp is TcpState.SILENT and statuses(eff) == [LinkStatus.SUSPECTED]


def test_silent_back_to_connected_on_a_frame():
    pc = connected(0.0)
    pc.tick(5.0)
    eff = pc.frame_received(6.0)
    assert pc.tcp is TcpState.CONNECTED and statuses(eff) == [LinkStatus.CONNECTED]


def test_silence_boundary_closes_the_socket_and_redials():
    pc = connected(0.0)
    pc.tick(5.0)                                  # silent since 5
    assert not any(isinstance(e, CloseSocket) for e in pc.tick(14.9999))
    eff = pc.tick(15.0)
    assert any(isinstance(e, CloseSocket) for e in eff)
    assert pc.tcp is TcpState.DISCONNECTED and pc.status is LinkStatus.SUSPECTED
    assert pc.next_deadline() == 18.0             # reconnect period from the close
    assert DialPeer() in pc.tick(18.0)


def test_socket_error_from_connected_and_from_silent():
    pc = connected(0.0)
    eff = pc.socket_error(1.0)
    assert pc.tcp is TcpState.DISCONNECTED and statuses(eff) == [LinkStatus.SUSPECTED]
    pc2 = connected(0.0)
    pc2.tick(5.0)
    eff = pc2.socket_error(6.0)
    assert pc2.tcp is TcpState.DISCONNECTED and statuses(eff) == []   # already suspected


def test_suspect_boundary_disconnects():
    pc = connected(0.0)
    pc.socket_error(1.0)
    pc.dialing = True                      # keep the redial out of the way
    assert statuses(pc.tick(60.9999)) == []
    assert statuses(pc.tick(61.0)) == [LinkStatus.DISCONNECTED]


def test_suspected_back_to_connected_resets_suspect_timer():
    pc = connected(0.0)
    pc.socket_error(1.0)
    pc.handshake_completed(30.0)
    assert pc.status is LinkStatus.CONNECTED
    pc.socket_error(40.0)
    assert statuses(pc.tick(99.9999)) == []
    assert statuses(pc.tick(100.0)) == [LinkStatus.DISCONNECTED]


def test_disconnected_reconnects_to_connected():
    pc = connected(0.0)
    pc.socket_error(1.0)
    pc.dialing = True
    pc.tick(61.0)
    eff = pc.handshake_completed(70.0)
    assert statuses(eff) == [LinkStatus.CONNECTED]


def test_silent_past_suspect_timeout_then_socket_closes():
    s = RcmSettings(liveness_timeout=5.0, silence_timeout=100.0, suspect_timeout=20.0)
    pc = PeerConnection("B", s, 0.0)
    pc.handshake_completed(0.0)
    pc.tick(5.0)
    assert statuses(pc.tick(25.0)) == [LinkStatus.DISCONNECTED]
    eff = pc.tick(105.0)
    assert any(isinstance(e, CloseSocket) for e in eff) and pc.status is LinkStatus.DISCONNECTED


def test_heartbeat_boundary():
    pc = connected(0.0)
    pc.frame_sent(2.0)
    assert SendHeartbeat() not in pc.tick(2.9999)
    assert SendHeartbeat() in pc.tick(3.0)
    assert pc.next_deadline() == 4.0


def test_every_table_entry_is_reachable_and_illegal_ones_raise():
    for (state, event), new in TCP_TRANSITIONS.items():
        assert tcp_next(state, event) is new
    for (status, event), new in LOGICAL_TRANSITIONS.items():
        assert logical_next(status, event) is new
    with pytest.raises(IllegalTransition, match="TCP_Disconnected on frame received"):
        tcp_next(TcpState.DISCONNECTED, TcpEvent.RECEIVE)
    with pytest.raises(IllegalTransition):
        logical_next(LinkStatus.CONNECTED, LogicalEvent.SUSPECT_TIMEOUT)
    with pytest.raises(IllegalTransition):
        logical_next(LinkStatus.DISCONNECTED, LogicalEvent.SUSPECT_TIMEOUT)


def test_relay_path_keeps_a_peer_connected_and_suspicion_means_no_path():
    """Relaying: the logical machine follows the path; the TCP machine still the direct link."""
    pc = PeerConnection("B", S, now=0.0)
    pc.handshake_completed(1.0)
    assert pc.path_changed(True, 1.0) == []             # connected either way: nothing to say
    pc.socket_error(2.0)                                 # the direct link breaks, a relay carries on
    assert pc.tcp is TcpState.DISCONNECTED and pc.status is LinkStatus.CONNECTED
    assert pc.path_changed(False, 3.0) == [StatusChange(LinkStatus.SUSPECTED)]   # no path left
    assert statuses(pc.tick(3.0 + S.suspect_timeout)) == [LinkStatus.DISCONNECTED]
    assert pc.path_changed(True, 70.0) == [StatusChange(LinkStatus.CONNECTED)]


def test_a_peer_that_does_not_hear_us_counts_as_silent():
    pc = PeerConnection("B", S, now=0.0)
    pc.handshake_completed(1.0)
    assert pc.path_changed(False, 2.0, deaf=True) == [StatusChange(LinkStatus.SUSPECTED)]
    assert pc.tcp is TcpState.CONNECTED                  # we still hear it
    assert pc.path_changed(True, 2.5, deaf=True) == [StatusChange(LinkStatus.CONNECTED)]   # a relay path


def test_held_dials_wait_for_the_peer():
    pc = PeerConnection("B", S, now=0.0)
    assert any(isinstance(e, DialPeer) for e in pc.tick(0.0))
    pc.dial_failed(0.5)
    pc.hold_dials()
    assert pc.next_deadline() != pc.next_dial
    assert not any(isinstance(e, DialPeer) for t in range(1, 100) for e in pc.tick(float(t)))
    pc.handshake_completed(100.0)                        # the peer dialed us
    assert not pc.dials_held


def test_peer_connection_keeps_no_growing_history():
    """A link that flaps for ever must not grow the connection manager (it kept every transition)."""
    pc = connected()
    now = 0.0
    for _ in range(1000):
        now += 1.0
        pc.socket_error(now)
        pc.handshake_completed(now + 0.5)
    growing = {name: len(v) for name in pc.__dict__ for v in [getattr(pc, name)]
               if isinstance(v, (list, dict, set)) and len(v) > 10}
    assert not growing, growing
