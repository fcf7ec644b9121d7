"""The synthetic generator writes its journals through the journal's one writer: its fast path (formats made
from ``contracts.journal``'s schema) writes every line byte for byte as ``contracts.journal.dumps`` does."""
from __future__ import annotations

import dataclasses
import json
import random
from collections import Counter
from pathlib import Path

import pytest

from contracts import journal as J
from spark_archive.generate import EXTENDED, Extensions, generate
from spark_archive.generate_files import SECONDS_RANGE, seconds_text, seconds_texts
from spark_archive.generate_labels import SCHEME


def lines_of(root: Path) -> tuple[list[str], int]:
    """Every complete line of the journals under ``root``, and how many were torn."""
    lines, torn = [], 0
    for path in sorted(root.rglob("*.jsonl")):
        text = path.read_text()
        complete = text.split("\n")
        torn += complete.pop() != ""          # a file's last line without its end: torn
        lines += [line for line in complete if line]
    return lines, torn


@pytest.mark.parametrize("extensions", [Extensions(), EXTENDED, dataclasses.replace(EXTENDED, labels=True)],
                         ids=["plain", "extended", "labeled"])
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
                                                         else set()) | ({"clearance"} if extensions.labels else set())
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


def test_a_labeled_mission_delivers_each_message_only_where_it_is_cleared(tmp_path: Path) -> None:
    """Every site journals its clearance; every chat record carries a label its site's clearance dominates, the
    origin's included (need-to-know routing); withheld messages are no loss; the generator's account of labels
    is what the journals hold."""
    info = generate(tmp_path, sites=5, messages=300, seed=4, duration=1800.0, outages_per_hour=6.0, restart_prob=0.0,
                    torn_prob=0.0, extensions=dataclasses.replace(EXTENDED, labels=True))
    records = [json.loads(line) for line in lines_of(tmp_path)[0]]
    clearances = {r["site"]: SCHEME.from_json(r["clearance"]) for r in records if r["kind"] == "clearance"}
    assert sorted(clearances) == info["sites"] and [str(clearances[s]) for s in info["sites"]] == info["clearances"]
    chat = [r for r in records if r["kind"] in ("send", "deliver")]
    assert all(clearances[r["site"]].dominates(SCHEME.from_json(r["label"])) for r in chat)
    delivered = Counter(str(SCHEME.from_json(r["label"])) for r in chat if r["kind"] == "deliver")
    sent = Counter(str(SCHEME.from_json(r["label"])) for r in chat if r["kind"] == "send")
    assert info["labels"] == {name: {"messages": sent[name], "deliveries": delivered[name]} for name in sent}
    assert len(sent) >= 3 and info["withheld"] > 0 and sum(delivered.values()) == info["deliveries"]
    assert info["deliveries"] + info["lost"] + info["withheld"] == info["messages"] * (len(info["sites"]))
