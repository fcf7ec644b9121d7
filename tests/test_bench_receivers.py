"""The fan-out benchmarks' receiving processes (bench/_common.py): started with glibc's allocator set
(``RECEIVERS_MALLOC``) so that a read costs every system's receivers the same, without the setting leaking into
the parent's environment (the servers it starts later); their CPU read together from /proc (bench/_profile.py)."""
from __future__ import annotations

import contextlib
import multiprocessing as mp
import os

import pytest

from bench import _profile
from bench._common import RECEIVERS_MALLOC, receivers_malloc


def _tunables(conn) -> None:                  # runs in a spawned child
    conn.send(os.environ.get("GLIBC_TUNABLES"))


def test_a_receiver_started_inside_gets_the_setting_and_the_parent_is_left_as_it_was(monkeypatch) -> None:
    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    with receivers_malloc():
        p = ctx.Process(target=_tunables, args=(child,))
        p.start()
    assert parent.recv() == RECEIVERS_MALLOC
    p.join(30)
    assert "GLIBC_TUNABLES" not in os.environ


@pytest.mark.parametrize("fail", [False, True])
def test_a_setting_of_the_parents_own_is_kept_beside_it_and_restored(monkeypatch, fail: bool) -> None:
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.arena_max=2")
    with pytest.raises(RuntimeError) if fail else contextlib.nullcontext():
        with receivers_malloc():
            assert os.environ["GLIBC_TUNABLES"] == "glibc.malloc.arena_max=2:" + RECEIVERS_MALLOC
            if fail:
                raise RuntimeError("a worker failed to start")
    assert os.environ["GLIBC_TUNABLES"] == "glibc.malloc.arena_max=2"


def test_the_receivers_cpu_is_the_sum_of_each_process_and_a_process_gone_counts_nothing() -> None:
    gone = mp.get_context("spawn").Process(target=os.getpid)
    gone.start()
    gone.join(30)
    assert gone.pid is not None and _profile.cpu_split_sum([gone.pid]) == (0.0, 0.0)
    before = _profile.cpu_split(os.getpid())
    user, system = _profile.cpu_split_sum([os.getpid(), gone.pid, os.getpid()])
    after = _profile.cpu_split(os.getpid())
    assert before is not None and after is not None
    assert 2 * before[0] <= user <= 2 * after[0] and 2 * before[1] <= system <= 2 * after[1]
