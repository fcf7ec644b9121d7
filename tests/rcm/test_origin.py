"""The origin of a delivery is the connection's peer (a DATA frame has no origin field) or, for a local
client's send, this site: never something a sender chose (sans-IO; a process on the local socket, with real
processes: test_rcm_clients.py)."""
from __future__ import annotations

import inspect

from rcm_harness import Net
from test_stack_bounds import SITES, site_a

from contracts.mission import RcmSettings
from rcm import wire
from rcm.actions import Delivery
from rcm.stack import SiteStack


def test_a_data_frame_is_delivered_as_the_connections_peer_whatever_it_carries():
    """DATA has no origin field: B's messages are delivered as B's everywhere, and frames on B's connection
    with extra elements naming C either close that link or come out as B's, never as C's."""
    net = Net(SITES, RcmSettings(heartbeat_timeout=0.5, liveness_timeout=1.5, suspect_timeout=5.0,
                                 reconnect_period=1.0, ack_interval=0.2), delay=0.01)
    net.run(3.0)
    net.send("B", b"from B")
    net.run(5.0)
    for site in ("A", "C"):
        got = [(d.origin, d.payload) for d in net.logs[site].delivered]
        assert got == [("B", b"from B")], (site, got)
    s = site_a()
    acts = []
    for frame in ([wire.DATA, 1, 1, 5, b"claims C", 0, "C", "C:1"], [wire.DATA, 1, 1, 5, b"claims C", None, ["C"]],
                  [wire.DATA, 1, 1, [5, "C"], b"claims C"]):
        acts += s.data_received("b", wire.encode_frame(frame), 0.5)
        if "b" not in s.conns:                      # refused: B's link closed, as a violation should
            break
    assert all(d.origin == "B" for d in acts if isinstance(d, Delivery)), acts
    assert s.status("C") == "connected" and "c" in s.conns


def test_a_local_client_cannot_choose_the_origin_of_its_send():
    """The local API's send has no origin: the stack stamps its own site on every message it sends."""
    from rcm.wire import local as clientwire
    assert "origin" not in inspect.signature(SiteStack.send).parameters
    s = site_a()
    result, acts = s.send(b"x", None, 1.0)
    assert result.msg_id.startswith("A:")
    for frame in (["send", 1, b"x", None, "B"], ["send", 1, b"x", None, {"origin": "B"}]):
        try:
            req = clientwire.decode_request(frame)
        except (ValueError, TypeError):
            continue                                    # refused: as good
        assert "B" not in repr(req).replace("b'x'", ""), req
