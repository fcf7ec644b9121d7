"""The journal record's schema and its one writer (``contracts.journal``): every kind is written as Contract 3
says, keys in one order whatever the producer's, floats and integers as ``json`` writes them."""
from __future__ import annotations

import json
from typing import Any

import pytest

from contracts import journal as J

AT, SENT = 1767225715.25, 1767225714.5

# Every kind with every field it may carry, given in no particular order, and its line (DESIGN.md, Contract 3).
TABLE: list[tuple[dict[str, Any], str]] = [
    (dict(kind="send", text="hello", site="A", at=AT, msg_id="A:7", origin="A", seq=7, room="ops", user="alice",
          sent_at=SENT, order=[12, "A"], skipped=["C"], precedence="flash",
          label={"level": "SECRET", "caveats": ["GBR"]}, expires_at=1767229315.0, dests=["B", "C"]),
     '{"kind":"send","site":"A","at":1767225715.25,"msg_id":"A:7","origin":"A","seq":7,"room":"ops","user":"alice",'
     '"text":"hello","sent_at":1767225714.5,"order":[12,"A"],"skipped":["C"],"precedence":"flash",'
     '"label":{"level":"SECRET","caveats":["GBR"]},"expires_at":1767229315.0,"dests":["B","C"]}'),
    (dict(kind="deliver", site="B", n=3, at=AT, msg_id="A:7", origin="A", seq=7, order=[12, "A"], late=True,
          room="ops", user="alice", text="hello", sent_at=SENT, precedence="flash", reply_to="C:2", via=["C"],
          repaired=True, held=True, label={"level": "SECRET", "caveats": []}, expires_at=1767229315.0, inc=2),
     '{"kind":"deliver","site":"B","n":3,"at":1767225715.25,"msg_id":"A:7","origin":"A","seq":7,"order":[12,"A"],'
     '"late":true,"room":"ops","user":"alice","text":"hello","sent_at":1767225714.5,"precedence":"flash",'
     '"reply_to":"C:2","via":["C"],"repaired":true,"held":true,"label":{"level":"SECRET","caveats":[]},'
     '"expires_at":1767229315.0,"inc":2}'),
    (dict(kind="status", status="suspected", peer="A", at=AT, site="B", inc=1),
     '{"kind":"status","site":"B","at":1767225715.25,"peer":"A","status":"suspected","inc":1}'),
    (dict(kind="missing", site="B", at=AT, origin="A", seqs=[41, 42, 50], count=3, ranges=[[41, 42], [50, 50]]),
     '{"kind":"missing","site":"B","at":1767225715.25,"origin":"A","ranges":[[41,42],[50,50]],"count":3,'
     '"seqs":[41,42,50]}'),
    (dict(kind="acknowledge", user="bob", msg_id="A:7", at=AT, site="B"),
     '{"kind":"acknowledge","site":"B","at":1767225715.25,"msg_id":"A:7","user":"bob"}'),
    (dict(kind="control", late=False, order=[13, "A"], seq=8, origin="A", msg_id="A:8", at=AT, site="B"),
     '{"kind":"control","site":"B","at":1767225715.25,"msg_id":"A:8","origin":"A","seq":8,"order":[13,"A"],'
     '"late":false}'),
    (dict(kind="expired", seq=9, origin="A", msg_id="A:9", at=AT, site="B"),
     '{"kind":"expired","site":"B","at":1767225715.25,"msg_id":"A:9","origin":"A","seq":9}'),
    (dict(kind="position", via=[], sent_at=SENT, alt=1200.5, lon=-1.25, lat=51.5, unit="hawk1", origin="A", at=AT,
          site="B"),
     '{"kind":"position","site":"B","at":1767225715.25,"origin":"A","unit":"hawk1","lat":51.5,"lon":-1.25,'
     '"alt":1200.5,"sent_at":1767225714.5,"via":[]}'),
    (dict(kind="clearance", caveats=["GBR", "USA"], levels=["UNCLASSIFIED", "SECRET"], at=AT,
          clearance={"level": "SECRET", "caveats": ["GBR"]}, site="B"),
     '{"kind":"clearance","site":"B","at":1767225715.25,"clearance":{"level":"SECRET","caveats":["GBR"]},'
     '"levels":["UNCLASSIFIED","SECRET"],"caveats":["GBR","USA"]}'),
    (dict(kind="start", inc=2, at=12.5, site="A"), '{"kind":"start","site":"A","at":12.5,"inc":2}'),
    (dict(kind="crash", at=11.0, site="A"), '{"kind":"crash","site":"A","at":11.0}'),
]


