"""The label pass's leak check on the cases dominance cannot be shown for (labels.py): no clearance journaled, an
unreadable label, a level the mission does not have; an unlabeled record is no leak, a replayed line one leak; a
message with no delivery at a site not cleared for it was withheld there."""
from __future__ import annotations

import json
from pathlib import Path

from spark_archive import labels

LEVELS = ["UNCLASSIFIED", "SECRET"]


def rec(kind: str, site: str, msg_id: str, at: float, label: object = None) -> str:
    fields: dict = {"kind": kind, "site": site}
    if kind == "deliver":
        fields["n"] = int(at)
    fields.update(at=at, msg_id=msg_id, order=[int(at), msg_id[0]], room="ops", user="u", text="t", sent_at=at)
    if label is not None:
        fields["label"] = label
    return json.dumps(fields, separators=(",", ":"))


def test_dominance_that_cannot_be_shown_is_a_leak(spark, tmp_path: Path) -> None:
    secret = {"level": "SECRET", "caveats": []}
    journals = {
        "A": [json.dumps({"kind": "clearance", "site": "A", "at": 1.0, "clearance": secret, "levels": LEVELS,
                          "caveats": []}),
              rec("send", "A", "A:1", 2.0, secret), rec("deliver", "A", "A:1", 2.1, secret),
              rec("deliver", "A", "A:2", 3.0, "SECRET"),                          # unreadable
              rec("deliver", "A", "A:3", 4.0, {"level": "TOP SECRET", "caveats": []}),   # unknown level
              rec("deliver", "A", "A:4", 5.0),                                    # unlabeled: no leak
              rec("deliver", "A", "A:5", 6.0, {"level": "SECRET", "caveats": "GBR"})],   # caveats unread
        "D": [rec("deliver", "D", "A:1", 2.5, secret), rec("deliver", "D", "A:1", 2.5, secret)],  # no clearance
        # Cleared for nothing above UNCLASSIFIED, delivered nothing: A:1 and A:3 were withheld from it.
        "E": [json.dumps({"kind": "clearance", "site": "E", "at": 1.0, "clearance": {"level": "UNCLASSIFIED"},
                          "levels": LEVELS, "caveats": []})],
    }
    for site, lines in journals.items():
        path = tmp_path / site / "journal" / "0001.jsonl"
        path.parent.mkdir(parents=True)
        path.write_text("\n".join(lines) + "\n")
    tables = labels.label_tables(spark, [str(p) for p in sorted(tmp_path.rglob("*.jsonl"))])
    assert [(r["site"], r["msg_id"], r["kinds"], r["reason"], r["label"]) for r in tables["leaks"]] == [
        ("A", "A:2", ["deliver"], "unreadable label", "SECRET"),       # a string: Spark's text of it
        ("A", "A:3", ["deliver"], "unknown level", "TOP SECRET"),
        ("A", "A:5", ["deliver"], "unreadable label", '{"level":"SECRET","caveats":"GBR"}'),
        ("D", "A:1", ["deliver"], "no clearance", "SECRET")]
    assert tables["leak_total"] == [{"count": 4}] and tables["withheld"] == [{"count": 2}]
    assert [(r["label"], r["rank"], r["messages"], r["deliveries"]) for r in tables["labels"]] == [
        ("SECRET", 1, 1, 2), ("(unreadable label)", None, 2, 2), ("TOP SECRET", None, 1, 1), ("unlabeled", None, 1, 1)]
