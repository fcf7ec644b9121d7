"""The journal files of a synthetic mission (used by ``spark_archive.generate``).

What is written, as opposed to what happens: one site's records, in time order,
become ``<site>/journal/NNNN.jsonl`` files (Contract 3). A site may restart once
(the old file ends with a torn line; the new one replays the last records as
exact duplicates and re-delivers a few messages with new delivery counts ``n``)
and a file's final line may be torn. What was injected is counted in the
caller's ``injected`` dict. Every draw comes from the ``numpy`` generator the
caller passes, in site order, after the mission's other draws.
"""
from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from contracts import journal as J

_N_FIELD = re.compile(r'"n":(\d+)')

# Times are journaled to the microsecond. The journal's writer writes a float as ``repr`` does, and
# for 0.001 <= t < 2**32 s the repr of t rounded to 6 decimals is '%.6f' % t without its trailing
# zeros (a decimal of 6 places is then the shortest text of its float): a third of the cost.
SECONDS_RANGE = (1e-3, float(2**32))


def seconds_texts(times: Iterable[float] | np.ndarray) -> list[str]:
    """The journal's text of each time rounded to the microsecond (``repr(round(t, 6))``), fast;
    a ValueError for a time outside ``SECONDS_RANGE``."""
    values = np.asarray(times, dtype=np.float64)
    lo, hi = SECONDS_RANGE
    if values.size and not (lo <= values.min() and values.max() < hi):
        raise ValueError(f"times must lie in {list(SECONDS_RANGE)} to be written fast, not "
                         f"{values.min()}..{values.max()}")
    texts = [("%.6f" % t).rstrip("0") for t in values.tolist()]
    return [text + "0" if text[-1] == "." else text for text in texts]


def seconds_text(t: float) -> str:
    """``seconds_texts`` of one time."""
    if not SECONDS_RANGE[0] <= t < SECONDS_RANGE[1]:
        raise ValueError(f"times must lie in {list(SECONDS_RANGE)} to be written fast, not {t}")
    text = ("%.6f" % t).rstrip("0")
    return text + "0" if text[-1] == "." else text


def write_journals(out: Path, rng: np.random.Generator, names: list[str],
                   records: list[list[tuple[float, str]]], empty: set[int], restart_prob: float,
                   torn_prob: float, injected: dict[str, Any]) -> None:
    """Write every site's records (``(at, line)`` per site) under ``out``; a site in ``empty``
    gets one empty journal file."""
    for d in range(len(names)):
        journal = out / names[d] / "journal"
        journal.mkdir(parents=True, exist_ok=True)
        recs = sorted(records[d], key=lambda r: r[0])
        if d in empty:
            (journal / "0001.jsonl").write_text("")
            continue
        files = split_at_restart(rng, recs, restart_prob, injected)
        for k, lines in enumerate(files):
            torn_last = k < len(files) - 1 or rng.random() < torn_prob
            with open(journal / f"{k + 1:04d}.jsonl", "w") as fh:
                if lines:
                    fh.write("\n".join(lines[:-1]))
                    if len(lines) > 1:
                        fh.write("\n")
                    if torn_last:
                        last = lines[-1]
                        fh.write(last[: int(rng.integers(1, len(last) - 1))])
                        injected["torn_lines"] += 1
                    else:
                        fh.write(lines[-1] + "\n")


def split_at_restart(rng: np.random.Generator, recs: list[tuple[float, str]], restart_prob: float,
                     injected: dict[str, Any]) -> list[list[str]]:
    """Split one site's records into journal files, simulating at most one restart."""
    lines = [line for _, line in recs]
    if len(lines) < 20 or rng.random() >= restart_prob:
        return [lines]
    injected["restarts"] += 1
    cut = int(rng.integers(len(lines) // 4, 3 * len(lines) // 4))
    before, after = lines[:cut], lines[cut:]
    # The record being written at the crash is torn in the old file and written
    # again in the new one; the new file also replays the last few records.
    replay = before[-int(rng.integers(2, 10)):]
    injected["duplicate_lines"] += len(replay) - 1
    crash_at = recs[cut - 1][0]
    redeliver = [line for line in before[-60:] if '"kind":"deliver"' in line][-int(rng.integers(1, 5)):]
    shifted = []
    extra = len(redeliver)
    # Re-deliveries consume delivery counts: every later delivery's n moves up.
    last_n = 0
    for line in reversed(before):
        if '"kind":"deliver"' in line:
            last_n = int(_N_FIELD.search(line).group(1))  # type: ignore[union-attr]
            break
    new_lines = []
    for k, line in enumerate(redeliver):
        rec = json.loads(line)
        rec["n"] = last_n + 1 + k
        rec["at"] = round(crash_at + 1.0 + 0.01 * k, 6)
        new_lines.append(J.dumps(rec))
    injected["redeliveries"] += len(new_lines)

    def shift(match: re.Match[str]) -> str:
        return '"n":%d' % (int(match.group(1)) + extra)

    for line in after:
        if '"kind":"deliver"' in line:
            line = _N_FIELD.sub(shift, line, count=1)
        shifted.append(line)
    return [before, replay + new_lines + shifted]

