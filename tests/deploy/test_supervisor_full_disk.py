"""The supervisor on a full disk: its servers keep running, their output keeps being read, the operator is told.

``/dev/full`` stands in for a full disk: every write to it fails with ENOSPC. Before, a log line that could not
be written ended the task that read the server's output, so the server blocked on its next line once the
pipe was full; and a status file that could not be written ended ``deploy up`` and ``deploy lab``, and with
them every site they ran.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from testkit import wait_until

from deploy.supervisor import Supervisor
from faultinject.missions import write_mission

# Stands in for both servers (the supervisor's ``wrap`` runs it with their command lines as arguments):
# 6,000 lines of 80 bytes (more than a pipe and the reader's buffer hold together), then a marker file;
# then, once the test says so, one more line.
SERVER = """
import pathlib, sys, time
role = "rcm" if "rcm" in sys.argv else "chat"
here = pathlib.Path(sys.argv[1])
for i in range(6000):
    print(f"{role} line {i:05d} " + "x" * 64, flush=True)
(here / f"{role}.printed").write_text("")
while not (here / "go").exists():
    time.sleep(0.02)
print(f"{role} after the disk has room again", flush=True)
(here / f"{role}.done").write_text("")
time.sleep(3600)
"""


def supervisor(tmp_path: Path, events: list[tuple[str, str, str]], lines: list[str]) -> Supervisor:
    mpath = write_mission(tmp_path / "mission.toml", "disk", ["A"])
    return Supervisor(mpath, wrap=lambda site: [sys.executable, "-c", SERVER, str(tmp_path)],
                      on_event=lambda s, r, w: events.append((s, r, w)), on_line=lambda s, r, t: lines.append(t),
                      grace=2.0)


async def test_a_log_that_cannot_be_written_costs_lines_never_the_server(tmp_path: Path) -> None:
    events: list[tuple[str, str, str]] = []
    lines: list[str] = []
    sup = supervisor(tmp_path, events, lines)
    logs = {role: sp.log_path for (_, role), sp in sup.procs.items()}
    for path in logs.values():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.symlink_to("/dev/full")
    await sup.start()
    try:
        await wait_until(lambda: all((tmp_path / f"{r}.printed").exists() for r in logs),
                         "both servers printed every line (the supervisor kept reading their pipes)", timeout=60)
        await wait_until(lambda: sum("line 05999" in t for t in lines) == 2, "every line reached the console")
        failed = [(r, w) for _, r, w in events if "cannot write its log" in w]
        assert sorted(r for r, _ in failed) == ["chat", "rcm"], events        # once each, not once a line
        assert all("No space left on device" in w for _, w in failed), failed

        for path in logs.values():                     # room again: the next line opens the file afresh
            path.unlink()
        (tmp_path / "go").write_text("")
        await wait_until(lambda: all((tmp_path / f"{r}.done").exists() for r in logs), "the last lines printed")
        await wait_until(lambda: sum("written again" in w for _, _, w in events) == 2, "recovery reported")
        for role, path in logs.items():
            assert path.read_text() == f"{role} after the disk has room again\n"
        assert all(sp.state == "running" and sp.restarts == 0 for sp in sup.procs.values())
    finally:
        await sup.stop()


async def test_a_status_file_that_cannot_be_written_is_reported_once_and_kept(tmp_path: Path) -> None:
    events: list[tuple[str, str, str]] = []
    sup = supervisor(tmp_path, events, [])
    status = sup.mission.site_dir("A") / "logs" / "supervisor.json"
    assert sup.write_status() == []
    before = json.loads(status.read_text())

    tmp = status.with_suffix(".tmp")
    tmp.symlink_to("/dev/full")
    assert sup.write_status() == ["A"]
    assert not tmp.exists()                     # a failed write leaves nothing behind
    tmp.symlink_to("/dev/full")
    assert sup.write_status() == ["A"]
    assert [(r, "cannot write" in w and "No space left on device" in w) for _, r, w in events] == [("status", True)]
    assert json.loads(status.read_text()) == before                     # the last one written stays

    assert sup.write_status() == []            # room again (the failed write took its link away)
    assert [r for _, r, _ in events] == ["status", "status"] and "written again" in events[-1][2]
    assert json.loads(status.read_text())["updated"] >= before["updated"]
