"""How a closed connection is logged: routine closes (a peer stopping, the tie-break of two connections made at
once) at INFO, the others at WARNING, where an operator looks for trouble."""
from __future__ import annotations

import pytest

from contracts.mission import RcmSettings
from rcm import wire
from rcm.actions import Log, Transmit
from rcm.stack import SiteStack

SITES = ["A", "B"]


def sent(acts, conn) -> bytes:
    return b"".join(a.data for a in acts if isinstance(a, Transmit) and a.conn == conn)


def closing_logs(acts) -> list[tuple[str, str]]:
    return [(a.level, a.message) for a in acts if isinstance(a, Log) and a.message.startswith("closing connection")]


def connected_pair() -> tuple[SiteStack, SiteStack]:
    """A dialed B (connection "ab" at A, "ba" at B) and both see the other connected."""
    a = SiteStack("A", SITES, RcmSettings(), 1, 0.0, mission="m")
    b = SiteStack("B", SITES, RcmSettings(), 1, 0.0, mission="m")
    a.start(0.0)
    b.start(0.0)
    b.connection_made("ba", 1.0)
    to_b = sent(a.connection_made("ab", 1.0, "B"), "ab")
    to_a = sent(b.data_received("ba", to_b, 1.0), "ba")
    a.data_received("ab", to_a, 1.0)
    assert a.status("B") == "connected" and b.status("A") == "connected"
    return a, b


def test_the_connection_a_peer_drops_as_a_duplicate_is_logged_at_info() -> None:
    a, b = connected_pair()
    # B dials A again while their connection is up: A keeps the one it dialed and says so in a BYE.
    a.connection_made("a-acc", 2.0)
    hello = sent(b.connection_made("b-dial", 2.0, "A"), "b-dial")
    bye = sent(a.data_received("a-acc", hello, 2.0), "a-acc")
    assert wire.BYE_DUPLICATE.encode() in bye
    logs = closing_logs(b.data_received("b-dial", bye, 2.1))
    assert logs == [("info", f"closing connection: A refused the connection: {wire.BYE_DUPLICATE}")]
    assert b.status("A") == "connected"


@pytest.mark.parametrize("reason", sorted(wire.ROUTINE_BYES))
def test_a_peer_stopping_or_replacing_the_connection_is_logged_at_info_and_any_other_close_at_warning(
        reason: str) -> None:
    a, b = connected_pair()
    logs = closing_logs(b.data_received("ba", wire.encode_frame([wire.BYE, reason]), 3.0))
    assert logs == [("info", f"closing connection: A closed the connection: {reason}")]
    a, b = connected_pair()
    logs = closing_logs(b.data_received("ba", wire.encode_frame([wire.BYE, "silent for 2 s"]), 3.0))
    assert logs == [("warning", "closing connection: A closed the connection: silent for 2 s")]
