"""The synthetic generator writes its journals through the journal's one writer: its fast path (formats made
from ``contracts.journal``'s schema) writes every line byte for byte as ``contracts.journal.dumps`` does."""
from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import pytest

from contracts import journal as J
from spark_archive.generate import EXTENDED, Extensions, generate
from spark_archive.generate_files import SECONDS_RANGE, seconds_text, seconds_texts


def lines_of(root: Path) -> tuple[list[str], int]:
    """Every complete line of the journals under ``root``, and how many were torn."""
    lines, torn = [], 0
    for path in sorted(root.rglob("*.jsonl")):
        text = path.read_text()
        complete = text.split("\n")
        torn += complete.pop() != ""          # a file's last line without its end: torn
        lines += [line for line in complete if line]
    return lines, torn


@pytest.mark.parametrize("extensions", [Extensions(), EXTENDED], ids=["plain", "extended"])
def test_every_generated_line_is_what_the_journal_writer_writes(tmp_path: Path, extensions: Extensions) -> None:
    generate(tmp_path, sites=5, messages=300, seed=4, duration=1800.0, outages_per_hour=6.0, restart_prob=1.0,
             extensions=extensions)
    lines, torn = lines_of(tmp_path)
    kinds: Counter[str] = Counter()
    for line in lines:
        rec = json.loads(line)
        kinds[rec["kind"]] += 1
        assert J.dumps(rec) == line
        assert J.problems(rec, chat=True) == [], line
    written = {"send", "deliver", "status", "missing"} | ({"control", "acknowledge"} if extensions != Extensions()
                                                         else set())
    assert set(kinds) == written and torn > 0
    if extensions != Extensions():
        assert any('"repaired":true' in line for line in lines) and any('"via":["' in line for line in lines)


def test_times_are_written_as_the_writer_writes_them_to_the_microsecond() -> None:
    rng = random.Random(5)
    times = [rng.uniform(1.7e9, 1.8e9) for _ in range(20_000)] + [rng.uniform(0.001, 2**32) for _ in range(20_000)]
    times += [1767225600.0, 1767225600.5, 1767225600.0000004, 1767225600.9999996, 0.001, 2**32 - 1e-6, 12.25]
    assert seconds_texts(times) == [repr(round(t, 6)) for t in times] == [seconds_text(t) for t in times]
    for t in (SECONDS_RANGE[0] / 2, SECONDS_RANGE[1]):
        with pytest.raises(ValueError, match="to be written fast"):
            seconds_texts([1.0, t])
        with pytest.raises(ValueError, match="to be written fast"):
            seconds_text(t)