def test_the_table_has_every_kind_with_every_field() -> None:
    assert sorted(rec["kind"] for rec, _ in TABLE) == sorted(J.KINDS)
    for rec, _ in TABLE:
        assert set(rec) == set(J.KINDS[rec["kind"]].keys), rec["kind"]


@pytest.mark.parametrize(("rec", "line"), TABLE, ids=[rec["kind"] for rec, _ in TABLE])
def test_every_kind_is_written_as_contract_3_says(rec: dict[str, Any], line: str) -> None:
    assert J.dumps(rec) == line
    assert J.dumps(J.record(**rec)) == line
    assert list(J.record(**rec)) == list(json.loads(line))        # built in the schema's order
    assert json.loads(line) == rec
    assert J.problems(rec, chat=True) == []


def test_the_kinds_of_contract_3_and_their_required_fields() -> None:
    k = J.KINDS
    assert k["send"].keys[:12] == ("kind", "site", "at", "msg_id", "origin", "seq", "room", "user", "text",
                                   "sent_at", "order", "skipped")
    assert k["deliver"].keys[:13] == ("kind", "site", "n", "at", "msg_id", "origin", "seq", "order", "late", "room",
                                      "user", "text", "sent_at")
    assert k["send"].content == k["deliver"].content - {"sent_at"} == {"room", "user", "text"}
    assert k["deliver"].required == {"site", "n", "at", "msg_id", "origin", "seq", "order", "late"}
    assert k["missing"].required == {"site", "at", "origin"}
    assert [name for name, kind in k.items() if kind.tool] == ["start", "crash"]
    for kind in k.values():
        assert {"site", "at"} <= kind.required and kind.keys[:2] == ("kind", "site")


def test_floats_integers_and_text_as_json_writes_them() -> None:
    rec = dict(kind="deliver", site="B", n=2**53 + 1, at=0.1 + 0.2, msg_id="A:1", origin="A", seq=1,
               order=[2**62, "A"], late=False, room="ops", user="élan", text='say "hi"\n\u2028', sent_at=1767225600)
    assert J.dumps(rec) == json.dumps(rec, separators=(",", ":"), ensure_ascii=False)
    assert '"at":0.30000000000000004' in J.dumps(rec) and '"sent_at":1767225600}' in J.dumps(rec)
    assert J.value_text("élan") == '"élan"'


def test_an_optional_field_given_none_is_left_out_a_required_one_is_written() -> None:
    rec = J.record("send", site="A", at=AT, msg_id="A:1", origin="A", seq=1, room="r", user="u", text="t",
                   sent_at=SENT, order=None, precedence=None, skipped=[])
    assert J.dumps(rec) == ('{"kind":"send","site":"A","at":1767225715.25,"msg_id":"A:1","origin":"A","seq":1,'
                            '"room":"r","user":"u","text":"t","sent_at":1767225714.5,"order":null,"skipped":[]}')
    assert J.problems(rec, chat=True) == []       # a send accepted before RCM knew its order


def test_a_record_outside_the_schema_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="unknown journal record kind 'sent'"):
        J.record("sent", site="A", at=AT)
    with pytest.raises(ValueError, match="a status record has no field colour"):
        J.record("status", site="A", at=AT, peer="B", status="connected", colour="red")
    with pytest.raises(ValueError, match="a status record needs peer, status"):
        J.record("status", site="A", at=AT)
    with pytest.raises(ValueError, match="a crash record has no field inc"):
        J.dumps({"kind": "crash", "site": "A", "at": 1.0, "inc": 1})
    with pytest.raises(ValueError, match="unknown journal record kind None"):
        J.dumps({"site": "A"})


