"""How each journal line names its file, cheaply, through the one pass's shuffle.

Spark names every line's file (``file_name``: ``input_file_name()``), a URI string of
about 80 bytes: too wide to shuffle with ten million lines, and too slow to look
up among every spelling of every path on each line (``file_index``: 4
CPU-seconds per 10M lines, a tenth of the parse). ``FileKeys.hashed`` instead hashes
the string on each line (Spark's ``xxhash64``) and gives the driver, once, the
hash of every spelling of every path, to turn the hashes the side rows carry
back into paths (``FileKeys.decode``).
"""
from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F


def lookup(index: dict[str, int], column: Column) -> Column:
    """``index[column]`` (null when absent)."""
    if not index:
        return F.lit(None).cast("int")
    return F.try_element_at(F.create_map(*[x for name, i in index.items()
                                           for x in (F.lit(name), F.lit(i))]), column)


def file_name() -> Column:
    """Spark's name for the file of each line (a URI), read where the line is read.

    ``input_file_name()``, not the ``_metadata.file_path`` column: asking for a metadata
    column makes the file scan build and join a metadata row for every line (3 CPU-s
    per 10M lines of the 26 a bare parse takes, measured at local[2]); this one reads
    the name the scan task already holds.
    """
    return F.input_file_name()


# What ``java.net.URI`` leaves unquoted in a path, besides letters and digits (its
# "unreserved", "punct", "/" and "@"); it also leaves every non-ASCII character
# that is neither a control nor a space character.
_JAVA_URI_SAFE = frozenset("_-!.~'()*,;:$&+=/@")


def _java_quoted(path: str) -> str:
    """``path`` percent-encoded as Java's multi-argument ``URI`` constructors do (Spark
    and Hadoop name files by them): ``/x/é ü+x`` -> ``/x/é%20ü+x``, where Python's
    ``as_uri`` gives ``/x/%C3%A9%20%C3%BC%2Bx``."""
    out = []
    for c in path:
        if c.isascii():
            keep = c.isalnum() or c in _JAVA_URI_SAFE
        else:
            keep = unicodedata.category(c) not in ("Cc", "Zs", "Zl", "Zp")
        out.append(c if keep else "".join(f"%{b:02X}" for b in c.encode()))
    return "".join(out)


def _spellings(path: str) -> tuple[str, ...]:
    """Every way Spark's ``file_name`` may name the local file ``path``.

    Spark writes a local file as ``file:/x`` there (``file:///x`` elsewhere) and
    percent-encodes what a URI must, as Java does (``_java_quoted``).
    """
    uri = Path(path).as_uri()                    # file:///x%20y
    java = _java_quoted(str(Path(path).absolute()))
    names = (uri, "file:" + uri[len("file://"):], "file://" + java, "file:" + java,
             "file://" + path, "file:" + path)
    return tuple(dict.fromkeys(names))


def file_index(paths: Sequence[str]) -> Column:
    """Index in ``paths`` of each line's file, from Spark's ``file_name``
    (a lookup in a map of every spelling: linear in them, on every line)."""
    return lookup({name: i for i, path in enumerate(paths) for name in _spellings(path)}, file_name())


@dataclass(frozen=True)
class FileKeys:
    """How each line names its file in the shuffle (``column``), and how the driver reads
    the names back (``decode``): ``hashed()`` first, ``indexed(paths)`` should that fail."""

    column: Column
    hashed_names: bool

    @staticmethod
    def hashed() -> FileKeys:
        """Spark's ``xxhash64`` of ``file_name`` (see the module doc)."""
        return FileKeys(F.xxhash64(file_name()), True)

    @staticmethod
    def indexed(paths: Sequence[str]) -> FileKeys:
        """The path's index (``file_index``)."""
        return FileKeys(file_index(paths), False)

    def decode(self, spark: SparkSession, paths: Sequence[str]) -> dict[int, int] | None:
        """Each value of ``column`` -> the index of its path; None when two paths'
        spellings share a hash (the pass is then run again with ``indexed``).

        The spellings are hashed by Spark itself, after the pass, on a warm JVM.
        """
        if not self.hashed_names:
            return {i: i for i in range(len(paths))}
        names = [(name, i) for i, path in enumerate(paths) for name in _spellings(path)]
        if not names:
            return {}
        decode: dict[int, int] = {}
        for h, i in spark.createDataFrame(names, "name string, i int") \
                .select(F.xxhash64("name").alias("h"), "i").collect():
            if decode.setdefault(h, i) != i:
                return None
        return decode
