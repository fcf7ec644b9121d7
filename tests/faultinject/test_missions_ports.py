"""``free_ports``: ports for local missions that no outgoing connection, and no other process choosing ports
at the same time, can take first."""
from __future__ import annotations

import socket

from faultinject import missions as local
from faultinject.missions import free_ports


def test_ports_are_distinct_bindable_and_below_the_ephemeral_range() -> None:
    lo, _ = local._ephemeral_range()
    first, second = free_ports(40), free_ports(40)
    ports = first + second
    assert len(set(ports)) == 80, "one process never hands out a port twice"
    assert all(local._POOL_LOW <= p < lo for p in ports)
    for p in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", p))


def test_a_port_in_use_is_skipped() -> None:
    probe = free_ports(1)[0]
    with socket.socket() as taken:
        # The next port the cursor offers, taken by somebody else meanwhile.
        taken.bind(("127.0.0.1", probe + 1))
        taken.listen()
        ports = free_ports(3)
    assert probe + 1 not in ports
    assert len(set(ports)) == 3 and probe not in ports


def test_workers_hand_out_ports_from_their_own_slices() -> None:
    lo, _ = local._ephemeral_range()
    size = lo - local._POOL_LOW
    before = local._cursor
    try:
        local.port_slice(0, 2)
        a = free_ports(5)
        local.port_slice(1, 2)
        b = free_ports(5)
        assert all(p < local._POOL_LOW + size // 2 for p in a)
        assert all(p >= local._POOL_LOW + size // 2 for p in b)
    finally:
        local._cursor = before      # this worker goes on in its own slice


def test_a_port_another_process_was_given_is_not_handed_out_again_until_its_claim_is_old(monkeypatch, tmp_path) -> None:
    """Two processes whose cursors meet (here: this one's cursor put back) never get the same port while the
    first may not have bound it yet; a claim older than ``RESERVE_SECONDS`` is taken over."""
    monkeypatch.setattr(local, "_RESERVED", tmp_path / "claims")
    before = local._cursor
    try:
        first = free_ports(5)
        local._cursor = before
        second = free_ports(5)
        assert not set(first) & set(second)
        old = local.time.time() - local.RESERVE_SECONDS - 1
        for p in first:
            local.os.utime(tmp_path / "claims" / str(p), (old, old))
        local._cursor = before
        assert free_ports(5) == first
    finally:
        local._cursor = before
