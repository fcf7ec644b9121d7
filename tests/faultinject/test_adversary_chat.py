"""A hostile user and a hostile peer site against a real chat server (faultinject.adversary.chat_probe): every
client frame, every payload a peer chat server sends through RCM, every RCM event a peer can cause.

Each kind's inputs must get an error or be ignored, nothing worse; cost work linear in their size (Python calls,
SQLite pages, journal bytes) and a search no more than its budget; never hang; leave memory bounded; and leave
the honest user alice served. ``bench/fuzz_bounds.py`` runs a million inputs per kind; these run a few hundred
per kind, with fixed seeds, on every ``make test``.
"""
from __future__ import annotations

import pytest

from faultinject.adversary import chat_probe
from faultinject.adversary.chat_requests import KINDS

FEWER = {"rcm/missing": 100, "peer/roster": 100, "logout": 100}   # the costlier kinds
REFUSED_BY_DESIGN = {"unknown", "position", "positions", "peer/unknown"}    # (this server has no positions yet)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_no_hostile_input_escapes_hangs_or_mutes_the_chat_server(kind):
    inputs = FEWER.get(kind, 150)
    report = chat_probe.run_kind(kind, inputs, seed=sum(map(ord, kind)))
    summary = report.summary()
    assert report.violation_count == 0, summary["first_violations"]
    assert report.inputs == inputs and report.served >= 1
    if kind not in REFUSED_BY_DESIGN:
        assert report.refused < inputs          # some inputs got deep enough not to be refused outright


def test_the_probe_sees_work_that_a_number_drives(monkeypatch):
    """The probe must fail on the bug class it is for: a handler whose work a number in the request drives."""
    from chat_server.history import History

    honest = History.page

    def walks(self, room, limit, before=None, after_n=None, around=None, may_read=None):
        for _ in range(min(after_n or 0, 100_000)):
            len(room)               # one call per number asked for, as a walk over delivery numbers would
        return honest(self, room, limit, before, after_n, around, may_read)

    monkeypatch.setattr(History, "page", walks)
    report = chat_probe.run_kind("history", 150, seed=5)
    assert report.violation_count > 0 and "calls for an input" in report.violations[0], report.violations


def test_the_probe_sees_sqlite_work_that_a_number_drives(monkeypatch):
    """... and one whose work inside SQLite a number drives (no Python call per row: pages)."""
    from chat_server.store import ChatStore

    honest = ChatStore.history

    def scans(self, room, limit, before=None, after=None):
        for _ in range(limit):      # a full scan of the history per message asked for
            self.db.execute("SELECT count(*) FROM messages WHERE text LIKE '%zz%'").fetchone()
        return honest(self, room, limit, before, after)

    monkeypatch.setattr(ChatStore, "history", scans)
    report = chat_probe.run_kind("history", 150, seed=5)
    assert report.violation_count > 0 and "SQLite pages" in report.violations[0], report.violations


def test_the_probe_interrupts_an_input_that_hangs_and_goes_on_with_a_fresh_site(monkeypatch):
    from chat_server.losses import Losses

    def forever(self, origin, ranges):
        while True:
            pass

    monkeypatch.setattr(Losses, "reported", forever)
    report = chat_probe.run_kind("rcm/missing", 2, seed=3, watchdog=0.3)
    assert report.violation_count == 2 and all(v.startswith("Hang") for v in report.violations), report.violations
