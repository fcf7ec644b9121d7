"""The archive reads the journal schema of ``contracts.journal``: the Spark job's schema and the reference's type
checks come from its fields' types, so both plans take and refuse the same lines."""
from __future__ import annotations

import json
from typing import Any

import pytest

from contracts import journal as J
from contracts.journal import FieldType
from spark_archive import schema
from spark_archive.reference import parse_record

# A value of the wrong type for each field type the archive reads (a string field reads any value as its text).
WRONG: dict[FieldType, Any] = {
    FieldType.INT: 1.5, FieldType.FLOAT: "x", FieldType.BOOL: 1, FieldType.ORDER: "x", FieldType.STRS: {"a": 1},
    FieldType.INTS: ["x"], FieldType.RANGES: [[1, "x"]],
}
RECORDS = [
    J.record(J.DELIVER, site="B", n=3, at=105.5, msg_id="A:7", origin="A", seq=7, order=[12, "A"], late=True,
             room="ops", user="alice", text="hello", sent_at=104.0, precedence="flash", via=["C"], repaired=True),
    J.record(J.STATUS, site="B", at=100.0, peer="A", status="suspected"),
    J.record(J.MISSING, site="B", at=110.0, origin="A", **J.missing_fields([[3, 4]])),
    J.record(J.POSITION, site="B", at=101.0, origin="A", unit="a1", lat=51.5, lon=-0.1, alt=120.0, sent_at=100.5),
]


def test_the_spark_schema_is_the_journal_schemas_fields_with_their_types() -> None:
    pytest.importorskip("pyspark")
    from spark_archive import transforms as tf

    assert [f.name for f in tf.JOURNAL_SCHEMA.fields] == [f.name for f in schema.FIELDS]
    for f in tf.JOURNAL_SCHEMA.fields:
        assert f.dataType == tf.SPARK_TYPES[J.FIELDS[f.name].type], f.name
    assert tf.IDENTITY_FIELDS == schema.IDENTITY == tuple(
        f.name for f in tf.JOURNAL_SCHEMA.fields if f.dataType.typeName() != "array")


def test_the_archive_reads_kinds_of_the_schema() -> None:
    assert set(schema.KINDS) <= set(J.KINDS) and not any(J.KINDS[k].tool for k in schema.KINDS)
    assert all(f is J.FIELDS[f.name] for f in schema.FIELDS)


@pytest.mark.parametrize("field", [f.name for f in schema.FIELDS if f.type is not FieldType.STR])
def test_the_reference_refuses_a_field_of_the_wrong_type(field: str) -> None:
    rec = next(r for r in RECORDS if field in r)
    assert parse_record(J.dumps(rec)) is not None
    assert parse_record(json.dumps({**rec, field: WRONG[J.FIELDS[field].type]})) is None
