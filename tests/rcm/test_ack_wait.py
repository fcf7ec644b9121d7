"""How long a received frame waits for something going back to carry its acknowledgement
(``rcm.channels.layer``, ``ack_wait``): ``ack_interval`` in a mission with a paced link, ``UNPACED_ACK_FACTOR``
times it where none is paced, on the virtual clock."""
from __future__ import annotations

import pytest
from rcm_harness import Net

from contracts.mission import RcmSettings
from rcm import wire
from rcm.channels.layer import UNPACED_ACK_FACTOR

SITES = ["A", "B", "C"]
SETTINGS = RcmSettings(heartbeat_timeout=1.0, liveness_timeout=5.0, ack_interval=0.2)


def routed_acks(net: Net, since: int) -> list[int]:
    """Indexes into ``net.written`` (from ``since``) of B's writes to C that carry a ROUTED ACK."""
    out = []
    for i, (src, dst, data) in enumerate(net.written[since:], since):
        frames = wire.FrameDecoder(1 << 20).feed(data)
        if (src, dst) == ("B", "C") and any(f[0] == wire.ROUTED and f[5] == wire.ACK for f in frames):
            out.append(i)
    return out


@pytest.mark.parametrize("paced", [False, True], ids=["unpaced", "paced"])
def test_a_relayed_frame_is_acknowledged_alone_after_the_wait_of_its_mission(paced: bool):
    """A-B cut, A's message reaches B through C. B's clock announcement to A cannot carry the
    acknowledgement (a relayed ANNOUNCE has no room for it), so a ROUTED ACK goes alone: after
    ``ack_interval`` where a link is paced (1 Mbit/s here: no lingering), after the longer wait where none is."""
    rates = {s: {p: 1_000_000 for p in SITES if p != s} for s in SITES} if paced else None
    net = Net(SITES, settings=SETTINGS, delay=0.01, rates=rates)
    wait = 0.2 if paced else min(UNPACED_ACK_FACTOR * 0.2, max(4 * 0.2, 2 * 1.0) / 2)
    assert {st.channels.ack_wait for st in net.stacks.values()} == {wait}
    net.run(until=5)
    net.set_link("A", "B", "down")
    net.run(until=net.now + 1)
    assert net.stacks["A"].vias()["B"] == "C"
    since = len(net.written)
    t0 = net.now
    net.send("A", b"relayed")
    frontier = net.stacks["B"].peers["A"].inb.frontier
    net.run(until=t0 + 0.05)                    # two hops of 10 ms: B holds it
    assert net.stacks["B"].peers["A"].inb.frontier == frontier + 1
    net.run(until=t0 + 0.02 + wait - 0.01)      # just before B's wait for a ride is up
    assert routed_acks(net, since) == []
    net.run(until=t0 + 0.02 + wait + 0.01)
    assert len(routed_acks(net, since)) == 1
    net.run(until=net.now + 0.1)
    assert net.stacks["A"].peers["B"].out.acked == net.stacks["A"].peers["B"].out.next_seq - 1


def test_the_wait_never_passes_half_the_relay_retransmission_timer():
    """A long ``ack_interval`` (4 s, heartbeats every 2 s; the relay's retransmission timer is then 16 s): the
    wait stops at half the timer (8 s, not 2.5 x 4 s), so an acknowledgement has the other half to come back
    before its origin resends what the peer holds."""
    net = Net(SITES, settings=RcmSettings(heartbeat_timeout=2.0, liveness_timeout=10.0, silence_timeout=20.0,
                                          ack_interval=4.0), delay=0.01)
    ch = net.stacks["A"].channels
    assert ch.ack_wait == ch.rto_base / 2 == 8.0