def test_problems_names_what_is_wrong() -> None:
    assert J.problems({"kind": "deliver", "site": "B", "n": 1.5, "at": "x", "msg_id": "A:1", "origin": "A",
                       "seq": True, "order": [1, "A"], "late": 0, "via": "C"}) == [
        "n is 1.5, not integer", "at is 'x', not number", "seq is True, not integer", "late is 0, not boolean",
        "via is 'C', not array of strings"]
    assert J.problems({"kind": "deliver", "site": "B", "n": 1, "at": 1.0, "msg_id": "A:1", "origin": "A", "seq": 1,
                       "order": [1, "A"], "late": False}, chat=True) == [
        "room absent", "user absent", "text absent", "sent_at absent"]
    assert J.problems({"kind": "missing", "site": "B", "at": 1.0, "origin": "A", "ranges": [[5, 3]], "x": 1}) == [
        "no field x in a missing record", "ranges is [[5, 3]], not array of [first, last] integer pairs"]
    assert J.problems({"kind": 3}) == ["unknown journal record kind 3"]


def test_missing_fields_list_seqs_only_when_few() -> None:
    assert J.missing_fields([[41, 42], [50, 52]]) == {"ranges": [[41, 42], [50, 52]], "count": 5,
                                                      "seqs": [41, 42, 50, 51, 52]}
    assert J.missing_fields([[41, 42]], listed=False) == {"ranges": [[41, 42]], "count": 2}
    assert J.missing_fields([[1, J.MISSING_SEQS_MAX]])["count"] == len(J.missing_fields([[1, 10_000]])["seqs"])
    huge = J.missing_fields([[1, 2**53]])          # counted, never listed
    assert huge == {"ranges": [[1, 2**53]], "count": 2**53}


def test_the_fast_path_formats_write_what_dumps_writes() -> None:
    line = J.line_format("deliver", "site", "n", "at", ("msg_id", "origin", "seq", "order"), "late",
                         ("room", "user", "text", "sent_at", "precedence"), ("via", "repaired"))
    ident = J.fragment_format("deliver", "msg_id", "origin", "seq", "order") % ('"A:7"', '"A"', 7, '[12,"A"]')
    body = J.fragment_format("deliver", "room", "user", "text", "sent_at") % ('"ops"', '"alice"', '"hello"', SENT)
    rec = dict(kind="deliver", site="B", n=3, at=AT, msg_id="A:7", origin="A", seq=7, order=[12, "A"], late=True,
               room="ops", user="alice", text="hello", sent_at=SENT)
    assert line % ('"B"', 3, AT, ident, "true", body, "") == J.dumps(rec)
    via = J.fragment_format("deliver", "via", "repaired") % ('["C"]', "true")
    assert line % ('"B"', 3, AT, ident, "true", body, via) == J.dumps({**rec, "via": ["C"], "repaired": True})


def test_the_fast_path_formats_refuse_fields_out_of_order() -> None:
    with pytest.raises(ValueError, match="out of the schema's order: order, room"):
        J.fragment_format("send", "order", "room")      # a send's order follows its content
    J.fragment_format("deliver", "order", "late", "room")     # a delivery's comes first
    with pytest.raises(ValueError, match="out of the schema's order: site, at, n"):
        J.line_format("deliver", "site", "at", "n")
    with pytest.raises(ValueError, match="a control record has no field n"):
        J.line_format("control", "site", ("n", "at"))


def test_a_missing_record_is_read_as_ranges_whichever_shape_it_has() -> None:
    assert J.missing_of({"ranges": [[1, 2**53]], "count": 2**53}) == [(1, 2**53)]
    assert J.missing_of({"ranges": [[5, 6]], "count": 2, "seqs": [5, 6]}) == [(5, 6)]
    assert J.missing_of({"seqs": [9, 3, 4, 5]}) == [(3, 5), (9, 9)]              # the first round's records
    assert J.missing_of({"ranges": [[7, 3], [1, "x"], [2], "y", [8, 9]]}) == [(8, 9)]   # malformed pairs: ignored
    assert J.missing_of({"ranges": "1-9", "seqs": [4]}) == [(4, 4)]               # ranges not a list: seqs
    assert J.missing_of({"origin": "B"}) == []


def test_earliest_keeps_the_first_report_of_each_seq_without_walking_the_numbers() -> None:
    spans = [(1, 2**53, 5.0), (10, 20, 3.0), (15, 30, 4.0), (2**53 + 1, 2**53 + 1, 5.0)]
    assert J.earliest(spans) == [(1, 9, 5.0), (10, 20, 3.0), (21, 30, 4.0), (31, 2**53 + 1, 5.0)]
    assert J.earliest([]) == []
