"""Expiring messages in the simulator (rcm.wire.envelope): every checker passes with stubs among the deliveries
(a stub is neither lost nor a duplicate), content never arrives after the expiry (checkers.expiry), and the
expiry checker catches a site that shows content after it."""
from __future__ import annotations

import pytest

from contracts import journal as J
from faultinject.checkers import check_expiry
from faultinject.sim import SimConfig, simulate


def _config(protocol: str, **kw) -> SimConfig:
    # Short lives on slow links with faults: many messages expire in lanes, buffers, relays and repair.
    return SimConfig(protocol=protocol, expiry_share=0.4, expiry_ttl=(0.3, 6.0), link_rate=9_600,
                     repair_faults=1, **kw)


@pytest.mark.parametrize("protocol", ["lamport", "sequencer", "hybrid"])
def test_expiring_messages_keep_every_property_and_expire_as_stubs(protocol):
    failures, stubs, expiring = [], 0, 0
    for seed in range(3):
        r = simulate(seed, _config(protocol, durable=seed == 1))
        if r.violations:
            failures.append(f"seed {seed}: {r.violations[0]}")
        stubs += sum(1 for rec in r.records if rec["kind"] == J.EXPIRED)
        expiring += sum(1 for rec in r.records if rec["kind"] == J.SEND and "expires_at" in rec)
    assert not failures, "\n".join(failures)
    assert expiring > 50 and stubs > 0          # the mix really expires messages on their way


def test_the_expiry_checker_catches_content_after_the_expiry_and_a_stub_before_it():
    send = J.record(J.SEND, site="A", at=1.0, msg_id="A:1", origin="A", seq=1, sent_at=1.0, order=[1, "A"],
                    expires_at=5.0)
    late = J.record(J.DELIVER, site="B", n=1, at=7.0, msg_id="A:1", origin="A", seq=1, order=[1, "A"], late=False)
    early = J.record(J.EXPIRED, site="C", at=2.0, msg_id="A:1", origin="A", seq=1)
    assert [v.site for v in check_expiry([send, late, early], skew=0.1)] == ["B", "C"]
    stub = J.record(J.EXPIRED, site="B", at=7.0, msg_id="A:1", origin="A", seq=1)
    assert check_expiry([send, late, stub], skew=0.1) == []
