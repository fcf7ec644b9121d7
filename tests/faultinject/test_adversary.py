"""A hostile peer against a real site stack (faultinject.adversary): every frame kind, numbers at every bound.

Each kind's frames must close at most B's link, cost work linear in their size, never hang, leave memory
bounded, and leave the honest peer C served. ``bench/fuzz_bounds.py`` runs a million frames per kind; these
run a few hundred per kind, with fixed seeds, on every ``make test``.
"""
from __future__ import annotations

import pytest

from faultinject.adversary import probe
from faultinject.adversary.rcm_frames import KINDS


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_no_hostile_frame_hangs_kills_or_mutes_the_site(kind):
    frames = 120 if "MISSED" in kind else 400
    report = probe.run_kind(kind, frames, seed=sum(map(ord, kind)))
    summary = report.summary()
    assert report.violation_count == 0, summary["first_violations"]
    assert report.frames == frames and report.served >= 1
    if kind not in ("BYE", "UNKNOWN"):      # those close the link by definition
        assert report.closed < frames       # some frames got deep enough not to be refused outright


def test_the_probe_sees_work_that_a_number_drives(monkeypatch):
    """The probe must fail on the bug class it is for: a handler whose work a number in the frame drives."""
    from rcm.repair import antientropy as repair

    honest = repair.Repair.take

    def walks(self, peer, parsed, now):
        kind, body = parsed
        if kind == repair.wire.FETCH:
            for first, _last in body[1][:1]:
                for _ in range(min(first, 100_000)):
                    len(body)           # work a number inside the frame drives, as the old FETCH walk's did
        return honest(self, peer, parsed, now)

    monkeypatch.setattr(repair.Repair, "take", walks)
    report = probe.run_kind("FETCH", 300, seed=5)
    assert report.violation_count > 0 and "calls for a frame" in report.violations[0]
