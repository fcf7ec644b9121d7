"""Loading real journals (Contract 3) into checker records."""
from __future__ import annotations

import json

from faultinject.checkers import History, check_all, load_journals, read_jsonl


def write(path, records, torn=None):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
        if torn:
            f.write(torn)


def test_journals_load_with_a_torn_last_line_and_check(tmp_path):
    common = {"room": "ops", "user": "u", "text": "hi", "sent_at": 100.0}
    sites = ["A", "B"]
    for s in sites:
        other = "B" if s == "A" else "A"
        recs = [{"kind": "status", "site": s, "at": 99.0, "peer": other, "status": "connected"}]
        if s == "A":
            recs.append({"kind": "send", "site": "A", "at": 100.0, "msg_id": "A:1", "origin": "A",
                         "seq": 1, "order": None, **common})
        recs.append({"kind": "deliver", "site": s, "n": 1, "at": 100.2, "msg_id": "A:1",
                     "origin": "A", "seq": 1, "order": [1, "A"], "late": False, **common})
        write(tmp_path / s / "journal" / "0001.jsonl", recs,
              torn='{"kind":"deliver","site":"' + s + '","n":2,"at":1' if s == "B" else None)
    (tmp_path / "B" / "journal" / "notes.txt").write_text("ignored")
    records, found, bad = load_journals(tmp_path)
    assert found == sites and bad == 1 and len(records) == 5
    h = History(records, found)
    assert check_all(h, margin=1.0, settle=5.0) == []
    # Remove B's delivery: reliability must notice it in the real-run format too.
    records = [r for r in records if not (r["site"] == "B" and r["kind"] == "deliver")]
    v = check_all(History(records, found), margin=1.0, settle=5.0)
    assert [(x.kind, x.site) for x in v] == [("reliability", "B")]


def test_read_jsonl_skips_foreign_and_blank_lines(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_bytes(b'{"kind":"status","site":"A","at":1,"peer":"B","status":"connected"}\n\n'
                  b'[1,2]\n{"kind":"other"}\n\xff\xfe\n{"kind":"send"')
    records, bad = read_jsonl(p)
    # A kind the checkers do not know is ignored, not unreadable (Contract 3); a torn last line is.
    assert len(records) == 1 and bad == 3


def test_check_command_reads_a_data_dir(tmp_path, capsys):
    from faultinject.__main__ import main

    recs = {"A": [{"kind": "status", "site": "A", "at": 0.5, "peer": "B", "status": "connected"},
                  {"kind": "send", "site": "A", "at": 1.0, "msg_id": "A:1", "origin": "A", "seq": 1},
                  {"kind": "deliver", "site": "A", "n": 1, "at": 1.1, "msg_id": "A:1",
                   "origin": "A", "seq": 1, "order": [1, "A"], "late": False}],
            "B": [{"kind": "status", "site": "B", "at": 0.5, "peer": "A", "status": "connected"}]}
    for site, rs in recs.items():
        write(tmp_path / site / "journal" / "0001.jsonl", rs)
    assert main(["check", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "[reliability] at B (A:1)" in out
    recs["B"].append({"kind": "deliver", "site": "B", "n": 1, "at": 1.2, "msg_id": "A:1",
                      "origin": "A", "seq": 1, "order": [1, "A"], "late": False})
    write(tmp_path / "B" / "journal" / "0001.jsonl", recs["B"])
    assert main(["check", str(tmp_path)]) == 0
    assert "no violations" in capsys.readouterr().out
    assert main(["check", str(tmp_path / "nope")]) == 2
