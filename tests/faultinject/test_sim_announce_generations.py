"""Clock announcements after many path changes of a site's other channels (found by bench/scaling.py).

A site's announcement generation (docs/relay.md: it moves on at every path change, and a receiver drops an
announcement whose generation is not newer than the last it took, modulo 128) is one counter for the whole
site (``rcm.channels.layer.Channels.announce_gen``), moved by a path change of *any* peer's channel. A peer
that hears no announcement while the sender's other channels change path 64 times or more then sees the next
one as older than the last it took, and drops it; Lamport (and hybrid) delivery waited on it. Here B's link to
C flaps 40 times while nobody speaks (80 path changes of B's channel to C), then C sends one message: A and
D take B's announcement as stale and hold C's message to the end of the run. In bench/scaling.py the same
happens at start-up past about 40 sites (every site's channels to far sites switch to relay paths): at 64
sites Lamport delivered 60% of the messages, with a p50 of 20 s. Each peer channel now has its own generation
(``Channels.announce_gens``), which moves only when that channel changes path or connection.
"""
from __future__ import annotations

from functools import partial

from faultinject.sim import SimConfig, Simulation
from faultinject.sim.topology import periodic_flaps


def test_an_announcement_is_taken_after_the_senders_other_channels_changed_path_many_times():
    cfg = SimConfig(sites=4, chaos=150.0, heal=20.0, quiet=1.0, rate=1e-9, faults=0,
                    episodes=periodic_flaps([("B", "C")], up=2.0, down=1.5, until=140.0, seed=1), check=False)
    sim = Simulation(3, cfg)
    sim.loop.at(150.0, partial(sim._send, "C", None, b"after the flaps"))
    records = sim.run().records
    assert [r["msg_id"] for r in records if r["kind"] == "send"] == ["C:1"]
    delivered = {r["site"]: r["at"] - 150.0 for r in records if r["kind"] == "deliver"}
    assert set(delivered) == {"A", "B", "C", "D"}, f"delivered only at {sorted(delivered)}"
    assert max(delivered.values()) < 2.0
