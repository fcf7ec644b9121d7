"""The CLI against a real Spark standalone cluster (one master, one worker) on loopback."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pyspark
import pytest

from faultinject.missions import free_ports
from spark_archive.generate import Extensions, generate
from spark_archive.journals import list_journal_files
from spark_archive.local_tracks import track_rows
from spark_archive.reference import TRANSCRIPT_COLUMNS, canonical_rows, read_journals, reference_transcript
from spark_archive.tracks import write_tracks_csv

SPARK_HOME = Path(pyspark.__file__).parent


def spark_class(cls: str, *args: str, log: Path) -> subprocess.Popen:
    env = {**os.environ, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1",
           "SPARK_LOG_DIR": str(log.parent)}
    # Own session: the JVM and the executors it forks can be stopped as one group.
    with open(log, "wb") as sink:
        return subprocess.Popen([str(SPARK_HOME / "bin" / "spark-class"), cls, *args], env=env,
                                stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=15)


def wait_for_worker(ui_port: int, deadline: float, procs: list[subprocess.Popen]) -> None:
    while time.monotonic() < deadline:
        assert all(p.poll() is None for p in procs), "master or worker exited early"
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=2) as resp:
                if json.load(resp).get("aliveworkers", 0) >= 1:
                    return
        except (OSError, ValueError):       # not up yet, or a page before the JSON handler is (a busy machine)
            pass
        time.sleep(0.5)
    raise AssertionError("the standalone worker did not register in time")


def readable_transcript(out: Path) -> list[tuple]:
    """The job's JSON Lines transcript (one directory per room), in global order."""
    rows = []
    for path in sorted(out.glob("transcript_json/room=*/*.json")):
        room = path.parent.name.split("=", 1)[1]
        for text in path.read_text().splitlines():
            r = json.loads(text)
            r["room"] = room
            r["order_key"] = None  # not in the readable copy
            r["deliveries"] = [(d["site"], d["n"], d["at"], d["late"], d["repaired"], d["hops"])
                               for d in r["deliveries"]]
            rows.append(tuple(r.get(c) for c in TRANSCRIPT_COLUMNS))
    return canonical_rows(sorted(rows))


# Four JVMs (master, worker, driver, executor) start here; allow for a busy 2-core machine.
@pytest.mark.slow
@pytest.mark.timeout(330)
def test_cli_on_standalone_cluster(tmp_path: Path) -> None:
    journals = tmp_path / "journals"
    info = generate(journals, sites=4, messages=80, seed=21, duration=600.0,
                    extensions=Extensions(positions=1, labels=True))
    master_port, master_ui, worker_port, worker_ui = free_ports(4)
    master = spark_class("org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                         "--port", str(master_port), "--webui-port", str(master_ui),
                         log=tmp_path / "master.log")
    procs = [master]
    try:
        worker = spark_class("org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                             "--port", str(worker_port), "--webui-port", str(worker_ui),
                             "--cores", "1", "--memory", "1g", "--work-dir", str(tmp_path / "work"),
                             f"spark://127.0.0.1:{master_port}", log=tmp_path / "worker.log")
        procs.append(worker)
        wait_for_worker(master_ui, time.monotonic() + 60, procs)
        out = tmp_path / "out"
        done = subprocess.run(
            [sys.executable, "-m", "spark_archive", "--journals", str(journals), "--out", str(out),
             "--master", f"spark://127.0.0.1:{master_port}", "--conf", "spark.executor.memory=512m",
             "--conf", "spark.cores.max=1", "--quiet"],
            capture_output=True, text=True, timeout=240)
        assert done.returncode == 0, done.stderr[-3000:]
        assert "report:" in done.stdout and "  leaks: 0 (" in done.stdout
    finally:
        for proc in reversed(procs):
            stop(proc)
    ref = reference_transcript(list_journal_files(journals))
    summary = json.loads((out / "summary.json").read_text())
    assert summary["messages"] == len(ref.rows)
    assert summary["bad_lines"] == ref.bad_lines
    # The answers the generator knows (test_archive_cli's local run checks the rest against the reference).
    # A torn delivery line (the generator tears a few) is a delivery the archive cannot see: that message is
    # then missing at that site, so only the sum of the two is the generator's.
    assert (summary["messages"], summary["late_deliveries"], summary["bad_lines"], summary["redeliveries"],
            summary["sites"]) == (info["messages"], info["late"], info["torn_lines"], info["redeliveries"],
                                  info["sites"])
    assert summary["deliveries"] + summary["never_arrived"] == info["deliveries"] + info["lost"] + info["withheld"]
    # A labeled mission: no leak, and every message under the label the generator gave it.
    assert summary["leaks"] == 0 and "Leak check: 0 leaks" in (out / "report.html").read_text()
    assert summary["withheld"] == info["withheld"] > 0
    assert {k: v["messages"] for k, v in summary["labels"].items()} == \
        {k: v["messages"] for k, v in info["labels"].items()}
    assert sum(v["deliveries"] for v in summary["labels"].values()) == summary["deliveries"]
    assert summary["late_unexplained"] == summary["late_unflagged"] == 0
    assert {p.parent.name for p in (out / "transcript_json").glob("room=*/*.json")} == \
        {f"room={r}" for r in summary["rooms"]}
    assert "data:image/png;base64," in (out / "report.html").read_text()
    key = TRANSCRIPT_COLUMNS.index("order_key")
    expected = sorted(tuple(None if i == key else v for i, v in enumerate(row))
                      for row in canonical_rows(ref.rows))
    assert readable_transcript(out) == expected
    # Position reports: the tracks the reference makes, byte for byte; every unit the generator made.
    receipts = read_journals(list_journal_files(journals)).positions
    write_tracks_csv(tmp_path / "reference-tracks.csv", track_rows(receipts))
    assert (out / "tracks.csv").read_bytes() == (tmp_path / "reference-tracks.csv").read_bytes()
    assert summary["positions"]["units"] == info["units"] == 4      # one a site (the isolated one's too)
    assert summary["positions"]["reports"] <= info["position_reports"]  # (a torn line may be a report's only one)
    assert len(summary["positions"]["per_site"]) == 4 and 'alt="unit tracks"' in (out / "report.html").read_text()
