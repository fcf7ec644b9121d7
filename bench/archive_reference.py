"""The pure-Python reference archive on a journals directory, for ``bench/archive.py``.

    .venv/bin/python bench/archive_reference.py JOURNALS RESULT.json

Reads every journal, builds the transcript and every small table in this
process (``spark_archive.reference``, ``spark_archive.local_tables``: what the
Spark job computes, without writing datasets) and writes RESULT.json: the
seconds that took, the summary counters, the small tables and the transcript's
order (``msg_id``, deliveries, late and never-arrived counts per position) and a
digest of the tracks' CSV for the comparison with the Spark job. Run as a child process so that its time,
CPU and peak memory are its own.
"""
from __future__ import annotations

import hashlib
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from spark_archive.journals import list_journal_files  # noqa: E402
from spark_archive.local_tables import all_tables  # noqa: E402
from spark_archive.local_tracks import position_tables  # noqa: E402
from spark_archive.reference import build_transcript, read_journals  # noqa: E402
from spark_archive.tracks import write_tracks_csv  # noqa: E402

COMPARED = ("divergence", "latency_pairs", "latency_precedence", "latency_route", "repairs",
            "availability", "totals", "position_age", "position_totals")


def main() -> int:
    journals, result = sys.argv[1], Path(sys.argv[2])
    t0 = time.perf_counter()
    j = read_journals(list_journal_files(journals))
    t1 = time.perf_counter()
    transcript = build_transcript(j)
    t2 = time.perf_counter()
    tables = all_tables(j, transcript, 200)
    tables.update(position_tables(j.positions, j.sites, {s: c["position_records"] for s, c in j.site_counts.items()}))
    t3 = time.perf_counter()
    # The tracks as the job writes them (tracks.csv), for a byte-for-byte comparison: after the timing.
    csv_path = result.with_suffix(".tracks.csv")
    write_tracks_csv(csv_path, tables["tracks"])
    order = [[r[3], len(r[11]), len(r[12]), len(r[13])] for r in transcript.rows]
    result.write_text(json.dumps({
        "seconds": t3 - t0, "steps": {"read": t1 - t0, "transcript": t2 - t1, "tables": t3 - t2},
        "lines": j.lines, "bad_lines": j.bad_lines, "messages": len(transcript.rows),
        "tables": {name: tables[name] for name in COMPARED}, "order": order,
        "tracks_csv_sha256": hashlib.sha256(csv_path.read_bytes()).hexdigest(),
    }, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
