"""The journal fields the archive reads, typed by the journal schema (``contracts.journal``).

Both plans read the same fields with the same types: the Spark job's
``transforms.JOURNAL_SCHEMA`` maps each field's type to Spark's, and the
reference (``reference.py``) checks a parsed line's values by the same types,
so a line one plan finds unusable the other does too. The order of ``FIELDS``
is the order of the Spark job's columns and of a record's identity (the scalar
fields, hashed to find replayed lines). Pure Python: the reference imports it
without Spark.
"""
from __future__ import annotations

from contracts import journal as J
from contracts.journal import FieldType

KINDS = (J.SEND, J.DELIVER, J.STATUS, J.MISSING, J.CONTROL, J.ACKNOWLEDGE, J.POSITION, J.CLEARANCE)
"""The kinds the archive reads (a ``clearance`` record needs only its site and time here: its labels are read
by the label pass, ``labels.py``)."""

FIELDS: tuple[J.Field, ...] = tuple(J.FIELDS[name] for name in (
    "kind", "site", "at", "n", "msg_id", "origin", "seq", "order", "late", "room", "user", "text", "sent_at",
    "peer", "status", "seqs",
    "ranges",                                   # second round: read before seqs
    "precedence", "via", "repaired",            # Contract 3 extensions
    "unit", "lat", "lon", "alt",                # second round: position reports (their origin and sent_at above)
))
"""The fields the archive reads, in column order."""

LABEL_FIELDS: tuple[J.Field, ...] = tuple(J.FIELDS[name] for name in ("label", "clearance", "levels", "caveats"))
"""Second round: the fields of security labels, read only by the label pass (``labels.py``), each as the JSON
text of its value (so a malformed label is a label the pass cannot read, never a bad line): a message's
``label``, and a ``clearance`` record's ``clearance``, ``levels`` and ``caveats``."""

ARRAYS = (FieldType.ORDER, FieldType.STRS, FieldType.INTS, FieldType.RANGES)


def names_of(*types: FieldType) -> tuple[str, ...]:
    """The names of the fields of ``types``, in column order."""
    return tuple(f.name for f in FIELDS if f.type in types)


IDENTITY: tuple[str, ...] = tuple(f.name for f in FIELDS if f.type not in ARRAYS)
"""The scalar fields: two lines that parse to the same values are one record journaled again."""
